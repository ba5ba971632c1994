// SPDX-License-Identifier: Apache-2.0
// Layer configurations for the tests and benchmarks, by shape.
#pragma once

#include "graphattn/backend.hpp"

namespace graphattn::test {

// A layer of these shapes (bf16, 16-token blocks, 16-bit cache; every other field keeps
// AttentionLayerConfig's default) whose requests reach max_model_len tokens, at most
// max_num_seqs at once.
inline AttentionLayerConfig layer_config(int num_heads, int num_kv_heads, int head_size,
                                         int max_model_len, int max_num_seqs) {
  AttentionLayerConfig c;
  c.num_heads = num_heads;
  c.num_kv_heads = num_kv_heads;
  c.head_size = head_size;
  c.block_size = 16;
  c.dtype = DType::kBFloat16;
  c.max_model_len = max_model_len;
  c.max_num_seqs = max_num_seqs;
  return c;
}

// The same with an fp8 cache (kv) and its scales, or a 16-bit one (kv kAuto, scales 1).
inline AttentionLayerConfig with_kv(AttentionLayerConfig c, KvDType kv, float fp8_scale) {
  c.kv_dtype = kv;
  c.k_scale = c.v_scale = kv == KvDType::kAuto ? 1.0f : fp8_scale;
  return c;
}

}  // namespace graphattn::test
