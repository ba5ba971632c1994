// SPDX-License-Identifier: Apache-2.0
// The legacy key cache's x (vLLM reads it from the key cache's last dim; its tests build fp8
// caches with x = 8): the spec axis key_x ("_x8" / "_x16", absent for x = 16 bytes), its
// refusals, NVRTC builds of the decode (16-bit, fp8, fp32) and prefill kernels that read such
// caches, and the ops' checks, which take x = 16 bytes, 8 and 16 and name any other x before any
// device use (so these run without a GPU).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/paged_cache.hpp"
#include "graphattn/spec.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;
using test::fake_device;
using test::has;

namespace {

std::string parse_error(const std::string& text) {
  return error_of([&] { AttentionSpec::parse(text); });
}

// Legacy caches of 10 blocks, 2 KV heads, head size 128 at fake device addresses.
PagedKvCache legacy(ScalarType t, int64_t x, int64_t block) {
  PagedKvCache c;
  c.key_cache = TensorView::contiguous(fake_device(0x1000000), t, {10, 2, 128 / x, block, x});
  c.value_cache = TensorView::contiguous(fake_device(0x2000000), t, {10, 2, 128, block});
  return c;
}

TensorView i32(uintptr_t at, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake_device(at), ScalarType::kInt32, shape);
}

// paged_attention_v1 over `c` with 8 query heads of `q`'s type; the error it throws.
std::string decode_error(const PagedKvCache& c, ScalarType q, const char* kv_cache_dtype,
                         int block) {
  const TensorView query = TensorView::contiguous(fake_device(0x400000), q, {3, 8, 128});
  return error_of([&] {
    paged_attention_v1(query, query, c.key_cache, c.value_cache, 2, 0.1f, i32(0x500000, {3, 4}),
                       i32(0x600000, {3}), block, 64, TensorView{}, kv_cache_dtype, 1, 1, 0, 0, 0,
                       64, 0, nullptr);
  });
}

// forward_prefix over `c` with bf16 queries; the error it throws.
std::string prefix_error(const PagedKvCache& c, const char* kv_cache_dtype) {
  const TensorView q =
      TensorView::contiguous(fake_device(0x400000), ScalarType::kBFloat16, {4, 8, 128});
  return error_of([&] {
    forward_prefix(q, TensorView{}, TensorView{}, kv_cache_dtype, c.key_cache, c.value_cache,
                   i32(0x500000, {1, 4}), i32(0x600000, {2}), i32(0x700000, {1}), 4, nullptr, 0, 1,
                   1, q, nullptr);
  });
}

}  // namespace

TEST_CASE("legacy key x: the spec names x only where it is not 16 bytes") {
  const AttentionSpec fp8 =
      AttentionSpec::parse("decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90_x8");
  CHECK(fp8.key_x == 8);
  CHECK(fp8.to_string() == "decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90_x8");
  CHECK(AttentionSpec::parse("prefill_h64_b32_fp16_kvauto_g1_swa0_cap0_legacy_sm80_x16").key_x ==
        16);
  CHECK(AttentionSpec::parse("decode_h64_b8_fp32_kvauto_g1_swa0_cap0_legacy_sm90_x8").key_x == 8);
  // Without "_x" the spec is the one it always was (x = 16 bytes: key_x 0).
  const AttentionSpec plain =
      AttentionSpec::parse("decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90");
  CHECK(plain.key_x == 0);
  CHECK(plain != fp8);
  // The x axis is the last; after the other suffixes.
  CHECK(AttentionSpec::parse("decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90_alibi_lse_x8")
            .to_string() == "decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90_alibi_lse_x8");
  // The rendered source defines GA_KEY_X only for a named x.
  CHECK(has(render_kernel(fp8).source, "#define GA_KEY_X 8\n"));
  CHECK(!has(render_kernel(plain).source, "GA_KEY_X 8"));
}

