// SPDX-License-Identifier: Apache-2.0
// Decode with e4m3 queries (spec "_qe4m3") on the GPU against the float64 reference computed from
// the dequantized inputs: e4m3 / e5m2 caches, bf16 / fp16 outputs, GQA 1..8, window, soft cap,
// sinks, ALiBi, NHD / HND, per-tensor descales (floats) and FA3's per-(request, KV head) device
// descales, split counts 1, 3, the policy's and the most; then forward() through
// AttentionBackend(q_dtype fp8_e4m3) captured in a CUDA graph and replayed with new device
// descales, and forward()'s refusal of prefills.
//
// Tolerance. The reference gets exactly the values the kernel multiplies (the fp8 codes times
// their descales), so fp8's own rounding is no error here; what remains is the kernel's
// arithmetic: the scores (fp8 products are exact, the tensor cores' fp8 accumulation keeps
// about 13 mantissa bits on sm_89, a relative 2^-13 of sum |q_i k_i|, about 2^-12 of the
// logits here; sm_90 multiplies the exactly widened fp16 values with fp32 accumulation), P rounded
// to fp16 (2^-11) and the output rounded to its type (bf16 2^-9, fp16 2^-11). Summed as worst
// cases: bf16 2^-9 + 2^-11 + 2^-12 = 2.7e-3, fp16 2^-11 + 2^-11 + 2^-12 = 1.2e-3; the relative L2
// error (an RMS, below those) must stay under 4e-3 (bf16) and 2e-3 (fp16). The measured errors are
// printed (MESSAGE) per dtype: maximum and median.
//
// The Hopper wgmma prefill (sm_90, head size 128, templates/prefill_sm90.cu) runs P V on fp8
// tensor cores with P rounded to e4m3 (round to nearest even, 3 mantissa bits, after scaling
// P by 2^8 so that e4m3's subnormals start 2^-17 under the row's reference maximum, which lags
// the row maximum by less than 0.8 so that P < 2^8.8 never saturates): each weight carries a
// relative error of at most 2^-4 (half an ulp), uniform over [-2^-4, 2^-4] times 1 / (1 + f)
// for mantissa fraction f, RMS about 2^-4 * 0.72 / sqrt(3) = 2.6e-2. The sum l takes the
// unrounded fp32 weights, or (head 128 flash layouts, PW_ROWSUM: l summed on the tensor cores)
// the rounded ones that P V multiplies. With values of zero mean independent of the weights, the
// output's relative L2 error is that RMS (the errors of different keys add as squares, as the
// values' contributions do), and at most 2^-4 where one key dominates; so 5e-2 (relative L2) for
// those launches, q8_prefill_tolerance(). Every other prefill keeps P in 16 bits and
// q8_tolerance().
// Their softmax LSE, log(l) + the reference maximum: with l the sum of the rounded weights, each
// normal one off by at most 2^-4 relative, and e4m3's subnormals (weights under 2^-6 at their
// tile's reference, which lies at or under the final one) off by at most 2^-10 absolute each,
// against a largest weight of at least 2^8 at the final reference, l is off by at most
// 2^-4 + n 2^-18 relative for n keys; for the longest rows here (4224 keys) log(1 + 0.0625 +
// 0.0161) = 0.076, so 8e-2 absolute (q8_prefill_lse_tolerance); 16-bit P keeps compare_lse's
// 2e-2.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/prefill.hpp"
#include "templates/params.h"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

double q8_tolerance(DType t) { return t == DType::kBFloat16 ? 4e-3 : 2e-3; }
// A prefill of this spec: fp8 P (the wgmma kernel) or 16-bit P (mma.sync); see the top.
double q8_prefill_tolerance(const AttentionSpec& spec) {
  return detail::select_prefill_kernel(spec) == detail::PrefillKernel::kWgmma
             ? 5e-2
             : q8_tolerance(spec.dtype);
}
// The same launches' softmax LSE, absolute (compare_lse); see the top.
double q8_prefill_lse_tolerance(const AttentionSpec& spec) {
  return detail::select_prefill_kernel(spec) == detail::PrefillKernel::kWgmma ? 8e-2 : 2e-2;
}

struct Q8Case {
  DType dtype = DType::kBFloat16;
  KvDType kv = KvDType::kFp8E4M3;
  KvLayout layout = KvLayout::kNHD;
  int head_size = 128, block_size = 16, num_kv_heads = 2, group = 4;
  int window = 0;
  float soft_cap = 0;
  bool sinks = false, alibi = false;
  bool per_head = false;  // device descales [num_reqs, num_kv_heads]; else per-tensor floats
  bool causal = true;     // false: every query token of a request sees all its keys
  bool lse = false;       // prefill kernels: also write the softmax LSE (spec "_lse")
  // Scores that jump: queries and the keys from position 128 on are +-8 (e4m3 KV), the first
  // 128 keys of magnitude <= 1/64, so a row's first key tile sets a reference maximum that later
  // tiles pass by hundreds (log2 domain): probabilities at the old reference overflow.
  bool jump = false;
  // Negative scores: queries in (0, 1] and the keys of positions < 256 in [-1, -1/8] (e4m3 KV),
  // so that every score of a row's first two key tiles is negative (prefill_sm90.cu's
  // pw_row_imax<true>: the row maxima of such tiles by their smallest float bits); later keys
  // are drawn as usual, and their positive scores move the negative references.
  bool negative = false;
  std::vector<int> seq_lens;
  std::vector<int> q_lens;  // query tokens of each request (the last of its sequence); empty: 1
  int q_len(int r) const { return q_lens.empty() ? 1 : q_lens[r]; }
};

