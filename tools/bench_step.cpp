// SPDX-License-Identifier: Apache-2.0
// graphattn-bench, step, tensor-parallel and capture parts: llama-3-8b's 32 attention layers
// (32/8 heads, head 128, bf16, block 16), each layer a cache write plus attention, as the
// library's ready step (AttentionLayerStack) replayed from a CUDA graph and launched eagerly;
// and the step split by heads over two GPUs, replayed on both at once.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "graphattn/capture.hpp"
#include "graphattn/graphattn.hpp"
#include "tools/bench_parts.hpp"
#include "tools/models.hpp"

namespace graphattn::bench {
namespace {

constexpr int kBlock = 16;

// The built-in model's shapes (tools/models.cpp), so the bench and graphattn-warmup agree.
const tools::ModelConfig& llama() { return tools::find_model("llama-3-8b"); }

// 1/tp of llama-3-8b's heads per layer (tp 2: the share of one GPU of two).
AttentionLayerStack::Options llama_stack(int max_tokens, int max_model_len, int num_blocks,
                                         int tp = 1) {
  tools::ModelRunSettings s;  // bf16, 16-bit KV cache
  s.block_size = kBlock;
  s.max_model_len = max_model_len;
  s.max_num_seqs = max_tokens;
  s.arch = 0;  // the current device
  AttentionLayerStack::Options o;
  o.layers = tools::model_layer_configs(llama(), s);
  for (AttentionLayerConfig& c : o.layers) {
    c.num_heads /= tp;
    c.num_kv_heads /= tp;
  }
  o.max_tokens = max_tokens;
  o.num_blocks = num_blocks;
  o.max_blocks_per_seq = (max_model_len + kBlock - 1) / kBlock;
  return o;
}

// The 32-layer step on dev's device (its context current): a prepared stack with random KV
// caches and one captured graph per batch.
struct StepRig {
  AttentionLayerStack stack;
  GraphRunner runner;
  StepRig(const Device& dev, const std::vector<int>& batches, int len, int tp)
      : stack(llama_stack(
            *std::max_element(batches.begin(), batches.end()), len,
            *std::max_element(batches.begin(), batches.end()) * ((len + kBlock - 1) / kBlock), tp)),
        runner(
            capture_options(batches), [this](CUstream s, int n) { stack.step(s, n); },
            [this] { return stack.fingerprint(); }) {
    stack.prepare();
    for (int l = 0; l < stack.num_layers(); ++l) {
      const TensorView kv = stack.kv_cache(l);
      fill_random_bf16(dev, kv.data, static_cast<size_t>(kv.numel()), 17 + l);
    }
    runner.capture_all(dev.stream);
  }
  static GraphRunner::Options capture_options(const std::vector<int>& batches) {
    GraphRunner::Options go;
    go.capture_sizes = batches;
    return go;
  }

  // b decode requests at context len (the new token included), shuffled blocks, random bf16 q,
  // k and v in [-2, 2); then three warm-up replays.
  void set_batch(const Device& dev, int b, int len, std::mt19937_64& rng) {
    const AttentionLayerConfig& c = stack.options().layers[0];
    const int per_seq = (len + kBlock - 1) / kBlock;
    std::vector<int32_t> q(b, 1), k(b, len), table(static_cast<size_t>(b) * per_seq);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<int64_t> slots;
    for (int r = 0; r < b; ++r)
      slots.push_back(
          static_cast<int64_t>(table[static_cast<size_t>(r) * per_seq + (len - 1) / kBlock]) *
              kBlock +
          (len - 1) % kBlock);
    const auto md = CommonAttentionMetadata::make(q, k, table, per_seq, slots);
    std::vector<uint16_t> qv(static_cast<size_t>(b) * c.num_heads * c.head_size),
        kvv(static_cast<size_t>(b) * c.num_kv_heads * c.head_size);
    for (auto* v : {&qv, &kvv})
      for (auto& x : *v)
        x = static_cast<uint16_t>(((rng() & 1) << 15) | ((126 + (rng() & 1)) << 7) |
                                  (rng() & 0x7f));
    stack.set_batch(md, b, dev.stream, &qv, &kvv, &kvv);
    for (int i = 0; i < 3; ++i) runner.run(dev.stream, b);
  }
};

// Releases the threads that reach it together, as often as it is used.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    const int gen = generation_.load();
    if (arrived_.fetch_add(1) + 1 == n_) {
      arrived_ = 0;
      ++generation_;
      return;
    }
    while (generation_.load() == gen) std::this_thread::yield();
  }

 private:
  const int n_;
  std::atomic<int> arrived_{0}, generation_{0};
};

}  // namespace

