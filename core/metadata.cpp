// SPDX-License-Identifier: Apache-2.0
// Batch metadata, the decode/prefill split and reorder, local-attention virtual batches and the
// flash metadata builder, following vLLM v1's definitions.
#include "graphattn/metadata.hpp"

#include <algorithm>
#include <string>

#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn {
namespace {

std::string at(const char* what, int i, int64_t v) {
  return std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(v);
}

}  // namespace

CommonAttentionMetadata CommonAttentionMetadata::make(const std::vector<int32_t>& query_lens,
                                                      const std::vector<int32_t>& seq_lens,
                                                      std::vector<int32_t> block_table,
                                                      int max_blocks_per_seq,
                                                      std::vector<int64_t> slot_mapping,
                                                      int num_tokens) {
  if (query_lens.size() != seq_lens.size())
    throw Error("query_lens has " + std::to_string(query_lens.size()) + " requests, seq_lens " +
                std::to_string(seq_lens.size()) + "; they must agree");
  const int num_reqs = static_cast<int>(seq_lens.size());
  if (max_blocks_per_seq < 0 ||
      block_table.size() != static_cast<size_t>(num_reqs) * static_cast<size_t>(max_blocks_per_seq))
    throw Error("block_table has " + std::to_string(block_table.size()) + " entries; expected " +
                std::to_string(num_reqs) + " requests x " + std::to_string(max_blocks_per_seq) +
                " blocks");
  CommonAttentionMetadata m;
  m.num_reqs = num_reqs;
  m.max_blocks_per_seq = max_blocks_per_seq;
  m.query_start_loc.assign(1, 0);
  for (int r = 0; r < num_reqs; ++r) {
    if (query_lens[r] < 0)
      throw Error("query length must be >= 0: " + at("query_lens", r, query_lens[r]));
    // seq_len 0 marks a padded request (a captured graph's spare rows): it reads nothing.
    if (seq_lens[r] != 0 && seq_lens[r] < query_lens[r])
      throw Error("a sequence holds its new tokens, so seq_len >= query_len; got " +
                  at("seq_lens", r, seq_lens[r]) + " and " + at("query_lens", r, query_lens[r]));
    m.query_start_loc.push_back(m.query_start_loc.back() + query_lens[r]);
    m.num_computed_tokens.push_back(std::max(0, seq_lens[r] - query_lens[r]));
    m.max_query_len = std::max(m.max_query_len, query_lens[r]);
    m.max_seq_len = std::max(m.max_seq_len, seq_lens[r]);
  }
  m.seq_lens = seq_lens;
  m.num_actual_tokens = m.query_start_loc.back();
  if (static_cast<int64_t>(slot_mapping.size()) != m.num_actual_tokens)
    throw Error("slot_mapping has " + std::to_string(slot_mapping.size()) + " entries for " +
                std::to_string(m.num_actual_tokens) + " tokens");
  if (num_tokens < 0) num_tokens = m.num_actual_tokens;
  if (num_tokens < m.num_actual_tokens)
    throw Error("num_tokens " + std::to_string(num_tokens) + " is below the " +
                std::to_string(m.num_actual_tokens) + " actual tokens");
  slot_mapping.resize(static_cast<size_t>(num_tokens), -1);  // padded tokens write nothing
  m.slot_mapping = std::move(slot_mapping);
  m.block_table = std::move(block_table);
  return m;
}

DecodePrefillSplit split_decodes_and_prefills(const CommonAttentionMetadata& m,
                                              int decode_threshold) {
  DecodePrefillSplit s;
  if (m.max_query_len <= decode_threshold) {
    s.num_decodes = m.num_reqs;
    s.num_decode_tokens = m.num_actual_tokens;
    return s;
  }
  int first_prefill = m.num_reqs;
  for (int r = 0; r < m.num_reqs; ++r)
    if (m.query_len(r) > decode_threshold) {
      first_prefill = r;
      break;
    }
  if (first_prefill == m.num_reqs) {
    s.num_decodes = m.num_reqs;
    s.num_decode_tokens = m.num_actual_tokens;
    return s;
  }
  for (int r = first_prefill; r < m.num_reqs; ++r)
    if (m.query_len(r) <= decode_threshold)
      throw Error("decodes must come before prefills: request " + std::to_string(r) +
                  " (query length " + std::to_string(m.query_len(r)) +
                  ") follows prefill request " + std::to_string(first_prefill) +
                  "; reorder the batch first");
  s.num_decodes = first_prefill;
  s.num_prefills = m.num_reqs - first_prefill;
  s.num_decode_tokens = m.query_start_loc[first_prefill];
  s.num_prefill_tokens = m.num_actual_tokens - s.num_decode_tokens;
  return s;
}

