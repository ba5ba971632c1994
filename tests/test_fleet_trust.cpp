// SPDX-License-Identifier: Apache-2.0
// What one local user can do to another through the fleet features, and the small rules around
// them (issue 26): signing key files checked like the cache, shared directories of a group this
// process is not in, the cache directory marker that clear/prune/verify --fix require, strict
// on/off variables, relative and too many cache directories, and stats/verify over every layer.
// The two-user cases run as two unprivileged users that the test creates when it runs as root
// (tests/hostile_users.hpp) and skip with a message elsewhere.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/env_flag.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/disk_tier.hpp"
#include "jit_cache/remote_tier.hpp"
#include "tests/hostile_users.hpp"
#include "tests/test_util.hpp"
#include "tests/tool_runner.hpp"

using namespace graphattn;
namespace fs = std::filesystem;

namespace {

const char* kSpec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";
const std::string kSecret = "a secret of more than sixteen bytes";

std::string write_file(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

std::string key_error(const std::string& path, bool shared = false) {
  return test::error_of([&] { detail::read_signing_key(path, shared); });
}

}  // namespace

TEST_CASE("signing key files: links, loose modes and degenerate secrets are refused") {
  test::TempDir dir;
  const std::string good = write_file(dir.path() + "/good", kSecret + "\n", 0600);
  CHECK(detail::read_signing_key(good, false) == kSecret);

  const std::string link = dir.path() + "/link";
  REQUIRE(::symlink(good.c_str(), link.c_str()) == 0);
  CHECK(key_error(link).find("symbolic link") != std::string::npos);

  const std::string nul = write_file(dir.path() + "/nul", std::string(18, '\0'), 0600);
  CHECK(key_error(nul).find("degenerate") != std::string::npos);
  const std::string two = write_file(dir.path() + "/two", "abababababababababab", 0600);
  CHECK(key_error(two).find("2 distinct byte values") != std::string::npos);

  // The victim's own key left readable: anyone on the host could read the secret and sign.
  const std::string world = write_file(dir.path() + "/world", kSecret, 0644);
  CHECK(key_error(world).find("readable by every user") != std::string::npos);
  const std::string group = write_file(dir.path() + "/group", kSecret, 0640);
  CHECK(key_error(group).find("readable by its group") != std::string::npos);
  CHECK(detail::read_signing_key(group, true) == kSecret);  // shared mode: the group shares it
  const std::string writable = write_file(dir.path() + "/writable", kSecret, 0620);
  CHECK(key_error(writable, true).find("writable by group or others") != std::string::npos);

  // Through the cache, like GRAPHATTN_CACHE_SIGNING_KEY: the constructor refuses, nothing runs.
  CacheOptions o;
  o.use_disk = false;
  o.remote_url = "redis://127.0.0.1:1";
  o.signing_key_file = world;
  CHECK(test::error_of([&] { KernelCache c(o); }).find(world) != std::string::npos);
}

TEST_CASE("signing key files: a key file that another user owns is refused") {
  test::HostileUsers users;
  GA_REQUIRE_HOSTILE_USERS(users);
  test::TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  // The attacker's key, which it can rewrite at will; the victim is pointed at it.
  const std::string theirs = write_file(dir.path() + "/theirs", kSecret, 0644);
  REQUIRE(::chown(theirs.c_str(), users.attacker(), users.attacker_gid()) == 0);
  const std::string mine = write_file(dir.path() + "/mine", kSecret, 0600);
  REQUIRE(::chown(mine.c_str(), users.victim(), users.victim_gid()) == 0);
  const int rc = test::HostileUsers::run_as(users.victim(), users.victim_gid(), 30, [&] {
    const std::string e = key_error(theirs);
    if (e.find("belongs to another user") == std::string::npos) return 10;
    if (e.find(users.attacker_name()) == std::string::npos) return 11;
    return detail::read_signing_key(mine, false) == kSecret ? 0 : 12;
  });
  CHECK(rc == 0);
}

TEST_CASE("shared mode: a directory of a group this process is not in is not trusted") {
  test::HostileUsers users;
  GA_REQUIRE_HOSTILE_USERS(users);
  test::TempDir tmp;
  ::chmod(tmp.path().c_str(), 0755);
  // The attacker makes a "shared" cache under a path the victim will look at (a directory both
  // can reach, like /tmp), with an entry.
  const std::string area = tmp.path() + "/area";
  fs::create_directory(area);
  REQUIRE(::chown(area.c_str(), users.attacker(), users.attacker_gid()) == 0);
  REQUIRE(::chmod(area.c_str(), 0755) == 0);
  const std::string squat = area + "/squat";
  const int made = test::HostileUsers::run_as(users.attacker(), users.attacker_gid(), 120, [&] {
    CacheOptions o;
    o.dir = squat;
    o.shared_dir = true;
    o.use_remote = false;
    KernelCache c(o);
    c.get(AttentionSpec::parse(kSpec));
    return ::chmod(squat.c_str(), 02775) == 0 && c.disk_enabled() ? 0 : 20;
  });
  REQUIRE(made == 0);
  const int rc = test::HostileUsers::run_as(users.victim(), users.victim_gid(), 120, [&] {
    std::string warned;
    CacheOptions o;
    o.dir = squat;
    o.shared_dir = true;
    o.use_remote = false;
    o.warn = [&](const std::string& w) { warned += w; };
    KernelCache c(o);
    if (c.disk_enabled()) return 10;  // the planted entry would be served
    if (warned.find("is not one of this process's groups") == std::string::npos) return 11;
    if (warned.find(users.attacker_name()) == std::string::npos) return 12;
    CacheOrigin origin;
    c.get(AttentionSpec::parse(kSpec), &origin);
    return origin == CacheOrigin::kCompiled ? 0 : 13;
  });
  CHECK(rc == 0);
  // The same directory given to the victim's group: a deliberately shared cache, trusted.
  REQUIRE(::chown(squat.c_str(), users.attacker(), users.victim_gid()) == 0);
  REQUIRE(::chmod(squat.c_str(), 02770) == 0);
  for (const auto& f : fs::directory_iterator(squat))
    ::chown(f.path().c_str(), users.attacker(), users.victim_gid());
  const int shared = test::HostileUsers::run_as(users.victim(), users.victim_gid(), 120, [&] {
    CacheOptions o;
    o.dir = squat;
    o.shared_dir = true;
    o.use_remote = false;
    o.warn = [](const std::string&) {};
    KernelCache c(o);
    if (!c.disk_enabled()) return 10;
    CacheOrigin origin;
    c.get(AttentionSpec::parse(kSpec), &origin);
    return origin == CacheOrigin::kDisk ? 0 : 11;
  });
  CHECK(shared == 0);
}

TEST_CASE("on/off variables are parsed strictly") {
  const char* name = "GRAPHATTN_DUMP_SOURCE";
  for (const char* on : {"1", "true", "YES", "on"}) {
    test::ScopedEnv e(name, on);
    CHECK(detail::env_flag(name));
  }
  for (const char* off : {"", "0", "false", "No", "off"}) {
    test::ScopedEnv e(name, off);
    CHECK_FALSE(detail::env_flag(name));
  }
  for (const char* bad : {"1abc", "2", " 1", "yes please", "enable"}) {
    test::ScopedEnv e(name, bad);
    CHECK_THROWS_WITH_AS(detail::env_flag(name), doctest::Contains("is not supported"), Error);
    CHECK_THROWS_AS(check_cache_environment(), Error);
  }
  // The small-integer measurement switches: each value in `good` reads back, each in `bad`
  // throws naming the variable; unset reads `unset`.
  auto small_int_switch = [](const char* name, int (*read)(), int unset,
                             std::initializer_list<const char*> good,
                             std::initializer_list<const char*> bad) {
    INFO(name);
    CHECK(read() == unset);
    for (const char* v : good) {
      test::ScopedEnv e(name, v);
      CHECK(read() == std::stoi(v));
    }
    const std::string named = std::string(name) + "='";
    for (const char* v : bad) {
      test::ScopedEnv e(name, v);
      CHECK_THROWS_WITH_AS(read(), doctest::Contains(named.c_str()), Error);
    }
  };
  // the ring-depth switch: 2..4 or unset
  small_int_switch("GRAPHATTN_DECODE_RING_STAGES", detail::decode_ring_stages_from_env, 0,
                   {"2", "3", "4"}, {"1", "5", "02", "2x", " 2"});
  // the _dsp count's blocks-a-multiprocessor switch: 1..4 or unset
  small_int_switch("GRAPHATTN_MIXED_DSP_SM_BLOCKS", detail::mixed_dsp_sm_blocks_from_env, 0,
                   {"1", "2", "4"}, {"0", "5", "02", "2x", " 2"});
  // the _dsp count's long-splits switch: 1..64 or unset
  small_int_switch("GRAPHATTN_MIXED_DSP_LONG_TILES", detail::mixed_dsp_long_tiles_from_env,
                   detail::kMixedDspLongTilesDefault, {"0", "1", "8", "64"},
                   {"65", "08", "8x", " 8", "-1"});
  // the early-trigger switch: 1..3 or unset
  small_int_switch("GRAPHATTN_DECODE_EARLY_TRIGGER", detail::decode_early_trigger_from_env, 0,
                   {"1", "2", "3"}, {"0", "4", "01", "1x"});
  // the items-per-block switch: 1..64 or unset
  small_int_switch("GRAPHATTN_DECODE_ITEMS", detail::decode_items_from_env, 0, {"1", "6", "64"},
                   {"0", "65", "06", "6x", " 6"});
#ifdef GRAPHATTN_WARMUP_TOOL
  for (const char* var :
       {"GRAPHATTN_DISABLE_GRAPHS", "GRAPHATTN_DECODE_CLUSTERS", "GRAPHATTN_DUMP_SOURCE",
        "GRAPHATTN_CHECK_BOUNDS", "GRAPHATTN_DECODE_CLUSTER_SPLITS", "GRAPHATTN_DECODE_RING_STAGES",
        "GRAPHATTN_DECODE_EARLY_TRIGGER", "GRAPHATTN_MIXED_DSP_SM_BLOCKS",
        "GRAPHATTN_DECODE_ITEMS"}) {
    const test::ToolRun r = test::run_program(GRAPHATTN_WARMUP_TOOL, {"--model", "llama-3-8b"},
                                              {std::string(var) + "=1abc"});
    INFO(var << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(std::string(var) + "='1abc' is not supported") != std::string::npos);
  }
  // The mixed-batch variables are start-up errors too (check_flag_environment), not errors of
  // the first backend made.
  for (const char* setting :
       {"GRAPHATTN_MIXED_BRANCHES=prefill-frist", "GRAPHATTN_MIXED_DECODE_DIVISOR=-1"}) {
    const test::ToolRun r =
        test::run_program(GRAPHATTN_WARMUP_TOOL, {"--model", "llama-3-8b"}, {setting});
    INFO(setting << ": " << r.err);
    CHECK(r.code == 2);
    const std::string value = std::string(setting).substr(std::string(setting).find('=') + 1);
    CHECK(r.err.find("\"" + value + "\"") != std::string::npos);
  }
#endif
}

TEST_CASE("cache directories: relative paths and too many layers are start-up errors") {
  {
    test::ScopedEnv e("GRAPHATTN_CACHE_DIR", "relative/cache");
    CHECK_THROWS_WITH_AS(KernelCache(), doctest::Contains("is not an absolute path"), Error);
  }
  std::string many;
  for (int i = 0; i < 1100; ++i) many += "/tmp/graphattn-layer-" + std::to_string(i) + ":";
  {
    test::ScopedEnv e("GRAPHATTN_CACHE_DIRS", many);
    CHECK_THROWS_WITH_AS(KernelCache(), doctest::Contains("at most 32 layers"), Error);
  }
  CacheOptions o;
  for (int i = 0; i < 40; ++i) o.dirs.push_back("/tmp/graphattn-layer-" + std::to_string(i));
  CHECK_THROWS_WITH_AS(KernelCache{o}, doctest::Contains("at most 32 layers"), Error);
#ifdef GRAPHATTN_CACHE_TOOL
  const test::ToolRun rel =
      test::run_program(GRAPHATTN_CACHE_TOOL, {"stats"}, {"GRAPHATTN_CACHE_DIR=relative"});
  CHECK(rel.code == 2);
  CHECK(rel.err.find("not an absolute path") != std::string::npos);
  const test::ToolRun layers =
      test::run_program(GRAPHATTN_CACHE_TOOL, {"stats"}, {"GRAPHATTN_CACHE_DIRS=" + many});
  CHECK(layers.code == 2);
  CHECK(layers.err.find("at most 32 layers") != std::string::npos);
#endif
}

#ifdef GRAPHATTN_CACHE_TOOL
TEST_CASE("graphattn-cache: clear, prune and verify --fix refuse a directory that is not a cache") {
  test::TempDir tmp;
  const std::string home = tmp.path() + "/home";
  fs::create_directory(home);
  // Someone's files that happen to match the cache's name patterns, beside their own.
  const std::string hex = std::string(32, 'a');
  write_file(home + "/" + hex + ".gakc", "my data", 0600);
  write_file(home + "/" + hex + ".cu", "my source", 0600);
  write_file(home + "/notes.txt", "keep", 0600);
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"clear"}, std::vector<std::string>{"prune", "--max-bytes", "0"},
        std::vector<std::string>{"verify", "--fix"}}) {
    std::vector<std::string> args = {"--dir", home};
    args.insert(args.end(), cmd.begin(), cmd.end());
    const test::ToolRun r = test::run_program(GRAPHATTN_CACHE_TOOL, args);
    INFO(cmd[0] << ": " << r.out << r.err);
    CHECK(r.code == 1);
    CHECK(r.err.find("not marked as a graphattn cache") != std::string::npos);
    CHECK(r.err.find(hex + ".gakc") != std::string::npos);
    CHECK(r.err.find("--force") != std::string::npos);
    CHECK(fs::exists(home + "/" + hex + ".gakc"));
    CHECK(fs::exists(home + "/" + hex + ".cu"));
  }
  const test::ToolRun forced =
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--dir", home, "clear", "--force"});
  CHECK(forced.code == 0);
  CHECK_FALSE(fs::exists(home + "/" + hex + ".gakc"));
  CHECK(fs::exists(home + "/notes.txt"));

  // A directory the cache made carries the marker: clear works without --force.
  const std::string made = tmp.path() + "/made";
  REQUIRE(
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--dir", made, "compile", "--spec", kSpec}).code ==
      0);
  CHECK(fs::exists(made + "/" + detail::kCacheMarkerName));
  CHECK(test::run_program(GRAPHATTN_CACHE_TOOL, {"--dir", made, "clear"}).code == 0);
  CHECK(fs::exists(made + "/" + detail::kCacheMarkerName));

  // An earlier version's cache (entries only, no marker) is recognised, and the kernel cache
  // marks it on first use.
  const std::string old = tmp.path() + "/old";
  REQUIRE(
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--dir", old, "compile", "--spec", kSpec}).code ==
      0);
  fs::remove(old + "/" + detail::kCacheMarkerName);
  CHECK(
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--dir", old, "prune", "--older-than", "1"}).code ==
      0);
  {
    CacheOptions o;
    o.dir = old;
    o.use_remote = false;
    KernelCache c(o);
  }
  CHECK(fs::exists(old + "/" + detail::kCacheMarkerName));
}

