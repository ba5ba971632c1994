// SPDX-License-Identifier: Apache-2.0
// vLLM's merge_attn_states: two partial attention results of the same queries over disjoint
// key sets (cascade attention's shared prefix and each request's own suffix, or two splits of
// one context) combined by their log-sum-exps into the attention over both.
#pragma once

#include <cuda.h>

#include "graphattn/export.h"
#include "graphattn/jit.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn {

// For every token t and head h, with p = prefix_lse[h, t] and s = suffix_lse[h, t] (natural
// log; an infinite value, +inf from FlashAttention 2 or -inf from 3 for an empty key set,
// counts as -inf) and m = max(p, s):
//   output[t, h] = (e^(p-m) prefix_output[t, h] + e^(s-m) suffix_output[t, h]) / (e^(p-m) +
//   e^(s-m)) output_lse[h, t] = log(e^(p-m) + e^(s-m)) + m
// computed in fp32 and rounded once to the output's type. Both infinite: output[t, h] =
// prefix_output[t, h] as stored and output_lse[h, t] = -inf (vLLM's CUDA kernel's rule).
//   output, prefix_output, suffix_output: [num_tokens, num_heads, head_size] of one dtype, fp16,
//                 bf16 or fp32 (output written; it may be prefix_output or suffix_output); head
//                 dim contiguous, head_size * element size a multiple of 16 bytes (fp16/bf16:
//                 multiples of 8, fp32: of 4, as vLLM's CUDA kernel), rows 16-byte aligned
//   prefix_lse, suffix_lse: fp32 [num_heads, num_tokens] (vLLM's and FlashAttention's layout),
//                 any strides
//   output_lse:   fp32 [num_heads, num_tokens], any strides, or an empty view (ndim 0): none
// Throws graphattn::Error naming the bad argument before any device use. One kernel on
// `stream`, no host sync and no allocation: capturable once its kernel is loaded (compiled
// through `cache` on the first call, spec merge_states_h128_b16_<dtype>_..._smXX).
GRAPHATTN_API void merge_attn_states(const TensorView& output, const TensorView& prefix_output,
                                     const TensorView& prefix_lse, const TensorView& suffix_output,
                                     const TensorView& suffix_lse, const TensorView& output_lse,
                                     CUstream stream, KernelCache& cache = default_kernel_cache());

}  // namespace graphattn
