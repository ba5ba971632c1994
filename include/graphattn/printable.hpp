// SPDX-License-Identifier: Apache-2.0
// Untrusted text (spec strings, environment values, file names, command-line values) as the
// library and its tools echo it in messages: control bytes and non-ASCII bytes become \xNN
// escapes, so a message cannot move the cursor, rewrite a terminal or break a log line, and a huge
// value is cut short.
#pragma once

#include <cstddef>
#include <string>

namespace graphattn {

inline std::string printable(const std::string& text, size_t max_bytes = 96) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t n = text.size() < max_bytes ? text.size() : max_bytes;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (n < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace graphattn
