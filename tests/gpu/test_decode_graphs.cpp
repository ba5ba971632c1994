// SPDX-License-Identifier: Apache-2.0
// Full CUDA-graph capture of decode steps with the library's ready step (layers of cache write +
// attention): 200 random steps with changing batch composition and lengths. Graph replay must
// equal an eager run of the same step exactly, padded tokens must never write the KV cache,
// a moved KV cache must be picked up, and batches above the largest size run eagerly. Layer 0
// has ALiBi, layer 1 a window and attention sinks, whose per-head arrays change mid-run: replays
// read them as the eager launches do.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/env_flag.hpp"
#include "graphattn/capture.hpp"
#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "runtime/prefill.hpp"
#include "templates/params.h"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

namespace {

constexpr int kLayers = 2, kHeads = 8, kKvHeads = 2, kHead = 128, kBlock = 16;
constexpr int kMaxModelLen = 2048, kMaxTokens = 96, kBlocks = 5400, kCanary = 4;

// `layers` layers of config c (block size kBlock) over caches of `blocks` blocks.
AttentionLayerStack::Options stack_of(AttentionLayerConfig c, int layers, int blocks) {
  AttentionLayerStack::Options o;
  c.block_size = kBlock;
  o.layers.assign(layers, c);
  o.max_tokens = c.max_num_seqs;
  o.num_blocks = blocks;
  o.max_blocks_per_seq = c.max_model_len / kBlock;
  return o;
}

AttentionLayerStack::Options stack_options(int window, const float* slopes, const float* sinks) {
  AttentionLayerStack::Options o = stack_of(
      test::layer_config(kHeads, kKvHeads, kHead, kMaxModelLen, kMaxTokens), kLayers, kBlocks);
  for (int l = 0; l < kLayers; ++l) {
    AttentionLayerConfig& c = o.layers[l];
    c.window = l % 2 ? window : 0;  // alternating window, as gemma-2 does
    c.alibi_slopes = l % 2 ? nullptr : slopes;
    c.sinks = l % 2 ? sinks : nullptr;
  }
  return o;
}

std::vector<unsigned char> download(const TensorView& t, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  GA_CU_CHECK(
      detail::driver().cuMemcpyDtoH(h.data(), reinterpret_cast<CUdeviceptr>(t.data), bytes));
  return h;
}

size_t kv_bytes() { return size_t{2} * kBlocks * kBlock * kKvHeads * kHead * 2; }

// The same random KV contents (small finite bf16 bytes) in every layer of every stack, canary
// blocks included; returns them. (layers caches of `bytes` each: stack_options' by default.)
std::vector<unsigned char> fill_kv_caches(std::mt19937_64& rng,
                                          std::initializer_list<AttentionLayerStack*> stacks,
                                          int layers = kLayers, size_t bytes = kv_bytes()) {
  std::vector<unsigned char> init(bytes);
  for (auto& b : init) b = static_cast<unsigned char>(rng() & 0x3f);
  for (int l = 0; l < layers; ++l)
    for (AttentionLayerStack* s : stacks)
      GA_CU_CHECK(detail::driver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(s->kv_cache(l).data),
                                                init.data(), init.size()));
  return init;
}

// Both stacks' caches are equal, and their canary blocks (never in a block table) hold exactly
// what fill_kv_caches gave them.
void check_caches_agree(const AttentionLayerStack& graph, const AttentionLayerStack& eager,
                        const std::vector<unsigned char>& init) {
  for (int l = 0; l < kLayers; ++l) {
    const auto g = download(graph.kv_cache(l), kv_bytes());
    CHECK(g == download(eager.kv_cache(l), kv_bytes()));
    const size_t block_bytes = size_t{kBlock} * kKvHeads * kHead * 2;
    for (int which = 0; which < 2; ++which)
      for (int b : {0, 1, 2, 3, kBlocks - 4, kBlocks - 3, kBlocks - 2, kBlocks - 1}) {
        const size_t off = (static_cast<size_t>(which) * kBlocks + b) * block_bytes;
        CHECK(std::equal(g.begin() + off, g.begin() + off + block_bytes, init.begin() + off));
      }
  }
}

// Relative L2 error of layer 1's output (sliding window 256, no ALiBi or sinks; layer 0 of
// stack_options(..., nullptr, nullptr): no window) for batch m with queries q, against the
// float64 reference over the stack's cache as the step left it (the new rows written).
double layer1_error(const AttentionLayerStack& stack, const CommonAttentionMetadata& m,
                    const std::vector<uint16_t>& q, int layer = 1) {
  test::RefProblem p;
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_size = kHead;
  p.block_size = kBlock;
  p.query_start_loc.assign(m.query_start_loc.begin(), m.query_start_loc.end());
  p.seq_lens.assign(m.seq_lens.begin(), m.seq_lens.end());
  p.block_table.assign(m.block_table.begin(), m.block_table.end());
  p.max_blocks_per_seq = m.max_blocks_per_seq;
  p.scale = 1.0 / std::sqrt(static_cast<double>(kHead));
  p.window = layer % 2 ? 256 : 0;
  for (uint16_t x : q) p.q.push_back(test::bf16_to_float(x));
  const auto cache_bytes = download(stack.kv_cache(layer), kv_bytes());
  const auto* half = reinterpret_cast<const uint16_t*>(cache_bytes.data());
  const size_t per_half = kv_bytes() / 4;  // bf16 elements in the key (or value) half
  for (size_t i = 0; i < per_half; ++i) {
    p.k_cache.push_back(test::bf16_to_float(half[i]));
    p.v_cache.push_back(test::bf16_to_float(half[per_half + i]));
  }
  const std::vector<double> want = test::reference_attention(p);
  const auto got_bytes = download(stack.output(layer), want.size() * 2);
  const auto* got_half = reinterpret_cast<const uint16_t*>(got_bytes.data());
  std::vector<double> got(want.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = test::bf16_to_float(got_half[i]);
  return test::relative_l2(got, want);
}

// The batch of requests with query lengths q and sequence lengths k (decodes first), each
// request's blocks drawn at random (block-table rows of W entries, caches of `blocks` blocks:
// stack_options' by default).
CommonAttentionMetadata batch_of(std::mt19937_64& rng, const std::vector<int32_t>& q,
                                 const std::vector<int32_t>& k, int W = kMaxModelLen / kBlock,
                                 int blocks = kBlocks) {
  const int R = static_cast<int>(q.size());
  // Distinct physical blocks for every request; blocks [0, kCanary) and the last kCanary are
  // never handed out, so any write there is a bug.
  std::vector<int32_t> pool(blocks - 2 * kCanary);
  std::iota(pool.begin(), pool.end(), kCanary);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(R) * W, 0);
  std::vector<int64_t> slots;
  size_t next = 0;
  for (int r = 0; r < R; ++r) {
    const int blocks = (k[r] + kBlock - 1) / kBlock;
    for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(r) * W + b] = pool[next++];
    for (int p = k[r] - q[r]; p < k[r]; ++p)
      slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(r) * W + p / kBlock]) *
                          kBlock +
                      p % kBlock);
  }
  return CommonAttentionMetadata::make(q, k, table, W, slots);
}

