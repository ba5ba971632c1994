// SPDX-License-Identifier: Apache-2.0
// The cache write kernel on the GPU, compared exactly with a host model: fp16/bf16, NHD/HND and
// vLLM's legacy PagedAttention caches (write_to_paged_cache, plain and interleaved V),
// head and block sizes, fp8 e4m3/e5m2 with scales, random slots with -1 padding, canary blocks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "graphattn/graphattn.hpp"
#include "testing/host_dtypes.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

struct WriteCase {
  DType dtype;
  KvDType kv;
  KvLayout layout;
  int head_size, block_size, num_kv_heads, num_blocks, num_tokens;
  bool interleaved_v = false;  // legacy: vLLM 0.33's reshape_and_cache(..., interleaved_v=True)
};

void run_case(const WriteCase& c, KernelCache& cache, std::mt19937_64& rng) {
  INFO("dtype " << to_string(c.dtype) << " kv " << to_string(c.kv) << " " << to_string(c.layout)
                << " head " << c.head_size << " block " << c.block_size << " kv heads "
                << c.num_kv_heads << " tokens " << c.num_tokens
                << std::string(c.interleaved_v ? " interleaved_v" : ""));
  const int64_t T = c.num_tokens, KH = c.num_kv_heads, D = c.head_size, B = c.block_size,
                NB = c.num_blocks;
  const int elem = c.kv == KvDType::kAuto ? 2 : 1;
  // Key and value rows are strided (a slice of a fused qkv buffer): token stride > heads * D.
  const int64_t token_stride = KH * D + 8 * 3;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<uint16_t> key(T * token_stride), value(T * token_stride);
  for (auto& x : key) x = to_storage(c.dtype, normal(rng));
  for (auto& x : value) x = to_storage(c.dtype, normal(rng));
  // Distinct random slots, about a quarter of tokens padded with -1; the last block is a canary
  // that no slot names.
  std::vector<int64_t> all_slots((NB - 1) * B);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int64_t> slots(T);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int64_t t = 0; t < T; ++t) slots[t] = coin(rng) == 0 ? -1 : all_slots[t];

  const size_t cache_elems = 2 * NB * B * KH * D;
  const size_t cache_bytes = cache_elems * elem;
  std::vector<unsigned char> host_cache(cache_bytes);
  for (auto& b : host_cache) b = static_cast<unsigned char>(rng());
  DeviceBuffer d_key(key.size() * 2), d_value(value.size() * 2), d_slots(T * 8),
      d_cache(cache_bytes);
  d_key.upload(key.data(), key.size() * 2);
  d_value.upload(value.data(), value.size() * 2);
  d_slots.upload(slots.data(), T * 8);
  d_cache.upload(host_cache.data(), cache_bytes);

  const ScalarType st = c.dtype == DType::kBFloat16 ? ScalarType::kBFloat16 : ScalarType::kFloat16;
  const ScalarType kst = c.kv == KvDType::kAuto      ? st
                         : c.kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3
                                                     : ScalarType::kFloat8E5M2;
  TensorView kv_view;
  if (c.layout == KvLayout::kNHD) {
    kv_view = TensorView::contiguous(d_cache.data(), kst, {2, NB, B, KH, D});
  } else if (c.layout == KvLayout::kHND) {
    kv_view = TensorView::strided(d_cache.data(), kst, {2, NB, B, KH, D},
                                  {NB * KH * B * D, KH * B * D, D, B * D, 1});
  } else {  // legacy: one [2, NB, B * KH * D] tensor, split as vLLM does
    kv_view = TensorView::contiguous(d_cache.data(), kst, {2, NB, B * KH * D});
  }
  const TensorView kv = TensorView::strided(d_key.data(), st, {T, KH, D}, {token_stride, D, 1});
  const TensorView vv = TensorView::strided(d_value.data(), st, {T, KH, D}, {token_stride, D, 1});
  const TensorView sv = TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {T});
  const float k_scale = c.kv == KvDType::kAuto ? 1.0f : 0.37f;
  const float v_scale = c.kv == KvDType::kAuto ? 1.0f : 1.9f;
  if (c.layout == KvLayout::kLegacy) {
    const PagedKvCache p = split_paged_kv_cache(kv_view, static_cast<int>(KH), static_cast<int>(D));
    write_to_paged_cache(kv, vv, p.key_cache, p.value_cache, sv, k_scale, v_scale, nullptr, cache,
                         nullptr, nullptr, c.interleaved_v);
  } else {
    write_kv_cache(kv, vv, kv_view, sv, k_scale, v_scale, nullptr, cache);
  }

  std::vector<unsigned char> got(cache_bytes);
  d_cache.download(got.data(), cache_bytes);

  // Host model of the expected cache.
  std::vector<unsigned char> want = host_cache;
  const int64_t x = 16 / elem;  // the legacy key cache's chunk
  auto offset = [&](int which, int64_t blk, int64_t off, int64_t h, int64_t d) {
    const int64_t base = which * NB * B * KH * D + blk * B * KH * D;
    // interleaved value [.., h, off / x, d, off % x] (x: 16 bytes of cache elements too)
    if (c.layout == KvLayout::kLegacy && which == 1 && c.interleaved_v)
      return base + h * D * B + ((off / x) * D + d) * x + off % x;
    if (c.layout == KvLayout::kLegacy)  // key [.., h, d / x, off, x]; value [.., h, d, off]
      return which == 0 ? base + ((h * (D / x) + d / x) * B + off) * x + d % x
                        : base + (h * D + d) * B + off;
    return c.layout == KvLayout::kNHD ? base + (off * KH + h) * D + d
                                      : base + (h * B + off) * D + d;
  };
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const int64_t blk = slots[t] / B, off = slots[t] % B;
    for (int which = 0; which < 2; ++which) {
      const auto& src = which == 0 ? key : value;
      const float scale = which == 0 ? k_scale : v_scale;
      for (int64_t h = 0; h < KH; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const uint16_t x = src[t * token_stride + h * D + d];
          const int64_t o = offset(which, blk, off, h, d);
          if (c.kv == KvDType::kAuto) {
            std::memcpy(&want[o * 2], &x, 2);
          } else {
            // float division, as the kernel does it
            const double q = static_cast<float>(from_storage(c.dtype, x)) / scale;
            want[o] = c.kv == KvDType::kFp8E4M3 ? double_to_e4m3(q) : double_to_e5m2(q);
          }
        }
    }
  }
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < cache_bytes; ++i)
    if (got[i] != want[i] && mismatches++ == 0) first = i;
  INFO("first mismatching byte " << first);
  CHECK(mismatches == 0);
  // The canary block (last) of keys and values is byte-for-byte what was there before.
  for (int which = 0; which < 2; ++which) {
    const int64_t o = offset(which, NB - 1, 0, 0, 0) * elem;
    CHECK(std::equal(got.begin() + o, got.begin() + o + B * KH * D * elem, host_cache.begin() + o));
  }
}

}  // namespace