nlohmann::json bench_step(const Device& dev, const std::vector<int>& batches, int len, int reps) {
  const tools::ModelConfig& m = llama();
  StepRig rig(dev, batches, len, 1);
  std::printf(
      "\n== step: %d layers x (cache write + decode), 32/8 heads, head 128, bf16, block "
      "16, context %d, median of %d, L2 flushed\n",
      m.num_layers, len, reps);
  std::printf("floor: the step's KV bytes over the read-only bandwidth measured above\n");
  std::printf("%-8s %9s %11s %11s %9s %10s\n", "batch", "KV MiB", "graph us", "eager us",
              "floor us", "graph/floor");
  std::mt19937_64 rng(7);
  nlohmann::json out = nlohmann::json::array();
  for (int b : batches) {
    rig.set_batch(dev, b, len, rng);
    const double graph_us = time_us(dev, reps, true, [&] { rig.runner.run(dev.stream, b); });
    const double eager_us = time_us(dev, reps, true, [&] { rig.stack.step(dev.stream, b); });
    const double bytes =
        static_cast<double>(m.num_layers) * b * len * m.num_kv_heads * m.head_size * 2 * 2;
    const double floor_us = bytes / dev.read_gbs / 1e3;
    std::printf("%-8d %9.0f %11.1f %11.1f %9.1f %10.2f\n", b, bytes / (1 << 20), graph_us, eager_us,
                floor_us, graph_us / floor_us);
    out.push_back({{"batch", b},
                   {"len", len},
                   {"layers", m.num_layers},
                   {"kv_mib", bytes / (1 << 20)},
                   {"graph_us", graph_us},
                   {"eager_us", eager_us},
                   {"floor_us", floor_us}});
  }
  return out;
}

