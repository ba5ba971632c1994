// SPDX-License-Identifier: Apache-2.0
// Block-sparse attention (vLLM's BlocksparseFlashAttention) on the GPU through
// AttentionBackend::forward: decode and prefill against the float64 reference with the pattern's
// own mask builder (testing/reference.cpp), a captured decode graph replayed with new lengths,
// and decodes that must not read the KV blocks their heads do not see (those hold NaN).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

struct SparseCase {
  DType dtype = DType::kBFloat16;
  KvDType kv = KvDType::kAuto;
  int kv_heads = 2, group = 4, head = 128, block = 16;
  BlockSparseParams bs;
  int window = 0;
  float soft_cap = 0.0f;
  bool alibi = false, sinks = false;
  std::vector<int> q_lens, seq_lens;  // per request; the first num_decodes have q_len 1
  int num_decodes = 0;
  // Decode-only batches: fill every (page, KV head) that no head of its group sees from its
  // request's decode query with NaN (the reference keeps finite values there).
  bool poison_unseen = false;
};

std::string describe(const SparseCase& c) {
  std::string s = std::string(to_string(c.dtype)) + " kv " + to_string(c.kv) + " kvh " +
                  std::to_string(c.kv_heads) + " g " + std::to_string(c.group) + " d " +
                  std::to_string(c.head) + " b " + std::to_string(c.block) + " sparse " +
                  std::to_string(c.bs.block_size) + " local " + std::to_string(c.bs.local_blocks) +
                  " vs " + std::to_string(c.bs.vert_stride) + " step " +
                  std::to_string(c.bs.head_sliding_step) + " offset " +
                  std::to_string(c.bs.active_head_offset) + " window " + std::to_string(c.window) +
                  " cap " + std::to_string(c.soft_cap) + (c.alibi ? " alibi" : "") +
                  (c.sinks ? " sinks" : "") + " decodes " + std::to_string(c.num_decodes) + " lens";
  for (size_t r = 0; r < c.seq_lens.size(); ++r)
    s += " " + std::to_string(c.q_lens[r]) + "/" + std::to_string(c.seq_lens[r]);
  return s;
}

AttentionLayerConfig config_of(const SparseCase& c, int max_len, int max_seqs) {
  AttentionLayerConfig cfg =
      layer_config(c.kv_heads * c.group, c.kv_heads, c.head, max_len, max_seqs);
  cfg.block_size = c.block;
  cfg.dtype = c.dtype;
  cfg = with_kv(cfg, c.kv, 0.5f);  // a power of two: the fused write's division is exact
  cfg.window = c.window;
  cfg.soft_cap = c.soft_cap;
  cfg.blocksparse = c.bs;
  return cfg;
}

RefBlockSparse ref_of(const BlockSparseParams& b) {
  RefBlockSparse r;
  r.block_size = b.block_size;
  r.local_blocks = b.local_blocks;
  r.vert_stride = b.vert_stride;
  r.head_sliding_step = b.head_sliding_step;
  r.active_head_offset = b.active_head_offset;
  return r;
}

// One batch's host data and its device buffers, sized once for max_len tokens a request (so
// that a captured graph keeps its pointers while the lengths change).
struct SparseBatch {
  int n = 0, T = 0;
  int64_t H = 0, KH = 0, D = 0, B = 0, W = 0, NB = 0;
  std::vector<int> qsl, seq, bt;
  std::vector<int64_t> slots;
  std::vector<double> qref, kref, vref, slopes, sink_logits;
  DeviceBuffer d_cache, d_q, d_out, d_key, d_value, d_slots, d_qsl, d_seq, d_bt, d_alibi, d_sinks;

  SparseBatch(const SparseCase& c, int requests, int tokens, int max_len)
      : n(requests),
        T(tokens),
        H(c.kv_heads * c.group),
        KH(c.kv_heads),
        D(c.head),
        B(c.block),
        W((max_len + c.block - 1) / c.block),
        NB(int64_t{requests} * W + 1) {
    const int64_t elem = c.kv == KvDType::kAuto ? 2 : 1;
    d_cache = DeviceBuffer(2 * NB * B * KH * D * elem);
    d_q = DeviceBuffer(T * H * D * 2);
    d_out = DeviceBuffer(T * H * D * 2);
    d_key = DeviceBuffer(T * KH * D * 2);
    d_value = DeviceBuffer(T * KH * D * 2);
    d_slots = DeviceBuffer(T * 8);
    d_qsl = DeviceBuffer((n + 1) * 4);
    d_seq = DeviceBuffer(n * 4);
    d_bt = DeviceBuffer(n * W * 4);
    d_alibi = DeviceBuffer(H * 4);
    d_sinks = DeviceBuffer(H * 4);
  }

