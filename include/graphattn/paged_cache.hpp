// vLLM's legacy PagedAttention KV cache (its PagedAttention ops: get_kv_cache_shape,
// split_kv_cache, write_to_paged_cache): one tensor [2, num_blocks, block_size * num_kv_heads *
// head_size] split into a key cache [num_blocks, num_kv_heads, head_size / x, block_size, x]
// (x = 16 bytes of elements: 8 for fp16/bf16, 16 for fp8) and a value cache [num_blocks,
// num_kv_heads, head_size, block_size]. graphattn writes it (spec layout "legacy" of the cache
// write kernel); its decode and prefill kernels read the flash layout only, so far.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>

#include "graphattn/backend.hpp"
#include "graphattn/export.h"
#include "graphattn/jit.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn {

// The legacy key and value caches of one layer.
struct PagedKvCache {
  TensorView key_cache;    // [num_blocks, num_kv_heads, head_size / x, block_size, x]
  TensorView value_cache;  // [num_blocks, num_kv_heads, head_size, block_size]
};

// x of the legacy key cache: 16 bytes of `kv_cache_type` elements (8 for 16-bit, 16 for fp8).
GRAPHATTN_API int paged_cache_x(ScalarType kv_cache_type);

// vLLM's PagedAttention.get_kv_cache_shape: {2, num_blocks, block_size * num_kv_heads *
// head_size}. Every count >= 1 (graphattn::Error naming the one that is not).
GRAPHATTN_API std::array<int64_t, 3> paged_kv_cache_shape(int64_t num_blocks, int block_size,
                                                          int num_kv_heads, int head_size);

// vLLM's PagedAttention.split_kv_cache: views of a contiguous [2, num_blocks, block_size *
// num_kv_heads * head_size] tensor as its key and value caches. head_size must be a multiple of
// x; throws graphattn::Error naming what does not fit.
GRAPHATTN_API PagedKvCache split_paged_kv_cache(const TensorView& kv_cache, int num_kv_heads,
                                                int head_size);

// vLLM's reshape_and_cache (PagedAttention.write_to_paged_cache): token t's key and value into
// slot slot_mapping[t] = block * block_size + offset of the legacy caches; slot -1 (padding)
// writes nothing.
//   key, value:   [num_tokens, num_kv_heads, head_size] fp16/bf16, head dim contiguous, rows
//                 16-byte aligned
//   key_cache, value_cache: compact legacy caches (split_paged_kv_cache), of the model dtype
//                 or fp8 (kFloat8E4M3 / kFloat8E5M2 views: vLLM's "fp8" / "fp8_e5m2"),
//                 16-byte aligned; block_size a multiple of 16 (vLLM's 8 is not supported)
//   slot_mapping: [>= num_tokens] int64
//   k_scale, v_scale: fp8 caches store value / scale (finite > 0); ignored for 16-bit caches
//   k_scale_device, v_scale_device: [1] fp32 device scalars read instead, or null
// Compiles and loads its kernel on first use (spec cache_write_..._legacy_smXX); asynchronous on
// `stream`, capturable once loaded.
GRAPHATTN_API void write_to_paged_cache(const TensorView& key, const TensorView& value,
                                        const TensorView& key_cache, const TensorView& value_cache,
                                        const TensorView& slot_mapping, float k_scale,
                                        float v_scale, CUstream stream,
                                        KernelCache& cache = default_kernel_cache(),
                                        const float* k_scale_device = nullptr,
                                        const float* v_scale_device = nullptr);

}  // namespace graphattn
