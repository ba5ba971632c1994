// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstring>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/nvrtc_compiler.hpp"

using namespace graphattn;

namespace {

bool contains_bytes(const std::vector<char>& hay, const std::string& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

}  // namespace

TEST_CASE("nvrtc: the cache write kernel compiles to a cubin for sm_80 and sm_90") {
  const char* specs[] = {
      "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
      "cache_write_h64_b32_fp16_kvauto_g1_swa0_cap0_hnd_sm90",
      "cache_write_h256_b16_bf16_kve4m3_g1_swa0_cap0_nhd_sm80",
      "cache_write_h40_b256_fp16_kve5m2_g1_swa0_cap0_hnd_sm80",
  };
  for (const char* text : specs) {
    INFO(text);
    const KernelSource src = render_kernel(AttentionSpec::parse(text));
    double ms = 0;
    const std::vector<char> cubin = detail::nvrtc_compile(src, &ms);
    REQUIRE(cubin.size() > 64);
    CHECK(std::memcmp(cubin.data(),
                      "\x7f"
                      "ELF",
                      4) == 0);
    CHECK(contains_bytes(cubin, "graphattn_cache_write"));
    CHECK(ms > 0);
  }
}

TEST_CASE("nvrtc: a broken source raises CompileError with the log, options and line numbers") {
  KernelSource src;
  src.spec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";
  src.entry = "graphattn_cache_write";
  src.source = "// line 1\n// line 2\nextern \"C\" __global__ void f() { int x = ; }\n";
  src.options = {"--gpu-architecture=sm_90", "-std=c++17"};
  try {
    detail::nvrtc_compile(src, nullptr);
    FAIL("compiled a broken source");
  } catch (const CompileError& e) {
    CHECK(e.spec() == src.spec);
    CHECK(e.log().find("(3)") != std::string::npos);  // NVRTC names the line
    CHECK(e.log().find("error") != std::string::npos);
    CHECK(e.options() == src.options);
    CHECK(e.numbered_source().find("    3  extern \"C\"") != std::string::npos);
    CHECK(std::string(e.what()).find(src.spec) != std::string::npos);
  }
}

TEST_CASE("nvrtc: version is reported") {
  const auto [major, minor] = nvrtc_version();
  CHECK(major >= 12);
  CHECK(minor >= 0);
}
