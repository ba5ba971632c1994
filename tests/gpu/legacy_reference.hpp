// SPDX-License-Identifier: Apache-2.0
// A decode batch over vLLM's legacy caches, the parts shared by tests/gpu/test_legacy_decode.cpp
// (16-bit and fp8 caches) and test_legacy_decode_f32.cpp: the block table, the metadata on the
// device, and the float64 reference. Case: num_kv_heads, group, head_size, block_size, seq_lens
// (one query token each), window, soft_cap, alibi, sinks. Batch: num_blocks, max_blocks,
// block_table, q, k_ref / v_ref (logical NHD), slopes, sinks and their device buffers and views.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

namespace graphattn::test {

// Each request's blocks drawn from a shuffled pool of the blocks it needs plus extra_blocks;
// entries no request uses point far outside the cache.
template <typename Case, typename Batch>
void legacy_block_table(const Case& c, std::mt19937_64& rng, Batch& b, int extra_blocks) {
  const int n = static_cast<int>(c.seq_lens.size());
  const int64_t B = c.block_size;
  int64_t used = 0;
  for (int l : c.seq_lens) {
    used += (l + B - 1) / B;
    b.max_blocks = std::max<int64_t>(b.max_blocks, (l + B - 1) / B);
  }
  b.num_blocks = used + extra_blocks;
  std::vector<int> phys(b.num_blocks);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  b.block_table.assign(n * b.max_blocks, 0x3fffffff);
  int64_t next = 0;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < (c.seq_lens[r] + B - 1) / B; ++i)
      b.block_table[r * b.max_blocks + i] = phys[next++];
}

// seq_lens and the block table on the device; ALiBi slopes and sink logits drawn (empty when
// off) and uploaded.
template <typename Case, typename Batch>
void legacy_upload_metadata(const Case& c, std::mt19937_64& rng, Batch& b) {
  const int n = static_cast<int>(c.seq_lens.size());
  const int64_t H = int64_t{c.num_kv_heads} * c.group;
  b.d_seq = DeviceBuffer(n * 4);
  b.d_seq.upload(c.seq_lens.data(), n * 4);
  b.seq_view = TensorView::contiguous(b.d_seq.data(), ScalarType::kInt32, {n});
  b.d_bt = DeviceBuffer(b.block_table.size() * 4);
  b.d_bt.upload(b.block_table.data(), b.block_table.size() * 4);
  b.bt_view = TensorView::contiguous(b.d_bt.data(), ScalarType::kInt32, {n, b.max_blocks});
  b.slopes = random_alibi_slopes(rng, static_cast<int>(H), c.alibi);
  b.sinks = random_sinks(rng, static_cast<int>(H), c.sinks);
  b.d_slopes = upload_floats(b.slopes);
  b.d_sinks = upload_floats(b.sinks);
  if (c.alibi) b.slopes_view = TensorView::contiguous(b.d_slopes.data(), ScalarType::kFloat32, {H});
}

// The float64 reference; k_ref / v_ref are lent to it rather than copied, and handed back. bsp:
// vLLM's block-sparse pattern, or null (dense).
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