  // Fresh random data for c's lengths (n requests of T tokens in all).
  void fill(const SparseCase& c, std::mt19937_64& rng) {
    const int real = static_cast<int>(c.seq_lens.size());
    REQUIRE(real == n);
    qsl.assign(n + 1, 0);
    seq.assign(n, 0);
    for (int r = 0; r < n; ++r) {
      qsl[r + 1] = qsl[r] + c.q_lens[r];
      seq[r] = c.seq_lens[r];
    }
    REQUIRE(qsl[n] == T);
    std::vector<int> phys(NB);
    std::iota(phys.begin(), phys.end(), 0);
    std::shuffle(phys.begin(), phys.end(), rng);
    bt.assign(n * W, 0);
    for (int r = 0, next = 0; r < n; ++r)
      for (int64_t i = 0; i < W; ++i) bt[r * W + i] = phys[next++];
    const DType dt = c.dtype;
    const bool fp8 = c.kv != KvDType::kAuto;
    const double kv_scale = fp8 ? 0.5 : 1.0;
    std::normal_distribution<double> normal(0.0, 1.0);
    // A KV value exactly as the cache holds it: 16-bit, or an fp8 byte times the scale (which
    // the 16-bit new key holds exactly too).
    const auto draw = [&](uint16_t& bits16, uint8_t& byte) {
      if (!fp8) {
        bits16 = to_storage(dt, normal(rng));
        return from_storage(dt, bits16);
      }
      // Magnitudes 2^-2..2^1 with random signs and mantissas (e4m3: bias 7, e5m2: bias 15).
      byte = c.kv == KvDType::kFp8E4M3
                 ? static_cast<uint8_t>((rng() & 0x87) | ((5 + rng() % 4) << 3))
                 : static_cast<uint8_t>((rng() & 0x83) | ((13 + rng() % 4) << 2));
      const double v =
          (c.kv == KvDType::kFp8E4M3 ? e4m3_to_double(byte) : e5m2_to_double(byte)) * kv_scale;
      bits16 = to_storage(dt, v);
      return v;
    };
    std::vector<uint16_t> q(T * H * D), key(T * KH * D, 0), value(T * KH * D, 0);
    qref.assign(q.size(), 0.0);
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = to_storage(dt, normal(rng));
      qref[i] = from_storage(dt, q[i]);
    }
    const size_t cache_elems = static_cast<size_t>(NB * B * KH * D);
    std::vector<uint16_t> cache16(fp8 ? 0 : 2 * cache_elems, 0);
    std::vector<uint8_t> cache8(fp8 ? 2 * cache_elems : 0, 0);
    kref.assign(cache_elems, 0.0);
    vref.assign(cache_elems, 0.0);
    slots.assign(T, -1);
    for (int r = 0; r < real; ++r) {
      const int s = seq[r], ql = c.q_lens[r];
      for (int pos = 0; pos < s; ++pos) {
        const int64_t blk = bt[r * W + pos / B], off = pos % B;
        const bool fresh = pos >= s - ql;
        const int64_t tok = qsl[r] + (pos - (s - ql));
        if (fresh) slots[tok] = blk * B + off;
        for (int64_t h = 0; h < KH; ++h)
          for (int64_t d = 0; d < D; ++d) {
            const size_t at = static_cast<size_t>(((blk * B + off) * KH + h) * D + d);
            uint16_t k16 = 0, v16 = 0;
            uint8_t k8 = 0, v8 = 0;
            kref[at] = draw(k16, k8);
            vref[at] = draw(v16, v8);
            if (fresh) {
              key[(tok * KH + h) * D + d] = k16;
              value[(tok * KH + h) * D + d] = v16;
            } else if (fp8) {
              cache8[at] = k8;
              cache8[cache_elems + at] = v8;
            } else {
              cache16[at] = k16;
              cache16[cache_elems + at] = v16;
            }
          }
      }
    }
    if (c.poison_unseen) {
      REQUIRE(c.num_decodes == real);
      int max_seq = 1;
      for (int s : seq) max_seq = std::max(max_seq, s);
      const int sb = c.bs.block_size;
      const int nsb = (max_seq + sb - 1) / sb;
      const auto mask =
          blocksparse_block_mask(ref_of(c.bs), static_cast<int>(H), static_cast<int>(KH), nsb);
      int64_t poisoned = 0;
      for (int r = 0; r < real; ++r) {
        const int qb = (seq[r] - 1) / sb;
        for (int64_t page = 0; page * B < seq[r]; ++page) {
          const int kb = static_cast<int>(page * B / sb);
          for (int64_t kh = 0; kh < KH; ++kh) {
            bool seen = false;
            for (int64_t h = kh * c.group; h < (kh + 1) * c.group; ++h)
              seen = seen || mask[(static_cast<size_t>(h) * nsb + qb) * nsb + kb];
            if (seen) continue;
            ++poisoned;
            const int64_t blk = bt[r * W + page];
            for (int64_t off = 0; off < B; ++off)
              for (int64_t d = 0; d < D; ++d) {
                const size_t at = static_cast<size_t>(((blk * B + off) * KH + kh) * D + d);
                if (fp8) {
                  cache8[at] = cache8[cache_elems + at] = 0x7f;  // NaN in e4m3 and e5m2
                } else {
                  cache16[at] = cache16[cache_elems + at] = 0x7fff;  // NaN in bf16 and fp16
                }
              }
          }
        }
      }
      INFO(describe(c));
      REQUIRE(poisoned > 0);  // the case must have unseen blocks to test anything
    }
    slopes = random_alibi_slopes(rng, static_cast<int>(H), c.alibi);
    sink_logits = random_sinks(rng, static_cast<int>(H), c.sinks);
    if (c.alibi) d_alibi.upload(to_floats(slopes).data(), H * 4);
    if (c.sinks) d_sinks.upload(to_floats(sink_logits).data(), H * 4);
    if (fp8)
      d_cache.upload(cache8.data(), cache8.size());
    else
      d_cache.upload(cache16.data(), cache16.size() * 2);
    d_q.upload(q.data(), q.size() * 2);
    d_key.upload(key.data(), key.size() * 2);
    d_value.upload(value.data(), value.size() * 2);
    d_slots.upload(slots.data(), T * 8);
    d_qsl.upload(qsl.data(), qsl.size() * 4);
    d_seq.upload(seq.data(), n * 4);
    d_bt.upload(bt.data(), bt.size() * 4);
    d_out.fill_bytes(0xff);
  }

  AttentionMetadata metadata(const SparseCase& c) const {
    AttentionMetadata md;
    md.query_start_loc = TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {n + 1});
    md.seq_lens = TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {n});
    md.block_table = TensorView::contiguous(d_bt.data(), ScalarType::kInt32, {n, W});
    md.slot_mapping = TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {T});
    md.num_reqs = n;
    md.num_decodes = c.num_decodes;
    md.num_decode_tokens = qsl[c.num_decodes];
    md.num_actual_tokens = T;
    md.max_query_len = 1;
    for (size_t r = c.num_decodes; r < c.q_lens.size(); ++r)
      md.max_query_len = std::max(md.max_query_len, c.q_lens[r]);
    md.max_seq_len = static_cast<int>(W * B);
    return md;
  }

  void forward(const AttentionBackend& attn, const SparseCase& c, const DeviceBuffer& ws,
               CUstream stream) const {
    const ScalarType st = scalar_type_of(c.dtype);
    const ScalarType ct = c.kv == KvDType::kFp8E4M3   ? ScalarType::kFloat8E4M3
                          : c.kv == KvDType::kFp8E5M2 ? ScalarType::kFloat8E5M2
                                                      : st;
    attn.forward(TensorView::contiguous(d_q.data(), st, {T, H, D}),
                 TensorView::contiguous(d_key.data(), st, {T, KH, D}),
                 TensorView::contiguous(d_value.data(), st, {T, KH, D}),
                 TensorView::contiguous(d_cache.data(), ct, {2, NB, B, KH, D}),
                 TensorView::contiguous(d_out.data(), st, {T, H, D}), metadata(c), ws.data(),
                 ws.bytes(), stream);
  }

  // The output against the float64 reference: no NaN, decode and prefill rows each within the
  // dtype's tolerance.
  void check(const SparseCase& c, float scale) const {
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<uint16_t> out(static_cast<size_t>(T * H * D));
    d_out.download(out.data(), out.size() * 2);
    RefProblem p = paged_problem(static_cast<int>(H), static_cast<int>(KH), static_cast<int>(D),
                                 static_cast<int>(B), qsl, seq, bt, static_cast<int>(W));
    p.q = qref;
    p.k_cache = kref;
    p.v_cache = vref;
    p.scale = scale;
    p.window = c.window;
    p.soft_cap = c.soft_cap;
    p.alibi_slopes = slopes;
    p.sinks = sink_logits;
    p.blocksparse = ref_of(c.bs);
    const std::vector<double> want = reference_attention(p);
    std::vector<double> got(out.size());
    size_t nan = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      got[i] = from_storage(c.dtype, out[i]);
      nan += is_nan16(c.dtype, out[i]);
    }
    INFO(describe(c));
    CHECK(nan == 0);
    const size_t split = static_cast<size_t>(qsl[c.num_decodes] * H * D);
    const size_t end = static_cast<size_t>(qsl[c.q_lens.size()] * H * D);
    if (split > 0) {
      const double err = relative_l2(std::vector<double>(got.begin(), got.begin() + split),
                                     std::vector<double>(want.begin(), want.begin() + split));
      INFO("decode rows: relative L2 " << err);
      CHECK(err <= tolerance(c.dtype));
    }
    if (split < end) {
      const double err = relative_l2(std::vector<double>(got.begin() + split, got.begin() + end),
                                     std::vector<double>(want.begin() + split, want.begin() + end));
      INFO("prefill rows: relative L2 " << err);
      CHECK(err <= tolerance(c.dtype));
    }
  }
};

