#include "jit_cache/disk_tier.hpp"

#define XXH_INLINE_ALL
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

namespace graphattn::detail {
namespace {

constexpr char kMagic[8] = {'G', 'A', 'K', 'C', 'U', 'B', 'I', 'N'};
constexpr size_t kFixedHeader = 8 + 4 + 4 + 16 + 4 * 4 + 8 * 4;  // before the spec string
constexpr size_t kMaxSpecBytes = 256;
constexpr const char* kEntrySuffix = ".gakc";

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
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_key_hex(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool read_file(const std::string& path, std::vector<char>* out, int* err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    *err = errno;
    ::close(fd);
    return false;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  ::close(fd);
  return true;
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

bool make_dirs(const std::string& dir) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string strip_suffix(const std::string& path, const std::string& suffix) {
  return path.substr(0, path.size() - suffix.size());
}

}  // namespace

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* to_string(EntryStatus s) {
  switch (s) {
    case EntryStatus::kOk: return "ok";
    case EntryStatus::kMissing: return "missing";
    case EntryStatus::kTruncated: return "truncated";
    case EntryStatus::kBadMagic: return "bad magic";
    case EntryStatus::kBadVersion: return "format version mismatch";
    case EntryStatus::kBadHeader: return "bad header";
    case EntryStatus::kKeyMismatch: return "key mismatch";
    case EntryStatus::kBadChecksum: return "checksum mismatch";
    case EntryStatus::kIoError: return "I/O error";
  }
  return "?";
}

std::vector<char> encode_entry(const EntryHeader& h, const std::vector<char>& payload) {
  std::vector<char> out;
  out.reserve(kFixedHeader + h.spec.size() + 8 + payload.size());
  out.insert(out.end(), kMagic, kMagic + 8);
  put<uint32_t>(out, h.format_version);
  put<uint32_t>(out, static_cast<uint32_t>(kFixedHeader + h.spec.size() + 8));
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

EntryStatus decode_entry(const std::vector<char>& img, const CacheKey* expect, EntryHeader* h,
                         std::vector<char>* payload, std::string* reason) {
  auto fail = [&](EntryStatus s, const std::string& why) {
    if (reason) *reason = why;
    return s;
  };
  if (img.size() < 12) return fail(EntryStatus::kTruncated, "file of " + std::to_string(img.size()) + " bytes is shorter than a header");
  if (std::memcmp(img.data(), kMagic, 8) != 0) return fail(EntryStatus::kBadMagic, "not a graphattn cache entry (bad magic)");
  const uint32_t version = get<uint32_t>(img.data() + 8);
  if (version != kCacheFormatVersion)
    return fail(EntryStatus::kBadVersion, "format version " + std::to_string(version) +
                                              ", this build reads " +
                                              std::to_string(kCacheFormatVersion));
  if (img.size() < kFixedHeader + 8) return fail(EntryStatus::kTruncated, "header truncated");
  const uint32_t header_bytes = get<uint32_t>(img.data() + 12);
  const uint32_t spec_bytes = get<uint32_t>(img.data() + 44);
  if (spec_bytes > kMaxSpecBytes || header_bytes != kFixedHeader + spec_bytes + 8)
    return fail(EntryStatus::kBadHeader, "inconsistent header lengths");
  if (img.size() < header_bytes) return fail(EntryStatus::kTruncated, "header truncated");
  const uint64_t stored_header_hash = get<uint64_t>(img.data() + header_bytes - 8);
  if (XXH3_64bits(img.data(), header_bytes - 8) != stored_header_hash)
    return fail(EntryStatus::kBadChecksum, "header checksum mismatch");
  EntryHeader out;
  out.format_version = version;
  out.key.high = get<uint64_t>(img.data() + 16);
  out.key.low = get<uint64_t>(img.data() + 24);
  out.arch = get<uint32_t>(img.data() + 32);
  out.nvrtc_major = get<uint32_t>(img.data() + 36);
  out.nvrtc_minor = get<uint32_t>(img.data() + 40);
  out.compiled_at_ms = get<int64_t>(img.data() + 48);
  out.compile_us = get<uint64_t>(img.data() + 56);
  out.payload_bytes = get<uint64_t>(img.data() + 64);
  out.payload_hash = get<uint64_t>(img.data() + 72);
  out.spec.assign(img.data() + kFixedHeader, spec_bytes);
  if (expect && out.key != *expect)
    return fail(EntryStatus::kKeyMismatch, "stored key " + out.key.hex() + " differs from the file's key");
  if (img.size() - header_bytes != out.payload_bytes)
    return fail(img.size() - header_bytes < out.payload_bytes ? EntryStatus::kTruncated
                                                              : EntryStatus::kBadHeader,
                "payload is " + std::to_string(img.size() - header_bytes) +
                    " bytes, header says " + std::to_string(out.payload_bytes));
  if (XXH3_64bits(img.data() + header_bytes, out.payload_bytes) != out.payload_hash)
    return fail(EntryStatus::kBadChecksum, "payload checksum mismatch");
  if (payload) payload->assign(img.begin() + header_bytes, img.end());
  if (h) *h = std::move(out);
  return EntryStatus::kOk;
}

DiskTier::DiskTier(std::string dir, uint64_t max_bytes, Warn warn)
    : dir_(std::move(dir)), max_bytes_(max_bytes), warn_(std::move(warn)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (!make_dirs(dir_)) {
    disable("cannot create cache directory " + dir_ + ": " + std::strerror(errno));
    return;
  }
  // Probe: a directory can exist and still refuse writes (read-only mount, permissions).
  const std::string probe = dir_ + "/.probe." + std::to_string(::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    disable("cache directory " + dir_ + " is not writable (" + std::strerror(errno) + ")");
    return;
  }
  ::close(fd);
  ::unlink(probe.c_str());
  usable_ = true;
}

void DiskTier::disable(const std::string& why) {
  usable_ = false;
  if (warn_) warn_("graphattn: " + why + "; the kernel cache runs in memory only");
}

std::string DiskTier::entry_path(const CacheKey& key) const {
  return dir_ + "/" + key.hex() + kEntrySuffix;
}

EntryStatus DiskTier::read(const CacheKey& key, EntryHeader* h, std::vector<char>* payload,
                           std::string* reason) {
  const std::string path = entry_path(key);
  std::vector<char> img;
  int err = 0;
  if (!read_file(path, &img, &err)) {
    if (err == ENOENT) return EntryStatus::kMissing;
    if (reason) *reason = std::strerror(err);
    return EntryStatus::kIoError;
  }
  const EntryStatus s = decode_entry(img, &key, h, payload, reason);
  if (s == EntryStatus::kOk && usable_) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return s;
}

bool DiskTier::write(const EntryHeader& h, const std::vector<char>& payload) {
  if (!usable_) return false;
  const std::vector<char> img = encode_entry(h, payload);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = dir_ + "/." + h.key.hex() + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    disable("cannot write to cache directory " + dir_ + " (" + std::strerror(errno) + ")");
    return false;
  }
  const bool ok = write_all(fd, img.data(), img.size()) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), entry_path(h.key).c_str()) != 0) {
    ::unlink(tmp.c_str());
    disable("cannot write to cache directory " + dir_ + " (" + std::strerror(ok ? errno : saved) + ")");
    return false;
  }
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
}

