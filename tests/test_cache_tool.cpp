// SPDX-License-Identifier: Apache-2.0
// graphattn-cache, run as the real binary against temporary cache directories. Its --json
// output is parsed back; its exit status is part of its contract (0 ok, 1 problem, 2 usage).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "jit_cache/disk_tier.hpp"
#include "tests/test_util.hpp"
#include "tests/tool_runner.hpp"

#ifndef GRAPHATTN_CACHE_TOOL
#error "GRAPHATTN_CACHE_TOOL must name the graphattn-cache binary (see tests/tests.cmake)"
#endif

namespace {

namespace fs = std::filesystem;
using graphattn::test::read_all;
using graphattn::test::run_program;
using graphattn::test::TempDir;
using graphattn::test::ToolRun;
using Json = nlohmann::json;

// Four specs covering both archs, both dtypes, both layouts and an fp8 cache.
const std::vector<std::string> kSeedSpecs = {
    "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm80",
    "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
    "cache_write_h64_b32_fp16_kvauto_g1_swa0_cap0_hnd_sm90",
    "cache_write_h128_b16_bf16_kve4m3_g1_swa0_cap0_nhd_sm80",
};

// Runs graphattn-cache with args; see run_program.
ToolRun run_tool(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return run_program(GRAPHATTN_CACHE_TOOL, args, env);
}

// The one JSON document on stdout.
Json json_of(const ToolRun& r) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  Json j;
  REQUIRE_NOTHROW(j = Json::parse(r.out));
  REQUIRE(j.is_object());
  return j;
}

std::string describe(const ToolRun& r) {
  return "exit " + std::to_string(r.code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> entry_files(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() == ".gakc") out.push_back(f.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t entry_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& f : entry_files(dir)) n += fs::file_size(f);
  return n;
}

std::set<std::string> file_names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& f : fs::directory_iterator(dir)) out.insert(f.path().filename().string());
  return out;
}

void set_mtime(const std::string& path, time_t unix_seconds) {
  struct timespec ts[2] = {{unix_seconds, 0}, {unix_seconds, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), ts, 0) == 0);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

// One directory compiled once per process by the tool itself, copied into each test's own
// directory so that NVRTC runs only where a test is about compiling.
struct Seed {
  TempDir dir;
  ToolRun first;  // the human-readable compile that filled it
};

const Seed& seed() {
  static Seed s = [] {
    Seed out;
    std::vector<std::string> args = {"--dir", out.dir.path(), "compile", "--threads", "2"};
    for (const auto& spec : kSeedSpecs) args.insert(args.end(), {"--spec", spec});
    out.first = run_tool(args);
    return out;
  }();
  REQUIRE_MESSAGE(s.first.code == 0, describe(s.first));
  return s;
}

void copy_seed(const std::string& to) {
  for (const auto& f : fs::directory_iterator(seed().dir.path()))
    fs::copy_file(f.path(), fs::path(to) / f.path().filename());
}

// key of each spec, from list --json.
std::map<std::string, std::string> keys_by_spec(const std::string& dir) {
  const ToolRun r = run_tool({"--dir", dir, "--json", "list"});
  REQUIRE_MESSAGE(r.code == 0, describe(r));
  std::map<std::string, std::string> out;
  const Json j = json_of(r);
  for (const auto& e : j["entries"])
    if (e["ok"].get<bool>()) out[e["spec"].get<std::string>()] = e["key"].get<std::string>();
  return out;
}

}  // namespace

