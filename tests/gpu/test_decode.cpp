// SPDX-License-Identifier: Apache-2.0
// The split-KV decode kernels on the GPU against the float64 reference: every head size, block
// sizes, fp16/bf16, GQA groups (including > 16 heads per KV head), window, soft cap, NHD/HND,
// fp8 e4m3/e5m2 KV, seq_lens 0, 1, block boundaries and >= 65536, batches 1..512, each launched
// with the device's split policy and with forced split counts (1, odd, the maximum); then the
// backend's forward() on mixed and padded batches, and a captured graph replayed at new lengths.
//
// Cache slots that must not be read (past seq_len, before the window, unused block-table
// entries, padded rows) hold NaN or out-of-range block ids, so a stray read shows up as NaN or
// as an illegal address. GRAPHATTN_TEST_REDUCED=1 runs a few small cases (compute-sanitizer).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "templates/params.h"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

struct DecodeCase {
  DType dtype = DType::kBFloat16;
  KvDType kv = KvDType::kAuto;
  KvLayout layout = KvLayout::kNHD;
  int head_size = 128, block_size = 16, num_kv_heads = 2, group = 4;
  int window = 0;      // 0: none
  float soft_cap = 0;  // 0: none
  std::vector<int> seq_lens;
  int checked = -1;      // requests compared with the reference (sampled); -1: all
  double q_std = 1.0;    // larger scores make the soft cap bite
  bool strided = false;  // query and output rows with padding between tokens
  bool alibi = false;    // per-head ALiBi slopes (random)
  bool sinks = false;    // per-head sink logits (random, some dominating)
  bool lse = false;      // the kernel also writes the softmax LSE (spec axis softmax_lse)
};

std::string describe(const DecodeCase& c) {
  std::string s = std::string(to_string(c.dtype)) + " kv " + to_string(c.kv) + " " +
                  to_string(c.layout) + " head " + std::to_string(c.head_size) + " block " +
                  std::to_string(c.block_size) + " kv heads " + std::to_string(c.num_kv_heads) +
                  " group " + std::to_string(c.group) + " window " + std::to_string(c.window) +
                  " cap " + std::to_string(c.soft_cap) + (c.alibi ? " alibi" : "") +
                  (c.sinks ? " sinks" : "") + (c.lse ? " lse" : "") + " batch " +
                  std::to_string(c.seq_lens.size()) + " seq_lens";
  for (size_t i = 0; i < c.seq_lens.size() && i < 8; ++i) s += " " + std::to_string(c.seq_lens[i]);
  if (c.seq_lens.size() > 8) s += " ...";
  return s;
}

AttentionSpec decode_spec_of(const DecodeCase& c, int arch) {
  AttentionSpec s;
  s.kind = KernelKind::kDecode;
  s.head_size = c.head_size;
  s.block_size = c.block_size;
  s.dtype = c.dtype;
  s.kv_dtype = c.kv;
  s.group = c.group;
  s.sliding_window = c.window > 0;
  s.soft_cap = c.soft_cap > 0;
  s.alibi = c.alibi;
  s.sinks = c.sinks;
  s.softmax_lse = c.lse;
  s.layout = c.layout;
  s.arch = arch;
  return s;
}

// A finite random KV element: 16-bit values from N(0, 1); fp8 codes drawn uniformly among the
// finite codes of magnitude <= 8 (so every exponent, subnormals included, appears).
struct KvSampler {
  DType dtype;
  KvDType kv;
  std::vector<uint8_t> codes;
  KvSampler(DType d, KvDType k) : dtype(d), kv(k) {
    for (int c = 0; c < 256; ++c) {
      const double v = kv == KvDType::kFp8E4M3 ? e4m3_to_double(static_cast<uint8_t>(c))
                                               : e5m2_to_double(static_cast<uint8_t>(c));
      if (std::isfinite(v) && std::fabs(v) <= 8) codes.push_back(static_cast<uint8_t>(c));
    }
  }
  // Writes one element at `dst` (1 or 2 bytes) and returns its stored (unscaled) value.
  double draw(std::mt19937_64& rng, std::normal_distribution<double>& normal, uint8_t* dst) {
    if (kv == KvDType::kAuto) {
      const uint16_t h = to_storage(dtype, normal(rng));
      std::memcpy(dst, &h, 2);
      return from_storage(dtype, h);
    }
    const uint8_t c = codes[rng() % codes.size()];
    *dst = c;
    return kv == KvDType::kFp8E4M3 ? e4m3_to_double(c) : e5m2_to_double(c);
  }
};

// Host and device data of one decode batch.
struct Batch {
  int64_t num_blocks = 0, max_blocks = 1, token_stride = 0;
  TensorView kv_view, q_view, out_view, seq_view, bt_view;
  DeviceBuffer d_cache, d_q, d_out, d_seq, d_bt;
  std::vector<int> block_table;
  std::vector<double> q, k_ref, v_ref;  // reference values (logical NHD, dequantized)
  std::vector<double> slopes, sinks;    // per head, when the case has them
  DeviceBuffer d_slopes, d_sinks;
  DeviceBuffer d_lse;  // [num_heads, n] fp32 when the case writes the LSE
  TensorView lse_view;
};

int64_t cache_offset(const DecodeCase& c, int64_t nb, int which, int64_t blk, int64_t off,
                     int64_t h, int64_t d) {
  const int64_t B = c.block_size, KH = c.num_kv_heads, D = c.head_size;
  const int64_t base = (which * nb + blk) * B * KH * D;
  return c.layout == KvLayout::kNHD ? base + (off * KH + h) * D + d : base + (h * B + off) * D + d;
}

