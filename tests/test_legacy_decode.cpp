// SPDX-License-Identifier: Apache-2.0
// The decode kernel over vLLM's legacy PagedAttention caches (spec layout "legacy") on the host:
// spec strings, NVRTC builds across dtypes, head sizes, block sizes and axes, the v1/v2 rule,
// and every argument check of paged_attention_v1 / v2 (all before any device use).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
#include "templates/params.h"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;

TEST_CASE("legacy decode: specs parse, round-trip and render the legacy layout") {
  const char* text = "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90";
  const AttentionSpec s = AttentionSpec::parse(text);
  CHECK(s.layout == KvLayout::kLegacy);
  CHECK(s.kind == KernelKind::kDecode);
  CHECK(s.to_string() == text);
  CHECK(render_kernel(s).source.find("constexpr int KV_LAYOUT = 2;") != std::string::npos);
  // fp8 needs whole 16-element chunks; vLLM's block size 8 with 16-bit and fp32 caches only.
  CHECK(error_of([] {
          AttentionSpec::parse("decode_h120_b16_fp16_kve4m3_g1_swa0_cap0_legacy_sm90");
        }).find("head size 120 is not supported by the legacy layout") != std::string::npos);
  CHECK(AttentionSpec::parse("decode_h128_b8_fp16_kvauto_g1_swa0_cap0_legacy_sm90").block_size ==
        8);
  CHECK(
      AttentionSpec::parse("decode_h64_b8_fp32_kvauto_g4_swa1_cap1_legacy_sm80_alibi_sink").dtype ==
      DType::kFloat32);
  CHECK(
      error_of([] { AttentionSpec::parse("decode_h128_b8_fp16_kve5m2_g1_swa0_cap0_legacy_sm90"); })
          .find("block size 8 is not supported by the decode kernel with the legacy layout and "
                "KV cache dtype e5m2") != std::string::npos);
  for (const char* bad : {"decode_h128_b16_fp32_kve4m3_g1_swa0_cap0_legacy_sm90",
                          "decode_h128_b16_fp32_kvauto_g1_swa0_cap0_legacy_sm90_mt",
                          "decode_h128_b16_fp32_kvauto_g1_swa0_cap0_legacy_sm90_bsp",
                          "decode_h128_b16_fp32_kvauto_g1_swa0_cap0_legacy_sm90_chk"})
    CHECK_MESSAGE(error_of([&] { AttentionSpec::parse(bad); })
                          .find("the fp32 legacy decode kernel takes KV cache dtype auto (fp32), "
                                "one query token, dense attention and no checked mode; "
                                "supported: kvauto without _mt, _bsp, _chk") != std::string::npos,
                  bad);
  // float32 renders the CUDA-core kernel (templates/decode_f32.cu), same entry point.
  const KernelSource f32 =
      render_kernel(AttentionSpec::parse("decode_h128_b16_fp32_kvauto_g4_swa0_cap0_legacy_sm90"));
  CHECK(f32.entry == "graphattn_decode");
  CHECK(f32.source.find("F32_KEYS") != std::string::npos);
  CHECK(render_kernel(s).source.find("F32_KEYS") == std::string::npos);
}

TEST_CASE("legacy decode: NVRTC builds every head size, dtype and block size") {
  std::vector<std::string> specs;
  for (int h : {32, 64, 80, 96, 112, 120, 128, 192, 256})
    for (int b : {16, 32}) {
      specs.push_back("decode_h" + std::to_string(h) + "_b" + std::to_string(b) +
                      (h % 16 == 0 ? "_bf16_kvauto_g4" : "_fp16_kvauto_g1") +
                      "_swa0_cap0_legacy_sm90");
      if (h % 16 == 0 && b == 16)
        specs.push_back("decode_h" + std::to_string(h) +
                        "_b16_bf16_kve4m3_g8_swa0_cap0_legacy_sm90");
    }
  for (const std::string& text : specs) {
    INFO(text);
    test::check_cubin_builds(render_kernel(AttentionSpec::parse(text)));
  }
}