TEST_CASE("cache tool: compile prints compiled, then hit on a second run") {
  const Seed& s = seed();
  const auto lines = lines_of(s.first.out);
  for (const auto& spec : kSeedSpecs) {
    auto it = std::find_if(lines.begin(), lines.end(),
                           [&](const std::string& l) { return l.rfind(spec + " ", 0) == 0; });
    REQUIRE_MESSAGE(it != lines.end(), "no line for " << spec << " in\n" << s.first.out);
    const auto w = words_of(*it);
    REQUIRE(w.size() == 4);
    CHECK(w[1] == "compiled");
    CHECK(std::stod(w[2]) > 0);
    CHECK(w[3] == "ms");
  }
  CHECK(entry_files(s.dir.path()).size() == kSeedSpecs.size());

  TempDir dir;
  copy_seed(dir.path());
  std::vector<std::string> args = {"--dir", dir.path(), "compile", "--threads", "2"};
  for (const auto& spec : kSeedSpecs) args.insert(args.end(), {"--spec", spec});
  const ToolRun again = run_tool(args);
  REQUIRE_MESSAGE(again.code == 0, describe(again));
  for (const auto& spec : kSeedSpecs) {
    bool found = false;
    for (const auto& l : lines_of(again.out)) {
      const auto w = words_of(l);
      if (w.size() == 4 && w[0] == spec) {
        found = true;
        CHECK(w[1] == "hit");
        CHECK(w[3] == "ms");
      }
    }
    CHECK_MESSAGE(found, "no line for " << spec << " in\n" << again.out);
  }

  args.insert(args.begin(), "--json");
  const ToolRun js = run_tool(args);
  REQUIRE_MESSAGE(js.code == 0, describe(js));
  const Json j = json_of(js);
  CHECK(j["hits"] == kSeedSpecs.size());
  CHECK(j["compiled"] == 0);
  CHECK(j["failed"] == 0);
  CHECK(j["threads"] == 2);
  REQUIRE(j["results"].size() == kSeedSpecs.size());
  for (size_t i = 0; i < kSeedSpecs.size(); ++i) {
    CHECK(j["results"][i]["spec"] == kSeedSpecs[i]);
    CHECK(j["results"][i]["result"] == "hit");
    CHECK(j["results"][i]["ms"].get<double>() >= 0);
  }
  CHECK(entry_files(dir.path()).size() == kSeedSpecs.size());
}

TEST_CASE("cache tool: compile --model warms every kernel of a built-in model") {
  TempDir dir;
  const std::vector<std::string> args = {"--json",           "--dir",      dir.path(), "compile",
                                         "--model",          "mistral-7b", "--arch",   "80",
                                         "--kv-cache-dtype", "e4m3"};
  const ToolRun first = run_tool(args);
  REQUIRE_MESSAGE(first.code == 0, describe(first));
  const Json j = json_of(first);
  // mistral-7b: cache write, windowed decode, windowed prefill, the mixed graphs' windowed
  // decode with device-chosen splits.
  const std::vector<std::string> want = {"cache_write_h128_b16_bf16_kve4m3_g1_swa0_cap0_nhd_sm80",
                                         "decode_h128_b16_bf16_kve4m3_g4_swa1_cap0_nhd_sm80",
                                         "prefill_h128_b16_bf16_kve4m3_g4_swa1_cap0_nhd_sm80",
                                         "decode_h128_b16_bf16_kve4m3_g4_swa1_cap0_nhd_sm80_dsp"};
  REQUIRE(j["results"].size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(j["results"][i]["spec"] == want[i]);
    CHECK(j["results"][i]["result"] == "compiled");
  }
  const Json again = json_of(run_tool(args));
  CHECK(again["hits"] == want.size());
  CHECK(again["compiled"] == 0);
  CHECK(entry_files(dir.path()).size() == want.size());
  // Neither --spec nor --model, or an unknown model: usage errors.
  CHECK(run_tool({"--dir", dir.path(), "compile"}).code == 2);
  const ToolRun unknown = run_tool({"--dir", dir.path(), "compile", "--model", "gpt-9"});
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("unknown model 'gpt-9'; built-in models: llama-3-8b") !=
        std::string::npos);
}