bool reorder_batch_to_split_decodes_and_prefills(std::vector<int32_t>& query_lens,
                                                 const std::function<void(int, int)>& swap,
                                                 int decode_threshold) {
  std::vector<int> decodes, prefills;
  for (int i = 0; i < static_cast<int>(query_lens.size()); ++i)
    (query_lens[i] <= decode_threshold ? decodes : prefills).push_back(i);
  const int num_decodes = static_cast<int>(decodes.size());
  const int pairs = std::min(num_decodes, static_cast<int>(prefills.size()));
  bool modified = false;
  // The rearmost decodes that sit past the decode region trade places with the frontmost
  // prefills; every swap fixes two misplaced requests, so no fewer swaps can do it.
  for (int i = 1; i <= pairs; ++i) {
    const int decode_idx = decodes[num_decodes - i];
    if (decode_idx < num_decodes) break;
    const int prefill_idx = prefills[i - 1];
    if (swap) swap(prefill_idx, decode_idx);
    std::swap(query_lens[prefill_idx], query_lens[decode_idx]);
    modified = true;
  }
  return modified;
}

CommonAttentionMetadata make_local_attention_virtual_batches(int chunk,
                                                             const CommonAttentionMetadata& m,
                                                             int block_size) {
  if (chunk <= 0 || block_size <= 0 || chunk % block_size != 0)
    throw Error("attention chunk size " + std::to_string(chunk) +
                " must be a positive multiple of the block size " + std::to_string(block_size));
  const int pages = chunk / block_size;
  CommonAttentionMetadata out;
  out.max_blocks_per_seq = pages;
  out.query_start_loc.assign(1, 0);
  for (int r = 0; r < m.num_reqs; ++r) {
    const int q = m.query_len(r), k = m.seq_lens[r];
    // New tokens that fall in the chunk holding the first new token, then whole chunks.
    const int first = std::min(chunk - (k - q) % chunk, q);
    const int in_last = k % chunk == 0 ? chunk : k % chunk;
    const int blocks = 1 + (q - first + chunk - 1) / chunk;
    for (int b = 0; b < blocks; ++b) {
      const int reverse = blocks - 1 - b;
      const int q_local = b == 0 ? first : std::min(q - first - chunk * (b - 1), chunk);
      const int k_local = b == blocks - 1 ? in_last : chunk;
      const int k_start = k - (reverse * chunk + in_last);
      out.query_start_loc.push_back(out.query_start_loc.back() + q_local);
      out.seq_lens.push_back(k_local);
      out.num_computed_tokens.push_back(k_local - q_local);
      out.max_query_len = std::max(out.max_query_len, q_local);
      out.max_seq_len = std::max(out.max_seq_len, k_local);
      const int block_start = k_start / block_size;
      for (int p = 0; p < pages; ++p) {
        const int col = std::min(block_start + p, m.max_blocks_per_seq - 1);
        out.block_table.push_back(
            m.block_table[static_cast<size_t>(r) * m.max_blocks_per_seq + col]);
      }
    }
  }
  out.num_reqs = static_cast<int>(out.seq_lens.size());
  out.num_actual_tokens = out.query_start_loc.back();
  out.slot_mapping = m.slot_mapping;  // the same tokens write the same slots
  out.causal = true;
  return out;
}

const char* to_string(CudaGraphSupport s) {
  static const char* const kNames[] = {"never", "uniform single-token decode", "uniform batch",
                                       "always"};
  return detail::enum_name(s, kNames);
}

FlashAttentionMetadataBuilder::FlashAttentionMetadataBuilder(AttentionType type, int block_size,
                                                             int decode_query_len,
                                                             bool mixed_graphs)
    : type_(type),
      block_size_(block_size),
      decode_query_len_(decode_query_len),
      mixed_graphs_(mixed_graphs) {
  if (static_cast<int>(type) < 0 || static_cast<int>(type) > 3)
    throw Error("attention type " + std::to_string(static_cast<int>(type)) +
                " is not supported; supported: decoder, encoder, encoder_only, encoder_decoder");
  if (block_size <= 0) throw Error("block_size " + std::to_string(block_size) + " must be >= 1");
  if (decode_query_len < 1 || decode_query_len > kMaxDecodeQueryLen)
    throw Error("decode_query_len " + std::to_string(decode_query_len) +
                " is not supported; supported: 1.." + std::to_string(kMaxDecodeQueryLen) +
                " (1 + the speculative tokens a step verifies)");
}

