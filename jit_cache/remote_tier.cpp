#include "jit_cache/remote_tier.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "jit_cache/disk_tier.hpp"
#include "jit_cache/sha256.hpp"

namespace graphattn::detail {

namespace {

constexpr char kSignedMagic[] = "GASIGN01";  // 8 bytes, then the tag, then the entry image
constexpr size_t kMagicBytes = 8;
constexpr size_t kTagBytes = 32;
constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 4096;
constexpr std::chrono::milliseconds kMaxBackoff{600000};

const std::string kEntryPrefix = "graphattn:kernel:v" + std::to_string(kCacheFormatVersion) + ":";
const std::string kEntryPattern = kEntryPrefix + "*";

// What the tag covers: a domain string, the Redis name and the image, so that a signed value is
// valid under its own name only.
Sha256Digest value_tag(const std::string& secret, const std::string& name, std::string_view image) {
  return hmac_sha256(secret, {std::string_view("graphattn-remote-v1\0", 20), name,
                              std::string_view("\0", 1), image});
}

using Clock = std::chrono::steady_clock;

}  // namespace

std::string read_signing_key(const std::string& path) {
  auto fail = [&](const std::string& why) -> std::string {
    throw Error("GRAPHATTN_CACHE_SIGNING_KEY '" + printable(path, 4096) + "': " + why +
                "; it must name a regular file, writable by its owner only, holding a secret of "
                "at least " +
                std::to_string(kMinSecretBytes) + " bytes (e.g. openssl rand -hex 32 > FILE)");
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(std::strerror(errno));
  struct stat st {};
  std::string secret;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return fail(std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(std::string("it is ") + file_type_name(st.st_mode));
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    ::close(fd);
    return fail("it is writable by group or others (mode " + mode_text(st.st_mode) +
                "): anyone who can change it can sign kernels");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxSecretBytes) {
    ::close(fd);
    return fail("it holds " + std::to_string(st.st_size) + " bytes, more than " +
                std::to_string(kMaxSecretBytes));
  }
  secret.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = ::read(fd, &secret[got], secret.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  secret.resize(got);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t'))
    secret.pop_back();
  if (secret.size() < kMinSecretBytes)
    return fail("it holds " + std::to_string(secret.size()) +
                " bytes (trailing newlines and "
                "spaces not counted)");
  return secret;
}

// ---------------------------------------------------------------------------------------------
// Values

std::string remote_entry_name(const CacheKey& key) { return kEntryPrefix + key.hex(); }

std::string remote_lock_name(const CacheKey& key) { return "graphattn:lock:" + key.hex(); }

const char* remote_entry_pattern() { return kEntryPattern.c_str(); }

bool key_of_remote_name(const std::string& name, CacheKey* key) {
  if (name.compare(0, kEntryPrefix.size(), kEntryPrefix) != 0) return false;
  const std::string hex = name.substr(kEntryPrefix.size());
  if (!is_key_hex(hex)) return false;
  if (key) *key = key_from_hex(hex);
  return true;
}

std::string encode_remote_value(const EntryHeader& h, const std::vector<char>& payload,
                                const std::string& signing_key) {
  const std::vector<char> image = encode_entry(h, payload);
  std::string out;
  if (!signing_key.empty()) {
    const Sha256Digest tag = value_tag(signing_key, remote_entry_name(h.key),
                                       std::string_view(image.data(), image.size()));
    out.append(kSignedMagic, kMagicBytes);
    out.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  }
  out.append(image.data(), image.size());
  return out;
}

bool decode_remote_value(const std::string& value, const CacheKey& expect,
                         const std::string& signing_key, EntryHeader* h, std::vector<char>* payload,
                         std::string* reason) {
  auto reject = [&](const std::string& why) {
    if (reason) *reason = why;
    return false;
  };
  std::string_view image(value);
  const bool is_signed = value.size() >= kMagicBytes + kTagBytes &&
                         value.compare(0, kMagicBytes, kSignedMagic, kMagicBytes) == 0;
  if (is_signed) image.remove_prefix(kMagicBytes + kTagBytes);
  if (!signing_key.empty()) {
    if (!is_signed)
      return reject("unsigned value, and signing is on (GRAPHATTN_CACHE_SIGNING_KEY)");
    Sha256Digest stored;
    std::memcpy(stored.data(), value.data() + kMagicBytes, kTagBytes);
    if (!digests_equal(stored, value_tag(signing_key, remote_entry_name(expect), image)))
      return reject("bad HMAC-SHA256 tag: signed with another key, for another name, or altered");
  }
  const std::vector<char> bytes(image.begin(), image.end());
  std::string why;
  const EntryStatus s = decode_entry(bytes, &expect, h, payload, &why);
  if (s != EntryStatus::kOk)
    return reject(std::string(to_string(s)) + (why.empty() ? "" : ": " + why));
  return true;
}

// ---------------------------------------------------------------------------------------------
// The tier

const char* to_string(RemoteStatus s) {
  static const char* const kNames[] = {"hit", "missing", "rejected", "unavailable"};
  return enum_name(s, kNames);
}

RemoteTier::RemoteTier(RemoteOptions options, Warn warn)
    : opts_(std::move(options)), url_(parse_redis_url(opts_.url)), warn_(std::move(warn)) {
  where_ = url_.display();
  lock_token_ = random_hex() + random_hex();
  if (opts_.timeout.count() <= 0) opts_.timeout = std::chrono::milliseconds(500);
  if (opts_.retry.count() <= 0) opts_.retry = std::chrono::milliseconds(30000);
}

RemoteTier::~RemoteTier() = default;

RedisConnection& RemoteTier::connection() {
  if (!conn_) conn_ = std::make_unique<RedisConnection>(url_, opts_.timeout);
  return *conn_;
}

void RemoteTier::failed(const std::string& why) {
  conn_.reset();
  ++counters_.errors;
  backoff_ = backoff_.count() == 0 ? opts_.retry : std::min(backoff_ * 2, kMaxBackoff);
  retry_at_ = Clock::now() + backoff_;
  if (!down_ && warn_)
    warn_("graphattn: remote kernel cache " + where_ + ": " + printable(why, 240) +
          "; using the local tiers only, next try in " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(backoff_).count()) +
          " s");
  down_ = true;
}

bool RemoteTier::backing_off() { return down_ && Clock::now() < retry_at_; }

// Runs f(connection) under the lock unless the tier is backing off; a RedisError (or an error
// reply, which f turns into one) starts or extends the back-off.
template <typename F>
bool RemoteTier::call(F&& f, const char* what) {
  if (backing_off()) return false;
  const auto t0 = Clock::now();
  bool ok = false;
  try {
    f(connection());
    ok = true;
    down_ = false;
    backoff_ = std::chrono::milliseconds(0);
  } catch (const RedisError& e) {
    failed(std::string(what) + ": " + e.what());
  }
  counters_.ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return ok;
}

namespace {
// An error reply (NOAUTH, WRONGTYPE, OOM, ...) makes the call fail like a broken connection.
const RedisReply& checked(const RedisReply& r) {
  if (r.type == RedisReply::Type::kError) throw RedisError("error reply: " + r.str);
  return r;
}
}  // namespace

RemoteStatus RemoteTier::get(const CacheKey& key, EntryHeader* h, std::vector<char>* payload,
                             std::string* reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = remote_entry_name(key);
  RedisReply r;
  // WRONGTYPE (a list or hash under an entry's name) is a bad value, not a broken server.
  auto get = [&](RedisConnection& c) {
    r = c.command({"GET", name});
    if (r.type != RedisReply::Type::kError || r.str.rfind("WRONGTYPE", 0) != 0) checked(r);
  };
  if (!call(get, "GET")) return RemoteStatus::kUnavailable;
  if (r.type == RedisReply::Type::kNil) {
    ++counters_.misses;
    return RemoteStatus::kMissing;
  }
  std::string why;
  if (r.type == RedisReply::Type::kString &&
      decode_remote_value(r.str, key, opts_.signing_key, h, payload, &why)) {
    ++counters_.hits;
    return RemoteStatus::kHit;
  }
  if (r.type != RedisReply::Type::kString) why = "not a string value";
  ++counters_.rejects;
  if (reason) *reason = why;
  // Never served: deleted, so that the compile that follows replaces it.
  call([&](RedisConnection& c) { checked(c.command({"DEL", name})); }, "DEL");
  return RemoteStatus::kRejected;
}

void RemoteTier::reject(const CacheKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  --counters_.hits;
  ++counters_.rejects;
  const std::string name = remote_entry_name(key);
  call([&](RedisConnection& c) { checked(c.command({"DEL", name})); }, "DEL");
}

bool RemoteTier::put(const EntryHeader& h, const std::vector<char>& payload) {
  const std::string value = encode_remote_value(h, payload, opts_.signing_key);
  std::lock_guard<std::mutex> lock(mu_);
  const bool ok = call(
      [&](RedisConnection& c) {
        checked(c.command({"SET", remote_entry_name(h.key), value}));
      },
      "SET");
  if (ok) ++counters_.puts;
  return ok;
}

RemoteTier::LockResult RemoteTier::lock(const CacheKey& key, std::chrono::milliseconds ttl) {
  std::lock_guard<std::mutex> lock(mu_);
  RedisReply r;
  const std::string ms = std::to_string(std::max<int64_t>(1000, ttl.count()));
  if (!call(
          [&](RedisConnection& c) {
            r = checked(c.command({"SET", remote_lock_name(key), lock_token_, "NX", "PX", ms}));
          },
          "SET NX"))
    return LockResult::kUnavailable;
  return r.type == RedisReply::Type::kStatus ? LockResult::kAcquired : LockResult::kHeldByOther;
}

void RemoteTier::unlock(const CacheKey& key) {
  // Compare and delete in one step on the server: never another process's lock taken over after
  // this one expired.
  static const char* const kScript =
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
      "return 0";
  std::lock_guard<std::mutex> lock(mu_);
  call(
      [&](RedisConnection& c) {
        checked(c.command({"EVAL", kScript, "1", remote_lock_name(key), lock_token_}));
      },
      "EVAL unlock");
}

bool RemoteTier::locked(const CacheKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  RedisReply r;
  if (!call(
          [&](RedisConnection& c) {
            r = checked(c.command({"EXISTS", remote_lock_name(key)}));
          },
          "EXISTS"))
    return false;
  return r.type == RedisReply::Type::kInteger && r.integer > 0;
}

// The operator's calls: a failure is thrown to the caller (no back-off), and a broken connection
// is dropped so that the next call connects again.
template <typename F>
auto RemoteTier::direct(F&& f) -> decltype(f(std::declval<RedisConnection&>())) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    return f(connection());
  } catch (const RedisError& e) {
    conn_.reset();
    throw RedisError(where_ + ": " + e.what());
  }
}