std::string describe(const Q8Case& c) {
  std::string s = std::string(to_string(c.dtype)) + " kv " + to_string(c.kv) + " " +
                  to_string(c.layout) + " head " + std::to_string(c.head_size) + " group " +
                  std::to_string(c.group) + " window " + std::to_string(c.window) + " cap " +
                  std::to_string(c.soft_cap) + (c.sinks ? " sinks" : "") +
                  (c.alibi ? " alibi" : "") + (c.causal ? "" : " non-causal") +
                  (c.per_head ? " per-(request, head)" : " per-tensor") +
                  (c.jump ? " jumping scores" : "") + (c.negative ? " negative scores" : "");
  for (int l : c.seq_lens) s += " " + std::to_string(l);
  return s;
}

// Finite fp8 codes of magnitude <= 8 (every exponent, subnormals and both zeros included).
std::vector<uint8_t> finite_codes(KvDType kv) {
  std::vector<uint8_t> v;
  for (int c = 0; c < 256; ++c) {
    const double x = kv == KvDType::kFp8E5M2 ? e5m2_to_double(static_cast<uint8_t>(c))
                                             : e4m3_to_double(static_cast<uint8_t>(c));
    if (std::isfinite(x) && std::fabs(x) <= 8) v.push_back(static_cast<uint8_t>(c));
  }
  return v;
}
double fp8_value(KvDType kv, uint8_t c) {
  return kv == KvDType::kFp8E5M2 ? e5m2_to_double(c) : e4m3_to_double(c);
}

// The batch: request r owns its blocks; keys and values dequantized with request r's descales.
struct Q8Batch {
  int n = 0;
  int64_t T = 0;               // query tokens
  std::vector<int> starts;     // [n + 1] query_start_loc
  std::vector<int> token_req;  // [T] each token's request
  int64_t H = 0, D = 0, KH = 0, B = 0, NB = 0, max_blocks = 1;
  std::vector<int> block_table;
  std::vector<uint8_t> q_codes, k_codes, v_codes;  // q [n, H, D]; k, v [NB, B, KH, D] (logical)
  std::vector<double> qd, kd, vd;                  // descales [n, KH]
  std::vector<double> slopes, sinks;
  DeviceBuffer d_cache, d_q, d_out, d_seq, d_bt, d_qd, d_kd, d_vd, d_slopes, d_sinks;
  TensorView kv_view, q_view, out_view, seq_view, bt_view;
  float q_scale = 1, k_scale = 1, v_scale = 1;  // per-tensor descales (per_head false)
};

void upload_descales(const Q8Case& c, Q8Batch& b) {
  auto up = [](DeviceBuffer& d, const std::vector<double>& v) {
    std::vector<float> f(v.begin(), v.end());
    d.upload(f.data(), f.size() * 4);
  };
  if (!c.per_head) return;
  up(b.d_qd, b.qd);
  up(b.d_kd, b.kd);
  up(b.d_vd, b.vd);
}

// New descales: per (request, KV head) in [0.25, 2), or one per tensor.
void draw_descales(const Q8Case& c, std::mt19937_64& rng, Q8Batch& b) {
  std::uniform_real_distribution<double> u(0.25, 2.0);
  const size_t m = static_cast<size_t>(b.n) * b.KH;
  if (c.per_head) {
    b.qd.resize(m);
    b.kd.resize(m);
    b.vd.resize(m);
    for (size_t i = 0; i < m; ++i) {
      b.qd[i] = static_cast<float>(u(rng));
      b.kd[i] = static_cast<float>(u(rng));
      b.vd[i] = static_cast<float>(u(rng));
    }
  } else {
    b.q_scale = static_cast<float>(u(rng));
    b.k_scale = static_cast<float>(u(rng));
    b.v_scale = static_cast<float>(u(rng));
    b.qd.assign(m, b.q_scale);
    b.kd.assign(m, b.k_scale);
    b.vd.assign(m, b.v_scale);
  }
}

