// SPDX-License-Identifier: Apache-2.0
// merge_attn_states, the device-mapped copy_blocks and the cache writes' float32, block size 8
// and legacy x, on the host: their spec kinds and rules, NVRTC builds, and every refusal, which
// comes before any device use (so these run without a GPU).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/graphattn.h"
#include "graphattn/jit.hpp"
#include "graphattn/kv_blocks.hpp"
#include "graphattn/merge_states.hpp"
#include "graphattn/metadata.hpp"
#include "graphattn/paged_cache.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;
using test::fake_device;
using test::has;

namespace {

TensorView rows(uintptr_t at, ScalarType t, int64_t tokens, int64_t heads, int64_t head) {
  return TensorView::contiguous(fake_device(at), t, {tokens, heads, head});
}

TensorView lse(uintptr_t at, int64_t heads, int64_t tokens) {
  return TensorView::contiguous(fake_device(at), ScalarType::kFloat32, {heads, tokens});
}

}  // namespace

TEST_CASE("cascade ops: merge_states and block_copy specs: one canonical form each") {
  for (const char* s : {"merge_states_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "merge_states_h128_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm80",
                        "merge_states_h128_b16_fp32_kvauto_g1_swa0_cap0_nhd_sm90",
                        "block_copy_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"}) {
    INFO(s);
    CHECK(AttentionSpec::parse(s).to_string() == s);
  }
  CHECK(std::string(to_string(KernelKind::kMergeStates)) == "merge_states");
  CHECK(std::string(to_string(KernelKind::kBlockCopy)) == "block_copy");
  CHECK(std::string(to_string(DType::kFloat32)) == "fp32");
  CHECK(dtype_bytes(DType::kFloat32) == 4);
  for (const char* s : {"merge_states_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "merge_states_h128_b32_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "merge_states_h128_b16_bf16_kve4m3_g1_swa0_cap0_nhd_sm90",
                        "merge_states_h128_b16_bf16_kvauto_g2_swa0_cap0_nhd_sm90",
                        "merge_states_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_chk",
                        "block_copy_h128_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "block_copy_h128_b16_bf16_kvauto_g1_swa0_cap0_hnd_sm90"}) {
    INFO(s);
    CHECK(has(error_of([&] { AttentionSpec::parse(s); }), "kernel depends only on"));
  }
  // spec_for gives the canonical specs whatever the layer says.
  AttentionLayerConfig c;
  c.head_size = 64;
  c.block_size = 32;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.kv_dtype = KvDType::kFp8E4M3;
  c.dtype = DType::kFloat16;
  c.arch = 80;
  CHECK(spec_for(c, KernelKind::kMergeStates).to_string() ==
        "merge_states_h128_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm80");
  CHECK(spec_for(c, KernelKind::kBlockCopy).to_string() ==
        "block_copy_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm80");
}

TEST_CASE("cascade ops: fp32 and block size 8 are the cache writes' and the legacy decode's") {
  CHECK(AttentionSpec::parse("cache_write_h128_b8_fp32_kvauto_g1_swa0_cap0_nhd_sm90").dtype ==
        DType::kFloat32);
  CHECK(
      AttentionSpec::parse("cache_write_h64_b8_bf16_kve4m3_g1_swa0_cap0_legacy_sm80").block_size ==
      8);
  CHECK(
      error_of([] { AttentionSpec::parse("decode_h128_b16_fp32_kvauto_g1_swa0_cap0_nhd_sm90"); })
          .find("dtype fp32 is not supported by the decode kernel with the nhd layout; supported: "
                "fp16, bf16 (fp32: cache_write, merge_states and decode with the legacy "
                "layout)") != std::string::npos);
  CHECK(has(error_of([] {
              AttentionSpec::parse("prefill_h128_b16_fp32_kvauto_g1_swa0_cap0_legacy_sm90");
            }),
            "dtype fp32 is not supported by the prefill kernel"));
  CHECK(has(
      error_of([] { AttentionSpec::parse("kv_scale_h128_b16_fp32_kvauto_g1_swa0_cap0_nhd_sm90"); }),
      "dtype fp32 is not supported by the kv_scale kernel"));
  CHECK(has(
      error_of([] { AttentionSpec::parse("decode_h128_b8_bf16_kvauto_g1_swa0_cap0_hnd_sm90"); }),
      "block size 8 is not supported by the decode kernel with the hnd layout and KV cache dtype "
      "auto; supported: 16, 32, ..., 256 (multiples of 16; 8: cache_write, and decode with the "
      "legacy layout and KV cache dtype auto)"));
  CHECK(has(
      error_of([] { AttentionSpec::parse("prefill_h128_b8_bf16_kvauto_g1_swa0_cap0_nhd_sm90"); }),
      "block size 8 is not supported by the prefill kernel"));
  CHECK(has(error_of([] {
              AttentionSpec::parse("cache_write_h128_b24_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
            }),
            "block size 24 is not supported; supported: 16, 32, ..., 256 (multiples of 16; cache "
            "writes and legacy decode also 8)"));
  // The interleaved V cache (vLLM 0.33's reshape_and_cache(..., interleaved_v)): legacy cache
  // writes, blocks of whole kx = 16 bytes of cache elements.
  CHECK(AttentionSpec::parse("cache_write_h128_b8_bf16_kvauto_g1_swa0_cap0_legacy_sm90_iv")
            .interleaved_v);
  CHECK(AttentionSpec::parse("cache_write_h64_b8_fp32_kvauto_g1_swa0_cap0_legacy_sm80_chk_iv")
            .interleaved_v);
  CHECK(has(error_of([] {
              AttentionSpec::parse("cache_write_h128_b8_bf16_kve4m3_g1_swa0_cap0_legacy_sm90_iv");
            }),
            "block size 8 is not supported by the interleaved V cache of 1-byte elements; "
            "supported: multiples of kx = 16 (16 bytes of elements)"));
  CHECK(has(error_of([] {
              AttentionSpec::parse("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_iv");
            }),
            "the interleaved V cache (_iv) is a layout of vLLM's legacy value cache; supported: "
            "_iv with layout legacy only"));
  CHECK(has(error_of([] {
              AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90_iv");
            }),
            "interleaved V cache"));
  // A layer configuration is an attention layer's: fp32 and block 8 stay refused there.
  AttentionLayerConfig c;
  c.num_heads = c.num_kv_heads = 2;
  c.head_size = 128;
  c.max_model_len = 1024;
  c.max_num_seqs = 8;
  c.dtype = DType::kFloat32;
  CHECK(has(attention_config_problem(c), "dtype fp32 is not supported by the decode kernel"));
  c.dtype = DType::kBFloat16;
  c.block_size = 8;
  CHECK(has(attention_config_problem(c), "block size 8 is not supported by the decode kernel"));
}

TEST_CASE("cascade ops: NVRTC builds merge_states, block_copy and the fp32 / block 8 writes") {
  const char* specs[] = {
      "merge_states_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
      "merge_states_h128_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm80",
      "merge_states_h128_b16_fp32_kvauto_g1_swa0_cap0_nhd_sm90",
      "block_copy_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm80",
      "block_copy_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
      "cache_write_h128_b8_fp32_kvauto_g1_swa0_cap0_nhd_sm90",
      "cache_write_h64_b8_fp32_kvauto_g1_swa0_cap0_legacy_sm80",
      "cache_write_h128_b16_fp32_kve4m3_g1_swa0_cap0_legacy_sm90",
      "cache_write_h128_b8_bf16_kve5m2_g1_swa0_cap0_hnd_sm90",
      "cache_write_h128_b8_fp16_kvauto_g1_swa0_cap0_legacy_sm90_chk",
      "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90_iv",
      "cache_write_h64_b8_fp32_kvauto_g1_swa0_cap0_legacy_sm80_iv",
      "cache_write_h128_b16_fp16_kve4m3_g1_swa0_cap0_legacy_sm90_chk_iv",
  };
  for (const char* text : specs) {
    INFO(text);
    test::check_cubin_builds(render_kernel(AttentionSpec::parse(text)));
  }
  CHECK(render_kernel(AttentionSpec::parse(specs[0])).entry == "graphattn_merge_states");
  CHECK(render_kernel(AttentionSpec::parse(specs[3])).entry == "graphattn_block_copy");
}

TEST_CASE("cascade ops: merge_attn_states names every bad argument before touching a device") {
  const ScalarType bf = ScalarType::kBFloat16;
  const TensorView out = rows(0x100000, bf, 5, 4, 128);
  const TensorView po = rows(0x200000, bf, 5, 4, 128);
  const TensorView so = rows(0x300000, bf, 5, 4, 128);
  const TensorView pl = lse(0x400000, 4, 5), sl = lse(0x500000, 4, 5);
  const auto call = [&](const TensorView& o, const TensorView& p, const TensorView& plse,
                        const TensorView& s, const TensorView& slse, const TensorView& olse) {
    return error_of([&] { merge_attn_states(o, p, plse, s, slse, olse, nullptr); });
  };
  CHECK(call(rows(0x100000, ScalarType::kInt32, 5, 4, 128), po, pl, so, sl, {}) ==
        "dtype int32 is not supported; supported: fp16, bf16, fp32");
  CHECK(call(out, rows(0x200000, ScalarType::kFloat16, 5, 4, 128), pl, so, sl, {}) ==
        "merge_attn_states: prefix_output fp16[5, 4, 128] strides [512, 128, 1] must have "
        "output's dtype and shape: bf16[5, 4, 128] strides [512, 128, 1]");
  CHECK(has(call(out, po, pl, rows(0x300000, bf, 5, 2, 128), sl, {}),
            "merge_attn_states: suffix_output bf16[5, 2, 128]"));
  CHECK(call(rows(0x100000, bf, 5, 4, 12), rows(0x200000, bf, 5, 4, 12), pl,
             rows(0x300000, bf, 5, 4, 12), sl, {}) ==
        "merge_attn_states: head size 12 is not supported for bf16; supported: multiples of 8 "
        "(16-byte vectors, as vLLM's CUDA kernel)");
  CHECK(has(call(rows(0x100000, ScalarType::kFloat32, 5, 4, 6),
                 rows(0x200000, ScalarType::kFloat32, 5, 4, 6), pl,
                 rows(0x300000, ScalarType::kFloat32, 5, 4, 6), sl, {}),
            "supported: multiples of 4"));
  CHECK(has(call(rows(0x100008, bf, 5, 4, 128), po, pl, so, sl, {}), "16-byte aligned data"));
  CHECK(call(out, po, lse(0x400000, 5, 4), so, sl, {}) ==
        "merge_attn_states: prefix_lse fp32[5, 4] strides [4, 1] is not supported; supported: "
        "fp32[4, 5] ([num_heads, num_tokens] of output)");
  CHECK(has(call(out, po, pl, so, TensorView::contiguous(fake_device(0x500000), bf, {4, 5}), {}),
            "merge_attn_states: suffix_lse bf16[4, 5]"));
  CHECK(has(call(out, po, pl, so, sl,
                 TensorView::contiguous(fake_device(0x600000), ScalarType::kFloat32, {4, 5, 1})),
            "output_lse must be 2-d [num_heads, num_tokens]"));
  CHECK(call(out, po, pl, so, sl, lse(0x600002, 4, 5)) ==
        "merge_attn_states: output_lse is not 4-byte aligned");
  CHECK(has(call(out, po, pl, so, sl, TensorView::contiguous(fake_device(0x600000), bf, {1})),
            "output_lse must be 2-d"));
}

TEST_CASE("cascade ops: device-mapped copy_blocks checks its views before touching a device") {
  const TensorView cache =
      TensorView::contiguous(fake_device(0x100000), ScalarType::kBFloat16, {10, 16, 2, 64});
  const auto mapping = [](ScalarType t, std::initializer_list<int64_t> shape, uintptr_t at) {
    return TensorView::contiguous(fake_device(at), t, shape);
  };
  const auto call = [&](const std::vector<TensorView>& caches, const TensorView& m) {
    return error_of([&] { copy_blocks_device(caches, m, nullptr); });
  };
  CHECK(call({cache}, mapping(ScalarType::kInt32, {3, 2}, 0x9000)) ==
        "copy_blocks: block_mapping int32[3, 2] strides [2, 1] is not supported; supported: "
        "int64 [num_pairs, 2] (src, dst), num_pairs < 2^31");
  CHECK(has(call({cache}, mapping(ScalarType::kInt64, {3, 3}, 0x9000)),
            "supported: int64 [num_pairs, 2]"));
  CHECK(has(call({cache}, mapping(ScalarType::kInt64, {6}, 0x9000)),
            "copy_blocks: block_mapping must be 2-d [num_pairs, 2]"));
  CHECK(call({cache}, mapping(ScalarType::kInt64, {3, 2}, 0x9004)) ==
        "copy_blocks: block_mapping int64[3, 2] strides [2, 1] is not 8-byte aligned");
  const TensorView gappy = TensorView::strided(fake_device(0x300000), ScalarType::kBFloat16,
                                               {4, 16, 2, 64}, {16 * 2 * 128, 2 * 128, 128, 1});
  CHECK(call({cache, gappy}, mapping(ScalarType::kInt64, {3, 2}, 0x9000))
            .find("copy_blocks: caches[1] bf16[4, 16, 2, 64]") == 0);
  CHECK(call({cache, TensorView{}}, mapping(ScalarType::kInt64, {3, 2}, 0x9000)) ==
        "copy_blocks: caches[1] is null");
}

TEST_CASE("cascade ops: the cache writes' fp32, block 8 and legacy x checks") {
  const ScalarType f32 = ScalarType::kFloat32, bf = ScalarType::kBFloat16;
  const TensorView slots = TensorView::contiguous(fake_device(0x500000), ScalarType::kInt64, {4});
  // Legacy caches: x is read from the key cache's shape.
  const auto legacy = [](ScalarType t, int64_t x, int64_t block, uintptr_t at) {
    PagedKvCache c;
    c.key_cache = TensorView::contiguous(fake_device(at), t, {10, 2, 128 / x, block, x});
    c.value_cache = TensorView::contiguous(fake_device(at + 0x100000), t, {10, 2, 128, block});
    return c;
  };
  const auto write_legacy = [&](const TensorView& key, const PagedKvCache& c) {
    return error_of(
        [&] { write_to_paged_cache(key, key, c.key_cache, c.value_cache, slots, 1, 1, nullptr); });
  };
  const TensorView key32 = rows(0x400000, f32, 4, 2, 128);
  const TensorView key16 = rows(0x400000, bf, 4, 2, 128);
  // x = 2: not 8, 16 or the default 16 bytes (4 fp32 elements).
  CHECK(write_legacy(key32, legacy(f32, 2, 8, 0x1000000)) ==
        "key_cache fp32[10, 2, 64, 8, 2] strides [2048, 1024, 16, 2, 1] has x = 2 (its last dim), "
        "which is not supported; supported: 4, 8, 16");
  CHECK(write_legacy(key16, legacy(bf, 4, 16, 0x1000000)) ==
        "key_cache bf16[10, 2, 32, 16, 4] strides [4096, 2048, 64, 4, 1] has x = 4 (its last dim), "
        "which is not supported; supported: 8, 16");
  CHECK(has(write_legacy(key16, legacy(ScalarType::kFloat8E4M3, 4, 16, 0x1000000)),
            "supported: 8, 16"));
  // Mixed dtypes: fp32 keys need an fp32 (or fp8) cache, 16-bit keys their own type.
  CHECK(has(write_legacy(key32, legacy(bf, 8, 16, 0x1000000)),
            "KV cache dtype bf16 differs from the model dtype fp32"));
  CHECK(has(write_legacy(key16, legacy(f32, 8, 16, 0x1000000)),
            "KV cache dtype fp32 differs from the model dtype bf16"));
  CHECK(has(
      write_legacy(rows(0x400000, ScalarType::kInt32, 4, 2, 128), legacy(f32, 8, 16, 0x1000000)),
      "dtype int32 is not supported; supported: fp16, bf16, fp32"));
  // Block size 24 is no cache write block size; 8 is (it fails later, at the device).
  CHECK(has(write_legacy(key32, legacy(f32, 4, 24, 0x1000000)), "block size 24 is not supported"));
  // The flash write: an fp32 cache of block 8 passes every check; a block of 12 does not.
  const auto flash = [&](int64_t block) {
    return TensorView::contiguous(fake_device(0x2000000), f32, {2, 10, block, 2, 128});
  };
  CHECK(has(error_of([&] { write_kv_cache(key32, key32, flash(12), slots, 1, 1, nullptr); }),
            "block size 12 is not supported"));
  // The attention paths read x from the key cache too (8, 16 or 16 bytes; test_legacy_key_x):
  // another x is refused there as here.
  CHECK(has(error_of([&] {
              const PagedKvCache c = legacy(ScalarType::kFloat8E4M3, 4, 16, 0x1000000);
              forward_prefix(
                  key16, key16, key16, "fp8", c.key_cache, c.value_cache,
                  TensorView::contiguous(fake_device(0x3000000), ScalarType::kInt32, {1, 4}),
                  TensorView::contiguous(fake_device(0x3100000), ScalarType::kInt32, {2}),
                  TensorView::contiguous(fake_device(0x3200000), ScalarType::kInt32, {1}), 4,
                  nullptr, 0, 1, 1, key16, nullptr);
            }),
            "has x = 4 (its last dim), which is not supported; supported: 8, 16"));
}

TEST_CASE("cascade ops: C ABI refusals of merge_attn_states and device-mapped copy_blocks") {
  int64_t out_shape[3] = {5, 4, 128}, lse_shape[2] = {4, 5}, map_shape[2] = {3, 2};
  int64_t cache_shape[4] = {10, 16, 2, 64};
  const auto dl = [](uintptr_t at, int ndim, int64_t* shape, DLDataType t, DLDeviceType dev) {
    DLTensor d{};
    d.data = fake_device(at);
    d.device = {dev, 0};
    d.ndim = ndim;
    d.shape = shape;
    d.dtype = t;
    return d;
  };
  const DLDataType bf16{kDLBfloat, 16, 1}, f32{kDLFloat, 32, 1}, i64{kDLInt, 64, 1};
  DLTensor out = dl(0x100000, 3, out_shape, bf16, kDLCUDA);
  DLTensor po = dl(0x200000, 3, out_shape, bf16, kDLCUDA);
  DLTensor so = dl(0x300000, 3, out_shape, bf16, kDLCUDA);
  DLTensor pl = dl(0x400000, 2, lse_shape, f32, kDLCUDA);
  DLTensor sl = dl(0x500000, 2, lse_shape, f32, kDLCUDA);
  DLTensor host_lse = dl(0x500000, 2, lse_shape, f32, kDLCPU);
  CHECK(graphattn_merge_attn_states(&out, &po, &pl, &so, &host_lse, nullptr, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(has(graphattn_last_error(), "suffix_lse is on device type 1 (CPU)"));
  CHECK(graphattn_merge_attn_states(&out, &po, &pl, nullptr, &sl, nullptr, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(graphattn_last_error()) == "suffix_output is NULL");
  DLTensor bad_lse = dl(0x400000, 2, out_shape, f32, kDLCUDA);  // [5, 4]
  CHECK(graphattn_merge_attn_states(&out, &po, &bad_lse, &so, &sl, nullptr, nullptr, nullptr) ==
        GRAPHATTN_ERROR);
  CHECK(has(graphattn_last_error(), "prefix_lse fp32[5, 4]"));

  DLTensor cache = dl(0x1000000, 4, cache_shape, bf16, kDLCUDA);
  const DLTensor* caches[] = {&cache};
  DLTensor host_map = dl(0x9000, 2, map_shape, i64, kDLCPU);
  CHECK(graphattn_copy_blocks_device(caches, 1, &host_map, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(has(graphattn_last_error(),
            "block_mapping is on device type 1 (CPU); graphattn needs CUDA device memory"));
  DLTensor map32 = dl(0x9000, 2, map_shape, DLDataType{kDLInt, 32, 1}, kDLCUDA);
  CHECK(graphattn_copy_blocks_device(caches, 1, &map32, nullptr, nullptr) == GRAPHATTN_ERROR);
  CHECK(has(graphattn_last_error(), "copy_blocks: block_mapping int32[3, 2]"));
  CHECK(graphattn_copy_blocks_device(nullptr, 1, &map32, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(graphattn_last_error()) == "caches is NULL");
  DLTensor host_cache = dl(0x1000000, 4, cache_shape, bf16, kDLCPU);
  const DLTensor* host_caches[] = {&host_cache};
  DLTensor map = dl(0x9000, 2, map_shape, i64, kDLCUDA);
  CHECK(graphattn_copy_blocks_device(host_caches, 1, &map, nullptr, nullptr) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
  CHECK(has(graphattn_last_error(), "caches[0] is on device type 1 (CPU)"));
}

TEST_CASE("softmax LSE axis: '_lse' suffix, decode and paged prefill only, NVRTC builds") {
  const AttentionSpec d = AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  CHECK_FALSE(d.softmax_lse);  // today's strings parse unchanged, without it
  AttentionSpec l = d;
  l.softmax_lse = true;
  CHECK(l.to_string() == "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_lse");
  CHECK(AttentionSpec::parse(l.to_string()) == l);
  CHECK(l.for_kernel(KernelKind::kCacheWrite).to_string() ==
        d.for_kernel(KernelKind::kCacheWrite).to_string());
  CHECK_THROWS_WITH_AS(
      AttentionSpec::parse("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_lse"),
      doctest::Contains("softmax LSE"), Error);
  CHECK_THROWS_WITH_AS(
      AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_dense_lse"),
      doctest::Contains("softmax LSE"), Error);
  const char* specs[] = {
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_lse",
      "decode_h64_b16_fp16_kve4m3_g8_swa1_cap1_hnd_sm80_sink_lse",
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_mt_lse",
      "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_lse",  // wgmma
      "prefill_h128_b16_fp16_kvauto_g1_swa0_cap1_nhd_sm90_sink_nc_lse",
      "prefill_h72_b16_bf16_kvauto_g4_swa1_cap0_nhd_sm90_alibi_lse",  // mma.sync
      "prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm80_lse",
  };
  for (const char* text : specs) {
    INFO(text);
    const KernelSource src = render_kernel(AttentionSpec::parse(text));
    CHECK(src.source.find("#define GA_WRITE_LSE 1") != std::string::npos);
    test::check_cubin_builds(src);
  }
  const KernelSource plain = render_kernel(d);
  CHECK(plain.source.find("GA_WRITE_LSE 1") == std::string::npos);
}

TEST_CASE("softmax LSE: the layer config selects the _lse decode and prefill kernels") {
  AttentionLayerConfig c;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_size = 128;
  c.max_model_len = 4096;
  c.max_num_seqs = 8;
  c.arch = 90;
  c.softmax_lse = true;
  CHECK(attention_config_problem(c).empty());
  CHECK(spec_for(c, KernelKind::kDecode).softmax_lse);
  CHECK(spec_for(c, KernelKind::kPrefill).softmax_lse);
  CHECK_FALSE(spec_for(c, KernelKind::kCacheWrite).softmax_lse);
  c.attn_type = AttentionType::kEncoderOnly;
  CHECK(attention_config_problem(c).find("softmax_lse is not supported for attn_type "
                                         "encoder_only") != std::string::npos);
  // The C face carries the field.
  graphattn_layer_config_t cc;
  graphattn_layer_config_init(&cc);
  CHECK(cc.softmax_lse == 0);
}

TEST_CASE("cascade attention: vLLM's use_cascade_attention rule and graphattn's floor") {
  const std::vector<int32_t> decodes64(64, 1), decodes8(8, 1), decodes7(7, 1);
  // The bench's shape: 8192 shared tokens, 64 decodes, 32/8 heads on 132 SMs: cascade 1 wave
  // x 64 tiles against ceil(64 * 8 * 64 / 132) = 249.
  CHECK(use_cascade_attention(8192, decodes64, 32, 8, false, false, 132));
  CHECK_FALSE(use_cascade_attention(255, decodes64, 32, 8, false, false, 132));  // too short
  CHECK_FALSE(use_cascade_attention(8192, decodes7, 32, 8, false, false, 132));  // too few
  CHECK_FALSE(use_cascade_attention(8192, decodes64, 32, 8, true, false, 132));  // ALiBi
  CHECK_FALSE(use_cascade_attention(8192, decodes64, 32, 8, false, true, 132));  // window
  CHECK(use_cascade_attention(256, decodes8, 8, 8, false, false, 132));          // no GQA: no split
  std::vector<int32_t> mixed = decodes8;
  mixed.back() = 40;
  CHECK(use_cascade_attention(256, mixed, 8, 2, false, false, 132));  // a prefill: no split
  // The performance model says no: cascade 1 wave x 2 tiles, plain ceil(8 * 2 / 132) = 1.
  CHECK_FALSE(use_cascade_attention(256, decodes8, 2, 1, false, false, 132));
  int r = -1;
  CHECK(graphattn_use_cascade_attention(8192, decodes64.data(), 64, 32, 8, 0, 0, 132, &r) ==
        GRAPHATTN_OK);
  CHECK(r == 1);
  // graphattn's floor on vLLM's rule, against the H100 sweep (docs/cascade-h100-2026-11-26.txt,
  // 32/8 heads, 512 own tokens; plain / cascade time, > 1: cascade faster): graphattn's rule
  // picks the faster path in every cell but 256 x 256 (0.99x); vLLM's rule in 26 of 36.
  const int prefixes[] = {256, 512, 1024, 2048, 4096, 8192};
  const int requests[] = {8, 16, 32, 64, 128, 256};
  const double speedup[6][6] = {
      {0.65, 0.62, 0.58, 0.53, 0.50, 0.45}, {0.73, 0.74, 0.76, 0.79, 0.81, 0.79},
      {0.83, 0.84, 0.86, 0.88, 0.89, 0.91}, {0.91, 0.97, 1.04, 1.18, 1.34, 1.53},
      {0.98, 1.06, 1.21, 1.49, 1.91, 2.45}, {0.99, 1.05, 1.23, 1.59, 2.26, 3.43}};
  int graphattn_right = 0, vllm_right = 0;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) {
      const std::vector<int32_t> decodes(requests[i], 1);
      const bool faster = speedup[i][j] > 1.0;
      graphattn_right +=
          use_cascade_attention(prefixes[j], decodes, 32, 8, false, false, 132) == faster;
      vllm_right +=
          vllm_use_cascade_attention(prefixes[j], decodes, 32, 8, false, false, 132) == faster;
    }
  CHECK(graphattn_right == 35);
  CHECK(vllm_right == 26);
  // Where vLLM's model does not decide (a prefill in the batch, no GQA) the floor does not
  // apply.
  CHECK(use_cascade_attention(256, mixed, 8, 2, false, false, 132));
  CHECK(use_cascade_attention(256, decodes8, 8, 8, false, false, 132));
  CHECK(graphattn_use_cascade_attention(8192, nullptr, 64, 32, 8, 0, 0, 132, &r) ==
        GRAPHATTN_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("cascade attention: the builder's cascade metadata and its refusals") {
  std::vector<int32_t> table(3 * 40, 7);
  const auto m = CommonAttentionMetadata::make({1, 1, 4}, {300, 260, 280}, table, 40,
                                               std::vector<int64_t>(6, 5));
  const FlashAttentionMetadataBuilder b(AttentionType::kDecoder, 16);
  const FlashAttentionMetadata f = b.build(256, m);
  CHECK(f.use_cascade);
  CHECK(f.common_prefix_len == 256);
  CHECK(f.suffix_seq_lens == std::vector<int32_t>{44, 4, 24});
  CHECK_FALSE(b.build(0, m).use_cascade);
  CHECK_THROWS_WITH_AS(b.build(250, m), doctest::Contains("multiple of the block size 16"), Error);
  CHECK_THROWS_WITH_AS(b.build(272, m),
                       doctest::Contains("exceeds the cached context of request 1 (259"), Error);
  const FlashAttentionMetadataBuilder enc(AttentionType::kEncoder, 16);
  CHECK_THROWS_WITH_AS(enc.build(256, m), doctest::Contains("for decoder layers"), Error);
}
