// SPDX-License-Identifier: Apache-2.0
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
#include "jit_cache/trust.hpp"

namespace graphattn::detail {

namespace {

constexpr char kSignedMagic[] = "GASIGN01";  // 8 bytes, then the tag, then the entry image
constexpr size_t kMagicBytes = 8;
constexpr size_t kTagBytes = 32;
constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 4096;
constexpr size_t kMinDistinctSecretBytes = 8;
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

std::string read_signing_key(const std::string& path, bool shared) {
  auto fail = [&](const std::string& why) -> std::string {
    throw Error("GRAPHATTN_CACHE_SIGNING_KEY '" + printable(path, 4096) + "': " + why +
                "; it must name a regular file (not a link), owned by this user (" +
                user_text(::geteuid()) +
                ") or root, mode 0600 (0640 with GRAPHATTN_CACHE_SHARED=1), "
                "holding a random secret of at least " +
                std::to_string(kMinSecretBytes) + " bytes (e.g. openssl rand -hex 32 > FILE)");
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0)
    return fail(errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return fail(std::string("it is ") + file_type_name(st.st_mode));
  const std::string found =
      " (found: owner " + user_text(st.st_uid) + ", mode " + mode_text(st.st_mode) + ")";
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return fail("it belongs to another user" + found + ": whoever owns it chooses the key");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fail("it is writable by group or others" + found +
                ": anyone who can change it can sign "
                "kernels");
  if (st.st_mode & S_IROTH)
    return fail("it is readable by every user" + found +
                ": anyone who can read it can sign kernels");
  if ((st.st_mode & S_IRGRP) && !shared)
    return fail("it is readable by its group" + found +
                ", which only a deliberately shared cache (GRAPHATTN_CACHE_SHARED=1) allows");
  if (static_cast<uint64_t>(st.st_size) > kMaxSecretBytes)
    return fail("it holds " + std::to_string(st.st_size) + " bytes, more than " +
                std::to_string(kMaxSecretBytes));
  std::string secret(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = ::read(fd, &secret[got], secret.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  secret.resize(got);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t'))
    secret.pop_back();
  if (secret.size() < kMinSecretBytes)
    return fail("it holds " + std::to_string(secret.size()) +
                " bytes (trailing newlines and spaces not counted)");
  bool seen[256] = {};
  size_t distinct = 0;
  for (char c : secret) {
    bool& s = seen[static_cast<unsigned char>(c)];
    distinct += s ? 0 : 1;
    s = true;
  }
  if (distinct < kMinDistinctSecretBytes)
    return fail("its secret is degenerate: " + std::to_string(distinct) +
                " distinct byte values (such as all zeros), fewer than " +
                std::to_string(kMinDistinctSecretBytes));
  return secret;
}

uint64_t max_remote_value_bytes() {
  return kMagicBytes + kTagBytes + kMaxHeaderBytes + kMaxPayloadBytes;
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

RedisConnection& RemoteTier::connection(RedisClock::time_point deadline) {
  if (!conn_) conn_ = std::make_unique<RedisConnection>(url_, deadline);
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

// Runs f(connection, deadline) under the lock unless the tier is backing off, connecting first
// when needed, all by one deadline; a RedisError (or an error reply, which f turns into one)
// starts or extends the back-off.
template <typename F>
bool RemoteTier::call(F&& f, const char* what) {
  if (backing_off()) return false;
  const auto t0 = Clock::now();
  const RedisClock::time_point by = deadline();
  bool ok = false;
  try {
    f(connection(by), by);
    ok = true;
    down_ = false;
    backoff_ = std::chrono::milliseconds(0);
  } catch (const RedisError& e) {
    conn_.reset();
    failed(std::string(what) + ": " + e.what());
  }
  counters_.ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return ok;
}

namespace {
// An error reply (NOAUTH, WRONGTYPE, OOM, ...) makes the call fail like a broken connection.
const RedisReply& checked(const RedisReply& r) {
  if (r.type == RedisReply::Type::kError) throw RedisError("error reply: " + printable(r.str, 200));
  return r;
}

// What a call's reply may hold: a value of the largest entry, a status, an integer.
RedisLimits value_limits() {
  RedisLimits l;
  l.max_bulk_bytes = max_remote_value_bytes();
  l.max_elements = 0;
  l.max_depth = 0;
  return l;
}
RedisLimits small_limits() {
  RedisLimits l;
  l.max_bulk_bytes = 64 << 10;
  l.max_elements = 0;
  l.max_depth = 0;
  return l;
}
}  // namespace

// A value over the size cap cannot be an entry: UNLINK frees it on the server without blocking
// the server, so that nobody pays for reading it again. On a fresh connection (the one that saw
// the announcement is closed), within its own timeout; failing that, it stays.
void RemoteTier::unlink_oversized(const std::string& name) {
  try {
    const RedisClock::time_point by = deadline();
    connection(by).command({"UNLINK", name}, by, small_limits());
  } catch (const RedisError&) {
    conn_.reset();
  }
}

RemoteStatus RemoteTier::get(const CacheKey& key, EntryHeader* h, std::vector<char>* payload,
                             std::string* reason) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = remote_entry_name(key);
  RedisReply r;
  // WRONGTYPE (a list or hash under an entry's name) is a bad value, not a broken server.
  bool oversized = false;
  auto get = [&](RedisConnection& c, RedisClock::time_point by) {
    try {
      r = c.command({"GET", name}, by, value_limits());
    } catch (const RedisReplyTooLarge&) {
      oversized = true;
      throw;
    }
    if (r.type != RedisReply::Type::kError || r.str.rfind("WRONGTYPE", 0) != 0) checked(r);
  };
  if (!call(get, "GET")) {
    if (oversized) {
      ++counters_.rejects;
      conn_.reset();
      unlink_oversized(name);
    }
    return RemoteStatus::kUnavailable;
  }
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
  call(
      [&](RedisConnection& c, RedisClock::time_point by) {
        checked(c.command({"DEL", name}, by, small_limits()));
      },
      "DEL");
  return RemoteStatus::kRejected;
}

void RemoteTier::reject(const CacheKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  --counters_.hits;
  ++counters_.rejects;
  const std::string name = remote_entry_name(key);
  call(
      [&](RedisConnection& c, RedisClock::time_point by) {
        checked(c.command({"DEL", name}, by, small_limits()));
      },
      "DEL");
}

bool RemoteTier::put(const EntryHeader& h, const std::vector<char>& payload) {
  const std::string value = encode_remote_value(h, payload, opts_.signing_key);
  std::lock_guard<std::mutex> lock(mu_);
  const bool ok = call(
      [&](RedisConnection& c, RedisClock::time_point by) {
        checked(c.command({"SET", remote_entry_name(h.key), value}, by, small_limits()));
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
          [&](RedisConnection& c, RedisClock::time_point by) {
            r = checked(c.command({"SET", remote_lock_name(key), lock_token_, "NX", "PX", ms}, by,
                                  small_limits()));
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
      [&](RedisConnection& c, RedisClock::time_point by) {
        checked(c.command({"EVAL", kScript, "1", remote_lock_name(key), lock_token_}, by,
                          small_limits()));
      },
      "EVAL unlock");
}

RemoteTier::LockState RemoteTier::lock_state(const CacheKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  RedisReply r;
  if (!call(
          [&](RedisConnection& c, RedisClock::time_point by) {
            r = checked(c.command({"PTTL", remote_lock_name(key)}, by, small_limits()));
          },
          "PTTL"))
    return LockState::kFree;
  if (r.type != RedisReply::Type::kInteger || r.integer == -2) return LockState::kFree;
  return r.integer == -1 ? LockState::kNoExpiry : LockState::kExpiring;
}

// The operator's calls: a failure is thrown to the caller (no back-off), and a broken connection
// is dropped so that the next call connects again.
template <typename F>
auto RemoteTier::direct(F&& f)
    -> decltype(f(std::declval<RedisConnection&>(), RedisClock::time_point())) {
  std::lock_guard<std::mutex> lock(mu_);
  const RedisClock::time_point by = deadline();
  try {
    return f(connection(by), by);
  } catch (const RedisReplyTooLarge& e) {
    conn_.reset();
    throw RedisReplyTooLarge(where_ + ": " + e.what());
  } catch (const RedisError& e) {
    conn_.reset();
    throw RedisError(where_ + ": " + e.what());
  }
}

std::vector<std::string> RemoteTier::entry_names() {
  std::vector<std::string> names;
  std::string cursor = "0";
  size_t calls = 0;
  RedisLimits limits;
  limits.max_bulk_bytes = 4096;  // a cursor or a name
  limits.max_elements = 100000;  // SCAN's COUNT is a hint; a real server stays near it
  do {
    if (++calls > kMaxScanCalls || names.size() > kMaxScanNames)
      throw RedisError(where_ + ": SCAN did not finish after " + std::to_string(calls - 1) +
                       " calls and " + std::to_string(names.size()) +
                       " names (a cursor that never returns to 0?); giving up");
    const RedisReply r = direct([&](RedisConnection& c, RedisClock::time_point by) {
      return checked(
          c.command({"SCAN", cursor, "MATCH", kEntryPattern, "COUNT", "1000"}, by, limits));
    });
    if (r.type != RedisReply::Type::kArray || r.elements.size() != 2 ||
        r.elements[0].type != RedisReply::Type::kString ||
        r.elements[1].type != RedisReply::Type::kArray)
      throw RedisError(where_ + ": unexpected SCAN reply");
    cursor = r.elements[0].str;
    for (const RedisReply& e : r.elements[1].elements)
      if (e.type == RedisReply::Type::kString && e.str.size() <= 256) names.push_back(e.str);
    // Repeats (SCAN may return a name twice) are dropped as they come, so that memory follows
    // the distinct names, not the calls.
    if (names.size() > 2 * kMaxScanNames / 3 || calls % 64 == 0) {
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
    }
  } while (cursor != "0");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string RemoteTier::server_version() {
  const RedisReply r = direct([](RedisConnection& c, RedisClock::time_point by) {
    return checked(c.command({"INFO", "server"}, by, small_limits()));
  });
  const std::string tag = "redis_version:";
  const size_t at = r.str.find(tag);
  if (at == std::string::npos) return "unknown";
  const size_t end = r.str.find_first_of("\r\n", at);
  return printable(r.str.substr(at + tag.size(), end - at - tag.size()), 40);
}

bool RemoteTier::get_raw(const std::string& name, std::string* value) {
  const RedisReply r = direct([&](RedisConnection& c, RedisClock::time_point by) {
    return checked(c.command({"GET", name}, by, value_limits()));
  });
  if (r.type != RedisReply::Type::kString) return false;
  *value = r.str;
  return true;
}

uint64_t RemoteTier::value_bytes(const std::string& name) {
  const RedisReply r = direct([&](RedisConnection& c, RedisClock::time_point by) {
    return c.command({"STRLEN", name}, by, small_limits());
  });
  return r.type == RedisReply::Type::kInteger && r.integer > 0 ? static_cast<uint64_t>(r.integer)
                                                               : 0;
}

void RemoteTier::remove(const std::string& name) {
  direct([&](RedisConnection& c, RedisClock::time_point by) {
    return checked(c.command({"UNLINK", name}, by, small_limits()));
  });
}

void RemoteTier::put_raw(const std::string& name, const std::string& value) {
  direct([&](RedisConnection& c, RedisClock::time_point by) {
    return checked(c.command({"SET", name, value}, by, small_limits()));
  });
}

RemoteCounters RemoteTier::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace graphattn::detail
