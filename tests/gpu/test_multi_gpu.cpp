// SPDX-License-Identifier: Apache-2.0
// Several GPUs in one process: a backend and an AttentionLayerStack per device, each device
// driven from its own thread (use_device), graphs captured and replayed on every device at once,
// outputs compared with an eager run of the same step and with the float64 reference; the
// kernel cache compiles each kernel once per arch while each context loads its own module.
// And tensor parallelism: llama-3-8b's attention split by heads over two GPUs, both replayed at
// once, each GPU's output checked against the reference of the whole layer for its heads.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "graphattn/capture.hpp"
#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "runtime/module_cache.hpp"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

constexpr int kLayers = 2, kHead = 128, kBlock = 16, kMaxModelLen = 512, kMaxTokens = 8;
constexpr int kBlocksPerSeq = kMaxModelLen / kBlock, kBlocks = kMaxTokens * kBlocksPerSeq;

// Skips the rest of a test case unless `want` devices are present.
#define REQUIRE_DEVICES(want)                                            \
  do {                                                                   \
    const int found_ = device_count();                                   \
    if (found_ < (want)) {                                               \
      MESSAGE("skipped: needs " << (want) << " GPUs, found " << found_); \
      return;                                                            \
    }                                                                    \
  } while (0)

// One model's attention on the host: every layer's KV cache (exact bf16 values, logical NHD
// [blocks, block, kv_heads, head]) and the current step's batch. The reference of the whole
// layer is computed from it; each device holds a slice of its KV heads.
struct HostModel {
  int heads = 0, kv_heads = 0;
  std::vector<std::vector<double>> k, v;  // per layer
  CommonAttentionMetadata batch;
  std::vector<uint16_t> q, new_k, new_v;  // bf16 bits: [n, heads, D], [n, kv_heads, D]

  HostModel(int h, int kh, std::mt19937_64& rng) : heads(h), kv_heads(kh) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int l = 0; l < kLayers; ++l) {
      for (auto* c : {&k, &v}) {
        c->emplace_back(static_cast<size_t>(kBlocks) * kBlock * kv_heads * kHead);
        for (double& x : c->back()) x = bf16_to_float(float_to_bf16(normal(rng)));
      }
    }
  }

  // A decode-only step of n requests (lengths 1..kMaxModelLen, distinct shuffled blocks) with
  // new random q, k and v; the new keys and values go into the host caches, as the step's cache
  // write puts them into the devices'.
  void new_step(std::mt19937_64& rng, int n) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> len(1, kMaxModelLen);
    std::vector<int32_t> pool(kBlocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> ql(n, 1), kl(n), table(static_cast<size_t>(n) * kBlocksPerSeq, 0);
    std::vector<int64_t> slots(n);
    for (int r = 0; r < n; ++r) {
      kl[r] = len(rng);
      for (int b = 0; b < kBlocksPerSeq; ++b)
        table[static_cast<size_t>(r) * kBlocksPerSeq + b] = pool[r * kBlocksPerSeq + b];
      const int p = kl[r] - 1;
      slots[r] =
          int64_t{table[static_cast<size_t>(r) * kBlocksPerSeq + p / kBlock]} * kBlock + p % kBlock;
    }
    batch = CommonAttentionMetadata::make(ql, kl, table, kBlocksPerSeq, slots);
    q.resize(static_cast<size_t>(n) * heads * kHead);
    new_k.resize(static_cast<size_t>(n) * kv_heads * kHead);
    new_v.resize(new_k.size());
    for (auto* x : {&q, &new_k, &new_v})
      for (auto& e : *x) e = float_to_bf16(normal(rng));
    const size_t row = static_cast<size_t>(kv_heads) * kHead;
    for (int l = 0; l < kLayers; ++l)
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < row; ++i) {
          k[l][slots[r] * row + i] = bf16_to_float(new_k[r * row + i]);
          v[l][slots[r] * row + i] = bf16_to_float(new_v[r * row + i]);
        }
  }

  // The float64 attention of layer l for the current step: [n, heads, D].
  std::vector<double> reference(int l) {
    RefProblem p;
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_size = kHead;
    p.block_size = kBlock;
    p.query_start_loc = batch.query_start_loc;
    p.seq_lens = batch.seq_lens;
    p.block_table = batch.block_table;
    p.max_blocks_per_seq = kBlocksPerSeq;
    for (uint16_t x : q) p.q.push_back(bf16_to_float(x));
    p.k_cache.swap(k[l]);  // lent, not copied
    p.v_cache.swap(v[l]);
    p.scale = 1.0 / std::sqrt(static_cast<double>(kHead));
    std::vector<double> out = reference_attention(p);
    p.k_cache.swap(k[l]);
    p.v_cache.swap(v[l]);
    return out;
  }
};