void build(const Q8Case& c, std::mt19937_64& rng, Q8Batch& b) {
  b.n = static_cast<int>(c.seq_lens.size());
  b.KH = c.num_kv_heads;
  b.H = b.KH * c.group;
  b.D = c.head_size;
  b.B = c.block_size;
  std::vector<int> nblk(b.n);
  int64_t used = 0;
  for (int r = 0; r < b.n; ++r) {
    nblk[r] = static_cast<int>((c.seq_lens[r] + b.B - 1) / b.B);
    used += nblk[r];
    b.max_blocks = std::max<int64_t>(b.max_blocks, nblk[r]);
  }
  b.NB = used + 1;
  std::vector<int> phys(b.NB);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  b.block_table.assign(b.n * b.max_blocks, 0x3fffffff);
  int64_t next = 0;
  for (int r = 0; r < b.n; ++r)
    for (int i = 0; i < nblk[r]; ++i) b.block_table[r * b.max_blocks + i] = phys[next++];
  const std::vector<uint8_t> kv_codes = finite_codes(c.kv), q_codes = finite_codes(KvDType::kAuto);
  std::vector<uint8_t> small_codes, eight_codes{0x50, 0xd0};  // e4m3 +-8
  for (uint8_t x : kv_codes)
    if (std::fabs(fp8_value(c.kv, x)) <= 1.0 / 64) small_codes.push_back(x);
  std::vector<uint8_t> neg_codes, pos_codes;
  for (uint8_t x : kv_codes) {
    const double v = fp8_value(c.kv, x);
    if (v <= -1.0 / 8 && v >= -1.0) neg_codes.push_back(x);
  }
  for (uint8_t x : q_codes) {
    const double v = fp8_value(KvDType::kAuto, x);
    if (v > 0 && v <= 1.0) pos_codes.push_back(x);
  }
  REQUIRE((!c.jump || c.kv == KvDType::kFp8E4M3));
  REQUIRE((!c.negative || (c.kv == KvDType::kFp8E4M3 && !c.jump)));
  // 0x7f / 0xff are NaN in both fp8 formats: every slot nothing may read.
  const size_t cache_elems = b.NB * b.B * b.KH * b.D;
  b.k_codes.assign(cache_elems, 0x7f);
  b.v_codes.assign(cache_elems, 0x7f);
  std::vector<uint8_t> host(2 * cache_elems, 0x7f);
  for (int r = 0; r < b.n; ++r)
    for (int pos = 0; pos < c.seq_lens[r]; ++pos) {
      const int64_t blk = b.block_table[r * b.max_blocks + pos / b.B], off = pos % b.B;
      for (int64_t h = 0; h < b.KH; ++h)
        for (int64_t d = 0; d < b.D; ++d) {
          const size_t logical = ((blk * b.B + off) * b.KH + h) * b.D + d;
          const size_t stored =
              c.layout == KvLayout::kNHD ? logical : ((blk * b.KH + h) * b.B + off) * b.D + d;
          const std::vector<uint8_t>& kc = c.negative && pos < 256 ? neg_codes
                                           : !c.jump               ? kv_codes
                                           : pos < 128             ? small_codes
                                                                   : eight_codes;
          b.k_codes[logical] = host[stored] = kc[rng() % kc.size()];
          b.v_codes[logical] = host[cache_elems + stored] = kv_codes[rng() % kv_codes.size()];
        }
    }
  b.d_cache = DeviceBuffer(host.size());
  b.d_cache.upload(host.data(), host.size());
  const ScalarType kst = scalar_type_of(c.kv, c.dtype);
  const int64_t NB = b.NB, B = b.B, KH = b.KH, D = b.D;
  b.kv_view = c.layout == KvLayout::kNHD
                  ? TensorView::contiguous(b.d_cache.data(), kst, {2, NB, B, KH, D})
                  : TensorView::strided(b.d_cache.data(), kst, {2, NB, B, KH, D},
                                        {NB * KH * B * D, KH * B * D, D, B * D, 1});
  b.starts.assign(b.n + 1, 0);
  for (int r = 0; r < b.n; ++r) {
    b.starts[r + 1] = b.starts[r] + c.q_len(r);
    for (int t = 0; t < c.q_len(r); ++t) b.token_req.push_back(r);
  }
  b.T = b.starts[b.n];
  b.q_codes.resize(b.T * b.H * b.D);
  for (auto& x : b.q_codes)
    x = c.jump       ? eight_codes[rng() % 2]
        : c.negative ? pos_codes[rng() % pos_codes.size()]
                     : q_codes[rng() % q_codes.size()];
  b.d_q = DeviceBuffer(b.q_codes.size());
  b.d_q.upload(b.q_codes.data(), b.q_codes.size());
  b.q_view = TensorView::contiguous(b.d_q.data(), ScalarType::kFloat8E4M3, {b.T, b.H, b.D});
  b.d_out = DeviceBuffer(b.T * b.H * b.D * 2);
  b.out_view = TensorView::contiguous(b.d_out.data(), scalar_type_of(c.dtype), {b.T, b.H, b.D});
  b.d_seq = DeviceBuffer(b.n * 4);
  b.d_seq.upload(c.seq_lens.data(), b.n * 4);
  b.seq_view = TensorView::contiguous(b.d_seq.data(), ScalarType::kInt32, {b.n});
  b.d_bt = DeviceBuffer(b.block_table.size() * 4);
  b.d_bt.upload(b.block_table.data(), b.block_table.size() * 4);
  b.bt_view = TensorView::contiguous(b.d_bt.data(), ScalarType::kInt32, {b.n, b.max_blocks});
  const size_t m = static_cast<size_t>(b.n) * b.KH;
  b.d_qd = DeviceBuffer(m * 4);
  b.d_kd = DeviceBuffer(m * 4);
  b.d_vd = DeviceBuffer(m * 4);
  draw_descales(c, rng, b);
  upload_descales(c, b);
  b.slopes = random_alibi_slopes(rng, static_cast<int>(b.H), c.alibi);
  b.sinks = random_sinks(rng, static_cast<int>(b.H), c.sinks);
  b.d_slopes = upload_floats(b.slopes);
  b.d_sinks = upload_floats(b.sinks);
}

