// SPDX-License-Identifier: Apache-2.0
// Shared by the fuzz targets: what every message graphattn builds from hostile input must be.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace graphattn::fuzz {

// Stops the run (libFuzzer saves the input) with a line saying which property broke.
[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what.c_str());
  std::abort();
}

// Messages echo input escaped and cut short: printable ASCII (and line ends), bounded size.
inline void check_message(const std::string& m, size_t max_bytes = 4096) {
  if (m.empty()) broken("empty error message");
  if (m.size() > max_bytes) broken("message of " + std::to_string(m.size()) + " bytes");
  for (char c : m)
    if (c != '\n' && (c < 0x20 || c >= 0x7f))
      broken("raw control or non-ASCII byte in: " + m.substr(0, 200));
}

}  // namespace graphattn::fuzz
