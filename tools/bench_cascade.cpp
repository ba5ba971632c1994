// SPDX-License-Identifier: Apache-2.0
// graphattn-bench, cascade part: a shared system prompt of `prefix` tokens with `batch` requests
// of `own` tokens each after it, all decoding one token (bf16, 32 query heads, 8 KV heads, head
// 128, block 16; the prefix's blocks are the first entries of every block-table row). Plain
// split-KV decode (every request reads the whole prefix) against cascade attention (the prefix
// read once by one non-causal prefill of every query, each request's own suffix by the LSE
// decode, merged by merge_attn_states), in the same run, both eager with the L2 flushed before
// every repetition, median of reps; the cascade output is checked against the plain one. Also
// what vLLM's use_cascade_attention rule and graphattn's (its rule with the measured floor) say
// for each shape.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tools/bench_parts.hpp"

namespace graphattn::bench {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHead = 128, kBlock = 16;

struct CascadeRow {
  double plain_us = 0, cascade_us = 0, rel_l2 = 0;
  bool rule = false, graphattn_rule = false;
};

CascadeRow run_shape(const Device& dev, int batch, int prefix, int own, int reps) {
  const int len = prefix + own;  // the new token included
  const int prefix_blocks = prefix / kBlock, own_blocks = (own + kBlock - 1) / kBlock;
  const int row = prefix_blocks + own_blocks;
  const int num_blocks = prefix_blocks + batch * own_blocks;
  const int64_t T = batch;

  AttentionLayerConfig c = test::layer_config(kHeads, kKvHeads, kHead, len, batch);
  c.block_size = kBlock;
  c.arch = dev.arch;
  AttentionBackend plain(c);
  c.softmax_lse = true;
  AttentionBackend lse(c);
  plain.prepare();
  lse.prepare();
  DeviceBuffer ws(std::max(plain.workspace_bytes(), lse.workspace_bytes()));

  DeviceBuffer cache(size_t{2} * num_blocks * kBlock * kKvHeads * kHead * 2);
  fill_random_bf16(dev, cache.data(), cache.bytes() / 2, 41);
  DeviceBuffer q(T * kHeads * kHead * 2), out_plain(q.bytes()), out_cascade(q.bytes());
  fill_random_bf16(dev, q.data(), q.bytes() / 2, 43);
  // Block-table rows: the prefix's blocks, then the request's own (shuffled) blocks.
  std::mt19937_64 rng(7);
  std::vector<int32_t> own_ids(static_cast<size_t>(batch) * own_blocks);
  std::iota(own_ids.begin(), own_ids.end(), prefix_blocks);
  std::shuffle(own_ids.begin(), own_ids.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(batch) * row), qsl(batch + 1), seq(batch, len),
      suffix(batch, len - prefix), prefix_qsl = {0, batch}, prefix_len = {prefix};
  for (int r = 0; r < batch; ++r) {
    for (int b = 0; b < prefix_blocks; ++b) table[static_cast<size_t>(r) * row + b] = b;
    for (int b = 0; b < own_blocks; ++b)
      table[static_cast<size_t>(r) * row + prefix_blocks + b] = own_ids[r * own_blocks + b];
    qsl[r + 1] = r + 1;
  }
  std::vector<int64_t> slots(batch, -1);
  const auto upload = [](const auto& v) {
    DeviceBuffer b(v.size() * sizeof(v[0]));
    b.upload(v.data(), b.bytes());
    return b;
  };
  const DeviceBuffer d_table = upload(table), d_qsl = upload(qsl), d_seq = upload(seq),
                     d_suffix = upload(suffix), d_pqsl = upload(prefix_qsl),
                     d_plen = upload(prefix_len), d_slots = upload(slots);
  AttentionMetadata md;
  md.query_start_loc = TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {batch + 1});
  md.seq_lens = TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {batch});
  md.block_table = TensorView::contiguous(d_table.data(), ScalarType::kInt32, {batch, row});
  md.slot_mapping = TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {batch});
  md.num_reqs = md.num_decodes = md.num_decode_tokens = md.num_actual_tokens = batch;
  md.max_query_len = 1;
  md.max_seq_len = len;

  const TensorView kv = TensorView::contiguous(cache.data(), ScalarType::kBFloat16,
                                               {2, num_blocks, kBlock, kKvHeads, kHead});
  const auto view3 = [&](const DeviceBuffer& b) {
    return TensorView::contiguous(b.data(), ScalarType::kBFloat16, {T, kHeads, kHead});
  };
  DeviceBuffer p_out(q.bytes()), s_out(q.bytes()), p_lse(T * kHeads * 4), s_lse(T * kHeads * 4);
  CascadeBuffers cb;
  cb.prefix_output = view3(p_out);
  cb.suffix_output = view3(s_out);
  cb.prefix_lse = TensorView::contiguous(p_lse.data(), ScalarType::kFloat32, {kHeads, T});
  cb.suffix_lse = TensorView::contiguous(s_lse.data(), ScalarType::kFloat32, {kHeads, T});
  cb.prefix_query_start_loc = TensorView::contiguous(d_pqsl.data(), ScalarType::kInt32, {2});
  cb.prefix_seq_len = TensorView::contiguous(d_plen.data(), ScalarType::kInt32, {1});
  cb.suffix_seq_lens = TensorView::contiguous(d_suffix.data(), ScalarType::kInt32, {batch});

  const TensorView none;
  auto run_plain = [&] {
    plain.forward(view3(q), none, none, kv, view3(out_plain), md, ws.data(), ws.bytes(),
                  dev.stream);
  };
  auto run_cascade = [&] {
    cascade_attention(lse, view3(q), none, none, kv, view3(out_cascade), md, prefix, cb, ws.data(),
                      ws.bytes(), dev.stream);
  };
  run_plain();
  run_cascade();  // compiles and loads the prefix and merge kernels
  GA_CU_CHECK(detail::driver().cuStreamSynchronize(dev.stream));
  CascadeRow r;
  {
    std::vector<uint16_t> a(T * kHeads * kHead), b(a.size());
    out_plain.download(a.data(), a.size() * 2);
    out_cascade.download(b.data(), b.size() * 2);
    std::vector<double> x(a.size()), y(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      x[i] = test::from_storage(DType::kBFloat16, b[i]);
      y[i] = test::from_storage(DType::kBFloat16, a[i]);
    }
    r.rel_l2 = test::relative_l2(x, y);
  }
  r.plain_us = time_us(dev, reps, true, run_plain);
  r.cascade_us = time_us(dev, reps, true, run_cascade);
  r.rule = vllm_use_cascade_attention(prefix, std::vector<int32_t>(batch, 1), kHeads, kKvHeads,
                                      false, false, dev.sms);
  r.graphattn_rule = use_cascade_attention(prefix, std::vector<int32_t>(batch, 1), kHeads, kKvHeads,
                                           false, false, dev.sms);
  return r;
}

}  // namespace