TEST_CASE("legacy decode: NVRTC builds the axes (fp8, window, cap, ALiBi, sinks, mt, chk, bsp)") {
  for (const char* text : {"decode_h128_b8_bf16_kvauto_g4_swa0_cap0_legacy_sm90",
                           "decode_h96_b8_fp16_kvauto_g8_swa1_cap1_legacy_sm80_alibi_sink_chk",
                           "decode_h256_b8_bf16_kvauto_g2_swa0_cap0_legacy_sm90_mt_bsp",
                           "decode_h128_b16_fp32_kvauto_g4_swa0_cap0_legacy_sm90",
                           "decode_h32_b8_fp32_kvauto_g20_swa1_cap1_legacy_sm80_alibi_sink",
                           "decode_h256_b32_fp32_kvauto_g1_swa0_cap0_legacy_sm90",
                           "decode_h128_b32_fp16_kve5m2_g1_swa1_cap1_legacy_sm80_alibi",
                           "decode_h64_b16_bf16_kve4m3_g16_swa0_cap0_legacy_sm90_sink_mt",
                           "decode_h80_b16_bf16_kvauto_g8_swa1_cap0_legacy_sm90_alibi_sink",
                           "decode_h256_b16_fp16_kvauto_g2_swa0_cap0_legacy_sm90_mt_chk",
                           "decode_h192_b32_bf16_kve4m3_g32_swa0_cap1_legacy_sm89",
                           "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_bsp",
                           "decode_h64_b32_fp16_kve4m3_g8_swa0_cap0_legacy_sm90_alibi_bsp"}) {
    INFO(text);
    test::check_cubin_builds(render_kernel(AttentionSpec::parse(text)));
  }
}

TEST_CASE("legacy decode: vLLM's v1-vs-v2 rule and partition count") {
  CHECK(paged_attention_num_partitions(1) == 1);
  CHECK(paged_attention_num_partitions(512) == 1);
  CHECK(paged_attention_num_partitions(513) == 2);
  CHECK(paged_attention_num_partitions(32768) == 64);
  CHECK(use_paged_attention_v1(512, 1, 8));      // one partition
  CHECK(!use_paged_attention_v1(4096, 8, 32));   // 256 rows of 8 partitions
  CHECK(use_paged_attention_v1(4096, 64, 32));   // 2048 rows > 512
  CHECK(!use_paged_attention_v1(8193, 64, 32));  // past 8192: always v2
  CHECK(use_paged_attention_v1(8192, 64, 32));
  CHECK(!use_paged_attention_v1(1024, 16, 32));  // exactly 512 rows: v2
  CHECK(use_paged_attention_v1(1024, 17, 32));
}

namespace {

// A valid v1 / v2 call on fake device addresses (never dereferenced: every case fails a check,
// or has no sequence), which each case changes in one place.
struct LegacyCall {
  ScalarType dt = ScalarType::kBFloat16;
  TensorView kv = TensorView::contiguous(test::fake_device(0x100000), dt, {2, 10, 16 * 2 * 128});
  PagedKvCache caches = split_paged_kv_cache(kv, 2, 128);
  TensorView query = TensorView::contiguous(test::fake_device(0x400000), dt, {3, 8, 128});
  TensorView out = TensorView::contiguous(test::fake_device(0x480000), dt, {3, 8, 128});
  TensorView block_tables =
      TensorView::contiguous(test::fake_device(0x500000), ScalarType::kInt32, {3, 5});
  TensorView seq_lens =
      TensorView::contiguous(test::fake_device(0x510000), ScalarType::kInt32, {3});
  TensorView alibi;  // none
  int num_kv_heads = 2, block_size = 16, max_seq_len = 1000;
  float scale = 0.1f;
  std::string kv_cache_dtype = "auto";
  int tp_rank = 0, vert_stride = 1, local_blocks = 0, sparse_block = 64;
  // v2's temporaries, for max_seq_len 1000: 2 partitions.
  TensorView exp_sums =
      TensorView::contiguous(test::fake_device(0x600000), ScalarType::kFloat32, {3, 8, 2});
  TensorView max_logits = exp_sums;
  TensorView tmp_out = TensorView::contiguous(test::fake_device(0x700000), dt, {3, 8, 2, 128});

