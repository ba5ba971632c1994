// SPDX-License-Identifier: Apache-2.0
// Checked mode on the host side: the spec axis (string suffix "_chk"), what the renderer adds
// (only for checked specs: the fast path's source carries no check), the cache keeping checked and
// fast kernels apart, and every checked kernel family compiling with NVRTC. The kernels' reports
// are tested on a GPU (tests/gpu/test_bounds_check.cpp).
#include <doctest/doctest.h>

#include <string>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "testing/configs.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

TEST_CASE("bounds mode: the spec axis round-trips as a _chk suffix and changes the key") {
  for (const char* text : {"decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_chk",
                           "cache_write_h64_b32_fp16_kve4m3_g1_swa0_cap0_hnd_sm80_chk",
                           "prefill_h128_b16_bf16_kvauto_g4_swa1_cap1_nhd_sm90_chk"}) {
    INFO(text);
    const AttentionSpec s = AttentionSpec::parse(text);
    CHECK(s.check_bounds);
    CHECK(s.to_string() == text);
    AttentionSpec fast = s;
    fast.check_bounds = false;
    CHECK(fast != s);
    CHECK(fast.to_string() + "_chk" == text);
    const KernelSource checked = render_kernel(s), plain = render_kernel(fast);
    CHECK(checked.source.find("#define GA_CHECK_BOUNDS 1\n") != std::string::npos);
    CHECK(plain.source.find("GA_CHECK_BOUNDS 1") == std::string::npos);
    CHECK(make_key({checked.spec, checked.source, checked.options, 90, 13, 0}) !=
          make_key({plain.spec, plain.source, plain.options, 90, 13, 0}));
  }
  CHECK_THROWS_WITH_AS(AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_ch"),
                       doctest::Contains("trailing characters '_ch'"), Error);
  CHECK_THROWS_AS(AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_chk_chk"),
                  Error);
}

TEST_CASE("bounds mode: every checked kernel family compiles, apart from its fast twin") {
  test::TempDir dir;
  CacheOptions o;
  o.dir = dir.path();
  KernelCache cache(o);
  // cache write, decode (16-bit and fp8, which differ in the fused write), the mma.sync prefill
  // (sm_80) and the Hopper wgmma prefill (sm_90).
  for (const char* text : {"cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90_chk",
                           "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_chk",
                           "decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_chk",
                           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm80_chk",
                           "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_chk"}) {
    INFO(text);
    const AttentionSpec s = AttentionSpec::parse(text);
    AttentionSpec fast = s;
    fast.check_bounds = false;
    const auto checked = cache.get(s);
    const auto plain = cache.get(fast);
    CHECK(checked->spec_string == text);
    CHECK(checked->key != plain->key);
    CHECK(checked->cubin != plain->cubin);
  }
  CHECK(cache.stats().compiles == 10);
}

TEST_CASE("bounds mode: layer configs and GRAPHATTN_CHECK_BOUNDS choose the checked kernels") {
  AttentionLayerConfig c = test::layer_config(8, 2, 128, 1024, 4);
  c.arch = 90;
  for (const auto& s : AttentionBackend(c).required_specs()) CHECK_FALSE(s.check_bounds);
  c.check_bounds = true;
  for (const auto& s : AttentionBackend(c).required_specs()) CHECK(s.check_bounds);
  c.check_bounds = false;
  ::setenv("GRAPHATTN_CHECK_BOUNDS", "1", 1);
  const AttentionBackend by_env(c);
  CHECK(by_env.config().check_bounds);
  for (const auto& s : by_env.required_specs()) {  // _chk, then the mixed graphs' _dsp, _dsp_long
    CHECK(s.check_bounds);
    CHECK(s.to_string().find("_chk") != std::string::npos);
  }
  ::setenv("GRAPHATTN_CHECK_BOUNDS", "yes", 1);
  CHECK(AttentionBackend(c).config().check_bounds);
  ::setenv("GRAPHATTN_CHECK_BOUNDS", "1abc", 1);
  CHECK_THROWS_WITH_AS(AttentionBackend{c},
                       doctest::Contains("GRAPHATTN_CHECK_BOUNDS='1abc' is not supported"), Error);
  ::unsetenv("GRAPHATTN_CHECK_BOUNDS");
  CHECK_THROWS_WITH_AS(AttentionBackend(c).take_bounds_violation(),
                       doctest::Contains("not in checked mode"), Error);
}