// One random step: decodes first (decode_len query tokens each, seq_len decode_len..
// kMaxModelLen; with `ragged` one of them holds fewer), sometimes prefills after them (longer
// than decode_len).
CommonAttentionMetadata random_batch(std::mt19937_64& rng, bool prefills, int num_decodes,
                                     int decode_len = 1, bool ragged = false) {
  std::vector<int32_t> q, k;
  std::uniform_int_distribution<int> len(decode_len, kMaxModelLen);
  const int short_one = ragged ? static_cast<int>(rng() % num_decodes) : -1;
  for (int r = 0; r < num_decodes; ++r) {
    q.push_back(r == short_one ? 1 + static_cast<int>(rng() % (decode_len - 1)) : decode_len);
    k.push_back(len(rng));
  }
  const int P = prefills ? 1 + static_cast<int>(rng() % 2) : 0;
  for (int r = 0; r < P; ++r) {
    const int n = decode_len + 1 + static_cast<int>(rng() % 40);
    q.push_back(n);
    k.push_back(n + static_cast<int>(rng() % 300));
  }
  return batch_of(rng, q, k);
}

// One step's new tokens: query [n, heads, kHead], key and value [n, kv_heads, kHead], bf16 of
// N(0, 1) draws (query, then key, then value).
struct StepTokens {
  std::vector<uint16_t> q, k, v;
};
StepTokens random_tokens(std::mt19937_64& rng, std::normal_distribution<float>& normal, int n,
                         int heads = kHeads, int kv_heads = kKvHeads) {
  StepTokens t;
  t.q.resize(static_cast<size_t>(n) * heads * kHead);
  t.k.resize(static_cast<size_t>(n) * kv_heads * kHead);
  t.v.resize(t.k.size());
  for (auto* v : {&t.q, &t.k, &t.v})
    for (auto& x : *v) x = test::float_to_bf16(normal(rng));
  return t;
}

}  // namespace

TEST_CASE("gpu decode graphs: 200 random steps, graph replay equals eager exactly") {
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;

  const DeviceBuffer slopes = test::upload_floats(test::random_alibi_slopes(rng, kHeads, true));
  DeviceBuffer sinks = test::upload_floats(test::random_sinks(rng, kHeads, true));
  const auto* sl = static_cast<const float*>(slopes.data());
  const auto* sk = static_cast<const float*>(sinks.data());
  AttentionLayerStack graph_stack(stack_options(256, sl, sk)),
      eager_stack(stack_options(256, sl, sk));
  graph_stack.prepare(cache);
  eager_stack.prepare(cache);
  const std::vector<unsigned char> init = fill_kv_caches(rng, {&graph_stack, &eager_stack});

  GraphRunner::Options go;
  go.capture_sizes = {1, 2, 4, 8, 16, 24, 32};
  GraphRunner runner(
      go, [&](CUstream s, int n) { graph_stack.step(s, n); },
      [&] { return graph_stack.fingerprint(); });
  runner.capture_all(stream);
  CHECK(runner.stats().captures == 7);

  FlashAttentionMetadataBuilder builder;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<DeviceBuffer> moved;
  size_t compared_rows = 0;
  for (int step = 0; step < 200; ++step) {
    if (step == 100) {
      // The engine moves every layer's KV cache (same contents): the graphs must follow.
      for (auto* s : {&graph_stack, &eager_stack})
        for (int l = 0; l < kLayers; ++l) {
          moved.emplace_back(kv_bytes());
          TensorView kv = s->kv_cache(l);
          GA_CU_CHECK(d.cuMemcpyDtoDAsync(
              moved.back().ptr(), reinterpret_cast<CUdeviceptr>(kv.data), kv_bytes(), stream));
          kv.data = moved.back().data();
          s->set_kv_cache(l, kv);
        }
    }
    if (step == 150) {
      // New sink logits in the same array: the captured graphs read them.
      const std::vector<float> f = test::to_floats(test::random_sinks(rng, kHeads, true, 4.0));
      GA_CU_CHECK(d.cuStreamSynchronize(stream));
      sinks.upload(f.data(), f.size() * 4);
    }
    const bool prefills = rng() % 4 == 0;
    const int decodes = 1 + static_cast<int>(rng() % (prefills ? 8 : 40));  // some above 32
    const auto m = random_batch(rng, prefills, decodes);
    const int n = m.num_actual_tokens;
    auto [q, kv, vv] = random_tokens(rng, normal, n);
    const bool graphable = builder.can_run_in_cudagraph(m) && runner.padded_size(n) > 0;
    const int padded = graphable ? runner.padded_size(n) : n;
    graph_stack.set_batch(m, padded, stream, &q, &kv, &vv);
    eager_stack.set_batch(m, padded, stream, &q, &kv, &vv);
    const int ran = runner.run(stream, n, builder.can_run_in_cudagraph(m));
    CHECK(ran == (graphable ? padded : 0));
    eager_stack.step(stream, padded);  // the same kernels and sizes, launched eagerly
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    for (int l = 0; l < kLayers; ++l) {
      const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
      const auto g = download(graph_stack.output(l), bytes);
      const auto e = download(eager_stack.output(l), bytes);
      INFO("step " << step << " layer " << l << " tokens " << n << " padded " << padded);
      REQUIRE(g == e);
      compared_rows += n;
    }
  }
  check_caches_agree(graph_stack, eager_stack, init);
  const GraphStats s = runner.stats();
  MESSAGE("replays " << s.replays << ", eager " << s.eager_steps << ", captures " << s.captures
                     << ", updates " << s.updates << ", re-instantiations " << s.reinstantiations
                     << ", capture ms " << s.capture_ms << ", graph memory "
                     << s.graph_memory_bytes);
  CHECK(s.replays > 80);
  CHECK(s.eager_steps > 20);                   // prefills and batches above 32
  CHECK(s.updates + s.reinstantiations >= 1);  // the KV caches moved at step 100
  CHECK(compared_rows > 0);
}

