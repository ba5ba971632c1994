// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/redis_client.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn::detail {

// ---------------------------------------------------------------------------------------------
// URLs

namespace {

[[noreturn]] void bad_url(const std::string& url, const std::string& what) {
  throw Error("remote cache URL '" + printable(redact_redis_url(url)) + "': " + what +
              "; supported: redis://[[user]:password@]host[:port][/db], e.g. "
              "redis://127.0.0.1:6379/0");
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes, as in any URL's user information.
std::string percent_decoded(const std::string& url, const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_digit(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex_digit(s[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      bad_url(url, "a '%' in the user or password is not followed by 2 hex digits");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// A decimal number in [lo, hi].
int bounded_number(const std::string& url, const std::string& text, int lo, int hi,
                   const char* what) {
  if (text.empty() || text.size() > 9)
    bad_url(url, std::string(what) + " '" + printable(text) + "' is not a number");
  int v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)))
      bad_url(url, std::string(what) + " '" + printable(text) + "' is not a number");
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi)
    bad_url(url, std::string(what) + " " + std::to_string(v) + " is out of range " +
                     std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

}  // namespace

std::string redact_redis_url(const std::string& text) {
  const size_t scheme = text.find("//");
  const size_t from = scheme == std::string::npos ? 0 : scheme + 2;
  const size_t at = text.rfind('@');
  if (at == std::string::npos || at < from) return text;
  return text.substr(0, from) + "***" + text.substr(at);
}

RedisUrl parse_redis_url(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.compare(0, scheme.size(), scheme) != 0) bad_url(url, "the scheme is not redis://");
  std::string rest = url.substr(scheme.size());
  RedisUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest.resize(slash);
    if (!db.empty()) out.db = bounded_number(url, db, 0, 1 << 20, "database");
  }
  if (rest.find_first_of("?#") != std::string::npos)
    bad_url(url, "query strings and fragments are not supported");
  const size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string info = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = info.find(':');
    if (colon == std::string::npos)
      bad_url(url, "the part before '@' has no ':' (write :password@ or user:password@)");
    out.user = percent_decoded(url, info.substr(0, colon));
    out.password = percent_decoded(url, info.substr(colon + 1));
    if (out.password.empty()) bad_url(url, "the password before '@' is empty");
  }
  std::string port;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6 address]
    const size_t close = rest.find(']');
    if (close == std::string::npos) bad_url(url, "'[' without ']' around an IPv6 address");
    out.host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') bad_url(url, "unexpected text after ']'");
      port = after.substr(1);
      if (port.empty()) bad_url(url, "the port after ':' is empty");
    }
  } else {
    const size_t colon = rest.find(':');
    out.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      port = rest.substr(colon + 1);
      if (port.empty()) bad_url(url, "the port after ':' is empty");
    }
  }
  if (out.host.empty()) bad_url(url, "no host");
  for (char c : out.host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':'))
      bad_url(url, "the host '" + printable(out.host) +
                       "' holds a character not allowed in a "
                       "host name or address");
  if (!port.empty()) out.port = bounded_number(url, port, 1, 65535, "port");
  return out;
}

std::string RedisUrl::display() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::string auth;
  if (!password.empty()) auth = user + ":***@";
  return "redis://" + auth + h + ":" + std::to_string(port) + "/" + std::to_string(db);
}

// ---------------------------------------------------------------------------------------------
// RESP2

namespace {

constexpr size_t kMaxLineBytes = 64 << 10;  // a status, an error, a length

[[noreturn]] void protocol_error(const std::string& what) {
  throw RedisError("malformed reply: " + what);
}

// A decimal length or integer as RESP writes it ("-1" allowed).
long long resp_number(const std::string& text, const char* what) {
  if (text.empty() || text.size() > 20)
    protocol_error(std::string(what) + " '" + printable(text) + "'");
  size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) protocol_error(std::string(what) + " '" + printable(text) + "'");
  unsigned long long v = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c < '0' || c > '9' || v > (~0ull >> 1) / 10)
      protocol_error(std::string(what) + " '" + printable(text) + "'");
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > static_cast<unsigned long long>(INT64_MAX))
    protocol_error(std::string(what) + " too large");
  return text[0] == '-' ? -static_cast<long long>(v) : static_cast<long long>(v);
}

}  // namespace

void RespParser::fill() {
  if (at_ > 0 && at_ == buf_.size()) {
    buf_.clear();
    at_ = 0;
  } else if (at_ > (64 << 10)) {
    buf_.erase(0, at_);
    at_ = 0;
  }
  char chunk[16384];
  const size_t n = read_(chunk, sizeof chunk);
  buf_.append(chunk, n);
}

