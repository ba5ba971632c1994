#include "graphattn/tensor.hpp"

#include <sstream>

#include "graphattn/error.hpp"

namespace graphattn {

int scalar_bytes(ScalarType t) {
  switch (t) {
    case ScalarType::kFloat16: case ScalarType::kBFloat16: return 2;
    case ScalarType::kFloat8E4M3: case ScalarType::kFloat8E5M2: return 1;
    case ScalarType::kFloat32: case ScalarType::kInt32: return 4;
    case ScalarType::kInt64: return 8;
  }
  return 0;
}

const char* to_string(ScalarType t) {
  switch (t) {
    case ScalarType::kFloat16: return "fp16";
    case ScalarType::kBFloat16: return "bf16";
    case ScalarType::kFloat8E4M3: return "fp8_e4m3";
    case ScalarType::kFloat8E5M2: return "fp8_e5m2";
    case ScalarType::kFloat32: return "fp32";
    case ScalarType::kInt32: return "int32";
    case ScalarType::kInt64: return "int64";
  }
  return "?";
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

}  // namespace graphattn
