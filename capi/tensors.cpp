// SPDX-License-Identifier: Apache-2.0
// The C ABI's DLTensor conversion and output helpers (capi.hpp).
#include <iterator>
#include <string>

#include "capi.hpp"

namespace graphattn::capi {
namespace {

// DLDeviceType names (DLPack 1.1), by value.
const char* device_name(int type) {
  static const char* const kNames[] = {
      "unknown", "CPU", "CUDA", "CUDA host (pinned)", "OpenCL", "unknown",      "unknown", "Vulkan",
      "Metal",   "VPI", "ROCm", "ROCm host",          "ExtDev", "CUDA managed", "oneAPI",  "WebGPU",
      "Hexagon"};
  return type >= 0 && type < static_cast<int>(std::size(kNames)) ? kNames[type] : "unknown";
}

// DLPack 1.1's float8 type codes (absent from older dlpack.h).
constexpr int kDLFloat8E4M3FN = 10;
constexpr int kDLFloat8E5M2 = 12;

// E.g. "float64", "uint8", "float8_e5m2", "float16 x2 lanes".
std::string dtype_name(const DLDataType& t) {
  static const char* const kBase[] = {"int",    "uint",    "float", "opaque",
                                      "bfloat", "complex", "bool"};
  std::string s = t.code == kDLFloat8E4M3FN ? std::string("float8_e4m3fn")
                  : t.code == kDLFloat8E5M2 ? std::string("float8_e5m2")
                  : t.code < 7              ? kBase[t.code] + std::to_string(t.bits)
                                            : "unknown type code " + std::to_string(t.code);
  if (t.lanes != 1) s += " x" + std::to_string(t.lanes) + " lanes";
  return s;
}

// The element type of a DLTensor. kv_cache (non-null: the tensor is a KV cache of that kv dtype,
// or the query of an e4m3-query layer, name "query") admits uint8 and the float8 codes, which
// must agree with it.
ScalarType scalar_of(const DLDataType& t, const char* name, const KvDType* kv_cache) {
  const auto is = [&](int code, int bits) { return t.code == code && t.bits == bits; };
  if (t.lanes == 1) {
    if (is(kDLFloat, 16)) return ScalarType::kFloat16;
    if (is(kDLBfloat, 16)) return ScalarType::kBFloat16;
    if (is(kDLFloat, 32)) return ScalarType::kFloat32;
    if (is(kDLInt, 32)) return ScalarType::kInt32;
    if (is(kDLInt, 64)) return ScalarType::kInt64;
    if (kv_cache && (is(kDLUInt, 8) || is(kDLFloat8E4M3FN, 8) || is(kDLFloat8E5M2, 8))) {
      const KvDType kv = *kv_cache;
      const KvDType held = is(kDLFloat8E4M3FN, 8) ? KvDType::kFp8E4M3
                           : is(kDLFloat8E5M2, 8) ? KvDType::kFp8E5M2
                                                  : kv;
      if (std::string(name) == "query" && held != kv)
        invalid("query has dtype " + dtype_name(t) + " but the layer's q_dtype is " +
                kv_cache_dtype_name(kv) + "; an e4m3 query is uint8 or float8_e4m3fn (code 10)");
      if (kv == KvDType::kAuto || held != kv)
        invalid(std::string(name) + " has dtype " + dtype_name(t) + " but the KV cache dtype is " +
                to_string(kv) +
                "; an 8-bit KV cache needs kv dtype fp8_e4m3 (uint8 or float8_e4m3fn, code 10) "
                "or fp8_e5m2 (uint8 or float8_e5m2, code 12)");
      return kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3 : ScalarType::kFloat8E5M2;
    }
  }
  invalid(std::string(name) + " has dtype " + dtype_name(t) + " (code " + std::to_string(t.code) +
          ", bits " + std::to_string(t.bits) + ", lanes " + std::to_string(t.lanes) +
          "); supported: float16, bfloat16, float32, int32, int64" +
          (kv_cache ? ", and for an fp8 KV cache uint8, float8_e4m3fn (code 10) or float8_e5m2 "
                      "(code 12)"
                    : ""));
}

}  // namespace

TensorView view_of(const DLTensor* t, const char* name, Null null, const KvDType* kv_cache,
                   bool host_allowed) {
  TensorView v;
  if (!t) {
    if (null == Null::kEmpty) return v;
    invalid(std::string(name) + " is NULL");
  }
  if (t->ndim < 0 || t->ndim > kMaxDims)
    invalid(std::string(name) + " has ndim " + std::to_string(t->ndim) + "; supported: 0.." +
            std::to_string(kMaxDims));
  if (t->ndim > 0 && !t->shape) invalid(std::string(name) + " has a NULL shape");
  v.dtype = scalar_of(t->dtype, name, kv_cache);
  v.ndim = t->ndim;
  for (int d = 0; d < v.ndim; ++d) {
    if (t->shape[d] < 0)
      invalid(std::string(name) + " has size " + std::to_string(t->shape[d]) + " in dimension " +
              std::to_string(d) + "; sizes are >= 0");
    v.shape[d] = t->shape[d];
  }
  int64_t compact = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = t->strides ? t->strides[d] : compact;
    compact *= v.shape[d];
  }
  v.data = t->data ? static_cast<char*>(t->data) + t->byte_offset : nullptr;
  const int device = t->device.device_type;
  if (host_allowed && (device == kDLCPU || device == kDLCUDAHost)) return v;
  if (device != kDLCUDA && device != kDLCUDAManaged)
    invalid(std::string(name) + " is on device type " + std::to_string(device) + " (" +
            device_name(device) +
            "); graphattn needs CUDA device memory (kDLCUDA or kDLCUDAManaged)");
  return v;
}

float* device_scalar_of(const DLTensor* t, const char* name, Null null) {
  const TensorView v = view_of(t, name, null);
  if (!t) return nullptr;
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
  if (v.dtype != ScalarType::kFloat32 || n != 1)
    invalid(std::string(name) + " " + v.describe() +
            " is not supported; supported: a one-element float32 device tensor");
  return static_cast<float*>(v.data);
}

TensorView block_cache_of(const DLTensor* t, const char* name, bool host_allowed) {
  const KvDType kv = t && t->dtype.code == kDLFloat8E5M2 ? KvDType::kFp8E5M2 : KvDType::kFp8E4M3;
  return view_of(t, name, Null::kRejected, &kv, host_allowed);
}

const float* floats_of(const DLTensor* t, const char* name) {
  const TensorView v = view_of(t, name, Null::kEmpty);
  if (v.ndim == 0) return nullptr;
  if (v.ndim != 1 || v.dtype != ScalarType::kFloat32 || v.strides[0] != 1)
    invalid(std::string(name) + " must be a contiguous float32 [num_heads] tensor, got " +
            v.describe());
  return static_cast<const float*>(v.data);
}

// s with its NUL into buf; *needed gets the bytes needed.
void copy_string(const std::string& s, char* buf, size_t capacity, size_t* needed,
                 const char* what) {
  if (!buf && capacity > 0) invalid("buf is NULL with capacity " + std::to_string(capacity));
  if (needed) *needed = s.size() + 1;
  if (capacity < s.size() + 1) {
    if (capacity > 0) buf[0] = '\0';
    throw StatusError(GRAPHATTN_ERROR_BUFFER_TOO_SMALL,
                      std::string(what) + " needs " + std::to_string(s.size() + 1) +
                          " bytes (NUL included); the buffer has " + std::to_string(capacity));
  }
  std::memcpy(buf, s.c_str(), s.size() + 1);
}

}  // namespace graphattn::capi
