// SPDX-License-Identifier: Apache-2.0
// graphattn-warmup: an engine's start-up and decode loop for a built-in model, with graphattn
// doing the attention of every layer.
//
//   [compile]  every kernel the model needs, in parallel through the kernel cache
//   [capture]  one eager run and one CUDA graph per capture size, largest first
//   [decode]   continuous batching: requests arrive (prefill), grow by one token per step
//              (decode-only steps replay the padded decode graph, steps with prefills a mixed
//              graph of their token count, split on the device; --no-mixed-graphs runs those
//              eagerly), finish; a sample of graph steps is re-run eagerly (the same launches)
//              and compared byte for byte. With --spec-tokens K a decode step
//              verifies 1 + K tokens a request (uniform batches replay graphs) and keeps
//              1 + a random number of them (the accepted drafts)
//   [latency]  decode step at fixed batch sizes, graph replay vs eager launches
//
// Without a GPU it runs the compile phase, says capture and decode were skipped, and exits 0.
//
// Each kernel's line is printed when that kernel is done, every line is flushed (a pipe sees it
// then too), and a terminal gets a status line on stderr during compile, capture and decode.
// --json: one JSON document of the results on stdout at the end; the lines go to stderr.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "graphattn/capture.hpp"
#include "graphattn/graphattn.h"
#include "graphattn/graphattn.hpp"
#include "tools/models.hpp"
#include "tools/progress.hpp"
#include "tools/warmup_options.hpp"

using namespace graphattn;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kPrefillBudget = 2048;  // prompt tokens admitted per step

using Settings = tools::WarmupSettings;
using Json = nlohmann::ordered_json;

// Where the lines for people go: stdout, or stderr with --json (stdout then carries the report).
FILE* g_out = stdout;
// The --json report, filled by the phases.
Json g_report = Json::object();

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(g_out, fmt, ap);
  va_end(ap);
  std::fflush(g_out);
}

std::string text_of(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::min<double>(v.size() - 1, std::floor(p * v.size())));
  return v[i];
}

int compile_phase(KernelCache& cache, const std::vector<AttentionSpec>& specs, unsigned threads,
                  const std::string& model, int arch) {
  say("[compile] %s: %zu kernels for sm_%d, cache %s\n", model.c_str(), specs.size(), arch,
      cache.dir().empty() ? "(memory only)" : cache.dir().c_str());
  const auto t0 = Clock::now();
  Json kernels = Json::array();
  {
    // Each kernel's line as soon as it is done (the order the workers finish in).
    tools::Progress progress("[compile]", specs.size(), g_out);
    cache.precompile(specs, threads, [&](size_t, const PrecompileResult& r) {
      progress.advance(r.spec);
      Json k = {{"spec", r.spec},
                {"result", r.error.empty() ? to_string(r.origin) : "failed"},
                {"ms", r.ms}};
      if (!r.error.empty()) {
        k["error"] = r.error;
        progress.line(text_of("  %-56s FAILED", r.spec.c_str()) + "\n" + r.error);
      } else {
        progress.line(text_of("  %-56s %-8s %8.1f ms", r.spec.c_str(), to_string(r.origin), r.ms));
      }
      kernels.push_back(std::move(k));
    });
  }
  const double wall = ms_since(t0);
  int failed = 0, hits = 0;
  for (const auto& k : kernels) {
    failed += k.contains("error");
    hits += !k.contains("error") && k["result"] != to_string(CacheOrigin::kCompiled);
  }
  const int compiled = static_cast<int>(kernels.size()) - hits - failed;
  say("[compile] %zu kernels: %d compiled, %d cache hits, %d failed; %.1f ms wall\n",
      kernels.size(), compiled, hits, failed, wall);
  g_report["compile"] = {{"kernels", kernels}, {"compiled", compiled}, {"hits", hits},
                         {"failed", failed},   {"wall_ms", wall},      {"threads", threads}};
  return failed;
}