void build_batch(const DecodeCase& c, std::mt19937_64& rng, Batch& b) {
  const int n = static_cast<int>(c.seq_lens.size());
  const int64_t B = c.block_size, KH = c.num_kv_heads, D = c.head_size, H = KH * c.group;
  std::vector<int> nblk(n);
  int64_t used = 0;
  for (int r = 0; r < n; ++r) {
    nblk[r] = static_cast<int>((c.seq_lens[r] + B - 1) / B);
    used += nblk[r];
    b.max_blocks = std::max<int64_t>(b.max_blocks, nblk[r]);
  }
  b.num_blocks = used + 2;  // plus blocks nothing refers to
  std::vector<int> phys(b.num_blocks);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  // Unused entries (and padded rows) name a block far outside the cache.
  b.block_table.assign(n * b.max_blocks, 0x3fffffff);
  int64_t next = 0;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < nblk[r]; ++i) b.block_table[r * b.max_blocks + i] = phys[next++];

  const int elem = c.kv == KvDType::kAuto ? 2 : 1;
  const size_t cache_elems = 2 * b.num_blocks * B * KH * D;
  std::vector<uint8_t> host(cache_elems * elem, 0xff);  // NaN everywhere nothing may read
  b.k_ref.assign(b.num_blocks * B * KH * D, 0.0);
  b.v_ref.assign(b.k_ref.size(), 0.0);
  KvSampler sampler(c.dtype, c.kv);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double ks = c.kv == KvDType::kAuto ? 1.0 : 0.37, vs = c.kv == KvDType::kAuto ? 1.0 : 1.9;
  for_each_live_kv(
      c.seq_lens, c.window, b.block_table, b.max_blocks, B, KH, D,
      [&](int64_t blk, int64_t off, int64_t h, int64_t d, int64_t ref) {
        b.k_ref[ref] =
            ks * sampler.draw(rng, normal,
                              &host[cache_offset(c, b.num_blocks, 0, blk, off, h, d) * elem]);
        b.v_ref[ref] =
            vs * sampler.draw(rng, normal,
                              &host[cache_offset(c, b.num_blocks, 1, blk, off, h, d) * elem]);
      });
  b.d_cache = DeviceBuffer(host.size());
  b.d_cache.upload(host.data(), host.size());
  const ScalarType kst = scalar_type_of(c.kv, c.dtype);
  const int64_t NB = b.num_blocks;
  b.kv_view = c.layout == KvLayout::kNHD
                  ? TensorView::contiguous(b.d_cache.data(), kst, {2, NB, B, KH, D})
                  : TensorView::strided(b.d_cache.data(), kst, {2, NB, B, KH, D},
                                        {NB * KH * B * D, KH * B * D, D, B * D, 1});

  b.token_stride = H * D + (c.strided ? 24 : 0);
  std::vector<uint16_t> q(n * b.token_stride, 0xffff);
  b.q.assign(n * H * D, 0.0);
  std::normal_distribution<double> qn(0.0, c.q_std);
  for (int r = 0; r < n; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const uint16_t x = to_storage(c.dtype, qn(rng));
        q[r * b.token_stride + h * D + d] = x;
        b.q[(r * H + h) * D + d] = from_storage(c.dtype, x);
      }
  const ScalarType st = scalar_type_of(c.dtype);
  b.d_q = DeviceBuffer(q.size() * 2);
  b.d_q.upload(q.data(), q.size() * 2);
  b.d_out = DeviceBuffer(q.size() * 2);
  b.q_view = TensorView::strided(b.d_q.data(), st, {n, H, D}, {b.token_stride, D, 1});
  b.out_view = TensorView::strided(b.d_out.data(), st, {n, H, D}, {b.token_stride, D, 1});
  b.d_seq = DeviceBuffer(n * 4);
  b.d_seq.upload(c.seq_lens.data(), n * 4);
  b.seq_view = TensorView::contiguous(b.d_seq.data(), ScalarType::kInt32, {n});
  b.d_bt = DeviceBuffer(b.block_table.size() * 4);
  b.d_bt.upload(b.block_table.data(), b.block_table.size() * 4);
  b.bt_view = TensorView::contiguous(b.d_bt.data(), ScalarType::kInt32, {n, b.max_blocks});
  b.slopes = random_alibi_slopes(rng, static_cast<int>(H), c.alibi);
  b.sinks = random_sinks(rng, static_cast<int>(H), c.sinks);
  b.d_slopes = upload_floats(b.slopes);
  b.d_sinks = upload_floats(b.sinks);
  if (c.lse) {
    b.d_lse = DeviceBuffer(H * n * 4);
    b.lse_view = TensorView::contiguous(b.d_lse.data(), ScalarType::kFloat32, {H, n});
  }
}

// The float64 reference for a sample of the batch's requests, in batch row order.
// lse: [num_heads, rows.size()] log-sum-exps, when given.
std::vector<double> reference_rows(const DecodeCase& c, Batch& b, const std::vector<int>& rows,
                                   double scale, std::vector<double>* lse = nullptr) {
  const int64_t H = c.num_kv_heads * c.group, D = c.head_size;
  RefProblem p;
  p.num_heads = static_cast<int>(H);
  p.num_kv_heads = c.num_kv_heads;
  p.head_size = c.head_size;
  p.block_size = c.block_size;
  p.max_blocks_per_seq = static_cast<int>(b.max_blocks);
  p.query_start_loc.push_back(0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int r = rows[i];
    p.query_start_loc.push_back(static_cast<int>(i + 1));
    p.seq_lens.push_back(c.seq_lens[r]);
    p.block_table.insert(p.block_table.end(), b.block_table.begin() + r * b.max_blocks,
                         b.block_table.begin() + (r + 1) * b.max_blocks);
    p.q.insert(p.q.end(), b.q.begin() + r * H * D, b.q.begin() + (r + 1) * H * D);
  }
  // The reference never reads past seq_len nor before the window, where the cache holds
  // nothing (see build_batch); it gets the same block ids.
  p.k_cache.swap(b.k_ref);  // lent, not copied: long cases hold hundreds of MB
  p.v_cache.swap(b.v_ref);
  p.scale = scale;
  p.window = c.window;
  p.soft_cap = c.soft_cap;
  p.alibi_slopes = b.slopes;
  p.sinks = b.sinks;
  std::vector<double> out = reference_attention(p, lse);
  p.k_cache.swap(b.k_ref);
  p.v_cache.swap(b.v_ref);
  return out;
}

struct Kernels {
  const detail::LoadedKernel* decode;
  detail::DecodeDevice device;
};

Kernels load(const DecodeCase& c, KernelCache& cache) {
  const AttentionSpec s = decode_spec_of(c, current_device_arch());
  Kernels k;
  k.decode = &detail::load_kernel(s, cache);
  k.device = detail::prepare_decode_kernel(*k.decode);
  return k;
}

// A launch's grid width and pipeline depth; 0 means the device's policy for both.
struct Grid {
  int splits, stages;
  bool cluster = false;  // the splits combine through distributed shared memory
};

// The launch of every request of batch b with grid g. Window, soft cap and the fp8 KV scales are
// the case's (build_batch stored the cache with those scales).
detail::DecodeLaunch launch_args(const DecodeCase& c, const Batch& b, const Grid& g, float scale,
                                 const DeviceBuffer& ws, const DeviceBuffer& counters) {
  detail::DecodeLaunch a{{b.q_view, b.kv_view, b.out_view, b.seq_view, b.bt_view,
                          static_cast<const float*>(b.d_slopes.data()),
                          static_cast<const float*>(b.d_sinks.data())}};
  a.num_decodes = static_cast<int>(c.seq_lens.size());
  a.max_splits = g.splits;
  a.stages = g.stages;
  a.scale = scale;
  a.window = c.window;
  a.soft_cap = c.soft_cap;
  a.k_scale = c.kv == KvDType::kAuto ? 1.0f : 0.37f;
  a.v_scale = c.kv == KvDType::kAuto ? 1.0f : 1.9f;
  a.workspace = ws.data();
  a.workspace_size = ws.bytes();
  a.counters = counters.data();
  a.cluster = g.cluster;
  a.softmax_lse = b.lse_view;
  return a;
}

// One decode launch captured into a graph on `stream`, replayed with replay(); destroyed with it.
struct CapturedDecode {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CapturedDecode(const Kernels& k, const detail::DecodeLaunch& a, CUstream stream) {
    const auto& d = detail::driver();
    GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    detail::launch_decode(*k.decode, a, stream);
    GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
    GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
  }
  CapturedDecode(const CapturedDecode&) = delete;
  CapturedDecode& operator=(const CapturedDecode&) = delete;
  ~CapturedDecode() {
    detail::driver().cuGraphExecDestroy(exec);
    detail::driver().cuGraphDestroy(graph);
  }
  // Replays the graph and waits for it.
  void replay(CUstream stream) const {
    GA_CU_CHECK(detail::driver().cuGraphLaunch(exec, stream));
    GA_CU_CHECK(detail::driver().cuStreamSynchronize(stream));
  }
};

