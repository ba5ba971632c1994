// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/disk_tier.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
namespace fs = std::filesystem;

namespace {

const char* kSpec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";

AttentionSpec spec(const char* s = kSpec) { return AttentionSpec::parse(s); }

CacheOptions options_for(const std::string& dir) {
  CacheOptions o;
  o.dir = dir;
  o.warn = [](const std::string&) {};
  return o;
}

std::vector<fs::path> entries(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".gakc") out.push_back(e.path());
  return out;
}

std::vector<char> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}
void write_all(const fs::path& p, const std::vector<char>& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

}  // namespace

TEST_CASE("memory tier: 16 threads asking for one key compile it once") {
  for (bool disk : {false, true}) {
    test::TempDir dir;
    CacheOptions o = options_for(dir.path());
    o.use_disk = disk;
    KernelCache cache(o);
    std::atomic<int> go{0};
    std::vector<std::shared_ptr<const CompiledKernel>> got(16);
    std::vector<std::thread> threads;
    for (int i = 0; i < 16; ++i)
      threads.emplace_back([&, i] {
        while (!go.load()) std::this_thread::yield();
        got[i] = cache.get(spec());
      });
    go = 1;
    for (auto& t : threads) t.join();
    const CacheStats s = cache.stats();
    CHECK(s.compiles == 1);
    CHECK(s.misses == 1);
    CHECK(s.memory_hits == 15);
    CHECK(s.disk_hits == 0);
    for (const auto& k : got) CHECK(k.get() == got[0].get());
    CacheOrigin origin;
    cache.get(spec(), &origin);
    CHECK(origin == CacheOrigin::kMemory);
    CHECK(cache.disk_enabled() == disk);
  }
}

TEST_CASE("disk tier: a new cache object over the same directory hits with zero compiles") {
  test::TempDir dir;
  std::vector<char> first;
  {
    KernelCache a(options_for(dir.path()));
    first = a.get(spec())->cubin;
    CHECK(a.stats().compiles == 1);
  }
  KernelCache b(options_for(dir.path()));
  CacheOrigin origin;
  auto k = b.get(spec(), &origin);
  CHECK(origin == CacheOrigin::kDisk);
  CHECK(k->cubin == first);
  CHECK(k->spec_string == kSpec);
  CHECK(k->compile_ms > 0);
  const CacheStats s = b.stats();
  CHECK(s.compiles == 0);
  CHECK(s.disk_hits == 1);
  CHECK(s.misses == 0);
  CHECK(entries(dir.path()).size() == 1);
}

TEST_CASE("disk tier: corrupt entries are detected, repaired, counted and never served") {
  test::TempDir dir;
  std::vector<char> good;
  {
    KernelCache a(options_for(dir.path()));
    good = a.get(spec())->cubin;
  }
  const fs::path path = entries(dir.path()).at(0);
  const std::vector<char> image = read_all(path);
  struct Damage {
    const char* name;
    std::function<void(std::vector<char>&)> apply;
    detail::EntryStatus expect;
  };
  const Damage damages[] = {
      {"truncated", [](std::vector<char>& v) { v.resize(v.size() / 2); },
       detail::EntryStatus::kTruncated},
      {"flipped payload byte", [](std::vector<char>& v) { v[v.size() - 100] ^= 0x20; },
       detail::EntryStatus::kBadChecksum},
      {"flipped header byte", [](std::vector<char>& v) { v[90] ^= 0x01; },
       detail::EntryStatus::kBadChecksum},
      {"wrong magic", [](std::vector<char>& v) { v[0] = 'X'; }, detail::EntryStatus::kBadMagic},
      {"wrong version", [](std::vector<char>& v) { v[8] = 99; }, detail::EntryStatus::kBadVersion},
      {"empty file", [](std::vector<char>& v) { v.clear(); }, detail::EntryStatus::kTruncated},
  };
  for (const auto& d : damages) {
    INFO(d.name);
    std::vector<char> bad = image;
    d.apply(bad);
    write_all(path, bad);
    CHECK(detail::DiskTier::inspect(path.string()).status == d.expect);
    KernelCache c(options_for(dir.path()));
    CacheOrigin origin;
    auto k = c.get(spec(), &origin);
    CHECK(origin == CacheOrigin::kCompiled);
    CHECK(k->cubin == good);
    const CacheStats s = c.stats();
    CHECK(s.repairs == 1);
    CHECK(s.compiles == 1);
    CHECK(s.disk_hits == 0);
    // Repaired on disk: the next object hits.
    CHECK(detail::DiskTier::inspect(path.string()).status == detail::EntryStatus::kOk);
    KernelCache again(options_for(dir.path()));
    again.get(spec(), &origin);
    CHECK(origin == CacheOrigin::kDisk);
  }
}

