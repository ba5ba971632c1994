// SPDX-License-Identifier: Apache-2.0
// merge_attn_states, the device-mapped copy_blocks and the cache writes' float32, block size 8
// and legacy x on the GPU: merge against a float64 host reference (outputs and LSEs, the
// infinite-LSE cases exactly), the cache writes bit for bit against a host model, copy_blocks
// byte for byte, eager and captured in a graph replayed with new mapping contents.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "testing/host_dtypes.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ScalarType scalar_of(DType t) {
  return t == DType::kFloat32    ? ScalarType::kFloat32
         : t == DType::kBFloat16 ? ScalarType::kBFloat16
                                 : ScalarType::kFloat16;
}

// Host images of [n] elements of a dtype, as raw bytes, with their values.
struct HostArray {
  DType dtype;
  std::vector<unsigned char> bytes;
  int elem() const { return dtype_bytes(dtype); }
  size_t size() const { return bytes.size() / elem(); }
  double get(size_t i) const {
    if (dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return from_storage(dtype, h);
  }
  void set(size_t i, double v) {
    if (dtype == DType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(&bytes[i * 4], &f, 4);
    } else {
      const uint16_t h = to_storage(dtype, v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
};
HostArray host_array(DType t, size_t n) {
  return {t, std::vector<unsigned char>(n * dtype_bytes(t))};
}

DeviceBuffer upload(const void* data, size_t bytes) {
  DeviceBuffer d(bytes);
  d.upload(data, bytes);
  return d;
}

// One merge_attn_states call on T tokens, H heads, head size D; the LSE kinds of the rows cycle
// through finite pairs and the infinite cases. lse_transposed: the LSEs are [H, T] views of
// [T, H] buffers (strides [1, H]). in_place: output is prefix_output.
void run_merge(DType dtype, int64_t T, int64_t H, int64_t D, bool with_lse, bool lse_transposed,
               bool in_place, KernelCache& cache, std::mt19937_64& rng, Stream& stream) {
  INFO(to_string(dtype) << " T " << T << " H " << H << " D " << D << " lse " << with_lse
                        << " transposed " << lse_transposed << " in place " << in_place);
  std::normal_distribution<double> normal(0.0, 1.0);
  const size_t n = T * H * D;
  HostArray po = host_array(dtype, n), so = host_array(dtype, n);
  for (size_t i = 0; i < n; ++i) {
    po.set(i, normal(rng));
    so.set(i, normal(rng));
  }
  // LSE of (head h, token t) at h * T + t, or t * H + h when transposed.
  std::vector<float> pl(H * T), sl(H * T);
  const auto at = [&](int64_t h, int64_t t) { return lse_transposed ? t * H + h : h * T + t; };
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t) {
      double a = 3.0 * normal(rng), b = 3.0 * normal(rng);
      switch ((t + h) % 9) {
        case 0:
          a = -kInf;
          break;  // empty prefix (FlashAttention 3)
        case 1:
          b = -kInf;
          break;  // empty suffix
        case 2:
          a = kInf;
          break;  // empty prefix (FlashAttention 2)
        case 3:
          a = -kInf;
          b = -kInf;
          break;  // both empty
        case 4:
          a = kInf;
          b = -kInf;
          break;  // both empty, mixed
        case 5:
          a += 60;
          break;  // far apart
        default:
          break;
      }
      pl[at(h, t)] = static_cast<float>(a);
      sl[at(h, t)] = static_cast<float>(b);
    }
  DeviceBuffer d_po = upload(po.bytes.data(), po.bytes.size());
  DeviceBuffer d_so = upload(so.bytes.data(), so.bytes.size());
  DeviceBuffer d_pl = upload(pl.data(), pl.size() * 4), d_sl = upload(sl.data(), sl.size() * 4);
  DeviceBuffer d_out(po.bytes.size()), d_olse(H * T * 4);
  std::vector<unsigned char> poison(po.bytes.size(), 0xff);  // NaN in every dtype
  d_out.upload(poison.data(), poison.size());
  const std::vector<float> lse_poison(H * T, std::nanf(""));
  d_olse.upload(lse_poison.data(), H * T * 4);
  const ScalarType st = scalar_of(dtype);
  const TensorView vpo = TensorView::contiguous(d_po.data(), st, {T, H, D});
  const TensorView vso = TensorView::contiguous(d_so.data(), st, {T, H, D});
  const TensorView vout = in_place ? vpo : TensorView::contiguous(d_out.data(), st, {T, H, D});
  const auto lse_view = [&](DeviceBuffer& b) {
    return lse_transposed ? TensorView::strided(b.data(), ScalarType::kFloat32, {H, T}, {1, H})
                          : TensorView::contiguous(b.data(), ScalarType::kFloat32, {H, T});
  };
  merge_attn_states(vout, vpo, lse_view(d_pl), vso, lse_view(d_sl),
                    with_lse ? lse_view(d_olse) : TensorView{}, stream, cache);
  stream.synchronize();
  HostArray got = host_array(dtype, n);
  (in_place ? d_po : d_out).download(got.bytes.data(), got.bytes.size());
  std::vector<float> got_lse(H * T);
  d_olse.download(got_lse.data(), H * T * 4);

  double err2 = 0, ref2 = 0;
  size_t exact_bad = 0, lse_bad = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double a = pl[at(h, t)], b = sl[at(h, t)];
      if (std::isinf(a)) a = -kInf;
      if (std::isinf(b)) b = -kInf;
      const size_t row = (t * H + h) * D;
      if (std::isinf(a) && std::isinf(b)) {  // both empty: prefix_output as stored, -inf
        exact_bad += std::memcmp(&got.bytes[row * po.elem()], &po.bytes[row * po.elem()],
                                 D * po.elem()) != 0;
        if (with_lse) lse_bad += !(std::isinf(got_lse[at(h, t)]) && got_lse[at(h, t)] < 0);
        continue;
      }
      const double m = std::max(a, b);
      const double wa = std::exp(a - m), wb = std::exp(b - m), sum = wa + wb;
      const bool one_side = std::isinf(a) || std::isinf(b);
      for (int64_t d = 0; d < D; ++d) {
        const double want = (wa * po.get(row + d) + wb * so.get(row + d)) / sum;
        const double g = got.get(row + d);
        // One side empty: the other side's values, exactly.
        if (one_side) exact_bad += g != (std::isinf(a) ? so.get(row + d) : po.get(row + d));
        err2 += (g - want) * (g - want);
        ref2 += want * want;
      }
      if (with_lse) {
        const double want = std::log(sum) + m;
        lse_bad += !(std::fabs(got_lse[at(h, t)] - want) <= 1e-6 * std::max(1.0, std::fabs(want)));
      }
    }
  const double rel = std::sqrt(err2 / ref2);
  const double bar = dtype == DType::kFloat32 ? 1e-6 : dtype == DType::kFloat16 ? 1e-3 : 5e-3;
  INFO("relative L2 error " << rel);
  CHECK(rel < bar);
  CHECK(exact_bad == 0);
  CHECK(lse_bad == 0);
  if (!with_lse) CHECK(std::isnan(got_lse[0]));  // output_lse untouched
}

}  // namespace

TEST_CASE("gpu merge_attn_states: float64 reference, infinite LSEs, every output dtype") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  Stream stream;
  for (DType dt : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    run_merge(dt, 37, 8, 128, true, false, false, cache, rng, stream);
    run_merge(dt, 5, 3, 64, false, true, false, cache, rng, stream);
    run_merge(dt, 19, 4, dt == DType::kFloat32 ? 36 : 40, true, true, true, cache, rng, stream);
  }
  run_merge(DType::kBFloat16, 3000, 32, 128, true, false, false, cache, rng,
            stream);  // strided grid
}

