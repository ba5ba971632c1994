// SPDX-License-Identifier: Apache-2.0
// What the memory tier and the renderer take from AttentionSpec's axis list
// (GRAPHATTN_SPEC_AXES in include/graphattn/spec.hpp), so that neither names an axis itself.
#pragma once

#include <cstdint>
#include <string>

#include "graphattn/spec.hpp"

namespace graphattn::detail {

// Every axis as one digit of its radix under a leading 1: equal for equal specs, different for
// different ones; 0 for a spec with a value outside its axis's radix (it cannot be packed).
uint64_t packed_spec(const AttentionSpec& spec);

// The constants that put the spec in front of the templates, one line each:
// "constexpr int HEAD_SIZE = 128;\n" ..., and "#define GA_CHECK_BOUNDS 1\n" for a set mode.
std::string spec_constants(const AttentionSpec& spec);

}  // namespace graphattn::detail
