// SPDX-License-Identifier: Apache-2.0
// The one parser of byte sizes, shared by GRAPHATTN_CACHE_MAX_BYTES and graphattn-cache prune
// --max-bytes: decimal digits, then an optional unit (B; K, KB, KiB; M, MB, MiB; G, GB, GiB;
// T, TB, TiB; any case; binary multiples). Nothing else is accepted: no sign, no spaces, no
// fraction or exponent, no trailing characters, no value above 2^64 - 1.
#pragma once

#include "graphattn/jit.hpp"

namespace graphattn::detail {

// The parser is public (graphattn::parse_byte_size, graphattn/jit.hpp).
using graphattn::parse_byte_size;

}  // namespace graphattn::detail