TEST_CASE("cache tool: list and stats report every entry") {
  TempDir dir;
  copy_seed(dir.path());
  const ToolRun r = run_tool({"--dir", dir.path(), "--json", "list"});
  REQUIRE_MESSAGE(r.code == 0, describe(r));
  const Json j = json_of(r);
  CHECK(j["count"] == kSeedSpecs.size());
  CHECK(j["bad_count"] == 0);
  CHECK(j["total_bytes"] == entry_bytes(dir.path()));
  std::set<std::string> specs;
  for (const auto& e : j["entries"]) {
    specs.insert(e["spec"].get<std::string>());
    const std::string key = e["key"];
    CHECK(key.size() == 32);
    CHECK(e["short_key"] == key.substr(0, 12));
    CHECK(e["ok"] == true);
    CHECK(e["status"] == "ok");
    CHECK(e["kind"] == "cache_write");
    const std::string spec = e["spec"];
    CHECK(e["arch"] == std::stoi(spec.substr(spec.rfind("_sm") + 3)));
    CHECK(e["file_bytes"] == fs::file_size(dir.path() + "/" + key + ".gakc"));
    CHECK(e["payload_bytes"].get<uint64_t>() > 0);
    CHECK(e["compile_ms"].get<double>() > 0);
    CHECK(e["compiled_at"].is_string());
    CHECK(e["last_used"].is_string());
  }
  CHECK(specs == std::set<std::string>(kSeedSpecs.begin(), kSeedSpecs.end()));

  // Global options may follow the command.
  const ToolRun after = run_tool({"list", "--dir", dir.path(), "--json"});
  REQUIRE_MESSAGE(after.code == 0, describe(after));
  CHECK(json_of(after)["count"] == kSeedSpecs.size());

  const ToolRun human = run_tool({"--dir", dir.path(), "list"});
  REQUIRE_MESSAGE(human.code == 0, describe(human));
  const auto lines = lines_of(human.out);
  REQUIRE(lines.size() == kSeedSpecs.size() + 2);
  CHECK(words_of(lines[0]) == std::vector<std::string>{"KEY", "SPEC", "ARCH", "SIZE", "COMPILED",
                                                       "AT", "LAST", "USED", "COMPILE", "MS",
                                                       "STATUS"});
  // Aligned: the spec column starts at the same place on every row.
  const size_t spec_col = lines[0].find("SPEC");
  for (const auto& e : j["entries"]) {
    const std::string spec = e["spec"];
    auto it = std::find_if(lines.begin(), lines.end(),
                           [&](const std::string& l) { return contains(l, spec); });
    REQUIRE(it != lines.end());
    CHECK(it->rfind(e["short_key"].get<std::string>(), 0) == 0);
    CHECK(it->find(spec) == spec_col);
    CHECK(contains(*it, "KiB"));
  }
  CHECK(lines.back().rfind("total: 4 entries", 0) == 0);

  const ToolRun st = run_tool({"--dir", dir.path(), "--json", "stats"});
  REQUIRE_MESSAGE(st.code == 0, describe(st));
  const Json sj = json_of(st);
  CHECK(sj["count"] == 4);
  CHECK(sj["bad_count"] == 0);
  CHECK(sj["total_bytes"] == entry_bytes(dir.path()));
  CHECK(sj["by_kind"]["cache_write"]["count"] == 4);
  CHECK(sj["by_kind"]["cache_write"]["bytes"] == entry_bytes(dir.path()));
  CHECK(sj["by_arch"]["sm_80"]["count"] == 2);
  CHECK(sj["by_arch"]["sm_90"]["count"] == 2);
  CHECK(sj["by_arch"].size() == 2);

  const ToolRun sh = run_tool({"--dir", dir.path(), "stats"});
  REQUIRE_MESSAGE(sh.code == 0, describe(sh));
  CHECK(contains(sh.out, "cache_write"));
  CHECK(contains(sh.out, "sm_80"));
  CHECK(contains(sh.out, "sm_90"));
}

TEST_CASE("cache tool: show finds an entry by key prefix and by spec") {
  TempDir dir;
  copy_seed(dir.path());
  const std::string spec = kSeedSpecs[1];
  const std::string key = keys_by_spec(dir.path()).at(spec);

  for (const std::string& arg : {key.substr(0, 8), spec}) {
    const ToolRun r = run_tool({"--dir", dir.path(), "--json", "show", arg});
    REQUIRE_MESSAGE(r.code == 0, describe(r));
    const Json j = json_of(r);
    CHECK(j["key"] == key);
    CHECK(j["spec"] == spec);
    CHECK(j["arch"] == 90);
    CHECK(j["format_version"] == 1);
    CHECK(j["nvrtc_version"].is_string());
    CHECK(j["compiled_at_ms"].get<int64_t>() > 0);
    CHECK(j["compile_ms"].get<double>() > 0);
    CHECK(j["payload_bytes"].get<uint64_t>() < j["file_bytes"].get<uint64_t>());
    CHECK(j["payload_xxh3"].get<std::string>().size() == 16);
    CHECK(j["current"] == true);
    CHECK(j["source"].is_null());
  }
  // Upper-case digits are the same prefix.
  std::string upper = key.substr(0, 10);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const ToolRun up = run_tool({"--dir", dir.path(), "--json", "show", upper});
  REQUIRE_MESSAGE(up.code == 0, describe(up));
  CHECK(json_of(up)["key"] == key);

  const ToolRun human = run_tool({"--dir", dir.path(), "show", spec});
  REQUIRE_MESSAGE(human.code == 0, describe(human));
  for (const char* field :
       {"key", "spec", "arch", "format version", "nvrtc version", "compiled at", "compile ms",
        "payload bytes", "payload xxh3", "last used", "file size", "source"})
    CHECK_MESSAGE(contains("\n" + human.out, std::string("\n") + field + " "), std::string(field));
  CHECK(contains(human.out, key));

  const ToolRun missing = run_tool({"--dir", dir.path(), "--json", "show", std::string(32, '0')});
  CHECK(missing.code == 1);
  CHECK(contains(json_of(missing)["error"].get<std::string>(), "no cache entry"));

  const ToolRun absent_spec = run_tool(
      {"--dir", dir.path(), "show", "cache_write_h256_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm89"});
  CHECK(absent_spec.code == 1);
  CHECK(contains(absent_spec.err, "no cache entry"));

  const ToolRun garbage = run_tool({"--dir", dir.path(), "show", "not-a-key"});
  CHECK(garbage.code == 1);
  CHECK(contains(garbage.err, "not-a-key"));

  // A second file sharing the first 12 digits makes that prefix ambiguous (and is itself a bad
  // entry: its contents belong to another key).
  const std::string twin =
      key.substr(0, 12) + (key[12] == '0' ? std::string(20, '1') : std::string(20, '0'));
  fs::copy_file(dir.path() + "/" + key + ".gakc", dir.path() + "/" + twin + ".gakc");
  const ToolRun amb = run_tool({"--dir", dir.path(), "--json", "show", key.substr(0, 12)});
  CHECK(amb.code == 1);
  const std::string amb_error = json_of(amb)["error"];
  CHECK(contains(amb_error, "ambiguous"));
  CHECK(contains(amb_error, key));
  CHECK(contains(amb_error, twin));
  const ToolRun longer = run_tool({"--dir", dir.path(), "--json", "show", key.substr(0, 13)});
  CHECK(longer.code == 0);
}

