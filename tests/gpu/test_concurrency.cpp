// SPDX-License-Identifier: Apache-2.0
// Concurrent use as backend.hpp states it: prepare() of different configurations from several
// threads sharing one KernelCache (one compile per kernel), forward() from two threads on two
// streams with a workspace each (every output equal, byte for byte, to the same step run alone),
// and a workspace that was never zero-filled (the first split launch clears its counters).
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "tests/gpu/forward_batch.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

// Runs fn on `threads` threads released together, each with the device's context current.
void run_together(int threads, const std::function<void(int)>& fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  std::vector<std::string> errors(threads);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        ensure_context(0);
        ++ready;
        while (!go.load()) std::this_thread::yield();
        fn(t);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  while (ready.load() < threads) std::this_thread::yield();
  go = true;
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t)
    CHECK_MESSAGE(errors[t].empty(), "thread " << t << ": " << errors[t]);
}

// Setup on the legacy stream (uploads, fills) done before any work on the tests' own
// non-blocking streams, which do not wait for it.
void settle() { GA_CU_CHECK(detail::driver().cuCtxSynchronize()); }

// One decode step of n requests, on `stream`, its output poisoned first on the same stream; the
// output bytes.
std::vector<unsigned char> step_alone(const AttentionBackend& attn, Batch& b, int n,
                                      DeviceBuffer& ws, CUstream stream) {
  GA_CU_CHECK(detail::driver().cuMemsetD8Async(b.out.ptr(), 0xff, b.out.bytes(), stream));
  attn.forward(b.query(), b.keys(), b.values(), b.cache_view(), b.output(), b.metadata(n),
               ws.data(), ws.bytes(), stream);
  GA_CU_CHECK(detail::driver().cuStreamSynchronize(stream));
  return b.output_bytes();
}

// Two batches of n requests at len tokens (seeds a and b), a workspace and a stream each.
struct TwoStreams {
  Batch batches[2];
  DeviceBuffer workspaces[2];
  Stream streams[2];
  TwoStreams(const AttentionBackend& attn, int n, int len, uint64_t a, uint64_t b)
      : batches{Batch(n, 1, len, KvDType::kAuto, a), Batch(n, 1, len, KvDType::kAuto, b)},
        workspaces{DeviceBuffer(attn.workspace_bytes()), DeviceBuffer(attn.workspace_bytes())} {
    settle();
  }
  // Each batch's step (the first `decodes` requests decodes) by `attn`, run alone: the output
  // bytes, checked to differ between the batches and to hold none of the poison (0xff pairs).
  void run_alone(const AttentionBackend& attn, int decodes, std::vector<unsigned char> (&out)[2]) {
    for (int i = 0; i < 2; ++i)
      out[i] = step_alone(attn, batches[i], decodes, workspaces[i], streams[i]);
    REQUIRE(out[0] != out[1]);
    for (int i = 0; i < 2; ++i) {
      size_t nan_bytes = 0;
      for (size_t j = 0; j + 1 < out[i].size(); j += 2)
        nan_bytes += out[i][j] == 0xff && out[i][j + 1] == 0xff;
      CHECK(nan_bytes == 0);
    }
  }
};

// A prepared bf16 layer whose decode of n requests of len tokens splits (so that the split
// counters and partials of a workspace are in play).
AttentionBackend split_backend(KernelCache& cache, int len, int n) {
  AttentionBackend attn(Batch::layer(KvDType::kAuto, len));
  attn.prepare(cache);
  REQUIRE(attn.decode_max_splits(n) > 1);
  return attn;
}

}  // namespace

TEST_CASE(
    "gpu concurrency: prepare() of different configurations on 6 threads compiles each kernel "
    "once") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  std::vector<AttentionLayerConfig> configs;
  for (KvDType kv : {KvDType::kAuto, KvDType::kFp8E4M3})
    for (int max_len : {512, 4096}) configs.push_back(Batch::layer(kv, max_len));
  configs[1].head_size = 64;
  configs[3].num_heads = 16;      // group 8
  configs.push_back(configs[0]);  // the same kernels as another thread's
  configs.push_back(configs[2]);
  std::set<std::string> distinct;
  for (const auto& c : configs)
    for (const auto& s : AttentionBackend(c).required_specs()) distinct.insert(s.to_string());
  std::vector<std::unique_ptr<AttentionBackend>> backends;
  for (const auto& c : configs) backends.push_back(std::make_unique<AttentionBackend>(c));
  run_together(static_cast<int>(configs.size()), [&](int t) { backends[t]->prepare(cache); });
  const CacheStats s = cache.stats();
  CHECK(s.compiles == distinct.size());
  CHECK(s.compile_failures == 0);
  for (const auto& b : backends) CHECK(b->prepared());
}

