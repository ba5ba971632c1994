// SPDX-License-Identifier: Apache-2.0
// The prefill kernel on the GPU against the float64 reference: batches mixing pure prefills,
// chunked prefills over cached context, one-token rows and padded (seq_len 0) requests, launched
// on a request sub-range (the decodes before it must stay untouched); fp16/bf16, head sizes
// (multiples of 16 and not), block sizes, GQA groups, window, soft cap, NHD/HND, fp8 KV.
// GRAPHATTN_TEST_REDUCED=1 runs a few cases (for compute-sanitizer).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/prefill.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

struct PrefillCase {
  DType dtype = DType::kBFloat16;
  KvDType kv = KvDType::kAuto;
  KvLayout layout = KvLayout::kNHD;
  int head_size = 128, block_size = 16, num_kv_heads = 2, group = 4;
  bool window = false, soft_cap = false;
  int max_len = 200;   // bounds the random sequence lengths (keeps the float64 reference cheap)
  double q_std = 1.5;  // larger scores make the soft cap bite
  float cap = 0;       // the soft cap's value when soft_cap; 0: drawn from 2..10
  bool alibi = false;  // per-head ALiBi slopes (random)
  bool sinks = false;  // per-head sink logits (random, some dominating)
  // Encoder / cross attention: every query sees all keys of its request; the batch then also
  // holds requests with more queries than keys (decoder queries over a short encoder output).
  bool non_causal = false;
  bool lse = false;  // the kernel also writes the softmax LSE (spec axis softmax_lse)
};

std::string describe(const PrefillCase& c) {
  AttentionSpec s;
  s.kind = KernelKind::kPrefill;
  s.head_size = c.head_size;
  s.block_size = c.block_size;
  s.dtype = c.dtype;
  s.kv_dtype = c.kv;
  s.group = c.group;
  s.sliding_window = c.window;
  s.soft_cap = c.soft_cap;
  s.alibi = c.alibi;
  s.sinks = c.sinks;
  s.non_causal = c.non_causal;
  s.softmax_lse = c.lse;
  s.layout = c.layout;
  s.arch = current_device_arch();
  return s.to_string();
}

AttentionSpec spec_of(const PrefillCase& c) { return AttentionSpec::parse(describe(c)); }

// Nearest fp8 code, ties to the even code, saturating: the same rounding as host_dtypes.hpp's
// double_to_fp8, by binary search over the finite positive codes (which increase with the code).
class Fp8Quantizer {
 public:
  explicit Fp8Quantizer(KvDType kv) {
    for (int c = 0; c < 128; ++c) {
      const double v = kv == KvDType::kFp8E4M3 ? e4m3_to_double(static_cast<uint8_t>(c))
                                               : e5m2_to_double(static_cast<uint8_t>(c));
      if (!std::isfinite(v)) break;
      values_.push_back(v);
    }
  }
  uint8_t operator()(double x) const {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    const double a = std::fabs(x);
    const size_t hi = std::upper_bound(values_.begin(), values_.end(), a) - values_.begin();
    if (hi == values_.size()) return static_cast<uint8_t>(sign | (hi - 1));
    const size_t lo = hi - 1;  // values_[0] == 0 <= a
    const double dl = a - values_[lo], dh = values_[hi] - a;
    const size_t c = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<uint8_t>(sign | c);
  }

 private:
  std::vector<double> values_;
};

// One request of a batch: its query length and seq_len (context + query).
struct Req {
  int q_len, seq_len;
};

