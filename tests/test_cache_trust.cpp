// SPDX-License-Identifier: Apache-2.0
// The disk tier's trust model and file handling, tried as an attacker who can write the cache
// directory and as a careless operator would: planted and forged entries, symbolic links, FIFOs,
// huge sparse files, directories named like entries, other owners, group-writable directories.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/disk_tier.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
namespace fs = std::filesystem;
using detail::EntryStatus;

namespace {

const char* kSpec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";
const char* kOtherSpec = "cache_write_h64_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm90";
constexpr uid_t kNobody = 65534;

AttentionSpec spec(const char* s = kSpec) { return AttentionSpec::parse(s); }

struct Warnings {
  std::vector<std::string> seen;
  std::string all() const {
    std::string out;
    for (const auto& w : seen) out += w + "\n";
    return out;
  }
};

CacheOptions options_for(const std::string& dir, Warnings* w = nullptr) {
  CacheOptions o;
  o.dir = dir;
  o.warn = [w](const std::string& m) {
    if (w) w->seen.push_back(m);
  };
  return o;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  REQUIRE(f.good());
}

// The key the cache files kSpec under (compiled once into a scratch cache).
struct Compiled {
  CacheKey key;
  std::vector<char> cubin;
};
Compiled compile_in_memory(const char* s) {
  CacheOptions o;
  o.use_disk = false;
  KernelCache c(o);
  auto k = c.get(spec(s));
  return {k->key, k->cubin};
}

// A well-formed entry for kSpec's key whose payload is `payload`: what an attacker who can write
// the directory would plant (both checksums are recomputed, so only trust can refuse it).
void plant_entry(const std::string& dir, const CacheKey& key, const std::vector<char>& payload) {
  detail::EntryHeader h;
  h.key = key;
  h.arch = 90;
  h.nvrtc_major = 13;
  h.spec = kSpec;
  h.compiled_at_ms = 1;
  h.compile_us = 1000;
  const std::vector<char> img = detail::encode_entry(h, payload);
  std::ofstream f(dir + "/" + key.hex() + ".gakc", std::ios::binary | std::ios::trunc);
  f.write(img.data(), static_cast<std::streamsize>(img.size()));
  REQUIRE(f.good());
  f.close();
  ::chmod((dir + "/" + key.hex() + ".gakc").c_str(), 0600);
}

// A fresh cache directory (made by the cache itself) and where kSpec's entry goes in it.
struct EntryDir {
  Compiled want = compile_in_memory(kSpec);
  test::TempDir tmp;
  std::string dir = tmp.path() + "/cache";
  std::string entry = dir + "/" + want.key.hex() + ".gakc";
  EntryDir() { KernelCache make_dir(options_for(dir)); }
};

// Runs fn in a child process that is killed after `seconds`: a hang fails the test instead of
// the whole suite. Returns the child's exit status (-1: killed).
int run_bounded(int seconds, const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(static_cast<unsigned>(seconds));
    _exit(fn());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("trust: the cache creates its directory 0700 and its files 0600 whatever the umask") {
  test::TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/cache";
  const mode_t old = ::umask(0);
  {
    CacheOptions o = options_for(dir);
    o.dump_source = true;
    KernelCache cache(o);
    REQUIRE(cache.disk_enabled());
    cache.get(spec());
  }
  ::umask(old);
  CHECK(mode_of(tmp.path() + "/a") == 0700);
  CHECK(mode_of(tmp.path() + "/a/b") == 0700);
  CHECK(mode_of(dir) == 0700);
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    INFO(f.path());
    CHECK(mode_of(f.path().string()) == 0600);
    ++files;
  }
  CHECK(files == 4);  // marker, entry, lock, dumped source
}

TEST_CASE("trust: a forged entry in a group- or world-writable directory is never loaded") {
  const Compiled want = compile_in_memory(kSpec);
  const Compiled other = compile_in_memory(kOtherSpec);
  REQUIRE(want.cubin != other.cubin);
  test::TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  fs::create_directory(dir);
  ::chmod(dir.c_str(), 0700);
  plant_entry(dir, want.key, other.cubin);
  {
    // In a directory only this user can write, the forged entry is indistinguishable from a real
    // one (both sums are right): that is why nobody else may write the directory.
    KernelCache trusting(options_for(dir));
    CacheOrigin origin;
    CHECK(trusting.get(spec(), &origin)->cubin == other.cubin);
    CHECK(origin == CacheOrigin::kDisk);
  }
  for (mode_t m : {0770, 0777, 0707, 0720}) {
    INFO("mode " << std::oct << m);
    plant_entry(dir, want.key, other.cubin);
    REQUIRE(::chmod(dir.c_str(), m) == 0);
    Warnings w;
    KernelCache cache(options_for(dir, &w));
    CHECK_FALSE(cache.disk_enabled());
    CacheOrigin origin;
    CHECK(cache.get(spec(), &origin)->cubin == want.cubin);
    CHECK(origin == CacheOrigin::kCompiled);
    CHECK(cache.stats().disk_hits == 0);
    REQUIRE(w.seen.size() == 1);
    CHECK(w.seen[0].find(dir) != std::string::npos);
    CHECK(w.seen[0].find("writable by") != std::string::npos);
    char found[16];
    std::snprintf(found, sizeof found, "mode %04o", static_cast<unsigned>(m));
    CHECK(w.seen[0].find(found) != std::string::npos);
    CHECK(w.seen[0].find("memory only") != std::string::npos);
    // The forged file is still there and untouched: the process never wrote into the directory.
    CHECK(detail::DiskTier::inspect(dir + "/" + want.key.hex() + ".gakc").status ==
          EntryStatus::kOk);
  }
  ::chmod(dir.c_str(), 0700);
}

TEST_CASE(
    "trust: GRAPHATTN_CACHE_SHARED accepts a group-shared directory, never a world-writable one") {
  const Compiled want = compile_in_memory(kSpec);
  test::TempDir tmp;
  const std::string dir = tmp.path() + "/shared";
  fs::create_directory(dir);
  REQUIRE(::chmod(dir.c_str(), 02770) == 0);
  {
    KernelCache filler(options_for(tmp.path() + "/private"));
    filler.get(spec());
  }
  fs::copy_file(tmp.path() + "/private/" + want.key.hex() + ".gakc",
                dir + "/" + want.key.hex() + ".gakc");
  {
    KernelCache refused(options_for(dir));
    CHECK_FALSE(refused.disk_enabled());
  }
  CacheOptions o = options_for(dir);
  o.shared_dir = true;
  {
    KernelCache shared(o);
    REQUIRE(shared.disk_enabled());
    CacheOrigin origin;
    shared.get(spec(), &origin);
    CHECK(origin == CacheOrigin::kDisk);
  }
  {
    // The environment opts in the same way.
    ::setenv("GRAPHATTN_CACHE_SHARED", "1", 1);
    KernelCache by_env(options_for(dir));
    ::unsetenv("GRAPHATTN_CACHE_SHARED");
    CHECK(by_env.disk_enabled());
  }
  {
    ::setenv("GRAPHATTN_CACHE_SHARED", "yes", 1);
    CHECK_THROWS_WITH_AS(KernelCache(options_for(dir)),
                         doctest::Contains("GRAPHATTN_CACHE_SHARED='yes' is not supported"), Error);
    ::unsetenv("GRAPHATTN_CACHE_SHARED");
  }
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  Warnings w;
  o.warn = [&w](const std::string& m) { w.seen.push_back(m); };
  KernelCache world(o);
  CHECK_FALSE(world.disk_enabled());
  CHECK(w.all().find("writable by every user") != std::string::npos);
  ::chmod(dir.c_str(), 0700);
}

TEST_CASE("trust: a directory or an entry owned by another user is refused") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: making a file owned by another user needs root");
    return;
  }
  const Compiled want = compile_in_memory(kSpec);
  const Compiled other = compile_in_memory(kOtherSpec);
  test::TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  fs::create_directory(dir);
  ::chmod(dir.c_str(), 0700);
  const std::string entry = dir + "/" + want.key.hex() + ".gakc";

  // An entry that another user wrote (into a directory it could once write).
  plant_entry(dir, want.key, other.cubin);
  REQUIRE(::chown(entry.c_str(), kNobody, kNobody) == 0);
  CHECK(detail::DiskTier::inspect(entry).status == EntryStatus::kUntrusted);
  CHECK(detail::DiskTier::inspect(entry).reason.find("uid 65534") != std::string::npos);
  {
    KernelCache cache(options_for(dir));
    REQUIRE(cache.disk_enabled());
    CacheOrigin origin;
    CHECK(cache.get(spec(), &origin)->cubin == want.cubin);
    CHECK(origin == CacheOrigin::kCompiled);
    CHECK(cache.stats().repairs == 1);
  }
  // Replaced by this user's own entry.
  struct stat st {};
  REQUIRE(::stat(entry.c_str(), &st) == 0);
  CHECK(st.st_uid == 0);

  // A whole directory that belongs to another user, as a process of that user would see it.
  const std::string theirs = tmp.path() + "/theirs";
  fs::create_directory(theirs);
  plant_entry(theirs, want.key, other.cubin);
  REQUIRE(::chown((theirs + "/" + want.key.hex() + ".gakc").c_str(), kNobody, kNobody) == 0);
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  REQUIRE(::chmod(theirs.c_str(), 0700) == 0);
  ::chmod(tmp.path().c_str(), 0755);  // let the other user reach it
  Warnings w;
  KernelCache cache(options_for(theirs, &w));
  CHECK_FALSE(cache.disk_enabled());
  CHECK(w.all().find("belongs to another user") != std::string::npos);
  CHECK(w.all().find("uid 65534") != std::string::npos);
  CacheOrigin origin;
  CHECK(cache.get(spec(), &origin)->cubin == want.cubin);
  CHECK(origin == CacheOrigin::kCompiled);

  // The same directory, used by its owner (a second uid, through fork and setuid), is trusted.
  const int rc = run_bounded(60, [&] {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) return 10;
    Warnings mine;
    KernelCache own(options_for(theirs, &mine));
    if (!own.disk_enabled()) return 11;
    CacheOrigin o2;
    // The planted entry is this user's own file now: served (its sums are right).
    return own.get(spec(), &o2)->cubin == other.cubin && o2 == CacheOrigin::kDisk ? 0 : 12;
  });
  CHECK(rc == 0);
  ::chown(theirs.c_str(), 0, 0);
}

