// SPDX-License-Identifier: Apache-2.0
// forward_prefix: vLLM's PagedAttention.forward_prefix over its legacy PagedAttention caches,
// served by the prefill kernels' legacy-layout specialization (templates/prefill_sm90.cu on sm_90
// for 16-bit caches and head sizes that are multiples of 64, else templates/prefill.cu).
#include <cmath>
#include <string>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/paged_cache.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/prefill.hpp"
#include "runtime/tensor_checks.hpp"

namespace graphattn {
namespace {

using detail::str;

// key or value (not read, see forward_prefix): empty, or the new tokens' rows of the caches'
// heads in the query's dtype.
void check_new_rows(const TensorView& t, const char* name, const TensorView& query,
                    const detail::KvCacheShape& kc) {
  if (t.ndim == 0) return;
  detail::require_rank(t, 3, name, "[num_tokens, num_kv_heads, head_size]");
  GA_REQUIRE(t.dtype == query.dtype && t.shape[0] == query.shape[0] &&
                 t.shape[1] == kc.num_kv_heads && t.shape[2] == kc.head_size,
             std::string(name) + " " + t.describe() + " must be " + to_string(query.dtype) + "[" +
                 str(query.shape[0]) + ", " + str(kc.num_kv_heads) + ", " + str(kc.head_size) +
                 "] (the query's tokens, the caches' KV heads and head size) or empty");
}

// The caches' kernel spec on `arch` after every check of the views and options.
AttentionSpec prefix_spec(const detail::PrefillLaunch& a, const detail::KvCacheShape& kc,
                          int arch) {
  KernelFeatures f =
      detail::launch_features(arch, false, a.alibi_slopes != nullptr, a.sinks != nullptr);
  f.non_causal = a.non_causal;
  const AttentionSpec spec = detail::attention_spec_for(KernelKind::kPrefill, a.query, a.output, kc,
                                                        a.window, a.soft_cap, f);
  detail::check_prefill_launch(spec, a, kc, "forward_prefix");
  return spec;
}

}  // namespace

void forward_prefix(const TensorView& query, const TensorView& key, const TensorView& value,
                    const std::string& kv_cache_dtype, const TensorView& key_cache,
                    const TensorView& value_cache, const TensorView& block_tables,
                    const TensorView& query_start_loc, const TensorView& seq_lens,
                    int max_query_len, const float* alibi_slopes, int sliding_window, float k_scale,
                    float v_scale, const TensorView& output, CUstream stream, KernelCache& cache,
                    const PrefixOptions& options) {
  const KvDType kv = kv_cache_dtype_of(kv_cache_dtype);
  detail::require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  const DType dtype = dtype_of(query.dtype);
  const detail::KvCacheShape kc = detail::check_paged_caches(key_cache, value_cache, dtype);
  GA_REQUIRE(kc.kv_dtype == kv, "key_cache dtype " + std::string(to_string(key_cache.dtype)) +
                                    " does not hold kv_cache_dtype '" + kv_cache_dtype +
                                    "' for a " + to_string(query.dtype) +
                                    " query; supported: 'auto' with " + to_string(query.dtype) +
                                    " caches, 'fp8' / 'fp8_e4m3' with fp8_e4m3 caches, " +
                                    "'fp8_e5m2' with fp8_e5m2 caches");
  GA_REQUIRE(kc.block_size % 16 == 0,
             "block_size " + str(kc.block_size) + " of key_cache " + key_cache.describe() +
                 " is not supported (vLLM's default block size 8 included); supported: 16, 32, "
                 "..., 256 (multiples of 16)");
  check_new_rows(key, "key", query, kc);
  check_new_rows(value, "value", query, kc);
  GA_REQUIRE(sliding_window >= 0, "sliding_window " + str(sliding_window) +
                                      " is not supported; supported: 0 (none) or >= 1");
  GA_REQUIRE(options.scale == 0.0f || (std::isfinite(options.scale) && options.scale > 0.0f),
             "scale " + std::to_string(options.scale) +
                 " is not supported; supported: finite > 0, or 0 for 1 / sqrt(head_size)");
  detail::require_rank(query_start_loc, 1, "query_start_loc", "[num_reqs + 1]");
  GA_REQUIRE(query_start_loc.shape[0] >= 1,
             "query_start_loc " + query_start_loc.describe() + " needs num_reqs + 1 >= 1 entries");

  detail::PrefillLaunch a{
      {query, TensorView{}, output, seq_lens, block_tables, alibi_slopes, options.sinks}};
  a.non_causal = !options.causal;
  a.query_start_loc = query_start_loc;
  a.num_reqs = static_cast<int>(query_start_loc.shape[0] - 1);
  a.max_query_len = max_query_len;
  a.scale =
      options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(kc.head_size));
  a.window = sliding_window;
  a.soft_cap = options.soft_cap;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  a.device_scales = {options.k_scale_device, options.v_scale_device};
  // Every check before the device is asked for its arch, so a bad call fails the same way on a
  // machine without a GPU; sm_90 stands in for it.
  prefix_spec(a, kc, 90);
  const AttentionSpec spec = prefix_spec(a, kc, current_device_arch());
  const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);

  // The legacy caches' addressing: the kernel adds the offsets inside a block itself (the
  // key cache's [head_size / x, block_size, x], the value cache's [head_size, block_size]).
  PrefillParams p{};
  detail::set_query_output_views(p, query, output, alibi_slopes, options.sinks);
  p.kv.key_cache = kc.key_data;
  p.kv.value_cache = kc.value_data;
  p.kv.seq_lens = static_cast<const int*>(seq_lens.data);
  p.kv.block_table = static_cast<const int*>(block_tables.data);
  p.kv.cache_head_stride = kc.head_stride;  // compact legacy caches (check_paged_caches)
  p.kv.cache_block_stride = kc.block_stride;
  p.kv.cache_token_stride = 0;
  p.kv.block_table_stride = block_tables.strides[0];
  p.kv.num_blocks = kc.num_blocks;
  detail::enqueue_prefill_params(k, a, p, kc.num_kv_heads, stream);
}

}  // namespace graphattn
