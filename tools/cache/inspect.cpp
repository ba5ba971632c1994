// SPDX-License-Identifier: Apache-2.0
// graphattn-cache list, show and stats: they read the directory and change nothing.
#include <algorithm>
#include <cctype>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/spec.hpp"
#include "tools/cache/cache_tool.hpp"

namespace graphattn::tools::cache_tool {
namespace {

const EntryInfo& resolve(const std::vector<EntryInfo>& entries, const std::string& arg,
                         const std::string& dir) {
  if (arg.empty()) throw UsageError("show needs a key prefix or a spec string, not an empty one");
  std::string lower = arg;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool hex = lower.size() <= 32 && std::all_of(lower.begin(), lower.end(), [](char c) {
                     return std::isxdigit(static_cast<unsigned char>(c)) != 0;
                   });
  std::vector<const EntryInfo*> hits;
  if (hex) {
    for (const auto& e : entries)
      if (e.key_hex.compare(0, lower.size(), lower) == 0) hits.push_back(&e);
  } else {
    for (const auto& e : entries)
      if (e.ok && e.spec == arg) hits.push_back(&e);
  }
  if (hits.size() == 1) return *hits[0];
  const std::string what = hex ? "key prefix '" + arg + "'" : "spec " + printable(arg);
  if (hits.empty()) {
    if (!hex) {
      try {
        graphattn::AttentionSpec::parse(arg);
      } catch (const std::exception& ex) {
        throw graphattn::Error("'" + printable(arg) +
                               "' is neither a key prefix (hex digits) nor a spec: " + ex.what());
      }
    }
    throw graphattn::Error("no cache entry with " + what + " in " + dir + " (" +
                           plural(entries.size(), "entry", "entries") + " there)");
  }
  std::string list;
  for (const auto* e : hits) list += "\n  " + e->key_hex + "  " + (e->ok ? e->spec : e->status);
  throw graphattn::Error(what + " is ambiguous: it matches " + std::to_string(hits.size()) +
                         " entries; give " + (hex ? "more digits" : "a key prefix") + ":" + list);
}

struct Bucket {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

Json buckets_json(const std::map<std::string, Bucket>& m) {
  Json j = Json::object();
  for (const auto& [name, b] : m) j[name] = {{"count", b.count}, {"bytes", b.bytes}};
  return j;
}

void print_buckets(const char* title, const std::map<std::string, Bucket>& m) {
  Table t({title, "ENTRIES", "SIZE"}, "lrr");
  for (const auto& [name, b] : m) t.add({name, std::to_string(b.count), human_bytes(b.bytes)});
  std::cout << "\n";
  t.print(std::cout);
}

}  // namespace

int cmd_list(const Options& o) {
  const CacheDir dir(o.dir, false);
  const std::vector<EntryInfo> entries = dir.entries();
  size_t bad = 0;
  for (const auto& e : entries) bad += check_entry(e).ok ? 0 : 1;
  if (o.json) {
    Json list = Json::array();
    for (const auto& e : entries) list.push_back(entry_json(e));
    print_json({{"dir", dir.path()},
                {"exists", dir.exists()},
                {"entries", list},
                {"count", entries.size()},
                {"bad_count", bad},
                {"total_bytes", total_bytes(entries)}});
    return kExitOk;
  }
  if (entries.empty()) {
    std::cout << "no entries in " << dir.path()
              << (dir.exists() ? "" : " (the directory does not exist)") << "\n";
    return kExitOk;
  }
  Table t({"KEY", "SPEC", "ARCH", "SIZE", "COMPILED AT", "LAST USED", "COMPILE MS", "STATUS"},
          "lllrllrl");
  for (const auto& e : entries) {
    const Check c = check_entry(e);
    const bool readable = e.ok;
    t.add({printable(short_key(e.key_hex)), readable ? printable(e.spec) : "-",
           readable ? "sm_" + std::to_string(e.arch) : "-", human_bytes(e.file_bytes),
           readable ? local_time(e.compiled_at_ms) : "-", local_time(e.last_used_ms),
           readable ? fixed(static_cast<double>(e.compile_us) / 1000.0, 1) : "-",
           c.ok ? c.status : c.status + ": " + c.reason});
  }
  t.print(std::cout);
  std::cout << "total: " << plural(entries.size(), "entry", "entries") << ", "
            << human_bytes(total_bytes(entries));
  if (bad) std::cout << ", " << bad << " bad";
  std::cout << " in " << dir.path() << "\n";
  return kExitOk;
}

int cmd_show(const Options& o) {
  const CacheDir dir(o.dir, false);
  const std::vector<EntryInfo> entries = dir.entries();
  const EntryInfo& e = resolve(entries, o.target, dir.path());
  const Check c = check_entry(e);
  const Json current = is_current(e);
  const std::string source = e.source_path.empty() ? "" : dir.directory()->read_source(e);
  if (o.json) {
    Json j = entry_json(e);
    j["dir"] = dir.path();
    j["current"] = current;
    j["source"] = e.source_path.empty() ? Json(nullptr) : Json(source);
    print_json(j);
    return kExitOk;
  }
  const bool readable = e.ok;
  std::vector<std::pair<std::string, std::string>> rows = {
      {"key", e.key_hex},
      {"path", e.path},
      {"status", c.ok ? c.status : c.status + ": " + c.reason},
      {"file size", human_bytes(e.file_bytes) + " (" + std::to_string(e.file_bytes) + " bytes)"},
      {"last used", local_time(e.last_used_ms)}};
  if (readable) {
    rows.insert(
        rows.end(),
        {{"spec", printable(e.spec, 4096)},
         {"kind", kind_of(e)},
         {"arch", "sm_" + std::to_string(e.arch)},
         {"format version", std::to_string(e.format_version)},
         {"nvrtc version", std::to_string(e.nvrtc_major) + "." + std::to_string(e.nvrtc_minor)},
         {"compiled at", local_time(e.compiled_at_ms)},
         {"compile ms", fixed(static_cast<double>(e.compile_us) / 1000.0, 3)},
         {"payload bytes", std::to_string(e.payload_bytes)},
         {"payload xxh3", hex64(e.payload_xxh3)},
         {"current", current.is_null() ? "unknown (this build has no template for its kind)"
                     : current.get<bool>()
                         ? "yes (this build looks it up under this key)"
                         : "no (another template or NVRTC version; it is never hit)"}});
  }
  rows.push_back(
      {"source", e.source_path.empty()
                     ? "not dumped (compile with --dump-source or GRAPHATTN_DUMP_SOURCE=1)"
                     : e.source_path});
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.first.size());
  for (const auto& r : rows)
    std::cout << r.first << std::string(width - r.first.size() + 2, ' ') << r.second << "\n";
  if (!e.source_path.empty()) {
    std::cout << "\n----- " << e.source_path << " -----\n" << source;
    if (!source.empty() && source.back() != '\n') std::cout << "\n";
  }
  return kExitOk;
}

int cmd_stats(const Options& o) {
  const CacheDir dir(o.dir, false);
  const std::vector<EntryInfo> entries = dir.entries();
  std::map<std::string, Bucket> by_kind, by_arch;
  Bucket bad, sources;
  double compile_ms = 0;
  int64_t oldest = 0, newest = 0;
  for (const auto& e : entries) {
    if (!check_entry(e).ok) {
      ++bad.count;
      bad.bytes += e.file_bytes;
    } else {
      Bucket& k = by_kind[kind_of(e)];
      ++k.count;
      k.bytes += e.file_bytes;
      Bucket& a = by_arch["sm_" + std::to_string(e.arch)];
      ++a.count;
      a.bytes += e.file_bytes;
      compile_ms += static_cast<double>(e.compile_us) / 1000.0;
    }
    if (!e.source_path.empty()) {
      ++sources.count;
      sources.bytes += e.source_bytes;
    }
    if (oldest == 0 || e.last_used_ms < oldest) oldest = e.last_used_ms;
    newest = std::max(newest, e.last_used_ms);
  }
  const uint64_t bytes = total_bytes(entries);
  if (o.json) {
    print_json({{"dir", dir.path()},
                {"exists", dir.exists()},
                {"count", entries.size()},
                {"total_bytes", bytes},
                {"ok_count", entries.size() - bad.count},
                {"bad_count", bad.count},
                {"bad_bytes", bad.bytes},
                {"by_kind", buckets_json(by_kind)},
                {"by_arch", buckets_json(by_arch)},
                {"sources", {{"count", sources.count}, {"bytes", sources.bytes}}},
                {"compile_ms_total", compile_ms},
                {"oldest_last_used", iso_utc(oldest)},
                {"newest_last_used", iso_utc(newest)},
                {"remote", o.skip_remote ? Json(nullptr) : remote_stats(o)}});
    return kExitOk;
  }
  std::vector<std::pair<std::string, std::string>> rows = {
      {"directory", dir.path() + (dir.exists() ? "" : " (does not exist)")},
      {"entries", std::to_string(entries.size()) +
                      (bad.count ? " (" + std::to_string(bad.count) + " bad)" : std::string())},
      {"size", human_bytes(bytes)},
      {"dumped sources", std::to_string(sources.count) + " (" + human_bytes(sources.bytes) + ")"},
      {"compile time", fixed(compile_ms, 1) + " ms in total"},
      {"last used", local_time(oldest) + " .. " + local_time(newest)}};
  for (const auto& r : rows)
    std::cout << r.first << std::string(16 - r.first.size(), ' ') << r.second << "\n";
  if (!o.skip_remote) print_remote_stats(remote_stats(o));
  if (!by_kind.empty()) print_buckets("KIND", by_kind);
  if (!by_arch.empty()) print_buckets("ARCH", by_arch);
  return kExitOk;
}

}  // namespace graphattn::tools::cache_tool