TEST_CASE("graphattn-cache: stats and verify show every layer of GRAPHATTN_CACHE_DIRS") {
  test::TempDir a, b;
  REQUIRE(test::run_program(GRAPHATTN_CACHE_TOOL, {"--dir", a.path(), "compile", "--spec", kSpec})
              .code == 0);
  const std::string dirs = "GRAPHATTN_CACHE_DIRS=" + a.path() + ":" + b.path();
  for (const char* cmd : {"stats", "verify"}) {
    const test::ToolRun r = test::run_program(GRAPHATTN_CACHE_TOOL, {"--json", cmd}, {dirs});
    INFO(cmd << ": " << r.out << r.err);
    CHECK(r.code == 0);
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    REQUIRE(j["layers"].size() == 2);
    CHECK(j["layers"][0]["dir"] == a.path());
    CHECK(j["layers"][1]["dir"] == b.path());
    const test::ToolRun text = test::run_program(GRAPHATTN_CACHE_TOOL, {cmd}, {dirs});
    CHECK(text.out.find("layer 1 of 2") != std::string::npos);
    CHECK(text.out.find("layer 2 of 2") != std::string::npos);
  }
  const auto j = nlohmann::json::parse(
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--json", "stats"}, {dirs}).out, nullptr, false);
  CHECK(j["layers"][0]["count"] == 1);
  CHECK(j["layers"][1]["count"] == 0);
}
#endif
