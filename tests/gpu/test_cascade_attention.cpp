// SPDX-License-Identifier: Apache-2.0
// Cascade attention (graphattn/cascade.hpp) on the GPU: a batch whose requests share a common
// prefix of KV blocks, run as prefix (non-causal, LSE) + suffix (LSE) + merge, against the
// float64 reference of plain causal attention over each request's whole sequence and against
// the plain backend's forward on the same batch; decode-only and mixed batches, fp16 and bf16,
// GQA, soft cap, the fused cache write of a decode-only step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
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

struct CascadeCase {
  DType dtype = DType::kBFloat16;
  int num_kv_heads = 2, group = 4, head_size = 128, block_size = 16;
  int prefix = 256;               // shared tokens (a multiple of block_size)
  std::vector<int> q_lens, owns;  // per request: new tokens, tokens after the prefix (>= q_len)
  float soft_cap = 0;
  bool write = false;  // forward writes the new keys and values (decode-only: fused write)
};

// Runs one case; `cache` compiles the kernels.
void run_case(const CascadeCase& c, KernelCache& cache, std::mt19937_64& rng) {
  const int n = static_cast<int>(c.q_lens.size());
  const int H = c.num_kv_heads * c.group, KH = c.num_kv_heads, D = c.head_size, B = c.block_size;
  INFO("cascade: " << to_string(c.dtype) << " heads " << H << "/" << KH << " head " << D
                   << " prefix " << c.prefix << " requests " << n << " cap " << c.soft_cap
                   << std::string(c.write ? " with cache write" : ""));
  const int prefix_blocks = c.prefix / B;
  std::vector<int> qsl(n + 1, 0), seq(n), suffix(n), own_blocks(n);
  int row = 0, num_blocks = prefix_blocks;
  bool decode_only = true;
  for (int r = 0; r < n; ++r) {
    qsl[r + 1] = qsl[r] + c.q_lens[r];
    seq[r] = c.prefix + c.owns[r];
    suffix[r] = c.owns[r];
    own_blocks[r] = (c.owns[r] + B - 1) / B;
    row = std::max(row, prefix_blocks + own_blocks[r]);
    num_blocks += own_blocks[r];
    decode_only = decode_only && c.q_lens[r] == 1;
  }
  const int T = qsl[n];
  std::vector<int> ids(num_blocks - prefix_blocks);
  std::iota(ids.begin(), ids.end(), prefix_blocks);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int> table(static_cast<size_t>(n) * row, 0x3fffffff);
  size_t next = 0;
  std::vector<int> prefix_ids(prefix_blocks);
  std::iota(prefix_ids.begin(), prefix_ids.end(), 0);
  std::shuffle(prefix_ids.begin(), prefix_ids.end(), rng);
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < prefix_blocks; ++b) table[static_cast<size_t>(r) * row + b] = prefix_ids[b];
    for (int b = 0; b < own_blocks[r]; ++b)
      table[static_cast<size_t>(r) * row + prefix_blocks + b] = ids[next++];
  }
  // Random 16-bit cache, query and new keys/values; the reference sees the rounded values (and,
  // with the write, the new rows in their slots).
  std::normal_distribution<double> normal(0.0, 1.0);
  RefProblem ref = paged_problem(H, KH, D, B, qsl, seq, table, row);
  const size_t per_kv = static_cast<size_t>(num_blocks) * B * KH * D;
  std::vector<uint16_t> cache_host(2 * per_kv), q_host(static_cast<size_t>(T) * H * D),
      k_new(static_cast<size_t>(T) * KH * D), v_new(k_new.size());
  ref.k_cache.resize(per_kv);
  ref.v_cache.resize(per_kv);
  ref.q.resize(q_host.size());
  const auto draw = [&](uint16_t& dst, double& ref_value) {
    dst = to_storage(c.dtype, normal(rng));
    ref_value = from_storage(c.dtype, dst);
  };
  for (size_t i = 0; i < per_kv; ++i) {
    draw(cache_host[i], ref.k_cache[i]);
    draw(cache_host[per_kv + i], ref.v_cache[i]);
  }
  for (size_t i = 0; i < q_host.size(); ++i) draw(q_host[i], ref.q[i]);
  std::vector<int64_t> slots(T, -1);
  for (int r = 0; r < n; ++r)
    for (int t = 0; t < c.q_lens[r]; ++t) {
      const int pos = seq[r] - c.q_lens[r] + t;
      const int64_t blk = table[static_cast<size_t>(r) * row + pos / B];
      slots[qsl[r] + t] = blk * B + pos % B;
      for (int h = 0; h < KH; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t src = (static_cast<size_t>(qsl[r] + t) * KH + h) * D + d;
          double kv_ref;
          draw(k_new[src], kv_ref);
          const size_t at = ((blk * B + pos % B) * KH + h) * D + d;
          if (c.write) ref.k_cache[at] = kv_ref;
          draw(v_new[src], kv_ref);
          if (c.write) ref.v_cache[at] = kv_ref;
        }
    }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  ref.scale = scale;
  ref.soft_cap = c.soft_cap;
  const std::vector<double> want = reference_attention(ref);

  const auto upload = [](const auto& v) {
    DeviceBuffer b(std::max<size_t>(v.size() * sizeof(v[0]), 16));
    b.upload(v.data(), v.size() * sizeof(v[0]));
    return b;
  };
  const std::vector<int> prefix_qsl = {0, T}, prefix_len = {c.prefix};
  const DeviceBuffer d_q = upload(q_host), d_k = upload(k_new), d_v = upload(v_new),
                     d_table = upload(table), d_qsl = upload(qsl), d_seq = upload(seq),
                     d_suffix = upload(suffix), d_pqsl = upload(prefix_qsl),
                     d_plen = upload(prefix_len), d_slots = upload(slots);
  DeviceBuffer d_cache = upload(cache_host), d_cache2 = upload(cache_host);
  const ScalarType st = scalar_type_of(c.dtype);
  const auto kv_of = [&](const DeviceBuffer& b) {
    return TensorView::contiguous(b.data(), st, {2, num_blocks, B, KH, D});
  };
  const auto rows = [&](const DeviceBuffer& b, int heads) {
    return TensorView::contiguous(b.data(), st, {T, heads, D});
  };
  AttentionMetadata md;
  md.query_start_loc = TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {n + 1});
  md.seq_lens = TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {n});
  md.block_table = TensorView::contiguous(d_table.data(), ScalarType::kInt32, {n, row});
  md.slot_mapping = TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {T});
  md.num_reqs = n;
  int decodes = 0;
  while (decodes < n && c.q_lens[decodes] == 1) ++decodes;
  md.num_decodes = md.num_decode_tokens = decodes;
  md.num_actual_tokens = T;
  md.max_query_len = decodes < n ? *std::max_element(c.q_lens.begin(), c.q_lens.end()) : 1;
  md.max_seq_len = *std::max_element(seq.begin(), seq.end());

  AttentionLayerConfig cfg = layer_config(H, KH, D, row * B, n);
  cfg.dtype = c.dtype;
  cfg.block_size = B;
  cfg.soft_cap = c.soft_cap;
  cfg.arch = current_device_arch();
  AttentionBackend plain(cfg);
  cfg.softmax_lse = true;
  AttentionBackend lse(cfg);
  plain.prepare(cache);
  lse.prepare(cache);
  DeviceBuffer ws(std::max(plain.workspace_bytes(), lse.workspace_bytes())),
      ws2(plain.workspace_bytes());
  DeviceBuffer out(q_host.size() * 2), out_plain(q_host.size() * 2), p_out(q_host.size() * 2),
      s_out(q_host.size() * 2), p_lse(static_cast<size_t>(H) * T * 4),
      s_lse(static_cast<size_t>(H) * T * 4);
  out.fill_bytes(0xff);
  CascadeBuffers cb;
  cb.prefix_output = rows(p_out, H);
  cb.suffix_output = rows(s_out, H);
  cb.prefix_lse = TensorView::contiguous(p_lse.data(), ScalarType::kFloat32, {H, T});
  cb.suffix_lse = TensorView::contiguous(s_lse.data(), ScalarType::kFloat32, {H, T});
  cb.prefix_query_start_loc = TensorView::contiguous(d_pqsl.data(), ScalarType::kInt32, {2});
  cb.prefix_seq_len = TensorView::contiguous(d_plen.data(), ScalarType::kInt32, {1});
  cb.suffix_seq_lens = TensorView::contiguous(d_suffix.data(), ScalarType::kInt32, {n});
  const TensorView none;
  cascade_attention(lse, rows(d_q, H), c.write ? rows(d_k, KH) : none,
                    c.write ? rows(d_v, KH) : none, kv_of(d_cache), rows(out, H), md, c.prefix, cb,
                    ws.data(), ws.bytes(), nullptr, cache);
  plain.forward(rows(d_q, H), c.write ? rows(d_k, KH) : none, c.write ? rows(d_v, KH) : none,
                kv_of(d_cache2), rows(out_plain, H), md, ws2.data(), ws2.bytes(), nullptr);
  GA_CU_CHECK(detail::driver().cuCtxSynchronize());

  std::vector<uint16_t> got(q_host.size()), got_plain(q_host.size());
  out.download(got.data(), got.size() * 2);
  out_plain.download(got_plain.data(), got_plain.size() * 2);
  std::vector<double> g(got.size()), gp(got.size());
  size_t nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    g[i] = from_storage(c.dtype, got[i]);
    gp[i] = from_storage(c.dtype, got_plain[i]);
    nan += std::isnan(g[i]);
  }
  CHECK(nan == 0);
  const double err = relative_l2(g, want), err_plain = relative_l2(gp, want);
  INFO("relative L2: cascade " << err << ", plain " << err_plain);
  CHECK(err <= tolerance(c.dtype));
  CHECK(err_plain <= tolerance(c.dtype));
  if (c.write) {  // both wrote the same new rows
    std::vector<uint16_t> a(cache_host.size()), b(cache_host.size());
    d_cache.download(a.data(), a.size() * 2);
    d_cache2.download(b.data(), b.size() * 2);
    CHECK(a == b);
  }
}

}  // namespace

