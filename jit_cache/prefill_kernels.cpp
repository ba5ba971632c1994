// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/prefill_kernels.hpp"

#include "core/env_flag.hpp"
#include "graphattn/error.hpp"

namespace graphattn::detail {

bool prefill_mma_sync_forced() {
  static const bool on = env_flag("GRAPHATTN_PREFILL_MMA_SYNC");
  return on;
}

PrefillKernel select_prefill_kernel(const AttentionSpec& spec) {
  if (spec.kind != KernelKind::kPrefill) return PrefillKernel::kNone;
  try {
    spec.validate();
  } catch (const Error&) {
    return PrefillKernel::kNone;
  }
  if (prefill_mma_sync_forced()) return PrefillKernel::kMmaSync;
  // wgmma exists on sm_90a only (a cubin for it runs on compute capability 9.0 alone). Its
  // shared-memory tiles use the 128-byte swizzle, whose rows are 64 16-bit columns; fp8 caches
  // would need a conversion pass and stay on mma.sync. vLLM's legacy PagedAttention caches
  // (layout legacy, forward_prefix) take it too: their [dim][key] value tile is the K-major B
  // operand of P V. Block-sparse prefill (_bsp) too: every warpgroup votes on which key tiles
  // the block needs. A legacy key cache whose x is not 16 bytes (key_x) stays on mma.sync: the
  // wgmma producer reads a key's 16-byte chunks BLOCK_SIZE chunks apart.
  if (spec.arch == 90 && spec.kv_dtype == KvDType::kAuto && spec.head_size % 64 == 0 &&
      spec.key_x == 0)
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