// The float64 reference of every request from the dequantized inputs: request r's keys are its
// codes times kd[r, head] (its blocks are its own), its query q_codes times qd[r, kv head].
std::vector<double> reference(const Q8Case& c, const Q8Batch& b, double scale,
                              std::vector<double>* lse = nullptr) {
  RefProblem p;
  p.num_heads = static_cast<int>(b.H);
  p.num_kv_heads = c.num_kv_heads;
  p.head_size = c.head_size;
  p.block_size = c.block_size;
  p.max_blocks_per_seq = static_cast<int>(b.max_blocks);
  p.query_start_loc = b.starts;
  p.seq_lens = c.seq_lens;
  p.block_table = b.block_table;
  p.k_cache.assign(b.k_codes.size(), 0.0);
  p.v_cache.assign(b.v_codes.size(), 0.0);
  for (int r = 0; r < b.n; ++r)
    for (int pos = 0; pos < c.seq_lens[r]; ++pos) {
      const int64_t blk = b.block_table[r * b.max_blocks + pos / b.B], off = pos % b.B;
      for (int64_t h = 0; h < b.KH; ++h)
        for (int64_t d = 0; d < b.D; ++d) {
          const size_t i = ((blk * b.B + off) * b.KH + h) * b.D + d;
          p.k_cache[i] = fp8_value(c.kv, b.k_codes[i]) * b.kd[r * b.KH + h];
          p.v_cache[i] = fp8_value(c.kv, b.v_codes[i]) * b.vd[r * b.KH + h];
        }
    }
  p.q.resize(b.q_codes.size());
  for (int64_t t = 0; t < b.T; ++t)
    for (int64_t h = 0; h < b.H; ++h)
      for (int64_t d = 0; d < b.D; ++d) {
        const size_t i = (t * b.H + h) * b.D + d;
        p.q[i] = e4m3_to_double(b.q_codes[i]) * b.qd[b.token_req[t] * b.KH + h / c.group];
      }
  p.scale = scale;
  p.window = c.window;
  p.causal = c.causal;
  p.soft_cap = c.soft_cap;
  p.alibi_slopes = b.slopes;
  p.sinks = b.sinks;
  return reference_attention(p, lse);
}

// The output against the reference: no NaN, zeros for empty requests; the relative L2 error.
double compare(const Q8Case& c, const Q8Batch& b, const std::vector<double>& want) {
  std::vector<uint16_t> out(b.T * b.H * b.D);
  b.d_out.download(out.data(), out.size() * 2);
  std::vector<double> got(out.size());
  size_t nan = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    nan += is_nan16(c.dtype, out[i]);
    got[i] = from_storage(c.dtype, out[i]);
  }
  CHECK(nan == 0);
  for (int64_t t = 0; t < b.T; ++t)
    if (c.seq_lens[b.token_req[t]] == 0)
      for (int64_t i = 0; i < b.H * b.D; ++i) CHECK(out[t * b.H * b.D + i] == 0);
  return relative_l2(got, want);
}

// The relative L2 error of query tokens [t0, t1) alone (a mixed batch's decode or prefill rows).
double token_error(const Q8Case& c, const Q8Batch& b, const std::vector<double>& want, int64_t t0,
                   int64_t t1) {
  const int64_t row = b.H * b.D;
  std::vector<uint16_t> out((t1 - t0) * row);
  b.d_out.download(out.data(), out.size() * 2, t0 * row * 2);
  std::vector<double> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) got[i] = from_storage(c.dtype, out[i]);
  return relative_l2(got, std::vector<double>(want.begin() + t0 * row, want.begin() + t1 * row));
}

// A direct launch's score options and descales (decode or prefill): the case's window, soft cap
// and per-tensor or per-(request, KV head) descales.
template <typename Launch>
void set_scores_and_scales(const Q8Case& c, const Q8Batch& b, float scale, Launch& a) {
  a.scale = scale;
  a.window = c.window;
  a.soft_cap = c.soft_cap;
  a.k_scale = b.k_scale;
  a.v_scale = b.v_scale;
  a.q8.q_scale = b.q_scale;
  if (c.per_head) {
    a.q8.q_descale = static_cast<const float*>(b.d_qd.data());
    a.q8.k_descale = static_cast<const float*>(b.d_kd.data());
    a.q8.v_descale = static_cast<const float*>(b.d_vd.data());
    a.q8.req_stride = b.KH;
    a.q8.head_stride = 1;
  }
}

// A direct launch of every request of b: grid (splits, stages), the case's descales.
detail::DecodeLaunch launch_of(const Q8Case& c, const Q8Batch& b, int splits, int stages,
                               float scale, const DeviceBuffer& ws, const DeviceBuffer& counters) {
  detail::DecodeLaunch a{{b.q_view, b.kv_view, b.out_view, b.seq_view, b.bt_view,
                          static_cast<const float*>(b.d_slopes.data()),
                          static_cast<const float*>(b.d_sinks.data())}};
  a.num_decodes = b.n;
  a.max_splits = splits;
  a.stages = stages;
  set_scores_and_scales(c, b, scale, a);
  a.workspace = ws.data();
  a.workspace_size = ws.bytes();
  a.counters = counters.data();
  return a;
}

