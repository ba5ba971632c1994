// SPDX-License-Identifier: Apache-2.0
// The float64 host reference for paged attention (vLLM v1 flash-backend semantics): variable
// length queries over a paged KV cache (or dense K/V), causal or not, with GQA, sliding window,
// soft cap, ALiBi and attention sinks.
#pragma once

#include <random>
#include <vector>

namespace graphattn::test {

// vLLM's block-sparse pattern (BlocksparseParams; graphattn::BlockSparseParams mirrors it):
// block_size 0 or vert_stride <= 1 is dense.
struct RefBlockSparse {
  int block_size = 0, local_blocks = 0, vert_stride = 0, head_sliding_step = 0;
  int active_head_offset = 0;  // global index of local query head 0 (tp_rank * num_heads)
};

// The block mask of `b` for a layer of num_heads local query heads over num_kv_heads KV heads,
// as vLLM's get_sparse_attn_mask lays it out: [num_heads, num_blocks, num_blocks], entry
// (h, qb, kb) 1 when query block qb of head h sees key block kb (kb <= qb and: local, qb - kb <
// local_blocks; or strided: every vert_stride-th block from the head's first strided block).
// Built by stepping through the strided blocks, not by the kernels' modulo test.
std::vector<unsigned char> blocksparse_block_mask(const RefBlockSparse& b, int num_heads,
                                                  int num_kv_heads, int num_blocks);

struct RefProblem {
  int num_heads = 0, num_kv_heads = 0, head_size = 0, block_size = 0;
  std::vector<int> query_start_loc;  // [num_reqs + 1]
  std::vector<int> seq_lens;         // [num_reqs] context + new tokens; 0 = padded row
  std::vector<int> block_table;      // [num_reqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  // Values exactly as the GPU sees them (already rounded to the storage type, fp8 dequantized
  // and multiplied by its scale).
  std::vector<double> q;        // [num_tokens, num_heads, head_size]
  std::vector<double> k_cache;  // [num_blocks, block_size, num_kv_heads, head_size] (logical NHD)
  std::vector<double> v_cache;  // same
  double scale = 1.0;
  int window = 0;         // 0: no window; else a key at k is seen from p when p - k < window
  double soft_cap = 0.0;  // 0: none; else s -> cap * tanh(s / cap) on the scaled score
  // [num_heads] or empty: head h adds alibi_slopes[h] * (key - query position) after the cap.
  std::vector<double> alibi_slopes;
  // [num_heads] or empty: head h's softmax denominator gains exp(sinks[h]) (no value).
  std::vector<double> sinks;
  // false: non-causal, every query of a request sees all its keys 0..seq_len - 1 (no window; the
  // query may be longer than the sequence). ALiBi still measures key - (s - n + i).
  bool causal = true;
  // Dense K/V (encoder-only attention, MultiHeadAttention): non-empty [num_reqs], request r's key
  // k is row kv_start_loc[r] + k of k_cache / v_cache read as [num_kv_tokens, num_kv_heads,
  // head_size]; block_table, block_size and max_blocks_per_seq are then unused.
  std::vector<int> kv_start_loc;
  // Block-sparse attention (causal only): keys of the blocks that blocksparse_block_mask() hides
  // from a query's head are dropped.
  RefBlockSparse blocksparse;
};

// A paged problem with this geometry and batch; the data, scale and score modifiers are the
// caller's to fill.
RefProblem paged_problem(int num_heads, int num_kv_heads, int head_size, int block_size,
                         const std::vector<int>& query_start_loc, const std::vector<int>& seq_lens,
                         const std::vector<int>& block_table, int max_blocks_per_seq);

// [num_tokens, num_heads, head_size]. Query token i of a request with seq_len s and q_len n
// sits at position s - n + i and sees keys 0..position (and the window), or every key when
// non-causal. Rows of a request with seq_len 0 are zeros.
// lse: when given, [num_heads, num_tokens] gets each row's softmax log-sum-exp (natural log, the
// sink's term included; -inf for a row with no key), FlashAttention's softmax_lse.
std::vector<double> reference_attention(const RefProblem& p, std::vector<double>* lse = nullptr);

// Per-head launch data for the ALiBi and sinks axes, drawn at random and exactly representable in
// fp32 (what the kernels read): slopes in (0, max_slope], sink logits ~ N(0, sink_std), with a
// few large ones (sink_std * 4) so that a sink dominates some heads' softmax. Empty when off.
std::vector<double> random_alibi_slopes(std::mt19937_64& rng, int num_heads, bool on,
                                        double max_slope = 0.06);
std::vector<double> random_sinks(std::mt19937_64& rng, int num_heads, bool on,
                                 double sink_std = 2.0);
// The same values as fp32, for the device.
std::vector<float> to_floats(const std::vector<double>& v);

// A kernel's softmax LSE against the reference's: got is fp32 [heads, got_stride] and column
// cols[i] of it is compared with column i of want ([heads, cols.size()]). An entry is bad when
// exactly one of the two is infinite (or they are infinities of different signs) or when they
// differ by more than abs_tol + 1e-3 |want| (abs_tol 2e-2 by default: the kernels' scores are
// fp32 sums of 16-bit products; the LSE is their log-sum-exp). NaNs are counted apart.
struct LseComparison {
  size_t nan = 0, bad = 0;
  double worst = 0;  // largest absolute difference of finite entries
};
LseComparison compare_lse(const std::vector<float>& got, long long got_stride,
                          const std::vector<int>& cols, const std::vector<double>& want, int heads,
                          double abs_tol = 2e-2);

// Relative L2 error ||a - b|| / ||b|| (b the reference); 0 when both are zero.
double relative_l2(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace graphattn::test
