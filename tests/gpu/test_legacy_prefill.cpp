// SPDX-License-Identifier: Apache-2.0
// forward_prefix on the GPU (the prefill kernel over vLLM's legacy PagedAttention caches, spec
// layout legacy) against the float64 reference, the way vLLM drives it: each request's cached
// prefix (0..~700 tokens) is in the legacy caches already (host scatter), its new chunk
// (1..~300 tokens) is written by write_to_paged_cache, then forward_prefix attends. Unused cache
// bytes and the output are poisoned with NaN. fp16/bf16, 16-bit and fp8 (e4m3, e5m2) caches, GQA
// 1/4/8, head sizes 64/80/128/256 and 72/120 (padded V^T rows), block sizes 16..128 (blocks
// shorter and longer than a key tile), window, ALiBi, soft cap, sinks, non-causal. On sm_90 the
// 16-bit cases of head size 64/128/256 run on the wgmma kernel (templates/prefill_sm90.cu); a
// second list covers that kernel: longer prefixes and chunks (many key and row tiles), block
// sizes 16..256, GQA 1/4/8. Key caches with vLLM's other x (8 for fp8, 16 for 16-bit).
// GRAPHATTN_TEST_REDUCED=1 runs a few cases (for compute-sanitizer).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/driver.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/legacy_layout.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

struct LegacyCase {
  DType dtype = DType::kBFloat16;
  KvDType kv = KvDType::kAuto;
  int head_size = 128, block_size = 16, num_kv_heads = 2, group = 4;
  bool window = false, alibi = false, soft_cap = false, sinks = false, non_causal = false;
  int max_prefix = 700, max_chunk = 300;
  int x = 0;  // the key cache's x in elements (0: 16 bytes of them, split_paged_kv_cache's)
};

std::string describe(const LegacyCase& c) {
  return std::string(to_string(c.dtype)) + " kv " + to_string(c.kv) + " h" +
         std::to_string(c.head_size) + " b" + std::to_string(c.block_size) + " kvh" +
         std::to_string(c.num_kv_heads) + " g" + std::to_string(c.group) +
         (c.window ? " window" : "") + (c.alibi ? " alibi" : "") + (c.soft_cap ? " cap" : "") +
         (c.sinks ? " sinks" : "") + (c.non_causal ? " non-causal" : "") +
         (c.x ? " x" + std::to_string(c.x) : "");
}

