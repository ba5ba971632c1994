// SPDX-License-Identifier: Apache-2.0
// Shared pieces of graphattn-bench: the device and its limits measured in the same run, random
// fills, event timing with the L2 flushed, graph capture of a callable, and the peer's times.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graphattn/runtime.hpp"
#include "runtime/driver.hpp"

namespace graphattn::bench {

struct Device {
  int ordinal = 0;  // the CUDA device; its context must be current where this is used
  std::string name;
  int sms = 0, l2_bytes = 0, arch = 0;
  std::unique_ptr<Stream> owned_stream;
  CUstream stream = nullptr;  // owned_stream's
  CUmodule helpers = nullptr;
  CUfunction fill_bf16 = nullptr, fill_fp8 = nullptr, read_only = nullptr;
  CUfunction read_only_timed = nullptr;  // read_only with per-block records (--block-timing)
  CUfunction read_only_pdl = nullptr;    // read_only as a chain layer (--try-chain's floor)
  CUfunction paged_read = nullptr;       // the decode's reads alone (--paged-read)
  // --read-latency: an empty kernel, read_lat2..8 (K register loads a thread), read_cpa4..32 (K
  // cp.async copies a thread, all in flight), read_bulk (sm_90 bulk copies into shared memory)
  CUfunction empty_kernel = nullptr, read_bulk = nullptr;
  CUfunction one_pass[7] = {};          // bench_common.cpp's kOnePass readers, in its order
  std::unique_ptr<DeviceBuffer> flush;  // twice the L2, written before every timed repetition
  // --flush-by-reading: the flush buffer is read (read_only) instead of written, which leaves L2
  // holding clean lines: a written flush leaves up to an L2 of dirty lines, whose write-back
  // the timed work then pays for as it reads.
  bool flush_by_reading = false;
  std::unique_ptr<DeviceBuffer> flush_sink;  // read_only's sink, for the flush by reading
  double read_gbs = 0;                       // read-only streaming pass, GB/s
  double copy_gbs = 0;                       // device-to-device copy, bytes read + written, GB/s
};

// Makes device's primary context current on this thread (use_device), makes a stream, compiles
// the helper kernels, measures the two limits.
Device open_device(int device = 0);

// bf16 values in [-2, 2) (or fp8 e4m3 bytes in (-1, 1), no NaN) from a hash of the index.
void fill_random_bf16(const Device& d, void* ptr, size_t elems, unsigned seed);
void fill_random_fp8(const Device& d, void* ptr, size_t bytes, unsigned seed);

double median(std::vector<double> v);

// Evicts the L2: writes the flush buffer (byte value `seed`), or reads it with
// dev.flush_by_reading.
void flush_l2_now(const Device& dev, int seed);

// One streaming pass of the read_only helper over [in, in + bytes) (16-byte loads; bytes is
// rounded down to 16) into a 64-byte sink: the read-only limit's measurement and the flush by
// reading.
void launch_read_only(const Device& dev, CUdeviceptr in, size_t bytes, CUdeviceptr sink);
// read_only's grid (blocks of 512 threads).
inline unsigned read_only_blocks(const Device& dev) { return static_cast<unsigned>(dev.sms) * 8; }
// The same pass as one layer of a chain: `blocks` blocks of 512 threads, launched with
// programmatic dependent launch allowed (sm_90+), waiting for the previous launch before its
// loads (wait_first) or only before its end.
void launch_read_only_pdl(const Device& dev, CUdeviceptr in, size_t bytes, CUdeviceptr sink,
                          unsigned blocks, bool wait_first);
// One paged_read pass (graphattn-bench --paged-read): a grid of pieces x requests blocks of 128
// threads, each reading its 256-byte piece of every token row of its request's pages (K at key,
// V at value, 16 tokens a page, page i of request r at block_table[r * blocks_per_seq + i]) with
// smem_bytes of (unused) dynamic shared memory, which the caller allowed on dev.paged_read.
struct PagedRead {
  CUdeviceptr key = 0, value = 0, block_table = 0;
  int pieces = 0, requests = 0, blocks_per_seq = 0, tiles = 0;
  int splits = 1;  // blocks a request (y = request * splits + split), each a tile range
  // 0: tiles as given; else each request's tiles from its length here, read first (the
  // decode's chain seq_lens -> block table -> KV). block_table 0: page i of request r is
  // r * blocks_per_seq + i (no block-table round trip)
  CUdeviceptr seq_lens = 0;
  size_t page_bytes = 0, token_bytes = 0;
  unsigned smem_bytes = 0;
};
void launch_paged_read(const Device& dev, const PagedRead& r, CUdeviceptr sink);
// The same pass with per-block records (64 uint64 a block, read_only_blocks(dev) blocks, the
// decode kernel's timing layout with one warp) at `records`.
void launch_read_only_timed(const Device& dev, CUdeviceptr in, size_t bytes, CUdeviceptr sink,
                            CUdeviceptr records);

// --read-latency: the floors of one row's time after the same flush (graph replays, median of
// reps, printed): an empty kernel's graph (1 block, and one block of 128 threads a
// multiprocessor), and [in, in + bytes) read in one pass by grids over every multiprocessor:
// read_lat<K> (K 16-byte register loads a thread), read_cpa<K> (K cp.async copies a thread, all
// in flight) and read_bulk (bulk copies into shared memory, 1 and 2 blocks a multiprocessor).
// Returns the least read time.
double read_latency_rows(const Device& dev, int reps, CUdeviceptr in, size_t bytes);

// Median of `reps` event-timed runs of work(), each after writing the flush buffer (when
// flush_l2) so no run finds the previous one's data in L2.
template <typename Work>
double time_us(const Device& dev, int reps, bool flush_l2, Work work) {
  EventTimer timer;
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    if (flush_l2) flush_l2_now(dev, i);
    t.push_back(timer.time_us(dev.stream, work));
  }
  return median(t);
}

