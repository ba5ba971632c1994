// graphattn-cache: the operator's view of a JIT kernel cache directory. It lists, shows, checks,
// prunes and clears the entries that KernelCache writes, and fills the cache ahead of time.
//
//   graphattn-cache [--dir DIR] [--json] list | show KEY-PREFIX|SPEC | verify [--fix]
//                                        | prune --max-bytes N | --older-than DAYS | clear | stats
//                                        | compile --spec SPEC [--spec SPEC ...] [--threads N]
//
// Exit status: 0 success; 1 the command found a problem or could not do its job (a bad entry,
// a failed compile, no such entry); 2 wrong usage. With --json every command, failures
// included, prints exactly one JSON document on stdout; messages for people go to stderr.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "jit_cache/byte_size.hpp"
#include "jit_cache/disk_tier.hpp"
#include "tools/models.hpp"

namespace {

using graphattn::detail::classify_file_name;
using graphattn::detail::DiskTier;
using graphattn::detail::EntryInfo;
using graphattn::detail::EntryStatus;
using graphattn::detail::FileKind;
using graphattn::detail::printable;
using Json = nlohmann::json;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr size_t kShortKeyDigits = 12;
// A temp file this old cannot belong to a write in progress (writes take milliseconds): its
// writer died. verify --fix removes only these; clear removes every temp file.
constexpr std::chrono::seconds kStaleTempAge{600};
constexpr const char* kNoDirectory =
    "no cache directory: give --dir DIR, or set GRAPHATTN_CACHE_DIR, XDG_CACHE_HOME or HOME "
    "(absolute paths)";

// Wrong usage that CLI11 cannot see (a value with the wrong form, a missing choice): exit 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Everything the command line chose.
struct Options {
  std::string dir;
  bool json = false;
  std::string target;               // show
  bool fix = false;                 // verify
  std::string max_bytes_text;       // prune
  double older_than_days = -1;      // prune; negative: not given
  std::vector<std::string> specs;   // compile
  std::vector<std::string> models;  // compile: every kernel of these built-in models
  int arch = 90;                    // compile --model: target arch
  int block_size = 16;              // compile --model
  std::string dtype = "bf16";       // compile --model
  std::string kv_dtype = "auto";    // compile --model
  unsigned threads = 0;             // compile; 0: hardware threads
  bool dump_source = false;         // compile
};

// ---------------------------------------------------------------------------------------------
// Formatting

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Local wall-clock time for people; "-" when unknown.
std::string local_time(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// ISO 8601 in UTC with milliseconds, for machines; null when unknown.
Json iso_utc(int64_t unix_ms) {
  if (unix_ms <= 0) return nullptr;
  const time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(unix_ms % 1000));
  return std::string(out);
}

std::string days_text(double days) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", days);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string short_key(const std::string& key_hex) { return key_hex.substr(0, kShortKeyDigits); }

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// An aligned text table: columns separated by two spaces, numbers right-aligned.
class Table {
 public:
  // align: one letter per column, 'l' or 'r'.
  Table(std::vector<std::string> header, std::string align)
      : header_(std::move(header)), align_(std::move(align)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }

  void print(std::ostream& os) const {
    std::vector<size_t> width(header_.size(), 0);
    auto measure = [&](const std::vector<std::string>& r) {
      for (size_t c = 0; c < r.size() && c < width.size(); ++c)
        width[c] = std::max(width[c], r[c].size());
    };
    measure(header_);
    for (const auto& r : rows_) measure(r);
    auto emit = [&](const std::vector<std::string>& r) {
      std::string line;
      for (size_t c = 0; c < width.size(); ++c) {
        const std::string cell = c < r.size() ? r[c] : "";
        const std::string pad(width[c] - cell.size(), ' ');
        if (c) line += "  ";
        line += align_[c] == 'r' ? pad + cell : cell + pad;
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      os << line << "\n";
    };
    emit(header_);
    for (const auto& r : rows_) emit(r);
  }

 private:
  std::vector<std::string> header_;
  std::string align_;
  std::vector<std::vector<std::string>> rows_;
};

// ---------------------------------------------------------------------------------------------
// Parsing arguments

// --max-bytes through the library's one size parser (GRAPHATTN_CACHE_MAX_BYTES uses it too).
uint64_t parse_size(const std::string& text) {
  try {
    return graphattn::detail::parse_byte_size(text, "--max-bytes");
  } catch (const graphattn::Error& e) {
    throw UsageError(e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// The directory

// The cache directory as the commands see it: opened for inspection whatever its owner and mode
// (verify reports those). A missing directory is an empty cache and is not created by any
// command but compile; a path that is not a directory is wrong usage.
// Whether dir exists (as a directory); wrong usage when it is empty or names something else.
bool require_directory_path(const std::string& dir) {
  if (dir.empty()) throw UsageError(kNoDirectory);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    throw graphattn::Error("cannot read cache directory " + printable(dir, 4096) + ": " +
                           std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode))
    throw UsageError("--dir '" + printable(dir, 4096) + "' is " +
                     graphattn::detail::file_type_name(st.st_mode) + ", not a directory");
  return true;
}

class CacheDir {
 public:
  CacheDir(std::string dir, bool need_write) : dir_(std::move(dir)) {
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
    if (!require_directory_path(dir_)) return;
    tier_ = std::make_unique<DiskTier>(dir_, nullptr, graphattn::detail::shared_cache_requested(),
                                       DiskTier::Access::kInspect);
    if (!tier_->exists())
      throw graphattn::Error("cannot open cache directory " + printable(dir_, 4096) + ": " +
                             std::strerror(errno));
    if (need_write && !tier_->usable())
      throw graphattn::Error("cannot modify cache directory " + printable(dir_, 4096) +
                             ": this user cannot write it");
  }

  const std::string& path() const { return dir_; }
  bool exists() const { return tier_ != nullptr; }
  DiskTier* tier() const { return tier_.get(); }
  std::vector<EntryInfo> entries() const {
    return tier_ ? tier_->list() : std::vector<EntryInfo>{};
  }
  // Names of the files in the directory (not "." and "..").
  std::vector<std::string> file_names() const {
    return tier_ ? tier_->file_names() : std::vector<std::string>{};
  }
  // lstat of a name in the directory: never follows a link.
  bool stat_name(const std::string& name, struct stat* st) const {
    return tier_ && tier_->stat_name(name, st);
  }
  // "" or what is wrong with the directory's owner or mode.
  std::string trust_problem() const { return tier_ ? tier_->trust_problem() : ""; }

 private:
  std::string dir_;
  std::unique_ptr<DiskTier> tier_;
};

int64_t mtime_ms(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

// ---------------------------------------------------------------------------------------------
// Entries

// Kernel kinds that earlier versions cached and this one no longer builds: their entries are
// intact but never hit again, like entries of another template version. decode_reduce was
// folded into the decode kernel.
bool retired_kind(const std::string& spec) { return spec.rfind("decode_reduce_", 0) == 0; }

// An entry's verdict. Beyond the file checks (magic, version, lengths, checksums, key), the stored
// spec string must parse (or name a retired kind) and name the stored arch.
struct Check {
  bool ok = true;
  std::string status;  // "ok", "retired kind", a disk-tier status, "bad spec" or "arch mismatch"
  std::string reason;
};

Check check_entry(const EntryInfo& e) {
  Check c;
  if (e.status != EntryStatus::kOk) {
    c.ok = false;
    c.status = graphattn::detail::to_string(e.status);
    c.reason = e.reason;
    return c;
  }
  c.status = "ok";
  if (retired_kind(e.header.spec)) {
    c.status = "retired kind";
    c.reason = "this version builds no kernel of this kind";
    return c;
  }
  try {
    const graphattn::AttentionSpec spec = graphattn::AttentionSpec::parse(e.header.spec);
    if (static_cast<uint32_t>(spec.arch) != e.header.arch) {
      c.ok = false;
      c.status = "arch mismatch";
      c.reason = "header arch sm_" + std::to_string(e.header.arch) +
                 " differs from the spec's sm_" + std::to_string(spec.arch);
    }
  } catch (const std::exception& ex) {
    c.ok = false;
    c.status = "bad spec";
    c.reason = ex.what();
  }
  return c;
}

std::string kind_of(const EntryInfo& e) {
  if (e.status != EntryStatus::kOk) return "unknown";
  if (retired_kind(e.header.spec)) return "retired";
  try {
    return graphattn::to_string(graphattn::AttentionSpec::parse(e.header.spec).kind);
  } catch (const std::exception&) {
    return "unknown";
  }
}

// Whether this build would look the entry up under the same key: false when it was compiled from
// another template text or by another NVRTC (it will never be hit again); null when this build
// cannot render the spec (no template for its kind).
Json is_current(const EntryInfo& e) {
  if (e.status != EntryStatus::kOk) return nullptr;
  if (retired_kind(e.header.spec)) return false;
  try {
    const graphattn::AttentionSpec spec = graphattn::AttentionSpec::parse(e.header.spec);
    const graphattn::KernelSource src = graphattn::render_kernel(spec);
    return graphattn::kernel_key(src, spec.arch) == e.header.key;
  } catch (const std::exception&) {
    return nullptr;
  }
}

Json entry_json(const EntryInfo& e) {
  const Check c = check_entry(e);
  const bool readable = e.status == EntryStatus::kOk;
  const auto& h = e.header;
  Json j;
  j["key"] = e.key_hex;
  j["short_key"] = short_key(e.key_hex);
  j["path"] = e.path;
  j["ok"] = c.ok;
  j["status"] = c.status;
  j["reason"] = c.reason;
  j["file_bytes"] = e.file_bytes;
  j["last_used_ms"] = e.last_used_ms;
  j["last_used"] = iso_utc(e.last_used_ms);
  j["spec"] = readable ? Json(h.spec) : Json(nullptr);
  j["kind"] = readable ? Json(kind_of(e)) : Json(nullptr);
  j["arch"] = readable ? Json(h.arch) : Json(nullptr);
  j["format_version"] = readable ? Json(h.format_version) : Json(nullptr);
  j["nvrtc_version"] =
      readable ? Json(std::to_string(h.nvrtc_major) + "." + std::to_string(h.nvrtc_minor))
               : Json(nullptr);
  j["compiled_at_ms"] = readable ? Json(h.compiled_at_ms) : Json(nullptr);
  j["compiled_at"] = readable ? iso_utc(h.compiled_at_ms) : Json(nullptr);
  j["compile_ms"] = readable ? Json(static_cast<double>(h.compile_us) / 1000.0) : Json(nullptr);
  j["payload_bytes"] = readable ? Json(h.payload_bytes) : Json(nullptr);
  j["payload_xxh3"] = readable ? Json(hex64(h.payload_hash)) : Json(nullptr);
  j["source_path"] = e.source_path.empty() ? Json(nullptr) : Json(e.source_path);
  return j;
}

uint64_t total_bytes(const std::vector<EntryInfo>& entries) {
  uint64_t n = 0;
  for (const auto& e : entries) n += e.file_bytes;
  return n;
}

// File names and stored spec strings may hold any bytes: invalid UTF-8 is replaced, not thrown.
void print_json(const Json& j) {
  std::cout << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

// ---------------------------------------------------------------------------------------------
// Commands

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
    const bool readable = e.status == EntryStatus::kOk;
    t.add({printable(short_key(e.key_hex)), readable ? printable(e.header.spec) : "-",
           readable ? "sm_" + std::to_string(e.header.arch) : "-", human_bytes(e.file_bytes),
           readable ? local_time(e.header.compiled_at_ms) : "-", local_time(e.last_used_ms),
           readable ? fixed(static_cast<double>(e.header.compile_us) / 1000.0, 1) : "-",
           c.ok ? c.status : c.status + ": " + c.reason});
  }
  t.print(std::cout);
  std::cout << "total: " << plural(entries.size(), "entry", "entries") << ", "
            << human_bytes(total_bytes(entries));
  if (bad) std::cout << ", " << bad << " bad";
  std::cout << " in " << dir.path() << "\n";
  return kExitOk;
}

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
      if (e.status == EntryStatus::kOk && e.header.spec == arg) hits.push_back(&e);
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
  for (const auto* e : hits)
    list +=
        "\n  " + e->key_hex + "  " +
        (e->status == EntryStatus::kOk ? e->header.spec : graphattn::detail::to_string(e->status));
  throw graphattn::Error(what + " is ambiguous: it matches " + std::to_string(hits.size()) +
                         " entries; give " + (hex ? "more digits" : "a key prefix") + ":" + list);
}

// A dumped source, read without following links; sources are tens of KiB.
std::string read_source(const CacheDir& dir, const EntryInfo& e) {
  std::string text;
  if (!dir.tier()->read_text(graphattn::detail::source_file_of(e.name), 16u << 20, &text))
    throw graphattn::Error("cannot read " + e.source_path);
  return text;
}

int cmd_show(const Options& o) {
  const CacheDir dir(o.dir, false);
  const std::vector<EntryInfo> entries = dir.entries();
  const EntryInfo& e = resolve(entries, o.target, dir.path());
  const Check c = check_entry(e);
  const Json current = is_current(e);
  const std::string source = e.source_path.empty() ? "" : read_source(dir, e);
  if (o.json) {
    Json j = entry_json(e);
    j["dir"] = dir.path();
    j["current"] = current;
    j["source"] = e.source_path.empty() ? Json(nullptr) : Json(source);
    print_json(j);
    return kExitOk;
  }
  const auto& h = e.header;
  const bool readable = e.status == EntryStatus::kOk;
  std::vector<std::pair<std::string, std::string>> rows = {
      {"key", e.key_hex},
      {"path", e.path},
      {"status", c.ok ? c.status : c.status + ": " + c.reason},
      {"file size", human_bytes(e.file_bytes) + " (" + std::to_string(e.file_bytes) + " bytes)"},
      {"last used", local_time(e.last_used_ms)}};
  if (readable) {
    rows.insert(
        rows.end(),
        {{"spec", printable(h.spec, 4096)},
         {"kind", kind_of(e)},
         {"arch", "sm_" + std::to_string(h.arch)},
         {"format version", std::to_string(h.format_version)},
         {"nvrtc version", std::to_string(h.nvrtc_major) + "." + std::to_string(h.nvrtc_minor)},
         {"compiled at", local_time(h.compiled_at_ms)},
         {"compile ms", fixed(static_cast<double>(h.compile_us) / 1000.0, 3)},
         {"payload bytes", std::to_string(h.payload_bytes)},
         {"payload xxh3", hex64(h.payload_hash)},
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

int cmd_verify(const Options& o) {
  CacheDir dir(o.dir, o.fix);
  // --fix first takes away the write permissions that the trust policy forbids (on what this
  // user owns), so that the check below judges the repaired modes.
  std::vector<std::string> repaired_modes;
  if (o.fix && dir.exists()) repaired_modes = dir.tier()->repair_modes();
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
  const int64_t cutoff = graphattn::detail::now_unix_ms() - kStaleTempAge.count() * 1000;
  for (const auto& name : dir.file_names()) {
    struct stat st {};
    if (classify_file_name(name, nullptr) == FileKind::kTemp && dir.stat_name(name, &st) &&
        mtime_ms(st) <= cutoff)
      stale_temps.push_back(name);
  }
  uint64_t removed_temps = 0;
  size_t removed_entries = 0;
  std::vector<std::string> not_removed;  // "name: why"
  std::vector<std::string> removed_locks;
  if (o.fix && dir.exists()) {
    for (const auto* e : bad) {
      const graphattn::detail::Removal r = dir.tier()->remove_entry(e->name);
      if (r.removed) ++removed_entries;
      if (!r.error.empty()) not_removed.push_back(r.error);
    }
    removed_temps = dir.tier()->remove_stale_temps(kStaleTempAge);
    removed_locks = dir.tier()->remove_orphan_locks();
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
        t.add({printable(short_key(e->key_hex)),
               e->status == EntryStatus::kOk ? printable(e->header.spec) : "-",
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
  std::map<std::string, std::string> why;  // key -> reason it went
  if (by_age) {
    // Clamped so that an absurd number of days cannot overflow the conversion.
    const double span_ms = std::min(o.older_than_days * 86400000.0, 1e15);
    const int64_t cutoff = graphattn::detail::now_unix_ms() - static_cast<int64_t>(span_ms);
    for (const auto& e : before) {
      if (e.last_used_ms < cutoff) {
        dir.tier()->remove_entry(e.name);
        why[e.key_hex] = "unused for more than " + days_text(o.older_than_days) + " days";
      }
    }
  }
  if (by_size && dir.exists()) dir.tier()->evict(max_bytes, nullptr);
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
      t.add({printable(short_key(e->key_hex)),
             e->status == EntryStatus::kOk ? printable(e->header.spec) : "-",
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
  std::vector<std::string> failed;
  for (const auto& e : entries) {
    const graphattn::detail::Removal r = dir.tier()->remove_entry(e.name);
    if (!r.error.empty()) failed.push_back(r.error);
  }
  uint64_t side_files = 0;
  std::vector<std::string> kept;
  for (const auto& name : dir.file_names()) {
    // Entries were removed above: one that failed is not reported twice.
    const FileKind kind = classify_file_name(name, nullptr);
    if (kind != FileKind::kOther) {
      const graphattn::detail::Removal r = dir.tier()->remove(name);
      if (r.removed) ++side_files;
      if (!r.error.empty() && !graphattn::detail::is_entry_kind(kind)) failed.push_back(r.error);
    } else {
      kept.push_back(printable(name));
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
      Bucket& a = by_arch["sm_" + std::to_string(e.header.arch)];
      ++a.count;
      a.bytes += e.file_bytes;
      compile_ms += static_cast<double>(e.header.compile_us) / 1000.0;
    }
    struct stat st {};
    if (!e.source_path.empty() && dir.stat_name(graphattn::detail::source_file_of(e.name), &st)) {
      ++sources.count;
      sources.bytes += static_cast<uint64_t>(st.st_size);
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
                {"newest_last_used", iso_utc(newest)}});
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
  if (!by_kind.empty()) print_buckets("KIND", by_kind);
  if (!by_arch.empty()) print_buckets("ARCH", by_arch);
  return kExitOk;
}

int cmd_compile(const Options& o) {
  std::vector<graphattn::AttentionSpec> specs;
  std::string bad;
  for (const auto& text : o.specs) {
    try {
      specs.push_back(graphattn::AttentionSpec::parse(text));
    } catch (const std::exception& ex) {
      bad +=
          std::string(bad.empty() ? "" : "\n") + "--spec '" + printable(text) + "': " + ex.what();
    }
  }
  for (const auto& name : o.models) {
    try {
      graphattn::tools::ModelRunSettings rs;
      rs.block_size = o.block_size;
      rs.dtype = graphattn::tools::dtype_from_name(o.dtype);
      rs.kv_dtype = graphattn::tools::kv_dtype_from_name(o.kv_dtype);
      rs.arch = o.arch;
      const auto layers =
          graphattn::tools::model_layer_configs(graphattn::tools::find_model(name), rs);
      for (const auto& spec : graphattn::tools::model_kernel_specs(layers))
        if (std::find(specs.begin(), specs.end(), spec) == specs.end()) specs.push_back(spec);
    } catch (const std::exception& ex) {
      bad +=
          std::string(bad.empty() ? "" : "\n") + "--model '" + printable(name) + "': " + ex.what();
    }
  }
  if (!bad.empty()) throw UsageError(bad);
  if (specs.empty()) throw UsageError("compile needs at least one --spec or --model");
  require_directory_path(o.dir);

  std::vector<std::string> warnings;
  std::mutex warn_mu;
  graphattn::CacheOptions opts;
  opts.dir = o.dir;
  opts.dump_source = o.dump_source;
  opts.warn = [&](const std::string& w) {
    std::lock_guard<std::mutex> lock(warn_mu);
    warnings.push_back(w);
  };
  graphattn::KernelCache cache(opts);
  auto disk_failure = [&]() {
    std::string msg = "the cache directory " + printable(o.dir, 4096) + " cannot be used";
    for (const auto& w : warnings) msg += "\n  " + w;
    return graphattn::Error(msg);
  };
  if (!cache.disk_enabled()) throw disk_failure();

  const unsigned threads =
      o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<graphattn::PrecompileResult> results = cache.precompile(specs, threads);
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // A full disk fails the writes of what was compiled then: those kernels are not in the cache.
  if (!cache.disk_enabled() || cache.stats().write_failures > 0) throw disk_failure();

  size_t compiled = 0, hits = 0, failed = 0;
  auto word = [](const graphattn::PrecompileResult& r) {
    if (!r.error.empty()) return "failed";
    return r.origin == graphattn::CacheOrigin::kCompiled ? "compiled" : "hit";
  };
  for (const auto& r : results) {
    if (!r.error.empty())
      ++failed;
    else if (r.origin == graphattn::CacheOrigin::kCompiled)
      ++compiled;
    else
      ++hits;
  }
  if (o.json) {
    Json list = Json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      Json j = {{"spec", r.spec.empty() ? specs[i].to_string() : r.spec},
                {"result", word(r)},
                {"ms", r.ms}};
      if (!r.error.empty()) j["error"] = r.error;
      list.push_back(j);
    }
    print_json({{"dir", cache.dir()},
                {"threads", threads},
                {"results", list},
                {"compiled", compiled},
                {"hits", hits},
                {"failed", failed},
                {"wall_ms", wall_ms}});
  } else {
    size_t width = 0;
    for (const auto& r : results) width = std::max(width, r.spec.size());
    for (const auto& r : results) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%10.1f ms", r.ms);
      std::cout << r.spec << std::string(width - r.spec.size() + 2, ' ') << word(r)
                << std::string(8 - std::strlen(word(r)) + 2, ' ') << ms << "\n";
    }
    std::cout << "total: " << compiled << " compiled, " << hits << " hit, " << failed
              << " failed in " << fixed(wall_ms, 1) << " ms on "
              << plural(threads, "thread", "threads") << " into " << cache.dir() << "\n";
  }
  for (const auto& r : results)
    if (!r.error.empty())
      std::cerr << "graphattn-cache: " << r.spec << " failed: " << r.error << "\n";
  return failed ? kExitFailed : kExitOk;
}

// Reports a failure: to stderr for people and, with --json, as the one document on stdout.
int report_error(const std::string& message, bool json, int code, const std::string& usage) {
  std::cerr << "graphattn-cache: " << message << "\n";
  if (!usage.empty()) std::cerr << "\n" << usage;
  if (json) print_json({{"error", message}, {"exit_code", code}});
  return code;
}

// CLI11 reports an unknown command as a missing one; name it and the commands there are.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc,
                                 char** argv) {
  if (!app.get_subcommands().empty()) return e.what();
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({}))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir") {
      ++i;  // its value
    } else if (!a.empty() && a[0] != '-') {
      return "unknown command '" + a + "'; the commands are " + names;
    }
  }
  return std::string(e.what()) + "; the commands are " + names;
}

}  // namespace

int main(int argc, char** argv) {
  // --json must shape the output even when the command line fails to parse.
  bool json_requested = false;
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    json_requested = json_requested || std::strcmp(argv[i], "--json") == 0;

  Options o;
  CLI::App app("Inspect, check, fill, prune or clear the graphattn JIT kernel cache.",
               "graphattn-cache");
  app.fallthrough();  // --dir and --json are accepted after the command too
  app.require_subcommand(1);
  std::string default_dir;
  try {
    default_dir = graphattn::default_cache_dir();
  } catch (const std::exception& ex) {
    return report_error(ex.what(), json_requested, kExitFailed, "");
  }
  o.dir = default_dir;
  app.add_option("--dir", o.dir,
                 "cache directory (default: GRAPHATTN_CACHE_DIR, else $XDG_CACHE_HOME/graphattn, "
                 "else ~/.cache/graphattn; now " +
                     (default_dir.empty() ? std::string("none") : printable(default_dir)) + ")");
  app.add_flag("--json", o.json, "print exactly one JSON document on stdout");

  CLI::App* list = app.add_subcommand("list", "one row per entry, then totals");
  CLI::App* show = app.add_subcommand("show", "every header field of one entry, and its source");
  show->add_option("entry", o.target, "a unique key prefix (hex) or a spec string")->required();
  CLI::App* verify = app.add_subcommand("verify", "re-check every entry; exit 1 if any is bad");
  verify->add_flag("--fix", o.fix, "remove the bad entries and stale temp files");
  CLI::App* prune = app.add_subcommand("prune", "remove entries by size cap or by age");
  prune->add_option("--max-bytes", o.max_bytes_text,
                    "remove least recently used entries until the total is at most N bytes "
                    "(K, M, G suffixes)");
  prune
      ->add_option("--older-than", o.older_than_days,
                   "remove entries not used for more than DAYS days")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double d = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !std::isfinite(d) || d < 0)
              return "DAYS must be a number >= 0 (fractions allowed, e.g. 0.5), not '" + v + "'";
            return "";
          },
          "DAYS"));
  CLI::App* clear = app.add_subcommand(
      "clear", "remove every entry, lock, source and temp file (other files stay)");
  CLI::App* stats = app.add_subcommand("stats", "entries and bytes, by kernel kind and by arch");
  CLI::App* compile = app.add_subcommand("compile", "compile specs into the cache ahead of time");
  compile->add_option("--spec", o.specs,
                      "a spec string such as "
                      "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90; repeatable");
  compile->add_option("--model", o.models,
                      "every kernel of a built-in model (llama-3-8b, qwen2.5-7b, mistral-7b, "
                      "gemma-2-9b); repeatable");
  compile->add_option("--arch", o.arch, "with --model: target arch, e.g. 90")
      ->capture_default_str();
  compile->add_option("--block-size", o.block_size, "with --model: KV cache block size")
      ->capture_default_str();
  compile->add_option("--dtype", o.dtype, "with --model: fp16 or bf16")->capture_default_str();
  compile->add_option("--kv-cache-dtype", o.kv_dtype, "with --model: auto, e4m3 or e5m2")
      ->capture_default_str();
  compile->add_option("--threads", o.threads, "compile threads (0: one per core)")
      ->check(CLI::Range(0u, 1024u));
  compile->add_flag("--dump-source", o.dump_source, "write each compiled source beside its entry");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_error(describe_parse_error(app, e, argc, argv), json_requested, kExitUsage,
                        app.help());
  }
  o.json = o.json || json_requested;
  // The environment is checked before any command runs, like the arguments.
  try {
    graphattn::check_cache_environment();
  } catch (const std::exception& e) {
    return report_error(e.what(), o.json, kExitUsage, "");
  }

  try {
    if (list->parsed()) return cmd_list(o);
    if (show->parsed()) return cmd_show(o);
    if (verify->parsed()) return cmd_verify(o);
    if (prune->parsed()) return cmd_prune(o);
    if (clear->parsed()) return cmd_clear(o);
    if (stats->parsed()) return cmd_stats(o);
    if (compile->parsed()) return cmd_compile(o);
    return report_error("no command given", o.json, kExitUsage, app.help());
  } catch (const UsageError& e) {
    return report_error(e.what(), o.json, kExitUsage, app.help());
  } catch (const std::exception& e) {
    return report_error(e.what(), o.json, kExitFailed, "");
  }
}