TEST_CASE("gpu decode graphs: captured early-prologue layers trigger the next at entry, = eager") {
  // The B=1 step's layers (32/8 heads, head 128, bf16, max_model_len 1024, the fused write and
  // the early prologue): a request alone is an 8-block cluster launch, which a capturing stream
  // launches with early_prologue 2 (runtime/decode.cpp [policy: early trigger]: the next layer is
  // scheduled at this one's entry) and an eager one with 1. Replays must equal eager exactly,
  // outputs and caches, over batches of 1 to 4 requests and lengths 1 to 1024.
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  constexpr int layers = 4, heads = 32, kv_heads = 8, len = 1024, seqs = 4;
  constexpr int per_seq = len / kBlock, blocks = seqs * per_seq + 2 * kCanary;
  AttentionLayerConfig c = test::layer_config(heads, kv_heads, kHead, len, seqs);
  c.overlap_previous_kernel = true;
  const AttentionLayerStack::Options o = stack_of(c, layers, blocks);
  AttentionLayerStack graph_stack(o), eager_stack(o);
  graph_stack.prepare(cache);
  eager_stack.prepare(cache);
  const size_t cache_bytes = size_t{2} * blocks * kBlock * kv_heads * kHead * 2;
  fill_kv_caches(rng, {&graph_stack, &eager_stack}, layers, cache_bytes);
  GraphRunner::Options go;
  go.capture_sizes = {1, 2, 4};
  GraphRunner runner(
      go, [&](CUstream st, int n) { graph_stack.step(st, n); },
      [&] { return graph_stack.fingerprint(); });
  runner.capture_all(stream);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 24; ++step) {
    const int n = 1 + static_cast<int>(rng() % seqs);
    std::vector<int32_t> q(n, 1), k(n);
    for (int r = 0; r < n; ++r)
      k[r] = step < 3 ? len - step * 500 : 1 + static_cast<int>(rng() % len);  // 1024, 524, 24
    const auto m = batch_of(rng, q, k, per_seq, blocks);
    auto [qv, kv, vv] = random_tokens(rng, normal, n, heads, kv_heads);
    const int padded = runner.padded_size(n);
    REQUIRE(padded > 0);
    graph_stack.set_batch(m, padded, stream, &qv, &kv, &vv);
    eager_stack.set_batch(m, padded, stream, &qv, &kv, &vv);
    REQUIRE(runner.run(stream, n) == padded);
    eager_stack.step(stream, padded);
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    for (int l = 0; l < layers; ++l) {
      const size_t bytes = static_cast<size_t>(n) * heads * kHead * 2;
      INFO("step " << step << " layer " << l << " requests " << n << " first len " << k[0]);
      REQUIRE(download(graph_stack.output(l), bytes) == download(eager_stack.output(l), bytes));
    }
  }
  for (int l = 0; l < layers; ++l)
    CHECK(download(graph_stack.kv_cache(l), cache_bytes) ==
          download(eager_stack.kv_cache(l), cache_bytes));
  CHECK(runner.stats().replays == 24);
}

TEST_CASE("gpu decode graphs: a layer sharing an earlier layer's KV cache reads it, writes none") {
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  // Layers 0 and 1 own caches; layer 2 reads layer 0's, layer 3 layer 1's (a different window).
  AttentionLayerStack::Options o = stack_options(256, nullptr, nullptr);
  o.layers.push_back(o.layers[0]);
  o.layers.push_back(o.layers[1]);
  o.kv_sharing_target = {-1, -1, 0, 1};
  AttentionLayerStack stack(o), plain(stack_options(256, nullptr, nullptr));
  stack.prepare(cache);
  plain.prepare(cache);
  CHECK(stack.kv_owner(2) == 0);
  CHECK(stack.kv_owner(3) == 1);
  CHECK(stack.kv_cache(2).data == stack.kv_cache(0).data);
  CHECK(stack.device_bytes() - plain.device_bytes() < kv_bytes());  // no cache for layers 2, 3
  CHECK_THROWS_WITH_AS(stack.set_kv_cache(2, stack.kv_cache(2)),
                       doctest::Contains("layer 2 shares layer 0's KV cache"), Error);
  const std::vector<unsigned char> init = fill_kv_caches(rng, {&stack, &plain});
  GraphRunner::Options go;
  go.capture_sizes = {1, 4, 8, 16};
  GraphRunner runner(
      go, [&](CUstream s, int n) { stack.step(s, n); }, [&] { return stack.fingerprint(); });
  runner.capture_all(stream);
  FlashAttentionMetadataBuilder builder;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 40; ++step) {
    const bool prefills = step % 5 == 4;
    const auto m = random_batch(rng, prefills, 1 + static_cast<int>(rng() % 12));
    const int n = m.num_actual_tokens;
    auto [q, kv, vv] = random_tokens(rng, normal, n);
    const bool graphable = builder.can_run_in_cudagraph(m) && runner.padded_size(n) > 0;
    const int padded = graphable ? runner.padded_size(n) : n;
    stack.set_batch(m, padded, stream, &q, &kv, &vv);
    plain.set_batch(m, padded, stream, &q, &kv, &vv);
    runner.run(stream, n, builder.can_run_in_cudagraph(m));
    plain.step(stream, padded);
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
    INFO("step " << step << " tokens " << n << " padded " << padded);
    // The sharing layers see what their targets see: the same query over the same cache.
    for (int l = 0; l < 2; ++l) {
      REQUIRE(download(stack.output(l + 2), bytes) == download(stack.output(l), bytes));
      REQUIRE(download(stack.output(l), bytes) == download(plain.output(l), bytes));
    }
  }
  // Only the owners wrote: the two caches equal those of a stack without sharing layers.
  for (int l = 0; l < kLayers; ++l)
    CHECK(download(stack.kv_cache(l), kv_bytes()) == download(plain.kv_cache(l), kv_bytes()));
}

