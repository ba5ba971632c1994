// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/prefill_kernels.hpp"

#include "graphattn/error.hpp"

namespace graphattn::detail {

PrefillKernel select_prefill_kernel(const AttentionSpec& spec) {
  if (spec.kind != KernelKind::kPrefill) return PrefillKernel::kNone;
  try {
    spec.validate();
  } catch (const Error&) {
    return PrefillKernel::kNone;
  }
  // wgmma exists on sm_90a only (a cubin for it runs on compute capability 9.0 alone). Its
  // shared-memory tiles use the 128-byte swizzle, whose rows are 64 16-bit columns; fp8 caches
  // would need a conversion pass and stay on mma.sync. vLLM's legacy PagedAttention caches
  // (layout legacy: a [dim][key] value cache) are read by prefill.cu only, which transposes its
  // V tile for them; the wgmma kernel's producer copies and 128-byte swizzled
  // tiles assume the flash layout's [key][dim] rows.
  // Block-sparse prefill (_bsp) masks and skips tiles in the mma.sync kernel only.
  if (spec.arch == 90 && spec.kv_dtype == KvDType::kAuto && spec.head_size % 64 == 0 &&
      spec.layout != KvLayout::kLegacy && !spec.block_sparse)
    return PrefillKernel::kWgmma;
  // An e4m3 query over an fp8 cache (q_fp8 needs one, validate()): wgmma on fp8 operands, both
  // K-major, so the kernel transposes V in shared memory. Its fp8 rows are 128-byte swizzled
  // rows of 128 elements, and at head size 256 the 128-key tiles' scores and the output
  // accumulators spill (560 bytes of stack): head size 128 only; others stay on mma.sync.
  if (spec.arch == 90 && spec.q_fp8 && spec.head_size == 128 && spec.layout != KvLayout::kLegacy &&
      !spec.block_sparse && !spec.dense_kv)
    return PrefillKernel::kWgmma;
  return PrefillKernel::kMmaSync;
}

}  // namespace graphattn::detail
