// SPDX-License-Identifier: Apache-2.0
#include "runtime/driver.hpp"

#include <dlfcn.h>

#include <mutex>
#include <sstream>

#include "graphattn/error.hpp"

namespace graphattn::detail {
namespace {

// The name the header maps an API to (cuMemAlloc -> cuMemAlloc_v2): the exact symbol a program
// linked against libcuda would call, so each pointer matches the declaration it is typed by.
#define GA_EXPANDED_NAME(x) GA_STRINGIFY(x)
#define GA_STRINGIFY(x) #x

struct Loaded {
  DriverApi api;
  std::string error;  // empty when loaded
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.error = std::string("the CUDA driver (libcuda.so.1) could not be loaded: ") + dlerror();
    return out;
  }
  std::ostringstream missing;
#define GA_LOAD(name)                                            \
  {                                                              \
    void* fn = dlsym(lib, GA_EXPANDED_NAME(name));               \
    if (!fn) missing << " " << GA_EXPANDED_NAME(name);           \
    out.api.name = reinterpret_cast<decltype(out.api.name)>(fn); \
  }
  GA_DRIVER_FUNCTIONS(GA_LOAD)
#undef GA_LOAD
  if (!missing.str().empty())
    out.error = "the CUDA driver lacks entry points graphattn needs (a driver for CUDA " +
                std::to_string(CUDA_VERSION / 1000) + " or newer is required):" + missing.str();
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(l.error);
  return l.api;
}

bool gpu_available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why) *why = l.error;
    return false;
  }
  static const std::pair<bool, std::string> probe = [&] {
    CUresult r = l.api.cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      l.api.cuGetErrorName(r, &name);
      return std::make_pair(false, std::string("cuInit failed: ") + (name ? name : "?"));
    }
    int n = 0;
    if (l.api.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
      return std::make_pair(false, std::string("no CUDA device found"));
    return std::make_pair(true, std::string());
  }();
  if (why) *why = probe.second;
  return probe.first;
}

void throw_driver_error(CUresult r, const char* call, const char* func, const char* file,
                        int line) {
  const char* name = nullptr;
  const char* text = nullptr;
  const Loaded& l = loaded();
  if (l.error.empty()) {
    l.api.cuGetErrorName(r, &name);
    l.api.cuGetErrorString(r, &text);
  }
  std::ostringstream os;
  os << "CUDA driver call " << call << " failed: " << (name ? name : "CUDA_ERROR") << " (" << int(r)
     << "): " << (text ? text : "unknown error") << " in " << func << " at " << file << ":" << line;
  throw Error(os.str());
}

}  // namespace graphattn::detail
