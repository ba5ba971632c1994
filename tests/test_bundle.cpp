// SPDX-License-Identifier: Apache-2.0
// Kernel bundles (jit_cache/bundle.hpp, graphattn-cache export / import): a round trip, every
// kind of damage a bundle can carry (each refused, never installed), signing, stale entries, and
// the image workflow: export a model's kernels, import them into a directory that then becomes a
// read-only layer, and a warmup that compiles nothing.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/bundle.hpp"
#include "jit_cache/disk_tier.hpp"
#include "tests/read_only_view.hpp"
#include "tests/test_util.hpp"
#include "tests/tool_runner.hpp"

using namespace graphattn;
using detail::Bundle;
using detail::BundleEntry;
using detail::BundleMember;
namespace fs = std::filesystem;

namespace {

const char* kSpecs[] = {"cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "cache_write_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                        "cache_write_h128_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm100"};

// The entries of kSpecs, compiled once for the whole file.
const std::vector<BundleEntry>& entries() {
  static const std::vector<BundleEntry> list = [] {
    CacheOptions o;
    o.use_disk = false;
    o.use_remote = false;
    KernelCache cache(o);
    std::vector<BundleEntry> out;
    const auto [major, minor] = nvrtc_version();
    for (const char* s : kSpecs) {
      const auto k = cache.get(AttentionSpec::parse(s));
      BundleEntry e;
      e.header.key = k->key;
      e.header.arch = static_cast<uint32_t>(k->spec.arch);
      e.header.nvrtc_major = static_cast<uint32_t>(major);
      e.header.nvrtc_minor = static_cast<uint32_t>(minor);
      e.header.compiled_at_ms = k->compiled_at_ms;
      e.header.spec = k->spec_string;
      e.payload = k->cubin;
      out.push_back(std::move(e));
    }
    return out;
  }();
  return list;
}

std::string bytes_of(const std::string& path) { return test::read_all(path); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string written(const test::TempDir& dir, const std::vector<BundleEntry>& list,
                    const std::string& key = "") {
  const std::string path = dir.path() + "/kernels.tar";
  detail::write_bundle(path, list, key, 1795000000000);
  return path;
}

std::string error_of(const std::string& bytes, const std::string& key = "") {
  try {
    detail::parse_bundle(bytes, key, "B.tar");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Offsets in the archive written for entries(): the manifest's data starts after its header.
size_t manifest_at() { return 512; }

}  // namespace

TEST_CASE("bundle: written and read back, every entry verified and current") {
  test::TempDir dir;
  const std::string path = written(dir, entries());
  const Bundle b = detail::read_bundle(path, "");
  CHECK(b.cache_format == kCacheFormatVersion);
  CHECK(b.nvrtc_major == nvrtc_version().first);
  CHECK(b.created_ms == 1795000000000);
  CHECK_FALSE(b.signed_);
  REQUIRE(b.members.size() == entries().size());
  for (size_t i = 0; i < entries().size(); ++i) {
    const BundleMember& m = b.members[i];
    INFO(m.spec << ": " << m.reason);
    CHECK(m.verdict == BundleMember::Verdict::kOk);
    CHECK(m.spec == kSpecs[i]);
    CHECK(m.entry.header.key == entries()[i].header.key);
    CHECK(m.entry.payload == entries()[i].payload);
  }
  CHECK((fs::status(path).permissions() & fs::perms::all) == (fs::perms(0644)));
  // Nothing but the bundle is left in the directory (the temp file was renamed).
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

TEST_CASE("bundle: damage to a member makes that member bad, and only that one") {
  test::TempDir dir;
  const std::string good = bytes_of(written(dir, entries()));
  std::string bad = good;
  // The last member, found by its name: flip a byte inside its data.
  const std::string name = entries().back().header.key.hex() + ".gakc";
  const size_t header = good.rfind(name);
  REQUIRE(header != std::string::npos);
  bad[header + 512 + 100] ^= 0x20;
  const Bundle b = detail::parse_bundle(bad, "", "B.tar");
  REQUIRE(b.members.size() == 3);
  CHECK(b.members[0].verdict == BundleMember::Verdict::kOk);
  CHECK(b.members[1].verdict == BundleMember::Verdict::kOk);
  CHECK(b.members[2].verdict == BundleMember::Verdict::kBad);
  CHECK(b.members[2].reason.find("SHA-256") != std::string::npos);
}

TEST_CASE("bundle: a damaged archive or manifest is refused as a whole, naming the bundle") {
  test::TempDir dir;
  const std::string good = bytes_of(written(dir, entries()));
  REQUIRE(good.compare(manifest_at(), 26, "graphattn-kernel-bundle 1\n") == 0);
  // The manifest's text changed in place (same length: the archive's layout stays, and the tar
  // header holds no checksum of the data), so that the manifest's own checks must speak.
  auto with_manifest = [&](const std::string& from, const std::string& to) {
    std::string bytes = good;
    const size_t at = bytes.find(from, manifest_at());
    REQUIRE(at != std::string::npos);
    REQUIRE(from.size() == to.size());
    bytes.replace(at, from.size(), to);
    return bytes;
  };
  CHECK(error_of("").find("B.tar") != std::string::npos);
  CHECK(error_of("").find("empty") != std::string::npos);
  CHECK(error_of(std::string(3000, 'x')).find("not a tar archive") != std::string::npos);
  CHECK(error_of(good.substr(0, 700)).find("truncated") != std::string::npos);
  CHECK(error_of(good.substr(0, good.size() - 1024 - 600)).find("truncated") != std::string::npos);
  CHECK(error_of(with_manifest("graphattn-kernel-bundle 1", "graphattn-kernel-bundle 2"))
            .find("does not start with") != std::string::npos);
  CHECK(error_of(with_manifest("cache-format", "cache-formax")).find("manifest line 2") !=
        std::string::npos);
  // A header byte of a member changed: its header checksum no longer holds.
  const std::string name0 = entries()[0].header.key.hex() + ".gakc";
  const size_t h0 = good.find(name0);
  REQUIRE(h0 != std::string::npos);
  std::string header_damage = good;
  header_damage[h0 + 124 + 3] = '7';  // its size field
  CHECK(error_of(header_damage).find("header checksum") != std::string::npos);
  // A member the manifest does not list, appended before the end blocks.
  {
    test::TempDir other;
    const std::string extra = bytes_of(written(other, {entries()[0]}));
    std::string bytes = good.substr(0, good.size() - 1024);
    const size_t m0 = extra.find(name0);
    bytes += extra.substr(m0, extra.size() - m0);
    CHECK(error_of(bytes).find("is not in the manifest") != std::string::npos);
  }
  // The manifest not first, or a member missing.
  {
    test::TempDir other;
    const std::string only_two = bytes_of(written(other, {entries()[0], entries()[1]}));
    CHECK(error_of(only_two.substr(only_two.find(name0))).find("not manifest.txt") !=
          std::string::npos);
    // good's manifest lists three members; cut the archive after two.
    const std::string name2 = entries()[2].header.key.hex() + ".gakc";
    CHECK(error_of(good.substr(0, good.find(name2))).find("is missing") != std::string::npos);
  }
}

TEST_CASE("bundle: links, directories and path prefixes are refused") {
  test::TempDir dir;
  const std::string good = bytes_of(written(dir, entries()));
  const size_t h0 = good.find(entries()[0].header.key.hex() + ".gakc");
  for (char type : {'1', '2', '5'}) {
    std::string bytes = good;
    bytes[h0 + 156] = type;
    // Recompute the header checksum so that the type check itself must refuse it.
    unsigned sum = 0;
    for (size_t i = 0; i < 512; ++i)
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(bytes[h0 + i]);
    char field[8];
    std::snprintf(field, sizeof field, "%06o", sum);
    std::memcpy(&bytes[h0 + 148], field, 7);
    CHECK(error_of(bytes).find("not a regular file") != std::string::npos);
  }
}

TEST_CASE("bundle: signed bundles; a key demands a valid signature") {
  test::TempDir dir;
  const std::string key = "a bundle secret of some length";
  const std::string path = written(dir, entries(), key);
  const Bundle b = detail::read_bundle(path, key);
  CHECK(b.signed_);
  CHECK(b.members.size() == 3);
  // Without a key it is read like any bundle (the signature is not checked).
  CHECK(detail::read_bundle(path, "").signed_);
  CHECK_THROWS_WITH_AS(detail::read_bundle(path, "another secret entirely"),
                       doctest::Contains("signature does not match"), Error);
  test::TempDir other;
  const std::string unsigned_path = written(other, entries());
  CHECK_THROWS_WITH_AS(detail::read_bundle(unsigned_path, key), doctest::Contains("not signed"),
                       Error);
  // A member changed under a valid signature: the manifest's SHA-256 catches it.
  std::string bytes = bytes_of(path);
  const size_t h1 = bytes.find(entries()[1].header.key.hex() + ".gakc");
  bytes[h1 + 512 + 200] ^= 4;
  const Bundle changed = detail::parse_bundle(bytes, key, "B.tar");
  CHECK(changed.members[1].verdict == BundleMember::Verdict::kBad);
  // The manifest changed under it: the signature catches that.
  bytes = bytes_of(path);
  const size_t e = bytes.find("entry ", 512);
  bytes[e + 6] = bytes[e + 6] == 'a' ? 'b' : 'a';
  CHECK(error_of(bytes, key).find("signature does not match") != std::string::npos);
}

TEST_CASE("bundle: entries of another NVRTC or other template text are stale, not bad") {
  test::TempDir dir;
  std::vector<BundleEntry> list = entries();
  list[0].header.nvrtc_minor += 1;
  // A key this build would never compute for the spec (as if the template text differed).
  list[1].header.key.low ^= 0x1234;
  const Bundle b = detail::read_bundle(written(dir, list), "");
  CHECK(b.members[0].verdict == BundleMember::Verdict::kStale);
  CHECK(b.members[0].reason.find("NVRTC") != std::string::npos);
  CHECK(b.members[1].verdict == BundleMember::Verdict::kStale);
  CHECK(b.members[1].reason.find("template text") != std::string::npos);
  CHECK(b.members[2].verdict == BundleMember::Verdict::kOk);
}

TEST_CASE("bundle: a path that is not a readable regular file is an error naming it") {
  test::TempDir dir;
  CHECK_THROWS_WITH_AS(detail::read_bundle(dir.path() + "/none.tar", ""),
                       doctest::Contains((dir.path() + "/none.tar").c_str()), Error);
  CHECK_THROWS_WITH_AS(detail::read_bundle(dir.path(), ""), doctest::Contains("not a regular file"),
                       Error);
  CHECK_THROWS_WITH_AS(detail::write_bundle(dir.path() + "/no/such/dir/b.tar", entries(), "", 0),
                       doctest::Contains("/no/such/dir/b.tar"), Error);
}

#ifdef GRAPHATTN_CACHE_TOOL
TEST_CASE("graphattn-cache export/import: an image layer baked from a bundle compiles nothing") {
  test::TempDir build_dir, image, user, scratch;
  const std::string bundle = scratch.path() + "/llama.tar";
  // The build step: every kernel of the model for two archs, into one file.
  const auto exported = test::run_program(
      GRAPHATTN_CACHE_TOOL, {"--json", "--dir", build_dir.path(), "export", bundle, "--model",
                             "llama-3-8b", "--arch", "90,100"});
  INFO(exported.out << exported.err);
  REQUIRE(exported.code == 0);
  const auto je = nlohmann::json::parse(exported.out);
  // (5 kernels an arch: cache write, decode, prefill, the mixed graphs' _dsp and _dsp_long decodes)
  CHECK(je["entries"].get<int>() == 10);
  // The image step: import, and the directory becomes a read-only layer.
  const auto dry = test::run_program(GRAPHATTN_CACHE_TOOL,
                                     {"--dir", image.path(), "import", bundle, "--dry-run"});
  CHECK(dry.code == 0);
  CHECK(dry.out.find("10 would be installed") != std::string::npos);
  const auto imported =
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--json", "--dir", image.path(), "import", bundle});
  INFO(imported.out << imported.err);
  REQUIRE(imported.code == 0);
  CHECK(nlohmann::json::parse(imported.out)["installed"].get<int>() == 10);
  const auto again =
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--json", "--dir", image.path(), "import", bundle});
  CHECK(nlohmann::json::parse(again.out)["present"].get<int>() == 10);

  test::ReadOnlyView ro(image.path());
  if (!ro.ok()) {
    MESSAGE("skipped the read-only part: " << ro.why());
    return;
  }
  // The engine's start on a fresh host: the image layer, then the user's own directory.
  CacheOptions o;
  o.dirs = {ro.path(), user.path()};
  o.use_remote = false;
  o.warn = [](const std::string& w) { FAIL("unexpected warning: " << w); };
  KernelCache cache(o);
  for (const auto& item : je["specs"]) {
    CacheOrigin origin = CacheOrigin::kCompiled;
    cache.get(AttentionSpec::parse(item.get<std::string>()), &origin);
    CHECK(origin == CacheOrigin::kDisk);
  }
  CHECK(cache.stats().compiles == 0);
  // Nothing but the marker the cache writes into the empty directory it was given.
  for (const auto& f : fs::directory_iterator(user.path()))
    CHECK(f.path().filename() == detail::kCacheMarkerName);
#ifdef GRAPHATTN_WARMUP_TOOL
  if (!gpu_available()) {
    const auto warm =
        test::run_program(GRAPHATTN_WARMUP_TOOL, {"--model", "llama-3-8b", "--arch", "90"},
                          {"GRAPHATTN_CACHE_DIRS=" + ro.path() + ":" + user.path()});
    INFO(warm.out << warm.err);
    CHECK(warm.code == 0);
    CHECK(warm.out.find(" 0 compiled,") != std::string::npos);
  }
#endif

  // A damaged bundle installs nothing bad and says so (exit 1).
  std::string bytes = bytes_of(bundle);
  const size_t at = bytes.rfind(".gakc");
  bytes[at + 512 + 300] ^= 1;
  write_bytes(bundle, bytes);
  test::TempDir other;
  const auto damaged =
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--json", "--dir", other.path(), "import", bundle});
  CHECK(damaged.code == 1);
  const auto jd = nlohmann::json::parse(damaged.out);
  CHECK(jd["bad"].get<int>() == 1);
  CHECK(jd["installed"].get<int>() == 9);
  // Not a bundle at all: exit 1 with the path named.
  write_bytes(bundle, "hello");
  const auto junk =
      test::run_program(GRAPHATTN_CACHE_TOOL, {"--dir", other.path(), "import", bundle});
  CHECK(junk.code == 1);
  CHECK(junk.err.find(bundle) != std::string::npos);
  // Usage: a bundle path is required.
  CHECK(test::run_program(GRAPHATTN_CACHE_TOOL, {"import"}).code == 2);
}
#endif

namespace {

// Sets a member's header checksum again after a test changed its header or its manifest text.
void fix_header_checksum(std::string* bytes, size_t h0) {
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i)
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>((*bytes)[h0 + i]);
  char field[8];
  std::snprintf(field, sizeof field, "%06o", sum);
  std::memcpy(&(*bytes)[h0 + 148], field, 7);
}

}  // namespace

TEST_CASE(
    "bundle: a 4 GiB sparse file, or a member that declares 4 GiB, fails fast in little "
    "memory") {
  test::TempDir dir;
  // The fixture first (a real bundle's manifest header: writing it compiles and loads what a
  // first bundle in the process needs), so that the peak below counts read_bundle alone: run by
  // itself, this test otherwise measured the fixture's one-time costs (66 MiB) as the reads'.
  std::string header = bytes_of(written(dir, entries())).substr(0, 512);
  const double rss0 = test::peak_rss_mib();
  const auto t0 = std::chrono::steady_clock::now();
  // All zeros: the first block already ends the archive.
  const std::string sparse = dir.path() + "/sparse.tar";
  std::ofstream(sparse).close();
  REQUIRE(::truncate(sparse.c_str(), off_t{4} << 30) == 0);
  CHECK_THROWS_WITH_AS(detail::read_bundle(sparse, ""), doctest::Contains("archive is empty"),
                       Error);
  // A manifest header that declares 4 GiB, then a sparse hole: refused before it is read.
  std::snprintf(&header[124], 12, "%011llo", 4ull << 30);
  fix_header_checksum(&header, 0);
  const std::string big = dir.path() + "/big.tar";
  std::ofstream(big, std::ios::binary) << header;
  REQUIRE(::truncate(big.c_str(), off_t{4} << 30) == 0);
  CHECK_THROWS_WITH_AS(detail::read_bundle(big, ""), doctest::Contains("declares 4294967296 bytes"),
                       Error);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("two 4 GiB files refused in " << seconds << " s");
  CHECK(seconds < 10);                      // was 20 s for one
  CHECK(test::peak_rss_mib() - rss0 < 64);  // was 4.2 GB
}

#ifdef GRAPHATTN_CACHE_TOOL
TEST_CASE(
    "graphattn-cache import: what the entries were checked against, and an unverified "
    "signature is 'unsigned'") {
  test::TempDir dir, target;
  // Signed, and the manifest claims another NVRTC and cache format (unsigned copy below).
  const std::string signed_path = written(dir, entries(), "a bundle secret of some length");
  const auto [major, minor] = nvrtc_version();
  const std::string nvrtc = std::to_string(major) + "." + std::to_string(minor);
  auto import = [&](const std::string& path, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--dir", target.path(), "import", path, "--dry-run"};
    args.insert(args.begin(), extra.begin(), extra.end());
    return test::run_program(GRAPHATTN_CACHE_TOOL, args);
  };
  const test::ToolRun text = import(signed_path);
  INFO(text.out << text.err);
  CHECK(text.code == 0);
  CHECK(text.out.find("unsigned (no key configured to verify its signature)") != std::string::npos);
  CHECK(text.out.find(", signed") == std::string::npos);
  const test::ToolRun json = import(signed_path, {"--json"});
  const auto j = nlohmann::json::parse(json.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  CHECK(j["signed"] == false);
  CHECK(j["signature"] == "unsigned (no key configured to verify its signature)");

  std::string bytes = bytes_of(written(dir, entries()));
  const std::string claim_nvrtc = "nvrtc " + nvrtc + "\n";
  const size_t at = bytes.find(claim_nvrtc);
  REQUIRE(at != std::string::npos);
  std::string fake = "nvrtc " + std::string(nvrtc.size(), '9') + "\n";
  fake[6 + nvrtc.find('.')] = '.';
  bytes.replace(at, claim_nvrtc.size(), fake);
  bytes.replace(bytes.find("cache-format 1\n"), 15, "cache-format 7\n");
  fix_header_checksum(&bytes, 0);
  const std::string claims = dir.path() + "/claims.tar";
  std::ofstream(claims, std::ios::binary) << bytes;
  const test::ToolRun r = import(claims, {"--json"});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  const auto k = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(k.is_discarded());
  CHECK(k["checked_against"]["nvrtc"] == nvrtc);
  CHECK(k["checked_against"]["cache_format"] == kCacheFormatVersion);
  CHECK(k["manifest_claims"]["cache_format"] == 7);
  CHECK(k["manifest_claims"]["nvrtc"] != nvrtc);
  const test::ToolRun t = import(claims);
  CHECK(t.out.find("checked against this process's NVRTC " + nvrtc) != std::string::npos);
  CHECK(t.out.find("the manifest claims NVRTC 9") != std::string::npos);
}
#endif