TEST_CASE("gpu merge_attn_states: captured in a graph, replayed over new states") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  Stream stream;
  const int64_t T = 16, H = 4, D = 64;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> po(T * H * D), so(T * H * D), pl(H * T), sl(H * T);
  DeviceBuffer d_po(po.size() * 4), d_so(so.size() * 4), d_pl(H * T * 4), d_sl(H * T * 4),
      d_out(po.size() * 4), d_olse(H * T * 4);
  const auto fill = [&] {
    for (auto* v : {&po, &so, &pl, &sl})
      for (float& x : *v) x = normal(rng);
    d_po.upload(po.data(), po.size() * 4);
    d_so.upload(so.data(), so.size() * 4);
    d_pl.upload(pl.data(), pl.size() * 4);
    d_sl.upload(sl.data(), sl.size() * 4);
  };
  const auto view3 = [&](DeviceBuffer& b) {
    return TensorView::contiguous(b.data(), ScalarType::kFloat32, {T, H, D});
  };
  const auto view2 = [&](DeviceBuffer& b) {
    return TensorView::contiguous(b.data(), ScalarType::kFloat32, {H, T});
  };
  const auto call = [&] {
    merge_attn_states(view3(d_out), view3(d_po), view2(d_pl), view3(d_so), view2(d_sl),
                      view2(d_olse), stream, cache);
  };
  fill();
  call();  // eager: loads the kernel
  stream.synchronize();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  call();
  GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
  GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
  fill();  // new states after capture
  GA_CU_CHECK(d.cuGraphLaunch(exec, stream));
  stream.synchronize();
  std::vector<float> out(po.size()), olse(H * T);
  d_out.download(out.data(), out.size() * 4);
  d_olse.download(olse.data(), olse.size() * 4);
  double worst = 0, worst_lse = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const double a = pl[h * T + t], b = sl[h * T + t], m = std::max(a, b);
      const double wa = std::exp(a - m), wb = std::exp(b - m);
      for (int64_t e = 0; e < D; ++e) {
        const size_t i = (t * H + h) * D + e;
        worst = std::max(worst, std::fabs(out[i] - (wa * po[i] + wb * so[i]) / (wa + wb)));
      }
      worst_lse = std::max(worst_lse, std::fabs(olse[h * T + t] - (std::log(wa + wb) + m)));
    }
  CHECK(worst < 1e-5);
  CHECK(worst_lse < 1e-5);
  GA_CU_CHECK(d.cuGraphExecDestroy(exec));
  GA_CU_CHECK(d.cuGraphDestroy(graph));
}