TEST_CASE("gpu cascade attention: prefix + suffix merged by LSE equals plain attention") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::uniform_int_distribution<int> own(1, 300);
  std::vector<CascadeCase> cases;
  {
    CascadeCase c;  // decode-only, the fused cache write
    for (int r = 0; r < 16; ++r) {
      c.q_lens.push_back(1);
      c.owns.push_back(own(rng));
    }
    c.write = true;
    cases.push_back(c);
    c.dtype = DType::kFloat16;
    c.write = false;
    c.group = 8;
    c.num_kv_heads = 1;
    c.prefix = 1024;
    c.soft_cap = 10.0f;
    cases.push_back(c);
  }
  {
    CascadeCase c;  // decodes then prefills (chunks after the prefix), with the cache write
    for (int r = 0; r < 12; ++r) {
      const int q = r < 8 ? 1 : 5 + 13 * (r - 8);
      c.q_lens.push_back(q);
      c.owns.push_back(q + own(rng));
    }
    c.dtype = DType::kFloat16;
    c.write = true;
    c.prefix = 512;
    cases.push_back(c);
    c.dtype = DType::kBFloat16;
    c.head_size = 64;
    c.block_size = 32;
    c.prefix = 2048;
    c.soft_cap = 30.0f;
    cases.push_back(c);
  }
  for (const auto& c : cases) run_case(c, cache, rng);
}

TEST_CASE("gpu cascade attention: bad arguments are named before any launch") {
  GA_REQUIRE_GPU();
  AttentionLayerConfig cfg = layer_config(8, 2, 128, 1024, 4);
  cfg.arch = current_device_arch();
  AttentionBackend plain(cfg);
  plain.prepare();
  const TensorView none;
  AttentionMetadata md;
  CascadeBuffers cb;
  CHECK_THROWS_WITH_AS(
      cascade_attention(plain, none, none, none, none, none, md, 256, cb, nullptr, 0, nullptr),
      doctest::Contains("must write the softmax LSE"), Error);
  cfg.softmax_lse = true;
  AttentionBackend lse(cfg);
  lse.prepare();
  CHECK_THROWS_WITH_AS(
      cascade_attention(lse, none, none, none, none, none, md, 100, cb, nullptr, 0, nullptr),
      doctest::Contains("common_prefix_len 100 must be a positive multiple"), Error);
}