  std::string v1() const {
    return error_of([&] {
      paged_attention_v1(out, query, caches.key_cache, caches.value_cache, num_kv_heads, scale,
                         block_tables, seq_lens, block_size, max_seq_len, alibi, kv_cache_dtype,
                         1.0f, 1.0f, tp_rank, local_blocks, vert_stride, sparse_block, 0, nullptr);
    });
  }
  std::string v2() const {
    return error_of([&] {
      paged_attention_v2(out, exp_sums, max_logits, tmp_out, query, caches.key_cache,
                         caches.value_cache, num_kv_heads, scale, block_tables, seq_lens,
                         block_size, max_seq_len, alibi, kv_cache_dtype, 1.0f, 1.0f, tp_rank,
                         local_blocks, vert_stride, sparse_block, 0, nullptr);
    });
  }
  // This call with no sequence (every check passes and nothing launches, or a check fails).
  LegacyCall emptied() const {
    LegacyCall c = *this;
    c.query.shape[0] = c.out.shape[0] = c.seq_lens.shape[0] = c.block_tables.shape[0] = 0;
    c.exp_sums.shape[0] = c.max_logits.shape[0] = c.tmp_out.shape[0] = 0;
    return c;
  }
  // Every check fails the same way in both versions.
  void expect(const std::string& part) const {
    const std::string e1 = v1(), e2 = v2();
    INFO(part);
    CHECK_MESSAGE(e1.find(part) != std::string::npos, e1);
    CHECK_MESSAGE(e2.find(part) != std::string::npos, e2);
  }
};

}  // namespace

