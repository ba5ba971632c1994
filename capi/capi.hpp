// SPDX-License-Identifier: Apache-2.0
// What every section of the C ABI (include/graphattn/graphattn.h) shares: the handles, the
// guard that turns exceptions into status codes and this thread's last error, the checks that
// only this ABI can get wrong (NULL pointers, struct sizes, enum values, DLTensors) and the
// output helpers. Each section (library.cpp, config.cpp, cache.cpp, backend.cpp, ops.cpp,
// builder.cpp) converts, calls the public C++ API inside guard() and decides nothing itself.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/graphattn.h"
#include "graphattn/jit.hpp"
#include "graphattn/tensor.hpp"

struct graphattn_backend {
  explicit graphattn_backend(const graphattn::AttentionLayerConfig& config) : attn(config) {}
  graphattn::AttentionBackend attn;
};

struct graphattn_cache {
  std::unique_ptr<graphattn::KernelCache> owned;  // null for the process-wide cache
  graphattn::KernelCache* cache = nullptr;
  bool shared_dir = false;  // the options' group-shared opt-in (cache_list reads with it)
};

namespace graphattn::capi {

// This thread's message for its last failed call (graphattn_last_error).
extern thread_local std::string last_error;

// A failure this ABI detects itself, with the status it maps to (INVALID_ARGUMENT,
// BUFFER_TOO_SMALL).
class StatusError : public Error {
 public:
  StatusError(graphattn_status_t status, const std::string& message)
      : Error(message), status(status) {}
  graphattn_status_t status;
};

[[noreturn]] void invalid(const std::string& message);

template <typename T>
T& deref(T* p, const char* name) {
  if (!p) invalid(std::string(name) + " is NULL");
  return *p;
}

// Records message as this thread's last error and returns status (never throws).
graphattn_status_t fail(graphattn_status_t status, const char* message) noexcept;
// The status and message of the exception being handled (called in a catch (...) block).
graphattn_status_t fail_current() noexcept;

// Runs one ABI call's body; every exception becomes a status and this thread's last error.
template <typename Body>
graphattn_status_t guard(Body&& body) noexcept {
  try {
    body();
    last_error.clear();
    return GRAPHATTN_OK;
  } catch (...) {
    return fail_current();
  }
}

// A struct that starts with struct_size: the caller must have set struct_size to at least
// min_bytes, the size of the struct's first version (sizeof when it has only one; the *_init
// functions set sizeof).
template <typename S>
const S& sized(const S* s, const char* name, size_t min_bytes = sizeof(S)) {
  const S& v = deref(s, name);
  if (v.struct_size < min_bytes)
    invalid(std::string(name) + "->struct_size " + std::to_string(v.struct_size) +
            " is smaller than " + std::to_string(min_bytes) +
            " (initialise it with its _init function or set it to sizeof)");
  return v;
}

// Whether the caller's struct (struct_size bytes) holds `field`: a field added after the struct's
// first version is read or written only when it does, so an older caller's smaller struct works.
template <typename S, typename F>
bool holds(const S& s, F S::*field) {
  const size_t end = static_cast<size_t>(reinterpret_cast<const char*>(&(s.*field)) -
                                         reinterpret_cast<const char*>(&s)) +
                     sizeof(s.*field);
  return end <= s.struct_size;
}

// A C enum the caller filled in, read as the int it holds: loading an out-of-range value through
// the enum type is undefined in C++ (the type's range is that of its enumerators), and a caller
// may hold any int there.
template <typename CEnum>
int raw_int(const CEnum& field) {
  static_assert(sizeof(CEnum) == sizeof(int), "graphattn.h's enums are int-sized (*_ENUM_MAX)");
  int v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

// The C++ enum E of a C enum field, its range from E's name list (spec.hpp); count is smaller
// where the C enum has fewer values (graphattn_kv_layout_t has no legacy layout). Out of range:
// INVALID_ARGUMENT naming the field, the value and every allowed value with its name.
template <typename E, typename CEnum>
E enum_value(const CEnum& field, const char* name, int count = enum_count<E>()) {
  const int v = raw_int(field);
  if (v < 0 || v >= count) {
    std::string allowed;
    for (int i = 0; i < count; ++i)
      allowed += (i ? ", " : "") + std::to_string(i) + " (" + enum_long_name<E>(i) + ")";
    invalid(std::string(name) + " " + std::to_string(v) + " is out of range; allowed: " + allowed);
  }
  return static_cast<E>(v);
}

// The layouts a layer configuration takes, graphattn_kv_layout_t's values: NHD and HND (the
// legacy caches have their own calls).
constexpr int kCKvLayouts = static_cast<int>(KvLayout::kHND) + 1;

inline KvDType kv_dtype_value(const graphattn_kv_dtype_t& v, const char* name) {
  return enum_value<KvDType>(v, name);
}

KernelCache& cache_of(graphattn_cache_t cache);

// The layer configuration (config.cpp): the caller's struct, struct_size checked, to C++ and
// back (fields past the caller's struct_size: C++ defaults in, not written out).
AttentionLayerConfig to_cpp(const graphattn_layer_config_t* config);
void from_cpp(const AttentionLayerConfig& o, graphattn_layer_config_t* c);
// The layer configuration's first version ended with check_bounds.
constexpr size_t kLayerConfigV1Bytes =
    offsetof(graphattn_layer_config_t, check_bounds) + sizeof(int);

// ---- DLTensor -> TensorView (tensors.cpp)

// What to do with a NULL DLTensor.
enum class Null { kRejected, kEmpty };

// The one conversion of a DLTensor, checked in this order so that host arrays (NumPy) get their
// dtype and rank errors before the device error: NULL, ndim, dtype, sizes, strides, byte_offset,
// device. A NULL tensor where allowed is an empty view (ndim 0). kv_cache (non-null: the tensor
// is a KV cache of that kv dtype, or with name "query" an e4m3 query) admits uint8 and the
// float8 codes, which must agree with it.
TensorView view_of(const DLTensor* t, const char* name, Null null = Null::kRejected,
                   const KvDType* kv_cache = nullptr, bool host_allowed = false);
// A one-element float32 device tensor (any rank): its address; NULL where allowed: null.
float* device_scalar_of(const DLTensor* t, const char* name, Null null = Null::kRejected);
// An optional float32 [n] device array (ALiBi slopes, sink logits): its data or null.
const float* floats_of(const DLTensor* t, const char* name);

// A cache that swap_blocks / copy_blocks copy bytes of: any element type graphattn knows, 8-bit
// ones (uint8, float8) read as the fp8 type they are tagged with (uint8: e4m3, same size).
TensorView block_cache_of(const DLTensor* t, const char* name, bool host_allowed);

// ---- Output helpers (tensors.cpp)

// s with its NUL into buf; *needed gets the bytes needed.
void copy_string(const std::string& s, char* buf, size_t capacity, size_t* needed,
                 const char* what);

// s into a fixed char array, truncated to fit, always NUL-terminated.
template <size_t N>
void copy_fixed(char (&dst)[N], const std::string& s) {
  const size_t n = s.size() < N - 1 ? s.size() : N - 1;
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// The first min(items, capacity) of `items` into out through put(i); *count gets the total.
template <typename Put>
void copy_array(size_t items, size_t capacity, size_t* count, bool out_null, const char* what,
                Put put) {
  if (out_null && capacity > 0)
    invalid(std::string(what) + " array is NULL with capacity " + std::to_string(capacity));
  deref(count, "count") = items;
  for (size_t i = 0; i < items && i < capacity; ++i) put(i);
  if (items > capacity)
    throw StatusError(GRAPHATTN_ERROR_BUFFER_TOO_SMALL, "there are " + std::to_string(items) + " " +
                                                            what + " but room for " +
                                                            std::to_string(capacity));
}

}  // namespace graphattn::capi
