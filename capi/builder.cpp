// SPDX-License-Identifier: Apache-2.0
// The C ABI's metadata builder and capture sizes (host only).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "capi.hpp"
#include "graphattn/capture.hpp"
#include "graphattn/metadata.hpp"

using namespace graphattn::capi;

namespace {

// Host metadata for the builder's batch-shape questions, which read only the query lengths.
graphattn::CommonAttentionMetadata batch_of(const int32_t* query_start_loc, int num_reqs) {
  deref(query_start_loc, "query_start_loc");
  if (num_reqs < 0) invalid("num_reqs " + std::to_string(num_reqs) + " must be >= 0");
  std::vector<int32_t> query_lens(static_cast<size_t>(num_reqs));
  for (int r = 0; r < num_reqs; ++r) {
    const int64_t len = int64_t{query_start_loc[r + 1]} - query_start_loc[r];
    if (len > std::numeric_limits<int32_t>::max() || len < std::numeric_limits<int32_t>::min())
      invalid("query_start_loc[" + std::to_string(r + 1) + "] - query_start_loc[" +
              std::to_string(r) + "] = " + std::to_string(len) + " does not fit int32");
    query_lens[r] = static_cast<int32_t>(len);  // a negative length is the builder's to reject
  }
  const int64_t tokens =
      static_cast<int64_t>(query_start_loc[num_reqs]) - static_cast<int64_t>(query_start_loc[0]);
  // seq_lens are not read by these questions; the query lengths stand in for them.
  return graphattn::CommonAttentionMetadata::make(
      query_lens, query_lens, {}, 0,
      std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(tokens, 0)), -1));
}

}  // namespace

extern "C" {

graphattn_cudagraph_support_t graphattn_cudagraph_support(void) noexcept {
  return static_cast<graphattn_cudagraph_support_t>(
      graphattn::FlashAttentionMetadataBuilder().cudagraph_support());
}

graphattn_status_t graphattn_cudagraph_support_for(
    int decode_query_len, graphattn_cudagraph_support_t* support) noexcept {
  return guard([&] {
    graphattn_cudagraph_support_t& out = deref(support, "support");
    out = static_cast<graphattn_cudagraph_support_t>(
        graphattn::FlashAttentionMetadataBuilder(graphattn::AttentionType::kDecoder, 16,
                                                 decode_query_len)
            .cudagraph_support());
  });
}

graphattn_status_t graphattn_can_run_uniform_decode(const int32_t* query_start_loc, int num_reqs,
                                                    int decode_query_len, int* result) noexcept {
  return guard([&] {
    int& out = deref(result, "result");
    const graphattn::FlashAttentionMetadataBuilder builder(graphattn::AttentionType::kDecoder, 16,
                                                           decode_query_len);
    out = builder.can_run_in_cudagraph(batch_of(query_start_loc, num_reqs)) ? 1 : 0;
  });
}

graphattn_status_t graphattn_can_run_in_cudagraph(const int32_t* query_start_loc, int num_reqs,
                                                  int* result) noexcept {
  return graphattn_can_run_uniform_decode(query_start_loc, num_reqs, 1, result);
}

graphattn_status_t graphattn_use_cascade_attention(int common_prefix_len, const int32_t* query_lens,
                                                   int num_reqs, int num_query_heads,
                                                   int num_kv_heads, int use_alibi,
                                                   int use_sliding_window, int num_sms,
                                                   int* result) noexcept {
  return guard([&] {
    int& out = deref(result, "result");
    if (num_reqs < 0) invalid("num_reqs " + std::to_string(num_reqs) + " must be >= 0");
    if (num_reqs > 0 && query_lens == nullptr) invalid("query_lens is NULL");
    const std::vector<int32_t> lens(query_lens, query_lens + num_reqs);
    out = graphattn::use_cascade_attention(common_prefix_len, lens, num_query_heads, num_kv_heads,
                                           use_alibi != 0, use_sliding_window != 0, num_sms)
              ? 1
              : 0;
  });
}

graphattn_status_t graphattn_split_decodes_and_prefills(
    const int32_t* query_start_loc, int num_reqs, int decode_threshold,
    graphattn_decode_prefill_split_t* split) noexcept {
  return guard([&] {
    graphattn_decode_prefill_split_t& out = deref(split, "split");
    const graphattn::DecodePrefillSplit s = graphattn::split_decodes_and_prefills(
        batch_of(query_start_loc, num_reqs), decode_threshold);
    out.num_decodes = s.num_decodes;
    out.num_prefills = s.num_prefills;
    out.num_decode_tokens = s.num_decode_tokens;
    out.num_prefill_tokens = s.num_prefill_tokens;
  });
}

graphattn_status_t graphattn_uniform_decode_capture_sizes(int max_num_seqs, int decode_query_len,
                                                          int* sizes, size_t capacity,
                                                          size_t* count) noexcept {
  return guard([&] {
    const std::vector<int> all = graphattn::default_capture_sizes(max_num_seqs, decode_query_len);
    copy_array(all.size(), capacity, count, sizes == nullptr, "capture sizes",
               [&](size_t i) { sizes[i] = all[i]; });
  });
}

graphattn_status_t graphattn_default_capture_sizes(int max_num_seqs, int* sizes, size_t capacity,
                                                   size_t* count) noexcept {
  return graphattn_uniform_decode_capture_sizes(max_num_seqs, 1, sizes, capacity, count);
}

graphattn_status_t graphattn_padded_capture_size(const int* sorted_sizes, size_t num_sizes,
                                                 int num_tokens, int* padded) noexcept {
  return guard([&] {
    if (num_sizes > 0) deref(sorted_sizes, "sorted_sizes");
    int& out = deref(padded, "padded");
    out = graphattn::padded_capture_size(std::vector<int>(sorted_sizes, sorted_sizes + num_sizes),
                                         num_tokens);
  });
}

}  // extern "C"