// A random batch: `decodes` one-token requests first (not launched: they must stay untouched),
// then prefills of every kind.
std::vector<Req> random_batch(std::mt19937_64& rng, int max_len, int decodes,
                              bool longer_queries = false) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Req> reqs;
  for (int i = 0; i < decodes; ++i) reqs.push_back({1, uni(1, max_len)});
  const int n = uni(3, 6);
  for (int i = 0; i < n; ++i) {
    switch (uni(0, 5)) {
      case 0:
      case 1: {  // pure prefill
        const int q = uni(1, max_len);
        reqs.push_back({q, q});
        break;
      }
      case 2:
      case 3: {  // chunked prefill / prefix cache hit: new tokens after cached context
        const int q = uni(1, max_len / 2);
        reqs.push_back({q, q + uni(1, max_len)});
        break;
      }
      case 4:  // a one-token row inside the prefill range
        reqs.push_back({1, uni(1, max_len)});
        break;
      default:  // a padded request: seq_len 0 (sometimes with query rows, which become zeros)
        reqs.push_back({uni(0, 2), 0});
        break;
    }
  }
  // Always at least one long-ish pure prefill that spans several row tiles.
  reqs.push_back({max_len, max_len});
  if (longer_queries) {  // non-causal only: queries past the keys' count, keys across tiles
    reqs.push_back({max_len, uni(1, max_len / 2)});
    reqs.push_back({uni(1, 8), max_len});
  }
  std::shuffle(reqs.begin() + decodes, reqs.end(), rng);
  return reqs;
}

