// SPDX-License-Identifier: Apache-2.0
// Element offsets in vLLM's legacy PagedAttention caches, for the tests and benchmarks that fill
// or read them on the host: one [2, num_blocks, block_size * num_kv_heads * head_size] tensor
// whose first half is the key cache [num_blocks, num_kv_heads, head_size / x, block_size, x] and
// whose second half is the value cache [num_blocks, num_kv_heads, head_size, block_size].
#pragma once

#include <cstdint>

namespace graphattn::test {

struct LegacyLayout {
  int64_t block_size = 16, num_kv_heads = 1, head_size = 128;
  int64_t x = 8;  // elements in 16 bytes: 8 for 16-bit caches, 16 for fp8
  // Dimension d of KV head h of the token in slot `off` of block `blk`, from the start of its half.
  int64_t key(int64_t blk, int64_t off, int64_t h, int64_t d) const {
    return (((blk * num_kv_heads + h) * (head_size / x) + d / x) * block_size + off) * x + d % x;
  }
  int64_t value(int64_t blk, int64_t off, int64_t h, int64_t d) const {
    return ((blk * num_kv_heads + h) * head_size + d) * block_size + off;
  }
};

}  // namespace graphattn::test
