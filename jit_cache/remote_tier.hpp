// SPDX-License-Identifier: Apache-2.0
// The remote tier of the kernel cache: entries shared by every host of a fleet through Redis,
// behind the disk tier.
//
//   KernelCache::get: memory -> disk -> remote (a verified value is also written to disk)
//                     -> compile lock across the fleet -> NVRTC -> disk and remote
//
// A value is the disk entry's exact image (jit_cache/entry_format.hpp: magic, header and payload
// checksums, key, a cubin for its arch), verified like a file before use; a value that fails is
// deleted and the kernel compiled again, never served. With a signing key
// (GRAPHATTN_CACHE_SIGNING_KEY: a file checked like the cache, read_signing_key below) values carry
// an HMAC-SHA256 tag over their Redis key name and image, and only values with a valid tag are
// accepted: a writable Redis alone cannot plant GPU code in the fleet.
//
// Redis names: "graphattn:kernel:v<format>:<key hex>" (a value) and "graphattn:lock:<key hex>"
// (held while one process compiles the key; always written with an expiry, so that it goes by
// itself if that process dies; KernelCache gives up on one that outlasts a few compiles or has no
// expiry).
// Value layout: unsigned, the entry image; signed, "GASIGN01" + 32-byte tag + the entry image.
//
// It never slows or breaks a step: every call (connecting included) must finish within the timeout
// as a whole, however slowly the server sends, and a reply larger than the call expects (a value
// over the entry size cap, an array longer than asked for) ends the call before anything of that
// size is allocated (jit_cache/redis_client.hpp). The first failure (refused, timed out, reset,
// too large, an error reply) makes one warning and the tier answers "unavailable" at once,
// without touching the network, until a retry after a back-off (30 s, doubling to at most 10 min,
// as long as the server stays down). A value over the size cap is deleted (UNLINK, which frees it
// on the server without blocking it), so that the next process does not pay for it again. Only
// KernelCache::get (prepare, precompile) reaches it; forward() uses kernels loaded before and
// never does.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "jit_cache/entry_format.hpp"
#include "jit_cache/redis_client.hpp"

namespace graphattn::detail {

struct RemoteOptions {
  std::string url;                         // redis://...
  std::chrono::milliseconds timeout{500};  // connect, read and write
  std::chrono::milliseconds retry{30000};  // first back-off after a failure
  std::string signing_key;                 // the secret itself; "" : values are not signed
};

// The secret in a signing key file: its bytes without trailing newlines and spaces. The file is
// checked like a cache file (jit_cache/trust.hpp), since whoever can read it can sign kernels
// and whoever can write it can choose the key: opened without following a link, a regular file,
// owned by this user or root, neither writable by group or others nor readable by others, and
// readable by its group only in shared mode (`shared`). Throws graphattn::Error naming the path
// and the rule it breaks, also for a degenerate secret (fewer than 16 bytes, or fewer than 8
// distinct byte values, such as all zeros).
std::string read_signing_key(const std::string& path, bool shared);

// The largest value a GET may return: a signed entry image of the largest size.
uint64_t max_remote_value_bytes();

// ---------------------------------------------------------------------------------------------
// Values (pure functions, no network)

std::string remote_entry_name(const CacheKey& key);  // "graphattn:kernel:v1:<hex>"
std::string remote_lock_name(const CacheKey& key);   // "graphattn:lock:<hex>"
// The pattern every entry name matches (for SCAN), and the key in an entry name (false when the
// name is not one).
const char* remote_entry_pattern();
bool key_of_remote_name(const std::string& name, CacheKey* key);

// The value stored under remote_entry_name(h.key); signed when signing_key is not empty.
std::string encode_remote_value(const EntryHeader& h, const std::vector<char>& payload,
                                const std::string& signing_key);
// Checks a value read from remote_entry_name(expect): with a signing key, the tag must be there
// and valid; then the entry image's magic, version, checksums, key and cubin. On success fills h
// and payload; otherwise *reason says what failed.
bool decode_remote_value(const std::string& value, const CacheKey& expect,
                         const std::string& signing_key, EntryHeader* h, std::vector<char>* payload,
                         std::string* reason);

// ---------------------------------------------------------------------------------------------
// The tier

enum class RemoteStatus {
  kHit,         // a verified value
  kMissing,     // no value under the key
  kRejected,    // a value that failed verification; it has been deleted
  kUnavailable  // not configured usably, down, or backing off: nothing was asked
};
const char* to_string(RemoteStatus s);

struct RemoteCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t rejects = 0;  // values that failed verification (deleted)
  uint64_t puts = 0;
  uint64_t errors = 0;  // failed calls (each starts or extends a back-off)
  double ms = 0;        // wall time spent in calls to the server
};