int tokens_of(const SparseCase& c) { return std::accumulate(c.q_lens.begin(), c.q_lens.end(), 0); }

void run_case(const SparseCase& c, KernelCache& cache, std::mt19937_64& rng) {
  INFO(describe(c));
  const int max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const int n = static_cast<int>(c.seq_lens.size());
  AttentionBackend attn(config_of(c, max_len, n));
  attn.prepare(cache);
  SparseBatch b(c, n, tokens_of(c), max_len);
  b.fill(c, rng);
  SparseCase run = c;
  AttentionLayerConfig cfg = attn.config();
  DeviceBuffer ws(attn.workspace_bytes());
  if (c.alibi || c.sinks) {
    cfg.alibi_slopes = c.alibi ? static_cast<const float*>(b.d_alibi.data()) : nullptr;
    cfg.sinks = c.sinks ? static_cast<const float*>(b.d_sinks.data()) : nullptr;
    AttentionBackend with_terms(cfg);
    with_terms.prepare(cache);
    b.forward(with_terms, run, ws, nullptr);
    b.check(run, with_terms.config().scale);
    return;
  }
  b.forward(attn, run, ws, nullptr);
  b.check(run, attn.config().scale);
}

BlockSparseParams pattern(int sparse, int local, int vs, int step, int offset = 0) {
  BlockSparseParams p;
  p.block_size = sparse;
  p.local_blocks = local;
  p.vert_stride = vs;
  p.head_sliding_step = step;
  p.active_head_offset = offset;
  return p;
}

