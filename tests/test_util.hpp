// SPDX-License-Identifier: Apache-2.0
// Shared test helpers: a temporary directory (and kernel cache) per test, random data, and the
// GPU guard.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/runtime.hpp"
#include "jit_cache/nvrtc_compiler.hpp"

namespace graphattn::test {

// The message of the graphattn::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// NVRTC builds `src` into a cubin: an ELF image that holds the kernel's entry point.
inline void check_cubin_builds(const KernelSource& src) {
  INFO(src.spec);
  const std::vector<char> cubin = detail::nvrtc_compile(src, nullptr);
  REQUIRE(cubin.size() > 64);
  CHECK(std::string(cubin.data(), 4) ==
        "\x7f"
        "ELF");
  CHECK(std::search(cubin.begin(), cubin.end(), src.entry.begin(), src.entry.end()) != cubin.end());
}

// The process's peak resident memory so far (VmHWM of /proc/self/status), in MiB.
inline double peak_rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

// A device address that is never dereferenced: for checks that must fail before any launch.
inline void* fake_device(uintptr_t at) { return reinterpret_cast<void*>(at); }

// Whether `s` contains `part` (an error message its expected words).
inline bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "graphattn-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A KernelCache in a fresh TempDir, so a test compiles into a cache of its own and leaves
// nothing behind. TempDir is the first base: the directory exists before the cache opens it and
// is removed only after the cache has closed.
class TempKernelCache : private TempDir, public KernelCache {
 public:
  TempKernelCache() : KernelCache(options_in(path())) {}

 private:
  static CacheOptions options_in(const std::string& dir) {
    CacheOptions o;
    o.dir = dir;
    o.use_remote = false;  // never a developer's GRAPHATTN_REMOTE_CACHE
    return o;
  }
};

// A generator seeded from the clock unless GRAPHATTN_TEST_SEED is set; the seed is logged so a
// failure can be reproduced.
inline std::mt19937_64 make_rng() {
  const char* s = std::getenv("GRAPHATTN_TEST_SEED");
  const uint64_t seed = s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
  MESSAGE("random seed " << seed << " (set GRAPHATTN_TEST_SEED to repeat)");
  return std::mt19937_64(seed);
}

// A device copy of per-head values as fp32 (ALiBi slopes, sink logits); an empty buffer (data()
// null) when there are none.
inline DeviceBuffer upload_floats(const std::vector<double>& v) {
  if (v.empty()) return DeviceBuffer();
  const std::vector<float> f(v.begin(), v.end());
  DeviceBuffer d(f.size() * 4);
  d.upload(f.data(), f.size() * 4);
  return d;
}

// Every cache element a decode batch may read: for each request r, each position of its keys
// that the window keeps (all of [0, seq_lens[r]) when window is 0), each KV head h and element
// d: visit(blk, off, h, d, ref), where blk is the physical block of the position from the block
// table ([n, max_blocks]), off its slot in the block and ref its index in the float64
// reference's [num_blocks, block_size, kv_heads, head_size] copy.
template <typename Visit>
void for_each_live_kv(const std::vector<int>& seq_lens, int window,
                      const std::vector<int>& block_table, int64_t max_blocks, int64_t block_size,
                      int64_t kv_heads, int64_t head_size, Visit&& visit) {
  for (size_t r = 0; r < seq_lens.size(); ++r) {
    const int s = seq_lens[r];
    const int lo = window > 0 ? std::max(0, s - window) : 0;
    for (int pos = lo; pos < s; ++pos) {
      const int64_t blk = block_table[r * max_blocks + pos / block_size];
      const int64_t off = pos % block_size;
      for (int64_t h = 0; h < kv_heads; ++h)
        for (int64_t d = 0; d < head_size; ++d)
          visit(blk, off, h, d, ((blk * block_size + off) * kv_heads + h) * head_size + d);
    }
  }
}

// Sets an environment variable for one scope (value nullptr: unsets it) and restores what was
// there at its end; set() changes it again within the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    set(value);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }
  void set(const char* value) const {
    if (value)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// GRAPHATTN_TEST_REDUCED=1: a small matrix (for compute-sanitizer runs).
inline bool reduced() {
  const char* r = std::getenv("GRAPHATTN_TEST_REDUCED");
  return r && std::string(r) == "1";
}

}  // namespace graphattn::test

// Skips the rest of a GPU test case, with a message, where no GPU is present.
#define GA_REQUIRE_GPU()                              \
  do {                                                \
    std::string ga_why_;                              \
    if (!::graphattn::gpu_available(&ga_why_)) {      \
      MESSAGE("skipped: no GPU (" << ga_why_ << ")"); \
      return;                                         \
    }                                                 \
    ::graphattn::ensure_context(0);                   \
  } while (0)
