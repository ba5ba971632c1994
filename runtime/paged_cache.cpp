// SPDX-License-Identifier: Apache-2.0
// vLLM's legacy PagedAttention caches: their shape, the split of one tensor into key and value
// caches, and the cache write into them (the cache write kernel's "legacy" layout).
#include "graphattn/paged_cache.hpp"

#include <string>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"

namespace graphattn {
namespace {

using detail::str;

void require_count(int64_t v, const char* name) {
  GA_REQUIRE(v >= 1, std::string(name) + " " + str(v) + " is not supported; supported: >= 1");
}

// A compact view: every stride is the product of the sizes after it.
bool compact(const TensorView& t) {
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

}  // namespace

// The legacy caches as the kernels read them (check_cache_write checks the rest of a write).
detail::KvCacheShape detail::check_paged_caches(const TensorView& key_cache,
                                                const TensorView& value_cache, DType dtype) {
  detail::require_rank(key_cache, 5, "key_cache",
                       "[num_blocks, num_kv_heads, head_size / x, block_size, x]");
  detail::require_rank(value_cache, 4, "value_cache",
                       "[num_blocks, num_kv_heads, head_size, block_size]");
  GA_REQUIRE(value_cache.dtype == key_cache.dtype,
             "value_cache dtype " + std::string(to_string(value_cache.dtype)) +
                 " differs from key_cache dtype " + to_string(key_cache.dtype));
  detail::KvCacheShape kc;
  kc.dtype = dtype;
  kc.layout = KvLayout::kLegacy;
  kc.kv_dtype = kv_dtype_of(key_cache, dtype);
  // x is read from the tensor, as vLLM does: 16 bytes of elements, 8 or 16 (spec axis key_x).
  const int64_t default_x = paged_cache_x(key_cache.dtype);
  const int64_t x = key_cache.shape[4];
  GA_REQUIRE(x == default_x || x == 8 || x == 16,
             "key_cache " + key_cache.describe() + " has x = " + str(x) +
                 " (its last dim), which is not supported; supported: " +
                 (default_x < 8 ? str(default_x) + ", " : "") + "8, 16");
  kc.x = x;
  kc.num_blocks = value_cache.shape[0];
  kc.num_kv_heads = value_cache.shape[1];
  kc.head_size = value_cache.shape[2];
  kc.block_size = value_cache.shape[3];
  const bool matches = key_cache.shape[0] == kc.num_blocks &&
                       key_cache.shape[1] == kc.num_kv_heads && key_cache.shape[4] == x &&
                       key_cache.shape[2] * x == kc.head_size &&
                       key_cache.shape[3] == kc.block_size;
  GA_REQUIRE(matches, "key_cache " + key_cache.describe() + " does not match value_cache " +
                          value_cache.describe() + ": key_cache must be [num_blocks, " +
                          "num_kv_heads, head_size / x, block_size, x] with x = " + str(x) +
                          " (its last dim)");
  GA_REQUIRE(kc.num_blocks >= 1 && kc.num_kv_heads >= 1,
             "value_cache " + value_cache.describe() + " holds no block or no KV head");
  for (const TensorView* t : {&key_cache, &value_cache})
    GA_REQUIRE(compact(*t) && reinterpret_cast<uintptr_t>(t->data) % 16 == 0,
               std::string(t == &key_cache ? "key_cache " : "value_cache ") + t->describe() +
                   " must be compact (row-major) and 16-byte aligned");
  kc.key_data = key_cache.data;
  kc.value_data = value_cache.data;
  kc.head_stride = kc.head_size * kc.block_size;  // compact (a size-1 dimension's stride is free)
  kc.block_stride = kc.num_kv_heads * kc.head_stride;
  return kc;
}

int paged_cache_x(ScalarType kv_cache_type) { return 16 / scalar_bytes(kv_cache_type); }

std::array<int64_t, 3> paged_kv_cache_shape(int64_t num_blocks, int block_size, int num_kv_heads,
                                            int head_size) {
  require_count(num_blocks, "num_blocks");
  require_count(block_size, "block_size");
  require_count(num_kv_heads, "num_kv_heads");
  require_count(head_size, "head_size");
  return {2, num_blocks, int64_t{block_size} * num_kv_heads * head_size};
}

PagedKvCache split_paged_kv_cache(const TensorView& kv_cache, int num_kv_heads, int head_size) {
  detail::require_rank(kv_cache, 3, "kv_cache",
                       "[2, num_blocks, block_size * num_kv_heads * head_size]");
  require_count(num_kv_heads, "num_kv_heads");
  require_count(head_size, "head_size");
  const int64_t x = paged_cache_x(kv_cache.dtype);
  const int64_t per_token = int64_t{num_kv_heads} * head_size;
  GA_REQUIRE(kv_cache.shape[0] == 2 && kv_cache.shape[2] % per_token == 0 && compact(kv_cache),
             "kv_cache " + kv_cache.describe() +
                 " is not a compact [2, num_blocks, block_size * num_kv_heads * head_size] "
                 "cache for " +
                 str(num_kv_heads) + " KV heads of size " + str(head_size));
  GA_REQUIRE(head_size % x == 0, "head_size " + str(head_size) +
                                     " is not supported by the legacy layout with " +
                                     to_string(kv_cache.dtype) +
                                     " elements; supported: " + "multiples of x = " + str(x));
  const int64_t nb = kv_cache.shape[1], bs = kv_cache.shape[2] / per_token;
  char* half = static_cast<char*>(kv_cache.data);
  const int64_t half_bytes = kv_cache.strides[0] * scalar_bytes(kv_cache.dtype);
  PagedKvCache out;
  out.key_cache =
      TensorView::contiguous(half, kv_cache.dtype, {nb, num_kv_heads, head_size / x, bs, x});
  out.value_cache =
      TensorView::contiguous(half + half_bytes, kv_cache.dtype, {nb, num_kv_heads, head_size, bs});
  return out;
}

void write_to_paged_cache(const TensorView& key, const TensorView& value,
                          const TensorView& key_cache, const TensorView& value_cache,
                          const TensorView& slot_mapping, float k_scale, float v_scale,
                          CUstream stream, KernelCache& cache, const float* k_scale_device,
                          const float* v_scale_device, bool interleaved_v) {
  detail::require_rank(key, 3, "key", "[num_tokens, num_kv_heads, head_size]");
  const detail::KvCacheShape kc =
      detail::check_paged_caches(key_cache, value_cache, element_dtype_of(key.dtype));
  detail::check_cache_write(key, value, kc, slot_mapping, k_scale, v_scale);
  const detail::DeviceKvScales scales{k_scale_device, v_scale_device};
  detail::require_device_scales(scales, "write_to_paged_cache");
  // The spec's own checks (block size, head size against x, the interleaved V's block size)
  // before any device use.
  const auto write_spec = [&](int arch) {
    KernelFeatures f = detail::features_of(kc, kc.dtype, arch);
    f.interleaved_v = interleaved_v;
    return spec_for(f, KernelKind::kCacheWrite);
  };
  write_spec(90).validate();
  if (key.shape[0] == 0) return;
  const AttentionSpec spec = write_spec(current_device_arch());
  detail::launch_cache_write(detail::load_kernel(spec, cache, stream), key, value, kc, slot_mapping,
                             k_scale, v_scale, stream, nullptr, scales);
}

}  // namespace graphattn
