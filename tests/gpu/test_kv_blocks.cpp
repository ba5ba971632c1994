// SPDX-License-Identifier: Apache-2.0
// swap_blocks and copy_blocks on the GPU: blocks of flash-layout caches (NHD and HND pages)
// swapped to host memory and back, and copied across layers, byte for byte, with every other
// block untouched; copy_blocks captured in a graph and replayed with new contents.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

namespace {

constexpr int64_t kBlocks = 12, kBlock = 16, kKvHeads = 2, kHead = 64;
constexpr size_t kBlockBytes = kBlock * kKvHeads * kHead * 2;  // one block of one half, bf16

std::vector<unsigned char> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TensorView flash(DeviceBuffer& b, bool hnd) {
  const int64_t NB = kBlocks, B = kBlock, KH = kKvHeads, D = kHead;
  return hnd ? TensorView::strided(b.data(), ScalarType::kBFloat16, {2, NB, B, KH, D},
                                   {NB * B * KH * D, B * KH * D, D, B * D, 1})
             : TensorView::contiguous(b.data(), ScalarType::kBFloat16, {2, NB, B, KH, D});
}

// Bytes of block `block` of half `which` in a flash cache's host image.
const unsigned char* block_of(const std::vector<unsigned char>& image, int which, int64_t block) {
  return image.data() + (which * kBlocks + block) * kBlockBytes;
}

}  // namespace

TEST_CASE("gpu kv blocks: swap_blocks out to host memory and back, NHD and HND") {
  GA_REQUIRE_GPU();
  auto rng = test::make_rng();
  Stream stream;
  for (bool hnd : {false, true}) {
    INFO(std::string(hnd ? "HND" : "NHD"));
    const size_t bytes = 2 * kBlocks * kBlockBytes;
    const auto init = random_bytes(rng, bytes);
    DeviceBuffer dev(bytes);
    dev.upload(init.data(), bytes);
    const TensorView kv = flash(dev, hnd);
    // Host cache of 3 blocks per half (pageable memory: the copies are synchronous then).
    std::vector<unsigned char> host(2 * 3 * kBlockBytes, 0);
    for (int which = 0; which < 2; ++which) {
      TensorView h = kv_cache_half(kv, which);
      h.data = host.data() + which * 3 * kBlockBytes;
      h.shape[0] = 3;
      h.strides[0] = kBlock * kKvHeads * kHead;
      swap_blocks(kv_cache_half(kv, which), h, {{7, 0}, {2, 2}}, stream);
    }
    stream.synchronize();
    for (int which = 0; which < 2; ++which) {
      const unsigned char* h = host.data() + which * 3 * kBlockBytes;
      CHECK(std::memcmp(h, block_of(init, which, 7), kBlockBytes) == 0);
      CHECK(std::memcmp(h + 2 * kBlockBytes, block_of(init, which, 2), kBlockBytes) == 0);
      CHECK(std::all_of(h + kBlockBytes, h + 2 * kBlockBytes,
                        [](unsigned char b) { return b == 0; }));
    }
    // Back in, to other blocks: 0 -> 11, 2 -> 4.
    for (int which = 0; which < 2; ++which) {
      TensorView h = kv_cache_half(kv, which);
      h.data = host.data() + which * 3 * kBlockBytes;
      h.shape[0] = 3;
      h.strides[0] = kBlock * kKvHeads * kHead;
      swap_blocks(h, kv_cache_half(kv, which), {{0, 11}, {2, 4}}, stream);
    }
    stream.synchronize();
    std::vector<unsigned char> after(bytes);
    dev.download(after.data(), bytes);
    for (int which = 0; which < 2; ++which)
      for (int64_t b = 0; b < kBlocks; ++b) {
        const int64_t from = b == 11 ? 7 : b == 4 ? 2 : b;
        INFO("half " << which << " block " << b);
        CHECK(std::memcmp(block_of(after, which, b), block_of(init, which, from), kBlockBytes) ==
              0);
      }
  }
}

TEST_CASE("gpu kv blocks: copy_blocks across layers, eager and in a captured graph") {
  GA_REQUIRE_GPU();
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  const size_t bytes = 2 * kBlocks * kBlockBytes;
  std::vector<DeviceBuffer> layers;
  std::vector<std::vector<unsigned char>> init;
  std::vector<TensorView> halves;
  for (int l = 0; l < 3; ++l) {
    layers.emplace_back(bytes);
    init.push_back(random_bytes(rng, bytes));
    layers.back().upload(init.back().data(), bytes);
  }
  for (int l = 0; l < 3; ++l)
    for (int which = 0; which < 2; ++which)
      halves.push_back(kv_cache_half(flash(layers[l], l == 1), which));
  // Copy-on-write of blocks 3 and 5 into 9 and 10; 6 -> 6 copies nothing.
  const std::vector<BlockPair> mapping = {{3, 9}, {5, 10}, {6, 6}};
  const auto check = [&](const char* what) {
    for (int l = 0; l < 3; ++l) {
      std::vector<unsigned char> after(bytes);
      layers[l].download(after.data(), bytes);
      for (int which = 0; which < 2; ++which)
        for (int64_t b = 0; b < kBlocks; ++b) {
          const int64_t from = b == 9 ? 3 : b == 10 ? 5 : b;
          INFO(what << ": layer " << l << " half " << which << " block " << b);
          CHECK(std::memcmp(block_of(after, which, b), block_of(init[l], which, from),
                            kBlockBytes) == 0);
        }
    }
  };
  copy_blocks(halves, mapping, stream);
  stream.synchronize();
  check("eager");
  // Captured once, replayed over new contents.
  for (int l = 0; l < 3; ++l) {
    init[l] = random_bytes(rng, bytes);
    layers[l].upload(init[l].data(), bytes);
  }
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  copy_blocks(halves, mapping, stream);
  GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
  GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
  GA_CU_CHECK(d.cuGraphLaunch(exec, stream));
  stream.synchronize();
  check("graph replay");
  GA_CU_CHECK(d.cuGraphExecDestroy(exec));
  GA_CU_CHECK(d.cuGraphDestroy(graph));
}
