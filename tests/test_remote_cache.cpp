// SPDX-License-Identifier: Apache-2.0
// The remote tier of the kernel cache against a real redis-server on 127.0.0.1 (started and torn
// down by each test through tests/redis_server.hpp): kernels shared between caches with their own
// disk directories and between processes, a server that dies or hangs mid-run, values that must
// be rejected (corrupt, another key's, unsigned or wrongly signed), and graphattn-cache's
// stats, push and pull.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/remote_tier.hpp"
#include "tests/hostile_server.hpp"
#include "tests/redis_server.hpp"
#include "tests/test_util.hpp"
#include "tests/tool_runner.hpp"

using namespace graphattn;
namespace fs = std::filesystem;

namespace {

const char* kWrite = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";
const char* kWrite64 = "cache_write_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";
const char* kWrite256 = "cache_write_h256_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";
const char* kWrite96 = "cache_write_h96_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";

AttentionSpec spec(const char* s) { return AttentionSpec::parse(s); }

// A kernel cache with its own disk directory, on the given remote tier, collecting warnings.
struct RemoteCache {
  test::TempDir dir;
  std::vector<std::string> warnings;
  std::unique_ptr<KernelCache> cache;

  explicit RemoteCache(const std::string& url, const std::string& key_file = "",
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(500),
                       std::chrono::milliseconds retry = std::chrono::milliseconds(30000)) {
    CacheOptions o;
    o.dir = dir.path();
    o.remote_url = url;
    o.remote_timeout = timeout;
    o.remote_retry = retry;
    o.signing_key_file = key_file;
    o.warn = [this](const std::string& w) { warnings.push_back(w); };
    cache = std::make_unique<KernelCache>(o);
  }
  CacheOrigin get(const char* s) {
    CacheOrigin origin = CacheOrigin::kMemory;
    cache->get(spec(s), &origin);
    return origin;
  }
  CacheStats stats() const { return cache->stats(); }
};

// The Redis name of a spec's entry, as the cache computes it.
std::string entry_name(const char* s) {
  const KernelSource src = render_kernel(spec(s));
  return detail::remote_entry_name(kernel_key(src, spec(s).arch));
}

// A signing key file (0600) holding `secret`.
std::string key_file(const test::TempDir& dir, const std::string& name, const std::string& secret,
                     mode_t mode = 0600) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << secret << "\n";
  ::chmod(path.c_str(), mode);
  return path;
}

// Where a new cache on `dir` alone (no remote tier) finds the kernel.
CacheOrigin local_origin(const std::string& dir, const char* s) {
  CacheOptions o;
  o.dir = dir;
  o.use_remote = false;
  KernelCache local(o);
  CacheOrigin origin = CacheOrigin::kMemory;
  local.get(spec(s), &origin);
  return origin;
}

