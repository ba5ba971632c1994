// SPDX-License-Identifier: Apache-2.0
// Host side of merge_attn_states (templates/merge_states.cu): checks the views, picks the spec
// (dtype and arch only) and launches one grid-strided kernel.
#include "graphattn/merge_states.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn {
namespace {

using detail::str;

constexpr const char* kWhere = "merge_attn_states: ";

// An LSE view: fp32 [num_heads, num_tokens], 4-byte aligned, any strides.
void check_lse(const TensorView& t, const char* name, int64_t heads, int64_t tokens) {
  detail::require_rank(t, 2, name, "[num_heads, num_tokens]");
  GA_REQUIRE(t.dtype == ScalarType::kFloat32 && t.shape[0] == heads && t.shape[1] == tokens,
             std::string(kWhere) + name + " " + t.describe() +
                 " is not supported; supported: fp32[" + str(heads) + ", " + str(tokens) +
                 "] ([num_heads, num_tokens] of output)");
  GA_REQUIRE(reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0,
             std::string(kWhere) + name + " is not 4-byte aligned");
}

}  // namespace

void merge_attn_states(const TensorView& output, const TensorView& prefix_output,
                       const TensorView& prefix_lse, const TensorView& suffix_output,
                       const TensorView& suffix_lse, const TensorView& output_lse, CUstream stream,
                       KernelCache& cache) {
  const char* shape = "[num_tokens, num_heads, head_size]";
  detail::require_rank(output, 3, "output", shape);
  detail::require_rank(prefix_output, 3, "prefix_output", shape);
  detail::require_rank(suffix_output, 3, "suffix_output", shape);
  const DType dtype = element_dtype_of(output.dtype);
  for (const TensorView* t : {&prefix_output, &suffix_output}) {
    const char* name = t == &prefix_output ? "prefix_output" : "suffix_output";
    bool same = t->dtype == output.dtype;
    for (int d = 0; d < 3; ++d) same = same && t->shape[d] == output.shape[d];
    GA_REQUIRE(same, std::string(kWhere) + name + " " + t->describe() +
                         " must have output's dtype and shape: " + output.describe());
  }
  const int64_t tokens = output.shape[0], heads = output.shape[1], head_size = output.shape[2];
  const int bytes = dtype_bytes(dtype);
  GA_REQUIRE(head_size >= 1 && head_size * bytes % 16 == 0,
             std::string(kWhere) + "head size " + str(head_size) + " is not supported for " +
                 to_string(output.dtype) + "; supported: multiples of " + str(16 / bytes) +
                 " (16-byte vectors, as vLLM's CUDA kernel)");
  GA_REQUIRE(tokens <= INT_MAX && heads <= INT_MAX,
             std::string(kWhere) + "output " + output.describe() +
                 " is not supported; supported: at most 2^31 - 1 tokens and heads");
  detail::require_vector_access(output, "output");
  detail::require_vector_access(prefix_output, "prefix_output");
  detail::require_vector_access(suffix_output, "suffix_output");
  check_lse(prefix_lse, "prefix_lse", heads, tokens);
  check_lse(suffix_lse, "suffix_lse", heads, tokens);
  const bool with_lse = output_lse.ndim != 0;
  if (with_lse) check_lse(output_lse, "output_lse", heads, tokens);

  AttentionLayerConfig c;
  c.dtype = dtype;
  c.arch = current_device_arch();
  const AttentionSpec spec = spec_for(c, KernelKind::kMergeStates);
  spec.validate();
  const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);
  if (tokens == 0 || heads == 0) return;

  MergeStatesParams p{};
  p.output = output.data;
  p.output_lse = with_lse ? static_cast<float*>(output_lse.data) : nullptr;
  p.prefix_output = prefix_output.data;
  p.prefix_lse = static_cast<const float*>(prefix_lse.data);
  p.suffix_output = suffix_output.data;
  p.suffix_lse = static_cast<const float*>(suffix_lse.data);
  p.output_token_stride = output.strides[0];
  p.output_head_stride = output.strides[1];
  p.prefix_token_stride = prefix_output.strides[0];
  p.prefix_head_stride = prefix_output.strides[1];
  p.suffix_token_stride = suffix_output.strides[0];
  p.suffix_head_stride = suffix_output.strides[1];
  if (with_lse) {
    p.output_lse_head_stride = output_lse.strides[0];
    p.output_lse_token_stride = output_lse.strides[1];
  }
  p.prefix_lse_head_stride = prefix_lse.strides[0];
  p.prefix_lse_token_stride = prefix_lse.strides[1];
  p.suffix_lse_head_stride = suffix_lse.strides[0];
  p.suffix_lse_token_stride = suffix_lse.strides[1];
  p.num_heads = static_cast<int>(heads);
  p.vectors_per_head = static_cast<int>(head_size * bytes / 16);
  p.num_vectors = tokens * heads * p.vectors_per_head;
  detail::LaunchShape s;
  s.grid_x = static_cast<unsigned>(std::min<int64_t>(
      GA_MERGE_MAX_BLOCKS, (p.num_vectors + GA_MERGE_THREADS - 1) / GA_MERGE_THREADS));
  s.block_x = GA_MERGE_THREADS;
  detail::launch(k, s, stream, p);
}

}  // namespace graphattn