namespace {

// vLLM's CrossAttentionBuilder: the encoder's lengths become the keys, and the requests whose
// decoder has computed nothing yet write their encoder tokens.
CommonAttentionMetadata cross_attention_metadata(const CommonAttentionMetadata& m, int block_size) {
  if (m.encoder_seq_lens.size() != static_cast<size_t>(m.num_reqs))
    throw Error("cross attention needs encoder_seq_lens for each of the " +
                std::to_string(m.num_reqs) + " requests, got " +
                std::to_string(m.encoder_seq_lens.size()));
  CommonAttentionMetadata c = m;
  c.causal = false;
  c.seq_lens = m.encoder_seq_lens;
  c.max_seq_len = 0;
  c.slot_mapping.clear();
  for (int r = 0; r < m.num_reqs; ++r) {
    const int enc = m.encoder_seq_lens[r];
    if (enc < 0 || enc > m.max_blocks_per_seq * block_size)
      throw Error(at("encoder_seq_lens", r, enc) + " must be in [0, " +
                  std::to_string(m.max_blocks_per_seq * block_size) + "] (its block-table row of " +
                  std::to_string(m.max_blocks_per_seq) + " blocks of " +
                  std::to_string(block_size) + ")");
    c.max_seq_len = std::max(c.max_seq_len, enc);
    const bool first_step =
        static_cast<size_t>(r) >= m.num_computed_tokens.size() || m.num_computed_tokens[r] == 0;
    if (!first_step) continue;
    for (int i = 0; i < enc; ++i) {
      const int64_t blk =
          m.block_table[static_cast<size_t>(r) * m.max_blocks_per_seq + i / block_size];
      c.slot_mapping.push_back(blk * block_size + i % block_size);
    }
  }
  return c;
}

}  // namespace

FlashAttentionMetadata FlashAttentionMetadataBuilder::build(int common_prefix_len,
                                                            const CommonAttentionMetadata& m,
                                                            bool) const {
  if (common_prefix_len < 0)
    throw Error("common_prefix_len must be >= 0, got " + std::to_string(common_prefix_len));
  FlashAttentionMetadata f;
  f.common = type_ == AttentionType::kEncoderDecoder ? cross_attention_metadata(m, block_size_) : m;
  if (type_ != AttentionType::kDecoder) f.common.causal = false;
  if (type_ == AttentionType::kEncoderOnly) {
    // No cache and no decodes: every sequence runs whole through the dense prefill.
    f.split.num_prefills = m.num_reqs;
    f.split.num_prefill_tokens = m.num_actual_tokens;
  } else {
    f.split = split_decodes_and_prefills(m, decode_query_len_);
  }
  f.common_prefix_len = common_prefix_len;
  if (common_prefix_len > 0) {
    if (type_ != AttentionType::kDecoder)
      throw Error("common_prefix_len " + std::to_string(common_prefix_len) +
                  ": cascade attention is for decoder layers, not " + to_string(type_));
    if (common_prefix_len % block_size_ != 0)
      throw Error("common_prefix_len " + std::to_string(common_prefix_len) +
                  " must be a multiple of the block size " + std::to_string(block_size_));
    for (int r = 0; r < m.num_reqs; ++r) {
      const int context = m.seq_lens[r] - m.query_len(r);
      if (context < common_prefix_len)
        throw Error("common_prefix_len " + std::to_string(common_prefix_len) +
                    " exceeds the cached context of request " + std::to_string(r) + " (" +
                    std::to_string(context) + " tokens): the prefix must be computed already");
      f.suffix_seq_lens.push_back(m.seq_lens[r] - common_prefix_len);
    }
    f.use_cascade = true;
  }
  return f;
}

namespace {
// vLLM's FlashDecoding case of use_cascade_attention: GQA and only single-token decodes.
bool gqa_single_token_decodes(const std::vector<int32_t>& query_lens, int num_query_heads,
                              int num_kv_heads) {
  return num_query_heads / num_kv_heads > 1 &&
         std::all_of(query_lens.begin(), query_lens.end(), [](int32_t q) { return q == 1; });
}
}  // namespace

