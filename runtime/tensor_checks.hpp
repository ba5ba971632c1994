// SPDX-License-Identifier: Apache-2.0
// Checks of engine-supplied views, shared by every device operation. Each failure names the
// argument, what it is, and what is allowed.
#pragma once

#include <string>

#include "core/require.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "runtime/blocksparse.hpp"
#include "runtime/module_cache.hpp"
#include "templates/params.h"

namespace graphattn::detail {

struct LoadedKernel;  // runtime/module_cache.hpp

// New keys and values come in the layer's type `dtype` whatever the cache stores: a kernel built
// for it would read another 16-bit type's bits as its own (an fp8 cache converts from it; a
// 16-bit cache copies it). `where` names the caller in the message.
void require_kv_dtype(const TensorView& key, const TensorView& value, DType dtype,
                      const char* where);
// The head dimension is contiguous and every row starts 16-byte aligned (vector loads).
void require_vector_access(const TensorView& t, const char* name, int bytes = 16);
// An e4m3 query's descales (spec "_qe4m3"; nothing otherwise): a positive finite q_scale,
// strides >= 0, 4-byte aligned pointers.
void require_query_scales(const AttentionSpec& spec, const FpQueryScales& s, const char* where);
// The kernels' form of them (the tail of DecodeQ8Params and PrefillQ8Params).
inline GaQueryScales query_scales_of(const FpQueryScales& s) {
  return {s.q_descale, s.k_descale, s.v_descale, s.req_stride, s.head_stride, s.q_scale};
}
// The query of an attention launch: 16-byte access, 8-byte for an e4m3 query.
void require_query_access(const TensorView& query);
// The layer's dtype of an attention launch: the query's, or the output's for an e4m3 query.
DType attention_dtype_of(const TensorView& query, const TensorView& output);
// The legacy decode's (paged_attention_v1 / v2): as attention_dtype_of, and float32 for a float32
// query (templates/decode_f32.cu).
DType legacy_decode_dtype_of(const TensorView& query, const TensorView& output);

// A KV cache view after check_kv_cache(): what it holds. A call checks its cache view once and
// hands this on to every later check and launch.
struct KvCacheShape {
  int64_t num_blocks = 0, block_size = 0, num_kv_heads = 0, head_size = 0;
  DType dtype = DType::kFloat16;  // the model dtype it was checked for
  KvLayout layout = KvLayout::kNHD;
  KvDType kv_dtype = KvDType::kAuto;
  void* key_data = nullptr;
  void* value_data = nullptr;
  // Flash layout: the view's strides (elements) of a block, a token and a KV head. Legacy
  // layout: the compact caches' block and head strides (shared by key and value), token 0.
  int64_t block_stride = 0, token_stride = 0, head_stride = 0;
  int64_t x = 0;  // legacy layout: the key cache's x (its last dim); 0 for the flash layout
};
KvCacheShape check_kv_cache(const TensorView& kv_cache, DType dtype);
// vLLM's legacy key and value caches (runtime/paged_cache.cpp): ranks, matching shapes, one
// element type (the model's or fp8), compact and 16-byte aligned. The key cache's x (its last
// dim) is paged_cache_x(its type), 8 or 16 (vLLM's tests build fp8 caches with x = 8).
KvCacheShape check_paged_caches(const TensorView& key_cache, const TensorView& value_cache,
                                DType dtype);
// The spec's key_x for these caches: 0 for the flash layout and for x = 16 bytes of the cache
// element, else x.
int key_x_of(const KvCacheShape& kc);
// The start of a direct launch (launch_decode, launch_prefill): k is loaded, the query and the
// output have rank 3, and the KV cache view is checked for the layer's dtype
// (attention_dtype_of: the output's for an e4m3 query). `where` names the caller.
KvCacheShape check_direct_launch(const LoadedKernel& k, const TensorView& query,
                                 const TensorView& output, const TensorView& kv_cache,
                                 const char* where);
// The features a checked KV cache view says (head and block size, dtypes, layout; group 1) on
// `arch`, for spec_for() on direct calls that have no AttentionLayerConfig.
KernelFeatures features_of(const KvCacheShape& kc, DType dtype, int arch);
// The spec of an attention kernel of `kind` (decode or prefill) for these views on
// features.arch: checks ranks, dtypes, head counts, window and soft cap (graphattn::Error naming
// the bad argument), then takes the head size, block size, dtypes, layout and group from the
// views and whether there is a window and a soft cap from their values; the rest of `features`
// (arch, checked mode, ALiBi, sinks, multi-token, non-causal, dense K/V, block-sparse) is the
// caller's. Touches no device.
AttentionSpec attention_spec_for(KernelKind kind, const TensorView& query, const TensorView& output,
                                 const TensorView& kv_cache, int window, float soft_cap,
                                 KernelFeatures features);
// The same for a cache view that check_kv_cache() has accepted (kc).
AttentionSpec attention_spec_for(KernelKind kind, const TensorView& query, const TensorView& output,
                                 const KvCacheShape& kc, int window, float soft_cap,
                                 KernelFeatures features);
// A softmax LSE output for `query`'s rows: fp32 [num_heads, >= num_tokens], rows contiguous
// (FlashAttention's softmax_lse layout; a wider row leaves the extra entries alone).
void require_softmax_lse(const TensorView& lse, const TensorView& query);
// A direct launch's features beyond its views: `arch` and the flags.
KernelFeatures launch_features(int arch, bool check_bounds, bool alibi, bool sinks);
// The softmax scale is finite and positive; with an fp8 cache (spec.kv_dtype) so are k_scale
// and v_scale.
void require_launch_scales(const AttentionSpec& spec, float scale, float k_scale, float v_scale);
// fp8 k/v scales in device memory, [1] fp32 each (null: the launch's float scales): what every
// launch of a layer hands to its kernel (GaKvScales in templates/params.h). A 16-bit cache's
// kernels never receive them.
struct DeviceKvScales {
  const float* k = nullptr;
  const float* v = nullptr;
};
// The one check of a device fp32 scalar pointer (the kv scales, calc_kv_scales' outputs): "" or
// the problem, naming `name`; `nullable`: null means "not used" and passes.
std::string device_scalar_problem(const float* p, const std::string& name, bool nullable);
// Device scale pointers are null or 4-byte aligned (fp32 scalars): "" or the first problem, naming
// k_scale_device or v_scale_device (the layer config's check and require_device_scales).
std::string device_scales_problem(const DeviceKvScales& s);
// device_scales_problem as an Error; `where` names the caller.
void require_device_scales(const DeviceKvScales& s, const char* where);
// Launches the loaded cache write kernel `k` on views that check_cache_write() accepted (kc is
// its result); checks nothing.
// `bounds`: checked mode's zero-filled GaBoundsReport (then `k` must be a checked kernel), or
// nullptr. `scales`: device scales that replace k_scale / v_scale (fp8 caches).
void launch_cache_write(const LoadedKernel& k, const TensorView& key, const TensorView& value,
                        const KvCacheShape& kc, const TensorView& slot_mapping, float k_scale,
                        float v_scale, CUstream stream, void* bounds = nullptr,
                        DeviceKvScales scales = {});
// Every check of the cache write's arguments (write_kv_cache and the decode kernel's fused
// write share it); returns the cache's shape.
KvCacheShape check_cache_write(const TensorView& key, const TensorView& value,
                               const TensorView& kv_cache, const TensorView& slot_mapping,
                               float k_scale, float v_scale);
// The same for a cache view that check_kv_cache() has accepted (kc).
void check_cache_write(const TensorView& key, const TensorView& value, const KvCacheShape& kc,
                       const TensorView& slot_mapping, float k_scale, float v_scale);

// The checks every attention launch (DecodeLaunch, PrefillLaunch) starts with: its views and
// options need exactly the kernel `ks` (spec_for of what they say on ks's arch, checked mode
// included), query and output rows allow vector access, and the scales (floats and device
// pointers) are valid. kc: the
// checked KV cache view; `where` names the caller.
template <typename Launch>
void require_launch_kernel(KernelKind kind, const AttentionSpec& ks, const Launch& a,
                           const KvCacheShape& kc, const char* where) {
  KernelFeatures f =
      launch_features(ks.arch, a.bounds != nullptr, a.alibi_slopes != nullptr, a.sinks != nullptr);
  f.multi_token = a.multi_token;
  f.non_causal = kind == KernelKind::kPrefill && a.non_causal;
  f.block_sparse = a.blocksparse.sparse();
  f.softmax_lse = a.softmax_lse.ndim != 0;
  if (f.softmax_lse) require_softmax_lse(a.softmax_lse, a.query);
  const AttentionSpec spec =
      attention_spec_for(kind, a.query, a.output, kc, a.window, a.soft_cap, f);
  require_block_sparse(a.blocksparse, a.query.shape[1], kc.num_kv_heads, kc.block_size, where);
  GA_REQUIRE(spec == ks, std::string(where) + ": the views need kernel " + spec.to_string() +
                             " but kernel " + ks.to_string() + " was given");
  require_query_access(a.query);
  require_vector_access(a.output, "output");
  require_launch_scales(spec, a.scale, a.k_scale, a.v_scale);
  require_device_scales(a.device_scales, where);
  require_query_scales(spec, a.q8, where);
}

}  // namespace graphattn::detail
