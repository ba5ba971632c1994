// SPDX-License-Identifier: Apache-2.0
// graphattn-cache verify, prune and clear: they check the directory and remove what is bad, old,
// over the size cap, or everything.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "tools/cache/cache_tool.hpp"

namespace graphattn::tools::cache_tool {
namespace {

using graphattn::CacheFile;
using graphattn::CacheFileKind;
using graphattn::CacheRemoval;

// A temp file this old cannot belong to a write in progress (writes take milliseconds): its
// writer died. verify --fix removes only these; clear removes every temp file.
constexpr std::chrono::seconds kStaleTempAge{600};

// --max-bytes through the library's one size parser (GRAPHATTN_CACHE_MAX_BYTES uses it too).
uint64_t parse_size(const std::string& text) {
  try {
    return graphattn::parse_byte_size(text, "--max-bytes");
  } catch (const graphattn::Error& e) {
    throw UsageError(e.what());
  }
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int cmd_verify(const Options& o) {
  CacheDir dir(o.dir, o.fix);
  // --fix first takes away the write permissions that the trust policy forbids (on what this
  // user owns), so that the check below judges the repaired modes.
  if (o.fix && dir.exists()) {
    // What --fix could remove: bad entries, temp and lock files (modes are repaired too).
    std::vector<std::string> doomed;
    for (const auto& e : dir.entries())
      if (!check_entry(e).ok) doomed.push_back(e.name);
    for (const CacheFile& f : dir.files())
      if (f.kind == CacheFileKind::kTemp || f.kind == CacheFileKind::kLock)
        doomed.push_back(f.name);
    dir.require_cache(o, "verify --fix", doomed);
  }
  std::vector<std::string> repaired_modes;
  if (o.fix && dir.exists()) repaired_modes = dir.directory()->repair_modes();
  const std::string dir_problem = dir.trust_problem();
  const std::vector<EntryInfo> entries = dir.entries();
  std::vector<const EntryInfo*> bad;
  std::vector<std::string> not_current;
  for (const auto& e : entries) {
    if (!check_entry(e).ok) {
      bad.push_back(&e);
    } else {
      const Json cur = is_current(e);
      if (cur.is_boolean() && !cur.get<bool>()) not_current.push_back(e.key_hex);
    }
  }
  std::vector<std::string> stale_temps;
  const int64_t cutoff = now_ms() - kStaleTempAge.count() * 1000;
  for (const CacheFile& f : dir.files())
    if (f.kind == CacheFileKind::kTemp && f.modified_ms >= 0 && f.modified_ms <= cutoff)
      stale_temps.push_back(f.name);
  uint64_t removed_temps = 0;
  size_t removed_entries = 0;
  std::vector<std::string> not_removed;  // "name: why"
  std::vector<std::string> removed_locks;
  if (o.fix && dir.exists()) {
    for (const auto* e : bad) {
      const CacheRemoval r = dir.directory()->remove_entry_file(e->name);
      if (r.removed) ++removed_entries;
      if (!r.error.empty()) not_removed.push_back(r.error);
    }
    removed_temps = dir.directory()->remove_stale_temps(kStaleTempAge);
    removed_locks = dir.directory()->remove_orphan_locks();
  }
  const size_t ok_count = entries.size() - bad.size();
  if (o.json) {
    Json bad_list = Json::array();
    for (const auto* e : bad) bad_list.push_back(entry_json(*e));
    print_json({{"dir", dir.path()},
                {"exists", dir.exists()},
                {"directory_problem", dir_problem.empty() ? Json(nullptr) : Json(dir_problem)},
                {"checked", entries.size()},
                {"ok", ok_count},
                {"bad_count", bad.size()},
                {"bad", bad_list},
                {"not_current", not_current},
                {"stale_temp_files", stale_temps},
                {"fixed", o.fix},
                {"repaired_modes", repaired_modes},
                {"removed_entries", removed_entries},
                {"not_removed", not_removed},
                {"removed_lock_files", removed_locks},
                {"removed_temp_files", removed_temps}});
  } else {
    for (const auto& m : repaired_modes) std::cout << "fixed mode of " << m << "\n";
    if (!dir_problem.empty()) std::cout << "directory: " << dir_problem << "\n";
    if (!bad.empty()) {
      Table t({"BAD", "SPEC", "SIZE", "WHY"}, "llrl");
      for (const auto* e : bad) {
        const Check c = check_entry(*e);
        t.add({printable(short_key(e->key_hex)), e->ok ? printable(e->spec) : "-",
               human_bytes(e->file_bytes), c.status + ": " + c.reason});
      }
      t.print(std::cout);
    }
    std::cout << "checked " << plural(entries.size(), "entry", "entries") << " in " << dir.path()
              << (dir.exists() ? "" : " (the directory does not exist)") << ": " << ok_count
              << " ok, " << bad.size() << " bad\n";
    if (!not_current.empty())
      std::cout << plural(not_current.size(), "entry was", "entries were")
                << " built from another template or NVRTC version, or of a retired kind, and "
                   "will not be hit again (prune removes them by age or size)\n";
    if (!stale_temps.empty())
      std::cout << plural(stale_temps.size(), "stale temp file", "stale temp files")
                << " left by writers that died\n";
    if (o.fix) {
      std::cout << "fixed: removed " << plural(removed_entries, "bad entry", "bad entries") << ", "
                << plural(removed_locks.size(), "orphan lock file", "orphan lock files") << " and "
                << plural(removed_temps, "stale temp file", "stale temp files") << "\n";
      for (const auto& n : not_removed) std::cout << "could not remove " << n << "\n";
    } else if (!bad.empty() || !stale_temps.empty()) {
      std::cout << "run verify --fix to remove them\n";
    }
  }
  if (!not_removed.empty())
    std::cerr << "graphattn-cache: " << plural(not_removed.size(), "bad entry", "bad entries")
              << " could not be removed\n";
  return bad.empty() && dir_problem.empty() ? kExitOk : kExitFailed;
}

int cmd_prune(const Options& o) {
  const bool by_size = !o.max_bytes_text.empty();
  const bool by_age = o.older_than_days >= 0;
  if (!by_size && !by_age)
    throw UsageError("prune needs --max-bytes N, --older-than DAYS, or both");
  const uint64_t max_bytes = by_size ? parse_size(o.max_bytes_text) : 0;
  const CacheDir dir(o.dir, true);
  const std::vector<EntryInfo> before = dir.entries();
  {
    std::vector<std::string> entry_names;
    for (const auto& e : before) entry_names.push_back(e.name);
    dir.require_cache(o, "prune", entry_names);
  }
  std::map<std::string, std::string> why;  // key -> reason it went
  if (by_age) {
    // Clamped so that an absurd number of days cannot overflow the conversion.
    const double span_ms = std::min(o.older_than_days * 86400000.0, 1e15);
    const int64_t cutoff = now_ms() - static_cast<int64_t>(span_ms);
    for (const auto& e : before) {
      if (e.last_used_ms < cutoff) {
        dir.directory()->remove_entry_file(e.name);
        why[e.key_hex] = "unused for more than " + days_text(o.older_than_days) + " days";
      }
    }
  }
  if (by_size && dir.exists()) dir.directory()->evict(max_bytes);
  const std::vector<EntryInfo> after = dir.entries();
  std::set<std::string> remaining;
  for (const auto& e : after) remaining.insert(e.key_hex);
  std::vector<const EntryInfo*> removed;
  uint64_t removed_bytes = 0;
  for (const auto& e : before) {
    if (remaining.count(e.key_hex)) continue;
    if (!why.count(e.key_hex)) why[e.key_hex] = "over the size cap of " + human_bytes(max_bytes);
    removed.push_back(&e);
    removed_bytes += e.file_bytes;
  }
  if (o.json) {
    Json list = Json::array();
    for (const auto* e : removed) {
      Json j = entry_json(*e);
      j["why"] = why[e->key_hex];
      list.push_back(j);
    }
    print_json({{"dir", dir.path()},
                {"exists", dir.exists()},
                {"max_bytes", by_size ? Json(max_bytes) : Json(nullptr)},
                {"older_than_days", by_age ? Json(o.older_than_days) : Json(nullptr)},
                {"removed", list},
                {"removed_count", removed.size()},
                {"removed_bytes", removed_bytes},
                {"remaining_count", after.size()},
                {"remaining_bytes", total_bytes(after)}});
    return kExitOk;
  }
  if (!removed.empty()) {
    Table t({"REMOVED", "SPEC", "SIZE", "LAST USED", "WHY"}, "llrll");
    for (const auto* e : removed)
      t.add({printable(short_key(e->key_hex)), e->ok ? printable(e->spec) : "-",
             human_bytes(e->file_bytes), local_time(e->last_used_ms), why[e->key_hex]});
    t.print(std::cout);
  }
  std::cout << "removed " << plural(removed.size(), "entry", "entries") << " ("
            << human_bytes(removed_bytes) << "); " << plural(after.size(), "entry", "entries")
            << " (" << human_bytes(total_bytes(after)) << ") remain in " << dir.path() << "\n";
  return kExitOk;
}

int cmd_clear(const Options& o) {
  const CacheDir dir(o.dir, true);
  const std::vector<EntryInfo> entries = dir.entries();
  {
    std::vector<std::string> doomed;
    for (const CacheFile& f : dir.files())
      if (f.kind != CacheFileKind::kOther) doomed.push_back(f.name);
    dir.require_cache(o, "clear", doomed);
  }
  std::vector<std::string> failed;
  for (const auto& e : entries) {
    const CacheRemoval r = dir.directory()->remove_entry_file(e.name);
    if (!r.error.empty()) failed.push_back(r.error);
  }
  uint64_t side_files = 0;
  std::vector<std::string> kept;
  for (const CacheFile& f : dir.files()) {
    // Entries were removed above: one that failed is not reported twice.
    if (f.kind != CacheFileKind::kOther) {
      const CacheRemoval r = dir.directory()->remove_file(f.name);
      if (r.removed) ++side_files;
      if (!r.error.empty() && f.kind != CacheFileKind::kEntry) failed.push_back(r.error);
    } else if (f.name != graphattn::kCacheMarkerName) {
      kept.push_back(printable(f.name));
    }
  }
  if (!failed.empty()) {
    std::string list;
    for (const auto& f : failed) list += "\n  " + f;
    throw graphattn::Error("could not remove " + plural(failed.size(), "file", "files") + " from " +
                           dir.path() + ":" + list);
  }
  if (o.json) {
    print_json({{"dir", dir.path()},
                {"exists", dir.exists()},
                {"removed_entries", entries.size()},
                {"removed_bytes", total_bytes(entries)},
                {"removed_other_files", side_files},
                {"kept_files", kept}});
    return kExitOk;
  }
  std::cout << "removed " << plural(entries.size(), "entry", "entries") << " ("
            << human_bytes(total_bytes(entries)) << ") and "
            << plural(side_files, "lock, source or temp file", "lock, source and temp files")
            << " from " << dir.path();
  if (!kept.empty()) std::cout << "; kept " << plural(kept.size(), "other file", "other files");
  std::cout << "\n";
  return kExitOk;
}

}  // namespace graphattn::tools::cache_tool