TEST_CASE("gpu decode graphs: speculative decoding, uniform batches of 4 tokens a request") {
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  constexpr int kQ = 4;  // 1 token + 3 drafts a request
  AttentionLayerStack::Options o = stack_options(256, nullptr, nullptr);
  for (auto& c : o.layers) c.decode_query_len = kQ;
  AttentionLayerStack graph_stack(o), eager_stack(o);
  CHECK(graph_stack.decode_query_len() == kQ);
  graph_stack.prepare(cache);
  eager_stack.prepare(cache);
  const std::vector<unsigned char> init = fill_kv_caches(rng, {&graph_stack, &eager_stack});

  // vLLM's sizes for max_num_seqs 24 and 4 tokens a request, cut at the stack's 96 tokens.
  GraphRunner::Options go;
  for (int size : default_capture_sizes(24, kQ))
    if (size <= kMaxTokens) go.capture_sizes.push_back(size);
  REQUIRE(go.capture_sizes.front() == kQ);
  for (int size : go.capture_sizes) CHECK(size % kQ == 0);
  GraphRunner runner(
      go, [&](CUstream s, int n) { graph_stack.step(s, n); },
      [&] { return graph_stack.fingerprint(); });
  runner.capture_all(stream);

  const FlashAttentionMetadataBuilder builder(AttentionType::kDecoder, kBlock, kQ);
  CHECK(builder.cudagraph_support() == CudaGraphSupport::kUniformBatch);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int checked_against_reference = 0;
  for (int step = 0; step < 60; ++step) {
    // Mostly uniform decode batches (graphs), some with a short request or prefills (eager).
    const int kind = static_cast<int>(rng() % 6);
    const bool prefills = kind == 0, ragged = kind == 1;
    // At most 2 decodes (8 tokens) beside up to two prefills of up to kQ + 40 tokens: 96.
    const int decodes = 1 + static_cast<int>(rng() % (prefills ? 2 : 24));
    const auto m = random_batch(rng, prefills, decodes, kQ, ragged && decodes > 0);
    const int n = m.num_actual_tokens;
    auto [q, kv, vv] = random_tokens(rng, normal, n);
    const bool uniform = builder.can_run_in_cudagraph(m);
    CHECK(uniform == (kind > 1));
    const bool graphable = uniform && runner.padded_size(n) > 0;
    const int padded = graphable ? runner.padded_size(n) : n;
    graph_stack.set_batch(m, padded, stream, &q, &kv, &vv);
    eager_stack.set_batch(m, padded, stream, &q, &kv, &vv);
    const int ran = runner.run(stream, n, uniform);
    CHECK(ran == (graphable ? padded : 0));
    eager_stack.step(stream, padded);
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
    for (int l = 0; l < kLayers; ++l) {
      INFO("step " << step << " layer " << l << " tokens " << n << " padded " << padded);
      REQUIRE(download(graph_stack.output(l), bytes) == download(eager_stack.output(l), bytes));
    }
    if (!graphable || step % 5 != 0) continue;
    INFO("step " << step << ": " << m.num_reqs << " requests of " << kQ << " tokens, padded to "
                 << padded);
    CHECK(layer1_error(graph_stack, m, q) < 1e-2);
    ++checked_against_reference;
  }
  const GraphStats s = runner.stats();
  MESSAGE("speculative decode graphs: replays " << s.replays << ", eager " << s.eager_steps
                                                << ", steps checked against the reference "
                                                << checked_against_reference);
  CHECK(s.replays > 20);
  CHECK(s.eager_steps > 5);
  CHECK(checked_against_reference > 0);
  // Padded tokens and requests wrote nothing outside the batches' blocks.
  check_caches_agree(graph_stack, eager_stack, init);
}

TEST_CASE("gpu decode graphs: mixed graphs serve every decode/prefill mix, split on the device") {
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  for (int kQ : {1, 4}) {  // single-token decodes, and speculative decoding's 1 + 3 tokens
    INFO("decode_query_len " << kQ);
    AttentionLayerStack::Options o = stack_options(256, nullptr, nullptr);
    for (auto& c : o.layers) c.decode_query_len = kQ;
    AttentionLayerStack graph_stack(o), eager_stack(o);
    graph_stack.prepare(cache);
    eager_stack.prepare(cache);
    const std::vector<unsigned char> init = fill_kv_caches(rng, {&graph_stack, &eager_stack});

    // One graph per token count, captured before any batch, for any mix up to that count.
    GraphRunner::Options go;
    go.capture_sizes = {8, 24, 48, kMaxTokens};
    GraphRunner runner(
        go, [&](CUstream s, int n) { graph_stack.step_mixed(s, n); },
        [&] { return graph_stack.fingerprint(); });
    runner.capture_all(stream);

    const FlashAttentionMetadataBuilder builder(AttentionType::kDecoder, kBlock, kQ, true);
    CHECK(builder.cudagraph_support() == CudaGraphSupport::kAlways);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    int checked_against_reference = 0, with_prefills = 0;
    // Up to two prefills of up to kQ + 40 tokens beside the decodes: at most kMaxTokens tokens.
    const int max_decodes = (kMaxTokens - 2 * (kQ + 40)) / kQ;
    const int steps = test::reduced() ? 10 : 40;  // (compute-sanitizer: fewer)
    for (int step = 0; step < steps; ++step) {
      const int kind = static_cast<int>(rng() % 4);
      // Prefills on every third step at least, whatever the draws.
      const bool prefills = kind < 2 || step % 3 == 0, ragged = !prefills && kind == 2 && kQ > 1;
      const int decodes = static_cast<int>(rng() % (prefills ? max_decodes + 1 : 24)) +
                          (prefills ? 0 : 1);  // a batch of prefills only, too
      const auto m = random_batch(rng, prefills, decodes, kQ, ragged);
      const int n = m.num_actual_tokens;
      REQUIRE(n <= kMaxTokens);
      with_prefills += prefills;
      auto [q, kv, vv] = random_tokens(rng, normal, n);
      CHECK(builder.can_run_in_cudagraph(m));
      CHECK(builder.build_for_cudagraph_capture(m).device_split == !builder.is_uniform_decode(m));
      const int padded = runner.padded_size(n);
      REQUIRE(padded >= n);
      graph_stack.set_mixed_batch(m, padded, stream, &q, &kv, &vv);
      eager_stack.set_mixed_batch(m, padded, stream, &q, &kv, &vv);
      CHECK(runner.run(stream, n) == padded);
      eager_stack.step_mixed(stream, padded);  // the same launches, not captured
      GA_CU_CHECK(d.cuStreamSynchronize(stream));
      const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
      for (int l = 0; l < kLayers; ++l) {
        INFO("step " << step << " layer " << l << " tokens " << n << " padded " << padded
                     << " requests " << m.num_reqs);
        REQUIRE(download(graph_stack.output(l), bytes) == download(eager_stack.output(l), bytes));
      }
      if (step % 2 != 0) continue;
      INFO("step " << step << ": " << m.num_reqs << " requests, " << n << " tokens, padded to "
                   << padded);
      CHECK(layer1_error(graph_stack, m, q) < 1e-2);
      ++checked_against_reference;
    }
    const GraphStats s = runner.stats();
    MESSAGE("mixed graphs, decode_query_len " << kQ << ": replays " << s.replays << ", eager "
                                              << s.eager_steps << ", steps with prefills "
                                              << with_prefills << ", checked against the reference "
                                              << checked_against_reference);
    CHECK(s.replays == static_cast<uint64_t>(steps));
    CHECK(s.eager_steps == 0);
    CHECK(with_prefills >= (steps + 2) / 3);
    CHECK(checked_against_reference == steps / 2);
    // Padded tokens and requests wrote nothing outside the batches' blocks.
    check_caches_agree(graph_stack, eager_stack, init);
  }
}

