// SPDX-License-Identifier: Apache-2.0
// Host-side checks of engine-supplied views: every bad input names itself and what is allowed.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "graphattn/graphattn.hpp"

using namespace graphattn;

TEST_CASE("cache write: bad views are rejected with a clear error") {
  // Pure host checks; run everywhere (no launch happens).
  std::vector<char> fake(1 << 16);
  void* p =
      reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(fake.data()) + 255) & ~uintptr_t(255));
  const auto key = TensorView::contiguous(p, ScalarType::kBFloat16, {4, 2, 64});
  const auto slots = TensorView::contiguous(p, ScalarType::kInt64, {4});
  const auto cache5 = TensorView::contiguous(p, ScalarType::kBFloat16, {2, 8, 16, 2, 64});
  CHECK_THROWS_WITH_AS(
      write_kv_cache(key, key, cache5, TensorView::contiguous(p, ScalarType::kInt32, {4}), 1, 1,
                     nullptr),
      doctest::Contains("slot_mapping must be int64, got int32"), Error);
  CHECK_THROWS_WITH_AS(write_kv_cache(TensorView::contiguous(p, ScalarType::kFloat32, {4, 2, 64}),
                                      key, cache5, slots, 1, 1, nullptr),
                       doctest::Contains("KV cache dtype bf16 differs from the model dtype fp32"),
                       Error);
  CHECK_THROWS_WITH_AS(
      write_kv_cache(key, key, TensorView::contiguous(p, ScalarType::kBFloat16, {8, 16, 2, 64}),
                     slots, 1, 1, nullptr),
      doctest::Contains("kv_cache must be 5-d"), Error);
  CHECK_THROWS_WITH_AS(
      write_kv_cache(key, key, TensorView::contiguous(p, ScalarType::kBFloat16, {2, 8, 16, 4, 64}),
                     slots, 1, 1, nullptr),
      doctest::Contains("KV cache holds 4 heads of size 64"), Error);
  CHECK_THROWS_WITH_AS(
      write_kv_cache(key, key, TensorView::contiguous(p, ScalarType::kFloat16, {2, 8, 16, 2, 64}),
                     slots, 1, 1, nullptr),
      doctest::Contains("differs from the model dtype bf16"), Error);
  CHECK_THROWS_WITH_AS(
      write_kv_cache(key, key,
                     TensorView::contiguous(p, ScalarType::kFloat8E4M3, {2, 8, 16, 2, 64}), slots,
                     0.0f, 1, nullptr),
      doctest::Contains("positive k_scale"), Error);
  CHECK_THROWS_WITH_AS(
      write_kv_cache(TensorView::strided(p, ScalarType::kBFloat16, {4, 2, 64}, {130, 64, 1}), key,
                     cache5, slots, 1, 1, nullptr),
      doctest::Contains("multiples of 16 bytes"), Error);
}
