// SPDX-License-Identifier: Apache-2.0
#include "runtime/tensor_checks.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "core/text.hpp"
#include "runtime/module_cache.hpp"

namespace graphattn {

namespace detail {

void require_kv_dtype(const TensorView& key, const TensorView& value, DType dtype,
                      const char* where) {
  GA_REQUIRE(key.dtype == scalar_type_of(dtype) && value.dtype == scalar_type_of(dtype),
             std::string(where) + ": key dtype " + to_string(key.dtype) + " and value dtype " +
                 to_string(value.dtype) + " must be the layer's " + to_string(dtype) +
                 " (whatever the KV cache stores)");
}

void require_vector_access(const TensorView& t, const char* name, int bytes) {
  const int64_t elems = bytes / scalar_bytes(t.dtype);
  bool ok = t.strides[t.ndim - 1] == 1 && reinterpret_cast<uintptr_t>(t.data) % bytes == 0;
  for (int d = 0; d + 1 < t.ndim; ++d) ok = ok && t.strides[d] % elems == 0;
  if (!ok)
    throw Error(std::string(name) + " " + t.describe() +
                " must have a contiguous last dimension, " + std::to_string(bytes) +
                "-byte aligned data and strides that are multiples of " + std::to_string(bytes) +
                " bytes");
}

void require_query_access(const TensorView& query) {
  // An e4m3 query is read 8 elements (8 bytes) at a time.
  require_vector_access(query, "query", query.dtype == ScalarType::kFloat8E4M3 ? 8 : 16);
}

DType attention_dtype_of(const TensorView& query, const TensorView& output) {
  return dtype_of(query.dtype == ScalarType::kFloat8E4M3 ? output.dtype : query.dtype);
}

DType legacy_decode_dtype_of(const TensorView& query, const TensorView& output) {
  return query.dtype == ScalarType::kFloat32 ? DType::kFloat32 : attention_dtype_of(query, output);
}

KvCacheShape check_kv_cache(const TensorView& c, DType dtype) {
  KvCacheShape s;
  s.dtype = dtype;
  s.layout = kv_layout_of(c);
  s.kv_dtype = kv_dtype_of(c, dtype);
  GA_REQUIRE(c.shape[0] == 2, "kv_cache dimension 0 must be 2 (keys, values), got " + c.describe());
  s.num_blocks = c.shape[1];
  s.block_size = c.shape[2];
  s.num_kv_heads = c.shape[3];
  s.head_size = c.shape[4];
  GA_REQUIRE(s.num_kv_heads > 0, "kv_cache has no KV heads: " + c.describe());
  const int64_t elem = scalar_bytes(c.dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(c.data) % 16 == 0 &&
                       (c.strides[0] * elem) % 16 == 0 && (c.strides[1] * elem) % 16 == 0 &&
                       (c.strides[2] * elem) % 8 == 0 && (c.strides[3] * elem) % 8 == 0;
  GA_REQUIRE(aligned, "kv_cache " + c.describe() +
                          " must be 16-byte aligned with block strides "
                          "that are multiples of 16 bytes");
  s.key_data = c.data;
  s.value_data = static_cast<char*>(c.data) + c.strides[0] * elem;
  s.block_stride = c.strides[1];
  s.token_stride = c.strides[2];
  s.head_stride = c.strides[3];
  return s;
}

KvCacheShape check_direct_launch(const LoadedKernel& k, const TensorView& query,
                                 const TensorView& output, const TensorView& kv_cache,
                                 const char* where) {
  GA_REQUIRE(k.compiled != nullptr, std::string(where) + ": kernel is not loaded");
  require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  require_rank(output, 3, "output", "[num_tokens, num_heads, head_size]");
  return check_kv_cache(kv_cache, attention_dtype_of(query, output));
}

// An e4m3 query's descales: a positive finite q_scale, strides >= 0, 4-byte aligned pointers.
void require_query_scales(const AttentionSpec& spec, const FpQueryScales& s, const char* where) {
  if (!spec.q_fp8) return;
  GA_REQUIRE(s.q_scale > 0 && std::isfinite(s.q_scale),
             std::string(where) + ": q_scale " + std::to_string(s.q_scale) +
                 " is not supported for an e4m3 query; supported: finite > 0");
  GA_REQUIRE(s.req_stride >= 0 && s.head_stride >= 0,
             std::string(where) + ": descale strides " + str(s.req_stride) + ", " +
                 str(s.head_stride) + " must be >= 0 (0: one scale for every request or head)");
  for (const float* p : {s.q_descale, s.k_descale, s.v_descale})
    GA_REQUIRE(reinterpret_cast<uintptr_t>(p) % 4 == 0,
               std::string(where) +
                   ": q_descale, k_descale and v_descale must be 4-byte aligned "
                   "fp32 device pointers or null");
}
void require_launch_scales(const AttentionSpec& spec, float scale, float k_scale, float v_scale) {
  GA_REQUIRE(std::isfinite(scale) && scale > 0,
             "scale " + std::to_string(scale) + " must be finite and > 0");
  if (spec.kv_dtype != KvDType::kAuto)
    GA_REQUIRE(k_scale > 0 && v_scale > 0 && std::isfinite(k_scale) && std::isfinite(v_scale),
               "fp8 KV cache needs positive k_scale and v_scale, got " + std::to_string(k_scale) +
                   " and " + std::to_string(v_scale));
}

std::string device_scalar_problem(const float* p, const std::string& name, bool nullable) {
  const char* allowed = nullable ? "null or a 4-byte aligned fp32 device scalar"
                                 : "a 4-byte aligned fp32 device scalar";
  if (p == nullptr && !nullable) return name + " is not supported as null; supported: " + allowed;
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0)
    return name + " is not supported at a misaligned address; supported: " + allowed;
  return "";
}

std::string device_scales_problem(const DeviceKvScales& s) {
  const std::string k = device_scalar_problem(s.k, "k_scale_device", true);
  return k.empty() ? device_scalar_problem(s.v, "v_scale_device", true) : k;
}

void require_device_scales(const DeviceKvScales& s, const char* where) {
  const std::string problem = device_scales_problem(s);
  GA_REQUIRE(problem.empty(), std::string(where) + ": " + problem);
}

KernelFeatures features_of(const KvCacheShape& kc, DType dtype, int arch) {
  KernelFeatures f;
  f.head_size = static_cast<int>(kc.head_size);
  f.block_size = static_cast<int>(kc.block_size);
  f.dtype = dtype;
  f.kv_dtype = kc.kv_dtype;
  f.layout = kc.layout;
  f.key_x = key_x_of(kc);
  f.group = 1;
  f.arch = arch;
  return f;
}

int key_x_of(const KvCacheShape& kc) {
  if (kc.layout != KvLayout::kLegacy) return 0;
  return kc.x * kv_dtype_bytes(kc.kv_dtype, kc.dtype) == 16 ? 0 : static_cast<int>(kc.x);
}

void require_softmax_lse(const TensorView& lse, const TensorView& query) {
  require_rank(lse, 2, "softmax_lse", "[num_heads, num_tokens]");
  GA_REQUIRE(lse.dtype == ScalarType::kFloat32 && lse.strides[1] == 1 &&
                 lse.shape[0] == query.shape[1] && lse.shape[1] >= query.shape[0] &&
                 lse.strides[0] >= lse.shape[1] && lse.data != nullptr,
             "softmax_lse " + lse.describe() + " must be fp32 [num_heads (" +
                 std::to_string(query.shape[1]) + "), >= num_tokens (" +
                 std::to_string(query.shape[0]) + ")] with contiguous rows");
}

KernelFeatures launch_features(int arch, bool check_bounds, bool alibi, bool sinks) {
  KernelFeatures f;
  f.arch = arch;
  f.check_bounds = check_bounds;
  f.alibi = alibi;
  f.sinks = sinks;
  return f;
}

AttentionSpec attention_spec_for(KernelKind kind, const TensorView& query, const TensorView& output,
                                 const TensorView& kv_cache, int window, float soft_cap,
                                 KernelFeatures features) {
  require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  return attention_spec_for(kind, query, output,
                            check_kv_cache(kv_cache, attention_dtype_of(query, output)), window,
                            soft_cap, features);
}

AttentionSpec attention_spec_for(KernelKind kind, const TensorView& query, const TensorView& output,
                                 const KvCacheShape& kc, int window, float soft_cap,
                                 KernelFeatures f) {
  const auto str = [](int64_t v) { return std::to_string(v); };
  require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  require_rank(output, 3, "output", "[num_tokens, num_heads, head_size]");
  // An e4m3 query (spec "_qe4m3"): the output holds the layer's dtype.
  const bool q_fp8 = query.dtype == ScalarType::kFloat8E4M3;
  GA_REQUIRE(!q_fp8 || !f.dense_kv,
             "query dtype fp8_e4m3 is not supported by the dense-KV prefill (encoder-only "
             "attention, multi_head_attention); supported: float16, bfloat16 there, fp8_e4m3 "
             "over an fp8 paged cache");
  // float32 queries: the legacy decode only (vLLM's paged_attention_v1 / v2 with float32).
  const DType dtype = kind == KernelKind::kDecode && kc.layout == KvLayout::kLegacy
                          ? legacy_decode_dtype_of(query, output)
                          : attention_dtype_of(query, output);
  GA_REQUIRE(q_fp8 || output.dtype == query.dtype,
             "output dtype " + std::string(to_string(output.dtype)) + " differs from query dtype " +
                 to_string(query.dtype));
  GA_REQUIRE(dtype == kc.dtype, "query dtype " + std::string(to_string(query.dtype)) +
                                    " differs from the " + to_string(kc.dtype) +
                                    " the KV cache was checked for");
  const int64_t num_heads = query.shape[1];
  GA_REQUIRE(query.shape[2] == kc.head_size,
             "query " + query.describe() + " has head size " + str(query.shape[2]) +
                 " but the KV cache holds head size " + str(kc.head_size));
  GA_REQUIRE(num_heads > 0 && num_heads % kc.num_kv_heads == 0,
             "query has " + str(num_heads) + " heads, not a positive multiple of the KV cache's " +
                 str(kc.num_kv_heads) + " KV heads");
  GA_REQUIRE(window >= 0, "window " + str(window) + " must be >= 0 (0: no sliding window)");
  GA_REQUIRE(soft_cap >= 0 && std::isfinite(soft_cap),
             "soft_cap " + std::to_string(soft_cap) + " must be finite and >= 0 (0: none)");
  const KernelFeatures views = features_of(kc, dtype, f.arch);
  f.head_size = views.head_size;
  f.block_size = views.block_size;
  f.dtype = views.dtype;
  f.kv_dtype = views.kv_dtype;
  f.layout = views.layout;
  f.key_x = views.key_x;
  f.group = static_cast<int>(num_heads / kc.num_kv_heads);
  f.sliding_window = window > 0;
  f.soft_cap = soft_cap > 0;
  f.q_fp8 = q_fp8;
  const AttentionSpec spec = spec_for(f, kind);
  spec.validate();
  return spec;
}

}  // namespace detail
}  // namespace graphattn
