// SPDX-License-Identifier: Apache-2.0
// Attention types (issue 11): the non-causal and dense-KV spec axes, the specs each
// AttentionType gets, the argument checks of encoder_attention and multi_head_attention (before
// any device is touched), the metadata builder per type, and NVRTC builds of the new kernels.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

namespace {

// Views of a fake, 16-byte aligned device address: checks only, nothing is launched.
void* const kFake = reinterpret_cast<void*>(uintptr_t{1} << 20);

TensorView bf16(std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(kFake, ScalarType::kBFloat16, shape);
}
TensorView i32(std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(kFake, ScalarType::kInt32, shape);
}

AttentionLayerConfig layer(AttentionType type) {
  AttentionLayerConfig c;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.head_size = 128;
  c.block_size = 32;
  c.max_model_len = 4096;
  c.max_num_seqs = 8;
  c.arch = 90;
  c.attn_type = type;
  return c;
}

}  // namespace

TEST_CASE("attention types: the non-causal and dense-KV suffixes parse and round-trip") {
  for (const char* text : {"prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc",
                           "prefill_h72_b32_fp16_kve4m3_g2_swa0_cap1_hnd_sm80_nc",
                           "prefill_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_alibi_sink_nc",
                           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_dense",
                           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dense",
                           "prefill_h96_b64_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_chk"}) {
    INFO(text);
    const AttentionSpec s = AttentionSpec::parse(text);
    CHECK(s.to_string() == text);
    CHECK(s.non_causal == (std::string(text).find("_nc") != std::string::npos));
    CHECK(s.dense_kv == (std::string(text).find("_dense") != std::string::npos));
  }
  // Strings from before the axes parse unchanged, as causal paged kernels.
  for (const char* text : {"prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
                           "decode_h128_b16_bf16_kvauto_g4_swa1_cap0_nhd_sm90_chk",
                           "prefill_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_alibi_sink",
                           "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"}) {
    INFO(text);
    const AttentionSpec s = AttentionSpec::parse(text);
    CHECK(s.to_string() == text);
    CHECK_FALSE(s.non_causal);
    CHECK_FALSE(s.dense_kv);
  }
  // The suffixes keep their order: _nc after _sink, _dense after _nc, _chk last.
  CHECK_THROWS_AS(
      AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dense_nc"), Error);
  CHECK_THROWS_AS(AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_chk_nc"),
                  Error);
}

TEST_CASE("attention types: invalid combinations are errors naming the spec") {
  const std::pair<const char*, const char*> bad[] = {
      {"decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc",
       "the decode kernel does not depend on non-causal (nc); use no _nc"},
      {"cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_nc",
       "the cache write kernel does not depend on non-causal (nc)"},
      {"prefill_h128_b16_bf16_kvauto_g4_swa1_cap0_nhd_sm90_nc", "sliding window"},
      {"decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dense", "dense KV"},
      {"prefill_h128_b32_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_dense",
       "dense KV (_dense) reads no paged cache: the dense-KV prefill kernel does not depend on "
       "block size (b32); use b16"},
      {"prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_nc_dense",
       "does not depend on KV cache dtype (kve4m3); use kvauto"},
      {"prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_hnd_sm90_nc_dense",
       "does not depend on KV layout (hnd); use nhd"},
      {"prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_dense_chk", "no _chk"}};
  for (const auto& entry : bad) {
    // Named copies, not structured bindings: INFO captures them in a lambda (C++17 refuses
    // to capture a structured binding; clang says so).
    const auto& text = entry.first;
    const auto& why = entry.second;
    INFO(text);
    CHECK_THROWS_WITH_AS(AttentionSpec::parse(text), doctest::Contains(text), Error);
    CHECK_THROWS_WITH_AS(AttentionSpec::parse(text), doctest::Contains(why), Error);
  }
}

TEST_CASE("attention types: each type's kernels") {
  const std::string causal = "prefill_h128_b32_bf16_kvauto_g4_swa0_cap0_nhd_sm90";
  const AttentionLayerConfig dec = layer(AttentionType::kDecoder);
  CHECK(spec_for(dec, KernelKind::kPrefill).to_string() == causal);
  for (AttentionType t : {AttentionType::kEncoder, AttentionType::kEncoderDecoder}) {
    INFO(to_string(t));
    const AttentionLayerConfig c = layer(t);
    CHECK(attention_config_problem(c).empty());
    CHECK(spec_for(c, KernelKind::kPrefill).to_string() == causal + "_nc");
    // A decode query sees every key already: the same decode and cache write kernels.
    CHECK(spec_for(c, KernelKind::kDecode) == spec_for(dec, KernelKind::kDecode));
    CHECK(spec_for(c, KernelKind::kCacheWrite) == spec_for(dec, KernelKind::kCacheWrite));
    AttentionLayerConfig w = c;
    w.window = 128;
    CHECK(attention_config_problem(w).find("window 128") != std::string::npos);
    CHECK(attention_config_problem(w).find(to_string(t)) != std::string::npos);
  }
  // Encoder-only: no cache, one canonical dense kernel whatever the cache settings say.
  AttentionLayerConfig eo = layer(AttentionType::kEncoderOnly);
  eo.kv_dtype = KvDType::kFp8E4M3;
  eo.layout = KvLayout::kHND;
  eo.check_bounds = true;
  CHECK(attention_config_problem(eo).empty());
  CHECK(spec_for(eo, KernelKind::kPrefill).to_string() ==
        "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_dense");
  AttentionLayerConfig bad = dec;
  bad.attn_type = static_cast<AttentionType>(7);
  CHECK(attention_config_problem(bad).find("attn_type 7") != std::string::npos);
  CHECK(std::string(to_string(AttentionType::kEncoderOnly)) == "encoder_only");
  CHECK(std::string(to_string(AttentionType::kEncoderDecoder)) == "encoder_decoder");
  CHECK(dec != eo);  // attn_type is one of fields()
}

TEST_CASE("attention types: encoder_attention and multi_head_attention name the bad argument") {
  test::TempKernelCache cache;
  const auto qsl = i32({3});
  // Rank, dtype, heads, strides: each refused before any device work.
  CHECK_THROWS_WITH_AS(encoder_attention(bf16({8, 128}), bf16({8, 4, 128}), bf16({8, 4, 128}),
                                         bf16({8, 16, 128}), qsl, 4, 0.1f, nullptr, cache),
                       doctest::Contains("query"), Error);
  CHECK_THROWS_WITH_AS(
      encoder_attention(bf16({8, 16, 128}),
                        TensorView::contiguous(kFake, ScalarType::kFloat16, {8, 4, 128}),
                        bf16({8, 4, 128}), bf16({8, 16, 128}), qsl, 4, 0.1f, nullptr, cache),
      doctest::Contains("key dtype"), Error);
  CHECK_THROWS_WITH_AS(encoder_attention(bf16({8, 16, 128}), bf16({8, 4, 128}),
                                         TensorView::strided(kFake, ScalarType::kBFloat16,
                                                             {8, 4, 128}, {1024, 128, 1}),
                                         bf16({8, 16, 128}), qsl, 4, 0.1f, nullptr, cache),
                       doctest::Contains("value"), Error);
  CHECK_THROWS_WITH_AS(encoder_attention(bf16({8, 12, 128}), bf16({8, 8, 128}), bf16({8, 8, 128}),
                                         bf16({8, 12, 128}), qsl, 4, 0.1f, nullptr, cache),
                       doctest::Contains("12 heads"), Error);
  CHECK_THROWS_WITH_AS(
      encoder_attention(bf16({8, 16, 128}), bf16({8, 4, 128}), bf16({8, 4, 128}),
                        bf16({8, 16, 128}), TensorView::contiguous(kFake, ScalarType::kInt64, {3}),
                        4, 0.1f, nullptr, cache),
      doctest::Contains("query_start_loc"), Error);
  CHECK_THROWS_WITH_AS(encoder_attention(bf16({8, 16, 128}), bf16({8, 4, 128}), bf16({8, 4, 128}),
                                         bf16({8, 16, 128}), qsl, -1, 0.1f, nullptr, cache),
                       doctest::Contains("max_query_len"), Error);
  CHECK_THROWS_WITH_AS(encoder_attention(bf16({8, 16, 128}), bf16({8, 4, 128}), bf16({8, 4, 128}),
                                         bf16({8, 16, 128}), qsl, 4, 0.0f, nullptr, cache),
                       doctest::Contains("scale"), Error);

  CHECK_THROWS_WITH_AS(
      multi_head_attention(bf16({2, 8, 128}), bf16({2, 8, 4, 128}), bf16({2, 8, 4, 128}),
                           bf16({2, 8, 16, 128}), 0.1f, nullptr, cache),
      doctest::Contains("q "), Error);
  // A batch stride that is not seq_len x the token stride cannot be flattened.
  const auto gappy =
      TensorView::strided(kFake, ScalarType::kBFloat16, {2, 8, 4, 128}, {8192, 512, 128, 1});
  CHECK_THROWS_WITH_AS(multi_head_attention(bf16({2, 8, 16, 128}), gappy, bf16({2, 8, 4, 128}),
                                            bf16({2, 8, 16, 128}), 0.1f, nullptr, cache),
                       doctest::Contains("k "), Error);
  CHECK_THROWS_WITH_AS(
      multi_head_attention(bf16({2, 8, 16, 128}), bf16({3, 8, 4, 128}), bf16({3, 8, 4, 128}),
                           bf16({2, 8, 16, 128}), 0.1f, nullptr, cache),
      doctest::Contains("batch"), Error);
  CHECK_THROWS_WITH_AS(
      multi_head_attention(bf16({2, 8, 16, 128}), bf16({2, 8, 4, 128}), bf16({2, 8, 4, 128}),
                           bf16({2, 7, 16, 128}), 0.1f, nullptr, cache),
      doctest::Contains("out"), Error);
  CHECK(cache.stats().compiles == 0);
}

TEST_CASE("attention types: the metadata builder per type (vLLM v1's builders)") {
  // Three requests: the first two decode (their encoder KV is cached), the last one starts.
  CommonAttentionMetadata m = CommonAttentionMetadata::make(
      {1, 1, 3}, {5, 9, 3}, {7, 8, 0, 1, 2, 0, 4, 5, 6}, 3, {70, 130, 64, 65, 66});
  m.encoder_seq_lens = {20, 17, 33};
  const FlashAttentionMetadataBuilder cross(AttentionType::kEncoderDecoder, 16);
  const FlashAttentionMetadata f = cross.build(0, m);
  CHECK_FALSE(f.common.causal);
  CHECK(f.common.seq_lens == std::vector<int32_t>{20, 17, 33});
  CHECK(f.common.max_seq_len == 33);
  CHECK(f.split.num_decodes == 2);
  CHECK(f.split.num_prefills == 1);
  // Only the starting request writes its 33 encoder tokens: blocks 4, 5, 6 of 16.
  REQUIRE(f.common.slot_mapping.size() == 33);
  CHECK(f.common.slot_mapping[0] == 4 * 16);
  CHECK(f.common.slot_mapping[16] == 5 * 16);
  CHECK(f.common.slot_mapping[32] == 6 * 16);
  CHECK(cross.cudagraph_support() == CudaGraphSupport::kUniformSingleTokenDecode);
  m.encoder_seq_lens = {20, 17};
  CHECK_THROWS_WITH_AS(cross.build(0, m), doctest::Contains("encoder_seq_lens"), Error);
  m.encoder_seq_lens = {20, 17, 49};
  CHECK_THROWS_WITH_AS(cross.build(0, m), doctest::Contains("encoder_seq_lens[2] = 49"), Error);

  const FlashAttentionMetadataBuilder encoder_only(AttentionType::kEncoderOnly);
  const FlashAttentionMetadata e = encoder_only.build(0, m);
  CHECK_FALSE(e.common.causal);
  CHECK(e.split.num_decodes == 0);
  CHECK(e.split.num_prefills == 3);
  CHECK(e.split.num_prefill_tokens == 5);
  CHECK(encoder_only.cudagraph_support() == CudaGraphSupport::kNever);
  CHECK_FALSE(encoder_only.can_run_in_cudagraph(m));
  CHECK_THROWS_AS(encoder_only.build_for_cudagraph_capture(m), Error);

  const FlashAttentionMetadata enc =
      FlashAttentionMetadataBuilder(AttentionType::kEncoder).build(0, m);
  CHECK_FALSE(enc.common.causal);
  CHECK(enc.common.seq_lens == m.seq_lens);
  CHECK(FlashAttentionMetadataBuilder().build(0, m).common.causal);
  CHECK_THROWS_WITH_AS(FlashAttentionMetadataBuilder(AttentionType::kDecoder, 0),
                       doctest::Contains("block_size 0"), Error);
}

TEST_CASE("attention types: NVRTC builds every new prefill variant for sm_80 and sm_90") {
  test::TempKernelCache cache;
  std::vector<AttentionSpec> specs;
  for (int arch : {80, 90})
    for (const char* base : {"prefill_h64_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm",
                             "prefill_h128_b16_fp16_kvauto_g2_swa0_cap0_nhd_sm",
                             "prefill_h72_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm",
                             "prefill_h256_b16_bf16_kvauto_g8_swa0_cap1_nhd_sm"})
      for (const char* suffix : {"_nc", "_nc_dense", "_alibi_sink_nc", "_alibi_sink_nc_dense"})
        specs.push_back(AttentionSpec::parse(base + std::to_string(arch) + suffix));
  for (const char* text : {"prefill_h128_b32_bf16_kve4m3_g4_swa0_cap1_hnd_sm90_nc",
                           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_chk",
                           "prefill_h96_b16_fp16_kvauto_g4_swa1_cap0_nhd_sm80_dense"})
    specs.push_back(AttentionSpec::parse(text));
  for (const auto& r : cache.precompile(specs))
    CHECK_MESSAGE(r.error.empty(), r.spec << ": " << r.error);
  CHECK(cache.stats().compiles == specs.size());
}