bool vllm_use_cascade_attention(int common_prefix_len, const std::vector<int32_t>& query_lens,
                                int num_query_heads, int num_kv_heads, bool use_alibi,
                                bool use_sliding_window, int num_sms) {
  const auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  if (common_prefix_len < 256) return false;  // vLLM: too short to be worth it
  if (use_alibi || use_sliding_window) return false;
  const int64_t num_reqs = static_cast<int64_t>(query_lens.size());
  if (num_reqs < 8) return false;  // vLLM: too few queries
  if (num_kv_heads <= 0 || num_query_heads <= 0 || num_sms <= 0)
    throw Error("use_cascade_attention: num_query_heads " + std::to_string(num_query_heads) +
                ", num_kv_heads " + std::to_string(num_kv_heads) + " and num_sms " +
                std::to_string(num_sms) + " must be positive");
  const int64_t group = num_query_heads / num_kv_heads;
  // vLLM's FlashDecoding criterion: without it cascade saves bandwidth, so use it.
  if (!gqa_single_token_decodes(query_lens, num_query_heads, num_kv_heads)) return true;
  constexpr int64_t kTile = 128;  // vLLM's q and kv tile sizes
  const int64_t prefix_tiles = cdiv(common_prefix_len, kTile);
  const int64_t cascade_time =
      cdiv(num_query_heads * cdiv(num_reqs, kTile), num_sms) * prefix_tiles;
  const int64_t plain_time =
      cdiv(num_reqs * num_kv_heads * cdiv(group, kTile) * prefix_tiles, num_sms);
  return cascade_time < plain_time;
}

bool use_cascade_attention(int common_prefix_len, const std::vector<int32_t>& query_lens,
                           int num_query_heads, int num_kv_heads, bool use_alibi,
                           bool use_sliding_window, int num_sms) {
  if (!vllm_use_cascade_attention(common_prefix_len, query_lens, num_query_heads, num_kv_heads,
                                  use_alibi, use_sliding_window, num_sms))
    return false;
  // vLLM's "yes" branch (no FlashDecoding case): nothing measured against it.
  if (!gqa_single_token_decodes(query_lens, num_query_heads, num_kv_heads)) return true;
  const int64_t num_reqs = static_cast<int64_t>(query_lens.size());
  return num_reqs >= kCascadeMinDecodes && num_reqs * common_prefix_len >= kCascadeMinSharedTokens;
}

FlashAttentionMetadata FlashAttentionMetadataBuilder::build_for_cudagraph_capture(
    const CommonAttentionMetadata& m) const {
  if (type_ == AttentionType::kEncoderOnly)
    throw Error(
        "encoder-only attention never runs in a full CUDA graph (its batches are all "
        "prefills; cudagraph support: never)");
  const int q = decode_query_len_;
  const bool uniform = int64_t{m.num_reqs} * q == m.num_actual_tokens && is_uniform_decode(m);
  if (mixed_graphs_ && !uniform) {
    FlashAttentionMetadata f = build(0, m);  // checks that the decodes come first
    f.for_cudagraph = true;
    f.device_split = true;
    return f;
  }
  if (!uniform)
    throw Error("full CUDA graph capture covers uniform decode batches of " + std::to_string(q) +
                " token(s) a request: num_reqs " + std::to_string(m.num_reqs) +
                " * decode_query_len " + std::to_string(q) + " != num_actual_tokens " +
                std::to_string(m.num_actual_tokens) +
                " or a request holds another count; keep every capture size a multiple of "
                "decode_query_len and <= max_num_seqs * decode_query_len");
  CommonAttentionMetadata c = m;
  c.max_query_len = q;
  FlashAttentionMetadata f = build(0, c);
  f.for_cudagraph = true;
  return f;
}

bool FlashAttentionMetadataBuilder::can_run_in_cudagraph(const CommonAttentionMetadata& m) const {
  if (type_ == AttentionType::kEncoderOnly) return false;
  if (!mixed_graphs_) return is_uniform_decode(m);
  bool prefill_seen = false;  // decodes first, as split_decodes_and_prefills requires
  for (int r = 0; r < m.num_reqs; ++r) {
    const bool decode = m.query_len(r) <= decode_query_len_;
    if (decode && prefill_seen) return false;
    prefill_seen = prefill_seen || !decode;
  }
  return true;
}

bool FlashAttentionMetadataBuilder::is_uniform_decode(const CommonAttentionMetadata& m) const {
  if (decode_query_len_ == 1) return m.max_query_len <= 1;
  for (int r = 0; r < m.num_reqs; ++r)
    if (m.query_len(r) != decode_query_len_) return false;
  return true;
}

}  // namespace graphattn