// Runs one case: returns the relative L2 error (also CHECKed against the dtype's bound); with
// `got`, also the output as written.
double run_case(const PrefillCase& c, KernelCache& cache, std::mt19937_64& rng,
                std::vector<uint16_t>* got = nullptr) {
  INFO("case " << describe(c));
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int first_req = uni(0, 2);
  const std::vector<Req> reqs = random_batch(rng, c.max_len, first_req, c.non_causal);
  const int num_reqs = static_cast<int>(reqs.size());
  const int H = c.num_kv_heads * c.group, KH = c.num_kv_heads, D = c.head_size, B = c.block_size;
  const bool fp8 = c.kv != KvDType::kAuto;

  // Batch metadata; physical blocks shuffled, unused table entries point far out of range.
  std::vector<int> qsl(num_reqs + 1, 0), seq_lens(num_reqs);
  int max_blocks = 1, total_blocks = 0, max_q = 0;
  for (int r = 0; r < num_reqs; ++r) {
    qsl[r + 1] = qsl[r] + reqs[r].q_len;
    seq_lens[r] = reqs[r].seq_len;
    const int nb = (reqs[r].seq_len + B - 1) / B;
    max_blocks = std::max(max_blocks, nb + 1);
    total_blocks += nb;
    if (r >= first_req) max_q = std::max(max_q, reqs[r].q_len);
  }
  const int T = qsl[num_reqs];
  const int NB = total_blocks + 3;
  std::vector<int> phys(NB);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  std::vector<int> table(static_cast<size_t>(num_reqs) * max_blocks, 0x3fffffff);
  int next = 0;
  for (int r = 0; r < num_reqs; ++r)
    for (int b = 0; b < (reqs[r].seq_len + B - 1) / B; ++b)
      table[r * max_blocks + b] = phys[next++];

  // Query (token stride padded) and the KV cache in its physical layout.
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t q_tstride = static_cast<int64_t>(H) * D + 16;
  const int64_t o_tstride = static_cast<int64_t>(H) * D + 8;
  std::vector<uint16_t> q_host(static_cast<size_t>(T) * q_tstride, 0);
  RefProblem ref = paged_problem(H, KH, D, B, qsl, seq_lens, table, max_blocks);
  ref.q.resize(static_cast<size_t>(T) * H * D);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < H * D; ++i) {
      const uint16_t v = to_storage(c.dtype, c.q_std * normal(rng));
      q_host[t * q_tstride + i] = v;
      ref.q[static_cast<size_t>(t) * H * D + i] = from_storage(c.dtype, v);
    }
  const float k_scale = fp8 ? 0.05f : 1.0f, v_scale = fp8 ? 0.03f : 1.0f;
  const size_t per_kv = static_cast<size_t>(NB) * B * KH * D;
  const int elem = fp8 ? 1 : 2;
  std::vector<unsigned char> cache_host(2 * per_kv * elem);
  const Fp8Quantizer quantize(fp8 ? c.kv : KvDType::kFp8E4M3);
  ref.k_cache.resize(per_kv);
  ref.v_cache.resize(per_kv);
  for (int which = 0; which < 2; ++which) {
    std::vector<double>& dst = which == 0 ? ref.k_cache : ref.v_cache;
    const double sc = which == 0 ? k_scale : v_scale;
    for (int blk = 0; blk < NB; ++blk)
      for (int off = 0; off < B; ++off)
        for (int h = 0; h < KH; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t logical = ((static_cast<size_t>(blk) * B + off) * KH + h) * D + d;
            const size_t physical =
                which * per_kv + (c.layout == KvLayout::kNHD
                                      ? logical
                                      : ((static_cast<size_t>(blk) * KH + h) * B + off) * D + d);
            const double x = normal(rng);
            if (!fp8) {
              const uint16_t v = to_storage(c.dtype, x);
              std::memcpy(&cache_host[physical * 2], &v, 2);
              dst[logical] = from_storage(c.dtype, v);
            } else {
              const uint8_t b = quantize(x / sc);
              cache_host[physical] = b;
              dst[logical] =
                  (c.kv == KvDType::kFp8E4M3 ? e4m3_to_double(b) : e5m2_to_double(b)) * sc;
            }
          }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  ref.scale = static_cast<float>(scale);
  ref.window = c.window ? uni(1, c.max_len / 2) : 0;
  ref.soft_cap = !c.soft_cap ? 0.0f : c.cap > 0 ? c.cap : static_cast<float>(uni(2, 10));
  INFO("window " << ref.window << " soft cap " << ref.soft_cap << " first_req " << first_req);
  ref.causal = !c.non_causal;
  ref.alibi_slopes = random_alibi_slopes(rng, H, c.alibi);
  ref.sinks = random_sinks(rng, H, c.sinks);
  const DeviceBuffer d_slopes = upload_floats(ref.alibi_slopes), d_sinks = upload_floats(ref.sinks);

  DeviceBuffer d_q(std::max<size_t>(q_host.size() * 2, 16)),
      d_out(std::max<size_t>(static_cast<size_t>(T) * o_tstride * 2, 16)),
      d_cache(cache_host.size()), d_qsl(qsl.size() * 4), d_seq(seq_lens.size() * 4),
      d_table(table.size() * 4);
  d_q.upload(q_host.data(), q_host.size() * 2);
  d_cache.upload(cache_host.data(), cache_host.size());
  d_qsl.upload(qsl.data(), qsl.size() * 4);
  d_seq.upload(seq_lens.data(), seq_lens.size() * 4);
  d_table.upload(table.data(), table.size() * 4);
  d_out.fill_bytes(0xff);
  DeviceBuffer d_lse(std::max<size_t>(static_cast<size_t>(H) * T * 4, 16));
  d_lse.fill_bytes(0xff);  // NaN: the launched rows must be written, the others not
  const TensorView lse_view =
      c.lse ? TensorView::contiguous(d_lse.data(), ScalarType::kFloat32, {H, T}) : TensorView();

  const ScalarType st = c.dtype == DType::kBFloat16 ? ScalarType::kBFloat16 : ScalarType::kFloat16;
  const ScalarType kst = !fp8                        ? st
                         : c.kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3
                                                     : ScalarType::kFloat8E5M2;
  const TensorView kv_view = c.layout == KvLayout::kNHD
                                 ? TensorView::contiguous(d_cache.data(), kst, {2, NB, B, KH, D})
                                 : TensorView::strided(d_cache.data(), kst, {2, NB, B, KH, D},
                                                       {static_cast<int64_t>(per_kv),
                                                        int64_t{KH} * B * D, D, int64_t{B} * D, 1});
  const int extra_q = uni(0, 1) ? uni(1, 40) : 0;  // a loose max_query_len is allowed
  prefill_attention(
      TensorView::strided(d_q.data(), st, {T, H, D}, {q_tstride, D, 1}), kv_view,
      TensorView::strided(d_out.data(), st, {T, H, D}, {o_tstride, D, 1}),
      TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {num_reqs + 1}),
      TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {num_reqs}),
      TensorView::contiguous(d_table.data(), ScalarType::kInt32, {num_reqs, max_blocks}), first_req,
      num_reqs, max_q + extra_q, static_cast<float>(scale), ref.window,
      static_cast<float>(ref.soft_cap), k_scale, v_scale, nullptr, cache,
      static_cast<const float*>(d_slopes.data()), static_cast<const float*>(d_sinks.data()),
      nullptr, nullptr, !c.non_causal, lse_view);
  GA_CU_CHECK(detail::driver().cuCtxSynchronize());

  std::vector<uint16_t> out(static_cast<size_t>(T) * o_tstride);
  if (T > 0) d_out.download(out.data(), out.size() * 2);
  if (got != nullptr) *got = out;
  std::vector<double> want_lse;
  const std::vector<double> want = reference_attention(ref, c.lse ? &want_lse : nullptr);
  if (c.lse && T > 0) {
    std::vector<float> got(static_cast<size_t>(H) * T);
    d_lse.download(got.data(), got.size() * 4);
    std::vector<int> cols;
    std::vector<double> want_cols;
    for (int t = qsl[first_req]; t < T; ++t) cols.push_back(t);
    for (int h = 0; h < H; ++h)
      for (int t : cols) want_cols.push_back(want_lse[static_cast<size_t>(h) * T + t]);
    const LseComparison lc = compare_lse(got, T, cols, want_cols, H);
    size_t written_early = 0;  // rows of requests before first_req: not this launch's
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < qsl[first_req]; ++t)
        written_early += !std::isnan(got[static_cast<size_t>(h) * T + t]);
    INFO("softmax LSE: worst absolute error " << lc.worst);
    CHECK(lc.nan == 0);
    CHECK(lc.bad == 0);
    CHECK(written_early == 0);
  }
  // Compare the launched rows; everything else (earlier requests, stride gaps) stays poisoned.
  const OutputRows rows =
      output_rows(c.dtype, out, o_tstride, int64_t{H} * D, qsl[first_req], want);
  CHECK(rows.nan == 0);
  CHECK(rows.clobbered == 0);
  // Padded requests with query rows must come out exactly zero.
  for (int r = first_req; r < num_reqs; ++r)
    if (seq_lens[r] == 0)
      for (int t = qsl[r]; t < qsl[r + 1]; ++t)
        for (int i = 0; i < H * D; ++i) CHECK_MESSAGE(out[t * o_tstride + i] == 0, "row " << t);
  const double err = rows.got.empty() ? 0.0 : relative_l2(rows.got, rows.want);
  const double bound = c.dtype == DType::kFloat16 ? 1e-3 : 5e-3;
  CHECK_MESSAGE(err <= bound, "relative L2 " << err << " > " << bound);
  return err;
}

