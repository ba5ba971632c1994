// SPDX-License-Identifier: Apache-2.0
// graphattn-bench, part legacy-variants (not in the default parts): forward_prefix over vLLM's
// legacy caches at head size 128 for variants of the legacy prefill row (4 x 4096 causal bf16,
// 32/8 heads, block 16) that its kernel choices (ptxas options, softmax form) must hold for:
// sliding window, attention sinks, fp16, other GQA ratios, block size, non-causal, chunked.
// Each row: shuffled blocks, random data, the last 4 query rows checked against the float64
// reference, then the median of event-timed runs with the L2 flushed before each.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "graphattn/graphattn.hpp"
#include "graphattn/paged_cache.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/legacy_layout.hpp"
#include "testing/reference.hpp"
#include "tools/bench_parts.hpp"

namespace graphattn::bench {

namespace {

struct LegacyVariant {
  int batch = 4, len = 4096, prefix = 0, kv_heads = 8, block = 16, window = 0;
  bool fp16 = false, sinks = false, causal = true;
};

int parse_positive(const std::string& text, const std::string& what, const std::string& name) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v <= 0)
    throw std::invalid_argument("--legacy-variants: " + what + " '" + text + "' in '" + name +
                                "' is not a positive integer");
  return v;
}

// BATCHxLEN[+PREFIX][:fp16][:kvN][:bsN][:wN][:sinks][:nc]
LegacyVariant parse_variant(const std::string& name) {
  LegacyVariant v;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t c = name.find(':');; c = name.find(':', start)) {
    parts.push_back(name.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) break;
    start = c + 1;
  }
  std::string shape = parts[0];
  const size_t plus = shape.find('+'), x = shape.find('x');
  if (x == std::string::npos)
    throw std::invalid_argument("--legacy-variants: '" + name +
                                "' does not start with BATCHxLEN[+PREFIX]");
  if (plus != std::string::npos) {
    v.prefix = parse_positive(shape.substr(plus + 1), "prefix", name);
    shape = shape.substr(0, plus);
  }
  v.batch = parse_positive(shape.substr(0, x), "batch", name);
  v.len = parse_positive(shape.substr(x + 1), "length", name);
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p == "fp16")
      v.fp16 = true;
    else if (p == "sinks")
      v.sinks = true;
    else if (p == "nc")
      v.causal = false;
    else if (p.rfind("kv", 0) == 0)
      v.kv_heads = parse_positive(p.substr(2), "KV heads", name);
    else if (p.rfind("bs", 0) == 0)
      v.block = parse_positive(p.substr(2), "block size", name);
    else if (p.rfind("w", 0) == 0)
      v.window = parse_positive(p.substr(1), "window", name);
    else
      throw std::invalid_argument("--legacy-variants: unknown modifier '" + p + "' in '" + name +
                                  "'; modifiers: fp16, kvN, bsN, wN, sinks, nc");
  }
  if (32 % v.kv_heads != 0)
    throw std::invalid_argument("--legacy-variants: kv" + std::to_string(v.kv_heads) + " in '" +
                                name + "' does not divide the 32 query heads");
  if (!v.causal && v.window > 0)
    throw std::invalid_argument("--legacy-variants: '" + name +
                                "': a sliding window needs causal attention");
  return v;
}

// Visible (query, key) pairs of one head of one request: 4 * head flops each.
double visible_pairs(const LegacyVariant& v) {
  const int s = v.prefix + v.len;
  double pairs = 0;
  for (int i = 0; i < v.len; ++i) {
    const int pos = v.prefix + i;
    int seen = v.causal ? pos + 1 : s;
    if (v.window > 0) seen = std::min(seen, v.window);
    pairs += seen;
  }
  return pairs;
}