std::vector<int> lens(std::mt19937_64& rng, int count, int lo, int hi) {
  std::vector<int> v(count);
  for (int& x : v) x = lo + static_cast<int>(rng() % (hi - lo + 1));
  return v;
}

}  // namespace

TEST_CASE("gpu blocksparse: decode matches the float64 reference (dtypes, fp8, GQA, patterns)") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<SparseCase> cases;
  const int groups[] = {1, 4, 8};
  const int sparse_blocks[] = {16, 64, 128};
  int i = 0;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3})
      for (int g : groups)
        for (int sb : sparse_blocks) {
          if (kv != KvDType::kAuto && dt == DType::kFloat16 && sb == 16) continue;
          SparseCase c;
          c.dtype = dt;
          c.kv = kv;
          c.group = g;
          c.kv_heads = g == 8 ? 1 : 2;
          c.block = sb == 16 ? 16 : (i % 2 ? 16 : 32);
          const int local = 1 + i % 4, vs = 2 + (i * 3) % 7;
          // homo, slide on query heads (vLLM's default), slide on KV heads, tensor-parallel rank
          const int kind = i % 4;
          const int heads = c.kv_heads * g;
          const int step = kind == 0   ? 0
                           : kind == 2 ? -std::max(1, vs / (2 * c.kv_heads))
                                       : std::max(1, vs / (2 * heads));
          c.bs = pattern(sb, local, vs, step, kind == 3 ? heads : 0);
          c.seq_lens = lens(rng, 5, 1, 5000);
          c.seq_lens[0] = 1;
          c.seq_lens[1] = sb * (local + vs) + 1;  // just past a sparse block's end
          c.q_lens.assign(c.seq_lens.size(), 1);
          c.num_decodes = static_cast<int>(c.seq_lens.size());
          cases.push_back(c);
          ++i;
        }
  // Window, soft cap, ALiBi and sinks with a sparse pattern.
  SparseCase extra;
  extra.bs = pattern(64, 2, 4, 1);
  extra.window = 700;
  extra.soft_cap = 30.0f;
  extra.alibi = extra.sinks = true;
  extra.seq_lens = {3000, 65, 1500, 4097};
  extra.q_lens.assign(4, 1);
  extra.num_decodes = 4;
  cases.push_back(extra);
  if (reduced()) cases.resize(3);  // (compute-sanitizer)
  for (const SparseCase& c : cases) run_case(c, cache, rng);
}