// The LSE a kernel wrote into d_lse ([heads, n] fp32) for the batch rows `rows`, against the
// reference's [heads, rows.size()] (compare_lse).
void check_lse(const DeviceBuffer& d_lse, const std::vector<double>& want,
               const std::vector<int>& rows, int n, int heads) {
  std::vector<float> got(static_cast<size_t>(heads) * n);
  d_lse.download(got.data(), got.size() * 4);
  const LseComparison r = compare_lse(got, n, rows, want, heads);
  INFO("softmax LSE: worst absolute error " << r.worst);
  CHECK(r.nan == 0);
  CHECK(r.bad == 0);
}

// Runs one case with each grid in `grids` and compares. Split counts: 0 the policy's (with its
// stages), -1 the most the longest request can use; stages: 0 the shallow default, -1 the
// deepest.
void run_case(const DecodeCase& c, KernelCache& cache, std::mt19937_64& rng,
              std::vector<Grid> grids) {
  INFO(describe(c));
  const int n = static_cast<int>(c.seq_lens.size());
  const int64_t H = c.num_kv_heads * c.group, D = c.head_size;
  Batch b;
  build_batch(c, rng, b);
  const Kernels k = load(c, cache);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));

  std::vector<int> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  if (c.checked >= 0 && c.checked < n) {
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(c.checked);
    std::sort(rows.begin(), rows.end());
  }
  std::vector<double> want_lse;
  const std::vector<double> want = reference_rows(c, b, rows, scale, c.lse ? &want_lse : nullptr);

  const int max_len = std::max(1, *std::max_element(c.seq_lens.begin(), c.seq_lens.end()));
  const detail::DecodeGrid policy = detail::decode_grid(n, c.num_kv_heads, c.group, max_len,
                                                        c.window, c.head_size, c.kv, k.device);
  const int deepest = ga_decode_max_stages(c.head_size, c.kv == KvDType::kAuto ? 2 : 1);
  for (Grid& g : grids) {
    if (g.splits == 0) g = {policy.max_splits, policy.stages};
    if (g.splits == -1) g.splits = (max_len + 63) / 64;
    if (g.stages == -1) g.stages = deepest;
    g.stages = std::min(g.stages, deepest);
  }
  // Every grid that a cluster can hold (the depths prepare_decode_kernel sized clusters for)
  // also runs as a cluster launch.
  const int shallow = ga_decode_shallow_stages(c.head_size, c.kv == KvDType::kAuto ? 2 : 1);
  for (size_t i = 0, end = grids.size(); i < end; ++i) {
    Grid g = grids[i];
    const int st = g.stages == 0 ? shallow : g.stages;
    if (g.splits > 1 && st >= 2 && st <= 4 && g.splits <= k.device.cluster_at[st]) {
      g.cluster = true;
      grids.push_back(g);
    }
  }
  int most = 1;
  for (const Grid& g : grids) most = std::max(most, g.splits);
  DeviceBuffer ws(detail::decode_workspace_bytes(n, static_cast<int>(H), c.head_size, most));
  // Zero-filled once and shared by every launch below: each must leave it at zero.
  const size_t num_counters = detail::decode_counter_count(n, c.num_kv_heads, c.group);
  DeviceBuffer counters(num_counters * 4);

  for (const Grid& g : grids) {
    INFO("max_splits " << g.splits << ", stages " << g.stages
                       << std::string(g.cluster ? ", cluster" : "") << " (policy "
                       << policy.max_splits << ", " << policy.stages << ")");
    b.d_out.fill_bytes(0xff);  // NaN: every element must be written
    if (c.lse) b.d_lse.fill_bytes(0xff);
    const detail::DecodeLaunch a = launch_args(c, b, g, static_cast<float>(scale), ws, counters);
    detail::launch_decode(*k.decode, a, nullptr);
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<unsigned> left(num_counters);
    counters.download(left.data(), left.size() * 4);
    CHECK(std::count(left.begin(), left.end(), 0u) == static_cast<long>(num_counters));
    std::vector<uint16_t> out(n * b.token_stride);
    b.d_out.download(out.data(), out.size() * 2);

    size_t nan = 0, nonzero_padded = 0;
    for (int r = 0; r < n; ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const uint16_t x = out[r * b.token_stride + h * D + d];
          if (is_nan16(c.dtype, x)) ++nan;
          if (c.seq_lens[r] == 0 && x != 0) ++nonzero_padded;
        }
    CHECK(nan == 0);
    CHECK(nonzero_padded == 0);
    std::vector<double> got;
    got.reserve(want.size());
    for (int r : rows)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d)
          got.push_back(from_storage(c.dtype, out[r * b.token_stride + h * D + d]));
    const double err = relative_l2(got, want);
    INFO("relative L2 error " << err);
    CHECK(err <= tolerance(c.dtype));
    if (c.lse) check_lse(b.d_lse, want_lse, rows, n, static_cast<int>(H));
  }
}

// Sequence lengths around multiples of the block size, and 0 and 1.
std::vector<int> boundary_lens(int block, std::mt19937_64& rng) {
  std::vector<int> v = {
      0, 1, block - 1, block, block + 1, 2 * block, 3 * block - 1, 16 * block, 16 * block + 1, 0};
  std::uniform_int_distribution<int> u(2, 40 * block);
  for (int i = 0; i < 4; ++i) v.push_back(u(rng));
  return v;
}

std::vector<int> random_lens(std::mt19937_64& rng, int n, int lo, int hi) {
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<int> v(n);
  for (int& x : v) x = u(rng);
  return v;
}

