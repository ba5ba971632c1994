// SPDX-License-Identifier: Apache-2.0
// graphattn-cache's view of the cache directory and its verdict on an entry, shared by the
// commands.
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <utility>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "tools/cache/cache_tool.hpp"

namespace graphattn::tools::cache_tool {
namespace {

// Kernel kinds that earlier versions cached and this one no longer builds: their entries are
// intact but never hit again, like entries of another template version. decode_reduce was
// folded into the decode kernel.
bool retired_kind(const std::string& spec) { return spec.rfind("decode_reduce_", 0) == 0; }

constexpr const char* kNoDirectory =
    "no cache directory: give --dir DIR, or set GRAPHATTN_CACHE_DIR, XDG_CACHE_HOME or HOME "
    "(absolute paths)";

}  // namespace

void CacheDir::require_cache(const Options& o, const char* command,
                             const std::vector<std::string>& names) const {
  if (!dir_handle_ || names.empty() || o.force || dir_handle_->is_cache()) return;
  std::string list;
  for (size_t i = 0; i < names.size() && i < 20; ++i)
    list += (list.empty() ? "" : ", ") + printable(names[i]);
  if (names.size() > 20) list += ", ... (" + std::to_string(names.size()) + " files)";
  throw graphattn::Error(std::string(command) + " refused: " + printable(dir_, 4096) +
                         " is not marked as a graphattn cache (no " + graphattn::kCacheMarkerName +
                         " file, and it holds files graphattn did not write); it would have "
                         "removed " +
                         list + "; give --force to remove them anyway");
}

bool require_directory_path(const std::string& dir) {
  if (dir.empty()) throw UsageError(kNoDirectory);
  std::string what;
  const graphattn::CachePathKind kind = graphattn::cache_path_kind(dir, &what);
  if (kind == graphattn::CachePathKind::kOther)
    throw UsageError("--dir '" + printable(dir, 4096) + "' is " + what + ", not a directory");
  return kind == graphattn::CachePathKind::kDirectory;
}

CacheDir::CacheDir(std::string dir, bool need_write) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (!require_directory_path(dir_)) return;
  dir_handle_ = std::make_unique<CacheDirectory>(dir_);
  if (!dir_handle_->exists())
    throw graphattn::Error("cannot open cache directory " + printable(dir_, 4096) + ": " +
                           std::strerror(errno));
  if (need_write && !dir_handle_->writable())
    throw graphattn::Error("cannot modify cache directory " + printable(dir_, 4096) +
                           ": this user cannot write it");
}

Check check_entry(const EntryInfo& e) {
  Check c;
  if (!e.ok) {
    c.ok = false;
    c.status = e.status;
    c.reason = e.reason;
    return c;
  }
  c.status = "ok";
  if (retired_kind(e.spec)) {
    c.status = "retired kind";
    c.reason = "this version builds no kernel of this kind";
    return c;
  }
  c.reason = graphattn::entry_spec_problem(e.spec, e.arch, &c.status);
  c.ok = c.reason.empty();
  return c;
}

std::string kind_of(const EntryInfo& e) {
  if (!e.ok) return "unknown";
  if (retired_kind(e.spec)) return "retired";
  try {
    return graphattn::to_string(graphattn::AttentionSpec::parse(e.spec).kind);
  } catch (const std::exception&) {
    return "unknown";
  }
}

Json is_current(const EntryInfo& e) {
  if (!e.ok) return nullptr;
  if (retired_kind(e.spec)) return false;
  if (e.current) return true;
  try {
    const graphattn::AttentionSpec spec = graphattn::AttentionSpec::parse(e.spec);
    const graphattn::KernelSource src = graphattn::render_kernel(spec);
    return graphattn::kernel_key(src, spec.arch).hex() == e.key_hex;
  } catch (const std::exception&) {
    return nullptr;
  }
}

Json entry_json(const EntryInfo& e) {
  const Check c = check_entry(e);
  const bool readable = e.ok;
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
  j["spec"] = readable ? Json(e.spec) : Json(nullptr);
  j["kind"] = readable ? Json(kind_of(e)) : Json(nullptr);
  j["arch"] = readable ? Json(e.arch) : Json(nullptr);
  j["format_version"] = readable ? Json(e.format_version) : Json(nullptr);
  j["nvrtc_version"] =
      readable ? Json(std::to_string(e.nvrtc_major) + "." + std::to_string(e.nvrtc_minor))
               : Json(nullptr);
  j["compiled_at_ms"] = readable ? Json(e.compiled_at_ms) : Json(nullptr);
  j["compiled_at"] = readable ? iso_utc(e.compiled_at_ms) : Json(nullptr);
  j["compile_ms"] = readable ? Json(static_cast<double>(e.compile_us) / 1000.0) : Json(nullptr);
  j["payload_bytes"] = readable ? Json(e.payload_bytes) : Json(nullptr);
  j["payload_xxh3"] = readable ? Json(hex64(e.payload_xxh3)) : Json(nullptr);
  j["source_path"] = e.source_path.empty() ? Json(nullptr) : Json(e.source_path);
  return j;
}

uint64_t total_bytes(const std::vector<EntryInfo>& entries) {
  uint64_t n = 0;
  for (const auto& e : entries) n += e.file_bytes;
  return n;
}

}  // namespace graphattn::tools::cache_tool