nlohmann::json bench_tensor_parallel(const Device& dev, const std::vector<int>& batches, int len,
                                     int reps) {
  const tools::ModelConfig& m = llama();
  const int devices = device_count();
  if (devices < 2) {
    // One GPU: the per-GPU share alone (half the heads, the grid policy's per-GPU shape)
    // against the full step, one after the other on this GPU; no two-GPU columns.
    const std::string why = "needs 2 GPUs, found " + std::to_string(devices);
    StepRig full(dev, batches, len, 1), half(dev, batches, len, 2);
    std::printf(
        "\n== tensor-parallel step: the two-GPU part skipped (%s); on GPU 0 alone, %d layers x "
        "(cache write + decode) of llama-3-8b with half the heads (%d/%d) vs all (%d/%d), "
        "context %d, median of %d, L2 flushed\n",
        why.c_str(), m.num_layers, m.num_heads / 2, m.num_kv_heads / 2, m.num_heads, m.num_kv_heads,
        len, reps);
    std::printf("%-8s %13s %13s %10s\n", "batch", "1 GPU full", "1 GPU half", "half/full");
    std::mt19937_64 rng(7);
    nlohmann::json rows = nlohmann::json::array();
    for (int b : batches) {
      full.set_batch(dev, b, len, rng);
      half.set_batch(dev, b, len, rng);
      const double full_us = time_us(dev, reps, true, [&] { full.runner.run(dev.stream, b); });
      const double half_us = time_us(dev, reps, true, [&] { half.runner.run(dev.stream, b); });
      std::printf("%-8d %10.1f us %10.1f us %9.2f\n", b, full_us, half_us, half_us / full_us);
      rows.push_back({{"batch", b},
                      {"len", len},
                      {"layers", m.num_layers},
                      {"full_one_gpu_us", full_us},
                      {"half_one_gpu_us", half_us}});
    }
    return {{"skipped", why}, {"one_gpu", rows}};
  }
  // Device 1 is opened, prepared and timed on a thread of its own with its context current;
  // this thread keeps device 0's (dev's).
  Device dev1;
  std::unique_ptr<StepRig> half1;
  std::string error;
  std::thread([&] {
    try {
      dev1 = open_device(1);
      dev1.flush_by_reading = dev.flush_by_reading;
      half1 = std::make_unique<StepRig>(dev1, batches, len, 2);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }).join();
  if (!error.empty()) throw Error("tensor-parallel step on device 1: " + error);
  StepRig full(dev, batches, len, 1), half0(dev, batches, len, 2);
  std::printf(
      "\n== tensor-parallel step: %d layers x (cache write + decode) of llama-3-8b, each of 2 GPUs "
      "(%s, %s) with half the heads (%d/%d), replayed on both at once, vs the full step (%d/%d) "
      "on GPU 0 alone; context %d, median of %d, L2 flushed, per GPU with its own events\n",
      m.num_layers, dev.name.c_str(), dev1.name.c_str(), m.num_heads / 2, m.num_kv_heads / 2,
      m.num_heads, m.num_kv_heads, len, reps);
  std::printf("%-8s %13s %13s %13s %13s %12s %8s\n", "batch", "1 GPU full", "1 GPU half",
              "GPU 0 of 2", "GPU 1 of 2", "2 GPUs step", "speedup");
  std::mt19937_64 rng(7), rng1(8);
  nlohmann::json out = nlohmann::json::array();
  for (int b : batches) {
    full.set_batch(dev, b, len, rng);
    half0.set_batch(dev, b, len, rng);
    std::thread([&] {
      use_device(dev1.ordinal);
      half1->set_batch(dev1, b, len, rng1);
    }).join();
    const double full_us = time_us(dev, reps, true, [&] { full.runner.run(dev.stream, b); });
    const double half_us = time_us(dev, reps, true, [&] { half0.runner.run(dev.stream, b); });
    // Both GPUs replay their half at once, rep by rep: each thread flushes its L2, then times
    // its replay with its device's events.
    SpinBarrier barrier(2);
    std::vector<double> t[2];
    std::string errors[2];
    auto timed = [&](int g, const Device& d, StepRig& rig) {
      int waited = 0;  // a thread that fails still meets the other at every rep
      try {
        use_device(d.ordinal);
        EventTimer timer;
        for (int i = 0; i < reps; ++i) {
          flush_l2_now(d, i);
          d.owned_stream->synchronize();
          barrier.wait();
          ++waited;
          t[g].push_back(timer.time_us(d.stream, [&] { rig.runner.run(d.stream, b); }));
        }
      } catch (const std::exception& e) {
        errors[g] = e.what();
        for (; waited < reps; ++waited) barrier.wait();
      }
    };
    std::thread t0(timed, 0, std::cref(dev), std::ref(half0));
    std::thread t1(timed, 1, std::cref(dev1), std::ref(*half1));
    t0.join();
    t1.join();
    for (const std::string& e : errors)
      if (!e.empty()) throw Error("tensor-parallel step: " + e);
    std::vector<double> step(reps);
    for (int i = 0; i < reps; ++i) step[i] = std::max(t[0][i], t[1][i]);
    const double gpu0 = median(t[0]), gpu1 = median(t[1]), both = median(step);
    std::printf("%-8d %10.1f us %10.1f us %10.1f us %10.1f us %9.1f us %7.2fx\n", b, full_us,
                half_us, gpu0, gpu1, both, full_us / both);
    out.push_back({{"batch", b},
                   {"len", len},
                   {"layers", m.num_layers},
                   {"devices", {dev.name, dev1.name}},
                   {"full_one_gpu_us", full_us},
                   {"half_one_gpu_us", half_us},
                   {"half_per_gpu_at_once_us", {gpu0, gpu1}},
                   {"tensor_parallel_step_us", both},
                   {"speedup", full_us / both}});
  }
  // dev1's objects belong to device 1: released with its context current.
  std::thread([&] {
    use_device(dev1.ordinal);
    half1.reset();
    dev1 = Device();
  }).join();
  return out;
}

namespace {
// Relative L2 distance ||a - b|| / ||b|| of two bf16 arrays (a NaN gives NaN).
double rel_l2_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  const auto f = [](uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return static_cast<double>(x);
  };
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = f(a[i]), y = f(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
// The graph's output against the eager host split's: different splits and grids round apart.
constexpr double kHostSplitBound = 1e-2;
}  // namespace

nlohmann::json bench_mixed_step(const Device& dev, int decodes, int len, int chunk, int prefix,
                                int reps, bool host_only) {
  const tools::ModelConfig& m = llama();
  const int per_decode = (len + kBlock - 1) / kBlock, prefill_len = prefix + chunk;
  const int per_prefill = (prefill_len + kBlock - 1) / kBlock;
  const int n = decodes + chunk, max_model_len = std::max(len, prefill_len);
  AttentionLayerStack::Options o =
      llama_stack(n, max_model_len, decodes * per_decode + per_prefill);
  // The engine's request limit (the mixed graph's request slots), not one per token.
  for (AttentionLayerConfig& c : o.layers) c.max_num_seqs = 64;
  AttentionLayerStack stack(o);
  stack.prepare();
  for (int l = 0; l < stack.num_layers(); ++l) {
    const TensorView kv = stack.kv_cache(l);
    fill_random_bf16(dev, kv.data, static_cast<size_t>(kv.numel()), 31 + l);
  }
  GraphRunner::Options go;
  go.capture_sizes = {n};
  go.use_node_priority = true;  // a high-priority branch mode keeps its priority in the graph
  GraphRunner mixed(
      go, [&](CUstream s, int t) { stack.step_mixed(s, t); }, [&] { return stack.fingerprint(); });
  if (!host_only) mixed.capture_all(dev.stream);

  // decodes x (one token at position len - 1), then one chunk of `chunk` tokens after `prefix`.
  std::mt19937_64 rng(11);
  const int W = (max_model_len + kBlock - 1) / kBlock, R = decodes + 1;
  std::vector<int32_t> ql(decodes, 1), kl(decodes, len), table(static_cast<size_t>(R) * W, 0);
  ql.push_back(chunk);
  kl.push_back(prefill_len);
  std::vector<int32_t> pool(decodes * per_decode + per_prefill);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int64_t> slots;
  size_t next = 0;
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < (kl[r] + kBlock - 1) / kBlock; ++b)
      table[static_cast<size_t>(r) * W + b] = pool[next++];
    for (int p = kl[r] - ql[r]; p < kl[r]; ++p)
      slots.push_back(int64_t{table[static_cast<size_t>(r) * W + p / kBlock]} * kBlock +
                      p % kBlock);
  }
  const auto md = CommonAttentionMetadata::make(ql, kl, table, W, slots);
  const AttentionLayerConfig& c = stack.options().layers[0];
  std::vector<uint16_t> qv(static_cast<size_t>(n) * c.num_heads * c.head_size),
      kvv(static_cast<size_t>(n) * c.num_kv_heads * c.head_size);
  for (auto* v : {&qv, &kvv})
    for (auto& x : *v)
      x = static_cast<uint16_t>(((rng() & 1) << 15) | ((126 + (rng() & 1)) << 7) | (rng() & 0x7f));

  // Graph replay of the mixed graph and the same launches eagerly (the batch split on the
  // device), then today's eager path: the host splits the batch, decode and prefill launches
  // sized for it.
  double graph_us = 0, eager_device_us = 0;
  bool same = true;
  std::vector<unsigned char> from_graph_bytes;  // the graph's output (last layer)
  if (!host_only) {
    stack.set_mixed_batch(md, n, dev.stream, &qv, &kvv, &kvv);
    for (int i = 0; i < 3; ++i) mixed.run(dev.stream, n);
    graph_us = time_us(dev, reps, true, [&] { mixed.run(dev.stream, n); });
    const size_t out_bytes = static_cast<size_t>(n) * c.num_heads * c.head_size * 2;
    std::vector<unsigned char> from_graph(out_bytes), from_eager(out_bytes);
    const auto last = stack.output(stack.num_layers() - 1);
    dev.owned_stream->synchronize();
    GA_CU_CHECK(detail::driver().cuMemcpyDtoH(from_graph.data(),
                                              reinterpret_cast<CUdeviceptr>(last.data), out_bytes));
    eager_device_us = time_us(dev, reps, true, [&] { stack.step_mixed(dev.stream, n); });
    dev.owned_stream->synchronize();
    GA_CU_CHECK(detail::driver().cuMemcpyDtoH(from_eager.data(),
                                              reinterpret_cast<CUdeviceptr>(last.data), out_bytes));
    same = from_graph == from_eager;
    from_graph_bytes = std::move(from_graph);
  }
  stack.set_batch(md, n, dev.stream, &qv, &kvv, &kvv);
  const double eager_host_us = time_us(dev, reps, true, [&] { stack.step(dev.stream, n); });
  // The graph against the host split (other kernels and grids: equal within rounding, not bit
  // for bit). The eager device split runs the graph's kernels, so it cannot tell a wrong kernel
  // (session 12: a mixed decode kernel whose blocks all exited passed as "equal").
  double host_rel_l2 = 0;
  if (!host_only) {
    const size_t elems = static_cast<size_t>(n) * c.num_heads * c.head_size;
    std::vector<uint16_t> from_host(elems), graph_out(elems);
    dev.owned_stream->synchronize();
    GA_CU_CHECK(detail::driver().cuMemcpyDtoH(
        from_host.data(), reinterpret_cast<CUdeviceptr>(stack.output(stack.num_layers() - 1).data),
        elems * 2));
    std::memcpy(graph_out.data(), from_graph_bytes.data(), elems * 2);
    host_rel_l2 = rel_l2_bf16(graph_out, from_host);
  }
  std::printf(
      "\n== mixed step: %d layers x (cache write + decode + prefill), %d decodes at context %d "
      "+ one %d-token prefill chunk over a %d-token prefix (%d tokens), llama-3-8b shapes, "
      "median of %d, L2 flushed\n",
      m.num_layers, decodes, len, chunk, prefix, n, reps);
  const char* branches = AttentionLayerStack::mixed_branches_name(stack.options().mixed_branches);
  std::printf("decode and prefill of a layer (split on the device): GRAPHATTN_MIXED_BRANCHES=%s\n",
              branches);
  // The decode grids (x splits, y KV-head blocks, z requests) of the two splits, from a backend
  // of layer 0's configuration (the stack's own are alike).
  AttentionBackend probe(c);
  probe.prepare();
  const int request_slots = stack.mixed_request_slots(n),
            mixed_splits = probe.mixed_decode_max_splits(request_slots);
  const int used_splits = probe.mixed_decode_splits(request_slots, decodes, chunk, len);
  std::printf(
      "decode grid: graph %d splits at most x %d KV heads x %d request slots (%d stages, "
      "GRAPHATTN_MIXED_DECODE_DIVISOR=%d), %d splits a request with %d decodes; host split %d x "
      "%d x %d decodes (%d stages)\n",
      mixed_splits, c.num_kv_heads, request_slots, probe.mixed_decode_stages(request_slots),
      probe.mixed_decode_divisor(), used_splits, decodes,
      decodes > 0 ? probe.decode_max_splits(decodes) : 0, c.num_kv_heads, decodes,
      decodes > 0 ? probe.decode_stages(decodes) : 0);
  std::printf("%-34s %10s\n", "", "us");
  if (!host_only) {
    std::printf("%-34s %10.1f\n", "graph (split on the device)", graph_us);
    std::printf("%-34s %10.1f\n", "eager (split on the device)", eager_device_us);
  }
  std::printf("%-34s %10.1f\n", "eager (split on the host)", eager_host_us);
  if (!host_only)
    std::printf(
        "graph vs eager (host split): %.2fx; graph output %s the eager device-split output, "
        "relative L2 %.2e from the eager host-split output (bound %.0e)\n",
        eager_host_us / graph_us, same ? "equals" : "DIFFERS FROM", host_rel_l2, kHostSplitBound);
  if (!same) throw Error("mixed step: the graph's output differs from the same launches eagerly");
  if (!(host_rel_l2 <= kHostSplitBound))
    throw Error("mixed step: the graph's output is " + std::to_string(host_rel_l2) +
                " (relative L2) from the eager host split's, more than " +
                std::to_string(kHostSplitBound));
  return {{"layers", m.num_layers},
          {"decodes", decodes},
          {"decode_len", len},
          {"prefill_chunk", chunk},
          {"prefill_prefix", prefix},
          {"tokens", n},
          {"mixed_branches", branches},
          {"mixed_decode_divisor", probe.mixed_decode_divisor()},
          {"graph_decode_splits", mixed_splits},
          {"graph_decode_splits_used", used_splits},
          {"request_slots", request_slots},
          {"graph_us", graph_us},
          {"eager_device_split_us", eager_device_us},
          {"eager_host_split_us", eager_host_us},
          {"graph_equals_eager", same},
          {"graph_vs_host_split_rel_l2", host_rel_l2}};
}

