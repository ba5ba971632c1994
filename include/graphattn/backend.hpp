// The attention backend's device operations, vLLM v1 flash-backend semantics.
//
// The paged KV cache is one tensor viewed as [2, num_blocks, block_size, num_kv_heads, head_size]
// (index 0: keys, 1: values). NHD stores it in that order; HND stores
// [2, num_blocks, num_kv_heads, block_size, head_size] and is passed as the same logical shape
// with permuted strides. The head dimension must be contiguous.
#pragma once

#include <cuda.h>

#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn {

// NHD or HND from the strides of a 5-d KV cache view; throws on anything else.
KvLayout kv_layout_of(const TensorView& kv_cache);
// The KV cache dtype implied by the cache tensor's element type for a model of type `dtype`.
KvDType kv_dtype_of(const TensorView& kv_cache, DType dtype);
DType dtype_of(ScalarType t);  // fp16/bf16 only; throws otherwise

// Writes the new tokens' keys and values into their cache slots (vLLM's
// reshape_and_cache_flash). A slot of -1 (padding) writes nothing.
//   key, value:    [num_tokens, num_kv_heads, head_size], fp16 or bf16, head dim contiguous
//   kv_cache:      [2, num_blocks, block_size, num_kv_heads, head_size], dtype of key or fp8
//   slot_mapping:  [num_tokens] int64, block * block_size + offset, or -1
//   k_scale/v_scale: fp8 caches store value / scale; ignored otherwise
// Asynchronous on `stream`; capture-safe once the kernel is loaded (see prepare_cache_write).
void write_kv_cache(const TensorView& key, const TensorView& value, const TensorView& kv_cache,
                    const TensorView& slot_mapping, float k_scale, float v_scale, CUstream stream,
                    KernelCache& cache = default_kernel_cache());

// Prefill attention (vLLM v1 flash semantics) for requests [first_req, num_reqs) of a batch:
// query token i of a request with seq_len s and query length n sits at position s - n + i and
// attends to keys 0..position of its paged KV (cached context, then itself causally).
//   query, output:    [num_tokens, num_heads, head_size] fp16/bf16, head dim contiguous, rows
//                     16-byte aligned; output rows of the handled requests are overwritten
//   kv_cache:         [2, num_blocks, block_size, num_kv_heads, head_size] (NHD or HND strides)
//   query_start_loc:  [>= num_reqs + 1] int32; seq_lens: [>= num_reqs] int32 (0: zeros out)
//   block_table:      [>= num_reqs, max_blocks_per_seq] int32
//   max_query_len:    >= the query length of every handled request
//   scale:            softmax scale; window: sliding window in tokens, 0 = none (a key at k is
//                     seen from p when p - k < window); soft_cap: 0 = none
//   k_scale/v_scale:  fp8 caches hold value / scale; ignored otherwise
// Compiles and loads the kernel on first use; asynchronous on `stream`.
void prefill_attention(const TensorView& query, const TensorView& kv_cache,
                       const TensorView& output, const TensorView& query_start_loc,
                       const TensorView& seq_lens, const TensorView& block_table, int first_req,
                       int num_reqs, int max_query_len, float scale, int window, float soft_cap,
                       float k_scale, float v_scale, CUstream stream,
                       KernelCache& cache = default_kernel_cache());

}  // namespace graphattn