TEST_CASE("legacy key x: refusals name the value and what is allowed") {
  CHECK(has(parse_error("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_x8"),
            "legacy key cache x 8 is 16 bytes of 2-byte elements, the canonical x, which the "
            "spec leaves out; supported: _x16 or no _x"));
  CHECK(has(parse_error("decode_h128_b16_bf16_kve5m2_g4_swa0_cap0_legacy_sm90_x16"),
            "legacy key cache x 16 is 16 bytes of 1-byte elements, the canonical x, which the "
            "spec leaves out; supported: _x8 or no _x"));
  CHECK(has(parse_error("decode_h128_b16_fp32_kvauto_g4_swa0_cap0_legacy_sm90_x4"),
            "legacy key cache x 4 is not supported; supported: 0, 8, 16"));
  CHECK(has(parse_error("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_x12"),
            "legacy key cache x 12 is not supported; supported: 0, 8, 16"));
  CHECK(has(parse_error("decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90_x0"),
            "legacy key cache x field '_x0' names the canonical value"));
  CHECK(has(parse_error("decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_x8"),
            "is an axis of vLLM's legacy key cache; supported: _x with layout legacy only"));
  CHECK(has(parse_error("decode_h40_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_x16"),
            "head size 40 is not supported by a legacy key cache with x = 16; supported: "
            "multiples of 16"));
  // The cache write reads x at run time: one kernel for every x.
  CHECK(has(parse_error("cache_write_h128_b16_bf16_kve4m3_g1_swa0_cap0_legacy_sm90_x8"),
            "the cache write kernel does not depend on legacy key cache x (x8); use no _x"));
}

TEST_CASE("legacy key x: NVRTC builds the decode and prefill kernels of every x") {
  for (const char* text : {"decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90_x8",
                           "decode_h80_b32_fp16_kve5m2_g1_swa1_cap1_legacy_sm80_alibi_x8",
                           "decode_h64_b16_bf16_kve4m3_g8_swa0_cap0_legacy_sm89_mt_chk_x8",
                           "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_x16",
                           "decode_h96_b8_fp16_kvauto_g8_swa0_cap0_legacy_sm90_sink_x16",
                           "decode_h256_b32_bf16_kvauto_g1_swa0_cap0_legacy_sm90_bsp_lse_x16",
                           "decode_h64_b8_fp32_kvauto_g4_swa0_cap0_legacy_sm90_x8",
                           "decode_h128_b16_fp32_kvauto_g1_swa1_cap0_legacy_sm90_alibi_x16",
                           "prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm90_x8",
                           "prefill_h80_b32_fp16_kve5m2_g1_swa1_cap0_legacy_sm80_alibi_x8",
                           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90_x16",
                           "prefill_h256_b48_fp16_kvauto_g8_swa0_cap1_legacy_sm90_sink_x16"}) {
    INFO(text);
    test::check_cubin_builds(render_kernel(AttentionSpec::parse(text)));
  }
}

TEST_CASE("legacy key x: paged_attention and forward_prefix take x = 8 and 16, name the rest") {
  const ScalarType bf = ScalarType::kBFloat16, e4m3 = ScalarType::kFloat8E4M3,
                   f32 = ScalarType::kFloat32;
  // Refused with the value and the allowed ones.
  CHECK(decode_error(legacy(bf, 32, 16), bf, "auto", 16) ==
        "key_cache bf16[10, 2, 4, 16, 32] strides [4096, 2048, 512, 32, 1] has x = 32 (its last "
        "dim), which is not supported; supported: 8, 16");
  CHECK(has(decode_error(legacy(e4m3, 4, 16), bf, "fp8", 16),
            "has x = 4 (its last dim), which is "
            "not supported; supported: 8, 16"));
  CHECK(has(decode_error(legacy(f32, 2, 16), f32, "auto", 16), "supported: 4, 8, 16"));
  CHECK(has(prefix_error(legacy(bf, 4, 16), "auto"),
            "has x = 4 (its last dim), which is not supported; supported: 8, 16"));
  CHECK(has(prefix_error(legacy(e4m3, 32, 16), "fp8"), "has x = 32 (its last dim)"));
  // Taken: every check passes (the call then fails at the device, which this machine may lack,
  // or at the fake addresses); no message about x or the key cache's shape.
  for (const std::string& e :
       {decode_error(legacy(e4m3, 8, 16), bf, "fp8", 16),
        decode_error(legacy(bf, 16, 16), bf, "auto", 16),
        decode_error(legacy(bf, 16, 8), bf, "auto", 8),
        decode_error(legacy(f32, 8, 16), f32, "auto", 16),
        decode_error(legacy(f32, 16, 8), f32, "auto", 8), prefix_error(legacy(e4m3, 8, 16), "fp8"),
        prefix_error(legacy(bf, 16, 32), "auto"), prefix_error(legacy(bf, 8, 16), "auto")}) {
    INFO(e);
    CHECK(!has(e, "x ="));
    CHECK(!has(e, "key_cache"));
    CHECK(!has(e, "not supported"));
  }
}
