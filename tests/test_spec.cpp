// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/spec.hpp"

using namespace graphattn;

namespace {

std::string validate_message(const AttentionSpec& s) {
  try {
    s.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

AttentionSpec base() {
  return AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
}

}  // namespace

TEST_CASE("spec: every axis rejects bad values with the value and the allowed set") {
  AttentionSpec s = base();
  s.head_size = 100;
  CHECK(validate_message(s) ==
        "head size 100 is not supported; supported: 32, 40, ..., 256 (multiples of 8)");
  s.head_size = 24;
  CHECK(validate_message(s).find("head size 24") == 0);
  s.head_size = 264;
  CHECK(validate_message(s).find("head size 264") == 0);
  s = base();
  for (int b : {0, 24, 272, 512}) {
    s.block_size = b;
    CHECK(validate_message(s) ==
          "block size " + std::to_string(b) +
              " is not supported; supported: 16, 32, ..., 256 (multiples of 16; cache writes "
              "and legacy decode also 8)");
  }
  s.block_size = 8;  // the cache writes' and the legacy decode's only
  CHECK(validate_message(s) ==
        "spec decode_h128_b8_bf16_kvauto_g4_swa0_cap0_nhd_sm90: block size 8 is not supported by "
        "the decode kernel with the nhd layout and KV cache dtype auto; supported: 16, 32, ..., "
        "256 (multiples of 16; 8: cache_write, and decode with the legacy layout and KV cache "
        "dtype auto)");
  s = base();
  s.dtype = static_cast<DType>(7);
  CHECK(validate_message(s) == "dtype 7 is not supported; supported: fp16, bf16, fp32");
  s = base();
  s.kv_dtype = static_cast<KvDType>(9);
  CHECK(validate_message(s) == "KV cache dtype 9 is not supported; supported: auto, e4m3, e5m2");
  s = base();
  for (int g : {0, -1, 65}) {
    s.group = g;
    CHECK(validate_message(s) == "queries per KV head (group) " + std::to_string(g) +
                                     " is not supported; supported: 1..64");
  }
  s = base();
  s.layout = static_cast<KvLayout>(3);
  CHECK(validate_message(s) == "KV layout 3 is not supported; supported: nhd, hnd, legacy");
  s = base();
  s.arch = 75;
  CHECK(validate_message(s).find("target arch sm_75 is not supported; supported: sm_80, sm_86") ==
        0);
  s = base();
  s.kind = static_cast<KernelKind>(11);
  CHECK(validate_message(s).find("kernel kind 11 is not supported") == 0);
  s = base();
  s.kind = KernelKind::kCacheWrite;
  CHECK(validate_message(s).find("the cache write kernel does not depend on queries per KV head "
                                 "(group) (g4); use g1, e.g. cache_write_h128_") !=
        std::string::npos);
}

TEST_CASE("spec: every supported value validates") {
  AttentionSpec s = base();
  for (int h : supported_head_sizes()) {
    s.head_size = h;
    CHECK_NOTHROW(s.validate());
  }
  for (int b : supported_block_sizes()) {
    s.block_size = b;
    CHECK_NOTHROW(s.validate());
  }
  CHECK(supported_head_sizes().size() == 29);
  CHECK(supported_block_sizes().size() == 16);
}

TEST_CASE("spec: canonical string round trip over every axis") {
  const char* examples[] = {
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
      "cache_write_h64_b32_fp16_kve4m3_g1_swa0_cap0_hnd_sm80",
      "decode_h256_b32_bf16_kve5m2_g1_swa1_cap1_nhd_sm89",
      "prefill_h72_b128_fp16_kvauto_g5_swa1_cap0_hnd_sm120",
  };
  for (const char* e : examples) CHECK(AttentionSpec::parse(e).to_string() == e);
  AttentionSpec s = base();
  for (auto kind : {KernelKind::kDecode, KernelKind::kPrefill})
    for (auto dt : {DType::kFloat16, DType::kBFloat16})
      for (auto kv : {KvDType::kAuto, KvDType::kFp8E4M3, KvDType::kFp8E5M2})
        for (auto lay : {KvLayout::kNHD, KvLayout::kHND})
          for (int flags = 0; flags < 4; ++flags) {
            s.kind = kind;
            s.group = 4;
            s.dtype = dt;
            s.kv_dtype = kv;
            s.layout = lay;
            s.sliding_window = flags & 1;
            s.soft_cap = flags & 2;
            const AttentionSpec back = AttentionSpec::parse(s.to_string());
            CHECK(back == s);
            CHECK(back.to_string() == s.to_string());
          }
}

TEST_CASE("spec: the parser rejects malformed strings with a clear error") {
  const char* bad[] = {
      "",
      "decode",
      "attend_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_",
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90x",
      "decode_h0128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
      "decode_h-128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
      "decode_h128_b16_f32_kvauto_g4_swa0_cap0_nhd_sm90",
      "decode_h128_b16_bf16_kvfp8_g4_swa0_cap0_nhd_sm90",
      "decode_h128_b16_bf16_kvauto_g4_swa2_cap0_nhd_sm90",
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nchw_sm90",
      "decode_h128_b16_bf16_kvauto_g4_cap0_swa0_nhd_sm90",
      "DECODE_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm",
      "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90 ",
      "decode_h128_b16_bf16_kvauto_g9999999_swa0_cap0_nhd_sm90",
  };
  for (const char* b : bad) {
    INFO("input: '" << b << "'");
    try {
      AttentionSpec::parse(b);
      FAIL("accepted");
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK(msg.find("malformed spec string '" + std::string(b) + "'") == 0);
      CHECK(msg.find("expected <cache_write|decode|prefill|kv_scale|merge_states|block_copy>") !=
            std::string::npos);
    }
  }
  // Well formed but unsupported values fail validation with the axis message.
  CHECK_THROWS_WITH_AS(AttentionSpec::parse("decode_h100_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"),
                       doctest::Contains("head size 100 is not supported"), Error);
  CHECK_THROWS_WITH_AS(AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm70"),
                       doctest::Contains("target arch sm_70 is not supported"), Error);
}

TEST_CASE("spec: parse messages say which field is bad and escape what they echo") {
  struct Case {
    std::string input;
    const char* says;
  };
  const Case cases[] = {
      {"decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm",
       "arch field '_sm' has no number: found the end"},
      {"decode_h128_b16_bf16_kvauto_g4_swa2_cap0_nhd_sm90",
       "window field '_swa' must be 0 or 1, found 2"},
      {"decode_h0128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
       "head size field '_h' has a number with a leading zero"},
      {"decode_h128_b16_bf16_kvauto_g9999999_swa0_cap0_nhd_sm90",
       "(group) field '_g' has a number of more than 6 digits"},
      {"decode_h128_b16_f32_kvauto_g4_swa0_cap0_nhd_sm90",
       "dtype field missing: expected _fp16, _bf16 or _fp32 at offset 15, found '_f32_kvauto"},
      {"decode_h128_b16_bf16_kvauto_g4_cap0_swa0_nhd_sm90",
       "window field missing: expected '_swa<number>' at offset 30"},
      {"decode_h128\x1b[2J_b16", "'decode_h128\\x1b[2J_b16'"},
      {"decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90\xc3\xa9",
       "trailing characters '\\xc3\\xa9'"},
      {std::string("decode_h128\0_b16", 16), "'decode_h128\\x00_b16'"},
      {"decode_" + std::string(100000, 'x'), "... (100007 bytes)"},
  };
  for (const auto& c : cases) {
    INFO("input: " << detail::printable(c.input));
    try {
      AttentionSpec::parse(c.input);
      FAIL("accepted");
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(c.says) != std::string::npos, msg);
      CHECK(msg.size() < 1000);
      for (char ch : msg) CHECK((ch >= 0x20 && ch < 0x7f));
    }
  }
}

TEST_CASE("spec: the e4m3 query axis (_qe4m3) needs an fp8 cache and a paged attention kernel") {
  // Today's strings still name today's kernels: no suffix without the axis.
  const AttentionSpec plain =
      AttentionSpec::parse("decode_h128_b16_bf16_kve4m3_g8_swa0_cap0_nhd_sm90");
  CHECK_FALSE(plain.q_fp8);
  for (const char* text : {"decode_h128_b16_bf16_kve4m3_g8_swa0_cap0_nhd_sm90_qe4m3",
                           "decode_h64_b32_fp16_kve5m2_g1_swa1_cap1_hnd_sm80_sink_chk_qe4m3",
                           "decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_legacy_sm89_mt_qe4m3",
                           "prefill_h128_b16_bf16_kve4m3_g8_swa0_cap0_nhd_sm90_qe4m3",
                           "prefill_h96_b32_fp16_kve5m2_g2_swa0_cap1_hnd_sm80_nc_qe4m3"}) {
    INFO(text);
    const AttentionSpec s = AttentionSpec::parse(text);
    CHECK(s.q_fp8);
    CHECK(s.to_string() == text);
    CHECK(s != plain);
  }
  CHECK_THROWS_WITH_AS(
      AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g8_swa0_cap0_nhd_sm90_qe4m3"),
      doctest::Contains("an e4m3 query (_qe4m3) needs an fp8 KV cache dtype; supported: kve4m3, "
                        "kve5m2"),
      Error);
  CHECK_THROWS_WITH_AS(
      AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g8_swa0_cap0_nhd_sm90_nc_dense_qe4m3"),
      doctest::Contains("does not depend on query dtype e4m3 (qe4m3)"), Error);
  AttentionSpec s = plain;
  s.q_fp8 = true;
  CHECK(s.for_kernel(KernelKind::kPrefill).q_fp8);
  CHECK(s.for_kernel(KernelKind::kCacheWrite).q_fp8 == false);
}
