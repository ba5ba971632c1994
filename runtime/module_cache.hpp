// SPDX-License-Identifier: Apache-2.0
// Loaded kernels: a compiled cubin as a CUmodule/CUfunction in one CUDA context, and the launch.
#pragma once

#include <memory>

#include "graphattn/jit.hpp"
#include "graphattn/tensor.hpp"
#include "runtime/blocksparse.hpp"
#include "runtime/driver.hpp"

namespace graphattn::detail {

struct LoadedKernel {
  CUfunction function = nullptr;
  CUmodule module = nullptr;
  std::shared_ptr<const CompiledKernel> compiled;
};

// The kernel for spec in the current context: compiled through `cache` and loaded on first use.
// When `stream` is capturing and the kernel is not loaded yet, throws instead: nothing may
// compile or load inside a capture.
const LoadedKernel& load_kernel(const AttentionSpec& spec, KernelCache& cache,
                                CUstream stream = nullptr);

// Lets k's blocks use `bytes` of dynamic shared memory (above the 48 KiB default the driver
// must be told; the limit only grows). Thread-safe; a driver call only the first time a kernel
// needs more.
void ensure_shared_limit(const LoadedKernel& k, int bytes);

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1;
  unsigned shared_bytes = 0;
  unsigned cluster_x = 1;  // > 1: thread-block clusters of cluster_x x 1 x 1 (sm_90+)
};

// Launches with the parameter struct passed by value as the only kernel argument. On sm_90 and
// newer the launch allows programmatic dependent launch: the kernel may be scheduled while the
// previous kernel in the stream finishes, and every template waits for it (griddepcontrol.wait,
// in common.cuh) before touching memory, so a captured step's nodes overlap their launch gaps.
template <typename Params>
void launch(const LoadedKernel& k, const LaunchShape& s, CUstream stream, const Params& p) {
  void* args[] = {const_cast<Params*>(&p)};
  CUlaunchAttribute attr[2]{};
  attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr[0].value.programmaticStreamSerializationAllowed = 1;
  attr[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr[1].value.clusterDim.x = s.cluster_x;
  attr[1].value.clusterDim.y = 1;
  attr[1].value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = s.grid_x;
  cfg.gridDimY = s.grid_y;
  cfg.gridDimZ = s.grid_z;
  cfg.blockDimX = s.block_x;
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = s.shared_bytes;
  cfg.hStream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = k.compiled->spec.arch < 90 ? 0 : s.cluster_x > 1 ? 2 : 1;
  GA_CU_CHECK(driver().cuLaunchKernelEx(&cfg, k.function, args, nullptr));
}

// The views every paged-attention launch reads (DecodeLaunch and PrefillLaunch start with them).
// Built from the views and the per-head arrays only: the mode flags below are set by name, never
// by position (a brace list that reached them once passed the non-causal flag as multi_token).
// The descales of an e4m3 query (DecodeLaunch::q8, AttentionLayerConfig's q_scale, q_descale,
// k_descale, v_descale and the two descale strides).
struct FpQueryScales {
  float q_scale = 1.0f;
  const float* q_descale = nullptr;  // [num_reqs, num_kv_heads] fp32 (strided) or null
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t req_stride = 0;  // elements
  int64_t head_stride = 0;
};

struct AttentionViews {
  AttentionViews() = default;
  AttentionViews(const TensorView& query, const TensorView& kv_cache, const TensorView& output,
                 const TensorView& seq_lens, const TensorView& block_table,
                 const float* alibi_slopes = nullptr, const float* sinks = nullptr)
      : query(query),
        kv_cache(kv_cache),
        output(output),
        seq_lens(seq_lens),
        block_table(block_table),
        alibi_slopes(alibi_slopes),
        sinks(sinks) {}
  TensorView query;        // [num_tokens, num_heads, head_size] fp16/bf16, head dim contiguous
  TensorView kv_cache;     // [2, num_blocks, block_size, num_kv_heads, head_size] NHD or HND
  TensorView output;       // [num_tokens, num_heads, head_size] dtype of query; written
  TensorView seq_lens;     // [>= num_reqs] int32, context + new tokens; 0 = padded request
  TensorView block_table;  // [>= num_reqs, max_blocks_per_seq] int32, rows contiguous
  // Per-head launch data of the ALiBi and sinks spec axes (non-null: the spec has the axis).
  const float* alibi_slopes = nullptr;  // [num_heads] fp32 device memory
  const float* sinks = nullptr;         // [num_heads] fp32 device memory
  // Decode launches: the multi-token kernel (spec "_mt"; DecodeLaunch's query_start_loc and
  // max_query_len say the rows). Prefill launches leave it false.
  bool multi_token = false;
  // Prefill: queries see every key of their request (spec axis non_causal); decode ignores it.
  bool non_causal = false;
  // Block-sparse pattern (spec axis block_sparse when blocksparse.sparse()).
  BlockSparseParams blocksparse;
  // Softmax LSE out (spec axis softmax_lse when ndim != 0): [num_heads, >= num_tokens] fp32,
  // rows contiguous; the launch writes the entries of the query rows it handles.
  TensorView softmax_lse;
};

// The paged-attention fields that DecodeParams and PrefillParams share: query and output rows,
// and the paged KV cache (PagedKvView: the key and value halves of the flash-layout cache,
// sequence lengths and the block table).
// The query and output rows and the per-head terms (every attention launch, the dense prefill
// included).
template <typename Params>
void set_query_output_views(Params& p, const TensorView& query, const TensorView& output,
                            const float* alibi_slopes, const float* sinks) {
  p.query = query.data;
  p.output = output.data;
  p.terms.alibi_slopes = alibi_slopes;
  p.terms.sinks = sinks;
  p.query_token_stride = query.strides[0];
  p.query_head_stride = query.strides[1];
  p.output_token_stride = output.strides[0];
  p.output_head_stride = output.strides[1];
}

template <typename Params>
void set_paged_attention_views(Params& p, const AttentionViews& v) {
  const int64_t elem = scalar_bytes(v.kv_cache.dtype);
  set_query_output_views(p, v.query, v.output, v.alibi_slopes, v.sinks);
  p.bsp = block_sparse_launch_data(v.blocksparse, v.query.shape[1], v.kv_cache.shape[3]);
  p.kv.key_cache = v.kv_cache.data;
  p.kv.value_cache = static_cast<const char*>(v.kv_cache.data) + v.kv_cache.strides[0] * elem;
  p.kv.seq_lens = static_cast<const int*>(v.seq_lens.data);
  p.kv.block_table = static_cast<const int*>(v.block_table.data);
  p.kv.cache_block_stride = v.kv_cache.strides[1];
  p.kv.cache_token_stride = v.kv_cache.strides[2];
  p.kv.cache_head_stride = v.kv_cache.strides[3];
  p.kv.block_table_stride = v.block_table.strides[0];
  p.kv.num_blocks = v.kv_cache.shape[1];
  p.softmax_lse = static_cast<float*>(v.softmax_lse.data);
  p.lse_head_stride = v.softmax_lse.ndim != 0 ? v.softmax_lse.strides[0] : 0;
}

}  // namespace graphattn::detail
