// SPDX-License-Identifier: Apache-2.0
// The parts of graphattn-bench. Each prints its table and returns the same numbers as JSON.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graphattn/backend.hpp"
#include "tools/bench_common.hpp"

namespace graphattn::bench {

// One decode shape: batch x context, head size, KV cache dtype ("auto" or "e4m3").
struct DecodeShape {
  int batch = 1, len = 1, head_size = 128;
  int q_len = 1;  // query tokens per request: > 1 is multi-token (speculative) decode
  std::string kv = "auto";
  // ":bsp": block-sparse (sparse block 64, local_blocks 4, vert_stride 8, vLLM's default head
  // sliding step); the row's bytes are those of the KV tiles some head of a KV head sees
  bool sparse = false;
  // ":legacy": vLLM's legacy caches through paged_attention_v1 / v2 (the version by vLLM's rule)
  bool legacy = false;
  // ":qe4m3": e4m3 queries (q_dtype fp8_e4m3, q_scale 0.5) over an e4m3 cache (spec "_qe4m3")
  bool q_fp8 = false;
  // ":kvN": N KV heads and 4N query heads (llama-3-8b's group of 4), e.g. ":kv4" for the
  // per-GPU share of a two-GPU tensor-parallel llama-3-8b (16/4 heads); no peer for such rows
  int kv_heads = 8;
  // ":hnd": the flash layout with HND pages ([block][KV head][token][dim]: a head's 16 rows of a
  // block are contiguous) instead of NHD; suffixes combine, e.g. "64x8192:h64:hnd"
  bool hnd = false;
  // ":seq": the pages in order (request r's blocks r * blocks_per_seq .. , one contiguous cache as
  // the peer's); ":near": shuffled only within groups of blocks spanning 2 MiB of K (each
  // request's pages stay within a few 2 MiB regions); neither: shuffled over the whole cache.
  // Combine with one other suffix and :hnd, e.g. "64x8192:h64:seq"
  int pages = 0;                 // 0 shuffled, 1 ":seq", 2 ":near"
  std::string label() const;     // "64x8192", "64x8192 h64", "64x8192 e4m3", "64x4096 q4",
                                 // "64x8192 bsp", "64x4096 legacy v1", "64x1024 16/4 heads"
  std::string peer_key() const;  // "64:8192:128"; empty where the peer has no such row
};
std::vector<DecodeShape> parse_decode_shapes(
    const std::string& text);  // "64x8192:h64,64x8192:e4m3,64x4096:q4,64x4096:legacy,64x1024:kv4"

struct DecodeOptions {
  std::vector<DecodeShape> shapes;
  int reps = 100;
  bool check = true;
  std::vector<int> try_splits;  // also time the decode kernels alone at these grid widths
  // With try_splits: also time `chain` launches back to back in one graph, each over a KV cache
  // of its own with the fused cache write and the early prologue (as the 32-layer step's
  // layers run), at the policy's grid and at every depth x width of try_splits; 0: not
  int chain = 0;
  // > 0: after each flash single-token row, this many graph replays of it (each after the L2
  // flush) with the decode kernel's per-block records summarized (tools/block_timing.hpp); needs
  // GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_DECODE_TIMING=1. 0: not
  int block_timing = 0;
  std::string
      block_timing_out;  // with block_timing: also write the raw records to PREFIX<row>-rN.u64
  // After each flash NHD single-token row (split launches: each split block its tiles): the
  // decode's reads alone (paged_read, the bench's helper: the decode's grid, page order and blocks
  // a multiprocessor, loads only), then with each request's pages in ascending address order
  bool paged_read = false;
  // After each row: its latency floors after the same flush (read_latency_rows: an empty
  // kernel's graph, the row's bytes read with every load in flight at once, and by bulk copies)
  bool read_latency = false;
};
// bf16, 32 query heads, 8 KV heads (or the shape's :kvN), block 16, shuffled blocks. Sets *ok false
// when a shape fails its float64 reference check.
nlohmann::json bench_decode(const Device& dev, const DecodeOptions& o, const PeerTimes& peer,
                            bool* ok);
// The --block-timing replays of one decode row (tools/bench_block_timing.cpp): `run` queues
// the row's forward; rd_us is the row's same-flush read of [rd_in, rd_in + rd_bytes), which is
// then timed block by block too (read_only_timed).
void decode_block_timing(const Device& dev, const AttentionBackend& attn,
                         const std::function<void()>& run, int reps, double rd_us,
                         const std::string& out_prefix, const std::string& label, CUdeviceptr rd_in,
                         size_t rd_bytes);

// --block-timing with --try-chain: the raw per-block records of the policy chain (`run` queues
// its launches; every launch writes the same rows, so a replay leaves the last launch's stamps,
// except words that only some blocks write: a reader keeps a stamp only if it is not older than
// its row's wait stamp), `reps` replays after the L2 flush, to PREFIX<row>-chain-rN.u64.
void decode_chain_block_records(const Device& dev, CUmodule decode_module,
                                const std::function<void()>& run, int reps,
                                const std::string& out_prefix, const std::string& label);

// The 32-layer decode step (cache write + attention per layer) of llama-3-8b's shapes at each
// batch and context `len`: graph replay and eager launches.
nlohmann::json bench_step(const Device& dev, const std::vector<int>& batches, int len, int reps);

// Tensor parallelism on two GPUs: the same step with half of llama-3-8b's heads on each of
// devices 0 (dev, current on this thread) and 1, replayed on both at once and timed per GPU
// with its own events, against the full step on device 0 alone. With fewer than 2 GPUs it
// times only the full and the half step on device 0 and returns {"skipped": why, "one_gpu":
// rows}.
nlohmann::json bench_tensor_parallel(const Device& dev, const std::vector<int>& batches, int len,
                                     int reps);

// A mixed 32-layer step of llama-3-8b's shapes: `decodes` single-token decodes at context `len`
// plus one prefill chunk of `chunk` tokens after `prefix` cached ones, as one graph captured for
// any mix (AttentionLayerStack::step_mixed) against eager launches (the batch split on the
// device, and split on the host as without mixed graphs). Throws if the graph's output differs
// from the same launches run eagerly. host_only: the eager host-split step alone, nothing
// captured or launched before it (a profiler's launch count: 3 kernels a layer from the first).
nlohmann::json bench_mixed_step(const Device& dev, int decodes, int len, int chunk, int prefix,
                                int reps, bool host_only = false);

// Capturing every default size of the 32-layer stack at max_num_seqs: total ms, graph memory.
nlohmann::json bench_capture(const Device& dev, int max_num_seqs);

// Causal prefill of batch x len new tokens (bf16, 32/8 heads, head `head`, block 16); legacy: the
// same over vLLM's legacy caches through forward_prefix; fp8: e4m3 queries (q_scale 0.5) over an
// e4m3 cache (scales 1.5) through AttentionBackend::forward (spec "_qe4m3"), bf16 output.
// prefix > 0: chunked prefill, each request's len new tokens over `prefix` tokens already in the
// cache (seq_len prefix + len; FLOPs of the causal part only). legacy, fp8 and prefix > 0 take
// head 128. bsp: a block-sparse layer's bf16 prefill (Phi-3-small's pattern) through
// AttentionBackend::forward, checked against the float64 reference with the same pattern (FLOPs
// counted as the dense causal prefill's); no peer.
nlohmann::json bench_prefill(const Device& dev, int batch, int len, int reps, const PeerTimes& peer,
                             bool* ok, bool legacy = false, bool fp8 = false, int prefix = 0,
                             int head = 128, bool bsp = false);

// Part legacy-variants (tools/bench_legacy_prefill.cpp): forward_prefix at head size 128 for each
// variant name BATCHxLEN[+PREFIX][:fp16][:kvN][:bsN][:wN][:sinks][:nc] (fp16 caches and query,
// N KV heads of the 32 query heads, block size N, sliding window N, attention sinks,
// non-causal; default bf16, 8 KV heads, block 16, causal). check_legacy_variant_names throws on a
// malformed name (bench_legacy_variants calls it first); sets *ok false when a row's check against
// the reference fails.
void check_legacy_variant_names(const std::vector<std::string>& names);
nlohmann::json bench_legacy_variants(const Device& dev, const std::vector<std::string>& names,
                                     int reps, bool* ok);

// Cascade attention: `batch` single-token decodes after a shared prompt of each length in
// `prefixes` (multiples of 16) and `own` tokens of their own, plain decode against cascade
// attention (graphattn/cascade.hpp) in the same run, with vLLM's use_cascade_attention verdict.
// Sets *ok false when the cascade output differs from the plain one (relative L2 > 1e-2).
nlohmann::json bench_cascade(const Device& dev, int batch, int own,
                             const std::vector<int>& prefixes, int reps, bool* ok);

}  // namespace graphattn::bench
