// SPDX-License-Identifier: Apache-2.0
// What the tools show while a long phase runs (compile, capture, the decode loop):
//   - each item's line (a kernel, a capture size) printed and flushed the moment it is done, so a
//     pipe or a log sees it then too, not when the phase ends;
//   - on a terminal (stderr is a tty, TERM is not "dumb", GRAPHATTN_LOG_LEVEL at info or below),
//     one status line on stderr, "[compile] 3/15 done, 4.1 s", redrawn every 200 ms and after
//     each item, erased when the phase ends. Nothing of it reaches a pipe.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "graphattn/log.hpp"

namespace graphattn::tools {

// Whether stderr is a terminal on which a status line may be drawn.
inline bool progress_line_wanted() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) && !(term && std::strcmp(term, "dumb") == 0) &&
         log_enabled(LogLevel::kInfo);
}

class Progress {
 public:
  // phase: "[compile]"; total: the number of items (0: unknown); out: where item lines go.
  Progress(std::string phase, size_t total, FILE* out)
      : phase_(std::move(phase)),
        total_(total),
        out_(out),
        t0_(Clock::now()),
        live_(progress_line_wanted()) {
    if (live_) ticker_ = std::thread([this] { tick(); });
  }
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Prints one item's line (text without its newline), flushed, above the status line.
  void line(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    erase_locked();
    std::fprintf(out_, "%s\n", text.c_str());
    std::fflush(out_);
    draw_locked();
  }
  // One more item done; `what` names it on the status line.
  void advance(const std::string& what = "") {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    last_ = what;
    // At most one redraw every 50 ms: a decode loop advances thousands of times a second.
    if (live_ && Clock::now() - last_draw_ >= std::chrono::milliseconds(50)) {
      erase_locked();
      draw_locked();
    }
  }
  // Stops the ticker and erases the status line (also done by the destructor).
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      erase_locked();
    }
    cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
  }

 private:
  using Clock = std::chrono::steady_clock;

  void tick() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      erase_locked();
      draw_locked();
      cv_.wait_for(lock, std::chrono::milliseconds(200));
    }
  }
  void erase_locked() {
    if (!drawn_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }
  void draw_locked() {
    if (!live_ || stopped_) return;
    const double s = std::chrono::duration<double>(Clock::now() - t0_).count();
    std::string text = phase_ + " " + std::to_string(done_);
    if (total_) text += "/" + std::to_string(total_);
    char secs[32];
    std::snprintf(secs, sizeof secs, " done, %.1f s", s);
    text += secs;
    if (!last_.empty()) text += " (last: " + last_ + ")";
    // Never wider than the terminal: a wrapped line could not be erased with \r.
    winsize ws{};
    const size_t cols =
        ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col : 80;
    if (text.size() > cols - 1) text.resize(cols - 1);
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
    drawn_ = true;
    last_draw_ = Clock::now();
  }

  std::string phase_;
  size_t total_;
  FILE* out_;
  Clock::time_point t0_;
  const bool live_;  // a status line is drawn
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread ticker_;
  Clock::time_point last_draw_{};
  size_t done_ = 0;
  std::string last_;
  bool drawn_ = false;
  bool stopped_ = false;
};

}  // namespace graphattn::tools