std::string RespParser::line() {
  size_t scanned = at_;
  while (true) {
    const size_t nl = buf_.find("\r\n", scanned);
    if (nl != std::string::npos) {
      if (nl - at_ > kMaxLineBytes) break;
      std::string out = buf_.substr(at_, nl - at_);
      at_ = nl + 2;
      return out;
    }
    if (buf_.size() - at_ > kMaxLineBytes) break;
    scanned = buf_.size() > at_ ? buf_.size() - 1 : at_;
    const size_t before = at_;
    fill();
    scanned -= before - at_;  // fill() may have moved the unread bytes to the front
  }
  throw RedisReplyTooLarge("reply line longer than " + std::to_string(kMaxLineBytes) + " bytes");
}

void RespParser::take(size_t n, std::string* out) {
  out->clear();
  while (out->size() < n) {
    if (at_ == buf_.size()) fill();
    const size_t k = std::min(n - out->size(), buf_.size() - at_);
    out->append(buf_, at_, k);
    at_ += k;
  }
}

RedisReply RespParser::value(const RedisLimits& limits, int depth, uint64_t* elements) {
  const std::string l = line();
  if (l.empty()) protocol_error("an empty line");
  RedisReply r;
  const std::string rest = l.substr(1);
  switch (l[0]) {
    case '+':
      r.type = RedisReply::Type::kStatus;
      r.str = rest;
      return r;
    case '-':
      r.type = RedisReply::Type::kError;
      r.str = rest;
      return r;
    case ':':
      r.type = RedisReply::Type::kInteger;
      r.integer = resp_number(rest, "integer");
      return r;
    case '$': {
      const long long n = resp_number(rest, "bulk length");
      if (n == -1) return r;  // nil
      if (n < 0) protocol_error("bulk length " + std::to_string(n));
      if (static_cast<uint64_t>(n) > limits.max_bulk_bytes)
        throw RedisReplyTooLarge("the server announced a value of " + std::to_string(n) +
                                 " bytes, more than the " + std::to_string(limits.max_bulk_bytes) +
                                 " this call accepts");
      r.type = RedisReply::Type::kString;
      take(static_cast<size_t>(n), &r.str);
      std::string end;
      take(2, &end);
      if (end != "\r\n") protocol_error("a bulk string not followed by CRLF");
      return r;
    }
    case '*': {
      const long long n = resp_number(rest, "array length");
      if (n == -1) return r;  // nil
      if (n < 0) protocol_error("array length " + std::to_string(n));
      if (static_cast<uint64_t>(n) > limits.max_elements - *elements)
        throw RedisReplyTooLarge("the server announced an array of " + std::to_string(n) +
                                 " elements, more than the " + std::to_string(limits.max_elements) +
                                 " this call accepts");
      if (depth >= limits.max_depth)
        throw RedisReplyTooLarge("arrays nested deeper than " + std::to_string(limits.max_depth));
      *elements += static_cast<uint64_t>(n);
      r.type = RedisReply::Type::kArray;
      r.elements.reserve(static_cast<size_t>(n));
      for (long long i = 0; i < n; ++i) r.elements.push_back(value(limits, depth + 1, elements));
      return r;
    }
    default:
      protocol_error("unknown reply type '" + printable(l.substr(0, 1)) + "'");
  }
}

RedisReply RespParser::parse(const RedisLimits& limits) {
  uint64_t elements = 0;
  return value(limits, 0, &elements);
}

#ifdef GRAPHATTN_HAVE_REDIS_CLIENT

namespace {

int remaining_ms(RedisClock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RedisClock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left + 1, 1 << 30));
}

[[noreturn]] void deadline_passed(const char* during) {
  throw RedisError(std::string("no complete reply within the timeout (while ") + during + ")");
}

// Waits until fd is ready for `events` or the deadline passes (throws).
void wait_for(int fd, short events, RedisClock::time_point deadline, const char* during) {
  while (true) {
    const int ms = remaining_ms(deadline);
    if (ms == 0) deadline_passed(during);
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throw RedisError(std::string("poll: ") + std::strerror(errno));
  }
}

// getaddrinfo on a thread of its own, so that a slow name lookup cannot outlast the deadline (the
// thread finishes by itself later; its result is then dropped).
struct Lookup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int rc = 0;
  addrinfo* result = nullptr;
  ~Lookup() {
    if (result) ::freeaddrinfo(result);
  }
};

