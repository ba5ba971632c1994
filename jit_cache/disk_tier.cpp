// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/disk_tier.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "core/text.hpp"

namespace graphattn::detail {
namespace {

// Flags of every open of a file in the cache directory.
constexpr int kOpenFlags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;

// Reads up to size bytes at the file's current offset; returns how many it got (fewer at end of
// file), or -1 on an error.
ssize_t read_up_to(int fd, char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

int64_t mtime_ms(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

// Creates dir and its missing parents. What it creates gets exactly `mode` (the last component)
// or 0700 (parents), whatever the umask; *created says whether dir itself was made here. False
// with errno set on failure.
bool make_dirs(const std::string& dir, mode_t mode, bool* created) {
  *created = false;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string cur = dir.substr(0, pos);
    if (cur.empty()) continue;
    const mode_t m = pos == std::string::npos ? mode : 0700;
    if (::mkdir(cur.c_str(), m) == 0) {
      *created = pos == std::string::npos;
      const int fd = ::open(cur.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      struct stat st {};
      if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid()) ::fchmod(fd, m);
      if (fd >= 0) ::close(fd);
    } else if (errno != EEXIST) {
      return false;
    }
  }
  return true;
}

// Opens `name` in dirfd for reading if it is a regular file, never following a link and never
// blocking. Returns the descriptor, or -1 with *st filled (not a regular file) or *err set.
int open_regular(int dirfd, const std::string& name, struct stat* st, int* err) {
  *err = 0;
  if (::fstatat(dirfd, name.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) {
    *err = errno;
    return -1;
  }
  if (!S_ISREG(st->st_mode)) return -1;
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | kOpenFlags);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  // Swapped between the two looks: judge what was opened.
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    *err = S_ISREG(st->st_mode) ? errno : 0;
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads and checks one entry file: type, trust, size, then the fixed header before the rest.
EntryStatus load_entry(int dirfd, const std::string& name, const struct stat& dir_st,
                       const TrustPolicy& policy, const CacheKey* expect, bool touch,
                       EntryHeader* h, std::vector<char>* payload, struct stat* st,
                       std::string* reason) {
  auto fail = [&](EntryStatus s, const std::string& why) {
    if (reason) *reason = why;
    return s;
  };
  int err = 0;
  const int fd = open_regular(dirfd, name, st, &err);
  if (fd < 0) {
    if (err == ENOENT) return fail(EntryStatus::kMissing, std::strerror(err));
    if (err != 0) return fail(EntryStatus::kIoError, std::strerror(err));
    return fail(EntryStatus::kNotRegular, std::string("is ") + file_type_name(st->st_mode));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const std::string untrusted = file_trust_problem(*st, dir_st, policy);
  if (!untrusted.empty()) return fail(EntryStatus::kUntrusted, untrusted);
  const uint64_t file_bytes = static_cast<uint64_t>(st->st_size);
  if (file_bytes > kMaxHeaderBytes + kMaxPayloadBytes)
    return fail(EntryStatus::kTooLarge,
                "file of " + std::to_string(file_bytes) + " bytes is larger than any entry (" +
                    std::to_string(kMaxHeaderBytes + kMaxPayloadBytes) + " bytes at most)");
  std::vector<char> img(std::min<uint64_t>(file_bytes, kMaxHeaderBytes));
  ssize_t got = read_up_to(fd, img.data(), img.size());
  if (got < 0) return fail(EntryStatus::kIoError, std::strerror(errno));
  img.resize(static_cast<size_t>(got));
  uint32_t header_bytes = 0;
  const EntryStatus prefix =
      check_entry_prefix(img.data(), img.size(), file_bytes, &header_bytes, reason);
  if (prefix != EntryStatus::kOk) return prefix;
  // The lengths agree with the file's size, which is capped: now the rest may be read.
  const size_t have = img.size();
  img.resize(file_bytes);
  got = read_up_to(fd, img.data() + have, img.size() - have);
  if (got < 0) return fail(EntryStatus::kIoError, std::strerror(errno));
  if (have + static_cast<size_t>(got) != img.size())
    return fail(EntryStatus::kTruncated, "the file shrank while it was read");
  const EntryStatus s = decode_entry(img, expect, h, payload, reason);
  if (s == EntryStatus::kOk && touch) ::futimens(fd, nullptr);
  return s;
}

// Everything list() and inspect() say of one file named like an entry.
EntryInfo inspect_at(int dirfd, const std::string& dir, const std::string& name,
                     const struct stat& dir_st, const TrustPolicy& policy) {
  EntryInfo info;
  info.path = dir + "/" + name;
  info.name = name;
  info.key_hex = entry_stem(name);
  struct stat src {};
  const std::string source = source_file_of(name);
  if (::fstatat(dirfd, source.c_str(), &src, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(src.st_mode))
    info.source_path = dir + "/" + source;
  const bool named = is_key_hex(info.key_hex);
  CacheKey expect;
  if (named) expect = key_from_hex(info.key_hex);
  struct stat st {};
  info.status = load_entry(dirfd, name, dir_st, policy, named ? &expect : nullptr, false,
                           &info.header, nullptr, &st, &info.reason);
  info.file_bytes = static_cast<uint64_t>(st.st_size);
  info.last_used_ms = mtime_ms(st);
  info.owner = st.st_uid;
  info.mode = st.st_mode;
  if (info.status == EntryStatus::kOk && !named) {
    info.status = EntryStatus::kKeyMismatch;
    info.reason = "file name is not a key";
  }
  return info;
}

// The names in an open directory, through a descriptor of its own (threads may list at once).
std::vector<std::string> names_in(int dir_fd) {
  std::vector<std::string> out;
  if (dir_fd < 0) return out;
  const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return out;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return out;
  }
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

DiskTier::DiskTier(std::string dir, Warn warn, bool shared, Access access)
    : dir_(std::move(dir)), warn_(std::move(warn)), policy_(TrustPolicy::current(shared)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  const bool use = access == Access::kUse;
  if (access == Access::kReadOnly) {
    dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) return;  // not installed: nothing to say
    trust_problem_ = ::fstat(dir_fd_, &dir_st_) != 0
                         ? "cannot stat " + printable(dir_, 4096) + ": " + std::strerror(errno)
                         : directory_trust_problem(dir_, dir_st_, policy_);
    if (!trust_problem_.empty()) {
      if (warn_)
        warn_("graphattn: " + trust_problem_ + "; the prebuilt kernels there are not used");
      return;
    }
    read_only_why_ = "prebuilt kernels of an installed package, never written";
    usable_ = true;
    return;
  }
  if (dir_.empty()) {
    if (use) disable("no cache directory is set");
    return;
  }
  bool created = false;
  if (use && !make_dirs(dir_, policy_.dir_mode(), &created)) {
    disable("cannot create cache directory " + printable(dir_, 4096) + ": " + std::strerror(errno));
    return;
  }
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    if (use)
      disable("cannot open cache directory " + printable(dir_, 4096) + ": " + std::strerror(errno));
    return;
  }
  if (::fstat(dir_fd_, &dir_st_) != 0) {
    trust_problem_ =
        "cannot stat cache directory " + printable(dir_, 4096) + ": " + std::strerror(errno);
  } else {
    trust_problem_ = directory_trust_problem(dir_, dir_st_, policy_);
  }
  if (use && !trust_problem_.empty()) {
    disable(trust_problem_);
    return;
  }
  // Probe: a directory can exist and still refuse writes (read-only mount, permissions).
  const std::string probe = probe_file_name(random_hex());
  const int fd = ::openat(dir_fd_, probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | kOpenFlags, 0600);
  if (fd < 0) {
    // A trusted directory that refuses writes (a read-only image layer, a read-only mount) still
    // serves its verified entries; new kernels go elsewhere (KernelCache's next layer, memory).
    read_only_why_ = std::strerror(errno);
    usable_ = use;
    return;
  }
  ::close(fd);
  ::unlinkat(dir_fd_, probe.c_str(), 0);
  usable_ = true;
  writable_ = true;
  if (use && !has_marker() && (created || file_names().empty() || looks_like_old_cache()))
    write_marker();
}

bool DiskTier::has_marker() const {
  struct stat st {};
  return stat_name(kCacheMarkerName, &st) && S_ISREG(st.st_mode);
}

bool DiskTier::looks_like_old_cache() const {
  bool entry = false;
  for (const std::string& name : file_names()) {
    const FileKind kind = classify_file_name(name, nullptr);
    if (kind == FileKind::kOther) return false;
    if (kind != FileKind::kEntry) continue;
    int err = 0;
    struct stat st {};
    const int fd = open_regular(dir_fd_, name, &st, &err);
    if (fd < 0) return false;
    char magic[8] = {};
    const ssize_t got = read_up_to(fd, magic, sizeof magic);
    ::close(fd);
    if (got != static_cast<ssize_t>(sizeof magic) || !has_entry_magic(magic)) return false;
    entry = true;
  }
  return entry;
}

bool DiskTier::write_marker() {
  const int fd = ::openat(dir_fd_, kCacheMarkerName, O_WRONLY | O_CREAT | O_EXCL | kOpenFlags,
                          policy_.file_mode());
  if (fd < 0) return false;
  const std::string text = "graphattn kernel cache\ncache-format " +
                           std::to_string(kCacheFormatVersion) + "\ncreated " +
                           std::to_string(now_unix_ms()) + "\n";
  const bool ok = ::fchmod(fd, policy_.file_mode()) == 0 && write_all(fd, text.data(), text.size());
  ::close(fd);
  return ok;
}

DiskTier::~DiskTier() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void DiskTier::disable(const std::string& why) {
  usable_ = false;
  writable_ = false;
  if (warn_) warn_("graphattn: " + why + "; the kernel cache runs in memory only");
}

std::string DiskTier::entry_path(const CacheKey& key) const {
  return dir_ + "/" + entry_file_name(key);
}

EntryStatus DiskTier::read(const CacheKey& key, EntryHeader* h, std::vector<char>* payload,
                           std::string* reason) {
  if (!usable_ || !trust_problem_.empty()) return EntryStatus::kMissing;
  struct stat st {};
  // The modification time records the last use (for eviction): only where this process writes.
  return load_entry(dir_fd_, entry_file_name(key), dir_st_, policy_, &key, writable_, h, payload,
                    &st, reason);
}

bool DiskTier::write(const EntryHeader& h, const std::vector<char>& payload) {
  if (!writable_) return false;
  const std::vector<char> img = encode_entry(h, payload);
  const std::string name = entry_file_name(h.key);
  const std::string tmp = temp_file_name(h.key, TempOf::kEntry, random_hex());
  const char* step = "create a temp file";
  bool ok = false;
  const int fd =
      ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | kOpenFlags, policy_.file_mode());
  if (fd >= 0) {
    ok = ::fchmod(fd, policy_.file_mode()) == 0 && write_all(fd, img.data(), img.size()) &&
         ::fsync(fd) == 0;
    step = "write a temp file";
    const int saved = errno;
    ::close(fd);
    errno = saved;
    if (ok) {
      ok = ::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) == 0;
      step = "rename the temp file over the entry";
    }
    if (!ok) {
      const int saved2 = errno;
      ::unlinkat(dir_fd_, tmp.c_str(), 0);
      errno = saved2;
    }
  }
  if (!ok) {
    if (warn_)
      warn_("graphattn: could not write cache entry " + name + " in " + printable(dir_, 4096) +
            " (" + step + ": " + std::strerror(errno) + "); this kernel stays in memory only");
    return false;
  }
  ::fsync(dir_fd_);
  return true;
}

void DiskTier::write_source(const CacheKey& key, const std::string& text) {
  if (!writable_) return;
  const std::string tmp = temp_file_name(key, TempOf::kSource, random_hex());
  const int fd =
      ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | kOpenFlags, policy_.file_mode());
  if (fd < 0) return;
  const bool ok = ::fchmod(fd, policy_.file_mode()) == 0 && write_all(fd, text.data(), text.size());
  ::close(fd);
  if (!ok || ::renameat(dir_fd_, tmp.c_str(), dir_fd_, source_file_name(key).c_str()) != 0)
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
}

DiskTier::Lock::~Lock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

DiskTier::Lock DiskTier::lock(const CacheKey& key, std::chrono::milliseconds timeout) {
  Lock l;
  if (!writable_) return l;
  // Read-only is enough for flock, and lets the members of a shared directory's group lock a
  // file that another member created.
  const int fd = ::openat(dir_fd_, lock_file_name(key).c_str(), O_RDONLY | O_CREAT | kOpenFlags,
                          policy_.file_mode());
  if (fd < 0) return l;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !file_trust_problem(st, dir_st_, policy_).empty()) {
    ::close(fd);
    return l;
  }
  if (st.st_uid == policy_.uid && (st.st_mode & 07777) != policy_.file_mode())
    ::fchmod(fd, policy_.file_mode());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      l.fd_ = fd;
      return l;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (warn_)
        warn_("graphattn: waited " + std::to_string(timeout.count()) + " ms for the lock on " +
              key.hex() + "; compiling without it");
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  ::close(fd);
  return l;
}