std::vector<PrefillCase> all_cases() {
  const int heads[] = {32, 40, 64, 72, 80, 96, 104, 128, 192, 256};
  const int blocks[] = {16, 64, 256, 48};
  const int groups[] = {1, 4, 5, 8};
  const KvDType kvs[] = {KvDType::kAuto, KvDType::kFp8E4M3, KvDType::kFp8E5M2};
  std::vector<PrefillCase> cases;
  for (int i = 0; i < 40; ++i) {
    PrefillCase c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = heads[(i / 2) % 10];
    c.block_size = blocks[(i / 2) % 4];
    c.group = groups[(i / 3) % 4];
    c.window = (i / 5) % 2 == 1;
    c.soft_cap = (i / 7) % 2 == 1;
    c.layout = (i / 11) % 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.kv = i < 20 ? (i % 5 == 4 ? kvs[1 + (i / 5) % 2] : KvDType::kAuto) : kvs[i % 3];
    c.num_kv_heads = c.group >= 5 ? 1 : 2;
    c.max_len = c.head_size >= 192 ? 120 : 200;
    cases.push_back(c);
  }
  // Every fp8 format with each dtype and layout, window and cap together.
  for (int i = 0; i < 8; ++i) {
    PrefillCase c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.kv = (i / 2) % 2 ? KvDType::kFp8E5M2 : KvDType::kFp8E4M3;
    c.layout = (i / 4) % 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.head_size = i % 3 == 0 ? 128 : 72;
    c.block_size = 16 * (1 + i);
    c.group = 1 + i;
    c.num_kv_heads = 1;
    c.window = i % 3 == 1;
    c.soft_cap = i % 2 == 0;
    cases.push_back(c);
  }
  // Large logits (scores of about +-1e3 and +-1e4 before the cap) in both prefill families
  // (head 128: wgmma on sm_90; head 72: mma.sync): the soft cap's one formula at both ends.
  for (int i = 0; i < 8; ++i) {
    PrefillCase c;
    c.q_std = i % 2 ? 10000.0 : 1000.0;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;  // fp16 holds |q| < 65504
    c.soft_cap = true;
    c.cap = (i / 2) % 2 ? 50.0f : 30.0f;
    c.head_size = i < 4 ? 128 : 72;
    c.window = i % 3 == 2;
    cases.push_back(c);
  }
  // ALiBi and sinks, apart and together, with window, cap and fp8, in both prefill families
  // (head 128 and 64: wgmma on sm_90; head 72 and fp8: mma.sync).
  for (int i = 0; i < 12; ++i) {
    PrefillCase c;
    c.alibi = i % 3 != 1;
    c.sinks = i % 3 != 0;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = i % 4 == 0 ? 72 : i % 4 == 1 ? 64 : 128;
    c.kv = i % 5 == 4 ? KvDType::kFp8E5M2 : KvDType::kAuto;
    c.window = i % 4 == 2;
    c.soft_cap = i % 6 == 5;
    c.group = i < 6 ? 4 : 6;
    c.num_kv_heads = 2;
    c.layout = i % 3 == 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.max_len = 260;
    cases.push_back(c);
  }
  // Long prefill with a large group (many row tiles per request), 16-way GQA.
  PrefillCase big;
  big.head_size = 128;
  big.group = 16;
  big.num_kv_heads = 1;
  big.max_len = 400;
  cases.push_back(big);
  return cases;
}

