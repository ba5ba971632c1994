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
  // (layout legacy, forward_prefix) take it too: their [dim][key] value tile is the K-major B
  // operand of P V. Block-sparse prefill (_bsp) too: every warpgroup votes on which key tiles
  // the block needs.
  if (spec.arch == 90 && spec.kv_dtype == KvDType::kAuto && spec.head_size % 64 == 0)
    return PrefillKernel::kWgmma;
  return PrefillKernel::kMmaSync;
}

}  // namespace graphattn::detail