TEST_CASE("gpu cache write: exact against the host model across the spec axes") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<WriteCase> cases;
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (KvLayout lay : {KvLayout::kNHD, KvLayout::kHND})
      for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3, KvDType::kFp8E5M2})
        for (auto hb : {std::pair{64, 16}, std::pair{128, 32}, std::pair{256, 16},
                        std::pair{40, 256}, std::pair{96, 64}})
          cases.push_back({dt, kv, lay, hb.first, hb.second, 4, 12, 97});
  // vLLM's legacy PagedAttention caches (write_to_paged_cache): head sizes in whole x chunks.
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3, KvDType::kFp8E5M2})
      for (auto hb : {std::pair{64, 16}, std::pair{128, 32}, std::pair{256, 16}, std::pair{80, 64},
                      std::pair{96, 256}})
        cases.push_back({dt, kv, KvLayout::kLegacy, hb.first, hb.second, 4, 12, 97});
  // vLLM 0.33's interleaved V (spec "_iv"): block sizes multiples of kx (8 16-bit, 16 fp8).
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3})
      for (auto hb : {std::pair{64, 16}, std::pair{128, 32}, std::pair{96, 64}})
        cases.push_back({dt, kv, KvLayout::kLegacy, hb.first, hb.second, 4, 12, 97, true});
  cases.push_back({DType::kBFloat16, KvDType::kAuto, KvLayout::kLegacy, 128, 8, 2, 24, 97, true});
  cases.push_back({DType::kBFloat16, KvDType::kAuto, KvLayout::kNHD, 128, 16, 8, 300, 2048});
  cases.push_back({DType::kFloat16, KvDType::kFp8E4M3, KvLayout::kHND, 256, 128, 1, 20, 512});
  for (const auto& c : cases) run_case(c, cache, rng);
}

TEST_CASE("gpu cache write: fp8 conversion of every interesting value matches the host") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  // Every bf16 bit pattern that is finite, written through an e4m3 and an e5m2 cache:
  // exercises rounding ties, subnormals and saturation exhaustively.
  const int64_t D = 256, KH = 1;
  std::vector<uint16_t> vals;
  for (uint32_t b = 0; b < 65536; ++b)
    if (((b >> 7) & 0xff) != 0xff) vals.push_back(static_cast<uint16_t>(b));
  const int64_t T = static_cast<int64_t>(vals.size()) / D;
  vals.resize(T * D);
  DeviceBuffer d_vals(vals.size() * 2), d_slots(T * 8);
  d_vals.upload(vals.data(), vals.size() * 2);
  std::vector<int64_t> slots(T);
  std::iota(slots.begin(), slots.end(), 0);
  d_slots.upload(slots.data(), T * 8);
  for (KvDType kv : {KvDType::kFp8E4M3, KvDType::kFp8E5M2}) {
    INFO(to_string(kv));
    const int64_t B = 16, NB = (T + B - 1) / B;
    DeviceBuffer d_cache(2 * NB * B * KH * D);
    const auto kst = kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3 : ScalarType::kFloat8E5M2;
    const auto view = TensorView::contiguous(d_vals.data(), ScalarType::kBFloat16, {T, KH, D});
    write_kv_cache(view, view, TensorView::contiguous(d_cache.data(), kst, {2, NB, B, KH, D}),
                   TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {T}), 1.0f, 1.0f,
                   nullptr, cache);
    std::vector<uint8_t> got(T * D);
    d_cache.download(got.data(), got.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double x = bf16_to_float(vals[i]);
      const uint8_t want = kv == KvDType::kFp8E4M3 ? double_to_e4m3(x) : double_to_e5m2(x);
      if (got[i] != want && bad++ < 5)
        MESSAGE("bf16 " << x << " -> got code " << int(got[i]) << ", want " << int(want));
    }
    CHECK(bad == 0);
  }
}