struct Errors {
  std::vector<double> bf16, fp16;
  void add(DType t, double e) { (t == DType::kBFloat16 ? bf16 : fp16).push_back(e); }
  static std::string summary(std::vector<double> v) {
    if (v.empty()) return "none";
    std::sort(v.begin(), v.end());
    return std::to_string(v.size()) + " launches, median " + std::to_string(v[v.size() / 2]) +
           ", max " + std::to_string(v.back());
  }
};

std::vector<Q8Case> sweep(std::mt19937_64& rng) {
  std::vector<Q8Case> cases;
  std::uniform_int_distribution<int> len(2, 3000);
  int i = 0;
  for (int group : {1, 2, 4, 8})
    for (KvDType kv : {KvDType::kFp8E4M3, KvDType::kFp8E5M2})
      for (KvLayout lay : {KvLayout::kNHD, KvLayout::kHND}) {
        Q8Case c;
        c.group = group;
        c.kv = kv;
        c.layout = lay;
        c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.per_head = i % 3 != 0;
        c.window = i % 4 == 1 ? 300 : 0;
        c.soft_cap = i % 5 == 2 ? 10.0f : 0.0f;
        c.sinks = i % 3 == 2;
        c.alibi = i % 7 == 3;
        c.head_size = i % 4 == 3 ? 64 : i % 8 == 6 ? 72 : 128;
        c.block_size = lay == KvLayout::kHND ? 32 : 16;
        c.num_kv_heads = group == 8 ? 1 : 2;
        c.seq_lens = {1, 0, 17, 700, 4100, len(rng)};
        cases.push_back(c);
        ++i;
      }
  return cases;
}

}  // namespace

TEST_CASE("gpu fp8 query: decode matches the float64 reference of the dequantized inputs") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const int arch = current_device_arch();
  // (templates/decode.cu: fp8 mma.sync where the machine code has it, sm_89 and sm_120; sm_90 and
  // sm_100 widen the query once and multiply in fp16.)
  const bool fp8_mma = arch == 89 || arch >= 120;
  MESSAGE("sm_" << arch << ": QK^T on "
                << std::string(fp8_mma      ? "fp8 MMA"
                               : arch >= 89 ? "fp16 MMA (query widened once, exactly)"
                                            : "fp16 MMA (fallback)"));
  Errors errors;
  for (const Q8Case& c : sweep(rng)) {
    INFO(describe(c));
    Q8Batch b;
    build(c, rng, b);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
    const std::vector<double> want = reference(c, b, scale);
    const int max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
    const int most = (max_len + 63) / 64;
    DeviceBuffer ws(detail::decode_workspace_bytes(b.n, static_cast<int>(b.H), c.head_size, most));
    const size_t num_counters = detail::decode_counter_count(b.n, c.num_kv_heads, c.group);
    DeviceBuffer counters(num_counters * 4);
    const AttentionSpec spec =
        detail::decode_spec(launch_of(c, b, 1, 0, scale, ws, counters), arch);
    INFO(spec.to_string());
    CHECK(spec.q_fp8);
    const detail::LoadedKernel& k = detail::load_kernel(spec, cache);
    const detail::DecodeDevice dev = detail::prepare_decode_kernel(k);
    const detail::DecodeGrid policy = detail::decode_grid(b.n, c.num_kv_heads, c.group, max_len,
                                                          c.window, c.head_size, c.kv, dev);
    const int deepest = ga_decode_max_stages(c.head_size, 1);
    for (const auto& split : std::vector<std::pair<int, int>>{
             {policy.max_splits, policy.stages}, {1, 0}, {3, 0}, {most, deepest}}) {
      const int splits = split.first, stages = split.second;  // (clang: no bindings in INFO)
      INFO("max_splits " << splits << ", stages " << stages);
      b.d_out.fill_bytes(0xff);
      detail::launch_decode(k, launch_of(c, b, splits, stages, scale, ws, counters), nullptr);
      GA_CU_CHECK(detail::driver().cuCtxSynchronize());
      const double err = compare(c, b, want);
      INFO("relative L2 error " << err);
      CHECK(err <= q8_tolerance(c.dtype));
      errors.add(c.dtype, err);
      std::vector<unsigned> left(num_counters);
      counters.download(left.data(), left.size() * 4);
      CHECK(std::count(left.begin(), left.end(), 0u) == static_cast<long>(num_counters));
    }
  }
  MESSAGE("relative L2 errors, bf16 out: " << Errors::summary(errors.bf16)
                                           << "; fp16 out: " << Errors::summary(errors.fp16));
}