std::vector<std::string> DiskTier::file_names() const { return names_in(dir_fd_); }

bool DiskTier::read_text(const std::string& name, size_t max_bytes, std::string* out) const {
  int err = 0;
  struct stat st {};
  const int fd = dir_fd_ < 0 ? -1 : open_regular(dir_fd_, name, &st, &err);
  if (fd < 0) return false;
  out->resize(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), max_bytes));
  const ssize_t got = read_up_to(fd, out->data(), out->size());
  ::close(fd);
  if (got < 0) return false;
  out->resize(static_cast<size_t>(got));
  return true;
}

bool DiskTier::stat_name(const std::string& name, struct stat* st) const {
  return dir_fd_ >= 0 && ::fstatat(dir_fd_, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0;
}

std::vector<EntryInfo> DiskTier::list() const {
  std::vector<EntryInfo> out;
  for (const auto& name : file_names())
    if (is_entry_kind(classify_file_name(name, nullptr))) out.push_back(inspect_name(name));
  return out;
}

EntryInfo DiskTier::inspect_name(const std::string& name) const {
  return inspect_at(dir_fd_, dir_, name, dir_st_, policy_);
}

EntryInfo DiskTier::inspect(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat dir_st {};
  if (fd < 0 || ::fstat(fd, &dir_st) != 0) {
    EntryInfo info;
    info.path = path;
    info.name = name;
    info.status = EntryStatus::kIoError;
    info.reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return info;
  }
  EntryInfo info = inspect_at(fd, dir, name, dir_st, TrustPolicy::current(false));
  info.path = path;
  ::close(fd);
  return info;
}

Removal DiskTier::remove(const std::string& name) const {
  Removal r;
  if (dir_fd_ < 0) return r;
  int rc = ::unlinkat(dir_fd_, name.c_str(), 0);
  if (rc != 0 && (errno == EISDIR || errno == EPERM)) {
    struct stat st {};
    if (stat_name(name, &st) && S_ISDIR(st.st_mode))
      rc = ::unlinkat(dir_fd_, name.c_str(), AT_REMOVEDIR);
    else
      errno = EPERM;
  }
  if (rc == 0)
    r.removed = true;
  else if (errno != ENOENT)
    r.error = name + ": " + std::strerror(errno);
  return r;
}

Removal DiskTier::remove_entry(const std::string& entry_name) const {
  const Removal r = remove(entry_name);
  remove(source_file_of(entry_name));
  remove(lock_file_of(entry_name));
  return r;
}

std::vector<std::string> DiskTier::remove_orphan_locks() const {
  std::vector<std::string> removed;
  const std::vector<std::string> names = file_names();
  for (const auto& name : names) {
    std::string key_hex;
    if (classify_file_name(name, &key_hex) != FileKind::kLock) continue;
    if (std::binary_search(names.begin(), names.end(), entry_file_name(key_from_hex(key_hex))))
      continue;
    int err = 0;
    struct stat st {};
    const int fd = open_regular(dir_fd_, name, &st, &err);
    if (fd < 0) continue;
    // Held: a compile in progress; its entry is about to appear.
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::unlinkat(dir_fd_, name.c_str(), 0) == 0)
      removed.push_back(name);
    ::close(fd);
  }
  return removed;
}