TEST_CASE("cache tool: show prints the dumped source") {
  TempDir dir;
  const std::string spec = "cache_write_h96_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm86";
  const ToolRun c = run_tool({"--dir", dir.path(), "compile", "--dump-source", "--spec", spec});
  REQUIRE_MESSAGE(c.code == 0, describe(c));
  const ToolRun r = run_tool({"--dir", dir.path(), "--json", "show", spec});
  REQUIRE_MESSAGE(r.code == 0, describe(r));
  const Json j = json_of(r);
  REQUIRE(j["source"].is_string());
  const std::string source = j["source"];
  CHECK(contains(source, spec));
  CHECK(contains(source, "graphattn_cache_write"));
  CHECK(j["source_path"] == dir.path() + "/" + j["key"].get<std::string>() + ".cu");

  const ToolRun human = run_tool({"--dir", dir.path(), "show", j["key"].get<std::string>()});
  REQUIRE_MESSAGE(human.code == 0, describe(human));
  CHECK(contains(human.out, "-----"));
  CHECK(contains(human.out, "graphattn_cache_write"));

  const Json st = json_of(run_tool({"--dir", dir.path(), "--json", "stats"}));
  CHECK(st["sources"]["count"] == 1);
}

TEST_CASE("cache tool: verify finds a corrupted entry and --fix removes it") {
  TempDir dir;
  copy_seed(dir.path());
  const ToolRun clean = run_tool({"--dir", dir.path(), "--json", "verify"});
  REQUIRE_MESSAGE(clean.code == 0, describe(clean));
  const Json cj = json_of(clean);
  CHECK(cj["checked"] == 4);
  CHECK(cj["ok"] == 4);
  CHECK(cj["bad"].empty());
  CHECK(cj["not_current"].empty());

  // Flip one byte of the payload (the cubin is the tail of the file).
  const std::string key = keys_by_spec(dir.path()).at(kSeedSpecs[0]);
  const std::string path = dir.path() + "/" + key + ".gakc";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(path));
    f.seekg(size - 17);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(size - 17);
    f.write(&c, 1);
    REQUIRE(f.good());
  }
  // A temp file left by a writer that died an hour ago, and one being written now.
  const std::string stale = "." + key + ".tmp.99999.0";
  const std::string live = "." + key + ".tmp.99999.1";
  write_file(dir.path() + "/" + stale, "partial");
  write_file(dir.path() + "/" + live, "partial");
  set_mtime(dir.path() + "/" + stale, std::time(nullptr) - 3600);

  const ToolRun bad = run_tool({"--dir", dir.path(), "--json", "verify"});
  CHECK(bad.code == 1);
  const Json bj = json_of(bad);
  CHECK(bj["checked"] == 4);
  CHECK(bj["ok"] == 3);
  CHECK(bj["bad_count"] == 1);
  REQUIRE(bj["bad"].size() == 1);
  CHECK(bj["bad"][0]["key"] == key);
  CHECK(bj["bad"][0]["status"] == "checksum mismatch");
  CHECK(contains(bj["bad"][0]["reason"].get<std::string>(), "payload"));
  CHECK(bj["stale_temp_files"] == Json::array({stale}));
  CHECK(fs::exists(path));  // verify alone changes nothing

  const ToolRun human = run_tool({"--dir", dir.path(), "verify"});
  CHECK(human.code == 1);
  CHECK(contains(human.out, key.substr(0, 12)));
  CHECK(contains(human.out, "checksum mismatch"));
  CHECK(contains(human.out, "3 ok, 1 bad"));

  // list shows the bad entry with its status and still succeeds.
  const ToolRun ls = run_tool({"--dir", dir.path(), "--json", "list"});
  CHECK(ls.code == 0);
  const Json lj = json_of(ls);
  CHECK(lj["count"] == 4);
  CHECK(lj["bad_count"] == 1);
  for (const auto& e : lj["entries"])
    if (e["key"] == key) {
      CHECK(e["ok"] == false);
      CHECK(e["status"] == "checksum mismatch");
      CHECK(e["spec"].is_null());
    }
  const ToolRun lh = run_tool({"--dir", dir.path(), "list"});
  CHECK(contains(lh.out, "checksum mismatch"));

  const ToolRun fix = run_tool({"--dir", dir.path(), "--json", "verify", "--fix"});
  CHECK(fix.code == 1);  // something was bad
  const Json fj = json_of(fix);
  CHECK(fj["removed_entries"] == 1);
  CHECK(fj["removed_temp_files"] == 1);
  CHECK(!fs::exists(path));
  CHECK(!fs::exists(dir.path() + "/" + key + ".lock"));
  CHECK(!fs::exists(dir.path() + "/" + stale));
  CHECK(fs::exists(dir.path() + "/" + live));

  const ToolRun after = run_tool({"--dir", dir.path(), "--json", "verify"});
  CHECK(after.code == 0);
  const Json aj = json_of(after);
  CHECK(aj["checked"] == 3);
  CHECK(aj["bad_count"] == 0);
}

