// SPDX-License-Identifier: Apache-2.0
// Cascade attention, as vLLM's FlashAttention backend ran it (vLLM 0.6 to 0.11:
// FlashAttentionMetadataBuilder.use_cascade_attention and cascade_attention; vLLM 0.33 dropped
// it): when every request of a batch shares a common prefix of KV blocks (a system prompt), all
// the batch's query tokens attend to that prefix once, together and non-causally (one request
// of num_tokens queries over the prefix blocks), each request attends to its own suffix
// separately (causal), and merge_attn_states combines the two by their log-sum-exps. The
// prefix's keys are then read once per step instead of once per request.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "graphattn/backend.hpp"
#include "graphattn/export.h"
#include "graphattn/jit.hpp"
#include "graphattn/metadata.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn {

// Whether to use it: use_cascade_attention (graphattn/metadata.hpp), vLLM's rule.

// Device scratch and metadata of one cascade step; the caller allocates them (forward-time
// code allocates nothing) and fills the three int32 arrays, as vLLM's metadata builder does:
struct GRAPHATTN_API CascadeBuffers {
  TensorView prefix_output;           // [num_tokens, num_heads, head_size] the layer's dtype
  TensorView prefix_lse;              // fp32 [num_heads, num_tokens], rows contiguous
  TensorView suffix_output;           // [num_tokens, num_heads, head_size] the layer's dtype
  TensorView suffix_lse;              // fp32 [num_heads, num_tokens], rows contiguous
  TensorView prefix_query_start_loc;  // int32 [2] = {0, num_tokens} (cu_prefix_query_lens)
  TensorView prefix_seq_len;          // int32 [1] = {common_prefix_len} (prefix_kv_lens)
  TensorView suffix_seq_lens;         // int32 [num_reqs] = seq_lens - common_prefix_len
};

// One cascade step of a decoder layer (eager: the prefix kernel is compiled and loaded through
// `cache` on first use):
//   attn:      the layer's backend, made with AttentionLayerConfig::softmax_lse (it writes the
//              new keys and values and attends each request's suffix); no window, ALiBi or
//              sinks (vLLM's cascade has none either)
//   query, key, value, kv_cache, output, metadata, workspace: as AttentionBackend::forward;
//              metadata.num_actual_tokens is num_tokens (no padding) and every request's first
//              common_prefix_len tokens are cached context in the same blocks (block_table row r
//              starts with the prefix's common_prefix_len / block_size blocks, and
//              seq_len - query_len >= common_prefix_len)
//   common_prefix_len: > 0, a multiple of the block size
// Runs the suffix forward into buffers.suffix_*, the non-causal prefix prefill (block table row
// 0, prefix_seq_len) into buffers.prefix_*, then merge_attn_states into output. Throws Error
// naming the bad argument: the cascade's own arguments before any launch, the three steps'
// views each before its launch.
GRAPHATTN_API void cascade_attention(const AttentionBackend& attn, const TensorView& query,
                                     const TensorView& key, const TensorView& value,
                                     const TensorView& kv_cache, const TensorView& output,
                                     const AttentionMetadata& metadata, int common_prefix_len,
                                     const CascadeBuffers& buffers, void* workspace,
                                     size_t workspace_size, CUstream stream,
                                     KernelCache& cache = default_kernel_cache());

}  // namespace graphattn
