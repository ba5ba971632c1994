// SPDX-License-Identifier: Apache-2.0
// Device helpers for engines, tools and tests: GPU presence, the current device's arch, a
// context, its memory, and owning device buffers, streams and event timers for tools and tests
// (the forward path never allocates).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

#include "graphattn/export.h"

namespace graphattn {

// Parses every on/off variable the library reads (GRAPHATTN_DISABLE_GRAPHS,
// GRAPHATTN_DECODE_CLUSTERS, GRAPHATTN_DUMP_SOURCE, GRAPHATTN_CHECK_BOUNDS): throws Error naming
// the first that is not 1, true, yes, on, 0, false, no or off (any case; unset or empty is off),
// its value and what is allowed. Lets a program reject its environment before it starts work.
// Also parses GRAPHATTN_NVRTC_EXTRA_OPTIONS (an NVRTC option it does not allow is an error too),
// GRAPHATTN_MIXED_BRANCHES and GRAPHATTN_MIXED_DECODE_DIVISOR (graphattn/backend.hpp).
GRAPHATTN_API void check_flag_environment();

// Whether the driver loads and a device exists; *why says what is missing. Never throws.
GRAPHATTN_API bool gpu_available(std::string* why = nullptr);

// CUDA devices this process can use; 0 where the driver does not load or no device exists.
// Never throws.
GRAPHATTN_API int device_count();

// Makes device's primary context current on this thread, whatever context was current before,
// and returns it (retained once per process and device, never released). Everything graphattn
// does on this thread afterwards (prepare, buffers, streams, capture) belongs to that device.
// Several devices in one process: one thread per device, each calling use_device(its device)
// first; a backend or AttentionLayerStack stays on the device it was prepared on and is used
// only with that device's context current. Throws graphattn::Error without a GPU, or naming
// the device and the count when device is not in [0, device_count()).
GRAPHATTN_API CUcontext use_device(int device);

// Makes device's primary context current on this thread if no context is (engines that use
// the CUDA runtime already have one); keeps a current context, whichever device it belongs to
// (use_device() selects one). Returns the current context.
GRAPHATTN_API CUcontext ensure_context(int device = 0);

// The ordinal of the current context's device. Throws graphattn::Error when no context is
// current.
GRAPHATTN_API int current_device();

// Compute capability of the current context's device as major * 10 + minor (e.g. 90).
GRAPHATTN_API int current_device_arch();

// Owning device allocation (cuMemAlloc), zero-filled; for tools, tests and benchmarks. The fill
// and every upload and fill_bytes are complete when the call returns (visible to any stream).
class GRAPHATTN_API DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return reinterpret_cast<void*>(ptr_); }
  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill_bytes(unsigned char value);

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Free and total memory of the current context's device, in bytes.
GRAPHATTN_API void device_memory_info(size_t* free_bytes, size_t* total_bytes);

// Copies bytes of device memory (any address in the current context) to host memory; returns
// when the copy is done.
GRAPHATTN_API void copy_to_host(void* host, const void* device, size_t bytes);

// Owning non-blocking stream (cuStreamCreate) of the current context, destroyed with the object;
// passes wherever a CUstream is taken.
class GRAPHATTN_API Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator CUstream() const { return stream_; }
  CUstream get() const { return stream_; }
  // Waits for everything queued on the stream.
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

// Times work queued on a stream with two events: start(s), queue the work, stop_us(s) waits for
// it and returns the elapsed microseconds (the GPU's time between the two records).
class GRAPHATTN_API EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(CUstream stream);
  double stop_us(CUstream stream);
  // start, work(), stop_us.
  template <typename Work>
  double time_us(CUstream stream, Work&& work) {
    start(stream);
    work();
    return stop_us(stream);
  }

 private:
  CUevent begin_ = nullptr;
  CUevent end_ = nullptr;
};

}  // namespace graphattn
