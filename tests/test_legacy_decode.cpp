// The decode kernel over vLLM's legacy PagedAttention caches (spec layout "legacy") on the host:
// spec strings, NVRTC builds across dtypes, head sizes, block sizes and axes, the v1/v2 rule,
// and every argument check of paged_attention_v1 / v2 (all before any device use).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
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
  // fp8 needs whole 16-element chunks; vLLM's block size 8 is not a graphattn block size.
  CHECK(error_of([] {
          AttentionSpec::parse("decode_h120_b16_fp16_kve4m3_g1_swa0_cap0_legacy_sm90");
        }).find("head size 120 is not supported by the legacy layout") != std::string::npos);
  CHECK(error_of([] {
          AttentionSpec::parse("decode_h128_b8_fp16_kvauto_g1_swa0_cap0_legacy_sm90");
        }).find("block size") != std::string::npos);
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
  for (const char* text : {"decode_h128_b32_fp16_kve5m2_g1_swa1_cap1_legacy_sm80_alibi",
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
    LegacyCall c;  // an empty batch passes every check and launches nothing
    c.query.shape[0] = c.out.shape[0] = c.seq_lens.shape[0] = c.block_tables.shape[0] = 0;
    c.exp_sums.shape[0] = c.max_logits.shape[0] = c.tmp_out.shape[0] = 0;
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
    LegacyCall c;  // vLLM's block size 8
    c.kv = TensorView::contiguous(test::fake_device(0x100000), c.dt, {2, 10, 8 * 2 * 128});
    c.caches = split_paged_kv_cache(c.kv, 2, 128);
    c.block_size = 8;
    c.expect(
        "block_size 8 is not supported; supported: 16..256, multiples of 16 (vLLM's 8 is not)");
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
