// SPDX-License-Identifier: Apache-2.0
// The GPU test binary: where no GPU is present it says so and exits 77, which ctest reports as
// "Skipped" (SKIP_RETURN_CODE), so CPU-only machines stay green and the skip is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "graphattn/runtime.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!graphattn::gpu_available(&why)) {
    std::printf("graphattn-gpu-tests: skipped, no GPU found (%s)\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
