// SPDX-License-Identifier: Apache-2.0
// The public cache-inspection API (CacheDirectory, jit.hpp): list, verify, remove, export and
// import, on real entries that NVRTC compiles (no GPU needed).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

TEST_CASE("cache directory: list, verify, export, import and remove real entries") {
  test::TempDir dir;
  const AttentionSpec spec =
      AttentionSpec::parse("cache_write_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
  {
    CacheOptions o;
    o.dir = dir.path();
    o.use_remote = false;
    KernelCache cache(o);
    REQUIRE(cache.precompile({spec}, 1).at(0).error.empty());
  }
  const CacheDirectory d(dir.path());
  CHECK(d.exists());
  CHECK(d.trust_problem().empty());
  const auto entries = d.list();
  REQUIRE(entries.size() == 1);
  const CacheEntryInfo& e = entries[0];
  CHECK(e.ok);
  CHECK(e.status == "ok");
  CHECK(e.current);
  CHECK(e.spec == spec.to_string());
  CHECK(e.arch == 90);
  CHECK(e.name == e.key_hex + ".gakc");
  CHECK(d.verify(e.key_hex).ok);
  CHECK(d.verify(std::string(32, '0')).status == "missing");
  CHECK_THROWS_WITH_AS(d.verify("xyz"), doctest::Contains("cache key 'xyz' is not supported"),
                       Error);

  // Export, then import into an empty directory: the same entry, verified, installed once.
  test::TempDir out;
  const std::string bundle = out.path() + "/kernels.tar";
  const BundleExport x = d.export_bundle(bundle, "");
  CHECK(x.entries == 1);
  CHECK(x.left_out == 0);
  CHECK(x.specs == std::vector<std::string>{spec.to_string()});
  test::TempDir other;
  const CacheDirectory to(other.path());
  const BundleImport dry = to.import_bundle(bundle, "", true);
  REQUIRE(dry.members.size() == 1);
  CHECK(dry.members[0].action == "would install");
  CHECK(to.list().empty());
  const BundleImport in = to.import_bundle(bundle, "", false);
  CHECK(in.installed == 1);
  CHECK(in.members[0].verdict == "ok");
  CHECK(to.verify(e.key_hex).ok);
  CHECK(to.import_bundle(bundle, "", false).present == 1);

  // A damaged entry is listed as bad and left out of an export.
  {
    std::fstream f(other.path() + "/" + e.name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  CHECK_FALSE(to.verify(e.key_hex).ok);
  CHECK(to.verify(e.key_hex).status != "ok");
  CHECK_THROWS_WITH_AS(to.export_bundle(out.path() + "/none.tar", ""),
                       doctest::Contains("nothing to export"), Error);

  // Remove: there, then gone.
  CHECK(to.remove(e.key_hex));
  CHECK_FALSE(to.remove(e.key_hex));
  CHECK(to.list().empty());
}

TEST_CASE("cache directory: files by kind, removals by name only, the path and spec checks") {
  test::TempDir dir;
  const CacheDirectory missing(dir.path() + "/none");
  CHECK_FALSE(missing.exists());
  CHECK(cache_path_kind(dir.path() + "/none") == CachePathKind::kMissing);
  CHECK_THROWS_WITH_AS(missing.require_usable(false), doctest::Contains("/none does not exist"),
                       Error);
  CHECK(cache_path_kind(dir.path()) == CachePathKind::kDirectory);
  std::ofstream(dir.path() + "/notes.txt") << "x";
  std::string what;
  CHECK(cache_path_kind(dir.path() + "/notes.txt", &what) == CachePathKind::kOther);
  CHECK(what == "a regular file");

  const std::string key(32, 'a');
  std::ofstream(dir.path() + "/" + key + ".lock") << "";
  const CacheDirectory d(dir.path());
  const auto files = d.files();
  REQUIRE(files.size() == 2);
  CHECK(files[0].name == key + ".lock");
  CHECK(files[0].kind == CacheFileKind::kLock);
  CHECK(files[0].modified_ms > 0);
  CHECK(files[1].kind == CacheFileKind::kOther);
  CHECK_FALSE(d.is_cache());  // a file graphattn does not write, and no marker
  // Names, never paths: nothing outside the directory can be named.
  for (const char* bad : {"../notes.txt", "", ".", "..", "a/b"})
    CHECK_THROWS_WITH_AS(d.remove_file(bad), doctest::Contains("is not supported"), Error);
  CHECK(d.remove_orphan_locks() == std::vector<std::string>{key + ".lock"});
  CHECK(d.remove_file("notes.txt").removed);
  CHECK_FALSE(d.remove_file("notes.txt").removed);
  CHECK(d.files().empty());

  std::string status;
  CHECK(entry_spec_problem("cache_write_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90", 90).empty());
  CHECK(entry_spec_problem("cache_write_h64_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90", 80, &status) ==
        "header arch sm_80 differs from the spec's sm_90");
  CHECK(status == "arch mismatch");
  CHECK_FALSE(entry_spec_problem("not a spec", 90, &status).empty());
  CHECK(status == "bad spec");
}
