// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/byte_size.hpp"

#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"

namespace graphattn {

uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  auto fail = [&](const std::string& why) {
    return Error(what + " '" + printable(text) + "' is not a size: " + why +
                 "; use a number of bytes, optionally followed by K, M, G or T (binary multiples, "
                 "also KiB, MiB, GiB, TiB), e.g. 512M");
  };
  size_t digits = 0;
  uint64_t value = 0;
  bool overflow = false;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    const uint64_t d = static_cast<uint64_t>(text[digits] - '0');
    overflow = overflow || __builtin_mul_overflow(value, uint64_t{10}, &value) ||
               __builtin_add_overflow(value, d, &value);
    ++digits;
  }
  if (digits == 0) {
    if (text.empty()) throw fail("it is empty");
    if (text[0] == '-') throw fail("it is negative");
    throw fail("it does not start with a digit");
  }
  std::string unit;
  for (size_t i = digits; i < text.size(); ++i) {
    const char c = text[i];
    unit += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  int shift = -1;
  if (unit.empty() || unit == "b")
    shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib")
    shift = 40;
  if (shift < 0) throw fail("unknown unit '" + printable(text.substr(digits)) + "'");
  if (overflow || (shift > 0 && value > (UINT64_MAX >> shift)))
    throw fail("it exceeds 2^64 - 1 bytes");
  return value << shift;
}

}  // namespace graphattn
