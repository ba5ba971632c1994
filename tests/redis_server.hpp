// SPDX-License-Identifier: Apache-2.0
// A real redis-server for the remote tier's tests: started on 127.0.0.1 at a free port, with
// persistence off and its files in a temporary directory, and killed at scope exit. The tests
// need the Debian package redis-server (scripts/install_deps.sh installs it); without it they
// fail and say so, unless GRAPHATTN_TEST_NO_REDIS=1 asks them to skip.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "jit_cache/redis_client.hpp"
#include "tests/test_util.hpp"

extern char** environ;

namespace graphattn::test {

// A TCP port on 127.0.0.1 that nobody listens on now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Whether the Redis tests can run here; otherwise why not (and whether that is a failure).
inline bool redis_tests_runnable(std::string* why) {
  if (!detail::redis_client_built_in()) {
    *why = "this build has no Redis client (GRAPHATTN_WITH_REDIS=OFF)";
    return false;
  }
  if (std::system("command -v redis-server >/dev/null 2>&1") != 0) {
    *why =
        "redis-server is not installed (Debian: apt-get install redis-server; scripts/test.sh "
        "installs it)";
    return false;
  }
  return true;
}

// Skips the rest of a test case where the Redis tests cannot run, failing it unless
// GRAPHATTN_TEST_NO_REDIS=1.
#define GA_REQUIRE_REDIS()                                                     \
  do {                                                                         \
    std::string why_;                                                          \
    if (!::graphattn::test::redis_tests_runnable(&why_)) {                     \
      const char* skip_ = std::getenv("GRAPHATTN_TEST_NO_REDIS");              \
      if (skip_ && std::string(skip_) == "1") {                                \
        MESSAGE("skipped: " << why_ << " (GRAPHATTN_TEST_NO_REDIS=1)");        \
        return;                                                                \
      }                                                                        \
      FAIL(why_ << "; set GRAPHATTN_TEST_NO_REDIS=1 to skip the Redis tests"); \
    }                                                                          \
  } while (0)

class RedisServer {
 public:
  // extra: more redis-server arguments, e.g. {"--requirepass", "secret"} (the tests' own
  // commands then authenticate with it).
  explicit RedisServer(std::vector<std::string> extra = {})
      : port_(free_port()), extra_(std::move(extra)) {
    for (size_t i = 0; i + 1 < extra_.size(); ++i)
      if (extra_[i] == "--requirepass") password_ = extra_[i + 1];
    start();
  }
  ~RedisServer() { kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Started again on the same port.
  void start() {
    REQUIRE(pid_ <= 0);
    const std::string port = std::to_string(port_);
    const std::string log = dir_.path() + "/redis.log";
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     port,
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.path(),
                                     "--logfile",
                                     log,
                                     "--daemonize",
                                     "no"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    REQUIRE(::posix_spawnp(&pid, "redis-server", nullptr, nullptr, argv.data(), environ) == 0);
    pid_ = pid;
    // Ready when it answers PING.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        detail::RedisConnection c(admin_url(), std::chrono::milliseconds(200));
        if (c.command({"PING"}).str == "PONG") return;
      } catch (const std::exception& e) {
        last = e.what();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL("redis-server on port " << port_ << " did not answer PING within 10 s: " << last);
  }
  // SIGKILL: the server is gone at once, as when its host dies.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // SIGSTOP / SIGCONT: a server that accepts connections (the kernel does) but never answers.
  void freeze() { ::kill(pid_, SIGSTOP); }
  void thaw() { ::kill(pid_, SIGCONT); }

  // A command on a fresh connection (for the tests' own reads and writes).
  detail::RedisReply command(std::initializer_list<std::string_view> args) {
    detail::RedisConnection c(admin_url(), std::chrono::milliseconds(2000));
    return c.command(args);
  }

 private:
  detail::RedisUrl admin_url() const {
    detail::RedisUrl u = detail::parse_redis_url(url());
    u.password = password_;
    return u;
  }

  TempDir dir_;
  int port_;
  std::vector<std::string> extra_;
  std::string password_;
  pid_t pid_ = -1;
};

}  // namespace graphattn::test