// Captures work() (launches on dev.stream) into an executable graph.
template <typename Work>
CUgraphExec capture(const Device& dev, Work work) {
  const auto& d = detail::driver();
  CUgraph g;
  GA_CU_CHECK(d.cuStreamBeginCapture(dev.stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  work();
  GA_CU_CHECK(d.cuStreamEndCapture(dev.stream, &g));
  CUgraphExec e;
  GA_CU_CHECK(d.cuGraphInstantiate(&e, g, 0));
  d.cuGraphDestroy(g);
  return e;
}

// time_us of replays of a graph captured from work() (launches on dev.stream), L2 flushed before
// each; the graph is destroyed after.
template <typename Work>
double time_graph_us(const Device& dev, int reps, Work work) {
  const auto& d = detail::driver();
  const CUgraphExec e = capture(dev, work);
  const double t = time_us(dev, reps, true, [&] { GA_CU_CHECK(d.cuGraphLaunch(e, dev.stream)); });
  d.cuGraphExecDestroy(e);
  return t;
}

// The same-flush read floor of a row: the least of the eager and the graph median of one
// read_only pass over [in, in + bytes), each repetition after the flush the rows get (a written
// flush leaves L2 full of dirty lines, which this pass pays for as a row's kernel does).
double read_same_flush_us(const Device& dev, int reps, CUdeviceptr in, size_t bytes);

// The peer's times from tools/peer_sdpa.py, run by graphattn-bench in the same session.
struct PeerTimes {
  bool available = false;
  std::string why;                           // when not available
  std::string backend;                       // e.g. "cudnn_attention"
  std::map<std::string, double> decode_us;   // key "BxL:D"
  std::map<std::string, double> prefill_us;  // key "B:L:D"
  // fp8 (e4m3 q, K, V) prefill through cuDNN's SDPA, by PyTorch where it exposes it, else by
  // cuDNN's Python frontend where installed, key "B:L"; else fp8_why says what each answered.
  // fp8_rel_l2: the frontend peer's relative L2 error against fp32 (-1: not checked).
  std::map<std::string, double> prefill_fp8_us;
  std::string fp8_backend, fp8_why;
  double fp8_rel_l2 = -1;
};
PeerTimes run_peer(const std::string& script, const std::string& out_json,
                   const std::vector<std::string>& decode_keys,
                   const std::vector<std::string>& prefill_keys);

}  // namespace graphattn::bench