size_t entry_count(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".gakc";
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool mentions(const std::vector<std::string>& warnings, const std::string& text) {
  for (const auto& w : warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("remote tier: a kernel compiled by one cache is a verified remote hit for another") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  RemoteCache a(redis.url()), b(redis.url());
  CHECK(a.cache->remote() == redis.url() + "/0");

  CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(a.stats().compiles == 1);
  CHECK(a.stats().remote_misses == 1);
  CHECK(a.stats().remote_puts == 1);
  CHECK(redis.command({"EXISTS", entry_name(kWrite)}).integer == 1);

  CHECK(b.get(kWrite) == CacheOrigin::kRemote);
  CHECK(b.stats().compiles == 0);
  CHECK(b.stats().remote_hits == 1);
  CHECK(b.stats().remote_ms > 0);
  // The value went to b's disk too: a new cache object on b's directory finds it there, with the
  // remote tier switched off.
  CHECK(local_origin(b.dir.path(), kWrite) == CacheOrigin::kDisk);

  // A memory hit never reaches the server: frozen, a call would time out and count an error.
  redis.freeze();
  const double remote_ms = b.stats().remote_ms;
  CHECK(b.get(kWrite) == CacheOrigin::kMemory);
  redis.thaw();
  CHECK(b.stats().remote_ms == remote_ms);
  CHECK(b.stats().remote_errors == 0);
  CHECK(a.warnings.empty());
  CHECK(b.warnings.empty());
}

TEST_CASE("remote tier: two processes with their own disk directories compile a kernel once") {
#ifndef GRAPHATTN_CACHE_TOOL
  MESSAGE("skipped: the tools are not built (GRAPHATTN_BUILD_TOOLS=OFF)");
  return;
#else
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  test::TempDir dir_a, dir_b, scratch;
  // A decode kernel: its compile takes long enough (hundreds of ms) that both processes ask at
  // once; the fleet-wide lock makes one compile and the other wait for its value.
  const std::string decode = "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90";
  auto command = [&](const std::string& dir, const std::string& out) {
    return "env -u GRAPHATTN_CACHE_DIR -u GRAPHATTN_CACHE_SIGNING_KEY " +
           test::shell_quote(GRAPHATTN_CACHE_TOOL) + " --json --dir " + test::shell_quote(dir) +
           " --remote " + redis.url() + " compile --spec " + decode + " >" +
           test::shell_quote(out) + " 2>&1";
  };
  const std::string out_a = scratch.path() + "/a.json", out_b = scratch.path() + "/b.json";
  const std::string both =
      "(" + command(dir_a.path(), out_a) + ") & (" + command(dir_b.path(), out_b) + ") & wait";
  REQUIRE(std::system(both.c_str()) == 0);
  const auto ja = nlohmann::json::parse(test::read_all(out_a), nullptr, false);
  const auto jb = nlohmann::json::parse(test::read_all(out_b), nullptr, false);
  INFO("a: " << test::read_all(out_a));
  INFO("b: " << test::read_all(out_b));
  REQUIRE_FALSE(ja.is_discarded());
  REQUIRE_FALSE(jb.is_discarded());
  CHECK(ja["compiled"].get<int>() + jb["compiled"].get<int>() == 1);
  CHECK(ja["remote_hits"].get<int>() + jb["remote_hits"].get<int>() == 1);
  CHECK(ja["failed"].get<int>() + jb["failed"].get<int>() == 0);
  // Each directory holds the entry, and the lock is gone.
  CHECK(entry_count(dir_a.path()) == 1);
  CHECK(entry_count(dir_b.path()) == 1);
  const auto locks = redis.command({"KEYS", "graphattn:lock:*"});
  CHECK(locks.elements.empty());
#endif
}

TEST_CASE("remote tier: a server killed mid-run costs one warning per cache and no failure") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  // A back-off far longer than any compile on a loaded machine: while it lasts, nothing may reach
  // the server, whatever the compiles cost.
  const auto long_retry = std::chrono::minutes(10);
  RemoteCache a(redis.url(), "", std::chrono::milliseconds(300), long_retry);
  RemoteCache b(redis.url(), "", std::chrono::milliseconds(300), long_retry);
  CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(b.get(kWrite) == CacheOrigin::kRemote);

  redis.kill();
  for (RemoteCache* c : {&a, &b}) {
    CHECK(c->get(kWrite64) == CacheOrigin::kCompiled);
    // Backing off: the next miss asks nobody and warns no more.
    const uint64_t errors = c->stats().remote_errors;
    CHECK(errors == 1);
    CHECK(c->get(kWrite256) == CacheOrigin::kCompiled);
    CHECK(c->stats().remote_errors == errors);
    CHECK(c->warnings.size() == 1);
    REQUIRE_FALSE(c->warnings.empty());
    CHECK(c->warnings[0].find(redis.url() + "/0") != std::string::npos);
    CHECK(c->warnings[0].find("local tiers only") != std::string::npos);
  }
}

TEST_CASE("remote tier: after its back-off the tier is used again without a restart") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  RemoteCache a(redis.url(), "", std::chrono::milliseconds(300), std::chrono::milliseconds(200));
  redis.kill();
  CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(a.stats().remote_errors >= 1);
  redis.start();
  // The first call after the back-off (200 ms, doubled by each retry that still failed) reaches
  // the server again: each try compiles a kernel not asked for before, until one is stored.
  // Bounded by a count of kernels, not by how long their compiles take.
  const char* const specs[] = {kWrite64,
                               kWrite256,
                               kWrite96,
                               "cache_write_h80_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                               "cache_write_h112_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                               "cache_write_h160_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                               "cache_write_h192_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                               "cache_write_h224_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"};
  const char* stored = nullptr;
  for (const char* s : specs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK(a.get(s) == CacheOrigin::kCompiled);
    if (a.stats().remote_puts == 1) {
      stored = s;
      break;
    }
  }
  REQUIRE(stored != nullptr);
  RemoteCache b(redis.url());
  CHECK(b.get(stored) == CacheOrigin::kRemote);
  CHECK(a.warnings.size() == 1);
}

