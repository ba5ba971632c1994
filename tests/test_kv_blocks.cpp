// SPDX-License-Identifier: Apache-2.0
// swap_blocks, copy_blocks and kv_cache_half on the host: every view and pair is checked before
// the driver is asked for anything, so their errors show on machines without a GPU too.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/kv_blocks.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using test::error_of;

namespace {

// A flash-layout cache [2, 10, 16, 2, 64] bf16, NHD or HND.
TensorView flash(uintptr_t a, bool hnd) {
  return hnd ? TensorView::strided(test::fake_device(a), ScalarType::kBFloat16, {2, 10, 16, 2, 64},
                                   {10 * 2048, 2048, 64, 16 * 64, 1})
             : TensorView::contiguous(test::fake_device(a), ScalarType::kBFloat16,
                                      {2, 10, 16, 2, 64});
}

}  // namespace

TEST_CASE("kv blocks: kv_cache_half is the key or value half of a flash cache") {
  for (bool hnd : {false, true}) {
    const TensorView kv = flash(0x100000, hnd);
    const TensorView k = kv_cache_half(kv, 0), v = kv_cache_half(kv, 1);
    CHECK(k.ndim == 4);
    CHECK(k.data == kv.data);
    CHECK(static_cast<char*>(v.data) - static_cast<char*>(k.data) == 10 * 2048 * 2);
    CHECK(v.shape[0] == 10);
    CHECK(v.shape[3] == 64);
    CHECK(v.strides[1] == (hnd ? 64 : 2 * 64));
  }
  CHECK(error_of([] { kv_cache_half(flash(0x100000, false), 2); }) ==
        "kv_cache_half: which 2 is not allowed; 0 (keys) or 1 (values)");
  const TensorView three =
      TensorView::contiguous(test::fake_device(0x1000), ScalarType::kBFloat16, {3, 4, 8});
  CHECK(error_of([&] { kv_cache_half(three, 0); }).find("is not a [2, num_blocks, ...] KV cache") !=
        std::string::npos);
}

TEST_CASE("kv blocks: swap_blocks and copy_blocks check views and pairs before any copy") {
  const TensorView dev = kv_cache_half(flash(0x100000, false), 0);
  const TensorView hnd = kv_cache_half(flash(0x200000, true), 1);
  const TensorView host =
      TensorView::contiguous(test::fake_device(0x300000), ScalarType::kBFloat16, {4, 16, 2, 64});
  // Pairs out of range, named by index, against each side's block count.
  CHECK(error_of([&] {
          swap_blocks(dev, host, {{1, 2}, {9, 4}}, nullptr);
        }) ==
        "swap_blocks: block mapping pair 1 (9 -> 4) is out of range; allowed: source blocks 0..9, "
        "destination blocks 0..3");
  CHECK(error_of([&] {
          swap_blocks(dev, host, {{-1, 0}}, nullptr);
        }).find("pair 0 (-1 -> 0)") != std::string::npos);
  // One dtype and block shape.
  const TensorView wide =
      TensorView::contiguous(test::fake_device(0x300000), ScalarType::kBFloat16, {4, 16, 2, 128});
  CHECK(error_of([&] {
          swap_blocks(dev, wide, {}, nullptr);
        }).find("must have one dtype and one block layout") != std::string::npos);
  const TensorView fp8 =
      TensorView::contiguous(test::fake_device(0x300000), ScalarType::kFloat8E4M3, {4, 16, 2, 64});
  CHECK(error_of([&] {
          swap_blocks(dev, fp8, {}, nullptr);
        }).find("must have one dtype and one block layout") != std::string::npos);
  // NHD and HND blocks hold the same elements in other orders: no byte copy between them.
  CHECK(error_of([&] {
          swap_blocks(hnd, dev, {}, nullptr);
        }).find("must have one dtype and one block layout") != std::string::npos);
  // A block must be one compact region: a strided head dim is not.
  const TensorView gappy = TensorView::strided(test::fake_device(0x300000), ScalarType::kBFloat16,
                                               {4, 16, 2, 64}, {16 * 2 * 128, 2 * 128, 128, 1});
  CHECK(error_of([&] { swap_blocks(gappy, dev, {}, nullptr); })
            .find("swap_blocks: src bf16[4, 16, 2, 64] strides [4096, 256, 128, 1] is not "
                  "supported: each block must be one compact region") == 0);
  const TensorView overlapping = TensorView::strided(
      test::fake_device(0x300000), ScalarType::kBFloat16, {4, 16, 2, 64}, {1024, 128, 64, 1});
  CHECK(error_of([&] {
          swap_blocks(dev, overlapping, {}, nullptr);
        }).find("has blocks 1024 elements apart, closer than a block's 2048 elements") !=
        std::string::npos);
  CHECK(error_of([&] { swap_blocks(TensorView{}, dev, {}, nullptr); }) ==
        "swap_blocks: src is null");
  const TensorView flat =
      TensorView::contiguous(test::fake_device(0x300000), ScalarType::kBFloat16, {4});
  CHECK(error_of([&] {
          swap_blocks(flat, flat, {}, nullptr);
        }).find("supported: [num_blocks, ...] with at least one dim per block") !=
        std::string::npos);
  // HND pages are compact blocks too: the checks pass and the pair check follows.
  CHECK(error_of([&] {
          swap_blocks(hnd, hnd, {{0, 10}}, nullptr);
        }).find("pair 0 (0 -> 10) is out of range") != std::string::npos);
  // copy_blocks: every cache is checked against every pair, named by index.
  CHECK(error_of([&] {
          copy_blocks({dev, host}, {{1, 3}, {2, 5}}, nullptr);
        }) ==
        "copy_blocks: caches[1]: block mapping pair 1 (2 -> 5) is out of range; allowed: source "
        "blocks 0..3, destination blocks 0..3");
  CHECK(error_of([&] {
          copy_blocks({dev, gappy}, {}, nullptr);
        }).find("copy_blocks: caches[1]") == 0);
}