TEST_CASE("gpu concurrency: two threads run forward() on two streams, each with its workspace") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  constexpr int kLen = 8192, kN = 2;
  const AttentionBackend attn = split_backend(cache, kLen, kN);
  TwoStreams two(attn, kN, kLen, 11, 22);
  Batch(&batches)[2] = two.batches;
  DeviceBuffer(&workspaces)[2] = two.workspaces;
  Stream(&streams)[2] = two.streams;
  // The step writes the same keys and values each time, so every run gives the same bytes.
  std::vector<unsigned char> alone[2];
  two.run_alone(attn, kN, alone);
  std::atomic<int> mismatches{0};
  run_together(2, [&](int t) {
    for (int rep = 0; rep < 50; ++rep)
      if (step_alone(attn, batches[t], kN, workspaces[t], streams[t]) != alone[t]) ++mismatches;
  });
  CHECK(mismatches.load() == 0);
}

// A mixed batch (host split: the first half decodes, the rest one-token prefills) on one
// backend from two threads, each on its own stream with its own workspace: forward() forks the
// prefill onto a stream of the backend's own per caller stream and joins it before returning,
// so each thread's output, after synchronizing only its stream, equals the serial launches'
// bytes; eagerly, and with both threads capturing their streams into graphs at the same time
// (each caller stream's side stream joins only its own capture).
TEST_CASE("gpu concurrency: two threads run mixed forward() of one backend, prefill branches") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  const auto& d = detail::driver();
  constexpr int kLen = 8192, kN = 4, kDecodes = 2;
  AttentionBackend attn = split_backend(cache, kLen, kDecodes);
  attn.set_mixed_branches(MixedBranches::kPrefillFirst);
  AttentionBackend serial = attn;  // a copy: the same kernels, its own mode
  serial.set_mixed_branches(MixedBranches::kSerial);
  CHECK(attn.mixed_branches() == MixedBranches::kPrefillFirst);
  CHECK(serial.mixed_branches() == MixedBranches::kSerial);
  TwoStreams two(attn, kN, kLen, 33, 44);
  Batch(&batches)[2] = two.batches;
  DeviceBuffer(&workspaces)[2] = two.workspaces;
  Stream(&streams)[2] = two.streams;
  std::vector<unsigned char> alone[2];
  two.run_alone(serial, kDecodes, alone);
  std::atomic<int> mismatches{0}, graph_mismatches{0};
  run_together(2, [&](int t) {
    for (int rep = 0; rep < 30; ++rep)
      if (step_alone(attn, batches[t], kDecodes, workspaces[t], streams[t]) != alone[t])
        ++mismatches;
    // Both threads capture at once: poison, mixed forward(), into one graph per thread.
    Batch& b = batches[t];
    CUstream s = streams[t];
    GA_CU_CHECK(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    GA_CU_CHECK(d.cuMemsetD8Async(b.out.ptr(), 0xff, b.out.bytes(), s));
    attn.forward(b.query(), b.keys(), b.values(), b.cache_view(), b.output(), b.metadata(kDecodes),
                 workspaces[t].data(), workspaces[t].bytes(), s);
    CUgraph graph = nullptr;
    GA_CU_CHECK(d.cuStreamEndCapture(s, &graph));
    CUgraphExec exec = nullptr;
    GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 10; ++rep) {
      GA_CU_CHECK(d.cuGraphLaunch(exec, s));
      GA_CU_CHECK(d.cuStreamSynchronize(s));
      if (b.output_bytes() != alone[t]) ++graph_mismatches;
    }
    GA_CU_CHECK(d.cuGraphExecDestroy(exec));
    GA_CU_CHECK(d.cuGraphDestroy(graph));
  });
  CHECK(mismatches.load() == 0);
  CHECK(graph_mismatches.load() == 0);
}

TEST_CASE("gpu workspace: a workspace that was never zero-filled gives the same output") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  constexpr int kLen = 8192, kN = 1;
  const AttentionBackend attn = split_backend(cache, kLen, kN);
  if (attn.decode_cluster(kN)) {
    MESSAGE(
        "skipped: with GRAPHATTN_DECODE_CLUSTERS=1 this launch combines in a cluster and "
        "uses no counters");
    return;
  }
  Batch b(kN, 1, kLen, KvDType::kAuto, 5);
  Stream stream;
  DeviceBuffer zeroed(attn.workspace_bytes());
  settle();
  const std::vector<unsigned char> want = step_alone(attn, b, kN, zeroed, stream);
  DeviceBuffer garbage(attn.workspace_bytes());
  garbage.fill_bytes(0xff);  // every counter at 0xffffffff
  settle();
  CHECK(step_alone(attn, b, kN, garbage, stream) == want);
  CHECK(step_alone(attn, b, kN, garbage, stream) == want);  // and it stays fit
  // A new backend of the same configuration clears the same workspace again on its first use.
  const AttentionBackend other = split_backend(cache, kLen, kN);
  garbage.fill_bytes(0x5a);
  settle();
  CHECK(step_alone(other, b, kN, garbage, stream) == want);
}