TEST_CASE("remote tier: a server that accepts but never answers is given up after the timeout") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  RemoteCache a(redis.url(), "", std::chrono::milliseconds(200));
  redis.freeze();
  CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
  const double first_ms = a.stats().remote_ms;
  CHECK(a.get(kWrite64) == CacheOrigin::kCompiled);
  redis.thaw();
  // One timed-out call (200 ms for the whole call; generous bound for a loaded machine); then no
  // call at all while backing off.
  CHECK(first_ms < 3000);
  CHECK(a.stats().remote_ms == first_ms);
  CHECK(a.stats().remote_errors == 1);
  CHECK(a.warnings.size() == 1);
}

TEST_CASE("remote tier: corrupt values and values of another key are rejected, never served") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  RemoteCache a(redis.url());
  CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(a.get(kWrite64) == CacheOrigin::kCompiled);
  const std::string good = redis.command({"GET", entry_name(kWrite)}).str;
  REQUIRE(good.size() > 100);

  SUBCASE("one byte of the cubin flipped") {
    std::string bad = good;
    bad[bad.size() - 40] ^= 0x10;
    redis.command({"SET", entry_name(kWrite), bad});
  }
  SUBCASE("one byte of the header flipped") {
    std::string bad = good;
    bad[12] ^= 0x01;
    redis.command({"SET", entry_name(kWrite), bad});
  }
  SUBCASE("truncated") { redis.command({"SET", entry_name(kWrite), good.substr(0, 50)}); }
  SUBCASE("another key's valid value") {
    const std::string other = redis.command({"GET", entry_name(kWrite64)}).str;
    redis.command({"SET", entry_name(kWrite), other});
  }
  SUBCASE("not a string") {
    redis.command({"DEL", entry_name(kWrite)});
    redis.command({"RPUSH", entry_name(kWrite), good});
  }

  RemoteCache b(redis.url());
  CHECK(b.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(b.stats().remote_rejects == 1);
  CHECK(b.stats().remote_hits == 0);
  CHECK(b.stats().compiles == 1);
  // The compile replaced the bad value with a good one.
  RemoteCache c(redis.url());
  CHECK(c.get(kWrite) == CacheOrigin::kRemote);
  CHECK(c.stats().remote_rejects == 0);
}

