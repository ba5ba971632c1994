// SPDX-License-Identifier: Apache-2.0
// A layer's kernel features and the spec of each of its kernels (backend.hpp).
#include "graphattn/backend.hpp"

namespace graphattn {

KernelFeatures features_of(const AttentionLayerConfig& c) {
  KernelFeatures f;
  f.head_size = c.head_size;
  f.block_size = c.block_size;
  f.dtype = c.dtype;
  f.kv_dtype = c.kv_dtype;
  f.group = c.num_kv_heads > 0 ? c.num_heads / c.num_kv_heads : 0;
  f.sliding_window = c.window > 0;
  f.soft_cap = c.soft_cap > 0;
  f.layout = c.layout;
  f.arch = c.arch;
  f.alibi = c.alibi_slopes != nullptr;
  f.sinks = c.sinks != nullptr;
  f.multi_token = c.decode_query_len > 1;
  f.non_causal = c.attn_type != AttentionType::kDecoder;
  f.dense_kv = c.attn_type == AttentionType::kEncoderOnly;  // no cache: K/V come in dense
  f.block_sparse = c.blocksparse.sparse();
  f.check_bounds = c.check_bounds;
  f.softmax_lse = c.softmax_lse;
  f.q_fp8 = c.q_dtype == KvDType::kFp8E4M3;
  return f;
}

AttentionSpec spec_for(const KernelFeatures& features, KernelKind kind) {
  return features.for_kernel(kind);
}

AttentionSpec spec_for(const AttentionLayerConfig& c, KernelKind kind) {
  return spec_for(features_of(c), kind);
}

}  // namespace graphattn