void DiskTier::write_source(const CacheKey& key, const std::string& text) {
  if (!usable_) return;
  const std::string path = dir_ + "/" + key.hex() + ".cu";
  const std::string tmp = dir_ + "/." + key.hex() + ".cu.tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool ok = write_all(fd, text.data(), text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

DiskTier::Lock::~Lock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

DiskTier::Lock DiskTier::lock(const CacheKey& key, std::chrono::milliseconds timeout) {
  Lock l;
  if (!usable_) return l;
  const std::string path = dir_ + "/" + key.hex() + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return l;
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

std::vector<EntryInfo> DiskTier::list() const {
  std::vector<EntryInfo> out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || !ends_with(name, kEntrySuffix)) continue;
    out.push_back(inspect(dir_ + "/" + name));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(),
            [](const EntryInfo& a, const EntryInfo& b) { return a.path < b.path; });
  return out;
}

EntryInfo DiskTier::inspect(const std::string& path) {
  EntryInfo info;
  info.path = path;
  const size_t slash = path.rfind('/');
  const std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
  info.key_hex = strip_suffix(base, kEntrySuffix);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    info.status = EntryStatus::kMissing;
    info.reason = std::strerror(errno);
    return info;
  }
  info.file_bytes = static_cast<uint64_t>(st.st_size);
  info.last_used_ms = mtime_ms(st);
  const std::string src = strip_suffix(path, kEntrySuffix) + ".cu";
  if (::access(src.c_str(), R_OK) == 0) info.source_path = src;
  std::vector<char> img;
  int err = 0;
  if (!read_file(path, &img, &err)) {
    info.status = EntryStatus::kIoError;
    info.reason = std::strerror(err);
    return info;
  }
  if (!is_key_hex(info.key_hex)) {
    info.status = EntryStatus::kKeyMismatch;
    info.reason = "file name is not a key";
    return info;
  }
  CacheKey expect;
  expect.high = std::stoull(info.key_hex.substr(0, 16), nullptr, 16);
  expect.low = std::stoull(info.key_hex.substr(16), nullptr, 16);
  info.status = decode_entry(img, &expect, &info.header, nullptr, &info.reason);
  return info;
}

void DiskTier::remove_entry(const std::string& entry_path) {
  const std::string stem = strip_suffix(entry_path, kEntrySuffix);
  ::unlink(entry_path.c_str());
  ::unlink((stem + ".cu").c_str());
  ::unlink((stem + ".lock").c_str());
}

uint64_t DiskTier::evict(uint64_t max_bytes, const CacheKey* keep) {
  std::vector<EntryInfo> all;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return 0;
  uint64_t total = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || !ends_with(name, kEntrySuffix)) continue;
    struct stat st {};
    const std::string path = dir_ + "/" + name;
    if (::stat(path.c_str(), &st) != 0) continue;
    EntryInfo info;
    info.path = path;
    info.key_hex = strip_suffix(name, kEntrySuffix);
    info.file_bytes = static_cast<uint64_t>(st.st_size);
    info.last_used_ms = mtime_ms(st);
    total += info.file_bytes;
    all.push_back(std::move(info));
  }
  ::closedir(d);
  if (total <= max_bytes) return 0;
  std::sort(all.begin(), all.end(), [](const EntryInfo& a, const EntryInfo& b) {
    return a.last_used_ms != b.last_used_ms ? a.last_used_ms < b.last_used_ms : a.path < b.path;
  });
  const std::string keep_hex = keep ? keep->hex() : "";
  uint64_t removed = 0;
  for (const auto& e : all) {
    if (total <= max_bytes) break;
    if (e.key_hex == keep_hex) continue;
    remove_entry(e.path);
    total -= e.file_bytes;
    ++removed;
  }
  return removed;
}

uint64_t DiskTier::remove_stale_temps(std::chrono::seconds age) const {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return 0;
  uint64_t removed = 0;
  const int64_t cutoff = now_unix_ms() - age.count() * 1000;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 2 || name[0] != '.' || name.find(".tmp.") == std::string::npos) continue;
    const std::string path = dir_ + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && mtime_ms(st) <= cutoff && ::unlink(path.c_str()) == 0)
      ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace graphattn::detail