std::vector<PrefillCase> reduced_cases() {
  std::vector<PrefillCase> all = all_cases(), out;
  for (int i : {0, 7, 13, 26, 35, 41})  // fp16/bf16, head 40/80/104/192, windows, caps, fp8, HND
    out.push_back(all[i]);
  for (const auto& c : all)  // ALiBi and sinks together in both families
    if (c.alibi && c.sinks && (c.head_size == 72 || c.head_size == 128)) out.push_back(c);
  for (auto& c : out) c.max_len = std::min(c.max_len, 80);
  return out;
}

// Compiles every case's kernel in parallel, then runs the cases and reports the worst errors.
void run_cases(const std::vector<PrefillCase>& cases, KernelCache& cache, std::mt19937_64& rng) {
  std::vector<AttentionSpec> specs;
  for (const auto& c : cases) specs.push_back(spec_of(c));
  for (const auto& r : cache.precompile(specs))
    CHECK_MESSAGE(r.error.empty(), r.spec << ": " << r.error);
  double worst16 = 0, worst_bf = 0;
  for (const auto& c : cases) {
    const double e = run_case(c, cache, rng);
    double& w = c.dtype == DType::kFloat16 ? worst16 : worst_bf;
    w = std::max(w, e);
  }
  MESSAGE(cases.size() << " cases; worst relative L2: fp16 " << worst16 << ", bf16 " << worst_bf);
}

}  // namespace

