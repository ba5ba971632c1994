// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <numeric>
#include <string>

#include "graphattn/error.hpp"
#include "graphattn/metadata.hpp"
#include "graphattn/spec.hpp"

using namespace graphattn;

namespace {

CommonAttentionMetadata batch(const std::vector<int32_t>& q, const std::vector<int32_t>& k,
                              int num_tokens = -1) {
  const int tokens = std::accumulate(q.begin(), q.end(), 0);
  std::vector<int64_t> slots(tokens);
  std::iota(slots.begin(), slots.end(), 100);
  std::vector<int32_t> table(q.size() * 4, 7);
  return CommonAttentionMetadata::make(q, k, table, 4, slots, num_tokens);
}

}  // namespace

TEST_CASE("metadata: construction derives offsets and pads slot_mapping with -1") {
  const auto m = batch({1, 1, 5}, {10, 3, 5}, 16);
  CHECK(m.num_reqs == 3);
  CHECK(m.num_actual_tokens == 7);
  CHECK(m.query_start_loc == std::vector<int32_t>{0, 1, 2, 7});
  CHECK(m.num_computed_tokens == std::vector<int32_t>{9, 2, 0});
  CHECK(m.max_query_len == 5);
  CHECK(m.max_seq_len == 10);
  REQUIRE(m.slot_mapping.size() == 16);
  for (int i = 0; i < 7; ++i) CHECK(m.slot_mapping[i] == 100 + i);
  for (int i = 7; i < 16; ++i) CHECK(m.slot_mapping[i] == -1);
  CHECK_THROWS_WITH_AS(batch({3}, {2}), doctest::Contains("seq_len >= query_len"), Error);
  CHECK_THROWS_WITH_AS(batch({1, 1}, {4, 4}, 1), doctest::Contains("num_tokens 1 is below"), Error);
  CHECK_THROWS_WITH_AS(CommonAttentionMetadata::make({1}, {1, 2}, {}, 0, {0}),
                       doctest::Contains("query_lens has 1 requests, seq_lens 2"), Error);
  CHECK_THROWS_WITH_AS(CommonAttentionMetadata::make({1}, {1}, {1, 2, 3}, 2, {0}),
                       doctest::Contains("block_table has 3 entries"), Error);
  // A padded request (seq_len 0) is allowed whatever its query length.
  CHECK_NOTHROW(batch({1, 1}, {5, 0}));
}

TEST_CASE("split_decodes_and_prefills follows vLLM's rules") {
  CHECK(split_decodes_and_prefills(batch({1, 1, 1}, {5, 6, 7})) == DecodePrefillSplit{3, 0, 3, 0});
  CHECK(split_decodes_and_prefills(batch({4, 9}, {4, 20})) == DecodePrefillSplit{0, 2, 0, 13});
  CHECK(split_decodes_and_prefills(batch({1, 3}, {8, 3})) == DecodePrefillSplit{1, 1, 1, 3});
  CHECK(split_decodes_and_prefills(batch({1, 1, 2, 5}, {8, 9, 2, 5})) ==
        DecodePrefillSplit{2, 2, 2, 7});
  CHECK(split_decodes_and_prefills(batch({}, {})) == DecodePrefillSplit{0, 0, 0, 0});
  // A threshold above 1 (speculative decoding) counts short queries as decodes.
  CHECK(split_decodes_and_prefills(batch({2, 3, 4}, {9, 9, 9}), 3) ==
        DecodePrefillSplit{2, 1, 5, 4});
  CHECK_THROWS_WITH_AS(split_decodes_and_prefills(batch({1, 4, 1}, {5, 4, 5})),
                       doctest::Contains("request 2 (query length 1) follows prefill request 1"),
                       Error);
}

