// Helpers shared by the GPU tests.
#pragma once

#include <cuda.h>

#include "runtime/driver.hpp"

namespace graphattn::test {

// A non-blocking stream, destroyed at scope exit; passes wherever a CUstream is taken.
class Stream {
 public:
  Stream() { GA_CU_CHECK(detail::driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }
  ~Stream() { detail::driver().cuStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator CUstream() const { return stream_; }

 private:
  CUstream stream_ = nullptr;
};

}  // namespace graphattn::test
