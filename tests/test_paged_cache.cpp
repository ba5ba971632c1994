// SPDX-License-Identifier: Apache-2.0
// vLLM's legacy PagedAttention caches on the host: the spec layout "legacy" (cache write, decode),
// NVRTC builds of its cache write kernel, the shape and split helpers, and every argument check
// of write_to_paged_cache (all before any device use).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;
using test::fake_device;

TEST_CASE("paged cache: the legacy layout is a spec of the cache write, decode and prefill") {
  const char* legacy = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90";
  CHECK(AttentionSpec::parse(legacy).layout == KvLayout::kLegacy);
  CHECK(AttentionSpec::parse(legacy).to_string() == legacy);
  CHECK(std::string(to_string(KvLayout::kLegacy)) == "legacy");
  // The decode kernel (tests/test_legacy_decode.cpp) and the prefill kernel
  // (tests/test_legacy_prefill.cpp) read it; the kv_scale kernel reads no cache.
  CHECK(AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90").layout ==
        KvLayout::kLegacy);
  CHECK(AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90").layout ==
        KvLayout::kLegacy);
  CHECK(error_of([] {
          AttentionSpec::parse("kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90");
        }).find("the kv_scale kernel depends only on the head size") != std::string::npos);
  // fp8 needs head sizes in whole x = 16 chunks; 16-bit caches x = 8.
  CHECK(error_of([] {
          AttentionSpec::parse("cache_write_h120_b16_bf16_kve4m3_g1_swa0_cap0_legacy_sm90");
        })
            .find("head size 120 is not supported by the legacy layout with KV cache dtype e4m3; "
                  "supported: multiples of 16") != std::string::npos);
  CHECK(
      AttentionSpec::parse("cache_write_h120_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90").head_size ==
      120);
  // A layer's forward() takes one flash-layout cache: the legacy caches have their own calls.
  AttentionLayerConfig c;
  c.num_heads = c.num_kv_heads = 8;
  c.head_size = 128;
  c.max_model_len = 1024;
  c.max_num_seqs = 4;
  c.arch = 90;
  c.layout = KvLayout::kLegacy;
  CHECK(attention_config_problem(c).find(
            "layout legacy is not supported by AttentionBackend, whose forward() reads the flash "
            "layout; supported: nhd, hnd") != std::string::npos);
}

TEST_CASE("paged cache: NVRTC builds the legacy cache write for 16-bit and fp8 caches") {
  for (const char* text : {"cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_legacy_sm90",
                           "cache_write_h64_b32_fp16_kve4m3_g1_swa0_cap0_legacy_sm80",
                           "cache_write_h256_b16_bf16_kve5m2_g1_swa0_cap0_legacy_sm90_chk"}) {
    INFO(text);
    const KernelSource src = render_kernel(AttentionSpec::parse(text));
    CHECK(src.source.find("constexpr int KV_LAYOUT = 2;") != std::string::npos);
    test::check_cubin_builds(src);
  }
}

TEST_CASE("paged cache: get_kv_cache_shape and split_kv_cache as vLLM's PagedAttention") {
  const auto shape = paged_kv_cache_shape(10, 16, 8, 128);
  CHECK(shape == std::array<int64_t, 3>{2, 10, 16 * 8 * 128});
  CHECK(error_of([] { paged_kv_cache_shape(10, 0, 8, 128); }) ==
        "block_size 0 is not supported; supported: >= 1");
  CHECK(paged_cache_x(ScalarType::kBFloat16) == 8);
  CHECK(paged_cache_x(ScalarType::kFloat8E4M3) == 16);
  for (ScalarType t : {ScalarType::kBFloat16, ScalarType::kFloat8E5M2}) {
    const int x = paged_cache_x(t), elem = scalar_bytes(t);
    const TensorView kv = TensorView::contiguous(fake_device(0x100000), t, {2, 10, 16 * 8 * 128});
    const PagedKvCache p = split_paged_kv_cache(kv, 8, 128);
    CHECK(p.key_cache.ndim == 5);
    CHECK(p.key_cache.shape[2] == 128 / x);
    CHECK(p.key_cache.shape[3] == 16);
    CHECK(p.key_cache.shape[4] == x);
    CHECK(p.value_cache.ndim == 4);
    CHECK(p.value_cache.shape[2] == 128);
    CHECK(p.value_cache.shape[3] == 16);
    CHECK(static_cast<char*>(p.value_cache.data) - static_cast<char*>(p.key_cache.data) ==
          int64_t{10} * 16 * 8 * 128 * elem);
  }
  const TensorView kv =
      TensorView::contiguous(fake_device(0x100000), ScalarType::kBFloat16, {2, 10, 16 * 8 * 128});
  CHECK(error_of([&] { split_paged_kv_cache(kv, 7, 128); })
            .find("is not a compact [2, num_blocks, block_size * num_kv_heads * head_size] cache "
                  "for 7 KV heads of size 128") != std::string::npos);
  const TensorView fp8 =
      TensorView::contiguous(fake_device(0x100000), ScalarType::kFloat8E4M3, {2, 10, 16 * 8 * 120});
  CHECK(error_of([&] { split_paged_kv_cache(fp8, 8, 120); }) ==
        "head_size 120 is not supported by the legacy layout with fp8_e4m3 elements; supported: "
        "multiples of x = 16");
}

