// SPDX-License-Identifier: Apache-2.0
// Cascade attention (graphattn/cascade.hpp): the layer's suffix forward with its LSE, the
// non-causal prefix prefill with its LSE, and merge_attn_states.
#include "graphattn/cascade.hpp"

#include <string>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/merge_states.hpp"
#include "runtime/tensor_checks.hpp"

namespace graphattn {
namespace {

using detail::str;

constexpr const char* kWhere = "cascade_attention: ";

// The first `rows` rows of a [num_tokens, ...] view.
TensorView first_rows(TensorView t, int64_t rows) {
  t.shape[0] = rows;
  return t;
}

void require_int32(const TensorView& t, const char* name, int64_t n, const char* shape) {
  GA_REQUIRE(t.ndim == 1 && t.dtype == ScalarType::kInt32 && t.shape[0] == n && t.data != nullptr,
             std::string(kWhere) + name + " " + t.describe() + " must be int32 " + shape + " (" +
                 str(n) + ")");
}

}  // namespace

void cascade_attention(const AttentionBackend& attn, const TensorView& query, const TensorView& key,
                       const TensorView& value, const TensorView& kv_cache,
                       const TensorView& output, const AttentionMetadata& md, int common_prefix_len,
                       const CascadeBuffers& b, void* workspace, size_t workspace_size,
                       CUstream stream, KernelCache& cache) {
  const AttentionLayerConfig& c = attn.config();
  GA_REQUIRE(c.softmax_lse, std::string(kWhere) +
                                "the layer's backend must write the softmax LSE (make it with "
                                "AttentionLayerConfig::softmax_lse)");
  GA_REQUIRE(c.attn_type == AttentionType::kDecoder && c.window == 0 && c.alibi_slopes == nullptr &&
                 c.sinks == nullptr && !c.blocksparse.sparse(),
             std::string(kWhere) +
                 "supported for causal decoder layers without a sliding window, ALiBi, sinks or "
                 "a block-sparse pattern (vLLM's cascade has none of them)");
  GA_REQUIRE(common_prefix_len > 0 && common_prefix_len % c.block_size == 0,
             std::string(kWhere) + "common_prefix_len " + str(common_prefix_len) +
                 " must be a positive multiple of the block size " + str(c.block_size));
  GA_REQUIRE(!md.device_split, std::string(kWhere) + "runs eagerly (no device_split metadata)");
  detail::require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  detail::require_rank(md.block_table, 2, "block_table", "[num_reqs, max_blocks_per_seq]");
  const int64_t tokens = md.num_actual_tokens;
  const int64_t prefix_blocks = common_prefix_len / c.block_size;
  GA_REQUIRE(tokens >= 1 && tokens <= query.shape[0] && md.num_reqs >= 1,
             std::string(kWhere) + "num_actual_tokens " + str(tokens) + " and num_reqs " +
                 str(md.num_reqs) + " must be >= 1 (and the tokens fit query " + query.describe() +
                 ")");
  GA_REQUIRE(md.block_table.shape[1] > prefix_blocks && md.block_table.strides[1] == 1,
             std::string(kWhere) + "block_table " + md.block_table.describe() +
                 " must have contiguous rows longer than the prefix's " + str(prefix_blocks) +
                 " blocks");
  require_int32(b.prefix_query_start_loc, "prefix_query_start_loc", 2, "[2] = {0, num_tokens}");
  require_int32(b.prefix_seq_len, "prefix_seq_len", 1, "[1] = {common_prefix_len}");
  require_int32(b.suffix_seq_lens, "suffix_seq_lens", md.num_reqs,
                "[num_reqs] = seq_lens - common_prefix_len");

  // Each request's suffix: its block-table row past the prefix blocks, its own lengths.
  AttentionMetadata suffix = md;
  suffix.seq_lens = b.suffix_seq_lens;
  suffix.block_table.data = static_cast<int32_t*>(md.block_table.data) + prefix_blocks;
  suffix.block_table.shape[1] = md.block_table.shape[1] - prefix_blocks;
  suffix.max_seq_len = md.max_seq_len > common_prefix_len ? md.max_seq_len - common_prefix_len : 1;
  // The prefix: one request of every query token over block-table row 0's prefix blocks.
  TensorView prefix_table = md.block_table;
  prefix_table.shape[0] = 1;
  prefix_table.shape[1] = prefix_blocks;

  const TensorView q = first_rows(query, tokens), out = first_rows(output, tokens);
  // The LSE views here; the suffix forward, the prefix prefill and the merge check the rest of
  // their views, each before its own launch.
  detail::require_softmax_lse(b.prefix_lse, q);
  detail::require_softmax_lse(b.suffix_lse, q);
  attn.forward(q, key, value, kv_cache, first_rows(b.suffix_output, tokens), suffix, workspace,
               workspace_size, stream, b.suffix_lse);
  prefill_attention(q, kv_cache, first_rows(b.prefix_output, tokens), b.prefix_query_start_loc,
                    b.prefix_seq_len, prefix_table, 0, 1, static_cast<int>(tokens), c.scale, 0,
                    c.soft_cap, c.k_scale, c.v_scale, stream, cache, nullptr, nullptr,
                    c.k_scale_device, c.v_scale_device, /*causal=*/false, b.prefix_lse);
  TensorView p_lse = b.prefix_lse, s_lse = b.suffix_lse;
  p_lse.shape[1] = s_lse.shape[1] = tokens;
  merge_attn_states(out, first_rows(b.prefix_output, tokens), p_lse,
                    first_rows(b.suffix_output, tokens), s_lse, TensorView(), stream, cache);
}

}  // namespace graphattn
