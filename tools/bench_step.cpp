// graphattn-bench, step and capture parts: llama-3-8b's 32 attention layers (32/8 heads, head 128,
// bf16, block 16), each layer a cache write plus attention, as the library's ready step
// (AttentionLayerStack) replayed from a CUDA graph and launched eagerly.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include "graphattn/capture.hpp"
#include "graphattn/graphattn.hpp"
#include "tools/bench_parts.hpp"
#include "tools/models.hpp"

namespace graphattn::bench {
namespace {

constexpr int kBlock = 16;

// The built-in model's shapes (tools/models.cpp), so the bench and graphattn-warmup agree.
const tools::ModelConfig& llama() { return tools::find_model("llama-3-8b"); }

AttentionLayerStack::Options llama_stack(int max_tokens, int max_model_len, int num_blocks) {
  tools::ModelRunSettings s;  // bf16, 16-bit KV cache
  s.block_size = kBlock;
  s.max_model_len = max_model_len;
  s.max_num_seqs = max_tokens;
  s.arch = 0;  // the current device
  AttentionLayerStack::Options o;
  o.layers = tools::model_layer_configs(llama(), s);
  o.max_tokens = max_tokens;
  o.num_blocks = num_blocks;
  o.max_blocks_per_seq = (max_model_len + kBlock - 1) / kBlock;
  return o;
}

}  // namespace

nlohmann::json bench_step(const Device& dev, const std::vector<int>& batches, int len, int reps) {
  const tools::ModelConfig& m = llama();
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int per_seq = (len + kBlock - 1) / kBlock;
  AttentionLayerStack stack(llama_stack(max_batch, len, max_batch * per_seq));
  stack.prepare();
  for (int l = 0; l < m.num_layers; ++l) {
    const TensorView kv = stack.kv_cache(l);
    fill_random_bf16(dev, kv.data, static_cast<size_t>(kv.numel()), 17 + l);
  }
  GraphRunner::Options go;
  go.capture_sizes = batches;
  GraphRunner runner(
      go, [&](CUstream s, int n) { stack.step(s, n); }, [&] { return stack.fingerprint(); });
  runner.capture_all(dev.stream);
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
    // b decode requests at context len (the new token included), shuffled blocks.
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
    std::vector<uint16_t> qv(static_cast<size_t>(b) * m.num_heads * m.head_size),
        kvv(static_cast<size_t>(b) * m.num_kv_heads * m.head_size);
    for (auto* v : {&qv, &kvv})  // random bf16 in [-2, 2)
      for (auto& x : *v)
        x = static_cast<uint16_t>(((rng() & 1) << 15) | ((126 + (rng() & 1)) << 7) |
                                  (rng() & 0x7f));
    stack.set_batch(md, b, dev.stream, &qv, &kvv, &kvv);
    for (int i = 0; i < 3; ++i) runner.run(dev.stream, b);
    const double graph_us = time_us(dev, reps, true, [&] { runner.run(dev.stream, b); });
    const double eager_us = time_us(dev, reps, true, [&] { stack.step(dev.stream, b); });
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