// Rows [n, heads, D] of `all` ([n, all_heads, D]) for heads [first, first + heads).
template <typename T>
std::vector<T> head_slice(const std::vector<T>& all, int n, int all_heads, int first, int heads) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(n) * heads * kHead);
  for (int t = 0; t < n; ++t) {
    const auto row = all.begin() + (static_cast<size_t>(t) * all_heads + first) * kHead;
    out.insert(out.end(), row, row + static_cast<size_t>(heads) * kHead);
  }
  return out;
}

// One device's share: KV heads [kv_first, kv_first + kv_heads) of a HostModel (and the query
// heads of their groups), as an AttentionLayerStack with a graph per size, on its own stream.
struct DeviceWorker {
  int device = 0;
  HostModel* model = nullptr;
  int kv_first = 0, kv_heads = 0, first = 0, heads = 0;
  std::unique_ptr<AttentionLayerStack> stack;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<GraphRunner> runner;
  // Filled by the steps.
  std::vector<std::vector<uint16_t>> replayed;  // per layer: [n, heads, D] from the graph
  size_t eager_mismatches = 0;                  // bytes where an eager run of the step differs
  int ran_size = 0;
  // The modules and compiled kernels this device's context uses, in required_specs() order.
  std::vector<CUmodule> modules;
  std::vector<const CompiledKernel*> compiled;
  std::vector<std::string> specs;

  // On the device's thread.
  void prepare(KernelCache& cache) {
    const int group = model->heads / model->kv_heads;
    first = kv_first * group;
    heads = kv_heads * group;
    AttentionLayerStack::Options o;
    for (int l = 0; l < kLayers; ++l)
      o.layers.push_back(layer_config(heads, kv_heads, kHead, kMaxModelLen, kMaxTokens));
    o.max_tokens = kMaxTokens;
    o.num_blocks = kBlocks;
    o.max_blocks_per_seq = kBlocksPerSeq;
    stack = std::make_unique<AttentionLayerStack>(o);
    stack->prepare(cache);
    stream = std::make_unique<Stream>();
    // This device's slice of every layer's cache.
    const size_t slots = static_cast<size_t>(kBlocks) * kBlock;
    for (int l = 0; l < kLayers; ++l) {
      std::vector<uint16_t> slice(2 * slots * kv_heads * kHead);
      for (int half = 0; half < 2; ++half) {
        const std::vector<double>& src = half ? model->v[l] : model->k[l];
        for (size_t s = 0; s < slots; ++s)
          for (int h = 0; h < kv_heads * kHead; ++h)
            slice[(half * slots + s) * kv_heads * kHead + h] = float_to_bf16(
                static_cast<float>(src[(s * model->kv_heads + kv_first) * kHead + h]));
      }
      GA_CU_CHECK(detail::driver().cuMemcpyHtoD(
          reinterpret_cast<CUdeviceptr>(stack->kv_cache(l).data), slice.data(), slice.size() * 2));
    }
    GraphRunner::Options go;
    go.capture_sizes = {1, 2, 4, kMaxTokens};
    AttentionLayerStack* s = stack.get();
    runner = std::make_unique<GraphRunner>(
        go, [s](CUstream st, int n) { s->step(st, n); }, [s] { return s->fingerprint(); });
    // What this context loaded: the same compiled kernels everywhere, a module per context.
    AttentionBackend probe(o.layers[0]);
    for (const AttentionSpec& spec : probe.required_specs()) {
      const detail::LoadedKernel& k = detail::load_kernel(spec, cache);  // a hit: prepared
      modules.push_back(k.module);
      compiled.push_back(k.compiled.get());
      specs.push_back(spec.to_string());
    }
  }

  void capture() {
    runner->capture_all(*stream);
    stream->synchronize();
  }