void run_case(const LegacyCase& c, KernelCache& cache, std::mt19937_64& rng) {
  INFO("case " << describe(c));
  // The kernel forward_prefix takes on this device (the spec it builds, as the host selects).
  const AttentionSpec spec = AttentionSpec::parse(
      "prefill_h" + std::to_string(c.head_size) + "_b" + std::to_string(c.block_size) + "_" +
      to_string(c.dtype) + "_kv" + to_string(c.kv) + "_g" + std::to_string(c.group) + "_swa" +
      (c.window ? "1" : "0") + "_cap" + (c.soft_cap ? "1" : "0") + "_legacy_sm" +
      std::to_string(current_device_arch()) + (c.alibi ? "_alibi" : "") + (c.sinks ? "_sink" : "") +
      (c.non_causal ? "_nc" : ""));
  const bool wgmma = detail::select_prefill_kernel(spec) == detail::PrefillKernel::kWgmma;
  INFO(spec.to_string() << std::string(wgmma ? " (wgmma kernel)" : " (mma.sync kernel)"));
  CHECK(wgmma == (!detail::prefill_mma_sync_forced() && spec.arch == 90 && c.kv == KvDType::kAuto &&
                  c.head_size % 64 == 0));
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int H = c.num_kv_heads * c.group, KH = c.num_kv_heads, D = c.head_size, B = c.block_size;
  const bool fp8 = c.kv != KvDType::kAuto;
  const int elem = fp8 ? 1 : 2;
  const LegacyLayout layout{B, KH, D, c.x != 0 ? c.x : 16 / elem};

  // Requests: a prefix of 0..max_prefix cached tokens (some exactly at a block or tile edge) and
  // a chunk of new ones; sometimes one request with no new token at all.
  const int num_reqs = uni(2, 4);
  std::vector<int> prefix(num_reqs), chunk(num_reqs);
  for (int r = 0; r < num_reqs; ++r) {
    prefix[r] = uni(0, 3) == 0 ? B * uni(0, c.max_prefix / B) : uni(0, c.max_prefix);
    chunk[r] = uni(0, 2) == 0 ? uni(1, 16) : uni(1, c.max_chunk);
  }
  if (uni(0, 3) == 0) chunk[uni(0, num_reqs - 1)] = 0;
  std::vector<int> qsl(num_reqs + 1, 0), seq_lens(num_reqs);
  int max_blocks = 1, total_blocks = 0, max_q = 0;
  for (int r = 0; r < num_reqs; ++r) {
    qsl[r + 1] = qsl[r] + chunk[r];
    seq_lens[r] = prefix[r] + chunk[r];
    const int nb = (seq_lens[r] + B - 1) / B;
    max_blocks = std::max(max_blocks, nb + 1);
    total_blocks += nb;
    max_q = std::max(max_q, chunk[r]);
  }
  const int T = qsl[num_reqs];
  INFO("tokens " << T << " max_query_len " << max_q);
  const int NB = total_blocks + 2;
  std::vector<int> phys(NB);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  std::vector<int> table(static_cast<size_t>(num_reqs) * max_blocks, 0x3fffffff);
  int next = 0;
  for (int r = 0; r < num_reqs; ++r)
    for (int b = 0; b < (seq_lens[r] + B - 1) / B; ++b) table[r * max_blocks + b] = phys[next++];

  // The legacy cache: one [2, NB, B * KH * D] tensor, all 0xff (NaN in every element type).
  const size_t per_kv = static_cast<size_t>(NB) * B * KH * D;
  std::vector<unsigned char> cache_host(2 * per_kv * elem, 0xff);
  const auto offset = [&](int which, int blk, int off, int h, int d) -> size_t {
    return which == 0 ? layout.key(blk, off, h, d) : per_kv + layout.value(blk, off, h, d);
  };
  const float k_scale = fp8 ? 0.05f : 1.0f, v_scale = fp8 ? 0.03f : 1.0f;
  const auto fp8_code = [&](double v) {
    return c.kv == KvDType::kFp8E4M3 ? double_to_e4m3(v) : double_to_e5m2(v);
  };
  const auto fp8_value = [&](uint8_t b) {
    return c.kv == KvDType::kFp8E4M3 ? e4m3_to_double(b) : e5m2_to_double(b);
  };
  // Calls f(r, pos, which (0 key, 1 value), h, d, cache element) for every element of the
  // positions [0, end[r]) of each request.
  const auto for_each_element = [&](const std::vector<int>& end, const auto& f) {
    for (int r = 0; r < num_reqs; ++r)
      for (int pos = 0; pos < end[r]; ++pos) {
        const int blk = table[r * max_blocks + pos / B], off = pos % B;
        for (int which = 0; which < 2; ++which)
          for (int h = 0; h < KH; ++h)
            for (int d = 0; d < D; ++d) f(r, pos, which, h, d, offset(which, blk, off, h, d));
      }
  };
  std::normal_distribution<double> normal(0.0, 1.0);
  // Prefix tokens: scattered on the host.
  for_each_element(prefix, [&](int, int, int which, int, int, size_t o) {
    const double v = normal(rng);
    if (fp8) {
      cache_host[o] = fp8_code(v / (which == 0 ? k_scale : v_scale));
    } else {
      const uint16_t st = to_storage(c.dtype, v);
      std::memcpy(&cache_host[o * 2], &st, 2);
    }
  });
  // New tokens: key and value rows (token stride padded), their slots.
  const int64_t kv_tstride = static_cast<int64_t>(KH) * D + 8;
  std::vector<uint16_t> key_host(std::max<size_t>(static_cast<size_t>(T) * kv_tstride, 1)),
      value_host(key_host.size());
  for (auto& v : key_host) v = to_storage(c.dtype, normal(rng));
  for (auto& v : value_host) v = to_storage(c.dtype, normal(rng));
  std::vector<int64_t> slots(std::max(T, 1));
  for (int r = 0; r < num_reqs; ++r)
    for (int i = 0; i < chunk[r]; ++i) {
      const int pos = prefix[r] + i;
      slots[qsl[r] + i] = int64_t{table[r * max_blocks + pos / B]} * B + pos % B;
    }
  // Queries (token stride padded).
  const int64_t q_tstride = static_cast<int64_t>(H) * D + 16;
  const int64_t o_tstride = static_cast<int64_t>(H) * D + 8;
  std::vector<uint16_t> q_host(std::max<size_t>(static_cast<size_t>(T) * q_tstride, 1), 0);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < H * D; ++i)
      q_host[t * q_tstride + i] = to_storage(c.dtype, 1.5 * normal(rng));

  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  RefProblem ref = paged_problem(H, KH, D, B, qsl, seq_lens, table, max_blocks);
  ref.scale = static_cast<float>(scale);
  ref.window = c.window ? uni(1, 400) : 0;
  ref.soft_cap = c.soft_cap ? uni(2, 10) : 0;
  ref.causal = !c.non_causal;
  ref.alibi_slopes = random_alibi_slopes(rng, H, c.alibi);
  ref.sinks = random_sinks(rng, H, c.sinks);
  INFO("window " << ref.window << " soft cap " << ref.soft_cap);

  DeviceBuffer d_cache(cache_host.size()), d_q(q_host.size() * 2),
      d_out(std::max<size_t>(static_cast<size_t>(T) * o_tstride * 2, 16)),
      d_key(key_host.size() * 2), d_value(value_host.size() * 2), d_slots(slots.size() * 8),
      d_qsl(qsl.size() * 4), d_seq(seq_lens.size() * 4), d_table(table.size() * 4);
  d_cache.upload(cache_host.data(), cache_host.size());
  d_q.upload(q_host.data(), q_host.size() * 2);
  d_key.upload(key_host.data(), key_host.size() * 2);
  d_value.upload(value_host.data(), value_host.size() * 2);
  d_slots.upload(slots.data(), slots.size() * 8);
  d_qsl.upload(qsl.data(), qsl.size() * 4);
  d_seq.upload(seq_lens.data(), seq_lens.size() * 4);
  d_table.upload(table.data(), table.size() * 4);
  d_out.fill_bytes(0xff);
  const DeviceBuffer d_slopes = upload_floats(ref.alibi_slopes), d_sinks = upload_floats(ref.sinks);

  const ScalarType st = c.dtype == DType::kBFloat16 ? ScalarType::kBFloat16 : ScalarType::kFloat16;
  const ScalarType kst = !fp8                        ? st
                         : c.kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3
                                                     : ScalarType::kFloat8E5M2;
  PagedKvCache caches = split_paged_kv_cache(
      TensorView::contiguous(d_cache.data(), kst, {2, NB, int64_t{B} * KH * D}), KH, D);
  if (c.x != 0)  // the same key bytes seen with vLLM's other x (as its tests build them)
    caches.key_cache =
        TensorView::contiguous(caches.key_cache.data, kst, {NB, KH, D / c.x, B, c.x});
  const TensorView key = TensorView::strided(d_key.data(), st, {T, KH, D}, {kv_tstride, D, 1});
  const TensorView value = TensorView::strided(d_value.data(), st, {T, KH, D}, {kv_tstride, D, 1});
  // vLLM's order: the new tokens into the caches, then the attention.
  write_to_paged_cache(key, value, caches.key_cache, caches.value_cache,
                       TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {T}), k_scale,
                       v_scale, nullptr, cache);
  PrefixOptions opt;
  opt.soft_cap = static_cast<float>(ref.soft_cap);
  opt.sinks = static_cast<const float*>(d_sinks.data());
  opt.causal = !c.non_causal;
  const char* kv_name = !fp8 ? "auto" : c.kv == KvDType::kFp8E4M3 ? "fp8" : "fp8_e5m2";
  forward_prefix(TensorView::strided(d_q.data(), st, {T, H, D}, {q_tstride, D, 1}), key, value,
                 kv_name, caches.key_cache, caches.value_cache,
                 TensorView::contiguous(d_table.data(), ScalarType::kInt32, {num_reqs, max_blocks}),
                 TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {num_reqs + 1}),
                 TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {num_reqs}), max_q,
                 static_cast<const float*>(d_slopes.data()), ref.window, k_scale, v_scale,
                 TensorView::strided(d_out.data(), st, {T, H, D}, {o_tstride, D, 1}), nullptr,
                 cache, opt);
  GA_CU_CHECK(detail::driver().cuCtxSynchronize());

  // The reference reads what the kernel reads: the caches after the write, de-scattered.
  std::vector<unsigned char> got_cache(cache_host.size());
  d_cache.download(got_cache.data(), got_cache.size());
  ref.k_cache.assign(per_kv, 0.0);
  ref.v_cache.assign(per_kv, 0.0);
  size_t new_rows_off = 0;  // 16-bit: new tokens must land bit-exact where the layout says
  for_each_element(seq_lens, [&](int r, int pos, int which, int h, int d, size_t o) {
    const size_t blk = table[r * max_blocks + pos / B];
    const size_t logical = ((blk * B + pos % B) * KH + h) * D + d;
    double v;
    if (fp8) {
      v = fp8_value(got_cache[o]) * (which == 0 ? k_scale : v_scale);
    } else {
      uint16_t st;
      std::memcpy(&st, &got_cache[o * 2], 2);
      v = from_storage(c.dtype, st);
      if (pos >= prefix[r]) {
        const int t = qsl[r] + pos - prefix[r];
        new_rows_off += st != (which == 0 ? key_host : value_host)[t * kv_tstride + h * D + d];
      }
    }
    (which == 0 ? ref.k_cache : ref.v_cache)[logical] = v;
  });
  CHECK(new_rows_off == 0);
  ref.q.resize(static_cast<size_t>(T) * H * D);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < H * D; ++i)
      ref.q[static_cast<size_t>(t) * H * D + i] = from_storage(c.dtype, q_host[t * q_tstride + i]);
  const std::vector<double> want = reference_attention(ref);

  std::vector<uint16_t> out(static_cast<size_t>(T) * o_tstride);
  if (T > 0) d_out.download(out.data(), out.size() * 2);
  const OutputRows rows = output_rows(c.dtype, out, o_tstride, int64_t{H} * D, 0, want);
  CHECK(rows.nan == 0);
  CHECK(rows.clobbered == 0);
  const double err = rows.got.empty() ? 0.0 : relative_l2(rows.got, rows.want);
  const double bound = tolerance(c.dtype);
  CHECK_MESSAGE(err <= bound, "relative L2 " << err << " > " << bound);
}

