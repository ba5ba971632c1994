// What the C ABI files outside runtime/c_abi.cpp (capi/cascade_ops.cpp) share with it: its
// exception guard and this thread's last error, its one DLTensor conversion and its cache
// handle. Defined at the end of runtime/c_abi.cpp over its own helpers, so every C function
// reports errors and converts tensors in exactly one way.
#pragma once

#include <functional>
#include <string>

#include "graphattn/graphattn.h"
#include "graphattn/jit.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn::capi {

// Runs one ABI call's body; every exception becomes a status and this thread's last error.
graphattn_status_t guarded(const std::function<void()>& body) noexcept;
// GRAPHATTN_ERROR_INVALID_ARGUMENT with `message` (inside guarded()).
[[noreturn]] void invalid_argument(const std::string& message);
// A DLTensor in CUDA device memory (fp16, bf16, fp32, int32, int64); NULL: an error, or with
// `nullable` an empty view (ndim 0).
TensorView device_view(const DLTensor* t, const char* name, bool nullable = false);
// A cache that copy_blocks copies bytes of (any element type, 8-bit ones included), in device
// memory.
TensorView block_cache_view(const DLTensor* t, const char* name);
// The caller's cache, or the process-wide one for NULL.
KernelCache& kernel_cache_of(graphattn_cache_t cache);

}  // namespace graphattn::capi
