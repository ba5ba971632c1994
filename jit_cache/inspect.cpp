// The public cache-inspection API (CacheDirectory, jit.hpp) over the disk tier's inspector and
// the bundle reader and writer.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/bundle.hpp"
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

CacheEntryInfo info_of(const EntryInfo& e) {
  CacheEntryInfo out;
  out.name = e.name;
  out.key_hex = e.key_hex;
  out.ok = e.status == EntryStatus::kOk;
  out.status = detail::to_string(e.status);
  out.reason = e.reason;
  out.file_bytes = e.file_bytes;
  out.last_used_ms = e.last_used_ms;
  if (out.ok) {
    out.spec = e.header.spec;
    out.arch = static_cast<int>(e.header.arch);
    out.nvrtc_major = static_cast<int>(e.header.nvrtc_major);
    out.nvrtc_minor = static_cast<int>(e.header.nvrtc_minor);
    out.compiled_at_ms = e.header.compiled_at_ms;
    out.current = is_current(e.header);
  }
  return out;
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

struct CacheDirectory::Impl {
  Impl(std::string dir, bool shared)
      : tier(std::move(dir), nullptr, shared || detail::shared_cache_requested(),
             DiskTier::Access::kInspect) {}
  DiskTier tier;
};

CacheDirectory::CacheDirectory(std::string dir, bool shared)
    : impl_(std::make_unique<Impl>(std::move(dir), shared)) {}
CacheDirectory::~CacheDirectory() = default;

const std::string& CacheDirectory::dir() const { return impl_->tier.dir(); }
bool CacheDirectory::exists() const { return impl_->tier.exists(); }
const std::string& CacheDirectory::trust_problem() const { return impl_->tier.trust_problem(); }

std::vector<CacheEntryInfo> CacheDirectory::list() const {
  std::vector<CacheEntryInfo> out;
  for (const EntryInfo& e : impl_->tier.list()) out.push_back(info_of(e));
  return out;
}

CacheEntryInfo CacheDirectory::verify(const std::string& key_hex) const {
  return info_of(impl_->tier.inspect_name(entry_name_of(key_hex)));
}

bool CacheDirectory::remove(const std::string& key_hex) const {
  const std::string name = entry_name_of(key_hex);
  const detail::Removal r = impl_->tier.remove_entry(name);
  if (!r.error.empty()) throw Error("cannot remove " + dir() + "/" + name + ": " + r.error);
  return r.removed;
}

BundleExport CacheDirectory::export_bundle(const std::string& path,
                                           const std::string& signing_key) const {
  BundleExport out;
  std::vector<detail::BundleEntry> entries;
  // The cache's own reader (a trusted directory only) reads each verified, current entry whole.
  DiskTier reader(dir(), nullptr, impl_->tier.policy().shared);
  for (const EntryInfo& e : impl_->tier.list()) {
    detail::BundleEntry b;
    if (e.status == EntryStatus::kOk && is_current(e.header) &&
        reader.read(e.header.key, &b.header, &b.payload, nullptr) == EntryStatus::kOk) {
      out.cubin_bytes += b.payload.size();
      out.specs.push_back(b.header.spec);
      entries.push_back(std::move(b));
    } else {
      ++out.left_out;
    }
  }
  if (entries.empty())
    throw Error("nothing to export: " + dir() + " holds no verified entry of this build");
  detail::write_bundle(path, entries, signing_key, now_ms());
  out.entries = entries.size();
  return out;
}

BundleImport CacheDirectory::import_bundle(const std::string& path, const std::string& signing_key,
                                           bool dry_run) const {
  const detail::Bundle bundle = detail::read_bundle(path, signing_key);
  BundleImport out;
  out.signed_bundle = bundle.signed_;
  out.nvrtc_major = bundle.nvrtc_major;
  out.nvrtc_minor = bundle.nvrtc_minor;
  std::unique_ptr<DiskTier> local;  // the writer: a trusted directory, created if missing
  if (!dry_run) local = std::make_unique<DiskTier>(dir(), nullptr, impl_->tier.policy().shared);
  if (local && !local->writable())
    throw Error("cannot import into " + dir() + ": " +
                (local->trust_problem().empty() ? local->read_only_why() : local->trust_problem()));
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
    } else {
      detail::EntryHeader have;
      std::vector<char> have_payload;
      if (local->read(m.entry.header.key, &have, &have_payload, nullptr) == EntryStatus::kOk) {
        ++out.present;
        r.action = "present";
      } else if (local->write(m.entry.header, m.entry.payload)) {
        ++out.installed;
        r.action = "installed";
      } else {
        throw Error("cannot write an entry into " + dir());
      }
    }
    out.members.push_back(std::move(r));
  }
  return out;
}

}  // namespace graphattn
