// SPDX-License-Identifier: Apache-2.0
// Host side of block-sparse attention: the pattern's launch data and its checks.
#pragma once

#include <cstdint>

#include "graphattn/blocksparse.hpp"
#include "templates/params.h"

namespace graphattn::detail {

// The kernels' GaBlockSparse for a launch of num_heads query heads over num_kv_heads KV heads
// (zeros when !p.sparse(): no _bsp kernel reads it then).
GaBlockSparse block_sparse_launch_data(const BlockSparseParams& p, int64_t num_heads,
                                       int64_t num_kv_heads);
// Throws graphattn::Error naming the bad field unless p suits such a launch (blocksparse_problem).
void require_block_sparse(const BlockSparseParams& p, int64_t num_heads, int64_t num_kv_heads,
                          int64_t kv_block_size, const char* where);

}  // namespace graphattn::detail
