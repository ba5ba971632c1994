// SPDX-License-Identifier: Apache-2.0
// NVRTC: rendered source -> cubin. Every call goes through GA_NVRTC_CHECK.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"

namespace graphattn::detail {

[[noreturn]] void throw_nvrtc_error(nvrtcResult r, const char* call, const char* func,
                                    const char* file, int line);

#define GA_NVRTC_CHECK(call)                                                              \
  do {                                                                                    \
    nvrtcResult ga_nvrtc_result_ = (call);                                                \
    if (ga_nvrtc_result_ != NVRTC_SUCCESS)                                                \
      ::graphattn::detail::throw_nvrtc_error(ga_nvrtc_result_, #call, __func__, __FILE__, \
                                             __LINE__);                                   \
  } while (0)

// An NVRTC program made from src's source (named after its spec), destroyed with this object.
class NvrtcProgram {
 public:
  explicit NvrtcProgram(const KernelSource& src);
  ~NvrtcProgram();
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

// render_kernel (graphattn/jit.hpp) with extra appended to the kernel's NVRTC options in place of
// GRAPHATTN_NVRTC_EXTRA_OPTIONS's (core/nvrtc_options.hpp).
KernelSource render_kernel(const AttentionSpec& spec, const std::vector<std::string>& extra);

// Compiles src to a cubin; throws CompileError with the log on rejection.
std::vector<char> nvrtc_compile(const KernelSource& src, double* ms);

// Prefixes each line with its 1-based number, as NVRTC's log counts them.
std::string number_lines(const std::string& source);

}  // namespace graphattn::detail
