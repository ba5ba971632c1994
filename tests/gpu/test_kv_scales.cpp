// SPDX-License-Identifier: Apache-2.0
// fp8 KV scales in device memory on the GPU: calc_kv_scales against a host amax (strided rows,
// padded rows and row gaps holding huge values that must not count, all-zero and empty batches,
// vLLM's and the fp8-max divisors); every kernel (cache write, decode with its fused write,
// prefill, both prefill templates) given device scales writes and returns exactly the bytes it
// does with the same values as host floats; and captured graphs that follow new device scales
// on every replay without a recapture, whether calc_kv_scales inside the graph or the engine
// writes them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "testing/host_dtypes.hpp"
#include "tests/gpu/forward_batch.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

void device_sync() { GA_CU_CHECK(detail::driver().cuCtxSynchronize()); }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Two fp32 device scalars (k at offset 0, v at 4), poisoned with NaN until written.
struct Scalars {
  DeviceBuffer buf{8};
  Scalars() { buf.fill_bytes(0xff); }
  float* k() const { return static_cast<float*>(buf.data()); }
  float* v() const { return static_cast<float*>(buf.data()) + 1; }
  void set(float k_scale, float v_scale) {
    const float h[2] = {k_scale, v_scale};
    buf.upload(h, 8);
  }
  std::pair<float, float> get() const {
    device_sync();
    float h[2];
    buf.download(h, 8);
    return {h[0], h[1]};
  }
};
// The scales the equal-value tests use: as host floats, and set in device scalars.
constexpr float kKScale = 0.043f, kVScale = 0.021f;
struct FixedScalars : Scalars {
  FixedScalars() { set(kKScale, kVScale); }
};

// What calc_kv_scales must write for a batch whose largest |x| is amax.
float expected_scale(float amax, float divisor) { return std::max(amax / divisor, kMinKvScale); }

struct AmaxCase {
  DType dtype;
  int tokens, kv_heads, head_size;
};

// Keys and values of c's shape as rows of a larger buffer: token stride kv_heads * head_size + 16
// (a gap after each row) and 5 padded rows after the last; the gaps and the padded rows hold a
// huge value that calc_kv_scales must never see. One planted extreme per tensor makes the
// maximum sit in one random block. zeros: every real element is +0 or -0.
void check_amax(const AmaxCase& c, bool zeros, KernelCache& cache, std::mt19937_64& rng) {
  INFO(to_string(c.dtype) << " tokens " << c.tokens << " kv heads " << c.kv_heads << " head "
                          << c.head_size << std::string(zeros ? " (zeros)" : ""));
  const int64_t T = c.tokens, KH = c.kv_heads, D = c.head_size, stride = KH * D + 16;
  const int64_t rows = T + 5;
  const uint16_t huge = to_storage(c.dtype, c.dtype == DType::kBFloat16 ? 1e30 : 65504.0);
  std::vector<uint16_t> key(rows * stride, huge), value(rows * stride, huge);
  std::normal_distribution<double> normal(0.0, 2.0);
  float amax[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    std::vector<uint16_t>& x = which ? value : key;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < KH * D; ++i)
        x[t * stride + i] = to_storage(c.dtype, zeros ? (rng() % 2 ? 0.0 : -0.0) : normal(rng));
    if (!zeros && T > 0) {
      const int64_t at =
          static_cast<int64_t>(rng() % T) * stride + static_cast<int64_t>(rng() % (KH * D));
      x[at] = to_storage(c.dtype, (rng() % 2 ? 1 : -1) * (30.0 + which));
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < KH * D; ++i)
        amax[which] = std::max(
            amax[which], static_cast<float>(std::fabs(from_storage(c.dtype, x[t * stride + i]))));
  }
  DeviceBuffer dk(key.size() * 2), dv(value.size() * 2);
  dk.upload(key.data(), dk.bytes());
  dv.upload(value.data(), dv.bytes());
  const ScalarType st = c.dtype == DType::kBFloat16 ? ScalarType::kBFloat16 : ScalarType::kFloat16;
  const TensorView kv = TensorView::strided(dk.data(), st, {T, KH, D}, {stride, D, 1});
  const TensorView vv = TensorView::strided(dv.data(), st, {T, KH, D}, {stride, D, 1});
  Scalars out;
  const float divisors[][2] = {{kKScaleDivisor, kVScaleDivisor},
                               {fp8_max(KvDType::kFp8E4M3), fp8_max(KvDType::kFp8E5M2)}};
  for (const auto& div : divisors) {
    out.buf.fill_bytes(0xff);
    calc_kv_scales(kv, vv, out.k(), out.v(), div[0], div[1], nullptr, cache);
    const auto got = out.get();
    INFO("amax " << amax[0] << " / " << amax[1] << ", divisors " << div[0] << " / " << div[1]);
    CHECK(bits(got.first) == bits(expected_scale(amax[0], div[0])));
    CHECK(bits(got.second) == bits(expected_scale(amax[1], div[1])));
    if (zeros) CHECK(got.first == kMinKvScale);
  }
}