std::vector<DecodeCase> all_cases(std::mt19937_64& rng) {
  std::vector<DecodeCase> cases;
  if (reduced()) {
    DecodeCase c;
    c.seq_lens = {0, 1, 17, 300, 64};
    cases.push_back(c);
    c.dtype = DType::kFloat16;
    c.kv = KvDType::kFp8E4M3;
    c.layout = KvLayout::kHND;
    c.head_size = 40;
    c.group = 5;
    c.window = 37;
    c.soft_cap = 4;
    c.q_std = 3;
    cases.push_back(c);
    c.alibi = c.sinks = true;
    cases.push_back(c);
    c = DecodeCase();
    c.head_size = 256;
    c.group = 20;  // two blocks of query heads per KV head
    c.num_kv_heads = 1;
    c.block_size = 256;
    c.kv = KvDType::kFp8E5M2;
    c.seq_lens = {300, 0, 513};
    cases.push_back(c);
    return cases;
  }
  // Every head size (block 16), alternating dtype, group, layout and KV type.
  for (int h : supported_head_sizes()) {
    DecodeCase c;
    c.head_size = h;
    c.dtype = (h / 8) % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.group = (h / 8) % 3 == 0 ? 4 : (h / 8) % 3 == 1 ? 1 : 8;
    c.layout = (h / 8) % 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.num_kv_heads = 2;
    c.seq_lens = {1, 0, 37, 300, 1100};
    cases.push_back(c);
    c.kv = (h / 8) % 2 ? KvDType::kFp8E4M3 : KvDType::kFp8E5M2;
    c.seq_lens = {250, 16, 0, 2};
    cases.push_back(c);
  }
  // Block sizes with lengths at block boundaries, both layouts.
  for (int block : {16, 32, 64, 128, 256})
    for (KvLayout lay : {KvLayout::kNHD, KvLayout::kHND}) {
      DecodeCase c;
      c.block_size = block;
      c.layout = lay;
      c.dtype = lay == KvLayout::kNHD ? DType::kBFloat16 : DType::kFloat16;
      c.seq_lens = boundary_lens(block, rng);
      c.strided = block == 64;
      cases.push_back(c);
    }
  // GQA groups, both dtypes; 20 and 64 need several blocks of query heads per KV head.
  for (int g : {1, 2, 4, 5, 8, 16, 20, 64})
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      DecodeCase c;
      c.group = g;
      c.dtype = dt;
      c.num_kv_heads = g >= 16 ? 1 : 3;
      c.seq_lens = random_lens(rng, 5, 1, 3000);
      c.seq_lens[2] = 0;
      cases.push_back(c);
    }
  // Window and soft cap on and off, both layouts, both dtypes.
  for (int window : {0, 1, 17, 500})
    for (float cap : {0.0f, 5.0f})
      for (KvLayout lay : {KvLayout::kNHD, KvLayout::kHND}) {
        DecodeCase c;
        c.window = window;
        c.soft_cap = cap;
        c.q_std = cap > 0 ? 3.0 : 1.0;
        c.layout = lay;
        c.dtype = window % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.group = lay == KvLayout::kNHD ? 8 : 2;
        c.seq_lens = {1, 16, 17, 499, 500, 501, 515, 2049, 0};
        cases.push_back(c);
      }
  // fp8 KV: both formats, layouts, dtypes, with window and cap.
  for (KvDType kv : {KvDType::kFp8E4M3, KvDType::kFp8E5M2})
    for (KvLayout lay : {KvLayout::kNHD, KvLayout::kHND})
      for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
        DecodeCase c;
        c.kv = kv;
        c.layout = lay;
        c.dtype = dt;
        c.head_size = dt == DType::kFloat16 ? 128 : 72;
        c.block_size = lay == KvLayout::kNHD ? 16 : 32;
        c.window = kv == KvDType::kFp8E4M3 ? 300 : 0;
        c.soft_cap = dt == DType::kBFloat16 ? 20.0f : 0.0f;
        c.seq_lens = random_lens(rng, 6, 1, 2500);
        cases.push_back(c);
      }
  // Large logits (scores of about +-1e3 and +-1e4 before the cap): the soft cap's one formula
  // (templates/common.cuh) at both ends, against the reference's cap * tanh(s / cap).
  for (double q_std : {1000.0, 10000.0})
    for (float cap : {30.0f, 50.0f}) {
      DecodeCase c;
      c.dtype = q_std > 5000 ? DType::kBFloat16 : DType::kFloat16;  // fp16 holds |q| < 65504
      c.soft_cap = cap;
      c.q_std = q_std;
      c.seq_lens = {1, 37, 600, 3000};
      cases.push_back(c);
    }
  // ALiBi and attention sinks, apart and together, with window, cap, fp8, large groups (several
  // blocks of query heads per KV head) and lengths that take one split or many.
  for (int i = 0; i < 12; ++i) {
    DecodeCase c;
    c.alibi = i % 3 != 1;
    c.sinks = i % 3 != 0;
    c.window = i % 4 == 2 ? 300 : 0;
    c.soft_cap = i % 5 == 4 ? 8.0f : 0.0f;
    c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.kv = i % 6 == 5 ? KvDType::kFp8E4M3 : KvDType::kAuto;
    c.layout = i % 4 == 3 ? KvLayout::kHND : KvLayout::kNHD;
    c.head_size = i % 3 == 2 ? 64 : 128;
    c.group = i < 8 ? 4 : 20;
    c.num_kv_heads = c.group > 16 ? 1 : 2;
    c.seq_lens = {1, 0, 17, 700, 4100};
    cases.push_back(c);
  }
  // Batches 1..512, short random lengths; a sample of the requests is checked.
  for (int n : {1, 2, 7, 64, 200, 512}) {
    DecodeCase c;
    c.num_kv_heads = 2;
    c.group = 4;
    c.seq_lens = random_lens(rng, n, 0, n >= 200 ? 120 : 400);
    c.checked = std::min(n, 48);
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

// Compiles the specs of `cases` (each once, in parallel) and requires that every one compiled.
template <typename Cache>
void precompile_cases(Cache& cache, const std::vector<DecodeCase>& cases) {
  std::vector<AttentionSpec> specs;
  const int arch = current_device_arch();
  for (const auto& c : cases) {
    const AttentionSpec s = decode_spec_of(c, arch);
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  }
  for (const auto& r : cache.precompile(specs)) {
    INFO(r.spec << ": " << r.error);
    REQUIRE(r.error.empty());
  }
}

TEST_CASE("gpu decode: matches the float64 reference across the spec axes and split counts") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const std::vector<DecodeCase> cases = all_cases(rng);
  precompile_cases(cache, cases);  // everything in parallel first
  const std::vector<Grid> grids =
      reduced() ? std::vector<Grid>{{0, 0}, {3, -1}}
                : std::vector<Grid>{{0, 0}, {1, 0}, {1, -1}, {3, 3}, {-1, -1}, {-1, 2}};
  for (const auto& c : cases) run_case(c, cache, rng, grids);
}

// KV head pairs (ga_decode_row_heads): a block covers two adjacent KV heads where a head's row is
// 128 bytes (head 64 16-bit, head 128 fp8) in NHD. Odd KV head counts (the last pair has no
// second head), one KV head, GQA 1..8 (8: the pair's 16 columns fill a block), window, soft cap,
// ALiBi, sinks, LSE, padded query rows, block 16 and 32, split and cluster grids.
TEST_CASE("gpu decode: KV head pairs (128-byte head rows, NHD) match the float64 reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const int arch = current_device_arch();
  std::vector<DecodeCase> cases;
  int i = 0;
  for (int kvh : {1, 2, 3, 5})
    for (int g : {1, 2, 4, 8}) {
      DecodeCase c;
      const bool fp8 = i % 3 == 2;
      c.head_size = fp8 ? 128 : 64;
      c.kv = !fp8 ? KvDType::kAuto : i % 2 ? KvDType::kFp8E4M3 : KvDType::kFp8E5M2;
      c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
      c.num_kv_heads = kvh;
      c.group = g;
      c.block_size = i % 4 == 3 ? 32 : 16;
      c.window = i % 5 == 1 ? 300 : 0;
      c.soft_cap = i % 7 == 3 ? 8.0f : 0.0f;
      c.q_std = c.soft_cap > 0 ? 3.0 : 1.0;
      c.alibi = i % 6 == 4;
      c.sinks = i % 4 == 1;
      c.lse = i % 5 == 3;
      c.strided = i % 8 == 6;
      c.seq_lens = {1, 0, 17, 700, 2100};
      cases.push_back(c);
      ++i;
    }
  std::vector<AttentionSpec> specs;
  for (const auto& c : cases) {
    const AttentionSpec s = decode_spec_of(c, arch);
    INFO(s.to_string());
    CHECK(detail::decode_row_heads(s) == 2);
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  }
  for (const auto& r : cache.precompile(specs)) {
    INFO(r.spec << ": " << r.error);
    REQUIRE(r.error.empty());
  }
  const std::vector<Grid> grids = {{0, 0}, {1, 0}, {3, -1}, {-1, 2}};
  for (const auto& c : cases) run_case(c, cache, rng, grids);
}

