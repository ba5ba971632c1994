// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/nvrtc_options.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/nvrtc_compiler.hpp"

using namespace graphattn;

namespace {

KeyInputs golden_inputs() {
  KeyInputs in;
  in.spec = "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90";
  in.source = "extern \"C\" __global__ void k() {}\n";
  in.options = {"--gpu-architecture=sm_90", "-std=c++17"};
  in.arch = 90;
  in.nvrtc_major = 13;
  in.nvrtc_minor = 0;
  in.format_version = 1;
  return in;
}

}  // namespace

TEST_CASE("key: golden value, stable across builds and processes") {
  // Changing this value invalidates every cache on disk: bump kCacheFormatVersion instead.
  CHECK(make_key(golden_inputs()).hex() == "5c98142d8133a488f4e0f81aa4499203");
  // Another process computes the same key.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string hex = make_key(golden_inputs()).hex();
    (void)!write(fds[1], hex.data(), hex.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[64] = {};
  const ssize_t n = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  CHECK(std::string(buf, n > 0 ? n : 0) == make_key(golden_inputs()).hex());
}

TEST_CASE("key: changes when any input changes") {
  const CacheKey base = make_key(golden_inputs());
  auto differs = [&](auto&& mutate) {
    KeyInputs in = golden_inputs();
    mutate(in);
    return make_key(in) != base;
  };
  CHECK(differs(
      [](KeyInputs& in) { in.spec = "decode_h128_b16_bf16_kvauto_g8_swa0_cap0_nhd_sm90"; }));
  CHECK(differs([](KeyInputs& in) { in.source += " "; }));
  CHECK(differs([](KeyInputs& in) { in.source[0] = 'E'; }));
  CHECK(differs([](KeyInputs& in) { in.options[1] = "-std=c++20"; }));
  CHECK(differs([](KeyInputs& in) { in.options.push_back("-lineinfo"); }));
  CHECK(differs([](KeyInputs& in) { in.options.pop_back(); }));
  CHECK(differs([](KeyInputs& in) { in.arch = 80; }));
  CHECK(differs([](KeyInputs& in) { in.nvrtc_major = 12; }));
  CHECK(differs([](KeyInputs& in) { in.nvrtc_minor = 1; }));
  CHECK(differs([](KeyInputs& in) { in.format_version = 2; }));
  // Field boundaries matter: moving a character from one field to the next changes the key.
  CHECK(differs([](KeyInputs& in) { in.options = {"--gpu-architecture=sm_90-std=c++17"}; }));
  CHECK(make_key(golden_inputs()) == base);
}

TEST_CASE("key: rendered sources differ per spec and carry their options") {
  const auto a =
      render_kernel(AttentionSpec::parse("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"));
  const auto b =
      render_kernel(AttentionSpec::parse("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm80"));
  CHECK(a.source != b.source);
  CHECK(a.source.find("// nvrtc options: --gpu-architecture=sm_90") != std::string::npos);
  CHECK(a.source.find("constexpr int HEAD_SIZE = 128;") != std::string::npos);
  CHECK(a.entry == "graphattn_cache_write");
}

TEST_CASE(
    "key: extra NVRTC options (GRAPHATTN_NVRTC_EXTRA_OPTIONS) enter the options and the key") {
  const AttentionSpec spec =
      AttentionSpec::parse("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  const KernelSource plain = detail::render_kernel(spec, {});
  const KernelSource mid = detail::render_kernel(spec, {"--Ofast-compile=mid"});
  const KernelSource o1 = detail::render_kernel(spec, {"--ptxas-options=-O1"});
  REQUIRE(mid.options.size() == plain.options.size() + 1);
  CHECK(mid.options.back() == "--Ofast-compile=mid");
  CHECK(mid.source.find(" -minimal --Ofast-compile=mid\n") != std::string::npos);
  // A kernel compiled with other options is looked up under another key, never the default's.
  CHECK(kernel_key(plain, 90) != kernel_key(mid, 90));
  CHECK(kernel_key(plain, 90) != kernel_key(o1, 90));
  CHECK(kernel_key(mid, 90) != kernel_key(o1, 90));
  CHECK(kernel_key(plain, 90) == kernel_key(detail::render_kernel(spec, {}), 90));
}

TEST_CASE("key: GRAPHATTN_NVRTC_EXTRA_OPTIONS's parser takes the listed options and names others") {
  CHECK(detail::parse_nvrtc_extra_options("").empty());
  CHECK(detail::parse_nvrtc_extra_options("  \t ").empty());
  const std::vector<std::string> two =
      detail::parse_nvrtc_extra_options(" --Ofast-compile=max  -Xptxas=-O1 --maxrregcount=128 ");
  CHECK(two ==
        std::vector<std::string>{"--Ofast-compile=max", "-Xptxas=-O1", "--maxrregcount=128"});
  CHECK(detail::parse_nvrtc_extra_options("--ptxas-options=-O2").size() == 1);
  CHECK(detail::parse_nvrtc_extra_options("-DGA_DECODE_TIMING=1") ==
        std::vector<std::string>{"-DGA_DECODE_TIMING=1"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_DECODE_TIMING=1 -DGA_DECODE_EARLY_TRIGGER=1") ==
        std::vector<std::string>{"-DGA_DECODE_TIMING=1", "-DGA_DECODE_EARLY_TRIGGER=1"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_DECODE_PAGE_SORT=0 -DGA_DECODE_PAGE_SORT=32") ==
        std::vector<std::string>{"-DGA_DECODE_PAGE_SORT=0", "-DGA_DECODE_PAGE_SORT=32"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_DECODE_CLUSTER_PUSH=0") ==
        std::vector<std::string>{"-DGA_DECODE_CLUSTER_PUSH=0"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_FP8_CVT_HW=1") ==
        std::vector<std::string>{"-DGA_FP8_CVT_HW=1"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_FP8_CVT_HW=0") ==
        std::vector<std::string>{"-DGA_FP8_CVT_HW=0"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_PREFILL_SM90_SCHED=0 -DGA_PREFILL_SM90_SCHED=7 "
                                          "-DGA_PREFILL_SM90_SCHED=16 -DGA_PREFILL_SM90_SCHED=255 "
                                          "-DGA_PREFILL_SM90_SCHED=1023 "
                                          "-DGA_PREFILL_SM90_SCHED=1168 "
                                          "-DGA_PREFILL_SM90_SCHED=4095") ==
        std::vector<std::string>{"-DGA_PREFILL_SM90_SCHED=0", "-DGA_PREFILL_SM90_SCHED=7",
                                 "-DGA_PREFILL_SM90_SCHED=16", "-DGA_PREFILL_SM90_SCHED=255",
                                 "-DGA_PREFILL_SM90_SCHED=1023", "-DGA_PREFILL_SM90_SCHED=1168",
                                 "-DGA_PREFILL_SM90_SCHED=4095"});
  CHECK(detail::parse_nvrtc_extra_options(
            "-DGA_PREFILL_SM90_FP8_SCHED=0 -DGA_PREFILL_SM90_FP8_SCHED=4095 "
            "-DGA_PREFILL_SM90_FP8_SCHED=32767 -DGA_PREFILL_SM90_FP8_SCHED=65535") ==
        std::vector<std::string>{
            "-DGA_PREFILL_SM90_FP8_SCHED=0", "-DGA_PREFILL_SM90_FP8_SCHED=4095",
            "-DGA_PREFILL_SM90_FP8_SCHED=32767", "-DGA_PREFILL_SM90_FP8_SCHED=65535"});
  CHECK(detail::parse_nvrtc_extra_options(
            "-DGA_PREFILL_SM90_FP8_VAR=0 -DGA_PREFILL_SM90_FP8_VAR=1023 "
            "-DGA_PREFILL_SM90_FP8_VAR=2047") ==
        std::vector<std::string>{"-DGA_PREFILL_SM90_FP8_VAR=0", "-DGA_PREFILL_SM90_FP8_VAR=1023",
                                 "-DGA_PREFILL_SM90_FP8_VAR=2047"});
  CHECK(detail::parse_nvrtc_extra_options(
            "-DGA_PREFILL_SM90_PERSIST=0 -DGA_PREFILL_SM90_PERSIST=3") ==
        std::vector<std::string>{"-DGA_PREFILL_SM90_PERSIST=0", "-DGA_PREFILL_SM90_PERSIST=3"});
  CHECK(detail::parse_nvrtc_extra_options(
            "-DGA_PREFILL_SM90_LEGACY_VAR=0 -DGA_PREFILL_SM90_LEGACY_VAR=255") ==
        std::vector<std::string>{"-DGA_PREFILL_SM90_LEGACY_VAR=0",
                                 "-DGA_PREFILL_SM90_LEGACY_VAR=255"});
  CHECK(
      detail::parse_nvrtc_extra_options("-DGA_PREFILL_SM90_BSTART=0 -DGA_PREFILL_SM90_BSTART=15") ==
      std::vector<std::string>{"-DGA_PREFILL_SM90_BSTART=0", "-DGA_PREFILL_SM90_BSTART=15"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_DECODE_FP8_PAIR=0 -DGA_DECODE_FP8_PAIR=511") ==
        std::vector<std::string>{"-DGA_DECODE_FP8_PAIR=0", "-DGA_DECODE_FP8_PAIR=511"});
  CHECK(detail::parse_nvrtc_extra_options("-DGA_DECODE_PAIR16=0 -DGA_DECODE_PAIR16=7") ==
        std::vector<std::string>{"-DGA_DECODE_PAIR16=0", "-DGA_DECODE_PAIR16=7"});
  for (const char* bad : {"--gpu-architecture=sm_80",
                          "-G",
                          "--Ofast-compile=fast",
                          "--Ofast-compile",
                          "--ptxas-options=",
                          "--maxrregcount=0",
                          "--maxrregcount=12x",
                          "--maxrregcount=1000",
                          "-DHEAD_SIZE=64",
                          "-DGA_DECODE_TIMING=0",
                          "-DGA_DECODE_TIMING",
                          "-DGA_DECODE_BT_EARLY=1",
                          "-DGA_DECODE_PAGE_SORT=33",
                          "-DGA_DECODE_PAGE_SORT=",
                          "-DGA_DECODE_PAGE_SORT",
                          "-DGA_DECODE_EARLY_TRIGGER=0",
                          "-DGA_DECODE_EARLY_TRIGGER",
                          "-DGA_DECODE_CLUSTER_PUSH=1",
                          "-DGA_FP8_CVT_HW=2",
                          "-DGA_FP8_CVT_HW",
                          "-DGA_PREFILL_SM90_SCHED=4096",
                          "-DGA_PREFILL_SM90_BSTART=16",
                          "-DGA_PREFILL_SM90_BSTART=",
                          "-DGA_PREFILL_SM90_SCHED=",
                          "-DGA_PREFILL_SM90_SCHED=08",
                          "-DGA_PREFILL_SM90_SCHED=-1",
                          "-DGA_PREFILL_SM90_SCHED=1x",
                          "-DGA_PREFILL_SM90_SCHED=10000",
                          "-DGA_PREFILL_SM90_FP8_SCHED=65536",
                          "-DGA_PREFILL_SM90_FP8_SCHED=",
                          "-DGA_PREFILL_SM90_FP8_VAR=2048",
                          "-DGA_PREFILL_SM90_FP8_VAR=",
                          "-DGA_PREFILL_SM90_FP8_VAR=1x",
                          "-DGA_PREFILL_SM90_FP8_VAR=-1",
                          "-DGA_PREFILL_SM90_FP8_VAR=007",
                          "-DGA_PREFILL_SM90_PERSIST=4",
                          "-DGA_PREFILL_SM90_PERSIST=",
                          "-DGA_PREFILL_SM90_PERSIST=01",
                          "-DGA_PREFILL_SM90_LEGACY_VAR=256",
                          "-DGA_PREFILL_SM90_LEGACY_VAR=",
                          "-DGA_PREFILL_SM90_LEGACY_VAR=03",
                          "-DGA_DECODE_FP8_PAIR=512",
                          "-DGA_DECODE_FP8_PAIR=",
                          "-DGA_DECODE_PAIR16=9",
                          "-DGA_DECODE_PAIR16=",
                          "-DGA_DECODE_PAIR16=01",
                          "--maxrregcount=064"}) {
    bool threw = false;
    try {
      detail::parse_nvrtc_extra_options(std::string("--Ofast-compile=mid ") + bad);
    } catch (const Error& e) {
      threw = true;
      const std::string what = e.what();
      CHECK_MESSAGE(what.find(std::string("'") + bad + "'") != std::string::npos, what);
      CHECK(what.find("GRAPHATTN_NVRTC_EXTRA_OPTIONS") != std::string::npos);
      CHECK(what.find("--Ofast-compile=min|mid|max|0") != std::string::npos);
    }
    CHECK_MESSAGE(threw, bad);
  }
}
