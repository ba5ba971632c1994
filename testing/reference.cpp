// SPDX-License-Identifier: Apache-2.0
#include "testing/reference.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace graphattn::test {

std::vector<double> reference_attention(const RefProblem& p, std::vector<double>* lse) {
  const int num_reqs = static_cast<int>(p.seq_lens.size());
  const int num_tokens = p.query_start_loc.empty() ? 0 : p.query_start_loc.back();
  const int H = p.num_heads, KH = p.num_kv_heads, D = p.head_size, B = p.block_size;
  const int group = H / KH;
  std::vector<double> out(static_cast<size_t>(num_tokens) * H * D, 0.0);
  if (lse) lse->assign(static_cast<size_t>(H) * num_tokens, -INFINITY);
  std::vector<double> scores;
  const RefBlockSparse& bs = p.blocksparse;
  const bool sparse = bs.block_size > 0 && bs.vert_stride > 1;
  if (sparse && !p.causal) throw std::invalid_argument("reference: block-sparse needs causal");
  int max_seq = 0;
  for (int s : p.seq_lens) max_seq = std::max(max_seq, s);
  const int sparse_blocks = sparse ? (max_seq + bs.block_size - 1) / bs.block_size : 0;
  const std::vector<unsigned char> block_mask =
      sparse ? blocksparse_block_mask(bs, H, KH, sparse_blocks) : std::vector<unsigned char>();
  const auto hidden = [&](int h, int pos, int k) {
    return sparse && !block_mask[(static_cast<size_t>(h) * sparse_blocks + pos / bs.block_size) *
                                     sparse_blocks +
                                 k / bs.block_size];
  };
  for (int r = 0; r < num_reqs; ++r) {
    const int q0 = p.query_start_loc[r], q1 = p.query_start_loc[r + 1];
    const int s = p.seq_lens[r];
    if (s == 0) continue;
    const int n = q1 - q0;
    if (p.causal && n > s) throw std::invalid_argument("reference: query longer than its sequence");
    if (!p.causal && p.window > 0)
      throw std::invalid_argument("reference: non-causal attention has no window");
    // Element offset of key k's row (KV head kh) in k_cache / v_cache.
    const auto row = [&](int k, int kh) {
      const size_t token =
          p.kv_start_loc.empty()
              ? static_cast<size_t>(
                    p.block_table[static_cast<size_t>(r) * p.max_blocks_per_seq + k / B]) *
                        B +
                    k % B
              : static_cast<size_t>(p.kv_start_loc[r] + k);
      return (token * KH + kh) * D;
    };
    for (int i = 0; i < n; ++i) {
      const int pos = s - n + i;
      const int first = p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
      const int last = p.causal ? pos : s - 1;
      for (int h = 0; h < H; ++h) {
        const int kh = h / group;
        const double* q = &p.q[(static_cast<size_t>(q0 + i) * H + h) * D];
        scores.assign(last + 1 - first, 0.0);
        double mx = -INFINITY;
        for (int k = first; k <= last; ++k) {
          const double* kv = &p.k_cache[row(k, kh)];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q[d] * kv[d];
          double sc = dot * p.scale;
          if (p.soft_cap > 0) sc = p.soft_cap * std::tanh(sc / p.soft_cap);
          if (!p.alibi_slopes.empty()) sc += p.alibi_slopes[h] * (k - pos);
          if (hidden(h, pos, k)) sc = -INFINITY;
          scores[k - first] = sc;
          mx = std::max(mx, sc);
        }
        if (!p.sinks.empty()) mx = std::max(mx, p.sinks[h]);
        double denom = p.sinks.empty() ? 0 : std::exp(p.sinks[h] - mx);
        for (double& sc : scores) denom += (sc = std::exp(sc - mx));
        if (lse && denom > 0)
          (*lse)[static_cast<size_t>(h) * num_tokens + q0 + i] = mx + std::log(denom);
        double* o = &out[(static_cast<size_t>(q0 + i) * H + h) * D];
        for (int k = first; k <= last; ++k) {
          const double* vv = &p.v_cache[row(k, kh)];
          const double w = scores[k - first] / denom;
          for (int d = 0; d < D; ++d) o[d] += w * vv[d];
        }
      }
    }
  }
  return out;
}