// Launches of more blocks than the device holds at once (several waves, blocks of one wave
// ending at different times): 300 requests of 0..600 tokens (padded rows, single tokens,
// partial tiles) x 2-4 KV heads, bf16 / fp16, NHD and HND, KV head pairs (head 64 and e4m3 head
// 128), block 16 and 32, at the policy's grid, 2 stages and the deepest pipeline (one block a
// multiprocessor: the most waves).
TEST_CASE("gpu decode: launches of more blocks than the device holds match the reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<DecodeCase> cases;
  for (int i = 0; i < 4; ++i) {
    DecodeCase c;
    c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.layout = i == 1 ? KvLayout::kHND : KvLayout::kNHD;
    c.head_size = i == 2 ? 64 : 128;
    c.kv = i == 3 ? KvDType::kFp8E4M3 : KvDType::kAuto;
    c.num_kv_heads = i == 0 ? 2 : 4;
    c.group = i == 1 ? 8 : 4;
    c.block_size = i == 1 ? 32 : 16;
    std::uniform_int_distribution<int> len(0, 600);
    for (int r = 0; r < 300; ++r)
      c.seq_lens.push_back(r % 37 == 5 ? 0 : r % 41 == 7 ? 1 : len(rng));
    c.checked = reduced() ? 24 : 96;
    cases.push_back(c);
  }
  precompile_cases(cache, cases);
  for (const auto& c : cases) run_case(c, cache, rng, {{0, 0}, {1, 2}, {1, -1}});
}

TEST_CASE("gpu decode: softmax LSE (_lse) matches the reference, split or not") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<DecodeCase> cases;
  for (int i = 0; i < 8; ++i) {
    DecodeCase c;
    c.lse = true;
    c.dtype = i % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.group = i < 4 ? 4 : i < 6 ? 1 : 20;
    c.num_kv_heads = c.group > 16 ? 1 : 2;
    c.layout = i % 3 == 2 ? KvLayout::kHND : KvLayout::kNHD;
    c.window = i == 2 ? 300 : 0;
    c.soft_cap = i == 3 || i == 6 ? 8.0f : 0.0f;
    c.q_std = c.soft_cap > 0 ? 3.0 : 1.0;
    c.alibi = i == 5;
    c.sinks = i == 4 || i == 7;
    c.kv = i == 7 ? KvDType::kFp8E4M3 : KvDType::kAuto;
    c.head_size = i == 6 ? 64 : 128;
    c.seq_lens = {1, 0, 17, 700, 4100, 9000};
    cases.push_back(c);
  }
  precompile_cases(cache, cases);
  const std::vector<Grid> grids = {{0, 0}, {1, 0}, {3, 3}, {-1, -1}, {-1, 2}};
  for (const auto& c : cases) run_case(c, cache, rng, grids);
}

TEST_CASE("gpu decode: sequences of 65536 tokens and more") {
  GA_REQUIRE_GPU();
  if (reduced()) return;
  TempKernelCache cache;
  auto rng = make_rng();
  DecodeCase c;
  c.num_kv_heads = 1;
  c.group = 8;
  c.seq_lens = {65536, 70001};
  run_case(c, cache, rng, {{0, 0}, {1, 0}, {7, -1}});
  c.dtype = DType::kFloat16;
  c.kv = KvDType::kFp8E4M3;
  c.layout = KvLayout::kHND;
  c.head_size = 64;
  c.group = 4;
  c.window = 40000;
  c.seq_lens = {65537};
  run_case(c, cache, rng, {{0, 0}, {1, -1}});
}

namespace {

// A mixed batch through AttentionBackend::forward: decodes (contexts already cached, the new
// token written by forward's cache write), prefills with and without cached context, and padded
// requests (seq_len 0, slot -1) at the end.
struct Mixed {
  // per request; the first num_decodes have q_len 1 (multi-token configurations: 1..its
  // decode_query_len)
  std::vector<int> q_lens, seq_lens;
  int num_decodes = 0;
  int padded = 0;  // trailing requests with seq_len 0 and one padded token each
};

void run_forward(const AttentionLayerConfig& cfg, const Mixed& m, KernelCache& cache,
                 std::mt19937_64& rng) {
  AttentionBackend attn(cfg);
  attn.prepare(cache);
  const auto& c = attn.config();
  const int64_t H = c.num_heads, KH = c.num_kv_heads, D = c.head_size, B = c.block_size;
  const int real = static_cast<int>(m.q_lens.size());
  const int n = real + m.padded;
  std::vector<int> qsl(n + 1, 0), seq(n, 0);
  for (int r = 0; r < n; ++r) {
    const int q = r < real ? m.q_lens[r] : 1;
    qsl[r + 1] = qsl[r] + q;
    seq[r] = r < real ? m.seq_lens[r] : 0;
  }
  const int T = qsl[n];
  int64_t max_blocks = 1, used = 0;
  for (int s : seq) {
    max_blocks = std::max<int64_t>(max_blocks, (s + B - 1) / B);
    used += (s + B - 1) / B;
  }
  const int64_t NB = used + 1;
  std::vector<int> phys(NB);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  std::vector<int> bt(n * max_blocks, 0x3fffffff);
  int64_t next = 0;
  for (int r = 0; r < real; ++r)
    for (int i = 0; i < (seq[r] + B - 1) / B; ++i) bt[r * max_blocks + i] = phys[next++];

  // Cached context in the cache; new tokens' keys and values in key/value with their slots.
  const DType dt = c.dtype;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<uint16_t> cache_host(2 * NB * B * KH * D, 0xffff);
  std::vector<double> kref(NB * B * KH * D, 0.0), vref(kref.size(), 0.0);
  std::vector<uint16_t> key(T * KH * D, 0xffff), value(T * KH * D, 0xffff), q(T * H * D);
  std::vector<int64_t> slots(T, -1);
  std::vector<double> qref(T * H * D);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = to_storage(dt, normal(rng));
    qref[i] = from_storage(dt, q[i]);
  }
  for (int r = 0; r < real; ++r) {
    const int s = seq[r], ql = m.q_lens[r];
    for (int pos = 0; pos < s; ++pos) {
      const int64_t blk = bt[r * max_blocks + pos / B], off = pos % B;
      const bool fresh = pos >= s - ql;
      const int64_t tok = qsl[r] + (pos - (s - ql));
      if (fresh) slots[tok] = blk * B + off;
      for (int64_t h = 0; h < KH; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const uint16_t kx = to_storage(dt, normal(rng)), vx = to_storage(dt, normal(rng));
          const size_t ref = ((blk * B + off) * KH + h) * D + d;
          kref[ref] = from_storage(dt, kx);
          vref[ref] = from_storage(dt, vx);
          if (fresh) {
            key[(tok * KH + h) * D + d] = kx;
            value[(tok * KH + h) * D + d] = vx;
          } else {
            cache_host[((0 * NB + blk) * B + off) * KH * D + h * D + d] = kx;
            cache_host[((1 * NB + blk) * B + off) * KH * D + h * D + d] = vx;
          }
        }
    }
  }
  const ScalarType st = scalar_type_of(dt);
  DeviceBuffer d_cache(cache_host.size() * 2), d_q(q.size() * 2), d_out(q.size() * 2),
      d_key(key.size() * 2), d_value(value.size() * 2), d_slots(T * 8), d_qsl(qsl.size() * 4),
      d_seq(n * 4), d_bt(bt.size() * 4), ws(attn.workspace_bytes());
  d_cache.upload(cache_host.data(), cache_host.size() * 2);
  d_q.upload(q.data(), q.size() * 2);
  d_key.upload(key.data(), key.size() * 2);
  d_value.upload(value.data(), value.size() * 2);
  d_slots.upload(slots.data(), T * 8);
  d_qsl.upload(qsl.data(), qsl.size() * 4);
  d_seq.upload(seq.data(), n * 4);
  d_bt.upload(bt.data(), bt.size() * 4);
  d_out.fill_bytes(0xff);