TEST_CASE("trust: symbolic links are never followed: entries, lock files, sources") {
  const Compiled want = compile_in_memory(kSpec);
  const Compiled other = compile_in_memory(kOtherSpec);
  test::TempDir tmp;
  const std::string dir = tmp.path() + "/cache";
  const std::string elsewhere = tmp.path() + "/elsewhere";
  fs::create_directory(elsewhere);
  ::chmod(elsewhere.c_str(), 0700);
  plant_entry(elsewhere, want.key, other.cubin);
  const std::string victim = tmp.path() + "/victim";
  write_text(victim, "precious");
  { KernelCache make_dir(options_for(dir)); }
  const std::string stem = dir + "/" + want.key.hex();
  fs::create_symlink(elsewhere + "/" + want.key.hex() + ".gakc", stem + ".gakc");
  fs::create_symlink(victim, stem + ".lock");
  fs::create_symlink(victim, stem + ".cu");
  CHECK(detail::DiskTier::inspect(stem + ".gakc").status == EntryStatus::kNotRegular);
  CHECK(detail::DiskTier::inspect(stem + ".gakc").reason == "is a symbolic link");
  CacheOptions o = options_for(dir);
  o.dump_source = true;
  KernelCache cache(o);
  REQUIRE(cache.disk_enabled());
  CacheOrigin origin;
  CHECK(cache.get(spec(), &origin)->cubin == want.cubin);
  CHECK(origin == CacheOrigin::kCompiled);
  CHECK(read_text(victim) == "precious");
  // The entry and the source replaced the links themselves; the lock stayed a link, unused.
  CHECK(fs::is_regular_file(fs::symlink_status(stem + ".gakc")));
  CHECK(fs::is_regular_file(fs::symlink_status(stem + ".cu")));
  CHECK(detail::DiskTier::inspect(elsewhere + "/" + want.key.hex() + ".gakc").status ==
        EntryStatus::kOk);
}