std::vector<LegacyCase> all_cases() {
  const int heads[] = {64, 80, 128, 256};
  // Blocks that divide the key tile, hold several tiles, or neither (48, 80: tiles start inside
  // blocks and blocks inside tiles).
  const int blocks[] = {16, 32, 48, 128, 64, 80};
  const int groups[] = {1, 4, 8};
  const KvDType kvs[] = {KvDType::kAuto, KvDType::kFp8E4M3, KvDType::kFp8E5M2};
  std::vector<LegacyCase> cases;
  for (int i = 0; i < 24; ++i) {
    LegacyCase c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.kv = kvs[(i / 2) % 3];
    c.head_size = heads[(i / 3) % 4];
    c.block_size = blocks[i % 6];
    c.group = groups[(i / 4) % 3];
    c.num_kv_heads = c.group == 8 ? 1 : 2;
    c.window = i % 4 == 1;
    c.alibi = i % 3 == 2;
    c.soft_cap = i % 7 == 3;
    c.sinks = i % 5 == 4;
    c.non_causal = i % 8 == 6 && !c.window;
    if (c.head_size == 256) {  // keeps the float64 reference cheap
      c.max_prefix = 400;
      c.max_chunk = 160;
    }
    cases.push_back(c);
  }
  // 16-bit head sizes that are not multiples of 16 (V^T padding rows), across block sizes.
  for (int i = 0; i < 4; ++i) {
    LegacyCase c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = i < 2 ? 120 : 72;
    const int odd_blocks[] = {256, 16, 48, 96};
    c.block_size = odd_blocks[i];
    c.group = 2;
    c.window = i == 1;
    c.alibi = i == 2;
    cases.push_back(c);
  }
  return cases;
}

