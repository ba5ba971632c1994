// SPDX-License-Identifier: Apache-2.0
#include <map>
#include <mutex>

#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/driver.hpp"

namespace graphattn {

using detail::driver;

bool gpu_available(std::string* why) { return detail::gpu_available(why); }

namespace {

// Primary contexts this process retained, one per device, each retained once and kept until
// process exit (as loaded modules are), so selecting a device again costs no driver retain.
class RetainedContexts {
 public:
  CUcontext get(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(device);
    if (it != contexts_.end()) return it->second;
    const auto& d = driver();
    CUdevice dev;
    GA_CU_CHECK(d.cuDeviceGet(&dev, device));
    CUcontext ctx = nullptr;
    GA_CU_CHECK(d.cuDevicePrimaryCtxRetain(&ctx, dev));
    contexts_.emplace(device, ctx);
    return ctx;
  }

 private:
  std::mutex mu_;
  std::map<int, CUcontext> contexts_;
};

RetainedContexts& retained() {
  static RetainedContexts* r = new RetainedContexts;  // never destroyed, like the contexts
  return *r;
}

// The primary context of `device` after checking that the device exists.
CUcontext primary_context(int device) {
  std::string why;
  if (!detail::gpu_available(&why)) throw Error("no GPU: " + why);
  const int count = device_count();
  if (device < 0 || device >= count)
    throw Error("device " + std::to_string(device) + " is out of range; this machine has " +
                std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + " (0.." +
                std::to_string(count - 1) + ")");
  return retained().get(device);
}

}  // namespace

int device_count() {
  try {
    if (!detail::gpu_available()) return 0;
    int n = 0;
    return driver().cuDeviceGetCount(&n) == CUDA_SUCCESS ? n : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

CUcontext use_device(int device) {
  const CUcontext ctx = primary_context(device);
  GA_CU_CHECK(driver().cuCtxSetCurrent(ctx));
  return ctx;
}

CUcontext ensure_context(int device) {
  std::string why;
  if (!detail::gpu_available(&why)) throw Error("no GPU: " + why);
  CUcontext ctx = nullptr;
  GA_CU_CHECK(driver().cuCtxGetCurrent(&ctx));
  if (ctx) return ctx;
  return use_device(device);
}

int current_device() {
  CUcontext ctx = nullptr;
  GA_CU_CHECK(driver().cuCtxGetCurrent(&ctx));
  if (!ctx) throw Error("no CUDA context is current on this thread; call use_device() first");
  CUdevice dev;
  GA_CU_CHECK(driver().cuCtxGetDevice(&dev));
  return static_cast<int>(dev);
}

int current_device_arch() {
  const auto& d = driver();
  CUdevice dev;
  GA_CU_CHECK(d.cuCtxGetDevice(&dev));
  int major = 0, minor = 0;
  GA_CU_CHECK(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  GA_CU_CHECK(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  return major * 10 + minor;
}

namespace {
// Memsets and copies from pageable memory go on the legacy stream and may still be in flight
// when the call returns; work on a non-blocking stream would not wait for them. Every
// DeviceBuffer fill and upload is complete on return.
CUresult finish_legacy_stream(CUresult r) {
  return r == CUDA_SUCCESS ? driver().cuStreamSynchronize(nullptr) : r;
}
}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (!bytes) return;
  GA_CU_CHECK(driver().cuMemAlloc(&ptr_, bytes));
  // Zero-filled, so a fresh buffer can serve as a decode workspace (its counters start at 0).
  const CUresult r = finish_legacy_stream(driver().cuMemsetD8(ptr_, 0, bytes));
  if (r != CUDA_SUCCESS) {
    driver().cuMemFree(ptr_);
    ptr_ = 0;
    GA_CU_CHECK(r);
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_)
    throw Error("upload of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                " overruns a buffer of " + std::to_string(bytes_));
  GA_CU_CHECK(finish_legacy_stream(driver().cuMemcpyHtoD(ptr_ + offset, host, bytes)));
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_)
    throw Error("download of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                " overruns a buffer of " + std::to_string(bytes_));
  GA_CU_CHECK(driver().cuMemcpyDtoH(host, ptr_ + offset, bytes));
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  GA_CU_CHECK(finish_legacy_stream(driver().cuMemsetD8(ptr_, value, bytes_)));
}

void device_memory_info(size_t* free_bytes, size_t* total_bytes) {
  size_t f = 0, t = 0;
  GA_CU_CHECK(driver().cuMemGetInfo(&f, &t));
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
}

void copy_to_host(void* host, const void* device, size_t bytes) {
  GA_CU_CHECK(driver().cuMemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(device), bytes));
}

Stream::Stream() { GA_CU_CHECK(driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }

Stream::~Stream() {
  if (stream_) driver().cuStreamDestroy(stream_);
}

void Stream::synchronize() const { GA_CU_CHECK(driver().cuStreamSynchronize(stream_)); }

EventTimer::EventTimer() {
  GA_CU_CHECK(driver().cuEventCreate(&begin_, CU_EVENT_DEFAULT));
  const CUresult r = driver().cuEventCreate(&end_, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) {
    driver().cuEventDestroy(begin_);
    GA_CU_CHECK(r);
  }
}

EventTimer::~EventTimer() {
  driver().cuEventDestroy(begin_);
  driver().cuEventDestroy(end_);
}

void EventTimer::start(CUstream stream) { GA_CU_CHECK(driver().cuEventRecord(begin_, stream)); }

double EventTimer::stop_us(CUstream stream) {
  GA_CU_CHECK(driver().cuEventRecord(end_, stream));
  GA_CU_CHECK(driver().cuEventSynchronize(end_));
  float ms = 0;
  GA_CU_CHECK(driver().cuEventElapsedTime(&ms, begin_, end_));
  return ms * 1000.0;
}

}  // namespace graphattn