TEST_CASE("cache tool: an intact entry of a retired kernel kind is stale, not bad") {
  // decode_reduce entries from earlier versions: checksums fine, kind no longer built.
  TempDir dir;
  copy_seed(dir.path());
  const std::string key = keys_by_spec(dir.path()).at(kSeedSpecs[0]);
  const std::string path = dir.path() + "/" + key + ".gakc";
  std::vector<char> image;
  {
    std::ifstream in(path, std::ios::binary);
    image.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  graphattn::detail::EntryHeader h;
  std::vector<char> payload;
  std::string reason;
  REQUIRE(graphattn::detail::decode_entry(image, nullptr, &h, &payload, &reason) ==
          graphattn::detail::EntryStatus::kOk);
  h.spec = "decode_reduce_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm80";
  const std::vector<char> retired = graphattn::detail::encode_entry(h, payload);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(retired.data(), static_cast<std::streamsize>(retired.size()));
    REQUIRE(out.good());
  }
  const ToolRun v = run_tool({"--dir", dir.path(), "--json", "verify"});
  CHECK_MESSAGE(v.code == 0, describe(v));
  const Json vj = json_of(v);
  CHECK(vj["ok"] == 4);
  CHECK(vj["bad_count"] == 0);
  CHECK(vj["not_current"] == Json::array({key}));
  const Json lj = json_of(run_tool({"--dir", dir.path(), "--json", "list"}));
  for (const auto& e : lj["entries"])
    if (e["key"] == key) {
      CHECK(e["ok"] == true);
      CHECK(e["kind"] == "retired");
      CHECK(e["status"] == "retired kind");
    }
  const ToolRun human = run_tool({"--dir", dir.path(), "verify"});
  CHECK(human.code == 0);
  CHECK(contains(human.out, "of a retired kind"));
}

