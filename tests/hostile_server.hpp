// SPDX-License-Identifier: Apache-2.0
// Small hostile servers for the remote tier's tests, on 127.0.0.1 only: a thread accepts
// connections at a free port and answers each request (one recv) through a handler that can drip
// bytes, announce huge replies or never finish a SCAN. Every handler polls stop() so that the
// destructor ends the server at once; nothing outlives the test.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace graphattn::test {

class HostileServer {
 public:
  // handler(connection, request bytes): answers one request; returns false to close.
  using Handler = std::function<bool(HostileServer&, int fd, const std::string& request)>;

  explicit HostileServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    REQUIRE(::listen(listen_fd_, 16) == 0);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~HostileServer() {
    stop_ = true;
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : workers_) t.join();
    ::close(listen_fd_);
  }
  HostileServer(const HostileServer&) = delete;
  HostileServer& operator=(const HostileServer&) = delete;

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  bool stop() const { return stop_; }
  int requests() const { return requests_; }

  // Sends all of `bytes` unless the server is stopping or the peer is gone; false then.
  bool send_all(int fd, const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size() && !stop_) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return done == bytes.size();
  }
  // Sleeps up to `ms` unless the server stops first; false when it stopped.
  bool nap(int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!stop_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return !stop_;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    char buf[65536];
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      ++requests_;
      if (!handler_(*this, fd, std::string(buf, static_cast<size_t>(n)))) break;
    }
    ::close(fd);
  }

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
};

// Answers every request with a short bulk string, one byte every `ms` milliseconds.
inline HostileServer::Handler dripping_handler(int ms) {
  return [ms](HostileServer& s, int fd, const std::string&) {
    for (char c : std::string("$5\r\nhello\r\n"))
      if (!s.nap(ms) || !s.send_all(fd, std::string(1, c))) return false;
    return true;
  };
}

// Announces `header` (e.g. "$536870912\r\n" or "*2147483647\r\n") and then streams `filler`
// as fast as the peer reads it, until the peer goes away or the server stops.
inline HostileServer::Handler flooding_handler(std::string header, std::string filler) {
  return [header, filler](HostileServer& s, int fd, const std::string&) {
    if (!s.send_all(fd, header)) return false;
    std::string chunk;
    while (chunk.size() < 65536) chunk += filler;
    while (s.send_all(fd, chunk)) {
    }
    return false;
  };
}

// A SCAN whose cursor never returns to 0 (a new cursor and one new name each time); other
// commands get +OK.
inline HostileServer::Handler endless_scan_handler() {
  auto next = std::make_shared<std::atomic<long long>>(1);
  return [next](HostileServer& s, int fd, const std::string& request) {
    if (request.find("SCAN") == std::string::npos) return s.send_all(fd, "+OK\r\n");
    const std::string cursor = std::to_string((*next)++);
    const std::string name = "graphattn:kernel:v1:" + std::string(32 - cursor.size(), '0') + cursor;
    return s.send_all(fd, "*2\r\n$" + std::to_string(cursor.size()) + "\r\n" + cursor +
                              "\r\n*1\r\n$" + std::to_string(name.size()) + "\r\n" + name + "\r\n");
  };
}

}  // namespace graphattn::test