uint64_t DiskTier::evict(uint64_t max_bytes, const CacheKey* keep) {
  if (!writable_) return 0;
  std::vector<EntryInfo> all;
  uint64_t total = 0;
  for (const auto& name : file_names()) {
    struct stat st {};
    if (!is_entry_kind(classify_file_name(name, nullptr)) || !stat_name(name, &st) ||
        !S_ISREG(st.st_mode))
      continue;
    EntryInfo info;
    info.name = name;
    info.key_hex = entry_stem(name);
    info.file_bytes = static_cast<uint64_t>(st.st_size);
    info.last_used_ms = mtime_ms(st);
    total += info.file_bytes;
    all.push_back(std::move(info));
  }
  if (total <= max_bytes) return 0;
  std::sort(all.begin(), all.end(), [](const EntryInfo& a, const EntryInfo& b) {
    return a.last_used_ms != b.last_used_ms ? a.last_used_ms < b.last_used_ms : a.name < b.name;
  });
  const std::string keep_hex = keep ? keep->hex() : "";
  uint64_t removed = 0;
  for (const auto& e : all) {
    if (total <= max_bytes) break;
    if (e.key_hex == keep_hex) continue;
    if (!remove_entry(e.name).removed) continue;
    total -= e.file_bytes;
    ++removed;
  }
  return removed;
}