std::shared_ptr<Lookup> resolve(const std::string& host, int port,
                                RedisClock::time_point deadline) {
  auto lookup = std::make_shared<Lookup>();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  // Numeric addresses need no lookup.
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &lookup->result) == 0) {
    lookup->done = true;
    return lookup;
  }
  lookup->result = nullptr;
  hints.ai_flags = AI_NUMERICSERV;
  std::thread([lookup, host, service, hints] {
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    std::lock_guard<std::mutex> lock(lookup->mu);
    lookup->rc = rc;
    lookup->result = res;
    lookup->done = true;
    lookup->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(lookup->mu);
  if (!lookup->cv.wait_until(lock, deadline, [&] { return lookup->done; }))
    deadline_passed("looking up the host name");
  if (lookup->rc != 0)
    throw RedisError("cannot resolve '" + printable(host) + "': " + ::gai_strerror(lookup->rc));
  return lookup;
}

int connect_socket(const std::string& host, int port, RedisClock::time_point deadline) {
  const std::shared_ptr<Lookup> lookup = resolve(host, port, deadline);
  std::string last = "no address";
  for (addrinfo* a = lookup->result; a; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = std::strerror(errno);
      ::close(fd);
      continue;
    }
    try {
      wait_for(fd, POLLOUT, deadline, "connecting");
    } catch (...) {
      ::close(fd);
      throw;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      last = std::strerror(err);
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  throw RedisError("cannot connect: " + last);
}

}  // namespace

bool redis_client_built_in() { return true; }

bool redis_client_loadable(std::string* why) {
  if (why) why->clear();
  return true;
}

struct RedisConnection::Impl {
  int fd = -1;
  std::chrono::milliseconds timeout{500};
  RedisClock::time_point deadline{};  // of the call in progress
  std::unique_ptr<RespParser> parser;

  ~Impl() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  size_t read_some(char* out, size_t n) {
    while (true) {
      wait_for(fd, POLLIN, deadline, "reading the reply");
      const ssize_t got = ::recv(fd, out, n, 0);
      if (got > 0) return static_cast<size_t>(got);
      if (got == 0) throw RedisError("the server closed the connection");
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
        throw RedisError(std::string("read: ") + std::strerror(errno));
    }
  }
  void write_all(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      wait_for(fd, POLLOUT, deadline, "sending the command");
      const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        throw RedisError(std::string("write: ") + std::strerror(errno));
      }
    }
  }
};

RedisConnection::RedisConnection(const RedisUrl& url, RedisClock::time_point deadline)
    : impl_(new Impl) {
  impl_->fd = connect_socket(url.host, url.port, deadline);
  impl_->parser = std::make_unique<RespParser>(
      [impl = impl_.get()](char* out, size_t n) { return impl->read_some(out, n); });
  auto must_succeed = [&](const RedisReply& r, const char* what) {
    if (r.type == RedisReply::Type::kError) {
      impl_->close();
      throw RedisError(std::string(what) + " refused: " + printable(r.str));
    }
  };
  if (!url.password.empty()) {
    if (url.user.empty())
      must_succeed(command({"AUTH", url.password}, deadline), "AUTH");
    else
      must_succeed(command({"AUTH", url.user, url.password}, deadline), "AUTH");
  }
  if (url.db != 0) must_succeed(command({"SELECT", std::to_string(url.db)}, deadline), "SELECT");
}

RedisConnection::RedisConnection(const RedisUrl& url, std::chrono::milliseconds timeout)
    : RedisConnection(url, RedisClock::now() + timeout) {
  impl_->timeout = timeout;
}

RedisConnection::~RedisConnection() = default;

RedisReply RedisConnection::command(std::initializer_list<std::string_view> args,
                                    RedisClock::time_point deadline, const RedisLimits& limits) {
  if (impl_->fd < 0) throw RedisError("the connection was closed after an earlier error");
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (std::string_view a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out.append(a.data(), a.size());
    out += "\r\n";
  }
  impl_->deadline = deadline;
  try {
    impl_->write_all(out);
    return impl_->parser->parse(limits);
  } catch (...) {
    impl_->close();
    throw;
  }
}

RedisReply RedisConnection::command(std::initializer_list<std::string_view> args) {
  return command(args, RedisClock::now() + impl_->timeout);
}

#else  // !GRAPHATTN_HAVE_REDIS_CLIENT

namespace {
const char* const kNotBuiltIn =
    "graphattn was built without the Redis client (CMake option GRAPHATTN_WITH_REDIS=OFF)";
}

bool redis_client_built_in() { return false; }

bool redis_client_loadable(std::string* why) {
  if (why) *why = kNotBuiltIn;
  return false;
}

struct RedisConnection::Impl {};

RedisConnection::RedisConnection(const RedisUrl&, RedisClock::time_point) {
  throw RedisError(kNotBuiltIn);
}

RedisConnection::RedisConnection(const RedisUrl&, std::chrono::milliseconds) {
  throw RedisError(kNotBuiltIn);
}

RedisConnection::~RedisConnection() = default;

RedisReply RedisConnection::command(std::initializer_list<std::string_view>, RedisClock::time_point,
                                    const RedisLimits&) {
  throw RedisError(kNotBuiltIn);
}

RedisReply RedisConnection::command(std::initializer_list<std::string_view>) {
  throw RedisError(kNotBuiltIn);
}

#endif

}  // namespace graphattn::detail