namespace {

AttentionLayerConfig layer_of(const Q8Case& c, const Q8Batch& b) {
  AttentionLayerConfig cfg;
  cfg.num_heads = static_cast<int>(b.H);
  cfg.num_kv_heads = c.num_kv_heads;
  cfg.head_size = c.head_size;
  cfg.block_size = c.block_size;
  cfg.dtype = c.dtype;
  cfg.kv_dtype = c.kv;
  cfg.layout = c.layout;
  cfg.max_model_len = static_cast<int>(b.max_blocks * b.B);
  cfg.max_num_seqs = b.n;
  // Every feature the reference applies (reference()), so forward() computes the same thing.
  cfg.window = c.window;
  cfg.soft_cap = c.soft_cap;
  cfg.alibi_slopes = static_cast<const float*>(b.d_slopes.data());
  cfg.sinks = static_cast<const float*>(b.d_sinks.data());
  cfg.q_dtype = KvDType::kFp8E4M3;
  if (c.per_head) {
    cfg.q_descale = static_cast<const float*>(b.d_qd.data());
    cfg.k_descale = static_cast<const float*>(b.d_kd.data());
    cfg.v_descale = static_cast<const float*>(b.d_vd.data());
    cfg.descale_req_stride = static_cast<int>(b.KH);
    cfg.descale_head_stride = 1;
  } else {
    cfg.q_scale = b.q_scale;
    cfg.k_scale = b.k_scale;
    cfg.v_scale = b.v_scale;
  }
  return cfg;
}

// The layer's decode and prefill kernels carry every feature the reference applies: a layer
// config that left one out would compare a different attention with the reference.
void check_features(const Q8Case& c, const AttentionBackend& attn) {
  for (int i : {1, 2}) {
    const AttentionSpec s = attn.required_specs()[i];
    INFO(s.to_string());
    CHECK(s.q_fp8);
    CHECK(s.sliding_window == (c.window > 0));
    CHECK(s.soft_cap == (c.soft_cap > 0));
    CHECK(s.alibi == c.alibi);
    CHECK(s.sinks == c.sinks);
  }
}

struct Metadata {
  DeviceBuffer qsl;
  AttentionMetadata md;
  // Requests of one query token first (the decodes), then the prefills.
  Metadata(const Q8Case& c, const Q8Batch& b) : qsl((b.n + 1) * 4) {
    qsl.upload(b.starts.data(), b.starts.size() * 4);
    md.query_start_loc = TensorView::contiguous(qsl.data(), ScalarType::kInt32, {b.n + 1});
    md.seq_lens = b.seq_view;
    md.block_table = b.bt_view;
    md.num_reqs = b.n;
    while (md.num_decodes < b.n && c.q_len(md.num_decodes) == 1) ++md.num_decodes;
    md.num_decode_tokens = md.num_decodes;
    md.num_actual_tokens = static_cast<int>(b.T);
    md.max_query_len = 1;
    for (int r = md.num_decodes; r < b.n; ++r)
      md.max_query_len = std::max(md.max_query_len, c.q_len(r));
    md.max_seq_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  }
};

}  // namespace

TEST_CASE("gpu fp8 query: forward() in a captured graph follows new device descales") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  Q8Case c;
  c.per_head = true;
  c.sinks = true;
  c.seq_lens = {4100, 1, 0, 333, 2000, 17, 8192, 64};
  Q8Batch b;
  build(c, rng, b);
  AttentionBackend attn(layer_of(c, b));
  attn.prepare(cache);
  check_features(c, attn);  // decode and prefill: e4m3-query specializations with sinks
  DeviceBuffer ws(attn.workspace_bytes());
  Metadata m(c, b);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
  Stream stream;
  CUgraph graph;
  GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  attn.forward(b.q_view, TensorView{}, TensorView{}, b.kv_view, b.out_view, m.md, ws.data(),
               ws.bytes(), stream);
  GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
  CUgraphExec exec;
  GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
  Errors replay_errors;
  for (int round = 0; round < 3; ++round) {
    INFO("replay " << round);
    if (round > 0) {  // new descales in the same device memory: no recapture
      draw_descales(c, rng, b);
      upload_descales(c, b);
    }
    b.d_out.fill_bytes(0xff);
    GA_CU_CHECK(d.cuGraphLaunch(exec, stream));
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    const double err = compare(c, b, reference(c, b, scale));
    INFO("relative L2 error " << err);
    CHECK(err <= q8_tolerance(c.dtype));
    replay_errors.add(c.dtype, err);
  }
  MESSAGE("graph replays with new descales, relative L2 errors, bf16 out: "
          << Errors::summary(replay_errors.bf16));
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);

  // Per-tensor descales (floats), eager, HND, fp16 output.
  Q8Case t;
  t.dtype = DType::kFloat16;
  t.layout = KvLayout::kHND;
  t.kv = KvDType::kFp8E5M2;
  t.group = 8;
  t.num_kv_heads = 1;
  t.seq_lens = {100, 2500, 0, 1};
  Q8Batch tb;
  build(t, rng, tb);
  AttentionBackend per_tensor(layer_of(t, tb));
  per_tensor.prepare(cache);
  check_features(t, per_tensor);
  DeviceBuffer tws(per_tensor.workspace_bytes());
  Metadata tm(t, tb);
  tb.d_out.fill_bytes(0xff);
  per_tensor.forward(tb.q_view, TensorView{}, TensorView{}, tb.kv_view, tb.out_view, tm.md,
                     tws.data(), tws.bytes(), stream);
  GA_CU_CHECK(d.cuStreamSynchronize(stream));
  const double err = compare(t, tb, reference(t, tb, 1.0f / std::sqrt(128.0f)));
  MESSAGE("per-tensor descales, fp16 out, eager: relative L2 error " << err);
  INFO("per-tensor relative L2 error " << err);
  CHECK(err <= q8_tolerance(t.dtype));

  // A 16-bit query is refused, naming the layer's query dtype.
  CHECK_THROWS_WITH_AS(per_tensor.forward(tb.out_view, TensorView{}, TensorView{}, tb.kv_view,
                                          tb.out_view, tm.md, tws.data(), tws.bytes(), stream),
                       doctest::Contains("(q_dtype fp8_e4m3)"), Error);
}