nlohmann::json bench_legacy_variant(const Device& dev, const std::string& name, int reps,
                                    bool* ok) {
  const LegacyVariant v = parse_variant(name);
  const int64_t H = 32, KH = v.kv_heads, D = 128, B = v.block, T = int64_t{v.batch} * v.len;
  const int kv_len = v.prefix + v.len;
  const int64_t blocks_per_seq = (kv_len + B - 1) / B, NB = blocks_per_seq * v.batch;
  const int64_t cache_elems = NB * B * KH * D;
  DeviceBuffer q(T * H * D * 2), out(T * H * D * 2), cache(2 * cache_elems * 2),
      qsl((v.batch + 1) * 4), seq(v.batch * 4), table(NB * 4), sinks(H * 4);
  fill_random_bf16(dev, q.data(), T * H * D, 5);
  fill_random_bf16(dev, cache.data(), 2 * cache_elems, 6);
  std::vector<uint16_t> host(2 * cache_elems), qhost(T * H * D);
  cache.download(host.data(), host.size() * 2);
  q.download(qhost.data(), qhost.size() * 2);
  if (v.fp16) {  // the same values (within fp16's rounding), as fp16
    for (auto& h : host) h = test::float_to_fp16(test::bf16_to_float(h));
    for (auto& h : qhost) h = test::float_to_fp16(test::bf16_to_float(h));
    cache.upload(host.data(), host.size() * 2);
    q.upload(qhost.data(), qhost.size() * 2);
  }
  auto to_float = [&](uint16_t h) {
    return v.fp16 ? test::fp16_to_float(h) : test::bf16_to_float(h);
  };
  std::vector<float> sink_values(H);
  for (int64_t h = 0; h < H; ++h) sink_values[h] = 0.25f * static_cast<float>(h % 8) - 1.0f;
  sinks.upload(sink_values.data(), sink_values.size() * 4);
  std::vector<int> phys(NB), starts(v.batch + 1), lens(v.batch, kv_len);
  std::iota(phys.begin(), phys.end(), 0);
  std::mt19937_64 rng(3);
  std::shuffle(phys.begin(), phys.end(), rng);
  for (int r = 0; r <= v.batch; ++r) starts[r] = r * v.len;
  table.upload(phys.data(), phys.size() * 4);
  qsl.upload(starts.data(), starts.size() * 4);
  seq.upload(lens.data(), lens.size() * 4);
  out.fill_bytes(0xff);
  const ScalarType st = v.fp16 ? ScalarType::kFloat16 : ScalarType::kBFloat16;
  const auto qv = TensorView::contiguous(q.data(), st, {T, H, D});
  const auto ov = TensorView::contiguous(out.data(), st, {T, H, D});
  const auto qslv = TensorView::contiguous(qsl.data(), ScalarType::kInt32, {v.batch + 1});
  const auto seqv = TensorView::contiguous(seq.data(), ScalarType::kInt32, {v.batch});
  const auto tabv =
      TensorView::contiguous(table.data(), ScalarType::kInt32, {v.batch, blocks_per_seq});
  const PagedKvCache pc =
      split_paged_kv_cache(TensorView::contiguous(cache.data(), st, {2, NB, B * KH * D}),
                           static_cast<int>(KH), static_cast<int>(D));
  PrefixOptions opt;
  opt.causal = v.causal;
  opt.sinks = v.sinks ? static_cast<const float*>(sinks.data()) : nullptr;
  auto run = [&] {
    forward_prefix(qv, TensorView{}, TensorView{}, "auto", pc.key_cache, pc.value_cache, tabv, qslv,
                   seqv, v.len, nullptr, v.window, 1.0f, 1.0f, ov, dev.stream,
                   default_kernel_cache(), opt);
  };
  run();
  GA_CU_CHECK(detail::driver().cuStreamSynchronize(dev.stream));

  // The last 4 rows of the last request against the reference (as a chunked prefill of 4).
  const int n_check = std::min(4, v.len);
  test::RefProblem ref = test::paged_problem(
      static_cast<int>(H), static_cast<int>(KH), static_cast<int>(D), static_cast<int>(B),
      {0, n_check}, {kv_len},
      std::vector<int>(phys.begin() + (v.batch - 1) * blocks_per_seq, phys.end()),
      static_cast<int>(blocks_per_seq));
  ref.scale = 1.0 / std::sqrt(static_cast<double>(D));
  ref.window = v.window;
  ref.causal = v.causal;
  if (v.sinks) ref.sinks.assign(sink_values.begin(), sink_values.end());
  // The reference's caches are [block, token, kv head, dim]; the legacy ones hold element
  // (b, t, h, d) where LegacyLayout says. Only the blocks of the checked request are filled.
  ref.k_cache.assign(cache_elems, 0.0);
  ref.v_cache.assign(cache_elems, 0.0);
  const test::LegacyLayout layout{B, KH, D, 8};
  for (int64_t j = 0; j < blocks_per_seq; ++j) {
    const int64_t b = ref.block_table[j];
    for (int64_t t = 0; t < B; ++t)
      for (int64_t h = 0; h < KH; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t i = ((b * B + t) * KH + h) * D + d;
          ref.k_cache[i] = to_float(host[layout.key(b, t, h, d)]);
          ref.v_cache[i] = to_float(host[cache_elems + layout.value(b, t, h, d)]);
        }
  }
  for (int64_t i = (T - n_check) * H * D; i < T * H * D; ++i) ref.q.push_back(to_float(qhost[i]));
  std::vector<uint16_t> outs(n_check * H * D);
  out.download(outs.data(), outs.size() * 2, (T - n_check) * H * D * 2);
  std::vector<double> got;
  for (uint16_t x : outs) got.push_back(to_float(x));
  const double err = test::relative_l2(got, test::reference_attention(ref));
  const double tol = 5e-3;  // 16-bit P, as the prefill rows
  if (!(err <= tol)) *ok = false;

  for (int i = 0; i < 3; ++i) run();
  const double us = time_us(dev, reps, true, run);
  const double flops = 4.0 * D * H * v.batch * visible_pairs(v);
  std::printf("%-24s %10.1f %10.1f %9.2e%s\n", name.c_str(), us, flops / us / 1e6, err,
              err <= tol ? "" : "  FAIL");
  return {
      {"variant", name}, {"time_us", us}, {"tflops", flops / us / 1e6}, {"max_rel_l2_error", err}};
}

}  // namespace

void check_legacy_variant_names(const std::vector<std::string>& names) {
  if (names.empty()) throw std::invalid_argument("--legacy-variants: no variant given");
  for (const auto& n : names) parse_variant(n);
}

nlohmann::json bench_legacy_variants(const Device& dev, const std::vector<std::string>& names,
                                     int reps, bool* ok) {
  check_legacy_variant_names(names);
  std::printf(
      "\n== legacy prefill variants (forward_prefix, head 128, 32 query heads; base 4x4096 "
      "causal bf16, 8 KV heads, block 16), median of %d\n",
      reps);
  std::printf("%-24s %10s %10s %9s\n", "variant", "time us", "TFLOP/s", "max err");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& n : names) rows.push_back(bench_legacy_variant(dev, n, reps, ok));
  return rows;
}

}  // namespace graphattn::bench