nlohmann::json bench_cascade(const Device& dev, int batch, int own,
                             const std::vector<int>& prefixes, int reps, bool* ok) {
  std::printf(
      "\ncascade attention: %d requests decoding after a shared prompt + %d own tokens each "
      "(bf16, %d/%d heads, head %d, block %d; eager, L2 flushed, median of %d)\n",
      batch, own, kHeads, kKvHeads, kHead, kBlock, reps);
  std::printf("  %-8s %12s %12s %9s %14s %14s %10s\n", "prefix", "plain us", "cascade us",
              "speedup", "vLLM rule", "graphattn rule", "rel L2");
  nlohmann::json rows = nlohmann::json::array();
  for (int prefix : prefixes) {
    const CascadeRow r = run_shape(dev, batch, prefix, own, reps);
    const bool good = r.rel_l2 <= 1e-2;
    if (!good) *ok = false;
    std::printf("  %-8d %12.1f %12.1f %8.2fx %14s %14s %10.2e%s\n", prefix, r.plain_us,
                r.cascade_us, r.plain_us / r.cascade_us, r.rule ? "cascade" : "plain",
                r.graphattn_rule ? "cascade" : "plain", r.rel_l2,
                good ? "" : "  FAIL (cascade differs from plain)");
    rows.push_back({{"batch", batch},
                    {"prefix", prefix},
                    {"own", own},
                    {"plain_us", r.plain_us},
                    {"cascade_us", r.cascade_us},
                    {"vllm_rule_cascade", r.rule},
                    {"graphattn_rule_cascade", r.graphattn_rule},
                    {"rel_l2_vs_plain", r.rel_l2}});
  }
  return rows;
}

}  // namespace graphattn::bench
