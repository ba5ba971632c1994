// Host side of the split-KV decode kernels (templates/decode.cu, templates/decode_reduce.cu).
//
// Use from a backend's forward():
//   const AttentionSpec spec = detail::decode_spec(args, arch);        // once, before capture
//   const LoadedKernel& dk = load_kernel(spec, cache);                 // and the reduce kernel:
//   const LoadedKernel& rk = load_kernel(detail::decode_reduce_spec(spec), cache);
//   args.max_splits = detail::decode_max_splits(...);                  // fixed per batch size
//   detail::launch_decode(dk, rk, args, stream);                       // capture-safe
#pragma once

#include <cuda.h>

#include <cstddef>

#include "graphattn/spec.hpp"
#include "graphattn/tensor.hpp"
#include "runtime/module_cache.hpp"

namespace graphattn::detail {

// One decode launch over requests [0, num_decodes) of a batch (decodes come first, one query
// token each: request r's query is token r).
struct DecodeLaunch {
  TensorView query;        // [num_tokens >= num_decodes, num_heads, head_size] fp16/bf16
  TensorView kv_cache;     // [2, num_blocks, block_size, num_kv_heads, head_size] NHD or HND
  TensorView output;       // [num_tokens >= num_decodes, num_heads, head_size] dtype of query
  TensorView seq_lens;     // [>= num_decodes] int32, context + new token; 0 = padded request
  TensorView block_table;  // [>= num_decodes, max_blocks_per_seq] int32, rows contiguous
  int num_decodes = 0;
  int max_splits = 1;      // grid width; each request uses at most this many splits
  float scale = 1.0f;      // softmax scale
  int window = 0;          // sliding window in tokens; 0 = none (the spec must agree)
  float soft_cap = 0.0f;   // logits soft cap; 0 = none (the spec must agree)
  float k_scale = 1.0f;    // fp8 KV: key = stored * k_scale; ignored otherwise
  float v_scale = 1.0f;    // fp8 KV: value = stored * v_scale; ignored otherwise
  void* workspace = nullptr;   // decode_workspace_bytes(...) bytes, 16-byte aligned
  size_t workspace_size = 0;
};

// The decode spec these views and options need on `arch`. Checks ranks, dtypes and head counts
// (throws graphattn::Error naming the bad argument); does not touch the device.
AttentionSpec decode_spec(const DecodeLaunch& args, int arch);
// The reduce kernel paired with a decode spec: head size, dtype and arch; the rest canonical.
AttentionSpec decode_reduce_spec(const AttentionSpec& decode);

// Workspace for the partial results of one launch.
size_t decode_workspace_bytes(int num_decodes, int num_heads, int head_size, int max_splits);

// Thread blocks of `decode` that the current device runs at once (multiprocessors times
// occupancy). Raises the kernel's dynamic shared-memory limit first. Not for use in a capture.
int decode_resident_blocks(const LoadedKernel& decode);

// The split policy: the grid width for a batch of num_decodes. Enough splits to fill the
// device's resident_blocks with one wave, never more than the longest attended length needs
// (GA_DECODE_MIN_TILES_PER_SPLIT tiles per split at least). A pure function.
//   max_model_len: longest seq_len; window: sliding window (0 none); group: heads per KV head
int decode_max_splits(int num_decodes, int num_kv_heads, int group, int max_model_len, int window,
                      int resident_blocks);

// Checks `args` against the loaded kernels and launches decode (and the reduce when
// max_splits > 1) on `stream`. Allocates and synchronizes nothing; capture-safe once loaded
// and decode_resident_blocks() has been called for `decode`. num_decodes 0 launches nothing.
void launch_decode(const LoadedKernel& decode, const LoadedKernel& reduce,
                   const DecodeLaunch& args, CUstream stream);

}  // namespace graphattn::detail
