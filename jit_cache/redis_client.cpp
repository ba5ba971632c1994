#include "jit_cache/redis_client.hpp"

#include <dlfcn.h>

#include <cctype>
#include <mutex>

#include "core/text.hpp"
#include "graphattn/error.hpp"

#ifdef GRAPHATTN_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace graphattn::detail {

// ---------------------------------------------------------------------------------------------
// URLs

namespace {

[[noreturn]] void bad_url(const std::string& url, const std::string& what) {
  throw Error("remote cache URL '" + printable(url) + "': " + what +
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
// hiredis, opened at run time

#ifdef GRAPHATTN_HAVE_HIREDIS

#define GA_HIREDIS_STRING2(x) #x
#define GA_HIREDIS_STRING(x) GA_HIREDIS_STRING2(x)

namespace {

// The soname of the library these headers describe: its structs must match them exactly.
constexpr const char* kHiredisLibrary = "libhiredis.so." GA_HIREDIS_STRING(HIREDIS_SONAME);

// X(name): every hiredis function the client calls.
// clang-format off
#define GA_HIREDIS_FUNCTIONS(X) \
  X(redisConnectWithTimeout)    \
  X(redisSetTimeout)            \
  X(redisCommandArgv)           \
  X(freeReplyObject)            \
  X(redisFree)
// clang-format on

struct HiredisApi {
#define GA_DECLARE(name) decltype(&::name) name = nullptr;
  GA_HIREDIS_FUNCTIONS(GA_DECLARE)
#undef GA_DECLARE
  std::string error;  // empty when loaded
};

HiredisApi load_hiredis() {
  HiredisApi api;
  void* lib = dlopen(kHiredisLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    api.error = std::string("the Redis client library ") + kHiredisLibrary +
                " could not be loaded (" + (why ? why : "unknown reason") +
                "); install it (Debian: libhiredis" + GA_HIREDIS_STRING(HIREDIS_SONAME) +
                " or libhiredis-dev)";
    return api;
  }
  std::string missing;
#define GA_LOAD(name)                                    \
  {                                                      \
    void* fn = dlsym(lib, #name);                        \
    if (!fn) missing += " " #name;                       \
    api.name = reinterpret_cast<decltype(api.name)>(fn); \
  }
  GA_HIREDIS_FUNCTIONS(GA_LOAD)
#undef GA_LOAD
  if (!missing.empty())
    api.error = std::string(kHiredisLibrary) + " lacks functions graphattn calls:" + missing;
  return api;
}

const HiredisApi& hiredis() {
  static const HiredisApi api = load_hiredis();
  return api;
}

timeval timeval_of(std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  return tv;
}

RedisReply convert(const redisReply* r, int depth) {
  RedisReply out;
  if (!r) return out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      if (depth < 4)
        for (size_t i = 0; i < r->elements; ++i)
          out.elements.push_back(convert(r->element[i], depth + 1));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

}  // namespace

bool redis_client_built_in() { return true; }

bool redis_client_loadable(std::string* why) {
  const HiredisApi& api = hiredis();
  if (why) *why = api.error;
  return api.error.empty();
}

struct RedisConnection::Impl {
  redisContext* ctx = nullptr;
  std::string where;  // the URL, password masked
};

RedisConnection::RedisConnection(const RedisUrl& url, std::chrono::milliseconds timeout)
    : impl_(new Impl) {
  const HiredisApi& api = hiredis();
  if (!api.error.empty()) throw RedisError(api.error);
  impl_->where = url.display();
  impl_->ctx = api.redisConnectWithTimeout(url.host.c_str(), url.port, timeval_of(timeout));
  if (!impl_->ctx) throw RedisError("cannot allocate a Redis connection");
  if (impl_->ctx->err) {
    const std::string why = impl_->ctx->errstr;
    api.redisFree(impl_->ctx);
    impl_->ctx = nullptr;
    throw RedisError(why);
  }
  if (api.redisSetTimeout(impl_->ctx, timeval_of(timeout)) != REDIS_OK) {
    api.redisFree(impl_->ctx);
    impl_->ctx = nullptr;
    throw RedisError("cannot set the socket timeouts");
  }
  auto must_succeed = [&](RedisReply r, const char* what) {
    if (r.type == RedisReply::Type::kError) {
      api.redisFree(impl_->ctx);
      impl_->ctx = nullptr;
      throw RedisError(std::string(what) + " refused: " + printable(r.str));
    }
  };
  if (!url.password.empty()) {
    if (url.user.empty())
      must_succeed(command({"AUTH", url.password}), "AUTH");
    else
      must_succeed(command({"AUTH", url.user, url.password}), "AUTH");
  }
  if (url.db != 0) must_succeed(command({"SELECT", std::to_string(url.db)}), "SELECT");
}

RedisConnection::~RedisConnection() {
  if (impl_->ctx) hiredis().redisFree(impl_->ctx);
}

RedisReply RedisConnection::command(std::initializer_list<std::string_view> args) {
  if (!impl_->ctx) throw RedisError("the connection was closed after an earlier error");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  const HiredisApi& api = hiredis();
  void* raw =
      api.redisCommandArgv(impl_->ctx, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (!raw) {
    const std::string why = impl_->ctx->err ? impl_->ctx->errstr : "no reply";
    api.redisFree(impl_->ctx);
    impl_->ctx = nullptr;
    throw RedisError(why);
  }
  RedisReply out = convert(static_cast<const redisReply*>(raw), 0);
  api.freeReplyObject(raw);
  return out;
}

#else  // !GRAPHATTN_HAVE_HIREDIS

namespace {
const char* const kNotBuiltIn =
    "graphattn was built without the Redis client: the hiredis headers were not found when it was "
    "configured (Debian: apt-get install libhiredis-dev, then build again)";
}

bool redis_client_built_in() { return false; }

bool redis_client_loadable(std::string* why) {
  if (why) *why = kNotBuiltIn;
  return false;
}

struct RedisConnection::Impl {};

RedisConnection::RedisConnection(const RedisUrl&, std::chrono::milliseconds) {
  throw RedisError(kNotBuiltIn);
}

RedisConnection::~RedisConnection() = default;

RedisReply RedisConnection::command(std::initializer_list<std::string_view>) {
  throw RedisError(kNotBuiltIn);
}

#endif

}  // namespace graphattn::detail
