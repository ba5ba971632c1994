// SPDX-License-Identifier: Apache-2.0
// Block-sparse attention: vLLM's head sliding step, the pattern's checks and launch data.
#include "runtime/blocksparse.hpp"

#include <algorithm>
#include <string>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn {
using detail::str;

int blocksparse_head_sliding_step(int total_num_heads, int total_num_kv_heads, int vert_stride,
                                  bool homo_head, bool homo_head_group) {
  GA_REQUIRE(
      total_num_heads >= 1 && total_num_kv_heads >= 1 && total_num_heads % total_num_kv_heads == 0,
      "blocksparse_head_sliding_step: total_num_heads " + str(total_num_heads) +
          " and total_num_kv_heads " + str(total_num_kv_heads) +
          " are not supported; supported: >= 1 with the heads a multiple of the KV heads");
  GA_REQUIRE(vert_stride >= 1, "blocksparse_head_sliding_step: vert_stride " + str(vert_stride) +
                                   " is not supported; supported: >= 1");
  if (homo_head) return 0;
  if (homo_head_group) return -std::max(1, vert_stride / total_num_kv_heads);
  return std::max(1, vert_stride / total_num_heads);
}

BlockSparseParams blocksparse_from_vllm(int local_blocks, int vert_stride, int block_size,
                                        int head_sliding_step, int tp_rank, int num_heads) {
  GA_REQUIRE(tp_rank >= 0 && num_heads >= 1 && int64_t{tp_rank} * num_heads <= (1 << 30),
             "blocksparse_from_vllm: tp_rank " + str(tp_rank) + " and num_heads " + str(num_heads) +
                 " are not supported; supported: tp_rank >= 0, num_heads >= 1, their product "
                 "<= 2^30");
  BlockSparseParams p;
  p.block_size = block_size;
  p.local_blocks = local_blocks;
  p.vert_stride = vert_stride;
  p.head_sliding_step = head_sliding_step;
  p.active_head_offset = tp_rank * num_heads;
  return p;
}

std::string blocksparse_problem(const BlockSparseParams& p, int num_heads, int num_kv_heads,
                                int kv_block_size) {
  if (p.block_size == 0) return "";  // dense
  const std::string pre = "blocksparse ";
  if (p.block_size < 0 || p.block_size % 16 != 0 || kv_block_size <= 0 ||
      p.block_size % kv_block_size != 0)
    return pre + "block_size " + str(p.block_size) +
           " is not supported; supported: 0 (dense) or a positive multiple of 16 and of the KV "
           "cache's block size " +
           str(kv_block_size);
  if (p.local_blocks < 1)
    return pre + "local_blocks " + str(p.local_blocks) + " is not supported; supported: >= 1";
  if (p.vert_stride < 1)
    return pre + "vert_stride " + str(p.vert_stride) +
           " is not supported; supported: >= 1 (1: dense)";
  // |step| * (global head + 1) + 1 stays in 64 bits for any int step; the bound keeps vLLM's
  // derived steps (at most vert_stride) and rejects nonsense.
  if (p.head_sliding_step < -(1 << 24) || p.head_sliding_step > (1 << 24))
    return pre + "head_sliding_step " + str(p.head_sliding_step) +
           " is not supported; supported: -2^24..2^24 (0: homo_head, < 0: over KV heads)";
  if (num_heads >= 1 && (p.active_head_offset < 0 || p.active_head_offset % num_heads != 0 ||
                         p.active_head_offset > (1 << 30)))
    return pre + "active_head_offset " + str(p.active_head_offset) +
           " is not supported; supported: tp_rank * num_heads (a multiple of " + str(num_heads) +
           ", 0..2^30)";
  (void)num_kv_heads;
  return "";
}

namespace detail {

GaBlockSparse block_sparse_launch_data(const BlockSparseParams& p, int64_t num_heads,
                                       int64_t num_kv_heads) {
  GaBlockSparse b{};
  if (!p.sparse() || num_heads <= 0 || num_kv_heads <= 0) return b;
  b.block = p.block_size;
  b.local_blocks = p.local_blocks;
  b.vert_stride = p.vert_stride;
  b.head_sliding_step = p.head_sliding_step;
  b.head_offset = p.active_head_offset;
  // tp_rank * num_heads / group = tp_rank * num_kv_heads (vLLM's KV-head slide).
  b.kv_head_offset = static_cast<int>(p.active_head_offset / (num_heads / num_kv_heads));
  return b;
}

void require_block_sparse(const BlockSparseParams& p, int64_t num_heads, int64_t num_kv_heads,
                          int64_t kv_block_size, const char* where) {
  const std::string problem =
      blocksparse_problem(p, static_cast<int>(num_heads), static_cast<int>(num_kv_heads),
                          static_cast<int>(kv_block_size));
  GA_REQUIRE(problem.empty(), std::string(where) + ": " + problem);
}

}  // namespace detail
}  // namespace graphattn
