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

TEST_CASE("legacy decode: NVRTC builds the axes (fp8, window, cap, ALiBi, sinks, mt, chk)") {
  for (const char* text : {"decode_h128_b32_fp16_kve5m2_g1_swa1_cap1_legacy_sm80_alibi",
                           "decode_h64_b16_bf16_kve4m3_g16_swa0_cap0_legacy_sm90_sink_mt",
                           "decode_h80_b16_bf16_kvauto_g8_swa1_cap0_legacy_sm90_alibi_sink",
                           "decode_h256_b16_fp16_kvauto_g2_swa0_cap0_legacy_sm90_mt_chk",
                           "decode_h192_b32_bf16_kve4m3_g32_swa0_cap1_legacy_sm89"}) {
    INFO(text);
    test::check_cubin_builds(render_kernel(AttentionSpec::parse(text)));
  }
}
