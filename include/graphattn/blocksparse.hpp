// SPDX-License-Identifier: Apache-2.0
// Block-sparse attention (vLLM's BlocksparseFlashAttention, the Phi-3-small pattern): a causal
// layer whose heads each see, besides the causal mask, only the key blocks of a local + vertical
// stride pattern. The kernels (specs "_bsp") skip the key tiles no query of a thread block sees
// without reading them, so a decode reads only the attended part of the KV cache.
#pragma once

#include <string>
#include <tuple>

#include "graphattn/export.h"

namespace graphattn {

// The pattern of one layer on one tensor-parallel rank. Query position qp of local query head h
// sees key position kp <= qp iff, with qb = qp / block_size and kb = kp / block_size,
//   qb - kb < local_blocks  or  (kb + offset(h)) % vert_stride == 0,
//   offset(h) = (active_head_offset + h) * head_sliding_step + 1               (step >= 0)
//             = (active_head_offset / group + h / group) * -head_sliding_step + 1   (step < 0)
// (group = num_heads / num_kv_heads): vLLM's paged_attention IS_BLOCK_SPARSE rule, which its
// prefill mask (get_sparse_attn_mask) shares for steps >= 0.
struct GRAPHATTN_API BlockSparseParams {
  // Tokens per sparse block; 0: dense attention (the other fields are ignored). A multiple of 16
  // and of the KV cache's block size.
  int block_size = 0;
  int local_blocks = 0;  // >= 1: the query's own sparse block and the local_blocks - 1 before it
  // >= 1: every vert_stride-th block is seen from afar. 1 sees every block: dense attention, as
  // vLLM runs it (its decode takes the dense kernel when vert_stride <= 1).
  int vert_stride = 0;
  // vLLM's BlocksparseParams.head_sliding_step (blocksparse_head_sliding_step() computes its
  // default): 0 every head has one pattern (homo_head), > 0 the pattern slides over the query
  // heads' global indices, < 0 over the KV heads' (homo_head_group).
  int head_sliding_step = 0;
  // The global index of this rank's first query head, vLLM's active_head_range[0]:
  // tp_rank * num_heads (a multiple of num_heads, >= 0). Its first KV head is
  // tp_rank * num_kv_heads.
  int active_head_offset = 0;

  // Whether a block-sparse kernel runs: block_size > 0 and vert_stride > 1.
  bool sparse() const { return block_size > 0 && vert_stride > 1; }
  auto fields() const {
    return std::tie(block_size, local_blocks, vert_stride, head_sliding_step, active_head_offset);
  }
  bool operator==(const BlockSparseParams& o) const { return fields() == o.fields(); }
  bool operator!=(const BlockSparseParams& o) const { return !(*this == o); }
};

// vLLM's head_sliding_step for a layer of total_num_heads query heads and total_num_kv_heads KV
// heads over all tensor-parallel ranks: 0 with homo_head; -max(1, vert_stride /
// total_num_kv_heads) with homo_head_group; max(1, vert_stride / total_num_heads) otherwise
// (integer division). Throws graphattn::Error for counts or a stride below 1.
GRAPHATTN_API int blocksparse_head_sliding_step(int total_num_heads, int total_num_kv_heads,
                                                int vert_stride, bool homo_head,
                                                bool homo_head_group);

// The pattern from vLLM's paged_attention arguments (blocksparse_local_blocks,
// blocksparse_vert_stride, blocksparse_block_size, blocksparse_head_sliding_step, tp_rank) for a
// rank of num_heads query heads: active_head_offset = tp_rank * num_heads. vLLM's dense decode
// (vert_stride <= 1) gives a pattern whose sparse() is false.
GRAPHATTN_API BlockSparseParams blocksparse_from_vllm(int local_blocks, int vert_stride,
                                                      int block_size, int head_sliding_step,
                                                      int tp_rank, int num_heads);

// Empty when `p` suits a layer of num_heads query heads, num_kv_heads KV heads and KV cache
// block size kv_block_size; otherwise what is wrong, naming the value and the allowed set.
GRAPHATTN_API std::string blocksparse_problem(const BlockSparseParams& p, int num_heads,
                                              int num_kv_heads, int kv_block_size);

}  // namespace graphattn
