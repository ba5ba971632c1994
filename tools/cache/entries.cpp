// SPDX-License-Identifier: Apache-2.0
// graphattn-cache's view of the cache directory and its verdict on an entry, shared by the
// commands.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <utility>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "jit_cache/trust.hpp"
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
  if (!tier_ || names.empty() || o.force || tier_->is_cache()) return;
  std::string list;
  for (size_t i = 0; i < names.size() && i < 20; ++i)
    list += (list.empty() ? "" : ", ") + printable(names[i]);
  if (names.size() > 20) list += ", ... (" + std::to_string(names.size()) + " files)";
  throw graphattn::Error(std::string(command) + " refused: " + printable(dir_, 4096) +
                         " is not marked as a graphattn cache (no " +
                         graphattn::detail::kCacheMarkerName +
                         " file, and it holds files graphattn did not write); it would have "
                         "removed " +
                         list + "; give --force to remove them anyway");
}

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

CacheDir::CacheDir(std::string dir, bool need_write) : dir_(std::move(dir)) {
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

}  // namespace graphattn::tools::cache_tool