TEST_CASE("cache tool: prune by age and by size keeps the directory under the cap") {
  TempDir dir;
  copy_seed(dir.path());
  const auto keys = keys_by_spec(dir.path());
  const time_t now = std::time(nullptr);
  // Last used: seed spec 0 five days ago, 1 three days ago, 2 two hours ago, 3 one hour ago.
  const time_t ages[] = {5 * 86400, 3 * 86400, 7200, 3600};
  std::vector<std::string> key_of(kSeedSpecs.size());
  for (size_t i = 0; i < kSeedSpecs.size(); ++i) {
    key_of[i] = keys.at(kSeedSpecs[i]);
    set_mtime(dir.path() + "/" + key_of[i] + ".gakc", now - ages[i]);
  }

  const ToolRun old = run_tool({"--dir", dir.path(), "--json", "prune", "--older-than", "4"});
  REQUIRE_MESSAGE(old.code == 0, describe(old));
  const Json oj = json_of(old);
  REQUIRE(oj["removed"].size() == 1);
  CHECK(oj["removed"][0]["key"] == key_of[0]);
  CHECK(contains(oj["removed"][0]["why"].get<std::string>(), "unused"));
  CHECK(oj["remaining_count"] == 3);
  CHECK(!fs::exists(dir.path() + "/" + key_of[0] + ".gakc"));

  // One byte under the total: the least recently used entry goes, nothing else.
  const uint64_t cap = entry_bytes(dir.path()) - 1;
  const ToolRun sized =
      run_tool({"--dir", dir.path(), "--json", "prune", "--max-bytes", std::to_string(cap)});
  REQUIRE_MESSAGE(sized.code == 0, describe(sized));
  const Json sj = json_of(sized);
  REQUIRE(sj["removed"].size() == 1);
  CHECK(sj["removed"][0]["key"] == key_of[1]);
  CHECK(sj["remaining_count"] == 2);
  CHECK(sj["remaining_bytes"].get<uint64_t>() <= cap);
  CHECK(entry_bytes(dir.path()) <= cap);
  CHECK(sj["max_bytes"] == cap);

  const ToolRun tiny = run_tool({"--dir", dir.path(), "prune", "--max-bytes", "1K"});
  REQUIRE_MESSAGE(tiny.code == 0, describe(tiny));
  CHECK(contains(tiny.out, "removed 2 entries"));
  CHECK(entry_bytes(dir.path()) <= 1024);

  const ToolRun none = run_tool({"--dir", dir.path(), "prune"});
  CHECK(none.code == 2);
  CHECK(contains(none.err, "--max-bytes"));
  const ToolRun bad_size = run_tool({"--dir", dir.path(), "prune", "--max-bytes", "12Q"});
  CHECK(bad_size.code == 2);
  CHECK(contains(bad_size.err, "12Q"));
}

TEST_CASE("cache tool: clear removes entries, locks, sources and temp files, nothing else") {
  TempDir dir;
  copy_seed(dir.path());
  const std::string orphan(32, 'a');
  write_file(dir.path() + "/notes.txt", "operator notes");
  write_file(dir.path() + "/" + orphan + ".lock", "");
  write_file(dir.path() + "/" + orphan + ".cu", "// source");
  write_file(dir.path() + "/." + orphan + ".tmp.1.0", "partial");
  const uint64_t bytes = entry_bytes(dir.path());

  const ToolRun r = run_tool({"--dir", dir.path(), "--json", "clear"});
  REQUIRE_MESSAGE(r.code == 0, describe(r));
  const Json j = json_of(r);
  CHECK(j["removed_entries"] == 4);
  CHECK(j["removed_bytes"] == bytes);
  CHECK(j["kept_files"] == Json::array({"notes.txt"}));
  // The marker stays: the directory is still the cache's.
  CHECK(file_names(dir.path()) ==
        std::set<std::string>{graphattn::detail::kCacheMarkerName, "notes.txt"});

  const ToolRun ls = run_tool({"--dir", dir.path(), "--json", "list"});
  CHECK(ls.code == 0);
  CHECK(json_of(ls)["count"] == 0);
  const ToolRun again = run_tool({"--dir", dir.path(), "clear"});
  CHECK(again.code == 0);
  CHECK(contains(again.out, "removed 0 entries"));
}

TEST_CASE("cache tool: a missing directory is an empty cache") {
  TempDir tmp;
  const std::string missing = tmp.path() + "/not-there";
  for (const char* cmd : {"list", "stats", "verify"}) {
    const ToolRun r = run_tool({"--dir", missing, "--json", cmd});
    CHECK_MESSAGE(r.code == 0, describe(r));
    const Json j = json_of(r);
    CHECK(j["exists"] == false);
    CHECK(j["dir"] == missing);
  }
  const ToolRun human = run_tool({"--dir", missing, "list"});
  CHECK(human.code == 0);
  CHECK(contains(human.out, "no entries"));
  CHECK(!fs::exists(missing));

  // Without --dir the tool uses the library's default, which the environment sets.
  const ToolRun env = run_tool({"--json", "stats"}, {"GRAPHATTN_CACHE_DIR=" + missing});
  CHECK(env.code == 0);
  CHECK(json_of(env)["dir"] == missing);

  // A path that is a file is no cache: reading it and compiling into it are usage errors
  // naming it.
  const std::string file = tmp.path() + "/a-file";
  write_file(file, "x");
  const ToolRun ls = run_tool({"--dir", file, "--json", "list"});
  CHECK(ls.code == 2);
  CHECK(contains(json_of(ls)["error"].get<std::string>(), file + "' is a regular file"));
  const ToolRun c = run_tool({"--dir", file, "compile", "--spec",
                              "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"});
  CHECK(c.code == 2);
  CHECK(contains(c.err, file));
}

