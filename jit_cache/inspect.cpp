// SPDX-License-Identifier: Apache-2.0
// The public cache-inspection API (CacheDirectory, jit.hpp) over the disk tier's inspector and
// the bundle reader and writer: what graphattn-cache and the C ABI use.
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/bundle.hpp"
#include "jit_cache/cache_directory.hpp"
#include "jit_cache/disk_tier.hpp"
#include "jit_cache/trust.hpp"

namespace graphattn {
namespace {

using detail::DiskTier;
using detail::EntryInfo;
using detail::EntryStatus;

// Whether this build looks the entry up under its key: its spec renders to the same source and
// options, for the same NVRTC, as when it was compiled.
bool is_current(const detail::EntryHeader& h) {
  try {
    const AttentionSpec spec = AttentionSpec::parse(h.spec);
    return kernel_key(render_kernel(spec), spec.arch) == h.key;
  } catch (const Error&) {
    return false;  // a spec this version no longer parses (a retired kernel kind)
  }
}

CacheEntryInfo info_of(const DiskTier& tier, const EntryInfo& e) {
  CacheEntryInfo out;
  out.name = e.name;
  out.key_hex = e.key_hex;
  out.path = e.path;
  out.ok = e.status == EntryStatus::kOk;
  out.status = detail::to_string(e.status);
  out.reason = e.reason;
  out.file_bytes = e.file_bytes;
  out.last_used_ms = e.last_used_ms;
  out.source_path = e.source_path;
  struct stat st {};
  if (!e.source_path.empty() && tier.stat_name(detail::source_file_of(e.name), &st))
    out.source_bytes = static_cast<uint64_t>(st.st_size);
  if (out.ok) {
    const detail::EntryHeader& h = e.header;
    out.spec = h.spec;
    out.arch = static_cast<int>(h.arch);
    out.nvrtc_major = static_cast<int>(h.nvrtc_major);
    out.nvrtc_minor = static_cast<int>(h.nvrtc_minor);
    out.compiled_at_ms = h.compiled_at_ms;
    out.current = is_current(h);
    out.format_version = h.format_version;
    out.compile_us = h.compile_us;
    out.payload_bytes = h.payload_bytes;
    out.payload_xxh3 = h.payload_hash;
  }
  return out;
}

// A file name of the directory, never a path: Error naming it otherwise.
const std::string& plain_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error("cache file name '" + detail::printable(name) +
                "' is not supported; supported: a name inside the directory (no '/')");
  return name;
}

CacheFileKind kind_of(detail::FileKind k) {
  switch (k) {
    case detail::FileKind::kEntry:
    case detail::FileKind::kMisnamedEntry:
      return CacheFileKind::kEntry;
    case detail::FileKind::kLock:
      return CacheFileKind::kLock;
    case detail::FileKind::kSource:
      return CacheFileKind::kSource;
    case detail::FileKind::kTemp:
      return CacheFileKind::kTemp;
    case detail::FileKind::kProbe:
      return CacheFileKind::kProbe;
    case detail::FileKind::kOther:
      break;
  }
  return CacheFileKind::kOther;
}

// The entry file name of 32 hex digits, or Error naming the text.
std::string entry_name_of(const std::string& key_hex) {
  bool hex = key_hex.size() == 32;
  for (char c : key_hex) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex)
    throw Error("cache key '" + key_hex +
                "' is not supported; supported: 32 lowercase hex digits (a file name without "
                ".gakc)");
  return key_hex + ".gakc";
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool shared_cache_requested() { return detail::shared_cache_requested(); }

CachePathKind cache_path_kind(const std::string& path, std::string* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return CachePathKind::kMissing;
    throw Error("cannot read cache directory " + detail::printable(path, 4096) + ": " +
                std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return CachePathKind::kDirectory;
  if (what) *what = detail::file_type_name(st.st_mode);
  return CachePathKind::kOther;
}

std::string entry_spec_problem(const std::string& spec_string, int arch, std::string* status) {
  try {
    const AttentionSpec spec = AttentionSpec::parse(spec_string);
    if (spec.arch == arch) return "";
    if (status) *status = "arch mismatch";
    return "header arch sm_" + std::to_string(arch) + " differs from the spec's sm_" +
           std::to_string(spec.arch);
  } catch (const std::exception& e) {
    if (status) *status = "bad spec";
    return e.what();
  }
}

CacheDirectory::Impl::Impl(std::string dir, bool shared)
    : given(dir),
      tier(std::move(dir), nullptr, shared || detail::shared_cache_requested(),
           DiskTier::Access::kInspect) {}

std::unique_ptr<DiskTier> CacheDirectory::Impl::open_for_use(bool create) const {
  if (!create && cache_path_kind(given) == CachePathKind::kMissing)
    throw Error("cache directory " + detail::printable(given, 4096) + " does not exist");
  std::string warning;
  auto used = std::make_unique<DiskTier>(
      given, [&](const std::string& w) { warning = w; }, tier.policy().shared);
  if (!used->usable() || (create && !used->writable()))
    throw Error("the cache directory " + detail::printable(given, 4096) + " cannot be used" +
                (warning.empty() ? std::string() : ": " + warning) +
                (used->read_only_why().empty() ? "" : ": " + used->read_only_why()));
  return used;
}

bool CacheDirectory::Impl::install(DiskTier& local, const detail::EntryHeader& h,
                                   const std::vector<char>& payload) const {
  detail::EntryHeader have;
  std::vector<char> have_payload;
  if (local.read(h.key, &have, &have_payload, nullptr) == EntryStatus::kOk) return false;
  if (!local.write(h, payload))
    throw Error("cannot write an entry into " + detail::printable(given, 4096));
  return true;
}

CacheDirectory::CacheDirectory(std::string dir, bool shared)
    : impl_(std::make_unique<Impl>(std::move(dir), shared)) {}
CacheDirectory::~CacheDirectory() = default;

const std::string& CacheDirectory::dir() const { return impl_->tier.dir(); }
bool CacheDirectory::exists() const { return impl_->tier.exists(); }
bool CacheDirectory::writable() const { return impl_->tier.usable(); }
const std::string& CacheDirectory::trust_problem() const { return impl_->tier.trust_problem(); }
bool CacheDirectory::is_cache() const { return impl_->tier.is_cache(); }
void CacheDirectory::require_usable(bool create) const { impl_->open_for_use(create); }

std::vector<CacheEntryInfo> CacheDirectory::list() const {
  std::vector<CacheEntryInfo> out;
  for (const EntryInfo& e : impl_->tier.list()) out.push_back(info_of(impl_->tier, e));
  return out;
}

CacheEntryInfo CacheDirectory::verify(const std::string& key_hex) const {
  return info_of(impl_->tier, impl_->tier.inspect_name(entry_name_of(key_hex)));
}

std::vector<CacheFile> CacheDirectory::files() const {
  std::vector<CacheFile> out;
  for (const std::string& name : impl_->tier.file_names()) {
    CacheFile f;
    f.name = name;
    f.kind = kind_of(detail::classify_file_name(name, nullptr));
    struct stat st {};
    if (impl_->tier.stat_name(name, &st))
      f.modified_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    out.push_back(std::move(f));
  }
  return out;
}

std::string CacheDirectory::read_source(const CacheEntryInfo& entry) const {
  std::string text;
  if (!impl_->tier.read_text(detail::source_file_of(plain_name(entry.name)), 16u << 20, &text))
    throw Error("cannot read " + entry.source_path);
  return text;
}

bool CacheDirectory::remove(const std::string& key_hex) const {
  const std::string name = entry_name_of(key_hex);
  const detail::Removal r = impl_->tier.remove_entry(name);
  if (!r.error.empty()) throw Error("cannot remove " + dir() + "/" + name + ": " + r.error);
  return r.removed;
}

CacheRemoval CacheDirectory::remove_entry_file(const std::string& name) const {
  const detail::Removal r = impl_->tier.remove_entry(plain_name(name));
  return {r.removed, r.error};
}

CacheRemoval CacheDirectory::remove_file(const std::string& name) const {
  const detail::Removal r = impl_->tier.remove(plain_name(name));
  return {r.removed, r.error};
}

uint64_t CacheDirectory::remove_stale_temps(std::chrono::seconds age) const {
  return impl_->tier.remove_stale_temps(age);
}

std::vector<std::string> CacheDirectory::remove_orphan_locks() const {
  return impl_->tier.remove_orphan_locks();
}

std::vector<std::string> CacheDirectory::repair_modes() const { return impl_->tier.repair_modes(); }

uint64_t CacheDirectory::evict(uint64_t max_bytes) const {
  return impl_->tier.exists() ? impl_->tier.evict(max_bytes, nullptr) : 0;
}

namespace {

BundleExport write_entries(const std::string& path, std::vector<detail::BundleEntry>& entries,
                           const std::string& signing_key) {
  BundleExport out;
  for (const detail::BundleEntry& b : entries) {
    out.cubin_bytes += b.payload.size();
    out.specs.push_back(b.header.spec);
  }
  detail::write_bundle(path, entries, signing_key, now_ms());
  out.entries = entries.size();
  return out;
}

}  // namespace

BundleExport CacheDirectory::export_bundle(const std::string& path,
                                           const std::string& signing_key) const {
  // The cache's own reader (a trusted directory only) reads each verified, current entry whole.
  const std::unique_ptr<DiskTier> reader = impl_->open_for_use(false);
  std::vector<detail::BundleEntry> entries;
  uint64_t left_out = 0;
  for (const EntryInfo& e : impl_->tier.list()) {
    detail::BundleEntry b;
    if (e.status == EntryStatus::kOk && is_current(e.header) &&
        reader->read(e.header.key, &b.header, &b.payload, nullptr) == EntryStatus::kOk) {
      entries.push_back(std::move(b));
    } else {
      ++left_out;
    }
  }
  if (entries.empty())
    throw Error("nothing to export: " + detail::printable(impl_->given, 4096) +
                " holds no verified entry of this build");
  BundleExport out = write_entries(path, entries, signing_key);
  out.left_out = left_out;
  return out;
}

BundleExport export_kernels(const std::string& path,
                            const std::vector<std::shared_ptr<const CompiledKernel>>& kernels,
                            const std::string& signing_key) {
  const auto [major, minor] = nvrtc_version();
  std::vector<detail::BundleEntry> entries;
  for (const auto& k : kernels) {
    detail::BundleEntry e;
    e.header.key = k->key;
    e.header.arch = static_cast<uint32_t>(k->spec.arch);
    e.header.nvrtc_major = static_cast<uint32_t>(major);
    e.header.nvrtc_minor = static_cast<uint32_t>(minor);
    e.header.compiled_at_ms = k->compiled_at_ms;
    e.header.compile_us = static_cast<uint64_t>(k->compile_ms * 1000.0);
    e.header.spec = k->spec_string;
    e.payload = k->cubin;
    entries.push_back(std::move(e));
  }
  return write_entries(path, entries, signing_key);
}

BundleImport CacheDirectory::import_bundle(const std::string& path, const std::string& signing_key,
                                           bool dry_run) const {
  const detail::Bundle bundle = detail::read_bundle(path, signing_key);
  BundleImport out;
  out.signed_bundle = bundle.signed_;
  out.nvrtc_major = bundle.nvrtc_major;
  out.nvrtc_minor = bundle.nvrtc_minor;
  out.cache_format = bundle.cache_format;
  std::unique_ptr<DiskTier> local;  // the writer: a trusted directory, created if missing
  if (!dry_run) local = impl_->open_for_use(true);
  for (const detail::BundleMember& m : bundle.members) {
    BundleImport::Member r{
        m.key_hex, m.spec,         static_cast<int>(m.arch), detail::to_string(m.verdict),
        m.reason,  "not installed"};
    if (m.verdict == detail::BundleMember::Verdict::kStale) {
      ++out.stale;
    } else if (m.verdict == detail::BundleMember::Verdict::kBad) {
      ++out.bad;
    } else if (dry_run) {
      r.action = "would install";
    } else if (impl_->install(*local, m.entry.header, m.entry.payload)) {
      ++out.installed;
      r.action = "installed";
    } else {
      ++out.present;
      r.action = "present";
    }
    out.members.push_back(std::move(r));
  }
  return out;
}

}  // namespace graphattn
