// The disk tier of the kernel cache: one file per entry, written atomically, checked on every
// read. Also the reader used by graphattn-cache (list, show, verify, prune, clear).
//
// File layout (little-endian), "<key hex>.gakc":
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
// Beside it: "<key hex>.lock" (advisory lock), "<key hex>.cu" (dumped source).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/jit.hpp"

namespace graphattn::detail {

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

enum class EntryStatus { kOk, kMissing, kTruncated, kBadMagic, kBadVersion, kBadHeader,
                         kKeyMismatch, kBadChecksum, kIoError };
const char* to_string(EntryStatus s);

// Encodes header + payload into the file image.
std::vector<char> encode_entry(const EntryHeader& h, const std::vector<char>& payload);
// Decodes and checks a file image. `expect` (optional) must match the stored key.
EntryStatus decode_entry(const std::vector<char>& image, const CacheKey* expect, EntryHeader* h,
                         std::vector<char>* payload, std::string* reason);

// One file in the directory, as the tool sees it.
struct EntryInfo {
  std::string path;
  std::string key_hex;        // from the file name
  uint64_t file_bytes = 0;
  int64_t last_used_ms = 0;   // file modification time, refreshed on every disk hit
  EntryStatus status = EntryStatus::kOk;
  std::string reason;
  EntryHeader header;         // valid when status == kOk
  std::string source_path;    // dumped source, or ""
};

class DiskTier {
 public:
  using Warn = std::function<void(const std::string&)>;
  // Creates dir if needed and probes that it is writable; if not, usable() is false and `warn`
  // has been called once.
  DiskTier(std::string dir, uint64_t max_bytes, Warn warn);

  bool usable() const { return usable_; }
  const std::string& dir() const { return dir_; }

  // Reads and checks the entry for key; on kOk fills h and payload and marks it used.
  EntryStatus read(const CacheKey& key, EntryHeader* h, std::vector<char>* payload,
                   std::string* reason);
  // Writes atomically (temp file, fsync, rename, fsync dir). On failure the tier turns itself
  // off (with one warning) and returns false: the caller keeps working from memory.
  bool write(const EntryHeader& h, const std::vector<char>& payload);
  void write_source(const CacheKey& key, const std::string& text);

  // Advisory per-key lock across processes; released on destruction or when the holder dies.
  class Lock {
   public:
    Lock() = default;
    Lock(Lock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Lock& operator=(Lock&& o) noexcept {
      std::swap(fd_, o.fd_);
      return *this;
    }
    ~Lock();
    bool held() const { return fd_ >= 0; }

   private:
    friend class DiskTier;
    int fd_ = -1;
  };
  // Waits up to timeout; an unheld Lock means "compile without it".
  Lock lock(const CacheKey& key, std::chrono::milliseconds timeout);

  // Removes least recently used entries until the total is at most max_bytes, never `keep`.
  // Returns how many were removed.
  uint64_t evict(uint64_t max_bytes, const CacheKey* keep);

  // Every entry file, fully checked (status and reason filled), sorted by path.
  std::vector<EntryInfo> list() const;
  static EntryInfo inspect(const std::string& path);
  // Removes an entry with its lock and source files.
  static void remove_entry(const std::string& entry_path);
  // Removes temp files left by processes that died while writing, older than age.
  uint64_t remove_stale_temps(std::chrono::seconds age) const;

  std::string entry_path(const CacheKey& key) const;

 private:
  void disable(const std::string& why);
  std::string dir_;
  uint64_t max_bytes_;
  Warn warn_;
  bool usable_ = false;
};

int64_t now_unix_ms();

}  // namespace graphattn::detail
