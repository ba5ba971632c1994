// SPDX-License-Identifier: Apache-2.0
#include "tools/cache/output.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>

namespace graphattn::tools::cache_tool {
namespace {

constexpr size_t kShortKeyDigits = 12;

}  // namespace

std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string local_time(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

Json iso_utc(int64_t unix_ms) {
  if (unix_ms <= 0) return nullptr;
  const time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(unix_ms % 1000));
  return std::string(out);
}

std::string days_text(double days) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", days);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string short_key(const std::string& key_hex) { return key_hex.substr(0, kShortKeyDigits); }

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

void Table::print(std::ostream& os) const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& r) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], r[c].size());
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  auto emit = [&](const std::vector<std::string>& r) {
    std::string line;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < r.size() ? r[c] : "";
      const std::string pad(width[c] - cell.size(), ' ');
      if (c) line += "  ";
      line += align_[c] == 'r' ? pad + cell : cell + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
  };
  emit(header_);
  for (const auto& r : rows_) emit(r);
}

namespace {
JsonCapture* capture = nullptr;
}

JsonCapture::JsonCapture() { capture = this; }
JsonCapture::~JsonCapture() { capture = nullptr; }

void print_json(const Json& j) {
  if (capture) {
    capture->docs.push_back(j);
    return;
  }
  std::cout << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

}  // namespace graphattn::tools::cache_tool