  AttentionMetadata md;
  md.query_start_loc = TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {n + 1});
  md.seq_lens = TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {n});
  md.block_table = TensorView::contiguous(d_bt.data(), ScalarType::kInt32, {n, max_blocks});
  md.slot_mapping = TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {T});
  md.num_reqs = n;
  md.num_decodes = m.num_decodes;
  md.num_decode_tokens = qsl[m.num_decodes];
  md.num_actual_tokens = T;
  md.max_query_len = *std::max_element(m.q_lens.begin(), m.q_lens.end());
  md.max_seq_len = *std::max_element(seq.begin(), seq.end());
  const TensorView qv = TensorView::contiguous(d_q.data(), st, {T, H, D});
  const TensorView ov = TensorView::contiguous(d_out.data(), st, {T, H, D});
  const TensorView kvv = TensorView::contiguous(d_key.data(), st, {T, KH, D});
  const TensorView vvv = TensorView::contiguous(d_value.data(), st, {T, KH, D});
  const TensorView cv = TensorView::contiguous(d_cache.data(), st, {2, NB, B, KH, D});
  attn.forward(qv, kvv, vvv, cv, ov, md, ws.data(), ws.bytes(), nullptr);
  GA_CU_CHECK(detail::driver().cuCtxSynchronize());

  std::vector<uint16_t> out(q.size());
  d_out.download(out.data(), out.size() * 2);
  RefProblem p = paged_problem(static_cast<int>(H), static_cast<int>(KH), static_cast<int>(D),
                               static_cast<int>(B), qsl, seq, bt, static_cast<int>(max_blocks));
  p.q = qref;
  p.k_cache = kref;
  p.v_cache = vref;
  p.scale = c.scale;
  p.window = c.window;
  p.soft_cap = c.soft_cap;
  const std::vector<double> want = reference_attention(p);
  std::vector<double> got(out.size());
  size_t nan = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    got[i] = from_storage(dt, out[i]);
    nan += is_nan16(dt, out[i]);
  }
  CHECK(nan == 0);
  // Decode rows and prefill rows separately, so neither hides in the other's norm.
  const size_t split = static_cast<size_t>(qsl[m.num_decodes]) * H * D;
  if (split > 0) {
    const double err = relative_l2(std::vector<double>(got.begin(), got.begin() + split),
                                   std::vector<double>(want.begin(), want.begin() + split));
    INFO("decode rows: relative L2 " << err);
    CHECK(err <= tolerance(dt));
  }
  if (split < got.size()) {
    const double err = relative_l2(std::vector<double>(got.begin() + split, got.end()),
                                   std::vector<double>(want.begin() + split, want.end()));
    INFO("prefill rows: relative L2 " << err);
    CHECK(err <= tolerance(dt));
  }
  // Padded requests' rows are exactly zero.
  for (int r = real; r < n; ++r)
    for (int64_t i = qsl[r] * H * D; i < qsl[r + 1] * H * D; ++i) CHECK(out[i] == 0);
  // Every new token's key and value landed in its slot (by the cache write kernel, or by the
  // decode kernel itself on a decode-only batch), bit for bit; nothing else changed.
  std::vector<uint16_t> after(cache_host.size());
  d_cache.download(after.data(), after.size() * 2);
  std::vector<uint16_t> expect = cache_host;
  for (int64_t tok = 0; tok < T; ++tok) {
    if (slots[tok] < 0) continue;
    for (int64_t i = 0; i < KH * D; ++i) {
      expect[slots[tok] * KH * D + i] = key[tok * KH * D + i];
      expect[(NB * B + slots[tok]) * KH * D + i] = value[tok * KH * D + i];
    }
  }
  size_t cache_mismatches = 0;
  for (size_t i = 0; i < after.size(); ++i) cache_mismatches += after[i] != expect[i];
  CHECK(cache_mismatches == 0);
}

}  // namespace

TEST_CASE("gpu decode: multi-token decode (speculative tokens) through forward") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  AttentionLayerConfig cfg = layer_config(8, 2, 128, 8192, 16);
  cfg.decode_query_len = 4;  // 3 speculative tokens
  {
    INFO("decode only: 4 tokens each, some shorter, one long request (split), padding");
    Mixed m;
    m.q_lens = {4, 4, 1, 3, 4, 2};
    m.seq_lens = {4, 300, 17, 2000, 8000, 40};
    m.num_decodes = 8;
    m.padded = 2;
    run_forward(cfg, m, cache, rng);
  }
  {
    INFO("decodes then prefills");
    Mixed m;
    m.q_lens = {4, 2, 4, 40, 3, 120};
    m.seq_lens = {33, 700, 4, 40, 300, 520};
    m.num_decodes = 3;
    run_forward(cfg, m, cache, rng);
  }
  {
    INFO("group 8 (two blocks of columns), 8 tokens, window, soft cap, fp16");
    AttentionLayerConfig c2 = cfg;
    c2.num_heads = 16;
    c2.decode_query_len = 8;
    c2.window = 100;
    c2.soft_cap = 8.0f;
    c2.dtype = DType::kFloat16;
    Mixed m;
    m.q_lens = {8, 5, 8, 1};
    m.seq_lens = {8, 99, 3000, 250};
    m.num_decodes = 4;
    run_forward(c2, m, cache, rng);
  }
  {
    INFO("group 1, 16 tokens");
    AttentionLayerConfig c3 = cfg;
    c3.num_heads = 2;
    c3.decode_query_len = 16;
    Mixed m;
    m.q_lens = {16, 9, 16};
    m.seq_lens = {16, 1000, 5000};
    m.num_decodes = 3;
    run_forward(c3, m, cache, rng);
  }
}

