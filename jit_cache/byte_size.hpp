// SPDX-License-Identifier: Apache-2.0
// The one parser of byte sizes, shared by GRAPHATTN_CACHE_MAX_BYTES and graphattn-cache prune
// --max-bytes: decimal digits, then an optional unit (B; K, KB, KiB; M, MB, MiB; G, GB, GiB;
// T, TB, TiB; any case; binary multiples). Nothing else is accepted: no sign, no spaces, no
// fraction or exponent, no trailing characters, no value above 2^64 - 1.
#pragma once

#include <cstdint>
#include <string>

namespace graphattn::detail {

// Throws graphattn::Error "<what> '<text>' is not a size: <why>; use ...", naming the value
// (escaped, see printable()).
uint64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace graphattn::detail
