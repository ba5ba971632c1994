// SPDX-License-Identifier: Apache-2.0
// Batch metadata with vLLM v1 semantics (CommonAttentionMetadata), the decode/prefill split,
// the batch reorder, chunked local attention's virtual batches, and the metadata builder that
// decides what may run inside a CUDA graph.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graphattn/export.h"
#include "graphattn/spec.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn {

// Host copies of one step's batch. Requests are ordered decodes first, then prefills.
struct GRAPHATTN_API CommonAttentionMetadata {
  std::vector<int32_t> query_start_loc;      // [num_reqs + 1], non-decreasing, starts at 0
  std::vector<int32_t> seq_lens;             // [num_reqs] context + new tokens
  std::vector<int32_t> num_computed_tokens;  // [num_reqs] seq_lens - query lens
  std::vector<int32_t> block_table;          // [num_reqs, max_blocks_per_seq] physical blocks
  int max_blocks_per_seq = 0;
  std::vector<int64_t> slot_mapping;  // [num_tokens]; entries past num_actual_tokens are -1
  int num_reqs = 0;
  int num_actual_tokens = 0;
  int max_query_len = 0;
  int max_seq_len = 0;
  bool causal = true;
  // Encoder-decoder models (vLLM's encoder_seq_lens): [num_reqs] encoder tokens of each request,
  // the keys its cross-attention layers read; empty otherwise. The cross-attention builder
  // (FlashAttentionMetadataBuilder(AttentionType::kEncoderDecoder, ...)) turns them into the
  // seq_lens and the slot mapping of those layers.
  std::vector<int32_t> encoder_seq_lens;

  // Builds and checks the metadata for requests with the given query and sequence lengths.
  // slot_mapping holds the num_actual_tokens real slots; it is padded to num_tokens (>= the
  // real count, e.g. a CUDA graph capture size) with -1. block_table is row-major
  // [num_reqs, max_blocks_per_seq]. Throws graphattn::Error on inconsistent input.
  static CommonAttentionMetadata make(const std::vector<int32_t>& query_lens,
                                      const std::vector<int32_t>& seq_lens,
                                      std::vector<int32_t> block_table, int max_blocks_per_seq,
                                      std::vector<int64_t> slot_mapping, int num_tokens = -1);

  int query_len(int req) const { return query_start_loc[req + 1] - query_start_loc[req]; }
};

struct GRAPHATTN_API DecodePrefillSplit {
  int num_decodes = 0, num_prefills = 0, num_decode_tokens = 0, num_prefill_tokens = 0;
  bool operator==(const DecodePrefillSplit& o) const {
    return num_decodes == o.num_decodes && num_prefills == o.num_prefills &&
           num_decode_tokens == o.num_decode_tokens && num_prefill_tokens == o.num_prefill_tokens;
  }
};

// vLLM's split: requests with query length <= decode_threshold are decodes and must all come
// before the prefills (throws graphattn::Error naming the first out-of-order request).
GRAPHATTN_API DecodePrefillSplit split_decodes_and_prefills(const CommonAttentionMetadata& m,
                                                            int decode_threshold = 1);

// Moves decodes to the front of a persistent batch with the fewest swaps, swapping the
// rearmost misplaced decodes with the frontmost prefills. `query_lens[i]` is request i's
// scheduled token count; `swap(i, j)` swaps requests i and j in the engine's batch (and is
// mirrored here). Returns whether anything was swapped.
GRAPHATTN_API bool reorder_batch_to_split_decodes_and_prefills(
    std::vector<int32_t>& query_lens, const std::function<void(int, int)>& swap,
    int decode_threshold = 1);

// Chunked local attention (e.g. Llama 4): each request becomes one virtual request per
// attention chunk its new tokens touch, with its own query range, key length and block-table
// row. attn_chunk_size must be a multiple of block_size.
GRAPHATTN_API CommonAttentionMetadata make_local_attention_virtual_batches(
    int attn_chunk_size, const CommonAttentionMetadata& m, int block_size);

