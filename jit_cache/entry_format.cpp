// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/entry_format.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

#include "core/text.hpp"
#include "jit_cache/cubin_check.hpp"

namespace graphattn::detail {
namespace {

constexpr char kMagic[8] = {'G', 'A', 'K', 'C', 'U', 'B', 'I', 'N'};
constexpr const char* kEntrySuffix = ".gakc";
constexpr const char* kLockSuffix = ".lock";
constexpr const char* kSourceSuffix = ".cu";
constexpr const char* kTempMark = ".tmp.";
constexpr const char* kProbePrefix = ".probe.";

template <typename T>
void put(std::vector<char>& out, T v) {
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}
template <typename T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// name without suffix when it ends with it and the rest is a key.
bool is_key_with(const std::string& name, const std::string& suffix) {
  return ends_with(name, suffix) && is_key_hex(name.substr(0, name.size() - suffix.size()));
}

}  // namespace

bool has_entry_magic(const char* first8) { return std::memcmp(first8, kMagic, 8) == 0; }

const char* to_string(EntryStatus s) {
  static const char* const kNames[] = {
      "ok",         "missing",      "truncated",         "bad magic", "format version mismatch",
      "bad header", "key mismatch", "checksum mismatch", "I/O error", "not a regular file",
      "untrusted",  "too large",    "bad cubin"};
  return enum_name(s, kNames);
}

std::vector<char> encode_entry(const EntryHeader& h, const std::vector<char>& payload) {
  std::vector<char> out;
  out.reserve(kFixedHeaderBytes + h.spec.size() + 8 + payload.size());
  out.insert(out.end(), kMagic, kMagic + 8);
  put<uint32_t>(out, h.format_version);
  put<uint32_t>(out, static_cast<uint32_t>(kFixedHeaderBytes + h.spec.size() + 8));
  put<uint64_t>(out, h.key.high);
  put<uint64_t>(out, h.key.low);
  put<uint32_t>(out, h.arch);
  put<uint32_t>(out, h.nvrtc_major);
  put<uint32_t>(out, h.nvrtc_minor);
  put<uint32_t>(out, static_cast<uint32_t>(h.spec.size()));
  put<int64_t>(out, h.compiled_at_ms);
  put<uint64_t>(out, h.compile_us);
  put<uint64_t>(out, payload.size());
  put<uint64_t>(out, XXH3_64bits(payload.data(), payload.size()));
  out.insert(out.end(), h.spec.begin(), h.spec.end());
  put<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

EntryStatus check_entry_prefix(const char* p, size_t size, uint64_t file_bytes,
                               uint32_t* header_bytes, std::string* reason) {
  auto fail = [&](EntryStatus s, const std::string& why) {
    if (reason) *reason = why;
    return s;
  };
  if (file_bytes < 12 || size < 12)
    return fail(EntryStatus::kTruncated,
                "file of " + std::to_string(file_bytes) + " bytes is shorter than a header");
  if (std::memcmp(p, kMagic, 8) != 0)
    return fail(EntryStatus::kBadMagic, "not a graphattn cache entry (bad magic)");
  const uint32_t version = get<uint32_t>(p + 8);
  if (version != kCacheFormatVersion)
    return fail(EntryStatus::kBadVersion, "format version " + std::to_string(version) +
                                              ", this build reads " +
                                              std::to_string(kCacheFormatVersion));
  if (size < kFixedHeaderBytes) return fail(EntryStatus::kTruncated, "header truncated");
  const uint32_t hb = get<uint32_t>(p + 12);
  const uint32_t spec_bytes = get<uint32_t>(p + 44);
  if (spec_bytes > kMaxSpecBytes || hb != kFixedHeaderBytes + spec_bytes + 8)
    return fail(EntryStatus::kBadHeader, "inconsistent header lengths");
  if (file_bytes < hb || size < hb) return fail(EntryStatus::kTruncated, "header truncated");
  const uint64_t payload_bytes = get<uint64_t>(p + 64);
  if (payload_bytes > kMaxPayloadBytes)
    return fail(EntryStatus::kTooLarge, "header declares a payload of " +
                                            std::to_string(payload_bytes) + " bytes (at most " +
                                            std::to_string(kMaxPayloadBytes) + ")");
  if (file_bytes - hb != payload_bytes)
    return fail(file_bytes - hb < payload_bytes ? EntryStatus::kTruncated : EntryStatus::kBadHeader,
                "payload is " + std::to_string(file_bytes - hb) + " bytes, header says " +
                    std::to_string(payload_bytes));
  *header_bytes = hb;
  return EntryStatus::kOk;
}

EntryStatus decode_entry(const std::vector<char>& img, const CacheKey* expect, EntryHeader* h,
                         std::vector<char>* payload, std::string* reason) {
  auto fail = [&](EntryStatus s, const std::string& why) {
    if (reason) *reason = why;
    return s;
  };
  uint32_t header_bytes = 0;
  const EntryStatus prefix =
      check_entry_prefix(img.data(), img.size(), img.size(), &header_bytes, reason);
  if (prefix != EntryStatus::kOk) return prefix;
  const uint64_t stored_header_hash = get<uint64_t>(img.data() + header_bytes - 8);
  if (XXH3_64bits(img.data(), header_bytes - 8) != stored_header_hash)
    return fail(EntryStatus::kBadChecksum, "header checksum mismatch");
  EntryHeader out;
  out.format_version = get<uint32_t>(img.data() + 8);
  out.key.high = get<uint64_t>(img.data() + 16);
  out.key.low = get<uint64_t>(img.data() + 24);
  out.arch = get<uint32_t>(img.data() + 32);
  out.nvrtc_major = get<uint32_t>(img.data() + 36);
  out.nvrtc_minor = get<uint32_t>(img.data() + 40);
  out.compiled_at_ms = get<int64_t>(img.data() + 48);
  out.compile_us = get<uint64_t>(img.data() + 56);
  out.payload_bytes = get<uint64_t>(img.data() + 64);
  out.payload_hash = get<uint64_t>(img.data() + 72);
  out.spec.assign(img.data() + kFixedHeaderBytes, get<uint32_t>(img.data() + 44));
  if (expect && out.key != *expect)
    return fail(EntryStatus::kKeyMismatch,
                "stored key " + out.key.hex() + " differs from the file's key");
  const char* body = img.data() + header_bytes;
  if (XXH3_64bits(body, out.payload_bytes) != out.payload_hash)
    return fail(EntryStatus::kBadChecksum, "payload checksum mismatch");
  std::string why;
  if (!check_cubin(body, out.payload_bytes, out.arch, &why))
    return fail(EntryStatus::kBadCubin, why);
  if (payload) payload->assign(body, body + out.payload_bytes);
  if (h) *h = std::move(out);
  return EntryStatus::kOk;
}

bool is_key_hex(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

CacheKey key_from_hex(const std::string& hex) {
  CacheKey k;
  k.high = std::stoull(hex.substr(0, 16), nullptr, 16);
  k.low = std::stoull(hex.substr(16), nullptr, 16);
  return k;
}

std::string entry_file_name(const CacheKey& key) { return key.hex() + kEntrySuffix; }
std::string lock_file_name(const CacheKey& key) { return key.hex() + kLockSuffix; }
std::string source_file_name(const CacheKey& key) { return key.hex() + kSourceSuffix; }

std::string temp_file_name(const CacheKey& key, TempOf of, const std::string& nonce) {
  return "." + key.hex() + (of == TempOf::kSource ? kSourceSuffix : "") + kTempMark + nonce;
}

std::string probe_file_name(const std::string& nonce) { return kProbePrefix + nonce; }

FileKind classify_file_name(const std::string& name, std::string* key_hex) {
  auto found = [&](FileKind kind, const char* suffix) {
    if (key_hex) *key_hex = name.substr(0, name.size() - std::strlen(suffix));
    return kind;
  };
  if (key_hex) key_hex->clear();
  if (name.empty()) return FileKind::kOther;
  if (name[0] == '.') {
    if (name.find(kTempMark) != std::string::npos) return FileKind::kTemp;
    if (name.rfind(kProbePrefix, 0) == 0) return FileKind::kProbe;
    return FileKind::kOther;
  }
  if (is_key_with(name, kEntrySuffix)) return found(FileKind::kEntry, kEntrySuffix);
  if (ends_with(name, kEntrySuffix)) return FileKind::kMisnamedEntry;
  if (is_key_with(name, kLockSuffix)) return found(FileKind::kLock, kLockSuffix);
  if (is_key_with(name, kSourceSuffix)) return found(FileKind::kSource, kSourceSuffix);
  return FileKind::kOther;
}

std::string entry_stem(const std::string& entry_name) {
  return ends_with(entry_name, kEntrySuffix)
             ? entry_name.substr(0, entry_name.size() - std::strlen(kEntrySuffix))
             : entry_name;
}

std::string lock_file_of(const std::string& entry_name) {
  return entry_stem(entry_name) + kLockSuffix;
}

std::string source_file_of(const std::string& entry_name) {
  return entry_stem(entry_name) + kSourceSuffix;
}

}  // namespace graphattn::detail