TEST_CASE("reorder_batch_to_split_decodes_and_prefills uses the fewest swaps") {
  auto run = [](std::vector<int32_t> lens, int threshold = 1) {
    std::vector<int> order(lens.size());
    std::iota(order.begin(), order.end(), 0);
    int swaps = 0;
    const bool changed = reorder_batch_to_split_decodes_and_prefills(
        lens,
        [&](int i, int j) {
          std::swap(order[i], order[j]);
          ++swaps;
        },
        threshold);
    return std::make_tuple(lens, order, swaps, changed);
  };
  {
    auto [lens, order, swaps, changed] = run({5, 1, 7, 1, 1});
    CHECK(lens == std::vector<int32_t>{1, 1, 1, 7, 5});
    CHECK(swaps == 2);  // two prefills sat in the decode region
    CHECK(changed);
    CHECK(order == std::vector<int>{4, 1, 3, 2, 0});
  }
  {
    auto [lens, order, swaps, changed] = run({1, 1, 3});
    CHECK_FALSE(changed);
    CHECK(swaps == 0);
  }
  {
    auto [lens, order, swaps, changed] = run({1, 1, 1});
    CHECK_FALSE(changed);
  }
  {
    auto [lens, order, swaps, changed] = run({4, 4});
    CHECK_FALSE(changed);
  }
  {
    auto [lens, order, swaps, changed] = run({6, 1});
    CHECK(lens == std::vector<int32_t>{1, 6});
    CHECK(swaps == 1);
  }
  {
    auto [lens, order, swaps, changed] = run({3, 2, 9, 2}, 2);
    CHECK(lens == std::vector<int32_t>{2, 2, 9, 3});
    CHECK(swaps == 1);
  }
  // Afterwards the split accepts the order.
  auto [lens, order, swaps, changed] = run({9, 1, 1, 8, 1, 1, 2});
  std::vector<int32_t> k(lens.size(), 20);
  CHECK_NOTHROW(split_decodes_and_prefills(batch(lens, k)));
}

TEST_CASE("make_local_attention_virtual_batches reproduces vLLM's documented example") {
  // attn_chunk_size 4, q_seqlens [4, 10, 5], k_seqlens [6, 17, 9], block_size 2, block table
  // rows 0..9, 10..19, 20..29.
  std::vector<int32_t> table;
  for (int i = 0; i < 30; ++i) table.push_back(i);
  std::vector<int64_t> slots(19);
  std::iota(slots.begin(), slots.end(), 0);
  const auto m = CommonAttentionMetadata::make({4, 10, 5}, {6, 17, 9}, table, 10, slots);
  const auto local = make_local_attention_virtual_batches(4, m, 2);
  std::vector<int32_t> q_local;
  for (int r = 0; r < local.num_reqs; ++r) q_local.push_back(local.query_len(r));
  CHECK(q_local == std::vector<int32_t>{2, 2, 1, 4, 4, 1, 4, 1});
  CHECK(local.seq_lens == std::vector<int32_t>{4, 2, 4, 4, 4, 1, 4, 1});
  CHECK(local.query_start_loc == std::vector<int32_t>{0, 2, 4, 5, 9, 13, 14, 18, 19});
  CHECK(local.block_table ==
        std::vector<int32_t>{0, 1, 2, 3, 12, 13, 14, 15, 16, 17, 18, 19, 22, 23, 24, 25});
  CHECK(local.max_blocks_per_seq == 2);
  CHECK(local.num_reqs == 8);
  CHECK(local.num_actual_tokens == 19);
  CHECK(local.max_query_len == 4);
  CHECK(local.max_seq_len == 4);
  CHECK_THROWS_WITH_AS(make_local_attention_virtual_batches(6, m, 4),
                       doctest::Contains("attention chunk size 6 must be a positive multiple"),
                       Error);
}

TEST_CASE("flash metadata builder: support level, capture build, graph eligibility") {
  FlashAttentionMetadataBuilder b;
  CHECK(b.cudagraph_support() == CudaGraphSupport::kUniformSingleTokenDecode);
  CHECK(b.cudagraph_support() >= CudaGraphSupport::kUniformSingleTokenDecode);
  const auto decode = batch({1, 1, 1, 1}, {3, 90, 1, 0}, 8);
  const auto f = b.build_for_cudagraph_capture(decode);
  CHECK(f.for_cudagraph);
  CHECK(f.common.max_query_len == 1);
  CHECK(f.split == DecodePrefillSplit{4, 0, 4, 0});
  CHECK(b.can_run_in_cudagraph(decode));
  const auto mixed = batch({1, 6}, {3, 6});
  CHECK_FALSE(b.can_run_in_cudagraph(mixed));
  CHECK_THROWS_WITH_AS(b.build_for_cudagraph_capture(mixed),
                       doctest::Contains("uniform decode batches of 1 token(s) a request"), Error);
  const auto built = b.build(0, mixed);
  CHECK(built.split == DecodePrefillSplit{1, 1, 1, 6});
  CHECK_THROWS_WITH_AS(b.build(-1, mixed), doctest::Contains("common_prefix_len"), Error);
}