TEST_CASE("gpu fp8 query: prefills and mixed batches through forward() (host and device split)") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  std::vector<Q8Case> cases(4);
  cases[0].per_head = true;  // bf16, e4m3, NHD, GQA 4
  cases[1].dtype = DType::kFloat16;
  cases[1].kv = KvDType::kFp8E5M2;
  cases[1].layout = KvLayout::kHND;
  cases[1].block_size = 32;
  cases[1].group = 8;
  cases[1].num_kv_heads = 1;
  cases[1].soft_cap = 10.0f;
  cases[1].sinks = true;
  cases[2].per_head = true;
  cases[2].group = 1;
  cases[2].window = 300;
  cases[2].alibi = true;
  cases[3].per_head = true;
  cases[3].head_size = 72;
  cases[3].group = 2;
  cases[3].layout = KvLayout::kHND;
  Errors errors;
  Stream stream;
  for (Q8Case& c : cases) {
    // Three decodes (one empty), then prefills: whole prompts and chunks after a context.
    c.seq_lens = {700, 0, 33, 300, 1500, 64, 129};
    c.q_lens = {1, 1, 1, 300, 37, 64, 100};
    INFO(describe(c));
    Q8Batch b;
    build(c, rng, b);
    AttentionBackend attn(layer_of(c, b));
    attn.prepare(cache);
    check_features(c, attn);
    DeviceBuffer ws(attn.workspace_bytes());
    Metadata m(c, b);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
    const std::vector<double> want = reference(c, b, scale);
    for (bool device_split : {false, true}) {
      INFO("split on the " << std::string(device_split ? "device" : "host"));
      AttentionMetadata md = m.md;
      md.device_split = device_split;
      b.d_out.fill_bytes(0xff);
      attn.forward(b.q_view, TensorView{}, TensorView{}, b.kv_view, b.out_view, md, ws.data(),
                   ws.bytes(), stream);
      GA_CU_CHECK(d.cuStreamSynchronize(stream));
      const double err = compare(c, b, want);
      const int64_t decode_tokens = m.md.num_decode_tokens;
      const double decode_err = token_error(c, b, want, 0, decode_tokens);
      const double prefill_err = token_error(c, b, want, decode_tokens, b.T);
      INFO("relative L2 error " << err << " (decode rows " << decode_err << ", prefill rows "
                                << prefill_err << ")");
      CHECK(decode_err <= q8_tolerance(c.dtype));
      CHECK(prefill_err <= q8_prefill_tolerance(attn.required_specs()[2]));
      errors.add(c.dtype, err);
    }
  }
  MESSAGE("prefill + decode relative L2 errors, bf16 out: "
          << Errors::summary(errors.bf16) << "; fp16 out: " << Errors::summary(errors.fp16));
}