  std::vector<uint16_t> download_outputs(int l, int n) const {
    std::vector<uint16_t> h(static_cast<size_t>(n) * heads * kHead);
    copy_to_host(h.data(), stack->output(l).data, h.size() * 2);
    return h;
  }

  // The model's current step on this device: upload, replay, download; then the same step
  // eagerly, which must give the same bytes.
  void step() {
    const CommonAttentionMetadata& m = model->batch;
    const int n = m.num_actual_tokens;
    const auto q = head_slice(model->q, n, model->heads, first, heads);
    const auto k = head_slice(model->new_k, n, model->kv_heads, kv_first, kv_heads);
    const auto v = head_slice(model->new_v, n, model->kv_heads, kv_first, kv_heads);
    const int padded = runner->padded_size(n);
    stack->set_batch(m, padded, *stream, &q, &k, &v);
    for (int l = 0; l < kLayers; ++l)  // poison: every compared row must be written
      GA_CU_CHECK(detail::driver().cuMemsetD8Async(
          reinterpret_cast<CUdeviceptr>(stack->output(l).data), 0xff,
          static_cast<size_t>(kMaxTokens) * heads * kHead * 2, *stream));
    ran_size = runner->run(*stream, n);
    stream->synchronize();
    replayed.clear();
    for (int l = 0; l < kLayers; ++l) replayed.push_back(download_outputs(l, n));
    stack->step(*stream, padded);  // rewrites the same keys and values: the same result
    stream->synchronize();
    for (int l = 0; l < kLayers; ++l) {
      const auto eager = download_outputs(l, n);
      for (size_t i = 0; i < eager.size(); ++i) eager_mismatches += eager[i] != replayed[l][i];
    }
  }
};

// Runs fn(worker) for every worker at once, each on its own thread with its device's context
// current (use_device); the errors, by worker, are checked afterwards.
void on_devices(std::vector<DeviceWorker>& workers, const std::function<void(DeviceWorker&)>& fn) {
  std::vector<std::string> errors(workers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < workers.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        use_device(workers[i].device);
        fn(workers[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < workers.size(); ++i)
    REQUIRE_MESSAGE(errors[i].empty(), "device " << workers[i].device << ": " << errors[i]);
}

// Each worker's replayed output of every layer against the reference of its model, for the
// worker's heads; returns the largest relative L2 error.
double check_against_reference(std::vector<DeviceWorker>& workers) {
  double worst = 0;
  std::vector<HostModel*> models;
  for (auto& w : workers)
    if (std::find(models.begin(), models.end(), w.model) == models.end()) models.push_back(w.model);
  for (HostModel* m : models) {
    const int n = m->batch.num_actual_tokens;
    for (int l = 0; l < kLayers; ++l) {
      const std::vector<double> want = m->reference(l);
      for (auto& w : workers) {
        if (w.model != m) continue;
        const auto want_slice = head_slice(want, n, m->heads, w.first, w.heads);
        std::vector<double> got(w.replayed[l].size());
        for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(w.replayed[l][i]);
        const double err = relative_l2(got, want_slice);
        INFO("device " << w.device << " layer " << l << " heads [" << w.first << ", "
                       << w.first + w.heads << ") tokens " << n << ": relative L2 " << err);
        CHECK(err <= tolerance(DType::kBFloat16));
        worst = std::max(worst, err);
      }
    }
  }
  return worst;
}

// The steps: each a new random batch on every model, replayed on every device at once.
void run_steps(std::vector<DeviceWorker>& workers, std::vector<std::unique_ptr<HostModel>>& models,
               std::mt19937_64& rng, int steps) {
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    const int n = 1 + static_cast<int>(rng() % kMaxTokens);
    for (auto& m : models) m->new_step(rng, n);
    on_devices(workers, [](DeviceWorker& w) { w.step(); });
    for (auto& w : workers) {
      INFO("step " << step << " device " << w.device);
      CHECK(w.ran_size == w.runner->padded_size(n));  // a graph replay
      CHECK(w.eager_mismatches == 0);
    }
    worst = std::max(worst, check_against_reference(workers));
  }
  for (auto& w : workers) {
    const GraphStats s = w.runner->stats();
    CHECK(s.replays == static_cast<uint64_t>(steps));
    CHECK(s.eager_steps == 0);
  }
  MESSAGE(steps << " steps on " << workers.size() << " devices; worst relative L2 " << worst);
}

// Compiled once per spec (per arch) by the shared cache; a module per context. The modules are
// registered per (spec, context) for the whole process (runtime/module_cache.cpp), so a context
// that an earlier test of the same process used may run the module that test loaded through its
// own cache: the devices then hold two CompiledKernel objects of the same compile result, so
// they are compared by key and machine code, not by address (session 18's two-GPU run, where
// test_multi_gpu.cpp shared a process with the other files of its shard, saw exactly that).
void check_compiled_once_loaded_per_context(const std::vector<DeviceWorker>& workers,
                                            const KernelCache& cache) {
  std::set<std::string> distinct;
  for (const auto& w : workers) distinct.insert(w.specs.begin(), w.specs.end());
  CHECK(cache.stats().compiles == distinct.size());
  CHECK(cache.stats().compile_failures == 0);
  for (size_t a = 0; a < workers.size(); ++a)
    for (size_t b = a + 1; b < workers.size(); ++b)
      for (size_t i = 0; i < workers[a].specs.size(); ++i) {
        if (workers[a].specs[i] != workers[b].specs[i]) continue;  // another arch
        INFO(workers[a].specs[i] << " on devices " << workers[a].device << " and "
                                 << workers[b].device);
        CHECK(workers[a].compiled[i]->key == workers[b].compiled[i]->key);  // the same kernel
        CHECK(workers[a].compiled[i]->cubin == workers[b].compiled[i]->cubin);
        CHECK(workers[a].modules[i] != workers[b].modules[i]);  // loaded in each context
      }
}

}  // namespace

