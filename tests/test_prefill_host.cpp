// SPDX-License-Identifier: Apache-2.0
// The prefill kernel's host side without a GPU: spec derivation from the views, argument
// errors, the tile configuration's shared memory, and NVRTC compiling every head size.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/nvrtc_options.hpp"
#include "graphattn/graphattn.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/prefill.hpp"
#include "templates/params.h"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

// Views are only inspected, never dereferenced: any aligned non-null address will do.
void* fake() { return reinterpret_cast<void*>(uintptr_t{1} << 20); }

detail::PrefillLaunch make_launch(int heads, int kv_heads, int head_size, int block_size,
                                  ScalarType dtype, ScalarType kv_dtype, bool hnd) {
  const int64_t nb = 8, T = 10, B = block_size, KH = kv_heads, D = head_size;
  detail::PrefillLaunch a;
  a.query = TensorView::contiguous(fake(), dtype, {T, heads, D});
  a.output = TensorView::contiguous(fake(), dtype, {T, heads, D});
  a.kv_cache = hnd ? TensorView::strided(fake(), kv_dtype, {2, nb, B, KH, D},
                                         {nb * KH * B * D, KH * B * D, D, B * D, 1})
                   : TensorView::contiguous(fake(), kv_dtype, {2, nb, B, KH, D});
  a.query_start_loc = TensorView::contiguous(fake(), ScalarType::kInt32, {3});
  a.seq_lens = TensorView::contiguous(fake(), ScalarType::kInt32, {2});
  a.block_table = TensorView::contiguous(fake(), ScalarType::kInt32, {2, 4});
  a.num_reqs = 2;
  a.max_query_len = 8;
  a.scale = 0.1f;
  return a;
}

}  // namespace