TEST_CASE("gpu fp8 query: the prefill kernels (wgmma on sm_90) match the float64 reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const int arch = current_device_arch();
  std::vector<Q8Case> cases(13);
  cases[0].num_kv_heads = 2;  // bf16, e4m3, NHD, GQA 4, causal, per-tensor
  cases[1].dtype = DType::kFloat16;
  cases[1].kv = KvDType::kFp8E5M2;
  cases[1].layout = KvLayout::kHND;
  cases[1].block_size = 32;
  cases[1].group = 8;
  cases[1].num_kv_heads = 1;
  cases[1].causal = false;
  cases[1].per_head = true;
  cases[2].group = 1;
  cases[2].window = 300;
  cases[2].soft_cap = 10.0f;
  cases[2].sinks = true;
  cases[2].per_head = true;
  cases[3].group = 2;
  cases[3].layout = KvLayout::kHND;
  cases[3].alibi = true;
  cases[3].causal = false;
  cases[4].dtype = DType::kFloat16;
  cases[4].group = 4;
  cases[4].per_head = true;
  cases[5].head_size = 64;  // mma.sync on every arch (the wgmma kernel takes head size 128)
  cases[5].per_head = true;
  // Pages of 64 (two per 128-key tile, HND) and 256 keys (two tiles per page).
  cases[6].block_size = 64;
  cases[6].layout = KvLayout::kHND;
  cases[6].num_kv_heads = 2;
  cases[7].block_size = 256;
  cases[7].group = 2;
  // Rows after 4224 keys alone (33 tiles), so that an error that grows with the keys a row
  // accumulates is not averaged away by shorter rows (tensor-core row sums that accumulated l
  // across tiles in the wgmma accumulator drifted to 6e-2 at 4096 keys; prefill_sm90.cu,
  // PW_ROWSUM).
  cases[8].seq_lens = {4224};
  cases[8].q_lens = {128};
  // The edges of wide key tiles (params.h's ga_prefill_sm90_fp8_block_n: 192 or 256 keys, 128
  // query rows a block): lengths one short of, at and one past 128, 192 and 256 keys, with one
  // query head a KV head (a block's causal diagonal then runs through the middle or the second
  // half of a tile) and a context that ends inside a tile.
  cases[9].group = 1;
  cases[9].seq_lens = {127, 191, 192, 193, 255, 256, 257, 640, 400};
  cases[9].q_lens = {127, 191, 192, 193, 255, 256, 257, 130, 45};
  // Scores that jump by hundreds after the first key tile (Q8Case::jump): prefill_sm90.cu's
  // speculative softmax (PW_F8_SPEC) must then score the tile again (P overflowed) or move its
  // references from P.
  cases[10].jump = true;
  cases[10].seq_lens = {1000, 600, 2100};
  cases[10].q_lens = {1000, 37, 300};
  // The edges of three consumers' 192-row tiles (params.h's ga_prefill_sm90_fp8_consumers) at
  // GQA 4, 48 query tokens a tile: prompts one short of, at and one past one and two tiles, and
  // chunks whose rows start inside a tile after a context.
  cases[11].seq_lens = {47, 48, 49, 95, 96, 97, 700, 260};
  cases[11].q_lens = {47, 48, 49, 95, 96, 97, 49, 145};
  // Rows whose first key tiles score negative only (Q8Case::negative), a request of them alone.
  cases[12].negative = true;
  cases[12].seq_lens = {1000, 200, 2100};
  cases[12].q_lens = {1000, 200, 300};
  // The softmax LSE too (spec "_lse"): plain, with sinks and a window, mma.sync, long rows.
  for (int i : {0, 2, 5, 8, 9, 10, 11, 12}) cases[i].lse = true;
  Errors errors;
  for (Q8Case& c : cases) {
    // Whole prompts, chunks after a context (a partial last tile, a long one), an empty request.
    if (c.seq_lens.empty()) {
      c.seq_lens = {1000, 0, 600, 2100, 129};
      c.q_lens = {1000, 0, 37, 300, 129};
    }
    INFO(describe(c));
    Q8Batch b;
    build(c, rng, b);
    DeviceBuffer qsl((b.n + 1) * 4);
    qsl.upload(b.starts.data(), b.starts.size() * 4);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
    detail::PrefillLaunch a{{b.q_view, b.kv_view, b.out_view, b.seq_view, b.bt_view,
                             c.alibi ? static_cast<const float*>(b.d_slopes.data()) : nullptr,
                             c.sinks ? static_cast<const float*>(b.d_sinks.data()) : nullptr}};
    a.non_causal = !c.causal;
    a.query_start_loc = TensorView::contiguous(qsl.data(), ScalarType::kInt32, {b.n + 1});
    a.num_reqs = b.n;
    a.max_query_len = *std::max_element(c.q_lens.begin(), c.q_lens.end());
    set_scores_and_scales(c, b, scale, a);
    DeviceBuffer d_lse(c.lse ? static_cast<size_t>(b.H * b.T) * 4 : 16);
    if (c.lse) {
      d_lse.fill_bytes(0xff);  // NaN: every row must be written
      a.softmax_lse = TensorView::contiguous(d_lse.data(), ScalarType::kFloat32, {b.H, b.T});
    }
    const AttentionSpec spec = detail::prefill_spec(a, arch);
    INFO(spec.to_string());
    CHECK(spec.q_fp8);
    CHECK(spec.softmax_lse == c.lse);
    const bool wgmma = detail::select_prefill_kernel(spec) == detail::PrefillKernel::kWgmma;
    CHECK(wgmma == (!detail::prefill_mma_sync_forced() && arch == 90 && c.head_size == 128));
    const detail::LoadedKernel& k = detail::load_kernel(spec, cache);
    b.d_out.fill_bytes(0xff);  // NaN in both 16-bit types: every row must be written
    detail::launch_prefill(k, a, nullptr);
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<double> want_lse;
    const double err = compare(c, b, reference(c, b, scale, c.lse ? &want_lse : nullptr));
    INFO("relative L2 error " << err << std::string(wgmma ? " (wgmma, fp8 P)" : " (mma.sync)"));
    CHECK(err <= q8_prefill_tolerance(spec));
    if (c.lse) {
      std::vector<float> got(static_cast<size_t>(b.H * b.T));
      d_lse.download(got.data(), got.size() * 4);
      std::vector<int> cols(static_cast<size_t>(b.T));
      std::iota(cols.begin(), cols.end(), 0);
      const LseComparison lc = compare_lse(got, b.T, cols, want_lse, static_cast<int>(b.H),
                                           q8_prefill_lse_tolerance(spec));
      INFO("softmax LSE: worst absolute error " << lc.worst);
      CHECK(lc.nan == 0);
      CHECK(lc.bad == 0);
      MESSAGE(spec.to_string() << ": softmax LSE worst absolute error " << lc.worst);
    }
    if (wgmma) errors.add(c.dtype, err);
    MESSAGE(spec.to_string() << std::string(wgmma ? " wgmma" : " mma.sync")
                             << ": relative L2 error " << err);
  }
  MESSAGE("wgmma (fp8 P) prefill relative L2 errors, bf16 out: "
          << Errors::summary(errors.bf16) << "; fp16 out: " << Errors::summary(errors.fp16));
}
