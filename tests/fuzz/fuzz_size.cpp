// SPDX-License-Identifier: Apache-2.0
// The one byte-size parser (GRAPHATTN_CACHE_MAX_BYTES, graphattn-cache --max-bytes) against an
// independent reading of its grammar: digits, then nothing, B, or K/M/G/T optionally followed by
// B or iB (any case); the value digits * 2^(10 k) computed in 128 bits must fit 64.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>

#include "graphattn/error.hpp"
#include "jit_cache/byte_size.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {

// Returns false when text is outside the grammar or the value does not fit; else sets *out.
bool reference(const std::string& text, uint64_t* out) {
  size_t i = 0;
  unsigned __int128 v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    v = v * 10 + static_cast<unsigned>(text[i] - '0');
    if (v > UINT64_MAX) v = static_cast<unsigned __int128>(UINT64_MAX) + 1;  // saturate
    ++i;
  }
  if (i == 0) return false;
  std::string u;
  for (; i < text.size(); ++i)
    u += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  int shift = -1;
  const std::string prefixes = "kmgt";
  if (u.empty() || u == "b") {
    shift = 0;
  } else if (prefixes.find(u[0]) != std::string::npos &&
             (u.size() == 1 || u.substr(1) == "b" || u.substr(1) == "ib")) {
    shift = 10 * (1 + static_cast<int>(prefixes.find(u[0])));
  }
  if (shift < 0) return false;
  v <<= shift;
  if (v > UINT64_MAX) return false;
  *out = static_cast<uint64_t>(v);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  uint64_t want = 0;
  const bool ok = reference(text, &want);
  try {
    const uint64_t got = graphattn::detail::parse_byte_size(text, "GRAPHATTN_CACHE_MAX_BYTES");
    if (!ok) graphattn::fuzz::broken("accepted '" + text + "'");
    if (got != want) graphattn::fuzz::broken("wrong value for '" + text + "'");
  } catch (const graphattn::Error& e) {
    if (ok) graphattn::fuzz::broken("rejected '" + text + "': " + e.what());
    const std::string m = e.what();
    graphattn::fuzz::check_message(m);
    if (m.rfind("GRAPHATTN_CACHE_MAX_BYTES '", 0) != 0) graphattn::fuzz::broken("message: " + m);
  }
  return 0;
}