TEST_CASE("remote tier: with a signing key only values with a valid tag are accepted") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  test::TempDir keys;
  const std::string key1 = key_file(keys, "k1", "a secret of more than sixteen bytes");
  const std::string key2 = key_file(keys, "k2", "another secret, also long enough");

  // An unsigned value (a cache without a key put it) is refused by a signing cache.
  RemoteCache plain(redis.url());
  CHECK(plain.get(kWrite) == CacheOrigin::kCompiled);
  RemoteCache signer(redis.url(), key1);
  CHECK(signer.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(signer.stats().remote_rejects == 1);
  // It stored a signed value in its place: another holder of the key gets a hit.
  const std::string value = redis.command({"GET", entry_name(kWrite)}).str;
  CHECK(value.rfind("GASIGN01", 0) == 0);
  RemoteCache same_key(redis.url(), key1);
  CHECK(same_key.get(kWrite) == CacheOrigin::kRemote);

  SUBCASE("another key's tag") {
    RemoteCache other(redis.url(), key2);
    CHECK(other.get(kWrite) == CacheOrigin::kCompiled);
    CHECK(other.stats().remote_rejects == 1);
  }
  SUBCASE("a tag flipped, or an entry changed under a good tag") {
    std::string bad = value;
    bad[8 + (value.size() % 32)] ^= 0x01;  // inside the tag
    SUBCASE("tag") {}
    SUBCASE("entry") {
      bad = value;
      bad[bad.size() - 1] ^= 0x01;
    }
    redis.command({"SET", entry_name(kWrite), bad});
    RemoteCache c(redis.url(), key1);
    CHECK(c.get(kWrite) == CacheOrigin::kCompiled);
    CHECK(c.stats().remote_rejects == 1);
  }
  SUBCASE("a signed value moved under another kernel's name") {
    CHECK(same_key.get(kWrite64) == CacheOrigin::kCompiled);
    redis.command({"SET", entry_name(kWrite64), value});
    RemoteCache c(redis.url(), key1);
    CHECK(c.get(kWrite64) == CacheOrigin::kCompiled);
    CHECK(c.stats().remote_rejects == 1);
  }
}