TEST_CASE("gpu prefill: matches the float64 reference across the spec axes") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  run_cases(reduced() ? reduced_cases() : all_cases(), cache, rng);
}

TEST_CASE("gpu prefill: softmax LSE (_lse) in both prefill kernels") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  // Head 128 and 64 with a 16-bit cache run the wgmma kernel on sm_90; head 72 and fp8 the
  // mma.sync one (every arch).
  std::vector<PrefillCase> cases;
  for (int i = 0; i < 10; ++i) {
    PrefillCase c;
    c.lse = true;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = i % 3 == 0 ? 72 : i % 3 == 1 ? 128 : 64;
    c.kv = i == 7 ? KvDType::kFp8E4M3 : KvDType::kAuto;
    c.group = i < 4 ? 4 : i < 7 ? 1 : 8;
    c.num_kv_heads = c.group >= 8 ? 1 : 2;
    c.window = i == 2 || i == 5;
    c.soft_cap = i == 3 || i == 8;
    c.alibi = i == 4;
    c.sinks = i == 6 || i == 9;
    c.non_causal = i == 1 || i == 9;
    c.layout = i % 4 == 3 ? KvLayout::kHND : KvLayout::kNHD;
    c.max_len = 260;
    cases.push_back(c);
  }
  run_cases(cases, cache, rng);
}

TEST_CASE("gpu prefill: every head size compiles, loads and matches the reference") {
  GA_REQUIRE_GPU();
  if (reduced()) return;
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<PrefillCase> cases;
  for (int h = 32; h <= 256; h += 8) {
    PrefillCase c;
    c.head_size = h;
    c.dtype = (h / 8) % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.group = 2;
    c.num_kv_heads = 1;
    c.max_len = 70;
    cases.push_back(c);
  }
  std::vector<AttentionSpec> specs;
  for (const auto& c : cases) specs.push_back(spec_of(c));
  for (const auto& r : cache.precompile(specs))
    CHECK_MESSAGE(r.error.empty(), r.spec << ": " << r.error);
  for (const auto& c : cases) run_case(c, cache, rng);
}

TEST_CASE("gpu prefill: the Hopper wgmma kernel across its tile boundaries") {
  // On sm_90 these specs select templates/prefill_sm90.cu (128-row tiles, 128- or 64-key
  // tiles, a ring of K/V stages): long requests cross many row and key tiles and wrap the
  // stage ring; groups that do not divide 128 rows put a token's heads across two tiles.
  // Elsewhere the same cases exercise the mma.sync kernel.
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<PrefillCase> cases;
  const int heads[] = {64, 128, 192, 256};
  const int blocks[] = {16, 32, 128, 256, 48, 64};
  const int groups[] = {1, 3, 4, 8, 16, 6};
  const int n = reduced() ? 4 : 16;
  for (int i = 0; i < n; ++i) {
    PrefillCase c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = heads[i % 4];
    c.block_size = blocks[i % 6];
    c.group = groups[(i / 2) % 6];
    c.num_kv_heads = c.group >= 8 ? 1 : 2;
    c.window = i % 5 == 3;
    c.soft_cap = i % 7 == 5;
    c.alibi = i % 4 == 1;
    c.sinks = i % 3 == 2;
    c.layout = (i / 3) % 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.max_len = reduced() ? 150 : (c.head_size >= 192 ? 330 : 520);
    cases.push_back(c);
  }
  run_cases(cases, cache, rng);
}

