// SPDX-License-Identifier: Apache-2.0
// vLLM's legacy PagedAttention KV cache (its PagedAttention ops: get_kv_cache_shape,
// split_kv_cache, write_to_paged_cache): one tensor [2, num_blocks, block_size * num_kv_heads *
// head_size] split into a key cache [num_blocks, num_kv_heads, head_size / x, block_size, x]
// (x = 16 bytes of elements: 8 for fp16/bf16, 16 for fp8, 4 for fp32; every op also takes x = 8
// or 16 for every type, read from the key cache's shape) and a value cache [num_blocks,
// num_kv_heads, head_size, block_size]. graphattn writes it (spec layout "legacy" of the cache
// write kernel); its decode kernel reads it (paged_attention_v1 / v2 below), and so does its
// prefill kernel (forward_prefix below).
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <string>

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
//   key, value:   [num_tokens, num_kv_heads, head_size] fp16/bf16/fp32 (vLLM's float32), head
//                 dim contiguous, rows 16-byte aligned
//   key_cache, value_cache: compact legacy caches (split_paged_kv_cache), of the keys' dtype
//                 or fp8 (kFloat8E4M3 / kFloat8E5M2 views: vLLM's "fp8" / "fp8_e5m2"),
//                 16-byte aligned; x read from key_cache's last dim: 8, 16 or 16 bytes of
//                 elements (vLLM's tests build fp8 caches with x = 8); block_size 8 (vLLM's
//                 default) or a multiple of 16 up to 256. The readers take the same x
//                 (kernels "_x8" / "_x16" where it is not 16 bytes); forward_prefix 16-bit
//                 queries and block sizes from 16, paged_attention_v1 / v2 float32 too and
//                 block size 8 too (16-bit and float32 caches)
//   slot_mapping: [>= num_tokens] int64
//   k_scale, v_scale: fp8 caches store value / scale (finite > 0); ignored for 16-bit caches
//   k_scale_device, v_scale_device: [1] fp32 device scalars read instead, or null
//   interleaved_v: vLLM 0.33's reshape_and_cache(..., interleaved_v=True): value_cache keeps its
//                 shape but holds [num_blocks, num_kv_heads, block_size / kx, head_size, kx]
//                 (kx = 16 bytes of cache elements: 8 16-bit, 4 fp32, 16 fp8; block_size a
//                 multiple of kx), the layout of vLLM's ROCm fused writer; graphattn's readers
//                 take the plain layout only
// Compiles and loads its kernel on first use (spec cache_write_..._legacy_smXX, "_iv" when
// interleaved); asynchronous on `stream`, capturable once loaded.
GRAPHATTN_API void write_to_paged_cache(const TensorView& key, const TensorView& value,
                                        const TensorView& key_cache, const TensorView& value_cache,
                                        const TensorView& slot_mapping, float k_scale,
                                        float v_scale, CUstream stream,
                                        KernelCache& cache = default_kernel_cache(),
                                        const float* k_scale_device = nullptr,
                                        const float* v_scale_device = nullptr,
                                        bool interleaved_v = false);

// forward_prefix's options beyond vLLM's argument list (the defaults are vLLM's behaviour).
struct PrefixOptions {
  float scale = 0.0f;            // softmax scale; 0: 1 / sqrt(head_size), vLLM's
  float soft_cap = 0.0f;         // logits soft cap: score -> cap * tanh(score / cap); 0: none
  const float* sinks = nullptr;  // [num_heads] fp32 device: attention-sink logits, or null
  bool causal = true;  // false: every new token sees all seq_len keys (no sliding window then)
  const float* k_scale_device = nullptr;  // [1] fp32 device scalars read instead of k_scale /
  const float* v_scale_device = nullptr;  // v_scale (fp8 caches), or null
};

