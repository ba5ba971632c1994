// SPDX-License-Identifier: Apache-2.0
// Host side of the prefill kernel (templates/prefill.cu): variable-length queries over the paged
// KV cache, causal, with GQA, sliding window, soft cap and fp8 KV (vLLM v1 flash semantics).
//
// Use from a backend's forward():
//   const AttentionSpec spec = detail::prefill_spec(args, arch);   // once, before capture
//   const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);
//   detail::launch_prefill(k, args, stream);                        // capture-safe
#pragma once

#include <cuda.h>

#include "graphattn/spec.hpp"
#include "graphattn/tensor.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn::detail {

// One prefill launch over requests [first_req, num_reqs) of a batch.
struct PrefillLaunch : AttentionViews {
  PrefillLaunch() = default;
  explicit PrefillLaunch(const AttentionViews& views) : AttentionViews(views) {}
  TensorView query_start_loc;  // [>= num_reqs + 1] int32, non-decreasing token offsets
  int first_req = 0;           // first request this launch handles (decodes come before it)
  int num_reqs = 0;            // one past the last request handled
  int max_query_len = 0;       // >= every handled request's query length (sizes the grid)
  // > 0: the batch is split on the device (a graph captured for any mix): the prefills are the
  // requests of [first_req, num_reqs) holding more than device_split_q tokens, found by the
  // kernel from query_start_loc; the grid has room for every row tile that query.shape[0]
  // tokens can make, and max_query_len is not used. 0: requests [first_req, num_reqs) are all
  // prefills of at most max_query_len tokens.
  int device_split_q = 0;
  float scale = 1.0f;            // softmax scale, usually 1 / sqrt(head_size)
  int window = 0;                // sliding window in tokens; 0 = none (the spec must agree)
  float soft_cap = 0.0f;         // logits soft cap; 0 = none (the spec must agree)
  float k_scale = 1.0f;          // fp8 KV: key = stored * k_scale; ignored otherwise
  float v_scale = 1.0f;          // fp8 KV: value = stored * v_scale; ignored otherwise
  DeviceKvScales device_scales;  // fp8 KV: device scalars read instead of k_scale / v_scale
  // Checked mode: a zero-filled GaBoundsReport (templates/params.h) where the kernel records the
  // first block id outside the cache; the launch then needs the checked kernel (spec "_chk").
  // nullptr: the fast kernel.
  void* bounds = nullptr;
  // An e4m3 query (spec "_qe4m3"): its descales, as DecodeLaunch::q8.
  FpQueryScales q8;
};

// The prefill spec these views and options need on `arch` (e.g. 90). Checks ranks, dtypes and
// head counts (throws graphattn::Error naming the bad argument); does not touch the device.
AttentionSpec prefill_spec(const PrefillLaunch& args, int arch);

// Every check of a prefill launch's arguments against the kernel spec `ks`, given the KV cache's
// shape (check_kv_cache of args.kv_cache, checked once by the caller); `where` names the caller.
void check_prefill_launch(const AttentionSpec& ks, const PrefillLaunch& args,
                          const KvCacheShape& kc, const char* where);
// Launches on arguments that check_prefill_launch() accepted for k's spec; checks nothing.
void enqueue_prefill(const LoadedKernel& k, const PrefillLaunch& args, CUstream stream);
// The same with the query, output and KV views already in p (the legacy caches' view, which
// args.kv_cache cannot describe: forward_prefix); the rest comes from args.
void enqueue_prefill_params(const LoadedKernel& k, const PrefillLaunch& args, PrefillParams p,
                            int64_t num_kv_heads, CUstream stream);

// Checks `args` against the loaded kernel's spec and launches it on `stream`. Allocates
// nothing and synchronises nothing; safe inside a graph capture once `k` is loaded. A launch
// with no request or max_query_len 0 launches nothing.
void launch_prefill(const LoadedKernel& k, const PrefillLaunch& args, CUstream stream);

// One prefill launch over dense K/V (spec axis dense_kv, always non-causal here): encoder-only
// attention (varlen, by query_start_loc) and MultiHeadAttention (a uniform batch).
struct DensePrefillLaunch {
  TensorView query;            // [num_tokens, num_heads, head_size] fp16/bf16
  TensorView key;              // [num_kv_tokens, num_kv_heads, head_size] dtype of query
  TensorView value;            // same shape and strides as key
  TensorView output;           // [num_tokens, num_heads, head_size] dtype of query; written
  TensorView query_start_loc;  // [>= num_reqs + 1] int32: request r's queries and keys are its
                               // rows; ndim 0: a uniform batch (uniform_q_len, uniform_kv_len)
  int num_reqs = 0;
  int max_query_len = 0;   // >= every request's query length (sizes the grid)
  int uniform_kv_len = 0;  // uniform batch: keys per request
  float scale = 1.0f;
  const float* alibi_slopes = nullptr;  // [num_heads] fp32 device memory or null
  const float* sinks = nullptr;         // [num_heads] fp32 device memory or null
};
// The dense prefill spec these views need on `arch`; checks every argument (graphattn::Error
// naming the bad one) and touches no device.
AttentionSpec dense_prefill_spec(const DensePrefillLaunch& args, int arch);
// Launches on arguments that dense_prefill_spec() accepted for k's spec; checks nothing.
void enqueue_dense_prefill(const LoadedKernel& k, const DensePrefillLaunch& args, CUstream stream);

// Tile configuration of a prefill spec, from templates/params.h's ga_prefill_* functions, which
// the template that select_prefill_kernel() picks sizes its tiles with.
struct PrefillConfig {
  int block_m = 0;       // rows (query token x group head) per thread block
  int block_n = 0;       // keys per KV tile
  int threads = 0;       // threads per block
  int shared_bytes = 0;  // dynamic shared memory per block
};
PrefillConfig prefill_config(const AttentionSpec& spec);

// Whether k's kernel loads its K/V tiles by TMA (templates/prefill_sm90.cu, PW_TMA: the wgmma
// kernel over a paged flash-layout cache, not block-sparse); such a kernel takes
// GaPrefillTmaParams, whose maps enqueue_prefill_params() builds for every launch.
bool prefill_uses_tma(const AttentionSpec& spec);
// GRAPHATTN_PREFILL_TMA (read once; unset: on): 0 sends every tile of those kernels through the
// per-row cp.async gather instead, for comparison. Tests may override it (-1: the environment's,
// 0: off, 1: on) for the launches enqueued after the call.
bool prefill_tma_enabled();
void set_prefill_tma_override(int mode);

}  // namespace graphattn::detail