TEST_CASE("gpu prefill: head 64's 192-row tiles at their boundaries, GQA groups 1 to 8") {
  // On sm_90, head size 64 takes three consumer warpgroups (192-row tiles, a ring of three
  // ping-pong barriers; with a soft cap, ALiBi or sinks no intra-warpgroup overlap). Each case's
  // longest request has 191, 192 or 193 rows (query tokens x group) or twice that, so the last
  // row tile is one row short, full, or one row over, and groups that do not divide 192 put a
  // token's heads across two tiles. Elsewhere the same cases exercise the mma.sync kernel.
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<PrefillCase> cases;
  const int n = reduced() ? 6 : 24;
  for (int i = 0; i < n; ++i) {
    PrefillCase c;
    c.head_size = 64;
    c.group = 1 + i % 8;
    c.num_kv_heads = c.group >= 5 ? 1 : 2;
    const int rows = 192 * (1 + (i / 8) % 2) + (i % 3 - 1);  // 191..193 or 383..385
    c.max_len = std::max(2, (rows + c.group - 1) / c.group);
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.block_size = i % 4 == 3 ? 48 : 16;
    c.layout = i % 5 == 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.window = i % 6 == 4;
    c.soft_cap = i % 7 == 5;
    c.alibi = i % 9 == 7;
    c.sinks = i % 10 == 8;
    c.non_causal = i % 11 == 10 && !c.window;  // (non-causal has no window)
    cases.push_back(c);
  }
  run_cases(cases, cache, rng);
}

TEST_CASE("gpu prefill: the Hopper kernel's TMA loads equal the cp.async gather bit for bit") {
  // On sm_90 the flash-layout wgmma kernel at head size 64 (params.h, ga_prefill_sm90_tma) loads
  // its K/V tiles of 128 keys by TMA, a box per page segment (pages of 16 and 32 keys: 8 and 4
  // per tile; 48: segments of 16; 64 and 192: segments of 64; 128 and 256: one box), and the tile
  // that the sequence end cuts by the per-row gather; GRAPHATTN_PREFILL_TMA=0 (here the override)
  // gathers every tile. Both must give the same bits. (Head sizes 128 and 256 take the gather only:
  // those cases check that it is not switched.)
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const int heads[] = {64, 256, 64, 128};
  const int blocks[] = {16, 32, 48, 64, 128, 192, 256};
  const int n = reduced() ? 3 : 14;
  int compared = 0;
  for (int i = 0; i < n; ++i) {
    PrefillCase c;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = heads[i % 4];
    c.block_size = blocks[i % 7];
    c.group = i % 3 == 0 ? 4 : i % 3 == 1 ? 1 : 6;
    c.num_kv_heads = 2;
    c.layout = (i / 2) % 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.window = i % 5 == 4;
    c.max_len = reduced() ? 150 : (c.head_size >= 192 ? 330 : 520);
    INFO("case " << describe(c));
    const AttentionSpec spec = spec_of(c);
    std::mt19937_64 rng_again = rng;
    std::vector<uint16_t> tma_out, gather_out;
    run_case(c, cache, rng, &tma_out);
    CHECK(detail::prefill_uses_tma(spec) ==
          (current_device_arch() == 90 && c.head_size == 64 && !detail::prefill_mma_sync_forced()));
    if (!detail::prefill_uses_tma(spec) || !detail::prefill_tma_enabled()) continue;
    detail::set_prefill_tma_override(0);
    run_case(c, cache, rng_again, &gather_out);
    detail::set_prefill_tma_override(-1);
    CHECK_MESSAGE(tma_out == gather_out, "TMA and cp.async outputs differ");
    ++compared;
  }
  MESSAGE(compared << " specs compared TMA against the cp.async gather");
}