TEST_CASE("prefill host: the spec follows the views and options") {
  auto a = make_launch(32, 8, 128, 16, ScalarType::kBFloat16, ScalarType::kBFloat16, false);
  AttentionSpec s = detail::prefill_spec(a, 90);
  CHECK(s.to_string() == "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  a = make_launch(10, 2, 72, 48, ScalarType::kFloat16, ScalarType::kFloat8E5M2, true);
  a.window = 100;
  a.soft_cap = 30.0f;
  s = detail::prefill_spec(a, 80);
  CHECK(s.to_string() == "prefill_h72_b48_fp16_kve5m2_g5_swa1_cap1_hnd_sm80");
}

TEST_CASE("prefill host: bad arguments are refused with the argument named") {
  auto a = make_launch(12, 8, 64, 16, ScalarType::kBFloat16, ScalarType::kBFloat16, false);
  CHECK_THROWS_WITH_AS(detail::prefill_spec(a, 90), doctest::Contains("12 heads"), Error);
  a = make_launch(8, 8, 64, 16, ScalarType::kBFloat16, ScalarType::kFloat16, false);
  CHECK_THROWS_WITH_AS(detail::prefill_spec(a, 90), doctest::Contains("KV cache dtype"), Error);
  a = make_launch(8, 8, 64, 16, ScalarType::kBFloat16, ScalarType::kBFloat16, false);
  a.output.dtype = ScalarType::kFloat16;
  CHECK_THROWS_WITH_AS(detail::prefill_spec(a, 90), doctest::Contains("output dtype"), Error);
  a = make_launch(8, 8, 64, 16, ScalarType::kBFloat16, ScalarType::kBFloat16, false);
  a.query.shape[2] = 80;
  CHECK_THROWS_WITH_AS(detail::prefill_spec(a, 90), doctest::Contains("head size"), Error);
  a = make_launch(8, 8, 64, 16, ScalarType::kBFloat16, ScalarType::kBFloat16, false);
  a.window = -1;
  CHECK_THROWS_WITH_AS(detail::prefill_spec(a, 90), doctest::Contains("window"), Error);
  a = make_launch(8, 8, 64, 16, ScalarType::kBFloat16, ScalarType::kBFloat16, false);
  CHECK_THROWS_WITH_AS(detail::prefill_spec(a, 75), doctest::Contains("arch"), Error);
}

TEST_CASE("prefill host: every specialization's tiles fit the multiprocessor") {
  for (int arch : {80, 90})
    for (int h : supported_head_sizes())
      for (int kind = 0; kind < 3; ++kind) {  // 16-bit KV, fp8 KV, e4m3 query over fp8 KV
        AttentionSpec s;
        s.kind = KernelKind::kPrefill;
        s.head_size = h;
        s.kv_dtype = kind == 0 ? KvDType::kAuto : KvDType::kFp8E4M3;
        s.q_fp8 = kind == 2;
        s.arch = arch;
        const detail::PrefillConfig c = detail::prefill_config(s);
        INFO(s.to_string() << ": " << c.shared_bytes << " bytes");
        if (detail::select_prefill_kernel(s) == detail::PrefillKernel::kWgmma) {
          // One block per multiprocessor: a producer and two consumer warpgroups of 64 rows
          // (three at head size 64, 16-bit).
          const int consumers = h == 64 && !s.q_fp8 ? 3 : 2;
          CHECK(c.threads == 128 * (consumers + 1));
          CHECK(c.block_m == 64 * consumers);
          // fp8: params.h's key tile width, 128 to 256 keys in steps of 64 (wgmma's N).
          if (s.q_fp8)
            CHECK(c.block_n == ga_prefill_sm90_fp8_block_n());
          else
            CHECK(c.block_n == (h <= 128 ? 128 : 64));
          if (s.q_fp8) CHECK((c.block_n % 64 == 0 && c.block_n >= 128 && c.block_n <= 256));
          CHECK(c.shared_bytes <= 227 * 1024);
          // e4m3 (-DGA_PREFILL_SM90_PERSIST=3, the default): the persistent kernel's output
          // buffer, 16-bit rows of the block's tile, beside its tiles (PW_SMEM_BYTES).
          if (s.q_fp8 && detail::prefill_sm90_persist() == 3)
            CHECK(c.shared_bytes == ga_prefill_sm90_smem_bytes(h, true) + c.block_m * h * 2);
          // At least two K/V stages besides the Q tile (fp8: 1-byte tiles, two raw V tiles).
          if (s.q_fp8)
            CHECK(c.shared_bytes >= c.block_m * h + 2 * 2 * c.block_n * h + 2 * c.block_n * h);
          else
            CHECK(c.shared_bytes >= c.block_m * h * 2 + 2 * 2 * c.block_n * h * 2);
        } else {
          // Two blocks per multiprocessor.
          CHECK(c.threads == 128);
          CHECK(c.block_m == (h <= 128 ? 128 : 64));
          CHECK(c.shared_bytes <= 227 * 1024 / 2);
        }
      }
}

TEST_CASE("prefill host: kernel selection is a pure function of the spec") {
  using detail::PrefillKernel;
  using detail::select_prefill_kernel;
  auto parse = [](const char* s) { return AttentionSpec::parse(s); };
  CHECK(select_prefill_kernel(parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90")) ==
        PrefillKernel::kWgmma);
  CHECK(select_prefill_kernel(parse("prefill_h64_b256_fp16_kvauto_g64_swa1_cap1_hnd_sm90")) ==
        PrefillKernel::kWgmma);
  CHECK(select_prefill_kernel(parse("prefill_h192_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90")) ==
        PrefillKernel::kWgmma);
  CHECK(select_prefill_kernel(parse("prefill_h256_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90")) ==
        PrefillKernel::kWgmma);
  CHECK(select_prefill_kernel(parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90")) ==
        PrefillKernel::kWgmma);
  CHECK(select_prefill_kernel(parse("prefill_h64_b32_bf16_kvauto_g4_swa1_cap0_hnd_sm90_bsp")) ==
        PrefillKernel::kWgmma);
  // Head sizes off the 64-column swizzle rows, fp8 caches and other archs stay on mma.sync.
  CHECK(select_prefill_kernel(parse("prefill_h96_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90")) ==
        PrefillKernel::kMmaSync);
  CHECK(select_prefill_kernel(parse("prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90")) ==
        PrefillKernel::kMmaSync);
  // An e4m3 query over an fp8 cache: wgmma at head size 128 (fp8 operands, V transposed),
  // mma.sync at other head sizes, archs, legacy caches and block-sparse.
  CHECK(select_prefill_kernel(parse("prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_qe4m3")) ==
        PrefillKernel::kWgmma);
  CHECK(select_prefill_kernel(parse("prefill_h128_b32_fp16_kve5m2_g8_swa1_cap1_hnd_sm90_qe4m3")) ==
        PrefillKernel::kWgmma);
  CHECK(select_prefill_kernel(parse("prefill_h64_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_qe4m3")) ==
        PrefillKernel::kMmaSync);
  CHECK(select_prefill_kernel(parse("prefill_h256_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_qe4m3")) ==
        PrefillKernel::kMmaSync);
  CHECK(select_prefill_kernel(parse("prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm89_qe4m3")) ==
        PrefillKernel::kMmaSync);
  CHECK(select_prefill_kernel(parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm80")) ==
        PrefillKernel::kMmaSync);
  CHECK(select_prefill_kernel(parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm89")) ==
        PrefillKernel::kMmaSync);
  CHECK(select_prefill_kernel(parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90")) ==
        PrefillKernel::kNone);
  AttentionSpec bad = parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  bad.head_size = 130;
  CHECK(select_prefill_kernel(bad) == PrefillKernel::kNone);
  CHECK_THROWS_AS(detail::prefill_config(bad), Error);
}

TEST_CASE("prefill host: which wgmma specs load K/V by TMA, and in which boxes") {
  auto tma = [](const char* s) { return detail::prefill_uses_tma(AttentionSpec::parse(s)); };
  // Paged flash layouts (NHD, HND), 16 bits, head size 64 (where it measured faster), every block
  // size; head sizes 128, 192 and 256 and e4m3 queries keep the cp.async gather.
  CHECK(tma("prefill_h64_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"));
  CHECK(tma("prefill_h64_b48_fp16_kvauto_g8_swa1_cap0_hnd_sm90"));
  CHECK_FALSE(tma("prefill_h256_b192_bf16_kvauto_g1_swa0_cap1_nhd_sm90_chk"));
  CHECK_FALSE(tma("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"));
  CHECK_FALSE(tma("prefill_h192_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"));
  CHECK_FALSE(tma("prefill_h128_b16_bf16_kve4m3_g4_swa0_cap0_hnd_sm90_qe4m3"));
  // The legacy layout, block-sparse and dense K/V keep the cp.async gather; mma.sync has none.
  CHECK_FALSE(tma("prefill_h64_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90"));
  CHECK_FALSE(tma("prefill_h64_b32_bf16_kvauto_g4_swa1_cap0_hnd_sm90_bsp"));
  CHECK_FALSE(tma("prefill_h64_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_dense"));
  CHECK_FALSE(tma("prefill_h96_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"));
  CHECK_FALSE(tma("prefill_h64_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm80"));
  // Box rows: gcd(block size, key tile) (128 keys at head 64); 0: no TMA.
  CHECK(ga_prefill_sm90_tma_rows(16, 64, false) == 16);
  CHECK(ga_prefill_sm90_tma_rows(48, 64, false) == 16);
  CHECK(ga_prefill_sm90_tma_rows(64, 64, false) == 64);
  CHECK(ga_prefill_sm90_tma_rows(192, 64, false) == 64);
  CHECK(ga_prefill_sm90_tma_rows(256, 64, false) == 128);
  CHECK(ga_prefill_sm90_tma_rows(256, 256, false) == 0);
  CHECK(ga_prefill_sm90_tma_rows(8, 64, false) == 8);
  CHECK(ga_prefill_sm90_tma_rows(4, 64, false) == 0);
  CHECK(ga_prefill_sm90_tma_rows(16, 128, false) == 0);
  CHECK(ga_prefill_sm90_tma_rows(16, 192, false) == 0);
  CHECK(ga_prefill_sm90_tma_rows(256, 128, true) == 0);
  for (int b : supported_block_sizes()) {
    const int rows = ga_prefill_sm90_tma_rows(b, 64, false);
    CHECK(rows >= 16);
    CHECK(ga_prefill_sm90_block_n(64) % rows == 0);
    CHECK(b % rows == 0);
  }
}

TEST_CASE("prefill host: the wgmma kernel renders from its own template for sm_90a") {
  const KernelSource hopper =
      render_kernel(AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"));
  CHECK(hopper.entry == "graphattn_prefill");
  CHECK(hopper.options[0] == "--gpu-architecture=sm_90a");
  CHECK(hopper.source.find("wgmma.mma_async") != std::string::npos);
  const KernelSource other =
      render_kernel(AttentionSpec::parse("prefill_h96_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"));
  CHECK(other.options[0] == "--gpu-architecture=sm_90");
  CHECK(other.source.find("wgmma.mma_async") == std::string::npos);
  CHECK(other.source.find("mma.sync.aligned.m16n8k16") != std::string::npos);
}

TEST_CASE("prefill host: NVRTC compiles every head size and the feature variants") {
  TempDir dir;
  CacheOptions o;
  o.dir = dir.path();
  KernelCache cache(o);
  std::vector<AttentionSpec> specs;
  for (int h : supported_head_sizes()) {
    AttentionSpec s;
    s.kind = KernelKind::kPrefill;
    s.head_size = h;
    s.block_size = 16;
    s.group = 4;
    s.arch = 90;
    specs.push_back(s);
  }
  for (const char* text : {"prefill_h40_b48_fp16_kve4m3_g5_swa1_cap1_hnd_sm90",
                           "prefill_h256_b256_bf16_kve5m2_g16_swa1_cap1_nhd_sm90",
                           "prefill_h128_b16_bf16_kvauto_g64_swa0_cap0_nhd_sm80",
                           "prefill_h64_b48_fp16_kvauto_g5_swa1_cap1_hnd_sm90",
                           "prefill_h192_b256_bf16_kvauto_g64_swa1_cap1_nhd_sm90",
                           "prefill_h256_b16_fp16_kvauto_g1_swa0_cap1_hnd_sm90"})
    specs.push_back(AttentionSpec::parse(text));
  for (const auto& r : cache.precompile(specs))
    CHECK_MESSAGE(r.error.empty(), r.spec << ": " << r.error);
  CHECK(cache.stats().compiles == specs.size());
}