nlohmann::json bench_capture(const Device& dev, int max_num_seqs) {
  const std::vector<int> sizes = default_capture_sizes(max_num_seqs);
  AttentionLayerStack stack(llama_stack(sizes.back(), 4096, 256));
  stack.prepare();
  GraphRunner::Options go;
  go.capture_sizes = sizes;
  GraphRunner runner(
      go, [&](CUstream s, int n) { stack.step(s, n); }, [&] { return stack.fingerprint(); });
  const auto t0 = std::chrono::steady_clock::now();
  runner.capture_all(dev.stream);
  const double wall =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const GraphStats s = runner.stats();
  std::printf(
      "\n== capture: %zu default sizes (1..%d) for max_num_seqs %d, %d layers of cache "
      "write + attention\n",
      sizes.size(), sizes.back(), max_num_seqs, llama().num_layers);
  std::printf(
      "wall %.1f ms (one eager run and one capture per size), of which capture and "
      "instantiation %.1f ms; graph memory %.1f MiB\n",
      wall, s.capture_ms, s.graph_memory_bytes / 1048576.0);
  return {{"sizes", sizes.size()},
          {"largest", sizes.back()},
          {"max_num_seqs", max_num_seqs},
          {"layers", llama().num_layers},
          {"wall_ms", wall},
          {"capture_ms", s.capture_ms},
          {"graph_memory_mib", s.graph_memory_bytes / 1048576.0}};
}

}  // namespace graphattn::bench
