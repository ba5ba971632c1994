// SPDX-License-Identifier: Apache-2.0
// TensorView: a non-owning view of device memory owned by the engine. graphattn never
// allocates or frees what a view points to.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "graphattn/export.h"
#include "graphattn/spec.hpp"

namespace graphattn {

enum class ScalarType { kFloat16, kBFloat16, kFloat8E4M3, kFloat8E5M2, kFloat32, kInt32, kInt64 };
GRAPHATTN_API int scalar_bytes(ScalarType t);
GRAPHATTN_API const char* to_string(ScalarType t);

constexpr int kMaxDims = 6;

struct GRAPHATTN_API TensorView {
  void* data = nullptr;  // device pointer
  ScalarType dtype = ScalarType::kFloat16;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements, not bytes

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, ScalarType dtype, std::initializer_list<int64_t> shape);
  // A view with explicit strides (elements).
  static TensorView strided(void* data, ScalarType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides);

  int64_t numel() const;
  std::string describe() const;  // "bf16[4, 8, 128] strides [1024, 128, 1]"
};

// NHD or HND from the strides of a 5-d KV cache view; throws on anything else.
GRAPHATTN_API KvLayout kv_layout_of(const TensorView& kv_cache);
// The KV cache dtype implied by the cache tensor's element type for a model of type `dtype`.
GRAPHATTN_API KvDType kv_dtype_of(const TensorView& kv_cache, DType dtype);
GRAPHATTN_API DType dtype_of(ScalarType t);  // fp16/bf16 only (attention); throws otherwise
// fp16, bf16 or fp32: the element types of the cache writes' keys and values and of
// merge_attn_states' outputs; throws otherwise.
GRAPHATTN_API DType element_dtype_of(ScalarType t);
// The element type of a KV cache that stores kv for a model of type `dtype` (kv_dtype_of's
// inverse), and of a model dtype's tensors.
GRAPHATTN_API ScalarType scalar_type_of(KvDType kv, DType dtype);
GRAPHATTN_API ScalarType scalar_type_of(DType dtype);

}  // namespace graphattn
