// A small synchronous Redis client for the remote tier of the kernel cache
// (jit_cache/remote_tier.hpp), over hiredis.
//
// hiredis is "built in when found": CMake compiles this client against <hiredis/hiredis.h> when
// the header is there (GRAPHATTN_HAVE_HIREDIS), and the library itself (the exact soname those
// headers describe, e.g. libhiredis.so.0.14) is opened with dlopen the first time a connection is
// made, through one table of typed function pointers, as runtime/driver.cpp does for the CUDA
// driver. So libgraphattn never needs libhiredis to load, a program that never configures a
// remote cache never opens it, and where it is missing the remote tier says so once and the
// cache runs on its local tiers.
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace graphattn::detail {

// redis://[[user]:password@]host[:port][/db]. parse_redis_url throws graphattn::Error naming the
// text and the accepted form.
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

// Whether this build has the client (hiredis headers were found at build time).
bool redis_client_built_in();
// Whether the hiredis library could be opened; *why says what is missing when not.
bool redis_client_loadable(std::string* why);

// A connection failure or an I/O error (timeout, reset): the connection is unusable afterwards.
class RedisError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  long long integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

class RedisConnection {
 public:
  // Connects within `timeout`, then authenticates and selects the URL's database; every later
  // read and write also times out after `timeout`. Throws RedisError.
  RedisConnection(const RedisUrl& url, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // One command, binary-safe arguments. An error reply comes back as Type::kError; a broken
  // connection throws RedisError.
  RedisReply command(std::initializer_list<std::string_view> args);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graphattn::detail
