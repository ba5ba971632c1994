// SPDX-License-Identifier: Apache-2.0
// Host side of calc_kv_scales (templates/kv_scale.cu): checks the views, picks the spec, sets
// both scalars to their minimum and launches the reduction that raises them.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn {
namespace {

static_assert(kMinKvScale == GA_KV_SCALE_MIN, "backend.hpp and params.h name one minimum");

void require_divisor(float d, const char* name) {
  GA_REQUIRE(std::isfinite(d) && d > 0,
             std::string("calc_kv_scales: ") + name + " " + std::to_string(d) +
                 " is not supported; supported: finite > 0 (vLLM's 200 for keys, 100 for values, "
                 "or fp8_max(kv_dtype) for amax / fp8 max)");
}

void require_scalar_out(const float* p, const char* name) {
  const std::string problem = detail::device_scalar_problem(p, name, false);
  GA_REQUIRE(problem.empty(), "calc_kv_scales: " + problem);
}

}  // namespace

float fp8_max(KvDType kv_dtype) {
  switch (kv_dtype) {
    case KvDType::kFp8E4M3:
      return 448.0f;
    case KvDType::kFp8E5M2:
      return 57344.0f;
    case KvDType::kAuto:
      break;
  }
  throw Error(std::string("fp8_max: KV cache dtype ") + to_string(kv_dtype) +
              " is not an fp8 type; supported: e4m3 (448), e5m2 (57344)");
}

void calc_kv_scales(const TensorView& key, const TensorView& value, float* k_scale_out,
                    float* v_scale_out, float k_divisor, float v_divisor, CUstream stream,
                    KernelCache& cache) {
  detail::require_rank(key, 3, "key", "[num_tokens, num_kv_heads, head_size]");
  detail::require_rank(value, 3, "value", "[num_tokens, num_kv_heads, head_size]");
  const DType dtype = dtype_of(key.dtype);
  detail::require_kv_dtype(key, value, dtype, "calc_kv_scales");
  GA_REQUIRE(value.shape[0] == key.shape[0] && value.shape[1] == key.shape[1] &&
                 value.shape[2] == key.shape[2],
             "calc_kv_scales: key " + key.describe() + " and value " + value.describe() +
                 " must have one shape [num_tokens, num_kv_heads, head_size]");
  GA_REQUIRE(key.shape[1] >= 1 && key.shape[0] <= INT_MAX && key.shape[1] <= INT_MAX,
             "calc_kv_scales: key " + key.describe() +
                 " is not supported; supported: 1 or more KV heads and at most 2^31 - 1 tokens");
  detail::require_vector_access(key, "key");
  detail::require_vector_access(value, "value");
  require_scalar_out(k_scale_out, "k_scale_out");
  require_scalar_out(v_scale_out, "v_scale_out");
  GA_REQUIRE(k_scale_out != v_scale_out,
             "calc_kv_scales: k_scale_out and v_scale_out must be two scalars, got one address");
  require_divisor(k_divisor, "k_divisor");
  require_divisor(v_divisor, "v_divisor");

  KernelFeatures f;
  f.head_size = static_cast<int>(key.shape[2]);
  f.dtype = dtype;
  f.arch = current_device_arch();
  const AttentionSpec spec = spec_for(f, KernelKind::kKvScale);
  spec.validate();
  const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);

  const auto& d = detail::driver();
  unsigned min_bits = 0;
  std::memcpy(&min_bits, &kMinKvScale, sizeof min_bits);
  for (float* out : {k_scale_out, v_scale_out})
    GA_CU_CHECK(d.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(out), min_bits, 1, stream));
  if (key.shape[0] == 0) return;

  KvScaleParams p{};
  p.key = key.data;
  p.value = value.data;
  p.k_scale_out = k_scale_out;
  p.v_scale_out = v_scale_out;
  p.key_token_stride = key.strides[0];
  p.key_head_stride = key.strides[1];
  p.value_token_stride = value.strides[0];
  p.value_head_stride = value.strides[1];
  p.num_tokens = static_cast<int>(key.shape[0]);
  p.num_kv_heads = static_cast<int>(key.shape[1]);
  p.k_divisor = k_divisor;
  p.v_divisor = v_divisor;
  const int64_t vectors = key.shape[0] * key.shape[1] * (key.shape[2] / 8);
  detail::LaunchShape shape;
  shape.grid_x = static_cast<unsigned>(std::min<int64_t>(
      GA_KV_SCALE_MAX_BLOCKS, (vectors + GA_KV_SCALE_THREADS - 1) / GA_KV_SCALE_THREADS));
  shape.grid_y = 2;  // keys, values
  shape.block_x = GA_KV_SCALE_THREADS;
  detail::launch(k, shape, stream, p);
}

}  // namespace graphattn