uint64_t DiskTier::remove_stale_temps(std::chrono::seconds age) const {
  uint64_t removed = 0;
  const int64_t cutoff = now_unix_ms() - age.count() * 1000;
  for (const auto& name : file_names()) {
    if (classify_file_name(name, nullptr) != FileKind::kTemp) continue;
    struct stat st {};
    if (stat_name(name, &st) && mtime_ms(st) <= cutoff && remove(name).removed) ++removed;
  }
  return removed;
}

std::vector<std::string> DiskTier::repair_modes() {
  std::vector<std::string> changed;
  if (dir_fd_ < 0) return changed;
  const mode_t forbidden = policy_.shared ? S_IWOTH : (S_IWGRP | S_IWOTH);
  auto fix = [&](int fd, const struct stat& st, const std::string& path) {
    if (st.st_uid != policy_.uid || !(st.st_mode & forbidden)) return;
    const mode_t to = st.st_mode & 07777 & ~forbidden;
    if (::fchmod(fd, to) == 0)
      changed.push_back(path + ": " + mode_text(st.st_mode) + " -> " + mode_text(to));
  };
  fix(dir_fd_, dir_st_, dir_);
  for (const auto& name : file_names()) {
    int err = 0;
    struct stat st {};
    const int fd = open_regular(dir_fd_, name, &st, &err);
    if (fd < 0) continue;
    fix(fd, st, dir_ + "/" + name);
    ::close(fd);
  }
  if (::fstat(dir_fd_, &dir_st_) == 0)
    trust_problem_ = directory_trust_problem(dir_, dir_st_, policy_);
  return changed;
}

std::string random_hex() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    std::random_device rd;
    v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace graphattn::detail
