// SPDX-License-Identifier: Apache-2.0
// Renders a spec into NVRTC input: a header comment (spec, options), the spec's constexprs, then
// the embedded template texts. The renderer adds no kernel logic.
#include <sstream>

#include "core/nvrtc_options.hpp"
#include "core/spec_axes.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
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

// Options one kind of kernel gets beyond the common ones, measured on an H100 against the
// defaults (docs/jit-options-h100-2026-11-27-s7.txt). ptxas -O1 (instead of its default -O3)
// for the sm_90 wgmma prefill over vLLM's legacy caches at head size 128 with one softmax body
// (16-bit, no soft cap, ALiBi or block sparsity: templates/params.h's ga_prefill_sm90_one_body,
// which jit_cache cannot include; tests/test_legacy_prefill.cpp checks the two agree): that kernel
// ran 6-10% faster, compiled in about the same time; its variants 3-10% faster (sliding window,
// sinks, fp16, GQA 1 and 8, non-causal, chunked), block size 32 the same (+0.2%;
// docs/legacy-prefill-o1-h100-2026-11-27-s8.txt). -O1 measured slower for the flash-layout wgmma
// prefill (head 64 2%, 128 4%, 256 14%) and two-body kernels, and for decode no faster to compile.
bool legacy_one_body_wgmma(const AttentionSpec& spec) {
  return spec.kind == KernelKind::kPrefill &&
         detail::select_prefill_kernel(spec) == detail::PrefillKernel::kWgmma &&
         spec.layout == KvLayout::kLegacy && spec.head_size == 128 &&
         spec.kv_dtype == KvDType::kAuto && !spec.q_fp8 && !spec.soft_cap && !spec.alibi &&
         !spec.block_sparse;
}

}  // namespace

namespace detail {

KernelSource render_kernel(const AttentionSpec& spec, const std::vector<std::string>& extra) {
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
  if (legacy_one_body_wgmma(spec)) out.options.push_back("--ptxas-options=-O1");
  // GRAPHATTN_NVRTC_EXTRA_OPTIONS (core/nvrtc_options.hpp): other machine code, so they go into
  // the options, which the header comment below and the cache key both carry.
  out.options.insert(out.options.end(), extra.begin(), extra.end());
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

}  // namespace detail

KernelSource render_kernel(const AttentionSpec& spec) {
  return detail::render_kernel(spec, detail::nvrtc_extra_options());
}

}  // namespace graphattn
