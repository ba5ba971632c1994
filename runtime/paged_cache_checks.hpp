// Checks of vLLM's legacy PagedAttention caches, shared by the cache write into them
// (write_to_paged_cache) and the prefill that reads them (forward_prefix).
#pragma once

#include "graphattn/tensor.hpp"
#include "runtime/tensor_checks.hpp"

namespace graphattn::detail {

// The legacy key cache [num_blocks, num_kv_heads, head_size / x, block_size, x] and value cache
// [num_blocks, num_kv_heads, head_size, block_size] of one element type, compact and 16-byte
// aligned, for a model of type `dtype`: their shape (layout kLegacy; no flash strides). Throws
// graphattn::Error naming the cache that does not fit. The kernel spec checks the rest (block
// size, head size against x).
KvCacheShape check_paged_caches(const TensorView& key_cache, const TensorView& value_cache,
                                DType dtype);

}  // namespace graphattn::detail
