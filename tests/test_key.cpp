// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "graphattn/jit.hpp"

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