LseComparison compare_lse(const std::vector<float>& got, long long got_stride,
                          const std::vector<int>& cols, const std::vector<double>& want, int heads,
                          double abs_tol) {
  LseComparison r;
  const size_t m = cols.size();
  for (int h = 0; h < heads; ++h)
    for (size_t i = 0; i < m; ++i) {
      const double g = got[static_cast<size_t>(h) * got_stride + cols[i]], w = want[h * m + i];
      if (std::isnan(g)) {
        ++r.nan;
      } else if (std::isinf(w) || std::isinf(g)) {
        r.bad += g != w;
      } else {
        const double d = std::fabs(g - w);
        r.worst = std::max(r.worst, d);
        r.bad += d > abs_tol + 1e-3 * std::fabs(w);
      }
    }
  return r;
}

std::vector<unsigned char> blocksparse_block_mask(const RefBlockSparse& b, int num_heads,
                                                  int num_kv_heads, int num_blocks) {
  const int group = num_heads / num_kv_heads;
  const size_t nb = static_cast<size_t>(num_blocks);
  std::vector<unsigned char> mask(static_cast<size_t>(num_heads) * nb * nb, 0);
  for (int h = 0; h < num_heads; ++h) {
    // The head's pattern index (a global query head, or a global KV head for a negative step)
    // and its shift: block kb is strided when kb + shift is a multiple of vert_stride.
    const long long step = b.head_sliding_step;
    const long long index =
        step >= 0 ? b.active_head_offset + h : b.active_head_offset / group + h / group;
    const long long shift = index * (step >= 0 ? step : -step) + 1;
    std::vector<unsigned char> strided(nb, 0);
    const long long vs = std::max(1, b.vert_stride);
    for (long long kb = (vs - shift % vs) % vs; kb < num_blocks; kb += vs) strided[kb] = 1;
    for (int qb = 0; qb < num_blocks; ++qb)
      for (int kb = 0; kb <= qb; ++kb)
        mask[(h * nb + qb) * nb + kb] = qb - kb < b.local_blocks || strided[kb];
  }
  return mask;
}

std::vector<double> random_alibi_slopes(std::mt19937_64& rng, int num_heads, bool on,
                                        double max_slope) {
  std::vector<double> out;
  if (!on) return out;
  std::uniform_real_distribution<double> u(0.0, max_slope);
  for (int h = 0; h < num_heads; ++h) out.push_back(static_cast<float>(u(rng) + 1e-4));
  return out;
}

std::vector<double> random_sinks(std::mt19937_64& rng, int num_heads, bool on, double sink_std) {
  std::vector<double> out;
  if (!on) return out;
  std::normal_distribution<double> n(0.0, sink_std);
  for (int h = 0; h < num_heads; ++h)
    out.push_back(static_cast<float>(h % 5 == 3 ? 4 * sink_std : n(rng)));
  return out;
}

std::vector<float> to_floats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("relative_l2: sizes differ");
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

RefProblem paged_problem(int num_heads, int num_kv_heads, int head_size, int block_size,
                         const std::vector<int>& query_start_loc, const std::vector<int>& seq_lens,
                         const std::vector<int>& block_table, int max_blocks_per_seq) {
  RefProblem p;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_size = head_size;
  p.block_size = block_size;
  p.query_start_loc = query_start_loc;
  p.seq_lens = seq_lens;
  p.block_table = block_table;
  p.max_blocks_per_seq = max_blocks_per_seq;
  return p;
}

}  // namespace graphattn::test