// Environment variable `name` set to `value` for the life of the object (and restored).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) saved_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, saved_.c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

// GRAPHATTN_MIXED_DECODE_DIVISOR set to `divisor` for the life of the object (and restored).
class DivisorEnv : ScopedEnv {
 public:
  explicit DivisorEnv(int divisor)
      : ScopedEnv("GRAPHATTN_MIXED_DECODE_DIVISOR", std::to_string(divisor)) {}
};

// A stack run by mixed graphs of 24 and kMaxTokens tokens (captured before any batch) beside an
// eager stack split on the host, over the same caches, and a backend per layer configuration
// (layer 1's window caps its splits) for the grids' policy; made under the divisor of the
// environment.
struct MixedAgainstHost {
  AttentionLayerStack graph, host;
  std::vector<std::unique_ptr<AttentionBackend>> probes;
  std::vector<unsigned char> init;
  GraphRunner runner;

  MixedAgainstHost(const AttentionLayerStack::Options& o, KernelCache& cache, std::mt19937_64& rng,
                   CUstream stream)
      : graph(o),
        host(o),
        runner(
            capture_options(), [this](CUstream s, int n) { graph.step_mixed(s, n); },
            [this] { return graph.fingerprint(); }) {
    graph.prepare(cache);
    host.prepare(cache);
    for (int l = 0; l < kLayers; ++l) {
      probes.push_back(std::make_unique<AttentionBackend>(o.layers[l]));
      probes.back()->prepare(cache);
    }
    init = fill_kv_caches(rng, {&graph, &host});
    runner.capture_all(stream);
  }
  static GraphRunner::Options capture_options() {
    GraphRunner::Options go;
    go.capture_sizes = {24, kMaxTokens};
    return go;
  }
  // Single-token decodes at context lengths decode_lens, then, where they leave tokens of the
  // graph's n, one prefill of those: the batch replayed by the graph of n tokens and run by the
  // host split eagerly, with random queries, keys and values (returned: the queries).
  std::pair<CommonAttentionMetadata, std::vector<uint16_t>> step(std::mt19937_64& rng, int n,
                                                                 std::vector<int32_t> decode_lens,
                                                                 CUstream stream) {
    const int D = static_cast<int>(decode_lens.size());
    std::vector<int32_t> ql(D, 1);
    if (n > D) {
      ql.push_back(n - D);
      decode_lens.push_back(n - D + static_cast<int>(rng() % (kMaxModelLen - n)));
    }
    const auto m = batch_of(rng, ql, decode_lens);
    REQUIRE(m.num_actual_tokens == n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto [q, kv, vv] = random_tokens(rng, normal, n);
    graph.set_mixed_batch(m, n, stream, &q, &kv, &vv);
    host.set_batch(m, n, stream, &q, &kv, &vv);
    CHECK(runner.run(stream, n) == n);
    host.step(stream, n);
    GA_CU_CHECK(detail::driver().cuStreamSynchronize(stream));
    return {m, q};
  }
  // Layer l's outputs of the last step (n tokens) are equal in the two stacks.
  bool outputs_equal(int l, int n) const {
    const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
    return download(graph.output(l), bytes) == download(host.output(l), bytes);
  }
};

// A mixed graph's decode grid is sized for ceil(slots / GRAPHATTN_MIXED_DECODE_DIVISOR) decodes
// where that gives more splits (AttentionBackend::mixed_decode_max_splits): a batch of that many
// decodes plus one prefill filling the graph's tokens, captured before any batch and replayed
// with new lengths, equals the host split's eager step bit for bit wherever the two decode grids
// agree (splits and stages; the prefill's row tiles are the same tiles either way), and the
// float64 reference everywhere. Divisor 1 is session 9's every-slot grid.
TEST_CASE("gpu decode graphs: mixed graphs size the decode for slots / the divisor") {
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  Stream stream;
  int agreed = 0;
  for (int divisor : {1, 4, 8}) {
    INFO("GRAPHATTN_MIXED_DECODE_DIVISOR=" << divisor);
    const DivisorEnv env(divisor);
    MixedAgainstHost t(stack_options(256, nullptr, nullptr), cache, rng, stream);
    for (const auto& p : t.probes) CHECK(p->mixed_decode_divisor() == divisor);
    const int steps = test::reduced() ? 2 : 4;
    for (int step = 0; step < steps; ++step) {
      const int n = step % 2 ? 24 : kMaxTokens;
      const int slots = t.graph.mixed_request_slots(n);
      const int D = divisor > 1 ? (slots + divisor - 1) / divisor : slots / 2;
      // D decodes at random lengths up to 1024 (at most 48 of them fit the block pool), then one
      // prefill of the graph's remaining tokens.
      std::vector<int32_t> kl;
      for (int r = 0; r < D; ++r) kl.push_back(1 + static_cast<int>(rng() % 1024));
      const auto [m, q] = t.step(rng, n, kl, stream);
      for (int l = 0; l < kLayers; ++l) {
        const AttentionBackend& p = *t.probes[l];
        const int gs = p.mixed_decode_max_splits(slots), hs = p.decode_max_splits(D);
        CHECK(gs >= p.decode_max_splits(slots));
        if (divisor > 1) CHECK(gs == std::max(p.decode_max_splits(slots), p.decode_max_splits(D)));
        const bool same_grid = gs == hs && p.mixed_decode_stages(slots) == p.decode_stages(D);
        MESSAGE("divisor " << divisor << ", " << n << " tokens, " << slots << " slots, " << D
                           << " decodes, layer " << l << ": graph " << gs << " splits, host split "
                           << hs << std::string(same_grid ? " (same grid)" : ""));
        if (!same_grid) continue;
        ++agreed;
        INFO("step " << step << " layer " << l);
        CHECK(t.outputs_equal(l, n));
      }
      CHECK(layer1_error(t.graph, m, q) < 1e-2);
    }
    CHECK(t.runner.stats().replays == static_cast<uint64_t>(steps));
    CHECK(t.runner.stats().eager_steps == 0);
    check_caches_agree(t.graph, t.host, t.init);
  }
  CHECK(agreed >= 4);  // the bitwise comparison ran
}

// Divisor 0 (GRAPHATTN_MIXED_DECODE_DIVISOR=0): the mixed graphs' decode kernel (spec _dsp)
// counts the leading decodes d of the replayed batch and gives each the split policy's count
// for d decodes over the multiprocessors the prefill's blocks leave. One graph per token count
// (24 and 96 slots), captured before any batch, replayed with 1 decode (long: the most splits)
// and half the slots (then one prefill of the other tokens), and every slot a decode (no
// prefill): each request's splits are the host formula's (the host split's with no prefill)
// wherever d decodes do not fill the device by themselves, both layers match the float64
// reference, and the outputs equal the host split's eager step bit for bit where the grids
// agree.
TEST_CASE("gpu decode graphs: mixed graphs' decode kernel chooses the splits from the decodes") {
  GA_REQUIRE_GPU();
  const DivisorEnv env(0);  // before the backends are made: they compile the _dsp kernel
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  CUdevice dev = 0;
  GA_CU_CHECK(d.cuCtxGetDevice(&dev));
  int sms = 0;
  GA_CU_CHECK(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  MixedAgainstHost t(stack_options(256, nullptr, nullptr), cache, rng, stream);
  for (const auto& p : t.probes) CHECK(p->mixed_decode_divisor() == 0);
  int steps = 0, agreed = 0, split_many = 0, split_two = 0;
  for (int n : {kMaxTokens, 24})
    for (int part : {1, 2, 0}) {  // 1 decode, half the slots, every slot
      const int slots = t.graph.mixed_request_slots(n);
      const int D = part == 1 ? 1 : part == 2 ? slots / 2 : slots;
      // D decodes (1: at 1536..2047 tokens; more: up to 800, so that 96 fit the block pool).
      std::vector<int32_t> kl;
      for (int r = 0; r < D; ++r)
        kl.push_back(D == 1 ? 1536 + static_cast<int>(rng() % 512)
                            : 1 + static_cast<int>(rng() % 800));
      const auto [m, q] = t.step(rng, n, kl, stream);
      ++steps;
      for (int l = 0; l < kLayers; ++l) {
        const AttentionBackend& p = *t.probes[l];
        const int gs = p.mixed_decode_splits(slots, D, n - D,
                                             *std::min_element(kl.begin(), kl.end())),
                  hs = p.decode_max_splits(D);
        CHECK(gs <= p.mixed_decode_max_splits(slots));
        // (head 128 bf16: a block per KV head, kKvHeads blocks a split) The host split's count
        // for D decodes over the multiprocessors the prefill's n - D tokens leave them.
        const int room =
            ga_device_split_room(sms, n - D, kHeads / kKvHeads,
                                 detail::prefill_config(p.required_specs()[2]).block_m, kKvHeads);
        CHECK(room <= sms);
        const int one = std::clamp(room / kKvHeads / D, 1, p.mixed_decode_max_splits(slots));
        // GRAPHATTN_MIXED_DSP_LONG_TILES: or the count of two blocks a multiprocessor
        const int two = std::clamp(
            ga_device_split_room(2 * sms, n - D, kHeads / kKvHeads,
                                 detail::prefill_config(p.required_specs()[2]).block_m, kKvHeads) /
                kKvHeads / D,
            1, p.mixed_decode_max_splits(slots));
        const bool long_splits = detail::mixed_dsp_long_tiles_from_env() > 0;
        if (D * kKvHeads < sms) CHECK((gs == one || (long_splits && gs == two)));
        if (D * kKvHeads < sms && n == D && gs == one) CHECK(gs == hs);
        split_two += long_splits && gs == two && two != one;
        split_many += gs > 1;
        const bool same_grid = gs == hs && p.mixed_decode_stages(slots) == p.decode_stages(D);
        MESSAGE(n << " tokens, " << slots << " slots, " << D << " decodes, layer " << l
                  << ": graph " << gs << " splits of at most " << p.mixed_decode_max_splits(slots)
                  << ", host split " << hs << std::string(same_grid ? " (same grid)" : ""));
        INFO(n << " tokens, " << D << " decodes, layer " << l);
        CHECK(layer1_error(t.graph, m, q, l) < 1e-2);
        if (!same_grid) continue;
        ++agreed;
        CHECK(t.outputs_equal(l, n));
      }
    }
  CHECK(t.runner.stats().replays == static_cast<uint64_t>(steps));
  CHECK(t.runner.stats().eager_steps == 0);
  CHECK(split_many >= 4);  // 1 decode in either graph, both layers: several splits
  MESSAGE("bitwise equal to the host split where the grids agree: "
          << agreed << " layers; " << split_two << " at the count of two blocks a multiprocessor");
  check_caches_agree(t.graph, t.host, t.init);
}

// GRAPHATTN_MIXED_DSP_LONG_TILES (on by default, 8; here 2): the mixed graphs deeper than the
// shallow depth that fit two decode blocks a multiprocessor launch the _dsp_long kernel, which
// plans two blocks a multiprocessor where every leading decode keeps that many tiles a warp, else
// one. max_model_len 8192 over 2 KV heads: the 96-slot graph runs 3 stages (long; layer 0, no
// window), the 24-slot one the shallow 2 (the plain _dsp kernel); layer 1 (window 256) never takes
// it. Graphs captured before any batch, replayed with new lengths (long decodes, a short one among
// long ones, many decodes, one decode, decodes only), equal the same launches eagerly bit for bit
// and the float64 reference in both layers.
TEST_CASE("gpu decode graphs: the _dsp_long kernel plans two blocks an SM for long decodes") {
  GA_REQUIRE_GPU();
  constexpr int kLongLen = 8192, kTiles = 2;  // kTiles a warp: 128 tokens a split
  const DivisorEnv env(0);
  const ScopedEnv tiles("GRAPHATTN_MIXED_DSP_LONG_TILES", std::to_string(kTiles));
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  AttentionLayerStack::Options o = stack_options(256, nullptr, nullptr);
  for (auto& c : o.layers) c.max_model_len = kLongLen;
  o.max_blocks_per_seq = kLongLen / kBlock;
  AttentionLayerStack graph_stack(o), eager_stack(o);
  graph_stack.prepare(cache);
  eager_stack.prepare(cache);
  std::vector<std::unique_ptr<AttentionBackend>> probes;
  for (int l = 0; l < kLayers; ++l) {
    probes.push_back(std::make_unique<AttentionBackend>(o.layers[l]));
    probes.back()->prepare(cache);
  }
  // layer 0: cache write, decode, prefill, _dsp, _dsp_long; layer 1 (window): no _dsp_long
  REQUIRE(probes[0]->required_specs().size() == 5);
  CHECK(probes[0]->required_specs()[4].to_string() ==
        probes[0]->required_specs()[3].to_string() + "_long");
  CHECK(probes[1]->required_specs().size() == 4);
  const std::vector<unsigned char> init = fill_kv_caches(rng, {&graph_stack, &eager_stack});
  GraphRunner::Options go;
  go.capture_sizes = {24, kMaxTokens};
  GraphRunner runner(
      go, [&](CUstream s, int n) { graph_stack.step_mixed(s, n); },
      [&] { return graph_stack.fingerprint(); });
  runner.capture_all(stream);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int slots96 = graph_stack.mixed_request_slots(kMaxTokens);
  CHECK(probes[0]->mixed_decode_stages(slots96) == 3);
  CHECK(probes[0]->mixed_decode_stages(graph_stack.mixed_request_slots(24)) == 2);
  int steps = 0, two_blocks = 0, one_block = 0;
  // {graph tokens, decodes, shortest, longest}: the decodes' lengths drawn in [shortest,
  // longest] (the first one at shortest), then one prefill of the remaining tokens.
  const int plan[][4] = {{kMaxTokens, 8, 2200, kLongLen}, {kMaxTokens, 8, 100, kLongLen},
                         {kMaxTokens, 40, 400, 1100},     {kMaxTokens, 40, 20, 1100},
                         {kMaxTokens, 1, 7000, kLongLen}, {kMaxTokens, kMaxTokens, 1, 700},
                         {24, 4, 3000, kLongLen},         {kMaxTokens, 4, 6000, kLongLen}};
  for (const auto& [n, D, shortest, longest] : plan) {
    std::vector<int32_t> ql(D, 1), kl;
    std::uniform_int_distribution<int> len(shortest, longest);
    for (int r = 0; r < D; ++r) kl.push_back(r == 0 ? shortest : len(rng));
    if (n > D) {
      ql.push_back(n - D);
      kl.push_back(n - D + static_cast<int>(rng() % 300));
    }
    const auto m = batch_of(rng, ql, kl, kLongLen / kBlock);
    REQUIRE(m.num_actual_tokens == n);
    auto [q, kv, vv] = random_tokens(rng, normal, n);
    graph_stack.set_mixed_batch(m, n, stream, &q, &kv, &vv);
    eager_stack.set_mixed_batch(m, n, stream, &q, &kv, &vv);
    CHECK(runner.run(stream, n) == n);
    eager_stack.step_mixed(stream, n);
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    ++steps;
    const int slots = graph_stack.mixed_request_slots(n);
    for (int l = 0; l < kLayers; ++l) {
      INFO(n << " tokens, " << D << " decodes from " << shortest << ", layer " << l);
      const AttentionBackend& p = *probes[l];
      const int gs = p.mixed_decode_splits(slots, D, n - D, shortest),
                one = p.mixed_decode_splits(slots, D, n - D, 0);
      two_blocks += gs != one;
      one_block += gs == one && l == 0 && slots == slots96;
      MESSAGE(n << " tokens, " << D << " decodes from " << shortest << ", layer " << l << ": " << gs
                << " splits" << std::string(gs != one ? " (two blocks an SM)" : ""));
      if (l == 1 || slots != slots96) CHECK(gs == one);  // the plain _dsp kernel
      const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
      CHECK(download(graph_stack.output(l), bytes) == download(eager_stack.output(l), bytes));
      CHECK(layer1_error(graph_stack, m, q, l) < 1e-2);
    }
  }
  MESSAGE("_dsp_long: " << two_blocks << " layer steps at two blocks a multiprocessor, "
                        << one_block << " kept one");
  CHECK(two_blocks >= 2);  // 8 long, 40 of 400.., 4 long
  CHECK(one_block >= 2);   // a short decode among long ones, 40 from 20
  CHECK(runner.stats().replays == static_cast<uint64_t>(steps));
  CHECK(runner.stats().eager_steps == 0);
  check_caches_agree(graph_stack, eager_stack, init);
}

TEST_CASE("gpu decode graphs: mixed steps with decode and prefill on two branches equal serial") {
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  Stream stream;
  using Mixed = AttentionLayerStack::MixedBranches;
  for (Mixed mode : {Mixed::kSerialPrefillFirst, Mixed::kDecodeFirst, Mixed::kPrefillFirst,
                     Mixed::kDecodeFirstHigh, Mixed::kPrefillFirstHigh})
    for (int kQ : {1, 4}) {
      INFO("GRAPHATTN_MIXED_BRANCHES="
           << std::string(AttentionLayerStack::mixed_branches_name(mode)) << ", decode_query_len "
           << kQ);
      AttentionLayerStack::Options o = stack_options(256, nullptr, nullptr);
      for (auto& c : o.layers) c.decode_query_len = kQ;
      o.mixed_branches = Mixed::kSerial;
      AttentionLayerStack serial(o);
      o.mixed_branches = mode;
      AttentionLayerStack graph_stack(o), eager_stack(o);
      CHECK(graph_stack.options().mixed_branches == mode);
      for (AttentionLayerStack* s : {&serial, &graph_stack, &eager_stack}) s->prepare(cache);
      const std::vector<unsigned char> init =
          fill_kv_caches(rng, {&serial, &graph_stack, &eager_stack});
      GraphRunner::Options go;
      go.capture_sizes = {24, kMaxTokens};
      go.use_node_priority = true;
      GraphRunner runner(
          go, [&](CUstream s, int n) { graph_stack.step_mixed(s, n); },
          [&] { return graph_stack.fingerprint(); });
      runner.capture_all(stream);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const int max_decodes = (kMaxTokens - 2 * (kQ + 40)) / kQ;
      const int steps = test::reduced() ? 3 : 6;
      for (int step = 0; step < steps; ++step) {
        // Decodes and prefills on every step but the last (decodes only).
        const bool prefills = step + 1 < steps;
        const int decodes = static_cast<int>(rng() % max_decodes) + 1;
        const auto m = random_batch(rng, prefills, decodes, kQ, false);
        const int n = m.num_actual_tokens;
        auto [q, kv, vv] = random_tokens(rng, normal, n);
        const int padded = runner.padded_size(n);
        for (AttentionLayerStack* s : {&serial, &graph_stack, &eager_stack})
          s->set_mixed_batch(m, padded, stream, &q, &kv, &vv);
        CHECK(runner.run(stream, n) == padded);
        eager_stack.step_mixed(stream, padded);
        serial.step_mixed(stream, padded);
        GA_CU_CHECK(d.cuStreamSynchronize(stream));
        const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
        for (int l = 0; l < kLayers; ++l) {
          INFO("step " << step << " layer " << l << " tokens " << n << " requests " << m.num_reqs);
          const auto want = download(serial.output(l), bytes);
          REQUIRE(download(graph_stack.output(l), bytes) == want);
          REQUIRE(download(eager_stack.output(l), bytes) == want);
        }
        if (step == 0) CHECK(layer1_error(graph_stack, m, q) < 1e-2);
      }
      CHECK(runner.stats().replays == static_cast<uint64_t>(steps));
      check_caches_agree(graph_stack, serial, init);
      check_caches_agree(eager_stack, serial, init);
    }
}

// forward() itself forks a mixed batch's prefill onto the backend's own stream and joins it
// before returning: a host-split batch (AttentionLayerStack::step, eager) and a device-split one
// captured into a graph on a stream forward() had never seen (the prefill's stream and events
// are then made during the capture) give the serial launches' bytes (each split against its own
// serial step); only `stream` is synchronized, so a missing join would leave the prefill's rows
// unordered with the download.
TEST_CASE("gpu decode graphs: forward() forks and joins a mixed batch's prefill (host split too)") {
  GA_REQUIRE_GPU();
  test::TempKernelCache cache;
  auto rng = test::make_rng();
  const auto& d = detail::driver();
  using Mixed = AttentionLayerStack::MixedBranches;
  for (Mixed mode : {Mixed::kPrefillFirst, Mixed::kDecodeFirst}) {
    const std::string name = AttentionLayerStack::mixed_branches_name(mode);
    INFO("GRAPHATTN_MIXED_BRANCHES=" << name);
    AttentionLayerStack::Options o = stack_options(256, nullptr, nullptr);
    o.mixed_branches = Mixed::kSerial;
    AttentionLayerStack serial(o);
    o.mixed_branches = mode;
    AttentionLayerStack eager_stack(o), graph_stack(o);
    for (AttentionLayerStack* s : {&serial, &eager_stack, &graph_stack}) s->prepare(cache);
    const std::vector<unsigned char> init =
        fill_kv_caches(rng, {&serial, &eager_stack, &graph_stack});
    Stream stream, capture_stream;
    GraphRunner::Options go;
    go.capture_sizes = {kMaxTokens};
    GraphRunner runner(
        go, [&](CUstream s, int n) { graph_stack.step_mixed(s, n); },
        [&] { return graph_stack.fingerprint(); });
    runner.capture_all(capture_stream);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int steps = test::reduced() ? 3 : 8;
    for (int step = 0; step < steps; ++step) {
      const int decodes = 1 + static_cast<int>(rng() % ((kMaxTokens - 2 * 41) / 2));
      const auto m = random_batch(rng, true, decodes);
      const int n = m.num_actual_tokens;
      auto [q, kv, vv] = random_tokens(rng, normal, n);
      // Host split, eager: every layer's forward() forks and joins on `stream`.
      serial.set_batch(m, n, stream, &q, &kv, &vv);
      eager_stack.set_batch(m, n, stream, &q, &kv, &vv);
      serial.step(stream, n);
      eager_stack.step(stream, n);
      GA_CU_CHECK(d.cuStreamSynchronize(stream));
      const size_t bytes = static_cast<size_t>(n) * kHeads * kHead * 2;
      for (int l = 0; l < kLayers; ++l) {
        INFO("host split, step " << step << " layer " << l << " tokens " << n << " requests "
                                 << m.num_reqs);
        REQUIRE(download(eager_stack.output(l), bytes) == download(serial.output(l), bytes));
      }
      // Device split (its decode grid covers every request slot, so its splits and bytes are
      // not the host split's): the graph captured on another stream, replayed on `stream`,
      // against the serial stack's device-split step (which rewrites the same cache rows).
      const int padded = runner.padded_size(n);
      graph_stack.set_mixed_batch(m, padded, stream, &q, &kv, &vv);
      serial.set_mixed_batch(m, padded, stream, &q, &kv, &vv);
      CHECK(runner.run(stream, n) == padded);
      serial.step_mixed(stream, padded);
      GA_CU_CHECK(d.cuStreamSynchronize(stream));
      for (int l = 0; l < kLayers; ++l) {
        INFO("device split, step " << step << " layer " << l << " tokens " << n << " requests "
                                   << m.num_reqs);
        REQUIRE(download(graph_stack.output(l), bytes) == download(serial.output(l), bytes));
      }
    }
    CHECK(runner.stats().replays == static_cast<uint64_t>(steps));
    check_caches_agree(eager_stack, serial, init);
    check_caches_agree(graph_stack, serial, init);
  }
}

TEST_CASE("gpu decode graphs: GRAPHATTN_MIXED_BRANCHES picks the default mixed layout") {
  GA_REQUIRE_GPU();
  using Mixed = AttentionLayerStack::MixedBranches;
  const char* old = std::getenv("GRAPHATTN_MIXED_BRANCHES");
  const std::string saved = old ? old : "";
  AttentionLayerStack::Options o = stack_options(256, nullptr, nullptr);
  unsetenv("GRAPHATTN_MIXED_BRANCHES");
  CHECK(AttentionLayerStack(o).options().mixed_branches == Mixed::kPrefillFirst);
  setenv("GRAPHATTN_MIXED_BRANCHES", "off", 1);
  CHECK(AttentionLayerStack(o).options().mixed_branches == Mixed::kSerial);
  setenv("GRAPHATTN_MIXED_BRANCHES", "prefill-first-high", 1);
  CHECK(AttentionLayerStack(o).options().mixed_branches == Mixed::kPrefillFirstHigh);
  o.mixed_branches = Mixed::kDecodeFirst;  // an explicit mode wins over the variable
  CHECK(AttentionLayerStack(o).options().mixed_branches == Mixed::kDecodeFirst);
  o.mixed_branches = Mixed::kDefault;
  setenv("GRAPHATTN_MIXED_BRANCHES", "prefill_first", 1);
  CHECK_THROWS_WITH_AS(AttentionLayerStack{o},
                       doctest::Contains("GRAPHATTN_MIXED_BRANCHES=\"prefill_first\""), Error);
  if (old)
    setenv("GRAPHATTN_MIXED_BRANCHES", saved.c_str(), 1);
  else
    unsetenv("GRAPHATTN_MIXED_BRANCHES");
}