TEST_CASE("legacy decode: paged_attention_v1 / v2 name every bad argument before any device use") {
  {
    const LegacyCall c = LegacyCall().emptied();  // passes every check and launches nothing
    CHECK(c.v1() == "(no error)");
    CHECK(c.v2() == "(no error)");
  }
  {
    LegacyCall c;
    c.kv_cache_dtype = "fp8_e4m3fn";
    c.expect(
        "kv_cache_dtype \"fp8_e4m3fn\" is not supported; supported: auto, fp8, fp8_e4m3, "
        "fp8_e5m2");
    c.kv_cache_dtype = "fp8";
    c.expect("kv_cache_dtype \"fp8\" does not match the caches' bf16 elements");
  }
  {
    LegacyCall c;  // fp8 caches need the fp8 names
    c.kv = TensorView::contiguous(test::fake_device(0x100000), ScalarType::kFloat8E5M2,
                                  {2, 10, 16 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.kv_cache_dtype = "auto";
    c.expect("kv_cache_dtype \"auto\" does not match the caches' fp8_e5m2 elements");
    c.kv_cache_dtype = "fp8_e4m3";
    c.expect("does not match the caches' fp8_e5m2");
  }
  {
    LegacyCall c;
    c.num_kv_heads = 4;
    c.expect("num_kv_heads 4 differs from the caches' 2");
  }
  {
    LegacyCall c;
    c.block_size = 32;
    c.expect("block_size 32 differs from the caches' 16");
  }
  {
    LegacyCall c;  // vLLM's block size 8: 16-bit caches pass every check (an empty batch) ...
    c.kv = TensorView::contiguous(test::fake_device(0x100000), c.dt, {2, 10, 8 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.block_size = 8;
    CHECK(c.emptied().v1() == "(no error)");
    CHECK(c.emptied().v2() == "(no error)");
    c.kv = TensorView::contiguous(test::fake_device(0x100000), c.dt, {2, 10, 24 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.block_size = 24;  // ... other sizes do not
    c.expect(
        "block_size 24 is not supported; supported: 8 (16-bit and float32 caches), 16..256, "
        "multiples of 16");
    // fp8 caches: a 16-token value unit would span two blocks of 8.
    c.kv = TensorView::contiguous(test::fake_device(0x100000), ScalarType::kFloat8E4M3,
                                  {2, 10, 8 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.block_size = 8;
    c.kv_cache_dtype = "fp8";
    c.expect(
        "block size 8 is not supported by the decode kernel with the legacy layout and KV cache "
        "dtype e4m3; supported: 16, 32, ..., 256 (multiples of 16; 8: cache_write, and decode "
        "with the legacy layout and KV cache dtype auto)");
  }
  {
    LegacyCall c;  // float32 queries and caches (vLLM's float32) pass every check ...
    c.kv = TensorView::contiguous(test::fake_device(0x100000), ScalarType::kFloat32,
                                  {2, 10, 8 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.block_size = 8;
    c.query.dtype = c.out.dtype = c.tmp_out.dtype = ScalarType::kFloat32;
    CHECK(c.emptied().v1() == "(no error)");
    CHECK(c.emptied().v2() == "(no error)");
    c.vert_stride = 8;  // ... but not with a block-sparse pattern
    c.local_blocks = 2;
    c.expect(
        "the fp32 legacy decode kernel takes KV cache dtype auto (fp32), one query token, "
        "dense attention and no checked mode");
  }
  {
    LegacyCall c;  // head size 24: a multiple of x, not a graphattn head size
    c.kv = TensorView::contiguous(test::fake_device(0x100000), c.dt, {2, 10, 16 * 2 * 24});
    c.caches = split_paged_kv_cache(c.kv, 2, 24);
    c.query.shape[2] = c.out.shape[2] = c.tmp_out.shape[3] = 24;
    c.expect("head size 24 is not supported");
  }
  {
    LegacyCall c;
    c.query.shape[2] = c.out.shape[2] = c.tmp_out.shape[3] = 64;
    c.expect("has head size 64 but the KV cache holds head size 128");
  }
  {
    LegacyCall c;
    c.query.shape[1] = 7;
    c.out.shape[1] = c.exp_sums.shape[1] = c.max_logits.shape[1] = c.tmp_out.shape[1] = 7;
    c.expect("query has 7 heads, not a positive multiple of the KV cache's 2 KV heads");
  }
  {
    LegacyCall c;
    c.out.shape[0] = 4;
    c.expect("out bf16[4, 8, 128]");
    c.out = c.query;
    c.out.dtype = ScalarType::kFloat16;
    c.tmp_out.dtype = ScalarType::kFloat16;
    c.expect("output dtype fp16 differs from query dtype bf16");
  }
  {
    LegacyCall c;
    c.query.dtype = c.out.dtype = c.tmp_out.dtype = ScalarType::kFloat32;
    c.expect("fp32");
  }
  {
    LegacyCall c;
    c.seq_lens.shape[0] = 2;
    c.expect("seq_lens int32[2]");
    c.seq_lens.shape[0] = 3;
    c.seq_lens.dtype = ScalarType::kInt64;
    c.expect("seq_lens int64[3]");
    c.expect("must be int32 with a contiguous last dimension");
  }
  {
    LegacyCall c;
    c.block_tables.shape[0] = 2;
    c.expect("block_tables int32[2, 5]");
    c.block_tables.shape[0] = 3;
    c.block_tables.strides[1] = 2;
    c.expect("must be int32 with a contiguous last dimension");
  }
  {
    LegacyCall c;
    c.max_seq_len = 0;
    c.exp_sums.shape[2] = c.max_logits.shape[2] = c.tmp_out.shape[2] = 1;
    c.expect("max_seq_len 0 must be >= 1");
  }
  {
    LegacyCall c;
    c.scale = 0.0f;
    c.expect("scale 0.000000 must be finite and > 0");
    c.scale = 0.1f;
    c.kv = TensorView::contiguous(test::fake_device(0x100000), ScalarType::kFloat8E4M3,
                                  {2, 10, 16 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.kv_cache_dtype = "fp8";
    CHECK(error_of([&] {
            paged_attention_v1(c.out, c.query, c.caches.key_cache, c.caches.value_cache, 2, 0.1f,
                               c.block_tables, c.seq_lens, 16, 1000, c.alibi, "fp8", -1.0f, 1.0f, 0,
                               0, 0, 0, 0, nullptr);
          }).find("fp8 KV cache needs positive k_scale and v_scale, got -1.000000") !=
          std::string::npos);
  }
  {
    LegacyCall c;
    c.alibi = TensorView::contiguous(test::fake_device(0x800000), ScalarType::kFloat32, {7});
    c.expect("alibi_slopes fp32[7]");
    c.expect("must be a contiguous fp32 [num_heads] tensor with num_heads = 8");
    c.alibi = TensorView::contiguous(test::fake_device(0x800000), ScalarType::kFloat16, {8});
    c.expect("alibi_slopes fp16[8]");
  }
  {
    LegacyCall c;
    c.vert_stride = 8;  // block-sparse, but local_blocks 0
    c.expect(
        "block-sparse arguments (local_blocks 0, vert_stride 8, block_size 64, "
        "head_sliding_step 0, tp_rank 0): ");
    c.expect("local_blocks 0 is not supported; supported: >= 1");
    c.vert_stride = 1;
    c.tp_rank = -1;
    c.expect("tp_rank -1 must be >= 0");
  }
  {
    LegacyCall c;  // a valid block-sparse pattern passes every check (an empty batch)
    c.vert_stride = 8;
    c.local_blocks = 2;
    c.query.shape[0] = c.out.shape[0] = c.seq_lens.shape[0] = c.block_tables.shape[0] = 0;
    c.exp_sums.shape[0] = c.max_logits.shape[0] = c.tmp_out.shape[0] = 0;
    CHECK(c.v1() == "(no error)");
    CHECK(c.v2() == "(no error)");
    c.sparse_block = 24;  // not a multiple of 16
    c.expect("block_size 24");
  }
  {
    LegacyCall c;  // a flash-layout half is not a legacy key cache
    c.caches.key_cache =
        TensorView::contiguous(test::fake_device(0x100000), c.dt, {10, 16, 2, 128});
    c.expect("key_cache");
  }
}

TEST_CASE("legacy decode: paged_attention_v2 checks vLLM's temporaries") {
  {
    LegacyCall c;
    c.exp_sums.shape[2] = c.max_logits.shape[2] = c.tmp_out.shape[2] = 1;  // 1000 tokens need 2
    CHECK_MESSAGE(c.v2().find("paged_attention_v2: exp_sums fp32[3, 8, 1] strides [16, 2, 1] must "
                              "be fp32 [num_seqs 3, "
                              "num_heads 8, max_num_partitions >= 2] (partitions of 512 tokens, as "
                              "exp_sums' 1)") == 0,
                  c.v2());
    CHECK(c.v1().empty() == false);  // v1 has no temporaries; it fails later, at the device
  }
  {
    LegacyCall c;
    c.max_logits =
        TensorView::contiguous(test::fake_device(0x600000), ScalarType::kFloat32, {3, 8, 3});
    CHECK(c.v2().find("max_logits fp32[3, 8, 3]") != std::string::npos);
  }
  {
    LegacyCall c;
    c.tmp_out.dtype = ScalarType::kFloat32;
    CHECK(c.v2().find("tmp_out fp32[3, 8, 2, 128]") != std::string::npos);
    CHECK(c.v2().find("must be bf16 [num_seqs 3, num_heads 8, max_num_partitions >= 2, head_size "
                      "128]") != std::string::npos);
  }
  {
    LegacyCall c;
    c.tmp_out = c.exp_sums;
    CHECK(c.v2().find("tmp_out must be 4-d") != std::string::npos);
  }
  {
    LegacyCall c;
    c.exp_sums.shape[1] = 4;
    CHECK_MESSAGE(c.v2().find("paged_attention_v2: exp_sums fp32[3, 4, 2]") == 0, c.v2());
  }
  {
    LegacyCall c;  // more partitions than needed are fine (vLLM sizes them for its max_seq_len)
    c.exp_sums.shape[2] = c.max_logits.shape[2] = c.tmp_out.shape[2] = 4;
    c.query.shape[0] = c.out.shape[0] = c.seq_lens.shape[0] = c.block_tables.shape[0] = 0;
    c.exp_sums.shape[0] = c.max_logits.shape[0] = c.tmp_out.shape[0] = 0;
    CHECK(c.v2() == "(no error)");
  }
}

// A host model of the legacy tile loads and fragment reads of templates/decode.cu (its formulas
// copied here: ga_tok_of_row, ga_vt_unit, the K/V cp.async placement and the ldmatrix row
// addresses), checked against what the MMA needs by its PTX fragment layout (m16n8k16, row-major
// A: a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9];
// B: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]) and ldmatrix's (lane 8m + r gives row r of
// matrix m; thread (g, t) receives bytes 4t..4t+3 of row g of each matrix). A[m][k] is V^T: the
// dimension of MMA row m (the flash path's permutation: row g of m-tile u of group v is element
// 2u of chunk g + 8v, row g + 8 element 2u + 1) and the token of k slot k (the token in K tile
// row k, whose scores P^T's row k carries). Also: every ldmatrix and cp.async phase of 8 lanes
// touches 8 distinct 16-byte bank groups.
namespace {

int tok_of_row(bool fp8, int r) { return fp8 ? 4 * ((r & 7) >> 1) + 2 * (r >> 3) + (r & 1) : r; }
int vt_unit(int u) { return u ^ ((u >> 4) & 7); }

void check_legacy_tiles(int head_size, bool fp8) {
  INFO("head " << head_size << " fp8 " << fp8);
  const int kvb = fp8 ? 1 : 2, ce = 16 / kvb, vt_units = kvb, vt_tokens = 16 / kvb;
  const int row_bytes = ga_decode_row_bytes(head_size, kvb), chunks_pad = row_bytes / 16;
  const int live_chunks = head_size * kvb / 16, tile_bytes = 16 * row_bytes;
  // Element values: token tok, dimension d -> a distinct 16-bit code (its low byte for fp8).
  auto val = [&](int tok, int d) {
    return static_cast<unsigned>((d * 16 + tok) & (fp8 ? 0xff : 0xffff));
  };
  std::vector<unsigned char> vt(tile_bytes, 0xee), kt(tile_bytes, 0xee);
  std::vector<int> vt_written(tile_bytes / 16, 0);
  // V: unit idx (dimension d, tokens h * vt_tokens ..) lands at vt_unit(idx).
  for (int idx = 0; idx < head_size * vt_units; ++idx) {
    const int d = idx / vt_units, h = idx % vt_units;
    REQUIRE(vt_unit(idx) < tile_bytes / 16);
    ++vt_written[vt_unit(idx)];
    for (int i = 0; i < vt_tokens; ++i) {
      const unsigned x = val(h * vt_tokens + i, d);
      for (int b = 0; b < kvb; ++b) vt[vt_unit(idx) * 16 + i * kvb + b] = (x >> (8 * b)) & 0xff;
    }
  }
  for (int u = 0; u < head_size * vt_units; ++u) CHECK(vt_written[u] == 1);  // a bijection
  // cp.async phases: lanes 8p..8p+7 of one instruction write distinct bank groups.
  for (int idx0 = 0; idx0 < head_size * vt_units; idx0 += 8) {
    std::vector<int> seen;
    for (int i = idx0; i < idx0 + 8 && i < head_size * vt_units; ++i)
      seen.push_back(vt_unit(i) & 7);
    std::sort(seen.begin(), seen.end());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  }
  // K: lane idx -> (row idx & 15, chunk idx >> 4) holds token tok_of_row(row)'s chunk.
  for (int idx = 0; idx < 16 * live_chunks; ++idx) {
    const int row = idx & 15, c = idx >> 4, tok = tok_of_row(fp8, row);
    for (int e = 0; e < ce; ++e) {
      const unsigned x = val(tok, c * ce + e);
      for (int b = 0; b < kvb; ++b)
        kt[row * row_bytes + ((c ^ (row & 7)) << 4) + e * kvb + b] = (x >> (8 * b)) & 0xff;
    }
  }
  for (int idx0 = 0; idx0 < 16 * live_chunks; idx0 += 8) {
    std::vector<int> seen;
    for (int i = idx0; i < idx0 + 8; ++i) {
      const int row = i & 15, c = i >> 4;
      seen.push_back((row * row_bytes / 16 + (c ^ (row & 7))) & 7);
    }
    std::sort(seen.begin(), seen.end());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  }
  // The K read (as the flash path): thread (g, t) row g, chunk c at (c ^ g): token of row g.
  for (int g = 0; g < 8; ++g)
    for (int c = 0; c < live_chunks; ++c)
      for (int e = 0; e < ce; ++e) {
        unsigned x = 0;
        for (int b = 0; b < kvb; ++b)
          x |= kt[g * row_bytes + ((c ^ g) << 4) + e * kvb + b] << (8 * b);
        CHECK(x == val(tok_of_row(fp8, g), c * ce + e));
      }
  // The token of each k slot (the token in K tile row k) and the MMA rows' dimensions.
  auto k_tok = [&](int k) { return tok_of_row(fp8, k); };
  auto read32 = [&](int unit, int t) {
    unsigned w = 0;
    for (int b = 0; b < 4; ++b) w |= static_cast<unsigned>(vt[unit * 16 + 4 * t + b]) << (8 * b);
    return w;
  };
  const int vgroups = chunks_pad / 8, msub = ce / 2;
  for (int v = 0; v < vgroups; ++v) {
    if (8 * v >= live_chunks) continue;
    for (int u = 0; u < msub; u += fp8 ? 2 : 1) {
      // Row addresses per lane, as the kernel computes them (in 16-byte units).
      int addr[32];
      for (int lane = 0; lane < 32; ++lane) {
        const int r = lane & 7, mi = lane >> 3;
        addr[lane] = fp8 ? vt_unit((r + 8 * v) * ce + 2 * u + mi)
                         : vt_unit(((r + 8 * v) * ce + 2 * u + (mi & 1)) * 2 + (mi >> 1));
      }
      for (int m = 0; m < 4; ++m) {  // one phase per matrix: distinct bank groups
        std::vector<int> seen;
        for (int r = 0; r < 8; ++r) seen.push_back(addr[8 * m + r] & 7);
        std::sort(seen.begin(), seen.end());
        CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
      }
      for (int g = 0; g < 8; ++g)
        for (int t = 0; t < 4; ++t) {
          if (g + 8 * v >= live_chunks) continue;  // padding chunks feed discarded rows
          unsigned a[4];
          for (int m = 0; m < 4; ++m) a[m] = read32(addr[8 * m + g], t);
          // Expected A registers of m-tile uu: pairs {A[row][k], A[row][k + 1]}.
          auto pair = [&](int uu, int hi_row, int k) {
            const int d = (g + 8 * v) * ce + 2 * uu + hi_row;
            return std::pair<unsigned, unsigned>(val(k_tok(k), d), val(k_tok(k + 1), d));
          };
          auto lo16 = [](unsigned w) { return w & 0xffffu; };
          auto hi16 = [](unsigned w) { return w >> 16; };
          if (!fp8) {
            const std::pair<unsigned, unsigned> want[4] = {
                pair(u, 0, 2 * t), pair(u, 1, 2 * t), pair(u, 0, 2 * t + 8), pair(u, 1, 2 * t + 8)};
            for (int m = 0; m < 4; ++m) {
              INFO("v " << v << " u " << u << " g " << g << " t " << t << " matrix " << m);
              CHECK(lo16(a[m]) == want[m].first);
              CHECK(hi16(a[m]) == want[m].second);
            }
          } else {
            // Word m's bytes 0, 1 -> a0 / a1 (low pair), bytes 2, 3 -> a2 / a3 (high pair).
            for (int m = 0; m < 4; ++m) {
              const int uu = u + (m >> 1), hi_row = m & 1;
              const auto low = pair(uu, hi_row, 2 * t), high = pair(uu, hi_row, 2 * t + 8);
              CHECK((a[m] & 0xff) == low.first);
              CHECK(((a[m] >> 8) & 0xff) == low.second);
              CHECK(((a[m] >> 16) & 0xff) == high.first);
              CHECK((a[m] >> 24) == high.second);
            }
          }
        }
    }
  }
}

}  // namespace

TEST_CASE("legacy decode: a host model of the tile loads and MMA fragments") {
  for (int h : {32, 64, 80, 96, 112, 120, 128, 192, 256}) {
    check_legacy_tiles(h, false);
    if (h % 16 == 0) check_legacy_tiles(h, true);
  }
}