// A request of the synthetic workload: a prompt, then decode steps until it has generated
// `target` tokens.
struct Request {
  int prompt = 0, target = 0, generated = 0, seq_len = 0;
  bool prefilled = false;
  std::vector<int32_t> blocks;
};

class BlockPool {
 public:
  explicit BlockPool(int n) {
    free_.resize(n);
    std::iota(free_.begin(), free_.end(), 0);
  }
  bool take(int count, std::vector<int32_t>* out) {
    if (static_cast<int>(free_.size()) < count) return false;
    out->assign(free_.end() - count, free_.end());
    free_.resize(free_.size() - count);
    return true;
  }
  void give(const std::vector<int32_t>& b) { free_.insert(free_.end(), b.begin(), b.end()); }

 private:
  std::vector<int32_t> free_;
};

// A step's batch: decodes first (q query tokens each: 1 + the speculative tokens), then prompts.
CommonAttentionMetadata batch_of(const std::vector<Request*>& decodes,
                                 const std::vector<Request*>& prefills, int block_size, int width,
                                 int decode_len) {
  std::vector<int32_t> q, k, table;
  std::vector<int64_t> slots;
  for (const auto* list : {&decodes, &prefills})
    for (const Request* r : *list) {
      const int n = r->prefilled ? decode_len : r->prompt;
      q.push_back(n);
      k.push_back(r->seq_len);
      for (int i = 0; i < width; ++i)
        table.push_back(i < static_cast<int>(r->blocks.size()) ? r->blocks[i] : 0);
      for (int p = r->seq_len - n; p < r->seq_len; ++p)
        slots.push_back(static_cast<int64_t>(r->blocks[p / block_size]) * block_size +
                        p % block_size);
    }
  return CommonAttentionMetadata::make(q, k, table, width, slots);
}

