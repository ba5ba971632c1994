// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/nvrtc_compiler.hpp"

#include <chrono>
#include <cstdio>
#include <sstream>

namespace graphattn {
namespace detail {

void throw_nvrtc_error(nvrtcResult r, const char* call, const char* func, const char* file,
                       int line) {
  std::ostringstream os;
  os << "NVRTC call " << call << " failed: " << nvrtcGetErrorString(r) << " (" << int(r) << ") in "
     << func << " at " << file << ":" << line;
  throw Error(os.str());
}

std::string number_lines(const std::string& source) {
  std::ostringstream os;
  int n = 1;
  size_t start = 0;
  while (start <= source.size()) {
    size_t end = source.find('\n', start);
    if (end == std::string::npos) end = source.size();
    char num[16];
    std::snprintf(num, sizeof num, "%5d  ", n++);
    os << num << source.substr(start, end - start) << "\n";
    if (end == source.size()) break;
    start = end + 1;
  }
  return os.str();
}

NvrtcProgram::NvrtcProgram(const KernelSource& src) {
  GA_NVRTC_CHECK(nvrtcCreateProgram(&prog_, src.source.c_str(), (src.spec + ".cu").c_str(), 0,
                                    nullptr, nullptr));
}

NvrtcProgram::~NvrtcProgram() { nvrtcDestroyProgram(&prog_); }

std::vector<char> nvrtc_compile(const KernelSource& src, double* ms) {
  const auto t0 = std::chrono::steady_clock::now();
  const NvrtcProgram program(src);
  const nvrtcProgram prog = program.get();
  std::vector<const char*> opts;
  for (const auto& o : src.options) opts.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      nvrtcGetProgramLog(prog, log.data());
      log.resize(log_size - 1);
    }
    if (r != NVRTC_ERROR_COMPILATION)
      log = std::string(nvrtcGetErrorString(r)) + (log.empty() ? "" : "\n" + log);
    throw CompileError(src.spec, log, src.options, number_lines(src.source));
  }
  size_t size = 0;
  GA_NVRTC_CHECK(nvrtcGetCUBINSize(prog, &size));
  std::vector<char> cubin(size);
  GA_NVRTC_CHECK(nvrtcGetCUBIN(prog, cubin.data()));
  if (ms)
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return cubin;
}

}  // namespace detail

std::pair<int, int> nvrtc_version() {
  static const std::pair<int, int> v = [] {
    int major = 0, minor = 0;
    GA_NVRTC_CHECK(nvrtcVersion(&major, &minor));
    return std::make_pair(major, minor);
  }();
  return v;
}

}  // namespace graphattn