// How much of a batch the backend can run inside a CUDA graph (vLLM's AttentionCGSupport).
enum class CudaGraphSupport { kNever, kUniformSingleTokenDecode, kUniformBatch, kAlways };
GRAPHATTN_API const char* to_string(CudaGraphSupport s);

// Cascade attention (graphattn/cascade.hpp): vLLM's rule for whether a batch runs it
// (FlashAttentionMetadataBuilder.use_cascade_attention, vLLM 0.6 to 0.11): no for a
// common prefix under 256 tokens, fewer than 8 requests, ALiBi or a sliding window; yes when
// the plain kernel would not split the KV (not every request a single-token decode, or one
// query head per KV head); otherwise its performance model of the two on num_sms
// multiprocessors (128-token tiles):
//   cascade  ceil(num_query_heads * ceil(num_reqs / 128) / num_sms) * prefix tiles
//   plain    ceil(num_reqs * num_kv_heads * ceil(group / 128) * prefix tiles / num_sms)
// and cascade when the first is smaller. query_lens: [num_reqs] scheduled tokens.
GRAPHATTN_API bool vllm_use_cascade_attention(int common_prefix_len,
                                              const std::vector<int32_t>& query_lens,
                                              int num_query_heads, int num_kv_heads, bool use_alibi,
                                              bool use_sliding_window, int num_sms);
// graphattn's decision (the builders', the C ABI's and Python's use_cascade_attention): vLLM's
// rule, and where that rule's performance model decides (single-token decodes with GQA) also
// at least kCascadeMinDecodes requests and num_reqs * common_prefix_len >=
// kCascadeMinSharedTokens. graphattn's split-KV decode reads a shared prefix once from DRAM
// and then from L2, so vLLM's model (every request re-reads it) overstates the plain path:
// measured on an H100 and an H200 (README, "Cascade attention"), 32 decodes ran 6-17% slower
// with cascade at every prefix from 256 to 8192 tokens, 64 decodes up to a prefix of ~800.
constexpr int kCascadeMinDecodes = 64;
constexpr int64_t kCascadeMinSharedTokens = 65536;
GRAPHATTN_API bool use_cascade_attention(int common_prefix_len,
                                         const std::vector<int32_t>& query_lens,
                                         int num_query_heads, int num_kv_heads, bool use_alibi,
                                         bool use_sliding_window, int num_sms);

// The flash backend's per-step metadata: the common metadata plus its decode/prefill split.
struct GRAPHATTN_API FlashAttentionMetadata {
  CommonAttentionMetadata common;
  DecodePrefillSplit split;
  int common_prefix_len = 0;
  // Cascade attention (build() with common_prefix_len > 0; graphattn/cascade.hpp): the
  // requests' suffix lengths, seq_lens - common_prefix_len (vLLM's suffix_kv_lens).
  bool use_cascade = false;
  std::vector<int32_t> suffix_seq_lens;
  bool for_cudagraph = false;
  // A graph captured for any mix (the builder's mixed_graphs): launch with
  // AttentionMetadata::device_split, so that the kernels split the batch on the device.
  bool device_split = false;
};