// vLLM's PagedAttention.forward_prefix (chunked prefill and prefix caching over the legacy
// caches): the q_len = query_start_loc[r + 1] - query_start_loc[r] new tokens of request r sit
// at positions seq_lens[r] - q_len .. seq_lens[r] - 1 and attend causally to the request's
// cached prefix and to themselves. The prefill kernel (spec layout legacy) reads every key and
// value, the new tokens' included, from key_cache / value_cache through block_tables: the
// caller must have written the new tokens there first with write_to_paged_cache, as vLLM does
// before it calls forward_prefix. key and value are checked against the query and the caches
// but not read. With a 16-bit cache the cache holds the same values as key and value, so the
// result is the one vLLM computes. With an fp8 cache the new tokens take part as stored, i.e.
// quantized like the prefix (fp8(key / k_scale) * k_scale, likewise the values), where vLLM's
// Triton kernel (context_attention_fwd) reads them from key and value unquantized; the two
// differ by that quantization of the new tokens' keys and values.
//   query:        [num_tokens, num_heads, head_size] fp16/bf16, head dim contiguous, rows
//                 16-byte aligned
//   key, value:   [num_tokens, num_kv_heads, head_size] dtype of query, or empty views (ndim
//                 0); not read (above)
//   kv_cache_dtype: vLLM's name of the caches' element type: "auto" (the query's dtype),
//                 "fp8" or "fp8_e4m3" (kFloat8E4M3 caches), "fp8_e5m2" (kFloat8E5M2)
//   key_cache, value_cache: compact legacy caches (split_paged_kv_cache; x read from key_cache:
//                 16 bytes of elements, 8 or 16), block_size a multiple of 16 (vLLM's default 8
//                 is refused), fp8 head sizes multiples of 16
//   block_tables: [>= num_reqs, max_blocks_per_seq] int32, rows contiguous
//   query_start_loc: [num_reqs + 1] int32, non-decreasing token offsets (num_reqs from its size)
//   seq_lens:     [>= num_reqs] int32, prefix + new tokens per request; 0: the request's rows
//                 are written as zeros
//   max_query_len: >= every request's query length (sizes the grid)
//   alibi_slopes: [num_heads] fp32 device memory, or null: score += slope * (key - query pos)
//   sliding_window: 0 (none) or >= 1: position p sees keys k with p - k < sliding_window
//   k_scale, v_scale: fp8 caches: value = stored * scale (finite > 0); ignored for 16-bit
//   output:       [>= num_tokens, num_heads, head_size] dtype of query; rows of the requests'
//                 tokens are written
// Throws graphattn::Error naming the bad argument before any device use; compiles and loads its
// kernel on first use (spec prefill_..._legacy_smXX); asynchronous on `stream`, capturable once
// loaded.
GRAPHATTN_API void forward_prefix(const TensorView& query, const TensorView& key,
                                  const TensorView& value, const std::string& kv_cache_dtype,
                                  const TensorView& key_cache, const TensorView& value_cache,
                                  const TensorView& block_tables, const TensorView& query_start_loc,
                                  const TensorView& seq_lens, int max_query_len,
                                  const float* alibi_slopes, int sliding_window, float k_scale,
                                  float v_scale, const TensorView& output, CUstream stream,
                                  KernelCache& cache = default_kernel_cache(),
                                  const PrefixOptions& options = {});

// vLLM's paged-attention partition size (v2's temporaries hold one entry per 512 tokens).
constexpr int kPagedAttentionPartitionSize = 512;
// ceil(max_seq_len / 512): v2's max_num_partitions (max_seq_len >= 0).
GRAPHATTN_API int64_t paged_attention_num_partitions(int64_t max_seq_len);
// vLLM's choice between paged_attention_v1 and v2 (PagedAttention.forward_decode): v1 when
// max_seq_len <= 8192 and (one partition of 512 tokens, or num_seqs * num_heads > 512).
GRAPHATTN_API bool use_paged_attention_v1(int64_t max_seq_len, int64_t num_seqs, int64_t num_heads);