TEST_CASE(
    "trust: a FIFO, a huge sparse file or a directory named like an entry hangs and breaks "
    "nothing") {
  const EntryDir d;
  const Compiled& want = d.want;
  const std::string& dir = d.dir;
  const std::string& entry = d.entry;

  SUBCASE("FIFO") {
    REQUIRE(::mkfifo(entry.c_str(), 0600) == 0);
    CHECK(detail::DiskTier::inspect(entry).status == EntryStatus::kNotRegular);
    CHECK(detail::DiskTier::inspect(entry).reason == "is a FIFO");
    const int rc = run_bounded(30, [&] {
      KernelCache cache(options_for(dir));
      CacheOrigin origin;
      cache.get(spec(), &origin);
      return origin == CacheOrigin::kCompiled && cache.stats().repairs == 1 ? 0 : 1;
    });
    CHECK(rc == 0);
    CHECK(detail::DiskTier::inspect(entry).status == EntryStatus::kOk);
  }
  SUBCASE("64 GiB sparse file") {
    const int fd = ::open(entry.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t{64} << 30) == 0);
    ::close(fd);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(detail::DiskTier::inspect(entry).status == EntryStatus::kTooLarge);
    KernelCache cache(options_for(dir));
    CacheOrigin origin;
    CHECK(cache.get(spec(), &origin)->cubin == want.cubin);
    CHECK(origin == CacheOrigin::kCompiled);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(s < 10);  // a whole read of 64 GiB would take minutes (or fail to allocate)
    CHECK(fs::file_size(entry) < (1u << 20));  // replaced by the real entry
  }
  SUBCASE("directory named like the entry: one write fails, the tier stays on") {
    fs::create_directory(entry);
    Warnings w;
    KernelCache cache(options_for(dir, &w));
    CacheOrigin origin;
    CHECK(cache.get(spec(), &origin)->cubin == want.cubin);
    CHECK(origin == CacheOrigin::kCompiled);
    CHECK(cache.disk_enabled());
    CHECK(cache.stats().write_failures == 1);
    CHECK(w.all().find("could not write cache entry " + want.key.hex()) != std::string::npos);
    // The next kernel still goes to disk.
    cache.get(spec(kOtherSpec));
    CHECK(cache.stats().write_failures == 1);
    KernelCache reader(options_for(dir));
    reader.get(spec(kOtherSpec), &origin);
    CHECK(origin == CacheOrigin::kDisk);
    CHECK(fs::is_directory(entry));
  }
}