TEST_CASE("gpu decode: forward on decode-only, mixed and padded batches") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const AttentionLayerConfig cfg = layer_config(8, 2, 128, 4096, 16);
  {
    INFO("decode only, padded to a capture size");
    Mixed m;
    m.q_lens = {1, 1, 1, 1, 1};
    m.seq_lens = {1, 17, 300, 2000, 4096};
    m.num_decodes = 8;  // three padded decodes at the end
    m.padded = 3;
    run_forward(cfg, m, cache, rng);
  }
  {
    INFO("decodes then prefills (fresh, chunked over cached context, one token)");
    Mixed m;
    m.q_lens = {1, 1, 1, 40, 7, 1, 120};
    m.seq_lens = {33, 1, 700, 40, 300, 65, 520};
    m.num_decodes = 3;
    run_forward(cfg, m, cache, rng);
  }
  {
    INFO("window, soft cap, fp16, group 1");
    AttentionLayerConfig c2 = cfg;
    c2.dtype = DType::kFloat16;
    c2.num_heads = 2;
    c2.window = 100;
    c2.soft_cap = 8.0f;
    Mixed m;
    m.q_lens = {1, 1, 64, 3};
    m.seq_lens = {250, 99, 64, 500};
    m.num_decodes = 2;
    run_forward(c2, m, cache, rng);
  }
  {
    // KV head pairs (head 64, NHD): the fused write stores and patches both heads' rows; 3 KV
    // heads, so the last pair has no second head; early prologue.
    INFO("KV head pairs: head 64, 12/3 heads, early prologue, decodes then a prefill");
    AttentionLayerConfig c4 = layer_config(12, 3, 64, 4096, 16);
    c4.overlap_previous_kernel = true;
    Mixed m;
    m.q_lens = {1, 1, 1, 1, 30};
    m.seq_lens = {16, 17, 1000, 2049, 300};
    m.num_decodes = 4;
    run_forward(c4, m, cache, rng);
  }
  for (const std::pair<int, int> ml : std::vector<std::pair<int, int>>{{8192, 8190},
                                                                       {8192, 3000},
                                                                       {8192, 40},
                                                                       {1024, 1024},
                                                                       {1024, 1000},
                                                                       {1024, 520},
                                                                       {1024, 40}}) {
    // With the early prologue a split launch takes a deeper pipeline for longer splits
    // (DecodeGrid::early_stages): one request over 8 KV heads at max_model_len 8192 is a grid of
    // 16 splits, 8 tiles a warp at the longest, 4 stages, each warp's first 3 tiles issued before
    // the wait; 3000 tokens give 3 tiles a warp, 40 one split. At max_model_len 1024 (the B=1
    // step's layer) on sm_90 a cluster launch of 8 splits (kAutoClusterSplits), 2 tiles a warp
    // at the longest, 3 stages, both tiles issued before the wait; 520 tokens leave the
    // cluster's last block idle.
    const int max_len = ml.first, len = ml.second;
    INFO("decode only, early prologue, deeper pipeline: 32/8 heads, max_model_len "
         << max_len << ", " << len << " tokens");
    AttentionLayerConfig c5 = layer_config(32, 8, 128, max_len, 16);
    c5.overlap_previous_kernel = true;
    Mixed m;
    m.q_lens = {1};
    m.seq_lens = {len};
    m.num_decodes = 1;
    run_forward(c5, m, cache, rng);
  }
  for (int many : {0, 1}) {
    // The fused write's new rows are patched in by their owner warp; with the early prologue the
    // cache is read before the wait. Two head chunks per KV head (group 20); a batch of 3 splits,
    // one of 40 does not.
    INFO("decode only, early prologue, group 20, "
         << std::string(many ? "40 requests" : "3 requests"));
    AttentionLayerConfig c3 = cfg;
    c3.num_heads = 40;
    c3.overlap_previous_kernel = true;
    c3.max_num_seqs = 48;
    Mixed m;
    std::uniform_int_distribution<int> len(1, 3000);
    const int n = many ? 40 : 3;
    for (int r = 0; r < n; ++r) {
      m.q_lens.push_back(1);
      m.seq_lens.push_back(r == 0 ? 16 : r == 1 ? 17 : len(rng));
    }
    m.num_decodes = n;
    run_forward(c3, m, cache, rng);
  }
}

TEST_CASE("gpu decode: forward at the policy's alone depth of long splits") {
  // runtime/decode.cpp [policy: alone depth, long splits]: on a 132-SM device with head 128 (an
  // H100), 8 decodes of 8192 tokens over 8 KV heads are 2 splits of 64 tiles a warp at the
  // shallow depth alone, the deepest with overlap_previous_kernel. Checked against the float64
  // reference on whatever grid this device takes (the grid is printed).
  GA_REQUIRE_GPU();
  if (reduced()) return;
  TempKernelCache cache;
  auto rng = make_rng();
  const int decodes = 8, len = 8192;
  for (bool early : {false, true}) {
    AttentionLayerConfig c = layer_config(32, 8, 128, len, decodes);
    c.overlap_previous_kernel = early;
    AttentionBackend probe(c);
    probe.prepare(cache);
    MESSAGE(decodes << " x " << len << std::string(early ? ", early prologue" : "") << ": "
                    << probe.decode_max_splits(decodes) << " splits, "
                    << probe.decode_stages(decodes) << " stages alone");
    INFO(decodes << " decodes of " << len << " tokens, early prologue " << early);
    Mixed m;
    for (int r = 0; r < decodes; ++r) {
      m.q_lens.push_back(1);
      m.seq_lens.push_back(r == 0 ? len : len - 1 - r % 37);
    }
    m.num_decodes = decodes;
    run_forward(c, m, cache, rng);
  }
}