TEST_CASE("cache tool: wrong usage prints the usage and exits 2") {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate"},
      {"show"},
      {"compile"},
      {"list", "--no-such-flag"},
      {"prune", "--older-than", "-1"},
      {"prune", "--older-than", "soon"},
      {"compile", "--spec", "cache_write_h128", "--threads", "two"},
  };
  for (const auto& args : cases) {
    std::string line;
    for (const auto& a : args) line += " " + a;
    const ToolRun r = run_tool(args);
    CHECK_MESSAGE(r.code == 2, "graphattn-cache" << line << "\n" << describe(r));
    CHECK_MESSAGE(contains(r.err, "Usage"), "graphattn-cache" << line << "\n" << describe(r));
  }
  // A spec that does not parse is named, with the reason.
  const ToolRun spec =
      run_tool({"compile", "--spec", "cache_write_h100_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                "--spec", "decode_bogus"});
  CHECK(spec.code == 2);
  CHECK(contains(spec.err, "cache_write_h100"));
  CHECK(contains(spec.err, "head size 100"));
  CHECK(contains(spec.err, "decode_bogus"));
  // With --json the failure is still one JSON document on stdout.
  const ToolRun js = run_tool({"--json", "frobnicate"});
  CHECK(js.code == 2);
  CHECK(json_of(js)["exit_code"] == 2);
  CHECK(json_of(js)["error"].is_string());

  const ToolRun help = run_tool({"--help"});
  CHECK(help.code == 0);
  for (const char* cmd : {"list", "show", "verify", "prune", "clear", "stats", "compile"})
    CHECK(contains(help.out, cmd));
}

TEST_CASE(
    "cache tool: verify reports modes and owners, --fix repairs what it owns and cleans junk") {
  TempDir dir;
  copy_seed(dir.path());
  const auto keys = keys_by_spec(dir.path());
  const std::string k0 = keys.at(kSeedSpecs[0]);
  // A group-writable directory, an entry others can write, an orphan lock file, and junk named
  // like entries: a FIFO, an empty directory and a non-empty one.
  REQUIRE(::chmod(dir.path().c_str(), 0775) == 0);
  REQUIRE(::chmod((dir.path() + "/" + k0 + ".gakc").c_str(), 0666) == 0);
  write_file(dir.path() + "/" + std::string(32, 'a') + ".lock", "");
  const std::string fifo = std::string(32, 'b') + ".gakc";
  const std::string empty_dir = std::string(32, 'c') + ".gakc";
  const std::string full_dir = std::string(32, 'd') + ".gakc";
  REQUIRE(::mkfifo((dir.path() + "/" + fifo).c_str(), 0600) == 0);
  fs::create_directory(dir.path() + "/" + empty_dir);
  fs::create_directory(dir.path() + "/" + full_dir);
  write_file(dir.path() + "/" + full_dir + "/x", "x");
  // The tool is run through `timeout`: a FIFO that blocked a reader would fail the test, not
  // hang it.
  auto bounded = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"30", GRAPHATTN_CACHE_TOOL});
    return run_program("timeout", args);
  };

  for (const char* cmd : {"list", "stats"}) {
    const ToolRun r = bounded({"--dir", dir.path(), "--json", cmd});
    CHECK_MESSAGE(r.code == 0, describe(r));
  }
  const ToolRun v = bounded({"--dir", dir.path(), "--json", "verify"});
  CHECK(v.code == 1);
  const Json vj = json_of(v);
  CHECK(contains(vj["directory_problem"].get<std::string>(), "writable by its group"));
  CHECK(contains(vj["directory_problem"].get<std::string>(), "mode 0775"));
  std::map<std::string, std::string> status;
  for (const auto& e : vj["bad"])
    status[e["key"].get<std::string>()] =
        e["status"].get<std::string>() + ": " + e["reason"].get<std::string>();
  CHECK(contains(status[k0], "untrusted: is writable by group or others"));
  CHECK(contains(status[std::string(32, 'b')], "is a FIFO"));
  CHECK(contains(status[std::string(32, 'c')], "is a directory"));
  CHECK(contains(status[std::string(32, 'd')], "is a directory"));
  CHECK(vj["bad_count"] == 4);

  const ToolRun f = bounded({"--dir", dir.path(), "--json", "verify", "--fix"});
  CHECK(f.code == 1);
  const Json fj = json_of(f);
  CHECK(fj["repaired_modes"].size() == 2);  // the directory and the entry
  CHECK(fj["directory_problem"].is_null());
  CHECK(fj["bad_count"] == 3);             // the entry passes once its mode is repaired
  CHECK(fj["removed_entries"] == 2);       // the FIFO and the empty directory
  REQUIRE(fj["not_removed"].size() == 1);  // the directory with a file in it is reported, not
  CHECK(contains(fj["not_removed"][0].get<std::string>(), full_dir));  // counted as removed
  CHECK(fj["removed_lock_files"] == Json::array({std::string(32, 'a') + ".lock"}));
  CHECK(!fs::exists(dir.path() + "/" + fifo));
  CHECK(!fs::exists(dir.path() + "/" + empty_dir));
  CHECK(fs::exists(dir.path() + "/" + full_dir));
  CHECK((fs::status(dir.path()).permissions() & fs::perms::group_write) == fs::perms::none);
  for (const auto& [spec, key] : keys) CHECK(fs::exists(dir.path() + "/" + key + ".gakc"));

  fs::remove_all(dir.path() + "/" + full_dir);
  const ToolRun after = bounded({"--dir", dir.path(), "--json", "verify"});
  CHECK_MESSAGE(after.code == 0, describe(after));
  CHECK(json_of(after)["checked"] == kSeedSpecs.size());

  // clear removes the junk too, without hanging.
  REQUIRE(::mkfifo((dir.path() + "/" + fifo).c_str(), 0600) == 0);
  const ToolRun c = bounded({"--dir", dir.path(), "--json", "clear"});
  CHECK_MESSAGE(c.code == 0, describe(c));
  CHECK(!fs::exists(dir.path() + "/" + fifo));
  CHECK(entry_files(dir.path()).empty());
}