TEST_CASE("flash metadata builder: speculative decoding's uniform batches (decode_query_len)") {
  for (int bad : {0, -2, kMaxDecodeQueryLen + 1})
    CHECK_THROWS_WITH_AS(FlashAttentionMetadataBuilder(AttentionType::kDecoder, 16, bad),
                         doctest::Contains(("decode_query_len " + std::to_string(bad) +
                                            " is not supported; supported: 1..16")
                                               .c_str()),
                         Error);
  const FlashAttentionMetadataBuilder b(AttentionType::kDecoder, 16, 4);
  CHECK(b.decode_threshold() == 4);
  CHECK(b.cudagraph_support() == CudaGraphSupport::kUniformBatch);
  CHECK(std::string(to_string(b.cudagraph_support())) == "uniform batch");
  CHECK(FlashAttentionMetadataBuilder(AttentionType::kEncoderOnly, 16, 4).cudagraph_support() ==
        CudaGraphSupport::kNever);
  CHECK(FlashAttentionMetadataBuilder(AttentionType::kEncoderDecoder, 16, 4).cudagraph_support() ==
        CudaGraphSupport::kUniformBatch);
  // Every request exactly 4 tokens (padded ones too, seq_len 0): a graph's batch.
  const auto uniform = batch({4, 4, 4}, {9, 300, 0}, 16);
  CHECK(b.can_run_in_cudagraph(uniform));
  const auto f = b.build_for_cudagraph_capture(uniform);
  CHECK(f.for_cudagraph);
  CHECK(f.common.max_query_len == 4);
  CHECK(f.split == DecodePrefillSplit{3, 0, 12, 0});
  // A request with fewer tokens (fewer drafts) is a decode but not a uniform batch: eager.
  const auto ragged = batch({4, 2, 4}, {9, 30, 40});
  CHECK_FALSE(b.can_run_in_cudagraph(ragged));
  CHECK(b.build(0, ragged).split == DecodePrefillSplit{3, 0, 10, 0});
  CHECK_THROWS_WITH_AS(b.build_for_cudagraph_capture(ragged),
                       doctest::Contains("uniform decode batches of 4 token(s) a request"), Error);
  // Requests above the threshold are prefills; single-token requests are decodes too.
  const auto mixed = batch({4, 1, 5}, {9, 30, 40});
  CHECK_FALSE(b.can_run_in_cudagraph(mixed));
  CHECK(b.build(0, mixed).split == DecodePrefillSplit{2, 1, 5, 5});
  // The single-token builder keeps vLLM's rule: a request of 4 tokens is a prefill there.
  CHECK(FlashAttentionMetadataBuilder().build(0, uniform).split == DecodePrefillSplit{0, 3, 0, 12});
}

TEST_CASE("flash metadata builder: mixed graphs (any batch, split on the device)") {
  for (int q : {1, 4}) {
    INFO("decode_query_len " << q);
    const FlashAttentionMetadataBuilder b(AttentionType::kDecoder, 16, q, true);
    CHECK(b.mixed_graphs());
    CHECK(b.cudagraph_support() == CudaGraphSupport::kAlways);
    CHECK(std::string(to_string(b.cudagraph_support())) == "always");
    // Decodes first, then prefills: a mixed graph's batch, launched with device_split.
    const auto mixed = batch({1, q, 7, 30}, {9, 40, 7, 300}, 64);
    CHECK(b.can_run_in_cudagraph(mixed));
    CHECK_FALSE(b.is_uniform_decode(mixed));
    const auto f = b.build_for_cudagraph_capture(mixed);
    CHECK(f.for_cudagraph);
    CHECK(f.device_split);
    CHECK(f.split.num_prefills == 2);
    // Prefills only, too.
    CHECK(b.can_run_in_cudagraph(batch({40}, {40})));
    // A uniform decode batch keeps its own capture (no device split).
    const auto uniform = batch({q, q}, {9, 30});
    CHECK(b.is_uniform_decode(uniform));
    CHECK_FALSE(b.build_for_cudagraph_capture(uniform).device_split);
    // A decode after a prefill breaks vLLM's order: not for a graph, and the build says why.
    const auto unordered = batch({30, 1}, {30, 9});
    CHECK_FALSE(b.can_run_in_cudagraph(unordered));
    CHECK_THROWS_AS(b.build_for_cudagraph_capture(unordered), Error);
  }
  CHECK(
      FlashAttentionMetadataBuilder(AttentionType::kEncoderOnly, 16, 1, true).cudagraph_support() ==
      CudaGraphSupport::kNever);
  CHECK_FALSE(FlashAttentionMetadataBuilder(AttentionType::kEncoderOnly, 16, 1, true)
                  .can_run_in_cudagraph(batch({40}, {40})));
  CHECK(FlashAttentionMetadataBuilder(AttentionType::kEncoderDecoder, 16, 1, true)
            .cudagraph_support() == CudaGraphSupport::kAlways);
  // Without mixed_graphs nothing changes.
  CHECK_FALSE(FlashAttentionMetadataBuilder().mixed_graphs());
  CHECK_FALSE(FlashAttentionMetadataBuilder().can_run_in_cudagraph(batch({1, 7}, {9, 7})));
}
