// SPDX-License-Identifier: Apache-2.0
// Renders a spec into NVRTC input: a header comment (spec, options), the spec's constexprs, then
// the embedded template texts. The renderer adds no kernel logic.
#include <sstream>

#include "core/spec_axes.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/prefill_kernels.hpp"

namespace graphattn {
namespace detail {
const char* find_embedded_template(std::string_view name);
}

namespace {

const char* template_text(const char* name) {
  const char* t = detail::find_embedded_template(name);
  if (!t) throw Error(std::string("kernel template '") + name + "' is not embedded in this build");
  return t;
}

struct Family {
  const char* file;
  const char* entry;
  const char* arch_suffix = "";  // "a": arch-specific features (sm_90a's wgmma, setmaxnreg)
};

Family family_of(const AttentionSpec& spec) {
  switch (spec.kind) {
    case KernelKind::kCacheWrite:
      return {"cache_write.cu", "graphattn_cache_write"};
    case KernelKind::kDecode:
      // float32 (the legacy layout only, validate()): CUDA-core fp32 math, same launch.
      if (spec.dtype == DType::kFloat32) return {"decode_f32.cu", "graphattn_decode"};
      return {"decode.cu", "graphattn_decode"};
    case KernelKind::kPrefill:
      if (detail::select_prefill_kernel(spec) == detail::PrefillKernel::kWgmma)
        return {"prefill_sm90.cu", "graphattn_prefill", "a"};
      return {"prefill.cu", "graphattn_prefill"};
    case KernelKind::kKvScale:
      return {"kv_scale.cu", "graphattn_kv_scale"};
    case KernelKind::kMergeStates:
      return {"merge_states.cu", "graphattn_merge_states"};
    case KernelKind::kBlockCopy:
      return {"block_copy.cu", "graphattn_block_copy"};
  }
  throw Error("unknown kernel kind");
}

}  // namespace

KernelSource render_kernel(const AttentionSpec& spec) {
  spec.validate();
  const Family fam = family_of(spec);
  KernelSource out;
  out.spec = spec.to_string();
  out.entry = fam.entry;
  // -minimal: NVRTC leaves out of its built-in header what the templates never use (texture
  // and surface functions, the device runtime's cuda* calls, device-side launches, the runtime
  // API's types), about 5 ms of every kernel's front end; the machine code is the same
  // (scripts/sass_diff.sh --base-drop=-minimal) and the options are part of the cache key.
  out.options = {"--gpu-architecture=sm_" + std::to_string(spec.arch) + fam.arch_suffix,
                 "-std=c++17", "--fmad=true", "-default-device", "-minimal"};
  std::ostringstream os;
  os << "// graphattn kernel " << out.spec << " (cache format " << kCacheFormatVersion << ")\n";
  os << "// nvrtc options:";
  for (const auto& o : out.options) os << " " << o;
  os << "\n";
  os << detail::spec_constants(spec);
  os << template_text("params.h") << "\n"
     << template_text("common.cuh") << "\n"
     << template_text(fam.file);
  out.source = os.str();
  return out;
}

}  // namespace graphattn