int run_gpu_phases(const Settings& s, const tools::ModelConfig& m,
                   const std::vector<AttentionLayerConfig>& layers, KernelCache& cache) {
  const Stream stream;
  // Full decode graphs hold q tokens per request (q = 1 + the speculative tokens), so sizes
  // above max_num_seqs * q never run.
  const int q = s.spec_tokens + 1;
  std::vector<int> sizes = s.capture_sizes.empty() ? default_capture_sizes(s.max_num_seqs, q)
                                                   : normalize_capture_sizes(s.capture_sizes);
  sizes.erase(
      std::remove_if(sizes.begin(), sizes.end(), [&](int x) { return x > s.max_num_seqs * q; }),
      sizes.end());
  if (sizes.empty()) sizes = {q};
  const int width = (s.max_model_len + s.block_size - 1) / s.block_size;
  const int64_t block_bytes = int64_t{2} * s.block_size * m.num_kv_heads * m.head_size *
                              kv_dtype_bytes(layers[0].kv_dtype, layers[0].dtype);
  size_t free_bytes = 0, total = 0;
  device_memory_info(&free_bytes, &total);
  const double budget = s.kv_cache_gib > 0 ? s.kv_cache_gib * (1ull << 30) : 0.5 * free_bytes;
  const int64_t want = int64_t{s.max_num_seqs} * width + width;
  const int64_t fit =
      static_cast<int64_t>(budget / (static_cast<double>(block_bytes) * m.num_layers));
  const int num_blocks = static_cast<int>(std::max<int64_t>(width + 1, std::min(want, fit)));

  AttentionLayerStack::Options so;
  so.layers = layers;
  // A step holds every running decode plus at most kPrefillBudget prompt tokens (vLLM's
  // max_num_batched_tokens), so that is the most an eager step needs.
  so.max_tokens = std::max(sizes.back(), s.max_num_seqs * q + kPrefillBudget);
  so.num_blocks = num_blocks;
  so.max_blocks_per_seq = width;
  AttentionLayerStack stack(so);
  stack.prepare(cache);
  say("[capture] %d layers, KV cache %d blocks x %d layers (%.2f GiB), all buffers %.2f GiB\n",
      m.num_layers, num_blocks, m.num_layers,
      static_cast<double>(block_bytes) * num_blocks * m.num_layers / (1ull << 30),
      static_cast<double>(stack.device_bytes()) / (1ull << 30));
  GraphRunner::Options go;
  go.capture_sizes = sizes;
  go.max_num_seqs = s.max_num_seqs;
  GraphRunner runner(
      go, [&](CUstream st, int n) { stack.step(st, n); }, [&] { return stack.fingerprint(); });
  const auto tc = Clock::now();
  {
    tools::Progress progress("[capture]", sizes.size(), g_out);
    runner.capture_all(stream, [&](int i, int n, int size, double ms) {
      progress.advance(std::to_string(size) + " tokens");
      if (i <= 3 || i == n || i % 8 == 0)
        progress.line(text_of("[capture] size %d of %d: %d tokens, %.1f ms", i, n, size, ms));
    });
  }
  // Mixed graphs: one per token count up to the largest step (decodes plus the prefill
  // budget), the decode sizes and then every 64 tokens.
  std::vector<int> mixed_sizes = sizes;
  for (int t = sizes.back() + 64; sizes.back() < so.max_tokens; t += 64) {
    mixed_sizes.push_back(std::min(t, so.max_tokens));
    if (t >= so.max_tokens) break;
  }
  GraphRunner::Options mo = go;
  mo.capture_sizes = s.mixed_graphs ? mixed_sizes : std::vector<int>{};
  mo.disable_graphs = go.disable_graphs || !s.mixed_graphs;
  GraphRunner mixed(
      mo, [&](CUstream st, int n) { stack.step_mixed(st, n); },
      [&] { return stack.fingerprint(); });
  if (s.mixed_graphs && runner.graphs_enabled()) {
    tools::Progress progress("[capture] mixed", mixed_sizes.size(), g_out);
    mixed.capture_all(stream, [&](int, int, int size, double) {
      progress.advance(std::to_string(size) + " tokens");
    });
    progress.finish();
    say("[capture] mixed graphs: %zu sizes (%d..%d) in %.1f ms capturing\n", mixed_sizes.size(),
        mixed_sizes.front(), mixed_sizes.back(), mixed.stats().capture_ms);
  }
  const double capture_wall = ms_since(tc);
  const GraphStats cs = runner.stats();
  g_report["capture"] = {
      {"layers", m.num_layers},
      {"kv_cache_blocks", num_blocks},
      {"graphs", runner.graphs_enabled()},
      {"sizes", sizes},
      {"mixed_sizes",
       s.mixed_graphs && runner.graphs_enabled() ? Json(mixed_sizes) : Json::array()},
      {"wall_ms", capture_wall},
      {"capture_ms", cs.capture_ms},
      {"mixed_capture_ms", mixed.stats().capture_ms},
      {"graph_memory_bytes", cs.graph_memory_bytes}};
  if (runner.graphs_enabled())
    say("[capture] %zu sizes (%d..%d) in %.1f ms wall (%.1f ms capturing), graph memory "
        "%.1f MiB\n",
        sizes.size(), sizes.front(), sizes.back(), capture_wall, cs.capture_ms,
        cs.graph_memory_bytes / 1048576.0);
  else
    say("[capture] graphs disabled (GRAPHATTN_DISABLE_GRAPHS=1): every step runs eagerly\n");

  // Random activations, drawn once; each step takes a window of them.
  std::mt19937_64 rng(s.seed);
  const size_t qrow = size_t{1} * m.num_heads * m.head_size,
               krow = size_t{1} * m.num_kv_heads * m.head_size;
  const size_t pool_rows = 4096;
  std::vector<uint16_t> pool((pool_rows + so.max_tokens + 600) * qrow);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : pool) {
    const float f = normal(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  auto slice = [&](size_t rows, size_t row) {
    const size_t at = (rng() % pool_rows) * qrow;
    return std::vector<uint16_t>(pool.begin() + at, pool.begin() + at + rows * row);
  };
  stream.synchronize();

  // [decode] continuous batching.
  BlockPool blocks(num_blocks);
  std::deque<Request> waiting;
  std::vector<std::unique_ptr<Request>> running;
  // Prompts longer than q tokens: a shorter one would be split as a decode.
  std::uniform_int_distribution<int> prompt_len(std::max(16, q + 1),
                                                std::min(512, s.max_model_len / 2));
  std::uniform_int_distribution<int> gen_len(16, std::min(512, s.max_model_len / 2));
  const FlashAttentionMetadataBuilder builder(AttentionType::kDecoder, s.block_size, q,
                                              s.mixed_graphs);
  // eager_us[i] re-ran the step whose graph replay took sampled_graph_us[i]: the pairs compare
  // graph and eager on the same steps (graph_us holds every graph step, a different set).
  std::vector<double> graph_us, sampled_graph_us, eager_us, all_us;
  std::vector<unsigned char> out_graph, out_eager;
  EventTimer timer;
  int64_t tokens = 0, mismatches = 0, compared = 0, finished = 0, graph_steps = 0,
          decode_tokens = 0, mixed_steps = 0;
  double busy_us = 0;
  const auto td = Clock::now();
  tools::Progress decode_progress("[decode] step", s.steps, g_out);
  for (int step = 0; step < s.steps; ++step) {
    decode_progress.advance();
    // Arrivals: a burst at the start, then about one every few steps.
    const int arrivals = step == 0 ? s.max_num_seqs / 2 : (rng() % 5 == 0 ? 1 + rng() % 3 : 0);
    for (int a = 0; a < arrivals; ++a) {
      Request r;
      r.prompt = prompt_len(rng);
      r.target = gen_len(rng);
      waiting.push_back(r);
    }
    // Admit while there is room: requests, blocks, and the step's prompt-token budget.
    std::vector<Request*> decodes, prefills;
    for (auto& r : running) decodes.push_back(r.get());
    int prompt_tokens = 0;
    while (!waiting.empty() && static_cast<int>(running.size()) < s.max_num_seqs &&
           prompt_tokens + waiting.front().prompt <= kPrefillBudget) {
      Request r = waiting.front();
      // Speculative steps write up to q - 1 tokens past the last accepted one.
      const int need = (std::min(r.prompt + r.target + q - 1, s.max_model_len) + s.block_size - 1) /
                       s.block_size;
      if (!blocks.take(need, &r.blocks)) break;
      waiting.pop_front();
      prompt_tokens += r.prompt;
      r.seq_len = r.prompt;
      running.push_back(std::make_unique<Request>(r));
      prefills.push_back(running.back().get());
    }
    for (Request* r : decodes) r->seq_len += q;
    if (decodes.empty() && prefills.empty()) continue;
    const auto md = batch_of(decodes, prefills, s.block_size, width, q);
    const int n = md.num_actual_tokens;
    // A uniform decode batch replays its decode graph; any other batch a mixed graph.
    // (An eager step runs through `runner`: its step splits the batch on the host.)
    const bool uniform = builder.is_uniform_decode(md);
    const bool mixed_step = !uniform && builder.can_run_in_cudagraph(md) &&
                            mixed.graphs_enabled() && mixed.padded_size(n) > 0;
    const bool graph_ok =
        mixed_step || (uniform && runner.graphs_enabled() && runner.padded_size(n) > 0);
    GraphRunner& graphs = mixed_step ? mixed : runner;
    const int padded = graph_ok ? graphs.padded_size(n) : n;
    if (n > so.max_tokens) {
      decode_progress.finish();
      say("[decode] step %d: %d tokens exceed the stack's %d; lower the prompt lengths\n", step, n,
          so.max_tokens);
      return 1;
    }
    const auto qr = slice(n, qrow), k = slice(n, krow), v = slice(n, krow);
    if (mixed_step)
      stack.set_mixed_batch(md, padded, stream, &qr, &k, &v);
    else
      stack.set_batch(md, padded, stream, &qr, &k, &v);
    const double us = timer.time_us(stream, [&] { graphs.run(stream, n, graph_ok); });
    all_us.push_back(us);
    busy_us += us;
    tokens += n;
    decode_tokens += static_cast<int64_t>(decodes.size()) * q;
    mixed_steps += mixed_step;
    if (graph_ok) {
      ++graph_steps;
      graph_us.push_back(us);
      if (graph_steps % 8 == 1) {
        // Re-run the same step eagerly (the cache write is idempotent) and compare bytes.
        const size_t bytes = static_cast<size_t>(n) * qrow * 2;
        out_graph.resize(bytes * m.num_layers);
        out_eager.resize(bytes * m.num_layers);
        for (int l = 0; l < m.num_layers; ++l)
          copy_to_host(out_graph.data() + l * bytes, stack.output(l).data, bytes);
        sampled_graph_us.push_back(us);
        eager_us.push_back(timer.time_us(stream, [&] {
          if (mixed_step)
            stack.step_mixed(stream, padded);
          else
            stack.step(stream, padded);
        }));
        for (int l = 0; l < m.num_layers; ++l)
          copy_to_host(out_eager.data() + l * bytes, stack.output(l).data, bytes);
        ++compared;
        if (out_graph != out_eager) {
          ++mismatches;
          decode_progress.line(
              text_of("[decode] step %d: graph and eager outputs differ (%d tokens, %s size %d)",
                      step, n, mixed_step ? "mixed" : "decode", padded));
        }
      }
    }
    for (Request* r : prefills) r->prefilled = true;
    for (Request* r : decodes) {
      // The target model accepts 0..q - 1 of the drafts; the rejected ones' cache rows are
      // overwritten by the next step.
      const int accepted = q > 1 ? static_cast<int>(rng() % q) : 0;
      r->seq_len -= q - 1 - accepted;
      r->generated += 1 + accepted;
    }
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [&](const std::unique_ptr<Request>& r) {
                                   const bool done = r->generated >= r->target ||
                                                     r->seq_len + q > s.max_model_len;
                                   if (done) {
                                     blocks.give(r->blocks);
                                     ++finished;
                                   }
                                   return done;
                                 }),
                  running.end());
    if ((step + 1) % 50 == 0)
      decode_progress.line(
          text_of("[decode] step %d: %zu running, %zu waiting, %lld finished, last step %d tokens "
                  "(%s) %.1f us",
                  step + 1, running.size(), waiting.size(), static_cast<long long>(finished), n,
                  graph_ok ? "graph" : "eager", us));
  }
  decode_progress.finish();
  const double wall = ms_since(td);
  const GraphStats gs = runner.stats();

  // [latency] fixed decode batches at context 1024 (or max_model_len / 2), graph vs eager.
  say("\n[latency] decode step of %d layers, context %d, %d token(s) a request, median of 50\n",
      m.num_layers, std::min(1024, s.max_model_len - q), q);
  say("  %6s %14s %14s %8s\n", "batch", "graph us", "eager us", "ratio");
  Json latency = Json::array();
  for (int b : {1, 8, 64, s.max_num_seqs}) {
    const int t = b * q;  // tokens
    if (b > s.max_num_seqs || runner.padded_size(t) != t) continue;
    const int ctx = std::min(1024, s.max_model_len - q);
    const int per = (ctx + q + s.block_size - 1) / s.block_size;
    if (int64_t{per} * b > num_blocks) continue;
    std::vector<Request> reqs(b);
    std::vector<Request*> dec;
    for (int i = 0; i < b; ++i) {
      reqs[i].prefilled = true;
      reqs[i].seq_len = ctx + q;
      for (int j = 0; j < per; ++j) reqs[i].blocks.push_back(i * per + j);
      dec.push_back(&reqs[i]);
    }
    const auto md = batch_of(dec, {}, s.block_size, width, q);
    const auto qr = slice(t, qrow), k = slice(t, krow), v = slice(t, krow);
    stack.set_batch(md, t, stream, &qr, &k, &v);
    std::vector<double> g, e;
    for (int i = 0; i < 55; ++i) {
      if (runner.graphs_enabled())
        g.push_back(timer.time_us(stream, [&] { runner.run(stream, t); }));
      e.push_back(timer.time_us(stream, [&] { stack.step(stream, t); }));
    }
    g.erase(g.begin(), g.begin() + std::min<size_t>(5, g.size()));
    e.erase(e.begin(), e.begin() + 5);
    const double gm = percentile(g, 0.5), em = percentile(e, 0.5);
    say("  %6d %14.1f %14.1f %8.2f\n", b, gm, em, gm > 0 ? em / gm : 0.0);
    latency.push_back({{"batch", b},
                       {"context", ctx},
                       {"graph_us", runner.graphs_enabled() ? Json(gm) : Json()},
                       {"eager_us", em}});
    if (b == s.max_num_seqs) break;
  }

  say("\n[summary] %s, %d layers, max_num_seqs %d, max_model_len %d", m.name.c_str(), m.num_layers,
      s.max_num_seqs, s.max_model_len);
  if (q > 1) say(", %d speculative tokens (decode requests of %d tokens)", q - 1, q);
  say("\n");
  say("  %-28s %lld (%lld graph, of which %lld mixed; %lld eager)\n", "steps",
      static_cast<long long>(all_us.size()), static_cast<long long>(graph_steps),
      static_cast<long long>(mixed_steps), static_cast<long long>(all_us.size() - graph_steps));
  say("  %-28s %lld requests finished, %lld tokens (%lld decode)\n", "work",
      static_cast<long long>(finished), static_cast<long long>(tokens),
      static_cast<long long>(decode_tokens));
  say("  %-28s %.0f tokens/s of attention time, %.0f tokens/s wall\n", "throughput",
      tokens / (busy_us * 1e-6), tokens / (wall * 1e-3));
  say("  %-28s p50 %.1f us, p99 %.1f us (all %zu graph steps)\n", "graph step latency",
      percentile(graph_us, 0.5), percentile(graph_us, 0.99), graph_us.size());
  if (!eager_us.empty()) {
    std::vector<double> ratio(eager_us.size());
    for (size_t i = 0; i < ratio.size(); ++i) ratio[i] = eager_us[i] / sampled_graph_us[i];
    say("  %-28s p50 %.1f us graph, %.1f us eager over the %zu steps re-run eagerly; eager / "
        "graph per step: median %.2f\n",
        "graph vs eager, same steps", percentile(sampled_graph_us, 0.5), percentile(eager_us, 0.5),
        eager_us.size(), percentile(ratio, 0.5));
  }
  say("  %-28s %llu captures, %llu replays, %llu updates, %llu re-instantiations, %llu "
      "eager steps\n",
      "decode graphs", static_cast<unsigned long long>(gs.captures),
      static_cast<unsigned long long>(gs.replays), static_cast<unsigned long long>(gs.updates),
      static_cast<unsigned long long>(gs.reinstantiations),
      static_cast<unsigned long long>(gs.eager_steps));
  const GraphStats ms = mixed.stats();
  say("  %-28s %llu captures, %llu replays, %llu updates, %llu re-instantiations\n", "mixed graphs",
      static_cast<unsigned long long>(ms.captures), static_cast<unsigned long long>(ms.replays),
      static_cast<unsigned long long>(ms.updates),
      static_cast<unsigned long long>(ms.reinstantiations));
  Json decode = {{"steps", all_us.size()},
                 {"graph_steps", graph_steps},
                 {"mixed_steps", mixed_steps},
                 {"eager_steps", static_cast<int64_t>(all_us.size()) - graph_steps},
                 {"requests_finished", finished},
                 {"tokens", tokens},
                 {"decode_tokens", decode_tokens},
                 {"wall_ms", wall},
                 {"attention_us", busy_us},
                 {"graph_step_us_p50", percentile(graph_us, 0.5)},
                 {"graph_step_us_p99", percentile(graph_us, 0.99)},
                 {"compared_steps", compared},
                 {"mismatches", mismatches},
                 {"decode_graphs",
                  {{"captures", gs.captures},
                   {"replays", gs.replays},
                   {"updates", gs.updates},
                   {"reinstantiations", gs.reinstantiations},
                   {"eager_steps", gs.eager_steps}}},
                 {"mixed_graphs",
                  {{"captures", ms.captures},
                   {"replays", ms.replays},
                   {"updates", ms.updates},
                   {"reinstantiations", ms.reinstantiations}}}};
  if (!eager_us.empty()) {
    decode["sampled_graph_us_p50"] = percentile(sampled_graph_us, 0.5);
    decode["sampled_eager_us_p50"] = percentile(eager_us, 0.5);
  }
  g_report["decode"] = std::move(decode);
  g_report["latency"] = std::move(latency);
  say("  %-28s %lld of %lld compared steps\n", "mismatches", static_cast<long long>(mismatches),
      static_cast<long long>(compared));
  return mismatches == 0 ? 0 : 1;
}