class RemoteTier {
 public:
  using Warn = std::function<void(const std::string&)>;
  // Parses the URL (throws graphattn::Error when malformed); connects on first use.
  RemoteTier(RemoteOptions options, Warn warn);
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // The URL with the password masked.
  const std::string& where() const { return where_; }
  bool signing() const { return !opts_.signing_key.empty(); }

  RemoteStatus get(const CacheKey& key, EntryHeader* h, std::vector<char>* payload,
                   std::string* reason);
  // A hit the caller refuses after all (its header names another spec or arch): counted as a
  // reject and deleted.
  void reject(const CacheKey& key);
  // Stores the entry (signed when signing()); false when the server could not be reached.
  bool put(const EntryHeader& h, const std::vector<char>& payload);

  // The fleet-wide compile lock of one key: SET NX with an expiry of `ttl` (never without one),
  // under an owner token only this process knows. kHeldByOther: another process holds it.
  enum class LockResult { kAcquired, kHeldByOther, kUnavailable };
  LockResult lock(const CacheKey& key, std::chrono::milliseconds ttl);
  // Deletes the lock if this process still owns it.
  void unlock(const CacheKey& key);
  // Who holds the key's lock now: nobody (or unavailable), a holder whose lock expires by itself,
  // or a lock without an expiry, which graphattn never writes (squatted).
  enum class LockState { kFree, kExpiring, kNoExpiry };
  LockState lock_state(const CacheKey& key);

  // For graphattn-cache: every entry name on the server (SCAN: at most kMaxScanNames names and
  // kMaxScanCalls calls, so that a cursor that never returns to 0 ends with an error), the
  // server's version, a raw value (false when there is none; RedisReplyTooLarge past the cap) and
  // a value's size. Throw RedisError when the server cannot be reached (no back-off: an operator
  // asked).
  static constexpr size_t kMaxScanNames = 200000;
  static constexpr size_t kMaxScanCalls = 20000;
  std::vector<std::string> entry_names();
  std::string server_version();
  bool get_raw(const std::string& name, std::string* value);
  uint64_t value_bytes(const std::string& name);
  void remove(const std::string& name);
  void put_raw(const std::string& name, const std::string& value);

  RemoteCounters counters() const;

 private:
  // Connects if needed, by the deadline; throws RedisError.
  RedisConnection& connection(RedisClock::time_point deadline);
  void failed(const std::string& why);
  bool backing_off();
  RedisClock::time_point deadline() const { return RedisClock::now() + opts_.timeout; }
  template <typename F>
  bool call(F&& f, const char* what);
  template <typename F>
  auto direct(F&& f) -> decltype(f(std::declval<RedisConnection&>(), RedisClock::time_point()));
  void unlink_oversized(const std::string& name);

  RemoteOptions opts_;
  RedisUrl url_;
  std::string where_;
  Warn warn_;
  std::string lock_token_;
  mutable std::mutex mu_;  // one connection; calls are serialized
  std::unique_ptr<RedisConnection> conn_;
  bool down_ = false;
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
  RemoteCounters counters_;
};

}  // namespace graphattn::detail