namespace {

struct F32WriteCase {
  DType dtype;  // of key and value
  KvDType kv;
  KvLayout layout;
  int head_size, block_size, x;  // x: legacy key cache chunk (elements), else 0
};

// One cache write checked bit for bit against a host model, with -1 padded slots and a canary
// block no slot names.
void run_write(const F32WriteCase& c, KernelCache& cache, std::mt19937_64& rng) {
  INFO(to_string(c.dtype) << " kv " << to_string(c.kv) << " " << to_string(c.layout) << " head "
                          << c.head_size << " block " << c.block_size << " x " << c.x);
  const int64_t T = 61, KH = 3, D = c.head_size, B = c.block_size, NB = 24;
  const int in = dtype_bytes(c.dtype), elem = c.kv == KvDType::kAuto ? in : 1;
  const int64_t token_stride = KH * D + 16 / in;  // rows of a wider buffer
  std::normal_distribution<double> normal(0.0, 3.0);
  HostArray key = host_array(c.dtype, T * token_stride),
            value = host_array(c.dtype, T * token_stride);
  for (size_t i = 0; i < key.size(); ++i) {
    key.set(i, normal(rng));
    value.set(i, normal(rng));
  }
  std::vector<int64_t> all((NB - 1) * B);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> slots(T);
  for (int64_t t = 0; t < T; ++t) slots[t] = t % 5 == 3 ? -1 : all[t];
  const size_t half = NB * B * KH * D * elem;
  std::vector<unsigned char> init(2 * half);
  for (auto& b : init) b = static_cast<unsigned char>(rng());
  DeviceBuffer d_key = upload(key.bytes.data(), key.bytes.size());
  DeviceBuffer d_value = upload(value.bytes.data(), value.bytes.size());
  DeviceBuffer d_slots = upload(slots.data(), T * 8), d_cache = upload(init.data(), init.size());
  const ScalarType st = scalar_of(c.dtype);
  const ScalarType cst = c.kv == KvDType::kAuto      ? st
                         : c.kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3
                                                     : ScalarType::kFloat8E5M2;
  const TensorView kv = TensorView::strided(d_key.data(), st, {T, KH, D}, {token_stride, D, 1});
  const TensorView vv = TensorView::strided(d_value.data(), st, {T, KH, D}, {token_stride, D, 1});
  const TensorView sv = TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {T});
  const float k_scale = c.kv == KvDType::kAuto ? 1.0f : 0.37f;
  const float v_scale = c.kv == KvDType::kAuto ? 1.0f : 1.9f;
  char* base = static_cast<char*>(d_cache.data());
  if (c.layout == KvLayout::kLegacy) {
    write_to_paged_cache(kv, vv, TensorView::contiguous(base, cst, {NB, KH, D / c.x, B, c.x}),
                         TensorView::contiguous(base + half, cst, {NB, KH, D, B}), sv, k_scale,
                         v_scale, nullptr, cache);
  } else if (c.layout == KvLayout::kNHD) {
    write_kv_cache(kv, vv, TensorView::contiguous(base, cst, {2, NB, B, KH, D}), sv, k_scale,
                   v_scale, nullptr, cache);
  } else {
    write_kv_cache(kv, vv,
                   TensorView::strided(base, cst, {2, NB, B, KH, D},
                                       {NB * KH * B * D, KH * B * D, D, B * D, 1}),
                   sv, k_scale, v_scale, nullptr, cache);
  }
  std::vector<unsigned char> got(init.size());
  d_cache.download(got.data(), got.size());
  std::vector<unsigned char> want = init;
  const auto offset = [&](int which, int64_t blk, int64_t off, int64_t h, int64_t d) {
    const int64_t b0 = which * NB * B * KH * D + blk * B * KH * D;
    if (c.layout == KvLayout::kLegacy)
      return which == 0 ? b0 + ((h * (D / c.x) + d / c.x) * B + off) * c.x + d % c.x
                        : b0 + (h * D + d) * B + off;
    return c.layout == KvLayout::kNHD ? b0 + (off * KH + h) * D + d : b0 + (h * B + off) * D + d;
  };
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    for (int which = 0; which < 2; ++which) {
      const HostArray& src = which == 0 ? key : value;
      for (int64_t h = 0; h < KH; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = t * token_stride + h * D + d;
          const int64_t o = offset(which, slots[t] / B, slots[t] % B, h, d);
          if (c.kv == KvDType::kAuto) {
            std::memcpy(&want[o * in], &src.bytes[i * in], in);
          } else {
            const double q = static_cast<float>(src.get(i)) / (which == 0 ? k_scale : v_scale);
            want[o] = c.kv == KvDType::kFp8E4M3 ? double_to_e4m3(q) : double_to_e5m2(q);
          }
        }
    }
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  INFO("first mismatching byte " << first);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("gpu cache write: fp32, block size 8 and the legacy x, bit for bit") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const DType f32 = DType::kFloat32, bf = DType::kBFloat16, f16 = DType::kFloat16;
  const KvDType a = KvDType::kAuto, e4 = KvDType::kFp8E4M3, e5 = KvDType::kFp8E5M2;
  const KvLayout nhd = KvLayout::kNHD, hnd = KvLayout::kHND, leg = KvLayout::kLegacy;
  const std::vector<F32WriteCase> cases = {
      // float32 keys, values and caches (vLLM's reshape_and_cache[_flash] with float32)
      {f32, a, nhd, 128, 16, 0},
      {f32, a, hnd, 64, 8, 0},
      {f32, a, nhd, 40, 8, 0},
      {f32, e4, nhd, 128, 8, 0},
      {f32, e5, hnd, 96, 16, 0},
      {f32, a, leg, 128, 16, 4},
      {f32, a, leg, 64, 8, 8},
      {f32, a, leg, 128, 8, 16},
      {f32, e4, leg, 128, 8, 8},
      {f32, e5, leg, 64, 16, 16},
      // block size 8 and the other x for 16-bit keys
      {bf, a, nhd, 128, 8, 0},
      {f16, e4, hnd, 128, 8, 0},
      {bf, a, leg, 128, 8, 8},
      {f16, a, leg, 64, 16, 16},
      {bf, a, leg, 128, 8, 16},
      {bf, e4, leg, 128, 16, 8},
      {f16, e5, leg, 64, 8, 8},
      {bf, e5, leg, 128, 8, 16},
  };
  for (const auto& c : cases) run_write(c, cache, rng);
}