std::vector<std::string> RemoteTier::entry_names() {
  return direct([&](RedisConnection& c) {
    std::vector<std::string> names;
    std::string cursor = "0";
    do {
      const RedisReply r =
          checked(c.command({"SCAN", cursor, "MATCH", kEntryPattern, "COUNT", "1000"}));
      if (r.type != RedisReply::Type::kArray || r.elements.size() != 2 ||
          r.elements[1].type != RedisReply::Type::kArray)
        throw RedisError("unexpected SCAN reply");
      cursor = r.elements[0].str;
      for (const RedisReply& e : r.elements[1].elements) names.push_back(e.str);
    } while (cursor != "0");
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  });
}

std::string RemoteTier::server_version() {
  const RedisReply r = direct([](RedisConnection& c) {
    return checked(c.command({"INFO", "server"}));
  });
  const std::string tag = "redis_version:";
  const size_t at = r.str.find(tag);
  if (at == std::string::npos) return "unknown";
  const size_t end = r.str.find_first_of("\r\n", at);
  return r.str.substr(at + tag.size(), end - at - tag.size());
}

bool RemoteTier::get_raw(const std::string& name, std::string* value) {
  const RedisReply r = direct([&](RedisConnection& c) {
    return checked(c.command({"GET", name}));
  });
  if (r.type != RedisReply::Type::kString) return false;
  *value = r.str;
  return true;
}

void RemoteTier::remove(const std::string& name) {
  direct([&](RedisConnection& c) { return checked(c.command({"DEL", name})); });
}

void RemoteTier::put_raw(const std::string& name, const std::string& value) {
  direct([&](RedisConnection& c) { return checked(c.command({"SET", name, value})); });
}

RemoteCounters RemoteTier::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace graphattn::detail
