// SPDX-License-Identifier: Apache-2.0
#include "graphattn/log.hpp"

#include <strings.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/text.hpp"

namespace graphattn {

namespace {

constexpr const char* kAllowed = "debug, info, warning, error or off";

// false when GRAPHATTN_LOG_LEVEL is set to something else than a level's name.
bool parse_level(const char* text, LogLevel* out) {
  *out = LogLevel::kInfo;
  if (!text || !*text) return true;
  static const struct {
    const char* name;
    LogLevel level;
  } kNames[] = {{"debug", LogLevel::kDebug},     {"info", LogLevel::kInfo},
                {"warning", LogLevel::kWarning}, {"warn", LogLevel::kWarning},
                {"error", LogLevel::kError},     {"off", LogLevel::kOff}};
  for (const auto& n : kNames)
    if (strcasecmp(text, n.name) == 0) {
      *out = n.level;
      return true;
    }
  return false;
}

struct Sink {
  std::mutex mu;
  LogHandler handler;
};

Sink& sink() {
  static Sink* s = new Sink;  // never destroyed: threads may log during exit
  return *s;
}

std::atomic<bool> g_bad_level_reported{false};

}  // namespace

LogLevel log_level() {
  LogLevel level;
  parse_level(std::getenv("GRAPHATTN_LOG_LEVEL"), &level);
  return level;
}

std::string log_level_problem() {
  const char* text = std::getenv("GRAPHATTN_LOG_LEVEL");
  LogLevel level;
  if (parse_level(text, &level)) return "";
  return std::string("GRAPHATTN_LOG_LEVEL '") + detail::printable(text) +
         "' is not a log level; supported: " + kAllowed;
}

bool log_enabled(LogLevel level) {
  return level != LogLevel::kOff && static_cast<int>(level) >= static_cast<int>(log_level());
}

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "unknown";
}

void set_log_handler(LogHandler handler) {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mu);
  s.handler = std::move(handler);
}

void log(LogLevel level, const std::string& msg) {
  if (!log_enabled(level)) return;
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mu);
  auto emit = [&](LogLevel l, const std::string& m) {
    if (s.handler) {
      s.handler(l, m);
    } else {
      std::fprintf(stderr, "%s\n", m.c_str());
      std::fflush(stderr);
    }
  };
  if (!g_bad_level_reported.exchange(true)) {
    const std::string problem = log_level_problem();
    if (!problem.empty()) emit(LogLevel::kWarning, "graphattn: " + problem + "; using info");
  }
  emit(level, msg);
}

}  // namespace graphattn