TEST_CASE("gpu blocksparse: prefill and mixed batches match the float64 reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  int i = 0;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int g : {1, 4, 8})
      for (int sb : {16, 64, 128}) {
        SparseCase c;
        c.dtype = dt;
        c.kv = i % 3 == 2 ? KvDType::kFp8E4M3 : KvDType::kAuto;
        // Some 16-bit cases at head sizes 64 and 256 (on sm_90 the wgmma kernel's other tile
        // shapes: 256 has 64-key tiles and no softmax / P V overlap).
        c.head = i % 6 == 1 ? 64 : i % 6 == 4 ? 256 : 128;
        c.group = g;
        c.kv_heads = g == 8 ? 1 : 2;
        const int local = 1 + i % 4, vs = 2 + (i * 5) % 7;
        const int heads = c.kv_heads * g;
        const int kind = i % 4;
        const int step = kind == 0   ? 0
                         : kind == 2 ? -std::max(1, vs / (2 * c.kv_heads))
                                     : std::max(1, vs / (2 * heads));
        c.bs = pattern(sb, local, vs, step, kind == 3 ? heads : 0);
        // Two decodes, then prefills: a whole prompt, a chunk after cached context, one token.
        c.seq_lens = {1 + static_cast<int>(rng() % 3000), 1 + static_cast<int>(rng() % 3000),
                      1 + static_cast<int>(rng() % 1500), 2000 + static_cast<int>(rng() % 2000),
                      1 + static_cast<int>(rng() % 500)};
        c.q_lens = {1, 1, c.seq_lens[2], 1 + static_cast<int>(rng() % 700), 1};
        c.num_decodes = 2;
        if (i % 5 == 4) {
          c.window = 300;
          c.soft_cap = 20.0f;
          c.alibi = c.sinks = true;
        }
        if (!reduced() || i < 3) run_case(c, cache, rng);  // (compute-sanitizer: a few)
        ++i;
      }
}

TEST_CASE("gpu blocksparse: decode reads no KV block that its heads do not see") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  // Unseen (page, KV head) pairs hold NaN; one read of them would put NaN into the output.
  for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3})
    for (int step : {0, 1, -1}) {
      SparseCase c;
      c.kv = kv;
      c.group = 4;
      c.kv_heads = 2;
      c.bs = pattern(64, 2, 8, step);
      c.seq_lens = {5000, 4097, 2048, 700, 1};
      c.q_lens.assign(5, 1);
      c.num_decodes = 5;
      c.poison_unseen = true;
      run_case(c, cache, rng);
    }
}

TEST_CASE("gpu blocksparse: a captured decode graph replays new lengths like eager forward") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  SparseCase c;
  c.bs = pattern(64, 4, 8, 1);
  const int n = 4, max_len = 6000;
  c.seq_lens = {max_len, max_len, max_len, max_len};
  c.q_lens.assign(n, 1);
  c.num_decodes = n;
  AttentionBackend attn(config_of(c, max_len, n));
  attn.prepare(cache);
  SparseBatch b(c, n, n, max_len);
  b.fill(c, rng);
  DeviceBuffer ws(attn.workspace_bytes());
  Stream stream;
  CUgraph graph;
  GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  b.forward(attn, c, ws, stream);
  GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
  CUgraphExec exec;
  GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
  for (const std::vector<int>& now :
       {std::vector<int>{1, 6000, 4097, 65}, std::vector<int>{300, 2, 5999, 1024}}) {
    SparseCase r = c;
    r.seq_lens = now;
    // Fresh data into the same buffers, then the replay; then the same data eagerly.
    b.fill(r, rng);
    GA_CU_CHECK(d.cuGraphLaunch(exec, stream));
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    b.check(r, attn.config().scale);
    b.fill(r, rng);
    b.forward(attn, r, ws, stream);
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    b.check(r, attn.config().scale);
  }
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
}