TEST_CASE("remote tier: bad URLs and signing key files are errors naming them") {
  test::TempDir keys;
  auto error_of = [](const std::string& url, const std::string& key) {
    CacheOptions o;
    o.use_disk = false;
    o.remote_url = url;
    o.signing_key_file = key;
    o.warn = [](const std::string&) {};
    try {
      KernelCache c(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const char* url : {"http://127.0.0.1:6379", "redis://", "redis://host:port",
                          "redis://host:70000", "redis://host:6379/x", "redis://host:6379/-1"}) {
    INFO(url);
    const std::string e = error_of(url, "");
    CHECK(e.find(url) != std::string::npos);
    CHECK(e.find("redis://") != std::string::npos);
  }
  const std::string short_key = key_file(keys, "short", "tiny");
  CHECK(error_of("redis://127.0.0.1:1", short_key).find(short_key) != std::string::npos);
  const std::string open_key = key_file(keys, "open", "a secret of more than sixteen bytes", 0666);
  CHECK(error_of("redis://127.0.0.1:1", open_key).find(open_key) != std::string::npos);
  const std::string missing = keys.path() + "/missing";
  CHECK(error_of("redis://127.0.0.1:1", missing).find(missing) != std::string::npos);
}

TEST_CASE("remote tier: a password in the URL authenticates; a wrong one is one warning") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis({"--requirepass", "s3cret"});
  const std::string host = "127.0.0.1:" + std::to_string(redis.port());
  RemoteCache good("redis://:s3cret@" + host + "/2");
  CHECK(good.cache->remote() == "redis://:***@" + host + "/2");
  CHECK(good.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(good.stats().remote_puts == 1);
  CHECK(good.warnings.empty());
  RemoteCache again("redis://:s3cret@" + host + "/2");
  CHECK(again.get(kWrite) == CacheOrigin::kRemote);
  RemoteCache other_db("redis://:s3cret@" + host + "/3");
  CHECK(other_db.get(kWrite) == CacheOrigin::kCompiled);

  RemoteCache wrong("redis://:nope@" + host);
  CHECK(wrong.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(wrong.warnings.size() == 1);
  CHECK(mentions(wrong.warnings, "redis://:***@" + host));
  CHECK_FALSE(mentions(wrong.warnings, "nope"));
}

#ifdef GRAPHATTN_CACHE_TOOL
TEST_CASE("graphattn-cache: stats shows the remote tier, push and pull move verified entries") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  test::TempDir src, dst;
  auto tool = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--remote", redis.url()});
    return test::run_program(GRAPHATTN_CACHE_TOOL, args);
  };
  const auto compiled =
      tool({"--dir", src.path(), "compile", "--spec", kWrite, "--spec", kWrite64});
  REQUIRE(compiled.code == 0);
  // Compile already put them; empty the server so that push has something to do.
  redis.command({"FLUSHALL"});

  const auto push = tool({"--json", "--dir", src.path(), "push"});
  INFO(push.out << push.err);
  REQUIRE(push.code == 0);
  CHECK(redis.command({"EXISTS", entry_name(kWrite), entry_name(kWrite64)}).integer == 2);

  const auto stats = tool({"--json", "--dir", src.path(), "stats"});
  INFO(stats.out << stats.err);
  REQUIRE(stats.code == 0);
  const auto js = nlohmann::json::parse(stats.out, nullptr, false);
  REQUIRE_FALSE(js.is_discarded());
  CHECK(js["remote"]["entries"].get<int>() == 2);

  // A corrupt value on the server is not installed by pull.
  std::string bad = redis.command({"GET", entry_name(kWrite64)}).str;
  bad[bad.size() - 3] ^= 0x04;
  redis.command({"SET", entry_name(kWrite64), bad});
  const auto pull = tool({"--json", "--dir", dst.path(), "pull"});
  INFO(pull.out << pull.err);
  CHECK(pull.code != 0);  // it found a bad value
  CHECK(entry_count(dst.path()) == 1);
  // What was pulled is served from disk, with no compile.
  CHECK(local_origin(dst.path(), kWrite) == CacheOrigin::kDisk);

  // Without a server: a clear error, not a hang.
  redis.kill();
  const auto down = tool({"--dir", src.path(), "push"});
  CHECK(down.code != 0);
  CHECK(down.err.find(redis.url()) != std::string::npos);
}
#endif

// ---------------------------------------------------------------------------------------------
// Hostile servers and squatters (issue 26). Each bound below is generous (seconds where the
// fixed code takes milliseconds) and far below what the old code took: forever, 60 s, 13.9 GB.

TEST_CASE("remote tier: a server that drips one byte every 0.4 s costs one timeout, not a hang") {
  test::HostileServer drip(test::dripping_handler(400));
  RemoteCache a(drip.url(), "", std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
  // The deadline is the call's, not each read's: 300 ms however the bytes trickle in.
  CHECK(a.stats().remote_ms < 3000);
  CHECK(a.stats().remote_errors == 1);
  REQUIRE(a.warnings.size() == 1);
  CHECK(a.warnings[0].find("within the timeout") != std::string::npos);
  // Backing off: the next kernels ask nobody.
  const int requests = drip.requests();
  CHECK(a.get(kWrite64) == CacheOrigin::kCompiled);
  CHECK(drip.requests() == requests);
  MESSAGE("dripping server: " << seconds_since(t0) << " s for two kernels");
}

TEST_CASE("remote tier: huge replies end the call before anything of their size is allocated") {
  const double rss0 = test::peak_rss_mib();
  SUBCASE("a value announced as 512 MiB") {
    test::HostileServer flood(test::flooding_handler("$536870912\r\n", "x"));
    RemoteCache a(flood.url(), "", std::chrono::milliseconds(2000));
    CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
    REQUIRE(a.warnings.size() == 1);
    CHECK(a.warnings[0].find("536870912 bytes") != std::string::npos);
    CHECK(a.stats().remote_ms < 5000);
  }
  SUBCASE("an array announced with 2^31-1 elements") {
    test::HostileServer flood(test::flooding_handler("*2147483647\r\n", ":1\r\n"));
    RemoteCache a(flood.url(), "", std::chrono::milliseconds(2000));
    CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
    REQUIRE(a.warnings.size() == 1);
    CHECK(a.warnings[0].find("2147483647 elements") != std::string::npos);
  }
  SUBCASE("a line that never ends") {
    test::HostileServer flood(test::flooding_handler("+", "y"));
    RemoteCache a(flood.url(), "", std::chrono::milliseconds(2000));
    CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
    REQUIRE(a.warnings.size() == 1);
    CHECK(a.warnings[0].find("line longer than") != std::string::npos);
  }
  // The old client buffered the whole announced reply (2.1 GB for 512 MiB, 13.9 GB for the array).
  CHECK(test::peak_rss_mib() - rss0 < 200);
}

TEST_CASE("remote tier: a stored value over the size cap is removed at once, not read") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  const std::string big(100u << 20, 'x');
  redis.command({"SET", entry_name(kWrite), big});
  const double rss0 = test::peak_rss_mib();
  RemoteCache a(redis.url());
  CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
  CHECK(a.stats().remote_rejects == 1);
  REQUIRE(a.warnings.size() == 1);
  CHECK(a.warnings[0].find("104857600 bytes") != std::string::npos);
  // Gone from the server: the next process pays nothing for it.
  CHECK(redis.command({"EXISTS", entry_name(kWrite)}).integer == 0);
  CHECK(test::peak_rss_mib() - rss0 < 60);
}

TEST_CASE("remote tier: a squatted lock does not stall the cache") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  test::TempDir keys;
  const std::string key = key_file(keys, "k", "a secret of more than sixteen bytes");
  const std::string lock =
      "graphattn:lock:" + entry_name(kWrite).substr(entry_name(kWrite).rfind(':') + 1);
  CacheOptions base;
  base.lock_timeout = std::chrono::seconds(60);

  SUBCASE("without an expiry (graphattn never writes one): not waited for") {
    for (const std::string& signing : {std::string(), key}) {
      INFO("signing key: " << (signing.empty() ? "none" : signing));
      redis.command({"FLUSHALL"});
      redis.command({"SET", lock, "squatter"});
      RemoteCache a(redis.url(), signing);
      const auto t0 = std::chrono::steady_clock::now();
      CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
      CHECK(seconds_since(t0) < 20);  // was 60 s (lock_timeout) per kernel
      REQUIRE(a.warnings.size() == 1);
      CHECK(a.warnings[0].find(lock) != std::string::npos);
      CHECK(a.warnings[0].find("no expiry") != std::string::npos);
      CHECK(a.warnings[0].find("compiling locally") != std::string::npos);
    }
  }
  SUBCASE("with an hour's expiry: given up after a multiple of the measured compile time") {
    RemoteCache a(redis.url());
    CHECK(a.get(kWrite64) == CacheOrigin::kCompiled);  // one compile measured
    const double measured_ms = a.stats().compile_ms;
    redis.command({"SET", lock, "squatter", "PX", "3600000"});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(a.get(kWrite) == CacheOrigin::kCompiled);
    const double waited = seconds_since(t0);
    MESSAGE("waited " << waited << " s on a squatted lock; measured compile " << measured_ms
                      << " ms");
    CHECK(waited < 50);  // lock_timeout is 60 s
    REQUIRE(a.warnings.size() == 1);
    CHECK(a.warnings[0].find(lock) != std::string::npos);
    CHECK(a.warnings[0].find("still held") != std::string::npos);
  }
}