TEST_CASE("gpu prefill: rejects mismatched arguments with a clear error") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  DeviceBuffer q(4 * 8 * 64 * 2), out(4 * 8 * 64 * 2), kv(2 * 4 * 16 * 2 * 64 * 2), meta(64);
  const auto qv = TensorView::contiguous(q.data(), ScalarType::kBFloat16, {4, 8, 64});
  const auto ov = TensorView::contiguous(out.data(), ScalarType::kBFloat16, {4, 8, 64});
  const auto kvv = TensorView::contiguous(kv.data(), ScalarType::kBFloat16, {2, 4, 16, 2, 64});
  const auto i32 = [&](std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(meta.data(), ScalarType::kInt32, shape);
  };
  // 8 query heads over 3 KV heads is not a GQA layout.
  const auto kv3 = TensorView::contiguous(kv.data(), ScalarType::kBFloat16, {2, 1, 16, 3, 64});
  CHECK_THROWS_AS(prefill_attention(qv, kv3, ov, i32({2}), i32({1}), i32({1, 4}), 0, 1, 4, 0.1f, 0,
                                    0, 1, 1, nullptr, cache),
                  Error);
  // query_start_loc too short for the requests launched.
  CHECK_THROWS_AS(prefill_attention(qv, kvv, ov, i32({2}), i32({2}), i32({2, 4}), 0, 2, 4, 0.1f, 0,
                                    0, 1, 1, nullptr, cache),
                  Error);
  // Output dtype differs from the query's.
  const auto of = TensorView::contiguous(out.data(), ScalarType::kFloat16, {4, 8, 64});
  CHECK_THROWS_AS(prefill_attention(qv, kvv, of, i32({2}), i32({1}), i32({1, 4}), 0, 1, 4, 0.1f, 0,
                                    0, 1, 1, nullptr, cache),
                  Error);
  // A kernel of another spec is refused by launch_prefill.
  detail::PrefillLaunch a;
  a.query = qv;
  a.kv_cache = kvv;
  a.output = ov;
  a.query_start_loc = i32({2});
  a.seq_lens = i32({1});
  a.block_table = i32({1, 4});
  a.num_reqs = 1;
  a.max_query_len = 4;
  a.scale = 0.125f;
  AttentionSpec other = detail::prefill_spec(a, current_device_arch());
  other.soft_cap = true;
  const detail::LoadedKernel& k = detail::load_kernel(other, cache);
  CHECK_THROWS_AS(detail::launch_prefill(k, a, nullptr), Error);
}

TEST_CASE("gpu prefill: encoder and cross attention (non-causal) in both prefill kernels") {
  // Every query sees all keys [0, seq_len): the last key tile's zero-filled rows must be masked
  // (score -inf, not 0) and full tiles take the unmasked path. Lengths cross the row tiles
  // (mma.sync: 64 or 128 rows; wgmma: 128) and key tiles (mma.sync 64/32, wgmma 128/64), with
  // queries shorter and longer than the keys. On sm_90 head sizes 64 and 128 with a 16-bit cache
  // run the wgmma kernel; head 72 and fp8 caches run mma.sync (elsewhere all run mma.sync).
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<PrefillCase> cases;
  const int heads[] = {64, 128, 72};
  const int groups[] = {1, 4, 6, 2};
  const int n = reduced() ? 6 : 18;
  for (int i = 0; i < n; ++i) {
    PrefillCase c;
    c.non_causal = true;
    c.dtype = i % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.head_size = heads[i % 3];
    c.group = groups[(i / 3) % 4];
    c.num_kv_heads = c.group >= 6 ? 1 : 2;
    c.block_size = i % 4 == 3 ? 48 : 16 * (1 + i % 3);
    c.alibi = i % 5 == 2;
    c.sinks = i % 4 == 1;
    c.soft_cap = i % 7 == 4;
    c.layout = i % 6 == 5 ? KvLayout::kHND : KvLayout::kNHD;
    c.kv = i == 8 ? KvDType::kFp8E4M3 : i == 13 ? KvDType::kFp8E5M2 : KvDType::kAuto;
    c.max_len = reduced() ? 150 : 300 + 37 * (i % 4);
    cases.push_back(c);
  }
  run_cases(cases, cache, rng);
}
