// SPDX-License-Identifier: Apache-2.0
// Output of graphattn-cache: sizes, times and counts for people, aligned text tables, and the
// one JSON document that --json prints.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace graphattn::tools::cache_tool {

using Json = nlohmann::json;

std::string human_bytes(uint64_t bytes);
std::string fixed(double v, int digits);
// Local wall-clock time for people; "-" when unknown.
std::string local_time(int64_t unix_ms);
// ISO 8601 in UTC with milliseconds, for machines; null when unknown.
Json iso_utc(int64_t unix_ms);
std::string days_text(double days);
std::string hex64(uint64_t v);
std::string short_key(const std::string& key_hex);
std::string plural(uint64_t n, const char* one, const char* many);

// An aligned text table: columns separated by two spaces, numbers right-aligned.
class Table {
 public:
  // align: one letter per column, 'l' or 'r'.
  Table(std::vector<std::string> header, std::string align)
      : header_(std::move(header)), align_(std::move(align)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }

  void print(std::ostream& os) const;

 private:
  std::vector<std::string> header_;
  std::string align_;
  std::vector<std::vector<std::string>> rows_;
};

// File names and stored spec strings may hold any bytes: invalid UTF-8 is replaced, not thrown.
void print_json(const Json& j);

// While one exists, print_json keeps its documents here instead of printing them (stats and
// verify over several layers print one document of every layer's).
struct JsonCapture {
  JsonCapture();
  ~JsonCapture();
  JsonCapture(const JsonCapture&) = delete;
  JsonCapture& operator=(const JsonCapture&) = delete;
  std::vector<Json> docs;
};

}  // namespace graphattn::tools::cache_tool
