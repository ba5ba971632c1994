// SPDX-License-Identifier: Apache-2.0
// The one definition of what a kernel cache directory holds: the layout of an entry file, its
// encoder and checking decoder, and the rules for the names of every file the cache writes. The
// disk tier (jit_cache/disk_tier.hpp) and graphattn-cache both use these and nothing else.
// tests/test_entry_format.cpp pins the layout with a golden file: a change here must fail it
// and come with a new kCacheFormatVersion.
//
// Entry file layout (little-endian), "<key hex>.gakc":
//   char[8]  magic "GAKCUBIN"
//   u32      format version (kCacheFormatVersion)
//   u32      header bytes (everything up to the payload)
//   u64 x2   key (high, low)
//   u32      arch;  u32 nvrtc major;  u32 nvrtc minor;  u32 spec string bytes
//   i64      compiled at (Unix ms);  u64 compile time (microseconds)
//   u64      payload bytes;  u64 payload XXH3-64
//   char[]   spec string
//   u64      header XXH3-64 over all bytes above
//   payload  the cubin
//
// Names in the directory (<key> is CacheKey::hex(): 32 lower-case hex digits):
//   "<key>.gakc"                an entry
//   "<key>.lock"                the advisory lock taken while the entry is compiled
//   "<key>.cu"                  the dumped source (GRAPHATTN_DUMP_SOURCE=1, --dump-source)
//   ".<key>.tmp.<nonce>"        an entry being written, renamed to "<key>.gakc" when complete
//   ".<key>.cu.tmp.<nonce>"     a source being written
//   ".probe.<nonce>"            the writability probe, removed at once
//   ".graphattn-cache"          the marker written when the directory was made (disk_tier.hpp)
// <nonce> is unpredictable, so that no name can be planted in advance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graphattn/jit.hpp"

namespace graphattn::detail {

// The fixed part of the header (before the spec string), the longest spec string an entry may
// hold, and so the longest header: a reader reads at most this much before it trusts a length.
constexpr size_t kFixedHeaderBytes = 8 + 4 + 4 + 16 + 4 * 4 + 8 * 4;
constexpr size_t kMaxSpecBytes = 256;
constexpr size_t kMaxHeaderBytes = kFixedHeaderBytes + kMaxSpecBytes + 8;
// The largest payload an entry may declare; a bigger file is rejected before it is read. The
// largest kernel graphattn builds is a few hundred KiB.
constexpr uint64_t kMaxPayloadBytes = uint64_t{64} << 20;

struct EntryHeader {
  uint32_t format_version = kCacheFormatVersion;
  CacheKey key;
  uint32_t arch = 0;
  uint32_t nvrtc_major = 0;
  uint32_t nvrtc_minor = 0;
  int64_t compiled_at_ms = 0;
  uint64_t compile_us = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_hash = 0;
  std::string spec;
};

enum class EntryStatus {
  kOk,
  kMissing,
  kTruncated,
  kBadMagic,
  kBadVersion,
  kBadHeader,
  kKeyMismatch,
  kBadChecksum,
  kIoError,
  kNotRegular,
  kUntrusted,
  kTooLarge,
  kBadCubin
};
const char* to_string(EntryStatus s);

// Whether 8 bytes are the entry magic (a cheap look at a file, not a check of it).
bool has_entry_magic(const char* first8);

// Encodes header + payload into the file image.
std::vector<char> encode_entry(const EntryHeader& h, const std::vector<char>& payload);
// Checks the fixed header at the start of a file of file_bytes bytes (prefix holds its first
// `size` bytes, at least all of the header when the file has one): magic, version, header and
// payload lengths against the file's size. On kOk sets *header_bytes. Reads nothing else.
EntryStatus check_entry_prefix(const char* prefix, size_t size, uint64_t file_bytes,
                               uint32_t* header_bytes, std::string* reason);
// Decodes and checks a whole file image: the prefix checks, both checksums, the key (`expect`,
// optional, must match the stored one) and the payload (a cubin for the stored arch).
EntryStatus decode_entry(const std::vector<char>& image, const CacheKey* expect, EntryHeader* h,
                         std::vector<char>* payload, std::string* reason);

// ---------------------------------------------------------------------------------------------
// File names

// Whether s is a key as names spell it: 32 lower-case hex digits.
bool is_key_hex(const std::string& s);
// The key that is_key_hex text spells.
CacheKey key_from_hex(const std::string& hex);

std::string entry_file_name(const CacheKey& key);   // "<key>.gakc"
std::string lock_file_name(const CacheKey& key);    // "<key>.lock"
std::string source_file_name(const CacheKey& key);  // "<key>.cu"
// What a temp file becomes when it is renamed.
enum class TempOf { kEntry, kSource };
// ".<key>.tmp.<nonce>" (an entry) or ".<key>.cu.tmp.<nonce>" (a source).
std::string temp_file_name(const CacheKey& key, TempOf of, const std::string& nonce);
std::string probe_file_name(const std::string& nonce);  // ".probe.<nonce>"

// What a name in the cache directory is. Every name falls in exactly one kind.
enum class FileKind {
  kEntry,          // "<key>.gakc"
  kMisnamedEntry,  // "<anything else>.gakc" not starting with '.': listed, and reported as bad
  kLock,           // "<key>.lock"
  kSource,         // "<key>.cu"
  kTemp,           // starts with '.' and holds ".tmp.": a file being written, or left by a
                   // writer that died
  kProbe,          // ".probe.<nonce>" (without ".tmp."): a probe left by a process that died
  kOther           // not the cache's: the tools never remove it
};
// Classifies a file name (not a path). key_hex, optional, is set to the key of a kEntry, kLock or
// kSource name and cleared for the other kinds.
FileKind classify_file_name(const std::string& name, std::string* key_hex);
// Whether list(), evict() and the tool treat the file as an entry.
inline bool is_entry_kind(FileKind k) {
  return k == FileKind::kEntry || k == FileKind::kMisnamedEntry;
}

// An entry file's name without ".gakc" (a name without it is returned whole): what the tool shows
// as the key of an entry, a misnamed one included.
std::string entry_stem(const std::string& entry_name);
// The lock and source files beside an entry file, "<stem>.lock" and "<stem>.cu": removed with it.
std::string lock_file_of(const std::string& entry_name);
std::string source_file_of(const std::string& entry_name);

}  // namespace graphattn::detail