TEST_CASE("cache tool: an entry of another user is reported and removed by --fix") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: making a file owned by another user needs root");
    return;
  }
  TempDir dir;
  copy_seed(dir.path());
  const std::string key = keys_by_spec(dir.path()).at(kSeedSpecs[2]);
  const std::string path = dir.path() + "/" + key + ".gakc";
  REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
  const ToolRun v = run_tool({"--dir", dir.path(), "--json", "verify"});
  CHECK(v.code == 1);
  const Json vj = json_of(v);
  REQUIRE(vj["bad"].size() == 1);
  CHECK(vj["bad"][0]["status"] == "untrusted");
  CHECK(contains(vj["bad"][0]["reason"].get<std::string>(), "belongs to another user"));
  const ToolRun f = run_tool({"--dir", dir.path(), "--json", "verify", "--fix"});
  CHECK(json_of(f)["removed_entries"] == 1);
  CHECK(!fs::exists(path));
}

TEST_CASE(
    "cache tool: GRAPHATTN_NVRTC_EXTRA_OPTIONS compiles under its own key, never the default's") {
  TempDir dir;
  const std::string spec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm80";
  const std::vector<std::string> args = {"--json", "--dir", dir.path(), "compile", "--spec", spec};
  const std::string mid = "GRAPHATTN_NVRTC_EXTRA_OPTIONS=--Ofast-compile=mid";
  const ToolRun with = run_tool(args, {mid});
  REQUIRE_MESSAGE(with.code == 0, describe(with));
  CHECK(json_of(with)["results"][0]["result"] == "compiled");
  // Without the options the default kernel is compiled, not the other one served.
  const ToolRun plain = run_tool(args);
  REQUIRE_MESSAGE(plain.code == 0, describe(plain));
  CHECK(json_of(plain)["results"][0]["result"] == "compiled");
  CHECK(entry_files(dir.path()).size() == 2);
  CHECK(json_of(run_tool(args, {mid}))["results"][0]["result"] == "hit");
  CHECK(json_of(run_tool(args))["results"][0]["result"] == "hit");
  // Another option set is another key again.
  const ToolRun o1 = run_tool(args, {"GRAPHATTN_NVRTC_EXTRA_OPTIONS=--ptxas-options=-O1"});
  REQUIRE_MESSAGE(o1.code == 0, describe(o1));
  CHECK(json_of(o1)["results"][0]["result"] == "compiled");
  CHECK(entry_files(dir.path()).size() == 3);
  // An option outside the list is an error naming it; nothing is compiled.
  const ToolRun bad =
      run_tool({"--dir", dir.path(), "compile", "--spec", spec},
               {"GRAPHATTN_NVRTC_EXTRA_OPTIONS=--Ofast-compile=mid --gpu-architecture=sm_70"});
  CHECK(bad.code != 0);
  CHECK_MESSAGE(bad.err.find("'--gpu-architecture=sm_70' is not supported") != std::string::npos,
                describe(bad));
  CHECK(entry_files(dir.path()).size() == 3);
}