// One forward() of `cfg` on b from its initial cache and a poisoned output: the output and the
// cache bytes afterwards.
struct Result {
  std::vector<unsigned char> out, cache;
};
Result forward_once(const AttentionLayerConfig& cfg, Batch& b, int decodes, KernelCache& cache) {
  AttentionBackend attn(cfg);
  attn.prepare(cache);
  DeviceBuffer ws(attn.workspace_bytes());
  b.cache.upload(b.cache_before.data(), b.cache_before.size());
  b.out.fill_bytes(0xff);
  attn.forward(b.query(), b.keys(), b.values(), b.cache_view(), b.output(), b.metadata(decodes),
               ws.data(), ws.bytes(), nullptr);
  device_sync();
  Result r{b.output_bytes(), std::vector<unsigned char>(b.cache.bytes())};
  b.cache.download(r.cache.data(), r.cache.size());
  return r;
}

// New keys and values of b: N(0, magnitude) in bf16.
void random_new_rows(Batch& b, std::mt19937_64& rng, double magnitude) {
  std::normal_distribution<double> normal(0.0, magnitude);
  std::vector<uint16_t> h(b.T * Batch::KH * Batch::D);
  for (DeviceBuffer* d : {&b.key_bf16, &b.value_bf16}) {
    for (auto& x : h) x = to_storage(DType::kBFloat16, normal(rng));
    d->upload(h.data(), h.size() * 2);
  }
}

// The largest |x| of b's new keys (which 0) or values (1).
float new_rows_amax(const Batch& b, int which) {
  std::vector<uint16_t> h(b.T * Batch::KH * Batch::D);
  (which ? b.value_bf16 : b.key_bf16).download(h.data(), h.size() * 2);
  float m = 0;
  for (uint16_t x : h)
    m = std::max(m, static_cast<float>(std::fabs(from_storage(DType::kBFloat16, x))));
  return m;
}

// A prepared fp8 layer of Batch's shapes that reads its scales from `scales`, and a workspace.
struct ScaledLayer {
  AttentionBackend attn;
  DeviceBuffer ws;
  static AttentionLayerConfig config(KvDType kv, const Scalars& scales) {
    AttentionLayerConfig c = Batch::layer(kv, 2048, 4);
    c.k_scale_device = scales.k();
    c.v_scale_device = scales.v();
    return c;
  }
  ScaledLayer(KvDType kv, const Scalars& scales, KernelCache& cache) : attn(config(kv, scales)) {
    attn.prepare(cache);
    ws = DeviceBuffer(attn.workspace_bytes());
  }
  void forward(const Batch& b, const AttentionMetadata& md, CUstream stream) const {
    attn.forward(b.query(), b.keys(), b.values(), b.cache_view(), b.output(), md, ws.data(),
                 ws.bytes(), stream);
  }
};

// After a replay: b's output and cache must be the bytes an eager forward() of the same batch
// gives with the scales as host floats. Returns the replay's bytes.
Result check_replay(Batch& b, int decodes, float k_scale, float v_scale, KernelCache& cache) {
  device_sync();
  Result graph{b.output_bytes(), std::vector<unsigned char>(b.cache.bytes())};
  b.cache.download(graph.cache.data(), graph.cache.size());
  AttentionLayerConfig host = Batch::layer(b.kv, 2048, 4);
  host.k_scale = k_scale;
  host.v_scale = v_scale;
  const Result want = forward_once(host, b, decodes, cache);
  CHECK(graph.out == want.out);
  CHECK(graph.cache == want.cache);
  return graph;
}

}  // namespace

TEST_CASE("gpu kv scales: calc_kv_scales equals the host amax; padded rows never count") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const std::vector<AmaxCase> cases = {
      {DType::kBFloat16, 1, 1, 64},
      {DType::kFloat16, 37, 2, 128},
      {DType::kBFloat16, 3, 2, 40},
      {DType::kFloat16, 1000, 8, 80},
      {DType::kBFloat16, 4099, 4, 256}};  // 4099 tokens: more rows than the grid's threads
  for (const AmaxCase& c : cases) {
    check_amax(c, false, cache, rng);
    check_amax(c, true, cache, rng);
  }
  // No rows at all: the minimum, written by the memsets alone.
  check_amax({DType::kFloat16, 0, 2, 128}, false, cache, rng);
  // A head size the kernels do not support is named once a device is there to build for.
  DeviceBuffer rows(4 * 264 * 2);
  Scalars out;
  const TensorView bad = TensorView::contiguous(rows.data(), ScalarType::kBFloat16, {4, 1, 264});
  CHECK_THROWS_WITH_AS(calc_kv_scales(bad, bad, out.k(), out.v(), 200, 100, nullptr, cache),
                       doctest::Contains("head size 264 is not supported"), Error);
}