// The warmup itself; --json's report is printed by main() whatever it returns.
int run(const Settings& s) {
  try {
    if (s.list_models) {
      for (const auto& m : tools::builtin_models())
        say("%-12s layers %2d  heads %2d/%d  head %3d  window %d%s  soft cap %g\n", m.name.c_str(),
            m.num_layers, m.num_heads, m.num_kv_heads, m.head_size, m.window,
            m.window_alternates ? " (alternating layers)" : "", m.soft_cap);
      return 0;
    }
    const tools::ModelConfig& m = tools::find_model(s.model);
    std::string why;
    const bool gpu = gpu_available(&why);
    int arch = s.arch;
    if (gpu) {
      const bool exists = s.device < device_count();
      try {
        use_device(s.device);
      } catch (const Error& e) {
        if (exists) throw;
        std::fprintf(stderr, "graphattn-warmup: --device %d: %s\n", s.device, e.what());
        return 2;
      }
      const int device_arch = current_device_arch();
      if (arch == 0) arch = device_arch;
      if (arch != device_arch) {
        std::fprintf(stderr, "graphattn-warmup: --arch %d differs from the GPU's sm_%d\n", arch,
                     device_arch);
        return 2;
      }
    } else if (arch == 0) {
      arch = 90;
    }
    const auto layers = tools::model_layer_configs(m, tools::run_settings_of(s, arch));
    CacheOptions opts;
    opts.dir = s.cache_dir;
    KernelCache cache(opts);
    g_report["model"] = m.name;
    g_report["arch"] = arch;
    g_report["gpu"] = gpu;
    g_report["cache_dir"] = cache.dir();
    if (compile_phase(cache, tools::model_kernel_specs(layers), s.threads, m.name, arch) != 0)
      return 1;
    if (!gpu) {
      say("[capture] skipped: no GPU found (%s)\n[decode] skipped: no GPU found\n", why.c_str());
      g_report["skipped"] = "capture and decode: no GPU found (" + why + ")";
      return 0;
    }
    return run_gpu_phases(s, m, layers, cache);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graphattn-warmup: %s\n", e.what());
    g_report["error"] = e.what();
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Every option and the environment are checked before any phase: a bad value exits 2.
  const tools::WarmupArgs args = tools::parse_warmup_args(argc, argv);
  if (args.exit_code == 0) {
    std::printf("%s", args.text.c_str());
    return 0;
  }
  if (args.exit_code > 0) {
    std::fprintf(stderr, "graphattn-warmup: %s\n(run with --help for the options)\n",
                 args.text.c_str());
    return args.exit_code;
  }
  const Settings& s = args.settings;
  if (s.json && !s.list_models) g_out = stderr;
  g_report["version"] = graphattn_version();
  const int code = run(s);
  if (s.json && !s.list_models) {
    g_report["exit_code"] = code;
    std::printf("%s\n", g_report.dump(2).c_str());
    std::fflush(stdout);
  }
  return code;
}