class GRAPHATTN_API FlashAttentionMetadataBuilder {
 public:
  // A builder for the layers of one attention type, as vLLM v1 makes one per KV cache group:
  //   kDecoder        the metadata as given (causal)
  //   kEncoder        causal = false; the split as given
  //   kEncoderOnly    causal = false and every request a prefill (no decodes, no cache)
  //   kEncoderDecoder vLLM's CrossAttentionBuilder: causal = false, seq_lens = the requests'
  //                   encoder_seq_lens (max_seq_len their maximum), and slot_mapping the cross
  //                   slots of the encoder tokens of the requests with no computed decoder
  //                   tokens yet (their first step writes the encoder's keys and values):
  //                   request by request, slot of encoder token i = block_table[r][i /
  //                   block_size] * block_size + i % block_size. The split follows the decoder's
  //                   query lengths.
  // block_size: the layer's KV page size (cross attention's slots).
  // decode_query_len: the most query tokens a decode request holds, 1 + the speculative tokens
  // a step verifies (vLLM's uniform_decode_query_len, 1..kMaxDecodeQueryLen, the layers'
  // AttentionLayerConfig::decode_query_len). It is the decode threshold of the split (requests
  // of up to that many tokens are decodes) and the query length of a uniform batch.
  // mixed_graphs: full graphs also for batches that mix decodes and prefills (vLLM's ALWAYS):
  // such a graph is captured per token count and launched with AttentionMetadata::device_split,
  // which reads the split from query_start_loc on the device. Uniform decode batches may still
  // replay their own (slightly faster) graphs; is_uniform_decode() tells them apart.
  FlashAttentionMetadataBuilder() = default;
  explicit FlashAttentionMetadataBuilder(AttentionType type, int block_size = 16,
                                         int decode_query_len = 1, bool mixed_graphs = false);
  AttentionType attn_type() const { return type_; }
  int decode_threshold() const { return decode_query_len_; }
  bool mixed_graphs() const { return mixed_graphs_; }

  // Split-KV decode is graph-safe for every context length; prefill's grid depends on the
  // batch, so full graphs cover uniform decode batches: every request holds exactly
  // decode_query_len tokens (decoder, encoder and cross attention; encoder-only batches are all
  // prefills and never run in a full graph). With one token that is vLLM's uniform single-token
  // decode, with more its uniform batch (a capture size of n tokens serves n / decode_query_len
  // requests).
  // With mixed_graphs, any batch (kAlways).
  static constexpr CudaGraphSupport kCudaGraphSupport = CudaGraphSupport::kUniformSingleTokenDecode;
  CudaGraphSupport cudagraph_support() const {
    if (type_ == AttentionType::kEncoderOnly) return CudaGraphSupport::kNever;
    if (mixed_graphs_) return CudaGraphSupport::kAlways;
    return decode_query_len_ > 1 ? CudaGraphSupport::kUniformBatch : kCudaGraphSupport;
  }

  // common_prefix_len: tokens shared by every request; > 0 (vLLM passes it when
  // use_cascade_attention said yes) builds cascade metadata (use_cascade, suffix_seq_lens):
  // decoder layers only, a multiple of block_size and at most every request's cached context
  // (seq_len - query_len), else Error. fast_build: skip optional work (none today).
  // Throws graphattn::Error for cross attention without one encoder length per request, or
  // with one that outgrows its block-table row.
  FlashAttentionMetadata build(int common_prefix_len, const CommonAttentionMetadata& m,
                               bool fast_build = false) const;
  // Metadata for capturing a full graph: a uniform decode batch (every request holds
  // decode_query_len tokens, num_actual_tokens == num_reqs * decode_query_len; throws
  // otherwise), max_query_len decode_query_len. With mixed_graphs any batch whose decodes come
  // first; one that is not a uniform decode batch gets device_split.
  FlashAttentionMetadata build_for_cudagraph_capture(const CommonAttentionMetadata& m) const;
  // Whether a batch can replay a graph captured from build_for_cudagraph_capture: a uniform
  // decode batch (with one token a request, every request holds at most one); with
  // mixed_graphs, any batch whose decodes come first.
  bool can_run_in_cudagraph(const CommonAttentionMetadata& m) const;
  // Every request holds decode_query_len tokens (with one token: at most one).
  bool is_uniform_decode(const CommonAttentionMetadata& m) const;

 private:
  AttentionType type_ = AttentionType::kDecoder;
  int block_size_ = 16;
  int decode_query_len_ = 1;
  bool mixed_graphs_ = false;
};

}  // namespace graphattn
