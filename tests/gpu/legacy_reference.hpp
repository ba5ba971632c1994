// SPDX-License-Identifier: Apache-2.0
// The float64 reference of a decode batch over vLLM's legacy caches, shared by
// tests/gpu/test_legacy_decode.cpp (16-bit and fp8 caches) and test_legacy_decode_f32.cpp.
#pragma once

#include <numeric>
#include <vector>

#include "testing/reference.hpp"

namespace graphattn::test {

// Case: num_kv_heads, group, head_size, block_size, seq_lens (one query token each), window,
// soft_cap. Batch: max_blocks, block_table, q, slopes, sinks, and k_ref / v_ref (logical NHD),
// lent to the reference rather than copied and handed back. bsp: vLLM's block-sparse pattern,
// or null (dense).
template <typename Case, typename Batch>
std::vector<double> legacy_decode_reference(const Case& c, Batch& b, double scale,
                                            const RefBlockSparse* bsp = nullptr) {
  std::vector<int> qsl(c.seq_lens.size() + 1);
  std::iota(qsl.begin(), qsl.end(), 0);
  RefProblem p = paged_problem(c.num_kv_heads * c.group, c.num_kv_heads, c.head_size, c.block_size,
                               qsl, c.seq_lens, b.block_table, static_cast<int>(b.max_blocks));
  p.q = b.q;
  p.k_cache.swap(b.k_ref);
  p.v_cache.swap(b.v_ref);
  p.scale = scale;
  p.window = c.window;
  p.soft_cap = c.soft_cap;
  p.alibi_slopes = b.slopes;
  p.sinks = b.sinks;
  if (bsp) p.blocksparse = *bsp;
  std::vector<double> out = reference_attention(p);
  p.k_cache.swap(b.k_ref);
  p.v_cache.swap(b.v_ref);
  return out;
}

}  // namespace graphattn::test