TEST_CASE("trust: a payload that is not a cubin for the entry's arch is never served") {
  const EntryDir d;
  const Compiled& want = d.want;
  const std::string& dir = d.dir;
  const std::string& entry = d.entry;
  std::vector<char> sm80 =
      compile_in_memory("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm80").cubin;
  const std::vector<std::pair<const char*, std::vector<char>>> payloads = {
      {"28 bytes of text", std::vector<char>(28, 'A')},
      {"an sm_80 cubin", sm80},
      {"a cubin cut short", std::vector<char>(want.cubin.begin(), want.cubin.begin() + 100)},
      {"an x86-64 ELF header",
       [] {
         std::vector<char> v(64, 0);
         const char h[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
         std::copy(h, h + sizeof h, v.begin());
         v[16] = 2;
         v[18] = 62;  // EM_X86_64
         return v;
       }()},
  };
  for (const auto& wp : payloads) {
    const std::vector<char>& payload = wp.second;
    INFO(wp.first);
    plant_entry(dir, want.key, payload);
    CHECK(detail::DiskTier::inspect(entry).status == EntryStatus::kBadCubin);
    KernelCache cache(options_for(dir));
    CacheOrigin origin;
    CHECK(cache.get(spec(), &origin)->cubin == want.cubin);
    CHECK(origin == CacheOrigin::kCompiled);
  }
}

TEST_CASE("trust: without a home directory the cache runs in memory only, never in /tmp") {
  struct Saved {
    const char* name;
    std::string value;
    bool set;
  };
  std::vector<Saved> saved;
  for (const char* n : {"HOME", "XDG_CACHE_HOME", "GRAPHATTN_CACHE_DIR"}) {
    const char* v = std::getenv(n);
    saved.push_back({n, v ? v : "", v != nullptr});
    ::unsetenv(n);
  }
  CHECK(default_cache_dir() == "");
  ::setenv("XDG_CACHE_HOME", "relative/path", 1);  // ignored, as the XDG rules say
  CHECK(default_cache_dir() == "");
  ::setenv("HOME", "/home/someone", 1);
  CHECK(default_cache_dir() == "/home/someone/.cache/graphattn");
  ::unsetenv("HOME");
  ::unsetenv("XDG_CACHE_HOME");
  Warnings w;
  CacheOptions o;
  o.warn = [&w](const std::string& m) { w.seen.push_back(m); };
  KernelCache cache(o);
  CHECK_FALSE(cache.disk_enabled());
  REQUIRE(w.seen.size() == 1);
  CHECK(w.seen[0].find("no cache directory") != std::string::npos);
  CHECK(w.seen[0].find("memory only") != std::string::npos);
  for (const auto& s : saved)
    if (s.set) ::setenv(s.name, s.value.c_str(), 1);
}

TEST_CASE("trust: GRAPHATTN_CACHE_MAX_BYTES is parsed strictly") {
  test::TempDir tmp;
  struct Case {
    const char* value;
    const char* error;  // nullptr: accepted
  };
  const Case cases[] = {
      {"512M", nullptr},
      {"0", nullptr},
      {"1KiB", nullptr},
      {"17179869184G", "exceeds 2^64 - 1"},
      {"99999999999999999999999", "exceeds 2^64 - 1"},
      {"-1", "is negative"},
      {"5Mxyz", "unknown unit 'Mxyz'"},
      {" 12", "does not start with a digit"},
      {"12 ", "unknown unit ' '"},
      {"abc", "does not start with a digit"},
      {"1e99", "unknown unit 'e99'"},
      {"1.5G", "unknown unit '.5G'"},
      {"\x1b[2J", "'\\x1b[2J'"},
  };
  for (const auto& c : cases) {
    INFO("GRAPHATTN_CACHE_MAX_BYTES=" << c.value);
    ::setenv("GRAPHATTN_CACHE_MAX_BYTES", c.value, 1);
    if (c.error) {
      CHECK_THROWS_WITH_AS(check_cache_environment(), doctest::Contains(c.error), Error);
      CHECK_THROWS_WITH_AS(KernelCache(options_for(tmp.path())),
                           doctest::Contains("GRAPHATTN_CACHE_MAX_BYTES"), Error);
    } else {
      CHECK_NOTHROW(check_cache_environment());
    }
  }
  // 0 means no cap: nothing is evicted.
  ::setenv("GRAPHATTN_CACHE_MAX_BYTES", "0", 1);
  {
    KernelCache cache(options_for(tmp.path()));
    cache.get(spec());
    cache.get(spec(kOtherSpec));
    CHECK(cache.stats().evictions == 0);
  }
  ::unsetenv("GRAPHATTN_CACHE_MAX_BYTES");
}