// vLLM's paged_attention_v1: one query token per sequence attends to its keys [0, seq_len) in
// the legacy caches. graphattn runs its split-KV decode kernel specialized for the legacy layout
// (spec decode_..._legacy_smXX, ALiBi "_alibi"), whatever the version.
//   out, query:   [num_seqs, num_heads, head_size] fp16/bf16/fp32 (out written), head dim
//                 contiguous, rows 16-byte aligned; num_heads a multiple of num_kv_heads. fp32
//                 (vLLM's float32): fp32 caches, "auto", CUDA-core fp32 math, one split, no
//                 block-sparse pattern (spec decode_..._fp32_..._legacy)
//   key_cache, value_cache: the legacy caches (split_paged_kv_cache), compact, of the model
//                 dtype ("auto") or fp8 (kFloat8E4M3 views for "fp8" / "fp8_e4m3", kFloat8E5M2
//                 for "fp8_e5m2"); head_size 32..256, a multiple of 8 (fp8: of 16)
//   num_kv_heads, block_size: must equal the caches'; block_size 16..256, a multiple of 16,
//                 or vLLM's 8 (16-bit and fp32 caches: a 16-token tile reads two blocks)
//   scale:        softmax scale, finite > 0
//   block_tables: int32 [num_seqs, max_num_blocks_per_seq]; seq_lens: int32 [num_seqs]
//                 (<= 0: zeros out)
//   max_seq_len:  >= 1, sizes the split grid (longer seq_lens are still attended in full)
//   alibi_slopes: fp32 [num_heads] contiguous, or an empty view (ndim 0): none
//   kv_cache_dtype: "auto", "fp8", "fp8_e4m3", "fp8_e5m2" (must match the caches' type)
//   k_scale, v_scale: fp8 caches hold value / scale (finite > 0); ignored for "auto";
//                 k_scale_device / v_scale_device: [1] fp32 device scalars read instead, or null
//   tp_rank, blocksparse_*: vLLM's block-sparse arguments; blocksparse_vert_stride <= 1 is
//                 dense (vLLM's rule; tp_rank >= 0 is then unused); > 1 runs the block-sparse
//                 decode kernel ("_bsp", blocksparse_from_vllm: this rank's heads start at
//                 tp_rank * num_heads), blocksparse_block_size a multiple of 16 and of block_size
// The split partials and counters come from a per-context (device) workspace that graphattn
// allocates, zero-filled, the first time a call needs it (and grows, keeping the old buffers
// alive for graphs that captured them). A call on a capturing stream allocates nothing and
// compiles nothing: its kernel must have been loaded by an eager call of the same
// configuration (vLLM's warmup does), and where the workspace is still too small for the split
// grid it runs unsplit. Asynchronous on `stream`; graph-capturable under those conditions.
// Every call and replayed graph of one device shares the workspace, so they must not run
// concurrently on different streams (vLLM runs attention on one stream per device).
GRAPHATTN_API void paged_attention_v1(
    const TensorView& out, const TensorView& query, const TensorView& key_cache,
    const TensorView& value_cache, int num_kv_heads, float scale, const TensorView& block_tables,
    const TensorView& seq_lens, int block_size, int max_seq_len, const TensorView& alibi_slopes,
    const std::string& kv_cache_dtype, float k_scale, float v_scale, int tp_rank,
    int blocksparse_local_blocks, int blocksparse_vert_stride, int blocksparse_block_size,
    int blocksparse_head_sliding_step, CUstream stream, KernelCache& cache = default_kernel_cache(),
    const float* k_scale_device = nullptr, const float* v_scale_device = nullptr);

// vLLM's paged_attention_v2: the same attention as v1 (same kernel, same result). vLLM's
// temporaries are checked and not used (graphattn's split workspace, see v1, replaces them):
//   exp_sums, max_logits: fp32 [num_seqs, num_heads, max_num_partitions]
//   tmp_out:      [num_seqs, num_heads, max_num_partitions, head_size] of out's dtype
//   max_num_partitions >= paged_attention_num_partitions(max_seq_len)
GRAPHATTN_API void paged_attention_v2(
    const TensorView& out, const TensorView& exp_sums, const TensorView& max_logits,
    const TensorView& tmp_out, const TensorView& query, const TensorView& key_cache,
    const TensorView& value_cache, int num_kv_heads, float scale, const TensorView& block_tables,
    const TensorView& seq_lens, int block_size, int max_seq_len, const TensorView& alibi_slopes,
    const std::string& kv_cache_dtype, float k_scale, float v_scale, int tp_rank,
    int blocksparse_local_blocks, int blocksparse_vert_stride, int blocksparse_block_size,
    int blocksparse_head_sliding_step, CUstream stream, KernelCache& cache = default_kernel_cache(),
    const float* k_scale_device = nullptr, const float* v_scale_device = nullptr);

}  // namespace graphattn
