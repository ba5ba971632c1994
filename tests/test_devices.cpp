// SPDX-License-Identifier: Apache-2.0
// Device selection on any machine: device_count() never throws, use_device() names a bad
// ordinal and the count (or says there is no GPU), and where devices exist, use_device()
// switches the current context even when another one is current.
#include <doctest/doctest.h>

#include <string>

#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"

using namespace graphattn;

TEST_CASE("devices: device_count never throws; use_device rejects a device that is not there") {
  const int count = device_count();
  CHECK(count >= 0);
  CHECK((count > 0) == gpu_available());
  const std::string want = count == 0 ? "no GPU" : "is out of range; this machine has ";
  CHECK_THROWS_WITH_AS(use_device(count), doctest::Contains(want.c_str()), Error);
  CHECK_THROWS_WITH_AS(use_device(-1), doctest::Contains(want.c_str()), Error);
  if (count == 0) return;
  CHECK_THROWS_WITH_AS(use_device(count),
                       doctest::Contains(("device " + std::to_string(count) +
                                          " is out of range; "
                                          "this machine has " +
                                          std::to_string(count))
                                             .c_str()),
                       Error);
  // Every device can be chosen, whichever context is current; ensure_context keeps it.
  for (int d = count - 1; d >= 0; --d) {
    const CUcontext ctx = use_device(d);
    CHECK(current_device() == d);
    CHECK(ensure_context(0) == ctx);
    CHECK(use_device(d) == ctx);  // the same primary context each time
  }
}
