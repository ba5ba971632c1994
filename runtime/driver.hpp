// SPDX-License-Identifier: Apache-2.0
// The CUDA driver API, reached through one table of typed function pointers filled from
// libcuda.so.1 with dlopen/dlsym, by the versioned names the headers map each API to. Nothing
// links against libcuda, so the library, the tools and the CPU tests run where there is no GPU.
#pragma once

#include <cuda.h>

#include <string>

namespace graphattn::detail {

// X(name): every driver entry point graphattn uses.
// One entry a line, outside clang-format (it re-indents a list of macro calls on every run).
// clang-format off
#define GA_DRIVER_FUNCTIONS(X)                    \
  X(cuInit)                                       \
  X(cuDriverGetVersion)                           \
  X(cuGetErrorName)                               \
  X(cuGetErrorString)                             \
  X(cuDeviceGet)                                  \
  X(cuDeviceGetCount)                             \
  X(cuDeviceGetAttribute)                         \
  X(cuDeviceGetName)                              \
  X(cuDevicePrimaryCtxRetain)                     \
  X(cuDevicePrimaryCtxRelease)                    \
  X(cuCtxGetCurrent)                              \
  X(cuCtxSetCurrent)                              \
  X(cuCtxGetDevice)                               \
  X(cuCtxSynchronize)                             \
  X(cuModuleLoadData)                             \
  X(cuModuleUnload)                               \
  X(cuModuleGetFunction)                          \
  X(cuModuleGetGlobal)                            \
  X(cuFuncSetAttribute)                           \
  X(cuFuncGetAttribute)                           \
  X(cuLaunchKernel)                               \
  X(cuLaunchKernelEx)                             \
  X(cuMemAlloc)                                   \
  X(cuMemFree)                                    \
  X(cuMemcpyAsync)                                \
  X(cuMemcpyHtoD)                                 \
  X(cuMemcpyDtoH)                                 \
  X(cuMemcpyHtoDAsync)                            \
  X(cuMemcpyDtoHAsync)                            \
  X(cuMemcpyDtoDAsync)                            \
  X(cuMemsetD8)                                   \
  X(cuMemsetD8Async)                              \
  X(cuMemsetD32Async)                             \
  X(cuMemGetInfo)                                 \
  X(cuStreamCreate)                               \
  X(cuStreamCreateWithPriority)                   \
  X(cuStreamWaitEvent)                            \
  X(cuCtxGetStreamPriorityRange)                  \
  X(cuStreamDestroy)                              \
  X(cuStreamSynchronize)                          \
  X(cuStreamBeginCapture)                         \
  X(cuStreamEndCapture)                           \
  X(cuStreamIsCapturing)                          \
  X(cuGraphInstantiate)                           \
  X(cuGraphLaunch)                                \
  X(cuGraphExecUpdate)                            \
  X(cuGraphExecDestroy)                           \
  X(cuGraphDestroy)                               \
  X(cuGraphGetNodes)                              \
  X(cuEventCreate)                                \
  X(cuEventDestroy)                               \
  X(cuEventRecord)                                \
  X(cuEventSynchronize)                           \
  X(cuEventElapsedTime)                           \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)  \
  X(cuOccupancyMaxPotentialClusterSize)           \
  X(cuTensorMapEncodeTiled)
// clang-format on

struct DriverApi {
#define GA_DECLARE(name) decltype(&::name) name = nullptr;
  GA_DRIVER_FUNCTIONS(GA_DECLARE)
#undef GA_DECLARE
};

// The table, loaded once; throws graphattn::Error when the driver or a symbol is missing.
const DriverApi& driver();

// Whether a usable GPU is present; when not, *why says what is missing. Never throws.
bool gpu_available(std::string* why = nullptr);

[[noreturn]] void throw_driver_error(CUresult r, const char* call, const char* func,
                                     const char* file, int line);

#define GA_CU_CHECK(call)                                                                          \
  do {                                                                                             \
    CUresult ga_cu_result_ = (call);                                                               \
    if (ga_cu_result_ != CUDA_SUCCESS)                                                             \
      ::graphattn::detail::throw_driver_error(ga_cu_result_, #call, __func__, __FILE__, __LINE__); \
  } while (0)

}  // namespace graphattn::detail