TEST_CASE("gpu copy_blocks: device mapping, every cache in one launch, eager and captured") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  Stream stream;
  // Three layers: a bf16 NHD flash cache (two halves), an fp32 HND one, and vLLM's legacy fp8
  // caches (key [NB, KH, D / 8, B, 8], value [NB, KH, D, B]) whose blocks are not 16-byte
  // multiples apart (the byte path).
  const int64_t NB = 12;
  struct Layer {
    DeviceBuffer buf;
    std::vector<unsigned char> image;
    std::vector<TensorView> views;
    int64_t block_bytes;
  };
  std::vector<Layer> layers(3);
  const auto make = [&](Layer& l, size_t bytes) {
    l.image.resize(bytes);
    l.buf = DeviceBuffer(bytes);
  };
  make(layers[0], 2 * NB * 16 * 2 * 64 * 2);
  const TensorView flash =
      TensorView::contiguous(layers[0].buf.data(), ScalarType::kBFloat16, {2, NB, 16, 2, 64});
  layers[0].views = {kv_cache_half(flash, 0), kv_cache_half(flash, 1)};
  layers[0].block_bytes = 16 * 2 * 64 * 2;
  make(layers[1], 2 * NB * 8 * 1 * 32 * 4);
  const TensorView hnd =
      TensorView::strided(layers[1].buf.data(), ScalarType::kFloat32, {2, NB, 8, 1, 32},
                          {NB * 8 * 32, 8 * 32, 32, 8 * 32, 1});
  layers[1].views = {kv_cache_half(hnd, 0), kv_cache_half(hnd, 1)};
  layers[1].block_bytes = 8 * 32 * 4;
  // Legacy fp8 caches of block 3 (vLLM's block sizes are larger; any size is a compact block):
  // 3 * 1 * 24 = 72-byte blocks.
  make(layers[2], 2 * NB * 72);
  char* lb = static_cast<char*>(layers[2].buf.data());
  layers[2].views = {TensorView::contiguous(lb, ScalarType::kFloat8E4M3, {NB, 1, 3, 3, 8}),
                     TensorView::contiguous(lb + NB * 72, ScalarType::kFloat8E4M3, {NB, 1, 24, 3})};
  layers[2].block_bytes = 72;
  std::vector<TensorView> caches;
  for (auto& l : layers) caches.insert(caches.end(), l.views.begin(), l.views.end());
  const auto fill = [&] {
    for (auto& l : layers) {
      for (auto& b : l.image) b = static_cast<unsigned char>(rng());
      l.buf.upload(l.image.data(), l.image.size());
    }
  };
  // The expected image: each half of each layer has NB blocks of block_bytes.
  const auto check = [&](const std::vector<int64_t>& pairs, const char* what) {
    for (size_t li = 0; li < layers.size(); ++li) {
      const Layer& l = layers[li];
      std::vector<unsigned char> want = l.image, got(l.image.size());
      l.buf.download(got.data(), got.size());
      for (int which = 0; which < 2; ++which)
        for (size_t p = 0; p + 1 < pairs.size(); p += 2) {
          const int64_t s = pairs[p], t = pairs[p + 1];
          if (s < 0 || t < 0 || s >= NB || t >= NB || s == t) continue;
          const int64_t h = which * NB * l.block_bytes;
          std::memcpy(&want[h + t * l.block_bytes], &l.image[h + s * l.block_bytes], l.block_bytes);
        }
      INFO(what << ": layer " << li);
      CHECK(got == want);
    }
  };
  // Mapping [4, 2]: 3 -> 9, 5 -> 10, 6 -> 6 (nothing), -1 -> 2 (a padding row: nothing).
  std::vector<int64_t> pairs = {3, 9, 5, 10, 6, 6, -1, 2};
  DeviceBuffer d_map = upload(pairs.data(), pairs.size() * 8);
  const TensorView map = TensorView::contiguous(d_map.data(), ScalarType::kInt64, {4, 2});
  fill();
  copy_blocks_device(caches, map, stream, cache);
  stream.synchronize();
  check(pairs, "eager");
  // A column-strided view of a [2, 4] (src row, dst row) buffer, eager.
  std::vector<int64_t> rows = {0, 1, 7, 11, 4, 8, 2, 3};  // src 0,1,7,11 -> dst 4,8,2,3
  DeviceBuffer d_rows = upload(rows.data(), rows.size() * 8);
  fill();
  copy_blocks_device(caches, TensorView::strided(d_rows.data(), ScalarType::kInt64, {4, 2}, {1, 4}),
                     stream, cache);
  stream.synchronize();
  check({0, 4, 1, 8, 7, 2, 11, 3}, "strided mapping");
  // Captured with one mapping, replayed after new mapping contents and new cache contents.
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  copy_blocks_device(caches, map, stream, cache);
  GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
  GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    pairs = replay == 0 ? std::vector<int64_t>{11, 0, 2, 1, -1, -1, 7, 12}
                        : std::vector<int64_t>{4, 5, 9, 10, 0, 11, 1, 3};
    d_map.upload(pairs.data(), pairs.size() * 8);
    fill();
    GA_CU_CHECK(d.cuGraphLaunch(exec, stream));
    stream.synchronize();
    check(pairs, replay == 0 ? "graph replay 1" : "graph replay 2");
  }
  GA_CU_CHECK(d.cuGraphExecDestroy(exec));
  GA_CU_CHECK(d.cuGraphDestroy(graph));
  // More caches than one launch holds (300 one-block-pair caches): every one is copied.
  std::vector<DeviceBuffer> many;
  std::vector<TensorView> many_views;
  std::vector<std::vector<unsigned char>> many_init;
  for (int i = 0; i < 300; ++i) {
    many_init.emplace_back(2 * 64);
    for (auto& b : many_init.back()) b = static_cast<unsigned char>(rng());
    many.push_back(upload(many_init.back().data(), 2 * 64));
    many_views.push_back(TensorView::contiguous(many.back().data(), ScalarType::kInt32, {2, 16}));
  }
  std::vector<int64_t> one = {0, 1};
  DeviceBuffer d_one = upload(one.data(), 16);
  copy_blocks_device(many_views, TensorView::contiguous(d_one.data(), ScalarType::kInt64, {1, 2}),
                     stream, cache);
  stream.synchronize();
  size_t bad = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<unsigned char> got(2 * 64);
    many[i].download(got.data(), got.size());
    bad += std::memcmp(got.data() + 64, many_init[i].data(), 64) != 0 ||
           std::memcmp(got.data(), many_init[i].data(), 64) != 0;
  }
  CHECK(bad == 0);
}
