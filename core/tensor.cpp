// SPDX-License-Identifier: Apache-2.0
#include "graphattn/tensor.hpp"

#include <sstream>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn {

int scalar_bytes(ScalarType t) {
  switch (t) {
    case ScalarType::kFloat16:
    case ScalarType::kBFloat16:
      return 2;
    case ScalarType::kFloat8E4M3:
    case ScalarType::kFloat8E5M2:
      return 1;
    case ScalarType::kFloat32:
    case ScalarType::kInt32:
      return 4;
    case ScalarType::kInt64:
      return 8;
  }
  return 0;
}

const char* to_string(ScalarType t) {
  static const char* const kNames[] = {"fp16", "bf16",  "fp8_e4m3", "fp8_e5m2",
                                       "fp32", "int32", "int64"};
  return detail::enum_name(t, kNames);
}

TensorView TensorView::contiguous(void* data, ScalarType dtype,
                                  std::initializer_list<int64_t> shape) {
  if (shape.size() > kMaxDims) throw Error("a tensor view has at most 6 dimensions");
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

TensorView TensorView::strided(void* data, ScalarType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides) {
  if (shape.size() != strides.size())
    throw Error("tensor view: " + std::to_string(shape.size()) + " sizes but " +
                std::to_string(strides.size()) + " strides");
  TensorView v = contiguous(data, dtype, shape);
  int i = 0;
  for (int64_t s : strides) v.strides[i++] = s;
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << to_string(dtype) << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "] strides [";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << strides[d];
  os << "]";
  return os.str();
}

DType dtype_of(ScalarType t) {
  if (t == ScalarType::kFloat16) return DType::kFloat16;
  if (t == ScalarType::kBFloat16) return DType::kBFloat16;
  throw Error(std::string("dtype ") + to_string(t) +
              " is not supported for queries, keys and "
              "values; supported: fp16, bf16 (fp32: the cache writes, merge_attn_states and "
              "paged_attention_v1/v2 only)");
}

DType element_dtype_of(ScalarType t) {
  if (t == ScalarType::kFloat32) return DType::kFloat32;
  if (t == ScalarType::kFloat16 || t == ScalarType::kBFloat16) return dtype_of(t);
  throw Error(std::string("dtype ") + to_string(t) +
              " is not supported; supported: fp16, bf16, fp32");
}

KvDType kv_dtype_of(const TensorView& kv_cache, DType dtype) {
  switch (kv_cache.dtype) {
    case ScalarType::kFloat8E4M3:
      return KvDType::kFp8E4M3;
    case ScalarType::kFloat8E5M2:
      return KvDType::kFp8E5M2;
    default:
      if (element_dtype_of(kv_cache.dtype) != dtype)
        throw Error(std::string("KV cache dtype ") + to_string(kv_cache.dtype) +
                    " differs from the model dtype " + to_string(dtype) +
                    "; supported: the model dtype, fp8_e4m3, fp8_e5m2");
      return KvDType::kAuto;
  }
}

ScalarType scalar_type_of(DType dtype) {
  return dtype == DType::kBFloat16  ? ScalarType::kBFloat16
         : dtype == DType::kFloat32 ? ScalarType::kFloat32
                                    : ScalarType::kFloat16;
}

ScalarType scalar_type_of(KvDType kv, DType dtype) {
  if (kv == KvDType::kFp8E4M3) return ScalarType::kFloat8E4M3;
  if (kv == KvDType::kFp8E5M2) return ScalarType::kFloat8E5M2;
  return scalar_type_of(dtype);
}

KvLayout kv_layout_of(const TensorView& c) {
  detail::require_rank(c, 5, "kv_cache", "[2, num_blocks, block_size, num_kv_heads, head_size]");
  const int64_t bs = c.shape[2], nh = c.shape[3], hs = c.shape[4];
  if (c.strides[4] == 1 && c.strides[3] == hs && c.strides[2] == nh * hs) return KvLayout::kNHD;
  if (c.strides[4] == 1 && c.strides[2] == hs && c.strides[3] == bs * hs) return KvLayout::kHND;
  throw Error("kv_cache " + c.describe() +
              " is neither NHD (strides [.., .., heads*head_size, head_size, 1]) nor HND "
              "(strides [.., .., head_size, block_size*head_size, 1]) within a block");
}

namespace detail {

void require_rank(const TensorView& t, int rank, const char* name, const char* shape) {
  if (t.ndim != rank)
    throw Error(std::string(name) + " must be " + std::to_string(rank) + "-d " + shape + ", got " +
                t.describe());
  if (!t.data && t.numel() > 0) throw Error(std::string(name) + " has a null data pointer");
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] < 0) throw Error(std::string(name) + " has a negative size: " + t.describe());
}

}  // namespace detail
}  // namespace graphattn
