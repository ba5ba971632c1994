// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "graphattn/capture.hpp"
#include "graphattn/error.hpp"

using namespace graphattn;

TEST_CASE("capture sizes: vLLM's default list and padding") {
  const auto s256 = default_capture_sizes(256);
  // [1, 2, 4] + range(8, 256, 8) + range(256, 513, 16)
  CHECK(s256.size() == 3 + 31 + 17);
  CHECK(s256.front() == 1);
  CHECK(s256[3] == 8);
  CHECK(s256[33] == 248);
  CHECK(s256[34] == 256);
  CHECK(s256.back() == 512);
  const auto s8 = default_capture_sizes(8);  // max = 16
  CHECK(s8 == std::vector<int>{1, 2, 4, 8, 16});
  const auto s1 = default_capture_sizes(1);  // max = 2
  CHECK(s1 == std::vector<int>{1, 2});
  const auto s200 = default_capture_sizes(200);  // max = 400
  CHECK(s200.back() == 400);
  CHECK(s200[s200.size() - 2] == 384);
  CHECK(default_capture_sizes(1000).back() == 512);
  CHECK_THROWS_WITH_AS(default_capture_sizes(0),
                       doctest::Contains("max_num_seqs must be >= 1, got 0"), Error);

  CHECK(padded_capture_size(s256, 1) == 1);
  CHECK(padded_capture_size(s256, 3) == 4);
  CHECK(padded_capture_size(s256, 5) == 8);
  CHECK(padded_capture_size(s256, 9) == 16);
  CHECK(padded_capture_size(s256, 248) == 248);
  CHECK(padded_capture_size(s256, 249) == 256);
  CHECK(padded_capture_size(s256, 257) == 272);
  CHECK(padded_capture_size(s256, 512) == 512);
  CHECK(padded_capture_size(s256, 513) == 0);  // eager, unpadded
  CHECK(padded_capture_size(s256, 0) == 1);

  CHECK(normalize_capture_sizes({16, 4, 4, 1}) == std::vector<int>{1, 4, 16});
  CHECK_THROWS_WITH_AS(normalize_capture_sizes({4, 0}),
                       doctest::Contains("capture size 0 is not allowed"), Error);
}

TEST_CASE("capture sizes: multiples of the decode query length for speculative decoding") {
  // q = 1 is the list above.
  CHECK(default_capture_sizes(64, 1) == default_capture_sizes(64));
  // q = 4, max_num_seqs 8: max = min(2 * 8 * 4, 512) = 64; [1, 2, 4, 8, ..., 64] rounded up to
  // multiples of 4 and deduplicated.
  CHECK(default_capture_sizes(8, 4) == std::vector<int>{4, 8, 16, 24, 32, 40, 48, 56, 64});
  // q = 3: 1, 2, 4 become 3, 3, 6; 8 becomes 9, ...; nothing above max = 48.
  CHECK(default_capture_sizes(8, 3) == std::vector<int>{3, 6, 9, 18, 24, 33, 42, 48});
  // Large batches stop at 512 tokens (128 requests of 4), as vLLM's list does.
  const auto big = default_capture_sizes(256, 4);
  CHECK(big.back() == 512);
  for (int s : big) CHECK(s % 4 == 0);
  CHECK(std::adjacent_find(big.begin(), big.end(), [](int a, int b) { return a >= b; }) ==
        big.end());
  // q = 16: sizes are whole requests of 16 tokens.
  CHECK(default_capture_sizes(2, 16) == std::vector<int>{16, 32, 48, 64});
  for (int bad : {0, 17})
    CHECK_THROWS_WITH_AS(default_capture_sizes(8, bad),
                         doctest::Contains(("decode_query_len " + std::to_string(bad) +
                                            " is not supported; supported: 1..16")
                                               .c_str()),
                         Error);
}

TEST_CASE("graph runner: configuration errors are clear") {
  GraphRunner::Options o;
  o.capture_sizes = {1, 2};
  CHECK_THROWS_WITH_AS(GraphRunner(o, nullptr, [] { return uint64_t{0}; }),
                       doctest::Contains("needs a step"), Error);
  CHECK_THROWS_WITH_AS(GraphRunner(
                           o, [](CUstream, int) {}, nullptr),
                       doctest::Contains("needs a fingerprint"), Error);
  GraphRunner r(
      o, [](CUstream, int) {}, [] { return uint64_t{0}; });
  CHECK(r.padded_size(2) == 2);
  CHECK(r.padded_size(3) == 0);
  // Eager steps need no GPU: a batch above the largest size runs the step directly.
  CHECK(r.run(nullptr, 3) == 0);
  CHECK(r.stats().eager_steps == 1);
}

TEST_CASE("graph runner: GRAPHATTN_DISABLE_GRAPHS=1 runs every step eagerly") {
  GraphRunner::Options o;
  o.capture_sizes = {1, 2, 4};
  int steps = 0, last_n = -1;
  setenv("GRAPHATTN_DISABLE_GRAPHS", "1", 1);
  GraphRunner r(
      o,
      [&](CUstream, int n) {
        ++steps;
        last_n = n;
      },
      [] { return uint64_t{0}; });
  unsetenv("GRAPHATTN_DISABLE_GRAPHS");
  CHECK_FALSE(r.graphs_enabled());
  r.capture_all(nullptr);  // nothing to capture
  CHECK(r.run(nullptr, 3) == 0);
  CHECK(last_n == 3);  // unpadded
  CHECK(steps == 1);
  CHECK(r.stats().eager_steps == 1);
  CHECK(r.stats().captures == 0);
  GraphRunner enabled(
      o, [&](CUstream, int) {}, [] { return uint64_t{0}; });
  CHECK(enabled.graphs_enabled());
}
