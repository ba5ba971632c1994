// SPDX-License-Identifier: Apache-2.0
// Text helpers for messages; printable() is public (graphattn/printable.hpp): the tools escape
// what they echo the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "graphattn/printable.hpp"

namespace graphattn::detail {

using graphattn::printable;

// A count or size in a message (one spelling for every file's errors).
inline std::string str(int64_t v) { return std::to_string(v); }

// The name of an enum value from a table in the enum's order (values 0, 1, ...); "?" for a value
// outside it (an int cast into the enum).
template <typename Enum, size_t N>
const char* enum_name(Enum e, const char* const (&names)[N]) {
  const auto i = static_cast<size_t>(e);
  return i < N ? names[i] : "?";
}

}  // namespace graphattn::detail