TEST_CASE("gpu decode: one captured graph serves every context length") {
  GA_REQUIRE_GPU();
  if (reduced()) return;
  TempKernelCache cache;
  auto rng = make_rng();
  DecodeCase c;
  c.num_kv_heads = 2;
  c.group = 4;
  const int n = 4, max_len = 8192;
  c.seq_lens = {max_len, max_len, max_len, max_len};  // sizes the cache and block table
  Batch b;
  build_batch(c, rng, b);
  const Kernels k = load(c, cache);
  detail::DecodeDevice dev = k.device;
  dev.use_clusters = true;  // captured as a cluster launch where the device allows it
  const detail::DecodeGrid grid =
      detail::decode_grid(n, c.num_kv_heads, c.group, max_len, 0, c.head_size, c.kv, dev);
  DeviceBuffer ws(detail::decode_workspace_bytes(n, 8, 128, grid.max_splits));
  DeviceBuffer counters(detail::decode_counter_count(n, c.num_kv_heads, c.group) * 4);
  const detail::DecodeLaunch a = launch_args(c, b, {grid.max_splits, grid.stages, grid.cluster},
                                             1.0f / std::sqrt(128.0f), ws, counters);
  // Cluster launches outside what prepare_decode_kernel sized them for are refused up front.
  detail::DecodeLaunch deep = a;
  deep.cluster = true;
  deep.stages = ga_decode_max_stages(c.head_size, 2);
  CHECK_THROWS_WITH_AS(detail::launch_decode(*k.decode, deep, nullptr),
                       doctest::Contains("a cluster launch runs at most 3 stages"), Error);
  detail::DecodeLaunch wide = a;
  wide.cluster = true;
  wide.max_splits = 17;
  CHECK_THROWS_WITH_AS(detail::launch_decode(*k.decode, wide, nullptr),
                       doctest::Contains("max_splits <= 16"), Error);
  Stream stream;
  const CapturedDecode captured(k, a, stream);
  // New lengths each replay, written into the same device buffers the graph reads.
  for (const std::vector<int>& lens :
       {std::vector<int>{1, 0, 8192, 4097}, std::vector<int>{300, 7000, 16, 0},
        std::vector<int>{8191, 2, 1, 65}}) {
    DecodeCase now = c;
    now.seq_lens = lens;
    INFO(describe(now));
    b.d_seq.upload(lens.data(), n * 4);
    b.d_out.fill_bytes(0xff);
    captured.replay(stream);
    std::vector<uint16_t> out(n * b.token_stride);
    b.d_out.download(out.data(), out.size() * 2);
    std::vector<int> rows = {0, 1, 2, 3};
    // Unread cache slots hold NaN, but the slots below each new length hold data: the window
    // of valid reference data is the original max_len fill.
    const std::vector<double> want = reference_rows(now, b, rows, a.scale);
    std::vector<double> got;
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 8 * 128; ++i)
        got.push_back(from_storage(c.dtype, out[r * b.token_stride + i]));
    const double err = relative_l2(got, want);
    INFO("relative L2 " << err);
    CHECK(err <= tolerance(c.dtype));
    for (int r = 0; r < n; ++r)
      if (lens[r] == 0)
        for (int i = 0; i < 8 * 128; ++i) CHECK(out[r * b.token_stride + i] == 0);
  }
}

TEST_CASE("gpu decode: the last split combines in a captured graph, counters back at zero") {
  // The counter path (no clusters) of a B=1 launch, as the 32-layer B=1 step runs it: each
  // replay has a new length, so a new number of splits arrives on the same counters (1 to 64
  // splits: one, two and four rounds of the combine's loads), and each replay must match the
  // reference and leave every counter at zero for the next.
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  DecodeCase c;
  c.num_kv_heads = 2;
  c.group = 4;
  const int max_len = 4096;
  c.seq_lens = {max_len};  // sizes the cache and block table
  Batch b;
  build_batch(c, rng, b);
  const Kernels k = load(c, cache);
  const float scale = 1.0f / std::sqrt(128.0f);
  for (const int splits : {16, 9, 64}) {
    DeviceBuffer ws(detail::decode_workspace_bytes(1, 8, 128, splits));
    DeviceBuffer counters(detail::decode_counter_count(1, c.num_kv_heads, c.group) * 4);
    counters.fill_bytes(0);
    const detail::DecodeLaunch a = launch_args(c, b, {splits, 0}, scale, ws, counters);
    Stream stream;
    const CapturedDecode captured(k, a, stream);
    for (const int len : {4096, 1, 17, 65, 300, 2049, 4095, 64, 1000, 4096}) {
      DecodeCase now = c;
      now.seq_lens = {len};
      INFO("max_splits " << splits << ", " << describe(now));
      b.d_seq.upload(&len, 4);
      b.d_out.fill_bytes(0xff);
      captured.replay(stream);
      std::vector<uint16_t> out(b.token_stride);
      b.d_out.download(out.data(), out.size() * 2);
      const std::vector<double> want = reference_rows(now, b, {0}, scale);
      std::vector<double> got;
      for (int i = 0; i < 8 * 128; ++i) got.push_back(from_storage(c.dtype, out[i]));
      const double err = relative_l2(got, want);
      INFO("relative L2 " << err);
      CHECK(err <= tolerance(c.dtype));
      std::vector<unsigned> left(counters.bytes() / 4);
      counters.download(left.data(), counters.bytes());
      CHECK(std::all_of(left.begin(), left.end(), [](unsigned x) { return x == 0; }));
    }
  }
}

TEST_CASE("gpu decode: bad arguments are rejected with a clear error") {
  GA_REQUIRE_GPU();
  AttentionLayerConfig cfg = layer_config(8, 3, 128, 100, 4);
  CHECK(select_decode_kernel(cfg) == DecodeKernel::kNone);
  CHECK_THROWS_WITH_AS(AttentionBackend{cfg}, doctest::Contains("num_heads 8 and num_kv_heads 3"),
                       Error);
  cfg.num_kv_heads = 2;
  CHECK(select_decode_kernel(cfg) == DecodeKernel::kSplitKv);
  cfg.head_size = 100;
  CHECK(select_decode_kernel(cfg) == DecodeKernel::kNone);
  CHECK_THROWS_WITH_AS(AttentionBackend{cfg}, doctest::Contains("head size 100 is not supported"),
                       Error);
  cfg.head_size = 128;
  cfg.window = -2;
  CHECK_THROWS_WITH_AS(AttentionBackend{cfg}, doctest::Contains("window -2"), Error);
  cfg.window = 0;
  cfg.max_num_seqs = 0;
  CHECK_THROWS_WITH_AS(AttentionBackend{cfg}, doctest::Contains("max_num_seqs 0"), Error);
  cfg.max_num_seqs = 4;
  AttentionBackend attn(cfg);
  CHECK_THROWS_WITH_AS(attn.workspace_bytes(), doctest::Contains("call prepare() first"), Error);
  AttentionMetadata md;
  CHECK_THROWS_WITH_AS(attn.forward({}, {}, {}, {}, {}, md, nullptr, 0, nullptr),
                       doctest::Contains("call prepare()"), Error);
  TempKernelCache cache;
  attn.prepare(cache);
  CHECK(attn.workspace_bytes() > 0);
  // Too many decodes for the workspace, and a query of the wrong head count.
  DeviceBuffer q(16 * 8 * 128 * 2);
  const TensorView qv = TensorView::contiguous(q.data(), ScalarType::kBFloat16, {16, 8, 128});
  md.num_reqs = md.num_decodes = md.num_decode_tokens = md.num_actual_tokens = 5;
  CHECK_THROWS_WITH_AS(attn.forward(qv, {}, {}, {}, qv, md, nullptr, 0, nullptr),
                       doctest::Contains("exceeds max_num_seqs 4"), Error);
  md.num_reqs = md.num_decodes = md.num_decode_tokens = md.num_actual_tokens = 2;
  const TensorView bad = TensorView::contiguous(q.data(), ScalarType::kBFloat16, {16, 4, 256});
  CHECK_THROWS_WITH_AS(attn.forward(bad, {}, {}, {}, bad, md, nullptr, 0, nullptr),
                       doctest::Contains("must have 8 heads of size 128"), Error);
  md.num_decode_tokens = 3;
  CHECK_THROWS_WITH_AS(
      attn.forward(qv, {}, {}, {}, qv, md, nullptr, 0, nullptr),
      doctest::Contains("num_decode_tokens 3 must be in [2, num_decodes * decode_query_len 2]"),
      Error);
}
