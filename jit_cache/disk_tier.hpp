// SPDX-License-Identifier: Apache-2.0
// The disk tier of the kernel cache: one file per entry, written atomically, checked on every
// read. Also the inspector behind CacheDirectory (jit.hpp), which graphattn-cache uses. What the
// files hold and how they are named: jit_cache/entry_format.hpp.
//
// Trust (jit_cache/trust.hpp): the tier loads only from a directory that nobody else can write,
// and only regular files that this user (or root) owns. Every file is opened relative to the
// directory's handle, never through a symbolic link (O_NOFOLLOW) and without blocking
// (O_NONBLOCK: a FIFO named like an entry cannot hang a reader); files are created with O_EXCL
// under unpredictable names and with an explicit mode (0600; 0640 when shared), whatever the
// umask. An entry's fixed header is read and its lengths checked against the file's size before
// anything larger is allocated, and its payload must be a cubin for its arch.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/jit.hpp"
#include "jit_cache/entry_format.hpp"
#include "jit_cache/trust.hpp"

namespace graphattn::detail {

// One file in the directory, as the inspector sees it (CacheEntryInfo is its public form).
struct EntryInfo {
  std::string path;
  std::string name;     // file name inside the directory
  std::string key_hex;  // from the file name
  uint64_t file_bytes = 0;
  int64_t last_used_ms = 0;  // file modification time, refreshed on every disk hit
  uid_t owner = 0;           // of the file itself (never of a link's target)
  mode_t mode = 0;
  EntryStatus status = EntryStatus::kOk;
  std::string reason;
  EntryHeader header;       // valid when status == kOk
  std::string source_path;  // dumped source, or ""
};

// What a removal did: removed, or not there (error empty), or failed (error says why).
struct Removal {
  bool removed = false;
  std::string error;
};

class DiskTier {
 public:
  using Warn = std::function<void(const std::string&)>;
  // kUse: the kernel cache's tier. Creates the directory (and missing parents) if needed, then
  //   requires it trusted; otherwise usable() is false and `warn` has been called once with the
  //   path, the owner and mode found and what is required. A trusted directory that refuses
  //   writes (a read-only image layer or mount) is usable but not writable(): it serves its
  //   verified entries and is never written, locked, touched or evicted.
  // kInspect: graphattn-cache's view. Opens an existing directory whatever its owner and mode
  //   (trust_problem() says what is wrong) and never creates one; usable() means writable.
  // kReadOnly: a layer of prebuilt kernels installed with a package (the graphattn-kernels
  //   wheel): an existing trusted directory that serves its verified entries and is never
  //   created, written, locked, touched or evicted, even where this user could write it.
  enum class Access { kUse, kInspect, kReadOnly };
  DiskTier(std::string dir, Warn warn, bool shared, Access access = Access::kUse);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  bool usable() const { return usable_; }
  bool writable() const { return writable_; }
  // Why a usable directory is read-only ("Read-only file system"); "" when writable.
  const std::string& read_only_why() const { return read_only_why_; }
  bool exists() const { return dir_fd_ >= 0; }
  const std::string& dir() const { return dir_; }
  const TrustPolicy& policy() const { return policy_; }
  // "" when the directory may be loaded from.
  const std::string& trust_problem() const { return trust_problem_; }

  // Reads and checks the entry for key; on kOk fills h and payload and marks it used. Only in a
  // usable kUse tier (kMissing otherwise).
  EntryStatus read(const CacheKey& key, EntryHeader* h, std::vector<char>* payload,
                   std::string* reason);
  // Writes atomically (temp file, fsync, rename, fsync dir). On failure that one entry is not
  // written: `warn` says why and the tier stays on for the next.
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

  // Every file named like an entry, fully checked (status and reason filled), sorted by path.
  std::vector<EntryInfo> list() const;
  // One file of the directory, checked like list() does.
  EntryInfo inspect_name(const std::string& name) const;
  // A file anywhere, checked against its own directory and this user (for tests).
  static EntryInfo inspect(const std::string& path);
  // Names in the directory other than "." and "..", sorted.
  std::vector<std::string> file_names() const;
  // A regular file of the directory by name (a dumped source), at most max_bytes of it; false
  // when it is not a regular file or cannot be read.
  bool read_text(const std::string& name, size_t max_bytes, std::string* out) const;
  // lstat of a name in the directory.
  bool stat_name(const std::string& name, struct stat* st) const;
  // Removes a file or an empty directory by name; never follows a link.
  Removal remove(const std::string& name) const;
  // Removes an entry with its lock and source files; the result is the entry's.
  Removal remove_entry(const std::string& entry_name) const;
  // Removes lock files without an entry that nobody holds; returns their names.
  std::vector<std::string> remove_orphan_locks() const;
  // Removes temp files left by processes that died while writing, older than age.
  uint64_t remove_stale_temps(std::chrono::seconds age) const;
  // Takes write permission for group and others away from the directory and the files in it
  // that this user owns, where the trust policy forbids it; returns what it changed ("path:
  // 0775 -> 0755") and re-checks the directory.
  std::vector<std::string> repair_modes();

  std::string entry_path(const CacheKey& key) const;

  // The marker (graphattn::kCacheMarkerName, jit.hpp) that says graphattn made this directory:
  // written when the tier creates the directory or finds it empty, and when it adopts a cache of an
  // earlier version (below). graphattn-cache's clear, prune and verify --fix remove files only from
  // a directory that is a cache by one of these two rules, unless given --force.
  bool has_marker() const;
  // A directory without the marker that an earlier version made: every name in it is one that
  // graphattn writes, and it holds at least one entry that starts with graphattn's entry magic.
  bool looks_like_old_cache() const;
  bool is_cache() const { return has_marker() || looks_like_old_cache(); }

 private:
  bool write_marker();
  void disable(const std::string& why);
  std::string dir_;
  Warn warn_;
  TrustPolicy policy_;
  int dir_fd_ = -1;
  struct stat dir_st_ {};
  std::string trust_problem_;
  bool usable_ = false;
  bool writable_ = false;
  std::string read_only_why_;
};

using graphattn::kCacheMarkerName;  // the marker file (jit.hpp)

int64_t now_unix_ms();

// 16 hex digits nobody can predict (getrandom): temp and probe names cannot be planted in
// advance, and a remote lock's owner token cannot be guessed.
std::string random_hex();

}  // namespace graphattn::detail
