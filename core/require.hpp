// SPDX-License-Identifier: Apache-2.0
// The checking macro for arguments, and the first check of every tensor view: what every layer
// uses to refuse bad input with a message that names it.
#pragma once

#include "graphattn/error.hpp"
#include "graphattn/tensor.hpp"

// The message expression is evaluated only on failure, so a check that passes costs no string
// building (forward() runs every check on every step).
#define GA_REQUIRE(ok, message)                   \
  do {                                            \
    if (!(ok)) throw ::graphattn::Error(message); \
  } while (0)

namespace graphattn::detail {

// `t` is `rank`-d with no negative size and a data pointer unless empty; `shape` names its
// dimensions for the message, e.g. "[num_tokens, num_heads, head_size]".
void require_rank(const TensorView& t, int rank, const char* name, const char* shape);

}  // namespace graphattn::detail