TEST_CASE("remote tier: the locks graphattn writes always expire") {
  GA_REQUIRE_REDIS();
  test::RedisServer redis;
  detail::RemoteOptions ro;
  ro.url = redis.url();
  detail::RemoteTier tier(ro, nullptr);
  const CacheKey key = kernel_key(render_kernel(spec(kWrite)), 90);
  REQUIRE(tier.lock(key, std::chrono::milliseconds(0)) ==
          detail::RemoteTier::LockResult::kAcquired);
  const long long pttl = redis.command({"PTTL", detail::remote_lock_name(key)}).integer;
  CHECK(pttl > 0);
  CHECK(tier.lock_state(key) == detail::RemoteTier::LockState::kExpiring);
  tier.unlock(key);
  CHECK(tier.lock_state(key) == detail::RemoteTier::LockState::kFree);
  redis.command({"SET", detail::remote_lock_name(key), "squatter"});
  CHECK(tier.lock_state(key) == detail::RemoteTier::LockState::kNoExpiry);
}

TEST_CASE("remote tier: a malformed URL never echoes its password") {
  for (const char* url : {"redis://user:hunter2@:6379", "redis://:hunter2@host:port",
                          "redis://:hunter2@host:6379/x", "http://:hunter2@host"}) {
    INFO(url);
    CacheOptions o;
    o.use_disk = false;
    o.remote_url = url;
    const std::string e = test::error_of([&] { KernelCache c(o); });
    CHECK(e.find("remote cache URL") != std::string::npos);
    CHECK(e.find("hunter2") == std::string::npos);
  }
#ifdef GRAPHATTN_CACHE_TOOL
  for (const std::vector<std::string>& env :
       {std::vector<std::string>{"GRAPHATTN_REMOTE_CACHE=redis://u:hunter2@:1"},
        std::vector<std::string>{}}) {
    std::vector<std::string> args = {"--json", "stats"};
    if (env.empty()) args = {"--json", "--remote", "redis://u:hunter2@:1", "push"};
    const test::ToolRun r = test::run_program(GRAPHATTN_CACHE_TOOL, args, env);
    INFO(r.out << r.err);
    CHECK(r.code == (env.empty() ? 1 : 2));
    CHECK(r.out.find("hunter2") == std::string::npos);
    CHECK(r.err.find("hunter2") == std::string::npos);
    CHECK(r.out.find("***") != std::string::npos);
  }
#endif
#ifdef GRAPHATTN_WARMUP_TOOL
  const test::ToolRun w = test::run_program(GRAPHATTN_WARMUP_TOOL, {"--model", "llama-3-8b"},
                                            {"GRAPHATTN_REMOTE_CACHE=redis://u:hunter2@:1"});
  INFO(w.out << w.err);
  CHECK(w.code == 2);
  CHECK(w.out.find("hunter2") == std::string::npos);
  CHECK(w.err.find("hunter2") == std::string::npos);
#endif
}

