// SPDX-License-Identifier: Apache-2.0
// Layered cache directories (CacheOptions::dirs, GRAPHATTN_CACHE_DIRS) and read-only layers: a
// directory baked into a read-only image layer serves its verified entries, and new kernels go
// to the first writable layer (or stay in memory).
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "tests/read_only_view.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
namespace fs = std::filesystem;

namespace {

const char* kSpec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";
const char* kOther = "cache_write_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";

AttentionSpec spec(const char* s) { return AttentionSpec::parse(s); }

CacheOptions layered(std::vector<std::string> dirs, std::vector<std::string>* warnings) {
  CacheOptions o;
  o.dirs = std::move(dirs);
  o.warn = [warnings](const std::string& m) { warnings->push_back(m); };
  return o;
}

size_t entry_count(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".gakc";
  return n;
}

// Fills dir with the kernel for kSpec, as an image build step would.
void bake(const std::string& dir) {
  std::vector<std::string> warnings;
  KernelCache c(layered({dir}, &warnings));
  CacheOrigin origin{};
  c.get(spec(kSpec), &origin);
  REQUIRE(origin == CacheOrigin::kCompiled);
  REQUIRE(entry_count(dir) == 1);
}

}  // namespace

TEST_CASE("cache layers: searched in order; new kernels go to the first writable layer") {
  test::TempDir first, second;
  bake(second.path());
  std::vector<std::string> warnings;
  KernelCache c(layered({first.path(), second.path()}, &warnings));
  CHECK(warnings.empty());
  const auto layers = c.layers();
  REQUIRE(layers.size() == 2);
  CHECK((layers[0].dir == first.path() && layers[0].writable));
  CHECK((layers[1].dir == second.path() && layers[1].writable));
  CHECK(c.dir() == first.path());

  CacheOrigin origin{};
  c.get(spec(kSpec), &origin);
  CHECK(origin == CacheOrigin::kDisk);  // from the second layer
  c.get(spec(kOther), &origin);
  CHECK(origin == CacheOrigin::kCompiled);
  CHECK(entry_count(first.path()) == 1);  // the new kernel
  CHECK(entry_count(second.path()) == 1);
  CHECK(c.stats().compiles == 1);
  CHECK(c.stats().disk_hits == 1);
}

TEST_CASE("cache layers: a read-only layer serves its verified entries and is never written") {
  test::TempDir system, user;
  bake(system.path());
  test::ReadOnlyView ro(system.path());
  if (!ro.ok()) {
    MESSAGE("skipped: cannot make a read-only directory here (" << ro.why() << ")");
    return;
  }
  {
    INFO("a read-only system layer over the user's own");
    std::vector<std::string> warnings;
    KernelCache c(layered({ro.path(), user.path()}, &warnings));
    CHECK(warnings.empty());
    const auto layers = c.layers();
    REQUIRE(layers.size() == 2);
    CHECK_FALSE(layers[0].writable);
    CHECK(layers[1].writable);
    CHECK(c.dir() == user.path());
    CacheOrigin origin{};
    c.get(spec(kSpec), &origin);
    CHECK(origin == CacheOrigin::kDisk);
    CHECK(c.stats().compiles == 0);
    c.get(spec(kOther), &origin);
    CHECK(origin == CacheOrigin::kCompiled);
    CHECK(entry_count(user.path()) == 1);
    CHECK(entry_count(system.path()) == 1);
  }
  {
    INFO("the read-only layer alone: served, and new kernels stay in memory");
    std::vector<std::string> warnings;
    KernelCache c(layered({ro.path()}, &warnings));
    CHECK(c.disk_enabled());
    CHECK(c.dir().empty());
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("no writable cache directory") != std::string::npos);
    CHECK(warnings[0].find(ro.path()) != std::string::npos);
    CacheOrigin origin{};
    c.get(spec(kSpec), &origin);
    CHECK(origin == CacheOrigin::kDisk);
    c.get(spec(kOther), &origin);
    CHECK(origin == CacheOrigin::kCompiled);
    CHECK(c.stats().write_failures == 0);
    CHECK(entry_count(system.path()) == 1);
  }
}

TEST_CASE("cache layers: a bad entry in a read-only layer is never served") {
  test::TempDir system;
  bake(system.path());
  for (const auto& e : fs::directory_iterator(system.path())) {
    if (e.path().extension() != ".gakc") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');  // the last payload byte: the payload checksum no longer matches
  }
  test::ReadOnlyView ro(system.path());
  if (!ro.ok()) {
    MESSAGE("skipped: cannot make a read-only directory here (" << ro.why() << ")");
    return;
  }
  std::vector<std::string> warnings;
  KernelCache c(layered({ro.path()}, &warnings));
  CacheOrigin origin{};
  c.get(spec(kSpec), &origin);
  CHECK(origin == CacheOrigin::kCompiled);
  CHECK(c.stats().repairs == 1);
}

TEST_CASE("cache layers: GRAPHATTN_CACHE_DIRS") {
  test::TempDir a, b;
  ::setenv("GRAPHATTN_CACHE_DIRS", ("relative/dir:" + a.path()).c_str(), 1);
  CHECK_THROWS_WITH_AS(check_cache_environment(), doctest::Contains("'relative/dir'"), Error);
  ::setenv("GRAPHATTN_CACHE_DIRS", (a.path() + "::" + b.path() + ":").c_str(), 1);
  CHECK_NOTHROW(check_cache_environment());
  {
    CacheOptions o;
    o.warn = [](const std::string&) {};
    KernelCache c(o);
    const auto layers = c.layers();
    REQUIRE(layers.size() == 2);
    CHECK(layers[0].dir == a.path());
    CHECK(layers[1].dir == b.path());
  }
  {
    INFO("explicit options win over the environment");
    CacheOptions o;
    o.dir = b.path();
    o.warn = [](const std::string&) {};
    KernelCache c(o);
    REQUIRE(c.layers().size() == 1);
    CHECK(c.layers()[0].dir == b.path());
    o.dir.clear();
    o.dirs = {b.path()};
    KernelCache d(o);
    REQUIRE(d.layers().size() == 1);
    CHECK(d.layers()[0].dir == b.path());
  }
  ::unsetenv("GRAPHATTN_CACHE_DIRS");
}
