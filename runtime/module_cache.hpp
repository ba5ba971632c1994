// Loaded kernels: a compiled cubin as a CUmodule/CUfunction in one CUDA context, and the launch.
#pragma once

#include <memory>

#include "graphattn/jit.hpp"
#include "runtime/driver.hpp"

namespace graphattn::detail {

struct LoadedKernel {
  CUfunction function = nullptr;
  CUmodule module = nullptr;
  std::shared_ptr<const CompiledKernel> compiled;
};

// The kernel for spec in the current context: compiled through `cache` and loaded on first use.
// When `stream` is capturing and the kernel is not loaded yet, throws instead: nothing may
// compile or load inside a capture.
const LoadedKernel& load_kernel(const AttentionSpec& spec, KernelCache& cache,
                                CUstream stream = nullptr);

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1;
  unsigned shared_bytes = 0;
};

// Launches with the parameter struct passed by value as the only kernel argument.
template <typename Params>
void launch(const LoadedKernel& k, const LaunchShape& s, CUstream stream, const Params& p) {
  void* args[] = {const_cast<Params*>(&p)};
  GA_CU_CHECK(driver().cuLaunchKernel(k.function, s.grid_x, s.grid_y, s.grid_z, s.block_x, 1, 1,
                                      s.shared_bytes, stream, args, nullptr));
}

}  // namespace graphattn::detail