TEST_CASE("gpu kv scales: every kernel reads device scales as it reads equal host floats") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  FixedScalars scales;
  struct Shape {
    int requests, new_tokens, seq_len, decodes;
  };
  // Two decodes of long contexts (split launches) and eight decodes (one split each), both
  // with the decode kernel's fused write, and a prefill batch (the cache write kernel, then the
  // prefill kernel; the wgmma one on sm_90 for the 16-bit cache).
  const Shape shapes[] = {{2, 1, 1500, 2}, {8, 1, 700, 8}, {3, 37, 300, 0}};
  for (KvDType kv : {KvDType::kFp8E4M3, KvDType::kFp8E5M2, KvDType::kAuto}) {
    for (const Shape& s : shapes) {
      INFO("kv " << to_string(kv) << ", " << s.requests << " requests of " << s.new_tokens
                 << " new tokens, seq_len " << s.seq_len);
      Batch b(s.requests, s.new_tokens, s.seq_len, kv, rng());
      random_new_rows(b, rng, 1.0);
      AttentionLayerConfig host = Batch::layer(kv, 2048, 8);
      host.k_scale = kKScale;
      host.v_scale = kVScale;
      AttentionLayerConfig device = host;  // floats that would give other results
      device.k_scale = 0.5f;
      device.v_scale = 2.0f;
      device.k_scale_device = scales.k();
      device.v_scale_device = scales.v();
      if (kv == KvDType::kAuto) device.k_scale = device.v_scale = 1.0f;  // ignored anyway
      const Result want = forward_once(host, b, s.decodes, cache);
      const Result got = forward_once(device, b, s.decodes, cache);
      CHECK(got.out == want.out);
      CHECK(got.cache == want.cache);
      CHECK(got.cache != b.cache_before);  // the new rows were written
      if (s.decodes > 0 || kv == KvDType::kAuto) continue;
      // The direct calls: write_kv_cache, then prefill_attention over what it wrote.
      Result direct[2];
      const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(Batch::D));
      for (int dev = 0; dev < 2; ++dev) {
        b.cache.upload(b.cache_before.data(), b.cache_before.size());
        b.out.fill_bytes(0xff);
        const float ks = dev ? 7.0f : kKScale, vs = dev ? 9.0f : kVScale;
        const float* kp = dev ? scales.k() : nullptr;
        const float* vp = dev ? scales.v() : nullptr;
        const AttentionMetadata md = b.metadata(0);
        write_kv_cache(b.keys(), b.values(), b.cache_view(), md.slot_mapping, ks, vs, nullptr,
                       cache, kp, vp);
        prefill_attention(b.query(), b.cache_view(), b.output(), md.query_start_loc, md.seq_lens,
                          md.block_table, 0, s.requests, s.new_tokens, softmax_scale, 0, 0.0f, ks,
                          vs, nullptr, cache, nullptr, nullptr, kp, vp);
        device_sync();
        direct[dev].out = b.output_bytes();
        direct[dev].cache.resize(b.cache.bytes());
        b.cache.download(direct[dev].cache.data(), direct[dev].cache.size());
      }
      CHECK(direct[1].out == direct[0].out);
      CHECK(direct[1].cache == direct[0].cache);
      CHECK(direct[0].cache == want.cache);
    }
  }
}

TEST_CASE("gpu kv scales: the decode kernel's fused fp8 write stores the cache write's bytes") {
  // A decode-only forward() writes its new rows inside the decode kernel (rounded there and
  // patched into the tile); write_kv_cache is the cache write kernel, checked byte for byte
  // against the host rounding in test_cache_write.cpp. Split launches and unsplit ones, host
  // and device scales, magnitudes that reach the formats' largest values.
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  FixedScalars scales;
  for (KvDType kv : {KvDType::kFp8E4M3, KvDType::kFp8E5M2})
    for (const int requests : {2, 80})  // 2 x 2 KV heads split; 80 x 2 fill the device
      for (const bool device : {false, true}) {
        const int seq_len = requests == 2 ? 1500 : 100;
        INFO("kv " << to_string(kv) << ", " << requests << " decodes of " << seq_len
                   << std::string(device ? ", device scales" : ", host scales"));
        Batch b(requests, 1, seq_len, kv, rng());
        random_new_rows(b, rng, requests == 2 ? 4.0 : 1.0);
        AttentionLayerConfig cfg = Batch::layer(kv, 2048, 80);
        cfg.k_scale = kKScale;
        cfg.v_scale = kVScale;
        AttentionBackend probe(cfg);
        probe.prepare(cache);
        CHECK((probe.decode_max_splits(requests) > 1) == (requests == 2));
        if (device) {
          cfg.k_scale_device = scales.k();
          cfg.v_scale_device = scales.v();
        }
        const Result fused = forward_once(cfg, b, requests, cache);
        CHECK(fused.cache != b.cache_before);
        b.cache.upload(b.cache_before.data(), b.cache_before.size());
        write_kv_cache(b.keys(), b.values(), b.cache_view(), b.metadata(requests).slot_mapping,
                       kKScale, kVScale, nullptr, cache);
        device_sync();
        std::vector<unsigned char> written(b.cache.bytes());
        b.cache.download(written.data(), written.size());
        CHECK(fused.cache == written);
      }
}