TEST_CASE("disk tier: two processes asking for one key compile it once, identical cubins") {
  test::TempDir dir;
  int go[2], result[2];
  REQUIRE(pipe(go) == 0);
  REQUIRE(pipe(result) == 0);
  std::vector<pid_t> kids;
  for (int i = 0; i < 2; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      char c;
      close(go[1]);
      if (read(go[0], &c, 1) != 1) _exit(3);
      KernelCache cache(options_for(dir.path()));
      auto k = cache.get(spec());
      const uint64_t line[3] = {
          cache.stats().compiles,
          std::hash<std::string>{}(std::string(k->cubin.begin(), k->cubin.end())),
          cache.stats().disk_hits};
      (void)!write(result[1], line, sizeof line);
      _exit(0);
    }
    kids.push_back(pid);
  }
  close(go[0]);
  close(result[1]);
  const char start[2] = {1, 1};
  REQUIRE(write(go[1], start, 2) == 2);  // release both at once
  close(go[1]);
  uint64_t lines[2][3] = {};
  for (auto& l : lines) REQUIRE(read(result[0], l, sizeof l) == sizeof l);
  close(result[0]);
  for (pid_t p : kids) {
    int status = 0;
    waitpid(p, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(lines[0][0] + lines[1][0] == 1);  // exactly one compile between them
  CHECK(lines[0][2] + lines[1][2] == 1);  // the other found it on disk
  CHECK(lines[0][1] == lines[1][1]);      // identical cubins
  CHECK(entries(dir.path()).size() == 1);
}

TEST_CASE("disk tier: a process killed while compiling or writing leaves no partial entry") {
  test::TempDir dir;
  // Kill at a spread of moments across a cold compile and write; afterwards every visible
  // entry must be whole and the next request must succeed without waiting on a dead lock.
  for (int delay_ms : {0, 1, 2, 4, 7, 10, 14, 19, 25, 32, 40, 60}) {
    INFO("kill after " << delay_ms << " ms");
    for (const auto& e : fs::directory_iterator(dir.path())) fs::remove(e.path());
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      KernelCache cache(options_for(dir.path()));
      cache.get(spec());
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    for (const auto& p : entries(dir.path()))
      CHECK(detail::DiskTier::inspect(p.string()).status == detail::EntryStatus::kOk);
    CacheOptions o = options_for(dir.path());
    o.lock_timeout = std::chrono::milliseconds(5000);
    KernelCache cache(o);
    const auto t0 = std::chrono::steady_clock::now();
    auto k = cache.get(spec());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK(k->cubin.size() > 0);
    CHECK(ms < 4000);  // the dead process's lock was released by the kernel
  }
}

TEST_CASE("disk tier: an unusable directory means memory-only operation with one warning") {
  test::TempDir dir;
  // A path below a regular file can never be created, whoever we are.
  const std::string file = dir.path() + "/plain-file";
  write_all(file, {'x'});
  int warnings = 0;
  CacheOptions o;
  o.dir = file + "/cache";
  o.warn = [&](const std::string& m) {
    ++warnings;
    CHECK(m.find("memory only") != std::string::npos);
  };
  KernelCache cache(o);
  CHECK_FALSE(cache.disk_enabled());
  CHECK(cache.dir().empty());
  cache.get(spec());
  cache.get(spec("cache_write_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"));
  CHECK(cache.stats().compiles == 2);
  CHECK(warnings == 1);
}

TEST_CASE("disk tier: a read-only directory works memory-only") {
  test::TempDir dir;
  const std::string ro = dir.path() + "/ro";
  fs::create_directory(ro);
  chmod(ro.c_str(), 0555);
  if (access(ro.c_str(), W_OK) == 0) {
    // Root ignores permission bits; try the immutable attribute instead.
    if (std::system(("chattr +i " + ro + " 2>/dev/null").c_str()) != 0 ||
        access((ro + "/.x").c_str(), F_OK) == 0) {
      MESSAGE(
          "skipped: running as root and chattr +i is unavailable here; the unusable-"
          "directory case above covers the memory-only path");
      return;
    }
  }
  int warnings = 0;
  CacheOptions o;
  o.dir = ro;
  o.warn = [&](const std::string&) { ++warnings; };
  {
    KernelCache cache(o);
    const bool enabled = cache.disk_enabled();
    if (!enabled) {
      cache.get(spec());
      cache.get(spec());
      CHECK(cache.stats().compiles == 1);
      CHECK(cache.stats().memory_hits == 1);
      CHECK(warnings == 1);
    } else {
      MESSAGE("skipped: this user can write into a 0555 directory");
    }
  }
  std::system(("chattr -i " + ro + " 2>/dev/null").c_str());
  chmod(ro.c_str(), 0755);
}

TEST_CASE("disk tier: eviction keeps the directory under the cap, oldest used first") {
  test::TempDir dir;
  uint64_t one = 0;
  {
    KernelCache probe(options_for(dir.path()));
    probe.get(spec());
    one = fs::file_size(entries(dir.path()).at(0));
  }
  CacheOptions o = options_for(dir.path());
  o.max_bytes = one * 5 / 2;  // room for two entries of about this size
  KernelCache cache(o);
  const char* specs[] = {
      "cache_write_h128_b32_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
      "cache_write_h128_b64_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
      "cache_write_h128_b128_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
      "cache_write_h128_b256_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
  };
  for (const char* s : specs) {
    cache.get(spec(s));
    uint64_t total = 0;
    for (const auto& p : entries(dir.path())) total += fs::file_size(p);
    CHECK(total <= o.max_bytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(15));  // distinct modification times
  }
  CHECK(cache.stats().evictions >= 3);
  // The newest entry survives.
  KernelCache reader(options_for(dir.path()));
  CacheOrigin origin;
  reader.get(spec(specs[3]), &origin);
  CHECK(origin == CacheOrigin::kDisk);
}

TEST_CASE("kernel cache: precompile runs a list on a pool and reports each spec") {
  test::TempDir dir;
  KernelCache cache(options_for(dir.path()));
  std::vector<AttentionSpec> specs = {
      spec("cache_write_h64_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm90"),
      spec("cache_write_h96_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm90"),
      spec("cache_write_h64_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm90"),
  };
  const auto results = cache.precompile(specs, 2);
  REQUIRE(results.size() == 3);
  for (const auto& r : results) {
    CHECK(r.error.empty());
    CHECK(r.ms > 0);
  }
  CHECK(cache.stats().compiles == 2);
  const auto again = cache.precompile(specs, 2);
  for (const auto& r : again) CHECK(r.origin == CacheOrigin::kMemory);
}

TEST_CASE("kernel cache: dump source writes the rendered source beside the entry") {
  test::TempDir dir;
  CacheOptions o = options_for(dir.path());
  o.dump_source = true;
  KernelCache cache(o);
  auto k = cache.get(spec());
  const std::string src = dir.path() + "/" + k->key.hex() + ".cu";
  REQUIRE(fs::exists(src));
  std::ifstream f(src);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  CHECK(text.find(std::string("// graphattn kernel ") + kSpec) == 0);
  CHECK(detail::DiskTier::inspect(dir.path() + "/" + k->key.hex() + ".gakc").source_path == src);
}

TEST_CASE("kernel cache: invalid specs are rejected before any work") {
  test::TempDir dir;
  KernelCache cache(options_for(dir.path()));
  AttentionSpec s = spec();
  s.head_size = 100;
  CHECK_THROWS_WITH_AS(cache.get(s), doctest::Contains("head size 100"), Error);
  CHECK(cache.stats().compiles == 0);
  // The memory tier's fast index never serves an out-of-range spec for a valid neighbour.
  cache.get(spec());
  for (int bad : {128 + 512, 128 + 1024, -128}) {
    s = spec();
    s.head_size = bad;
    CHECK_THROWS_AS(cache.get(s), Error);
  }
  s = spec();
  s.arch = 90 + 1024;
  CHECK_THROWS_AS(cache.get(s), Error);
  CHECK(cache.stats().compiles == 1);
}