// The sm_90 wgmma kernel's shapes (16-bit caches, head sizes multiples of 64): prefixes up to
// 1200 tokens (up to 10 key tiles) and chunks up to 400 (several row tiles of both consumer
// warpgroups), every kind of block size against the 128-key tile (16, 32: several blocks a tile;
// 48, 80: blocks and tiles straddle; 128, 256: a tile inside a block).
std::vector<LegacyCase> wgmma_cases() {
  const int heads[] = {128, 64, 256};
  const int blocks[] = {16, 32, 48, 128, 256, 80, 16, 32};
  const int groups[] = {4, 1, 8};
  std::vector<LegacyCase> cases;
  for (int i = 0; i < 16; ++i) {
    LegacyCase c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = heads[i % 3];
    c.block_size = blocks[i % 8];
    c.group = groups[(i / 2) % 3];
    c.num_kv_heads = c.group == 8 ? 1 : 2;
    c.window = i % 4 == 1;
    c.alibi = i % 5 == 2;
    c.soft_cap = i % 7 == 3;
    c.sinks = i % 6 == 4;
    c.non_causal = i % 8 == 6;
    c.max_prefix = c.head_size == 256 ? 600 : 1200;
    c.max_chunk = c.head_size == 256 ? 200 : 400;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

TEST_CASE("gpu legacy prefill: the sm_90 wgmma kernel's shapes match the reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<LegacyCase> cases = wgmma_cases();
  if (reduced()) cases.resize(3);
  for (const LegacyCase& c : cases) run_case(c, cache, rng);
}

TEST_CASE("gpu legacy prefill: forward_prefix over write_to_paged_cache matches the reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<LegacyCase> cases = all_cases();
  if (reduced()) cases.resize(4);
  for (const LegacyCase& c : cases) run_case(c, cache, rng);
}

// vLLM reads the key cache's x from the tensor (its prefix-prefill tests build every cache with
// x = 8, fp8 included): write_to_paged_cache and forward_prefix with x = 8 for fp8 (kernel
// "_x8") and 16-bit caches (16 bytes: no "_x"), and x = 16 for 16-bit caches ("_x16").
TEST_CASE("gpu legacy prefill: key caches with x = 8 and 16 through the write and forward_prefix") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<LegacyCase> cases;
  for (int i = 0; i < 7; ++i) {
    LegacyCase c;
    c.kv = i < 3 ? (i == 2 ? KvDType::kFp8E5M2 : KvDType::kFp8E4M3) : KvDType::kAuto;
    c.dtype = i == 5 ? DType::kFloat16 : DType::kBFloat16;
    c.x = i < 4 ? 8 : 16;
    c.head_size = i == 1 ? 64 : i == 2 ? 80 : i == 5 ? 256 : 128;
    c.block_size = i % 2 ? 32 : 16;
    c.group = i % 3 == 0 ? 4 : i % 3 == 1 ? 1 : 8;
    c.window = i == 1;
    c.alibi = i == 2;
    c.soft_cap = i == 5;
    c.non_causal = i == 6;
    if (c.head_size == 256) {  // keeps the float64 reference cheap
      c.max_prefix = 400;
      c.max_chunk = 160;
    }
    cases.push_back(c);
  }
  for (const LegacyCase& c : cases) run_case(c, cache, rng);
}