TEST_CASE("gpu multi-device: a layer stack per device, captured and replayed from a thread each") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const int count = device_count();
  MESSAGE(count << " device(s)");
  // Every device its own model (8 query heads, 2 KV heads) and data.
  std::vector<std::unique_ptr<HostModel>> models;
  std::vector<DeviceWorker> workers(count);
  for (int d = 0; d < count; ++d) {
    models.push_back(std::make_unique<HostModel>(8, 2, rng));
    workers[d].device = d;
    workers[d].model = models.back().get();
    workers[d].kv_heads = 2;
  }
  on_devices(workers, [&](DeviceWorker& w) { w.prepare(cache); });
  check_compiled_once_loaded_per_context(workers, cache);
  on_devices(workers, [](DeviceWorker& w) { w.capture(); });
  for (auto& w : workers) CHECK(w.runner->stats().captures == 4);
  run_steps(workers, models, rng, reduced() ? 4 : 12);

  if (count >= 2) {
    // A backend belongs to the device it was prepared on.
    use_device(0);
    AttentionBackend attn(layer_config(8, 2, kHead, kMaxModelLen, kMaxTokens));
    attn.prepare(cache);
    use_device(1);
    CHECK_THROWS_WITH_AS(attn.prepare(cache),
                         doctest::Contains("prepared on device 0's context and cannot be prepared "
                                           "again on device 1's"),
                         Error);
  }
}

TEST_CASE("gpu multi-device: tensor-parallel llama-3-8b attention, half the heads on each of 2") {
  GA_REQUIRE_GPU();
  REQUIRE_DEVICES(2);
  TempKernelCache cache;
  auto rng = make_rng();
  // llama-3-8b: 32 query heads, 8 KV heads of 128; GPU g holds KV heads [4g, 4g + 4) and their
  // query heads [16g, 16g + 16).
  std::vector<std::unique_ptr<HostModel>> models;
  models.push_back(std::make_unique<HostModel>(32, 8, rng));
  std::vector<DeviceWorker> workers(2);
  for (int g = 0; g < 2; ++g) {
    workers[g].device = g;
    workers[g].model = models[0].get();
    workers[g].kv_first = 4 * g;
    workers[g].kv_heads = 4;
  }
  on_devices(workers, [&](DeviceWorker& w) { w.prepare(cache); });
  for (auto& w : workers) CHECK(w.heads == 16);
  check_compiled_once_loaded_per_context(workers, cache);
  on_devices(workers, [](DeviceWorker& w) { w.capture(); });
  run_steps(workers, models, rng, reduced() ? 4 : 12);
}