TEST_CASE("paged cache: write_to_paged_cache names every bad argument before touching a device") {
  const ScalarType bf = ScalarType::kBFloat16;
  const TensorView kv = TensorView::contiguous(fake_device(0x100000), bf, {2, 10, 16 * 2 * 128});
  const PagedKvCache p = split_paged_kv_cache(kv, 2, 128);
  const TensorView key = TensorView::contiguous(fake_device(0x400000), bf, {4, 2, 128});
  const TensorView slots = TensorView::contiguous(fake_device(0x500000), ScalarType::kInt64, {4});
  const auto call = [&](const TensorView& k, const TensorView& kc, const TensorView& vc,
                        const TensorView& s) {
    return error_of([&] { write_to_paged_cache(k, k, kc, vc, s, 1.0f, 1.0f, nullptr); });
  };
  // Swapped caches, a flash-layout cache, mismatched shapes.
  CHECK(call(key, p.value_cache, p.key_cache, slots).find("key_cache") == 0);
  CHECK(call(key, kv, p.value_cache, slots).find("key_cache") == 0);
  TensorView wrong_x = p.key_cache;
  wrong_x.shape[2] = 32;
  wrong_x.shape[4] = 4;
  CHECK(call(key, wrong_x, p.value_cache, slots)
            .find("has x = 4 (its last dim), which is not supported; supported: 8, 16") !=
        std::string::npos);
  // x = 16 (not bf16's default 8) is a cache write's x, but the shapes must still agree.
  wrong_x.shape[2] = 8;
  wrong_x.shape[4] = 16;
  wrong_x.shape[3] = 32;
  CHECK(call(key, wrong_x, p.value_cache, slots)
            .find("key_cache must be [num_blocks, num_kv_heads, head_size / x, block_size, x] "
                  "with x = 16 (its last dim)") != std::string::npos);
  const TensorView fp16_values =
      TensorView::contiguous(fake_device(0x200000), ScalarType::kFloat16, {10, 2, 128, 16});
  CHECK(call(key, p.key_cache, fp16_values, slots)
            .find("value_cache dtype fp16 differs from key_cache dtype bf16") == 0);
  TensorView strided = p.value_cache;
  strided.strides[0] *= 2;
  CHECK(call(key, p.key_cache, strided, slots)
            .find("must be compact (row-major) and 16-byte "
                  "aligned") != std::string::npos);
  // The key/value checks are the flash write's: heads, slots, dtype.
  const TensorView three_heads = TensorView::contiguous(fake_device(0x400000), bf, {4, 3, 128});
  CHECK(call(three_heads, p.key_cache, p.value_cache, slots)
            .find("but the KV cache holds 2 heads of size 128") != std::string::npos);
  const TensorView int32_slots =
      TensorView::contiguous(fake_device(0x500000), ScalarType::kInt32, {4});
  CHECK(call(key, p.key_cache, p.value_cache, int32_slots).find("slot_mapping must be int64") !=
        std::string::npos);
  // Block sizes: the spec's rule (multiples of 16, and vLLM's 8 for the cache writes).
  const TensorView kv24 = TensorView::contiguous(fake_device(0x100000), bf, {2, 10, 24 * 2 * 128});
  const PagedKvCache p24 = split_paged_kv_cache(kv24, 2, 128);
  CHECK(call(key, p24.key_cache, p24.value_cache, slots).find("block size 24 is not supported") !=
        std::string::npos);
}
