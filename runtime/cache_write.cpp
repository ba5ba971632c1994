// SPDX-License-Identifier: Apache-2.0
// Host side of the cache write kernel: checks the views, picks the spec, launches.
#include <sstream>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn {

namespace detail {

KvCacheShape check_cache_write(const TensorView& key, const TensorView& value,
                               const TensorView& kv_cache, const TensorView& slot_mapping,
                               float k_scale, float v_scale) {
  require_rank(key, 3, "key", "[num_tokens, num_kv_heads, head_size]");
  const KvCacheShape kc = check_kv_cache(kv_cache, element_dtype_of(key.dtype));
  check_cache_write(key, value, kc, slot_mapping, k_scale, v_scale);
  return kc;
}

void check_cache_write(const TensorView& key, const TensorView& value, const KvCacheShape& kc,
                       const TensorView& slot_mapping, float k_scale, float v_scale) {
  require_rank(key, 3, "key", "[num_tokens, num_kv_heads, head_size]");
  require_rank(value, 3, "value", "[num_tokens, num_kv_heads, head_size]");
  require_rank(slot_mapping, 1, "slot_mapping", "[num_tokens]");
  const DType dtype = element_dtype_of(key.dtype);
  GA_REQUIRE(value.dtype == key.dtype, "value dtype " + std::string(to_string(value.dtype)) +
                                           " differs from key dtype " + to_string(key.dtype));
  GA_REQUIRE(slot_mapping.dtype == ScalarType::kInt64,
             "slot_mapping must be int64, got " + std::string(to_string(slot_mapping.dtype)));
  GA_REQUIRE(dtype == kc.dtype, "key dtype " + std::string(to_string(key.dtype)) +
                                    " differs from the " + to_string(kc.dtype) +
                                    " the KV cache was checked for");
  for (const auto* t : {&key, &value}) {
    const char* name = t == &key ? "key" : "value";
    GA_REQUIRE(t->shape[1] == kc.num_kv_heads && t->shape[2] == kc.head_size,
               std::string(name) + " is " + t->describe() + " but the KV cache holds " +
                   std::to_string(kc.num_kv_heads) + " heads of size " +
                   std::to_string(kc.head_size));
    require_vector_access(*t, name);
  }
  GA_REQUIRE(value.shape[0] == key.shape[0] && slot_mapping.shape[0] >= key.shape[0],
             "key has " + std::to_string(key.shape[0]) + " tokens, value " +
                 std::to_string(value.shape[0]) + ", slot_mapping " +
                 std::to_string(slot_mapping.shape[0]) + "; they must agree");
  if (kc.kv_dtype != KvDType::kAuto)
    GA_REQUIRE(k_scale > 0 && v_scale > 0, "fp8 KV cache needs positive k_scale and v_scale, got " +
                                               std::to_string(k_scale) + " and " +
                                               std::to_string(v_scale));
}

void launch_cache_write(const LoadedKernel& k, const TensorView& key, const TensorView& value,
                        const KvCacheShape& kc, const TensorView& slot_mapping, float k_scale,
                        float v_scale, CUstream stream, void* bounds, DeviceKvScales scales) {
  GA_REQUIRE(k.compiled != nullptr && k.compiled->spec.check_bounds == (bounds != nullptr),
             std::string("launch_cache_write: ") +
                 (bounds ? "a bounds report needs a checked kernel (_chk)"
                         : "a checked kernel (_chk) needs a bounds report"));
  if (key.shape[0] == 0) return;
  CacheWriteParams p{};
  p.key = key.data;
  p.value = value.data;
  p.key_cache = kc.key_data;
  p.value_cache = kc.value_data;
  p.slot_mapping = static_cast<const long long*>(slot_mapping.data);
  p.key_token_stride = key.strides[0];
  p.key_head_stride = key.strides[1];
  p.value_token_stride = value.strides[0];
  p.value_head_stride = value.strides[1];
  p.cache_block_stride = kc.block_stride;
  p.cache_token_stride = kc.token_stride;
  p.cache_head_stride = kc.head_stride;
  p.num_slots = kc.num_blocks * kc.block_size;
  p.num_tokens = static_cast<int>(key.shape[0]);
  p.num_kv_heads = static_cast<int>(kc.num_kv_heads);
  p.k_scale = k_scale;
  p.v_scale = v_scale;
  if (kc.kv_dtype != KvDType::kAuto) p.scales = {scales.k, scales.v};
  p.bounds = static_cast<GaBoundsReport*>(bounds);
  p.legacy_x = kc.layout == KvLayout::kLegacy ? static_cast<int>(kc.x) : 0;
  const int vectors =
      static_cast<int>(p.num_kv_heads * kc.head_size / (16 / dtype_bytes(kc.dtype)));
  LaunchShape shape;
  shape.grid_x = static_cast<unsigned>(p.num_tokens);
  shape.block_x = static_cast<unsigned>(std::min(256, (vectors + 31) / 32 * 32));
  launch(k, shape, stream, p);
}

}  // namespace detail

void write_kv_cache(const TensorView& key, const TensorView& value, const TensorView& kv_cache,
                    const TensorView& slot_mapping, float k_scale, float v_scale, CUstream stream,
                    KernelCache& cache, const float* k_scale_device, const float* v_scale_device) {
  const detail::KvCacheShape kc =
      detail::check_cache_write(key, value, kv_cache, slot_mapping, k_scale, v_scale);
  const detail::DeviceKvScales scales{k_scale_device, v_scale_device};
  detail::require_device_scales(scales, "write_kv_cache");
  // The spec's own checks (block size, dtype) before any device use.
  spec_for(detail::features_of(kc, kc.dtype, 90), KernelKind::kCacheWrite).validate();
  if (key.shape[0] == 0) return;
  const AttentionSpec spec =
      spec_for(detail::features_of(kc, element_dtype_of(key.dtype), current_device_arch()),
               KernelKind::kCacheWrite);
  detail::launch_cache_write(detail::load_kernel(spec, cache, stream), key, value, kc, slot_mapping,
                             k_scale, v_scale, stream, nullptr, scales);
}

}  // namespace graphattn
