// SPDX-License-Identifier: Apache-2.0
// A small synchronous Redis client for the remote tier of the kernel cache
// (jit_cache/remote_tier.hpp): RESP2 over a TCP socket, written here so that every call is bounded
// by the caller, not by the server.
//
// - A deadline for the whole call: connecting (name lookup included), authenticating, writing the
//   command and reading its complete reply all finish by one point in time, however slowly the
//   server drips its bytes; past it the call throws RedisError and the connection is closed.
// - Replies bounded before anything is allocated: a bulk string longer than the limit, an array
//   with more elements than the limit (counted over the whole reply), a line longer than 64 KiB
//   or nesting deeper than the limit ends the call with RedisReplyTooLarge, naming what the
//   server announced; nothing of that size is ever allocated.
//
// Built in unless CMake's GRAPHATTN_WITH_REDIS is OFF (GRAPHATTN_HAVE_REDIS_CLIENT); it needs no
// library beyond libc.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace graphattn::detail {

// redis://[[user]:password@]host[:port][/db]. parse_redis_url throws graphattn::Error naming the
// text (its password masked) and the accepted form.
struct RedisUrl {
  std::string host;
  int port = 6379;
  std::string user;      // "" : the default user
  std::string password;  // "" : no AUTH
  int db = 0;
  // The URL with the password masked ("redis://:***@host:port/db"): for messages.
  std::string display() const;
};
RedisUrl parse_redis_url(const std::string& url);
// Any text that may be a Redis URL, with what sits between "//" and the last '@' before the host
// masked ("redis://***@host..."): for echoing a URL that did not parse.
std::string redact_redis_url(const std::string& text);

// Whether this build has the client.
bool redis_client_built_in();
// Whether the client can be used; *why says why not.
bool redis_client_loadable(std::string* why);

// A connection failure, an I/O error or a deadline passed: the connection is unusable afterwards.
class RedisError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A reply over the limits (RedisLimits); the connection is unusable afterwards.
class RedisReplyTooLarge : public RedisError {
 public:
  using RedisError::RedisError;
};

struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  long long integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

// What one reply may hold. Checked against what the server announces, before allocating.
struct RedisLimits {
  uint64_t max_bulk_bytes = uint64_t{1} << 20;  // one bulk string
  uint64_t max_elements = 4096;                 // array elements, over the whole reply
  int max_depth = 2;                            // arrays inside arrays
};

using RedisClock = std::chrono::steady_clock;

// Parses RESP2 replies from `read` (fills up to n bytes; returns how many, >= 1, or throws). The
// buffer keeps what was read past one reply for the next. Exposed for the fuzz target.
class RespParser {
 public:
  using Read = std::function<size_t(char* out, size_t n)>;
  explicit RespParser(Read read) : read_(std::move(read)) {}
  RedisReply parse(const RedisLimits& limits);

 private:
  std::string line();
  void fill();
  void take(size_t n, std::string* out);
  RedisReply value(const RedisLimits& limits, int depth, uint64_t* elements);
  Read read_;
  std::string buf_;
  size_t at_ = 0;
};

class RedisConnection {
 public:
  // Connects, authenticates and selects the URL's database, all by `deadline`. Throws RedisError.
  RedisConnection(const RedisUrl& url, RedisClock::time_point deadline);
  // The same with a deadline `timeout` from now; later command() calls without a deadline get
  // `timeout` each.
  RedisConnection(const RedisUrl& url, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // One command, binary-safe arguments, its whole reply read by `deadline` and within `limits`.
  // An error reply comes back as Type::kError; anything else that goes wrong throws RedisError
  // and closes the connection.
  RedisReply command(std::initializer_list<std::string_view> args, RedisClock::time_point deadline,
                     const RedisLimits& limits = {});
  RedisReply command(std::initializer_list<std::string_view> args);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graphattn::detail