#ifdef GRAPHATTN_CACHE_TOOL
TEST_CASE(
    "graphattn-cache: pull and stats against hostile servers end with an error in bounded time") {
  test::TempDir dir;
  auto tool = [&](const std::string& url, const std::string& command) {
    return test::run_program(GRAPHATTN_CACHE_TOOL, {"--remote", url, "--remote-timeout-ms", "500",
                                                    "--dir", dir.path(), command});
  };
  SUBCASE("a SCAN cursor that never returns to 0") {
    test::HostileServer scan(test::endless_scan_handler());
    const auto t0 = std::chrono::steady_clock::now();
    const test::ToolRun r = tool(scan.url(), "pull");
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(r.err.find("SCAN did not finish") != std::string::npos);
    MESSAGE("endless SCAN: pull gave up after " << seconds_since(t0) << " s");
    CHECK(seconds_since(t0) < 120);
  }
  SUBCASE("a SCAN reply announcing 2^31-1 names") {
    test::HostileServer flood(test::flooding_handler("*2\r\n$1\r\n1\r\n*2147483647\r\n", ":1\r\n"));
    const test::ToolRun r = tool(flood.url(), "pull");
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(r.err.find("2147483647 elements") != std::string::npos);
  }
  SUBCASE("a dripping server") {
    test::HostileServer drip(test::dripping_handler(400));
    const auto t0 = std::chrono::steady_clock::now();
    const test::ToolRun r = tool(drip.url(), "pull");
    CHECK(r.code == 1);
    CHECK(r.err.find("within the timeout") != std::string::npos);
    CHECK(seconds_since(t0) < 30);
  }
}
#endif
