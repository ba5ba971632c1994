// SPDX-License-Identifier: Apache-2.0
// Messages from the library and its tools to people: warnings (a read-only cache directory, a
// remote server that went down), debug lines (each precompiled kernel's tier and time) and the
// tools' progress lines. GRAPHATTN_LOG_LEVEL picks the least severe level shown:
//   debug | info (the default) | warning | error | off       (case does not matter)
// The library never prints from a hot path; forward() logs nothing.
#pragma once

#include <functional>
#include <string>

#include "graphattn/export.h"

namespace graphattn {

enum class LogLevel : int { kDebug = 10, kInfo = 20, kWarning = 30, kError = 40, kOff = 50 };

// The level from GRAPHATTN_LOG_LEVEL, read on every call (cheap); unset or empty: kInfo. A value
// that is not one of the names above counts as kInfo, and the first message logged says so.
GRAPHATTN_API LogLevel log_level();
// "" when GRAPHATTN_LOG_LEVEL is unset or valid; otherwise a message naming its value and the
// allowed ones (the tools exit 2 with it before doing any work).
GRAPHATTN_API std::string log_level_problem();
// Whether a message of this level is shown (level >= log_level() and not kOff).
GRAPHATTN_API bool log_enabled(LogLevel level);
// "debug", "info", "warning", "error", "off".
GRAPHATTN_API const char* to_string(LogLevel level);

// Receives every message that log_enabled() lets through; may be called from any thread (never
// from two at once). The Python package forwards them to the `logging` module.
using LogHandler = std::function<void(LogLevel, const std::string&)>;
// Replaces the handler; an empty one restores the default (one line on stderr).
GRAPHATTN_API void set_log_handler(LogHandler handler);
// Sends msg to the handler when log_enabled(level).
GRAPHATTN_API void log(LogLevel level, const std::string& msg);

}  // namespace graphattn