TEST_CASE("gpu kv scales: captured graphs follow new device scales without recapture") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  Stream stream;
  // 1. calc_kv_scales inside the graph, before a decode step with the fused write: each replay
  //    computes the scales of that step's new keys and values, and the step uses them.
  {
    Batch b(4, 1, 1500, KvDType::kFp8E4M3, rng());
    random_new_rows(b, rng, 1.0);
    Scalars scales;
    const ScaledLayer layer(KvDType::kFp8E4M3, scales, cache);
    calc_kv_scales(b.keys(), b.values(), scales.k(), scales.v(), kKScaleDivisor, kVScaleDivisor,
                   nullptr, cache);  // loads the kernel before capture
    const AttentionMetadata md = b.metadata(4);
    GraphRunner::Options o;
    o.capture_sizes = {4};
    o.max_num_seqs = 4;
    GraphRunner runner(
        o,
        [&](CUstream s, int) {
          calc_kv_scales(b.keys(), b.values(), scales.k(), scales.v(), kKScaleDivisor,
                         kVScaleDivisor, s, cache);
          layer.forward(b, md, s);
        },
        [] { return uint64_t{1}; });
    runner.capture_all(stream);
    std::vector<float> seen;
    for (double magnitude : {0.5, 3.0, 40.0}) {
      INFO("new keys and values ~ N(0, " << magnitude << ")");
      random_new_rows(b, rng, magnitude);
      b.cache.upload(b.cache_before.data(), b.cache_before.size());
      b.out.fill_bytes(0xff);
      CHECK(runner.run(stream, 4) == 4);
      const auto got = scales.get();
      CHECK(bits(got.first) == bits(expected_scale(new_rows_amax(b, 0), kKScaleDivisor)));
      CHECK(bits(got.second) == bits(expected_scale(new_rows_amax(b, 1), kVScaleDivisor)));
      // The same step eagerly, with the scales the graph computed as host floats.
      check_replay(b, 4, got.first, got.second, cache);
      seen.push_back(got.first);
    }
    CHECK(seen[0] != seen[1]);
    CHECK(seen[1] != seen[2]);
    CHECK(runner.stats().captures == 1);
    CHECK(runner.stats().replays == 3);
  }
  // 2. A prefill step (cache write kernel, then prefill) captured once; the engine writes new
  //    scales into the scalars between replays.
  {
    Batch b(2, 20, 200, KvDType::kFp8E5M2, rng());
    random_new_rows(b, rng, 2.0);
    Scalars scales;
    scales.set(1.0f, 1.0f);
    const ScaledLayer layer(KvDType::kFp8E5M2, scales, cache);
    const AttentionMetadata md = b.metadata(0);
    const int tokens = static_cast<int>(b.T);
    GraphRunner::Options o;
    o.capture_sizes = {tokens};
    GraphRunner runner(
        o, [&](CUstream s, int) { layer.forward(b, md, s); }, [] { return uint64_t{2}; });
    runner.capture_all(stream);
    Result previous;
    const std::vector<std::pair<float, float>> steps = {
        {0.02f, 0.03f}, {0.5f, 0.25f}, {0.004f, 0.8f}};
    for (const auto& kv : steps) {
      INFO("k_scale " << kv.first << ", v_scale " << kv.second);
      scales.set(kv.first, kv.second);
      b.cache.upload(b.cache_before.data(), b.cache_before.size());
      b.out.fill_bytes(0xff);
      CHECK(runner.run(stream, tokens) == tokens);
      const Result graph = check_replay(b, 0, kv.first, kv.second, cache);
      CHECK(graph.cache != previous.cache);
      previous = graph;
    }
    CHECK(runner.stats().captures == 1);
    CHECK(runner.stats().replays == 3);
  }
}
