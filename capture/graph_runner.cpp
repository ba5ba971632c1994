// SPDX-License-Identifier: Apache-2.0
// Capture sizes, padding, and the graph runner: capture, replay, exec update, eager fallback.
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/env_flag.hpp"
#include "graphattn/capture.hpp"
#include "graphattn/error.hpp"
#include "runtime/driver.hpp"

namespace graphattn {

using detail::driver;

std::vector<int> default_capture_sizes(int max_num_seqs, int decode_query_len) {
  if (max_num_seqs < 1)
    throw Error("max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (decode_query_len < 1 || decode_query_len > kMaxDecodeQueryLen)
    throw Error("decode_query_len " + std::to_string(decode_query_len) +
                " is not supported; supported: 1.." + std::to_string(kMaxDecodeQueryLen));
  const int q = decode_query_len;
  const int max_size = std::min(2 * max_num_seqs * q, 512);
  std::vector<int> sizes = {1, 2, 4};
  for (int s = 8; s < 256; s += 8) sizes.push_back(s);
  for (int s = 256; s <= max_size; s += 16) sizes.push_back(s);
  for (int& s : sizes) s = (s + q - 1) / q * q;
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int s) { return s > max_size; }),
              sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::vector<int> normalize_capture_sizes(std::vector<int> sizes) {
  for (int s : sizes)
    if (s < 1) throw Error("capture size " + std::to_string(s) + " is not allowed; sizes are >= 1");
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

int padded_capture_size(const std::vector<int>& sorted_sizes, int n) {
  auto it = std::lower_bound(sorted_sizes.begin(), sorted_sizes.end(), n);
  return it == sorted_sizes.end() ? 0 : *it;
}

struct GraphRunner::Graph {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  uint64_t fingerprint = 0;
  ~Graph() {
    if (exec) driver().cuGraphExecDestroy(exec);
    if (graph) driver().cuGraphDestroy(graph);
  }
};

namespace {

int64_t free_device_memory() {
  size_t free_bytes = 0, total = 0;
  GA_CU_CHECK(driver().cuMemGetInfo(&free_bytes, &total));
  return static_cast<int64_t>(free_bytes);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GraphRunner::GraphRunner(Options options, Step step, Fingerprint fingerprint)
    : sizes_(normalize_capture_sizes(options.capture_sizes.empty()
                                         ? default_capture_sizes(options.max_num_seqs)
                                         : options.capture_sizes)),
      disabled_(options.disable_graphs || detail::env_flag("GRAPHATTN_DISABLE_GRAPHS")),
      use_node_priority_(options.use_node_priority),
      step_(std::move(step)),
      fingerprint_(std::move(fingerprint)) {
  if (!step_) throw Error("GraphRunner needs a step to capture");
  if (!fingerprint_) throw Error("GraphRunner needs a fingerprint of what the step depends on");
}

GraphRunner::~GraphRunner() = default;

int GraphRunner::padded_size(int n) const { return padded_capture_size(sizes_, n); }

void GraphRunner::capture(CUstream stream, int size, Graph& g) {
  const auto& d = driver();
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t fp = fingerprint_();
  GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUgraph graph = nullptr;
  try {
    step_(stream, size);
  } catch (...) {
    d.cuStreamEndCapture(stream, &graph);  // leave the stream usable
    if (graph) d.cuGraphDestroy(graph);
    throw;
  }
  GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
  ++stats_.captures;
  if (g.exec) {
    CUgraphExecUpdateResultInfo info{};
    if (d.cuGraphExecUpdate(g.exec, graph, &info) == CUDA_SUCCESS) {
      ++stats_.updates;
      d.cuGraphDestroy(g.graph);
      g.graph = graph;
      g.fingerprint = fp;
      stats_.capture_ms += ms_since(t0);
      return;
    }
    ++stats_.reinstantiations;
    d.cuGraphExecDestroy(g.exec);
    g.exec = nullptr;
  }
  const int64_t before = free_device_memory();
  CUgraphExec exec = nullptr;
  const CUresult r = d.cuGraphInstantiate(
      &exec, graph, use_node_priority_ ? CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY : 0);
  if (r != CUDA_SUCCESS) {
    d.cuGraphDestroy(graph);
    GA_CU_CHECK(r);
  }
  stats_.graph_memory_bytes += before - free_device_memory();
  if (g.graph) d.cuGraphDestroy(g.graph);
  g.graph = graph;
  g.exec = exec;
  g.fingerprint = fp;
  stats_.capture_ms += ms_since(t0);
}

void GraphRunner::capture_all(CUstream stream, const Progress& progress) {
  if (disabled_) return;
  if (!stream) throw Error("graph capture needs a non-default stream");
  const int count = static_cast<int>(sizes_.size());
  for (int i = 0; i < count; ++i) {
    const int size = sizes_[count - 1 - i];  // largest first: its memory pool serves the rest
    const auto t0 = std::chrono::steady_clock::now();
    step_(stream, size);  // eager run: warms caches and catches errors outside capture
    GA_CU_CHECK(driver().cuStreamSynchronize(stream));
    auto& g = graphs_[size];
    if (!g) g = std::make_unique<Graph>();
    capture(stream, size, *g);
    if (progress) progress(i + 1, count, size, ms_since(t0));
  }
}

int GraphRunner::run(CUstream stream, int num_tokens, bool allow_graph) {
  if (num_tokens < 0)
    throw Error("a step needs num_tokens >= 0, got " + std::to_string(num_tokens));
  const int size = disabled_ || !allow_graph ? 0 : padded_size(num_tokens);
  if (size == 0) {
    ++stats_.eager_steps;
    step_(stream, num_tokens);
    return 0;
  }
  if (!stream) throw Error("graph replay needs a non-default stream");
  auto& g = graphs_[size];
  if (!g) g = std::make_unique<Graph>();
  if (!g->exec || g->fingerprint != fingerprint_()) capture(stream, size, *g);
  GA_CU_CHECK(driver().cuGraphLaunch(g->exec, stream));
  ++stats_.replays;
  return size;
}

}  // namespace graphattn
