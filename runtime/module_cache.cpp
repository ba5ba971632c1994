// SPDX-License-Identifier: Apache-2.0
#include "runtime/module_cache.hpp"

#include <map>
#include <mutex>

#include "graphattn/error.hpp"

namespace graphattn::detail {
namespace {

struct Registry {
  std::mutex mu;
  // Node-based: references handed out stay valid while new kernels are added.
  std::map<std::pair<std::string, CUcontext>, LoadedKernel> loaded;
  std::map<CUfunction, int> shared_limit;  // dynamic shared memory allowed, above the default
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: modules live until process exit
  return *r;
}

}  // namespace

const LoadedKernel& load_kernel(const AttentionSpec& spec, KernelCache& cache, CUstream stream) {
  const auto& d = driver();
  CUcontext ctx = nullptr;
  GA_CU_CHECK(d.cuCtxGetCurrent(&ctx));
  if (!ctx) throw Error("no CUDA context is current on this thread; call ensure_context() first");
  const std::pair<std::string, CUcontext> id{spec.to_string(), ctx};
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.loaded.find(id);
    if (it != r.loaded.end()) return it->second;
  }
  if (stream) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    GA_CU_CHECK(d.cuStreamIsCapturing(stream, &status));
    if (status != CU_STREAM_CAPTURE_STATUS_NONE)
      throw Error("kernel " + id.first +
                  " is not loaded and the stream is capturing a graph; prepare every kernel "
                  "before capture (nothing may compile or load inside a capture)");
  }
  auto compiled = cache.get(spec);
  LoadedKernel k;
  k.compiled = compiled;
  GA_CU_CHECK(d.cuModuleLoadData(&k.module, compiled->cubin.data()));
  CUresult res = d.cuModuleGetFunction(&k.function, k.module, compiled->entry.c_str());
  if (res != CUDA_SUCCESS) {
    d.cuModuleUnload(k.module);
    GA_CU_CHECK(res);
  }
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] = r.loaded.emplace(id, k);
  if (!inserted) d.cuModuleUnload(k.module);  // another thread loaded it first
  return it->second;
}

void ensure_shared_limit(const LoadedKernel& k, int bytes) {
  constexpr int kDefaultLimit = 48 * 1024;
  if (bytes <= kDefaultLimit) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  int& limit = r.shared_limit[k.function];
  if (limit >= bytes) return;
  GA_CU_CHECK(driver().cuFuncSetAttribute(k.function,
                                          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
  limit = bytes;
}

}  // namespace graphattn::detail
