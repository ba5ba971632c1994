// SPDX-License-Identifier: Apache-2.0
// vLLM's paged_attention_v1 / v2 with float32 queries and caches (templates/decode_f32.cu) on the
// GPU against the float64 reference: block sizes 8, 16 and 32, head sizes 32..256, GQA 1/4/8/20,
// ALiBi, seq_lens 0, 1 and block boundaries; direct launches with window, soft cap and sinks; a
// captured call replayed with new seq_lens. Inputs both as vLLM's kernel tests draw them
// (uniform in +-1/sqrt(head_size)) and N(0, 1); the bar is vLLM's: absolute error <= 1e-3
// against a float32 reference (here: float64), plus a relative L2 error <= 1e-5. The measured
// errors are printed (MESSAGE) for the README.
//
// Every cache slot that must not be read holds NaN, so a stray read shows up in the output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/tensor_checks.hpp"
#include "testing/legacy_layout.hpp"
#include "testing/reference.hpp"
#include "tests/gpu/legacy_reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

struct F32Case {
  int head_size = 128, block_size = 16, num_kv_heads = 2, group = 4;
  bool alibi = false, v2 = false, vllm_inputs = true;  // uniform(+-1/sqrt(D)), else N(0, 1)
  std::vector<int> seq_lens;
  int window = 0;  // direct launches only
  float soft_cap = 0;
  bool sinks = false;
  int x = 4;  // the key cache's x (4: 16 bytes; 8 and 16: kernels "_x8" / "_x16")
};

std::string describe(const F32Case& c) {
  std::string s = std::string(c.v2 ? "v2" : "v1") + " fp32 head " + std::to_string(c.head_size) +
                  " block " + std::to_string(c.block_size) + " kv heads " +
                  std::to_string(c.num_kv_heads) + " group " + std::to_string(c.group) +
                  (c.alibi ? " alibi" : "") + (c.vllm_inputs ? " vLLM inputs" : " N(0,1)") +
                  " window " + std::to_string(c.window) + " cap " + std::to_string(c.soft_cap) +
                  (c.sinks ? " sinks" : "") + " x " + std::to_string(c.x) + " seq_lens";
  for (int l : c.seq_lens) s += " " + std::to_string(l);
  return s;
}

struct F32Batch {
  int64_t num_blocks = 0, max_blocks = 1;
  std::vector<int> block_table;
  std::vector<double> q, k_ref, v_ref, slopes, sinks;
  DeviceBuffer d_kv, d_q, d_out, d_seq, d_bt, d_slopes, d_sinks;
  TensorView kv_view, q_view, out_view, seq_view, bt_view, slopes_view;
  PagedKvCache caches;
};

void build(const F32Case& c, std::mt19937_64& rng, F32Batch& b) {
  const int n = static_cast<int>(c.seq_lens.size());
  const int64_t B = c.block_size, KH = c.num_kv_heads, D = c.head_size, H = KH * c.group;
  const LegacyLayout layout{B, KH, D, c.x};
  const double bound = 1.0 / std::sqrt(static_cast<double>(D));
  std::uniform_real_distribution<double> uni(-bound, bound);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto draw = [&] { return static_cast<float>(c.vllm_inputs ? uni(rng) : normal(rng)); };
  legacy_block_table(c, rng, b, 2);
  const int64_t half = b.num_blocks * B * KH * D;
  std::vector<float> host(2 * half, std::nanf(""));  // NaN wherever nothing may be read
  b.k_ref.assign(half, 0.0);
  b.v_ref.assign(half, 0.0);
  for_each_live_kv(c.seq_lens, c.window, b.block_table, b.max_blocks, B, KH, D,
                   [&](int64_t blk, int64_t off, int64_t h, int64_t d, int64_t ref) {
                     const float k = draw(), v = draw();
                     host[layout.key(blk, off, h, d)] = k;
                     host[half + layout.value(blk, off, h, d)] = v;
                     b.k_ref[ref] = k;
                     b.v_ref[ref] = v;
                   });
  b.d_kv = DeviceBuffer(host.size() * 4);
  b.d_kv.upload(host.data(), host.size() * 4);
  b.kv_view =
      TensorView::contiguous(b.d_kv.data(), ScalarType::kFloat32, {2, b.num_blocks, B * KH * D});
  b.caches = split_paged_kv_cache(b.kv_view, c.num_kv_heads, c.head_size);
  if (c.x != 4)  // the same key bytes seen with vLLM's other x
    b.caches.key_cache = TensorView::contiguous(b.caches.key_cache.data, ScalarType::kFloat32,
                                                {b.num_blocks, KH, D / c.x, B, c.x});
  std::vector<float> q(n * H * D);
  b.q.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = c.soft_cap > 0 ? 3.0f * static_cast<float>(normal(rng)) : draw();
    b.q[i] = q[i];
  }
  b.d_q = DeviceBuffer(q.size() * 4);
  b.d_q.upload(q.data(), q.size() * 4);
  b.d_out = DeviceBuffer(q.size() * 4);
  b.q_view = TensorView::contiguous(b.d_q.data(), ScalarType::kFloat32, {n, H, D});
  b.out_view = TensorView::contiguous(b.d_out.data(), ScalarType::kFloat32, {n, H, D});
  legacy_upload_metadata(c, rng, b);
}

std::vector<double> reference(const F32Case& c, F32Batch& b, double scale) {
  return legacy_decode_reference(c, b, scale);
}

// The largest errors seen, for the MESSAGE at the end of a test case.
struct Worst {
  double abs = 0, rel = 0;
};

void compare(const F32Case& c, const F32Batch& b, const std::vector<double>& want, Worst& worst) {
  const int64_t row = int64_t{c.num_kv_heads} * c.group * c.head_size;
  std::vector<float> out(want.size());
  b.d_out.download(out.data(), out.size() * 4);
  size_t nan = 0, nonzero_padded = 0;
  double max_abs = 0;
  std::vector<double> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) ++nan;
    if (c.seq_lens[i / row] <= 0 && out[i] != 0) ++nonzero_padded;
    got[i] = out[i];
    max_abs = std::max(max_abs, std::fabs(got[i] - want[i]));
  }
  CHECK(nan == 0);
  CHECK(nonzero_padded == 0);
  const double rel = relative_l2(got, want);
  INFO("relative L2 error " << rel << ", max absolute error " << max_abs);
  CHECK(max_abs <= 1e-3);  // vLLM's float32 tolerance
  CHECK(rel <= 1e-5);
  worst.abs = std::max(worst.abs, max_abs);
  worst.rel = std::max(worst.rel, rel);
}

void call(const F32Case& c, const F32Batch& b, float scale, int max_seq_len, CUstream stream,
          KernelCache& cache) {
  const int n = static_cast<int>(c.seq_lens.size()), H = c.num_kv_heads * c.group;
  if (!c.v2) {
    paged_attention_v1(b.out_view, b.q_view, b.caches.key_cache, b.caches.value_cache,
                       c.num_kv_heads, scale, b.bt_view, b.seq_view, c.block_size, max_seq_len,
                       b.slopes_view, "auto", 1.0f, 1.0f, 0, 0, 0, 64, 0, stream, cache);
    return;
  }
  const int64_t parts = paged_attention_num_partitions(max_seq_len);
  DeviceBuffer sums(n * H * parts * 4), tmp(n * H * parts * c.head_size * 4);
  const TensorView exp_sums =
      TensorView::contiguous(sums.data(), ScalarType::kFloat32, {n, H, parts});
  const TensorView tmp_out =
      TensorView::contiguous(tmp.data(), ScalarType::kFloat32, {n, H, parts, c.head_size});
  paged_attention_v2(b.out_view, exp_sums, exp_sums, tmp_out, b.q_view, b.caches.key_cache,
                     b.caches.value_cache, c.num_kv_heads, scale, b.bt_view, b.seq_view,
                     c.block_size, max_seq_len, b.slopes_view, "auto", 1.0f, 1.0f, 0, 0, 0, 64, 0,
                     stream, cache);
  GA_CU_CHECK(detail::driver().cuStreamSynchronize(stream));  // before sums and tmp go
}

int longest(const F32Case& c) {
  return std::max(1, *std::max_element(c.seq_lens.begin(), c.seq_lens.end()));
}

}  // namespace

TEST_CASE("gpu legacy decode fp32: paged_attention_v1 and v2 match the float64 reference") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::uniform_int_distribution<int> len(2, 3000);
  std::vector<F32Case> cases;
  const int heads[] = {32, 64, 80, 128, 256};
  const int blocks[] = {8, 16, 32};
  for (int i = 0; i < 13; ++i) {
    F32Case c;
    c.x = i < 10 ? 4 : i == 11 ? 16 : 8;  // the last three: key caches with x = 8 and 16
    c.head_size = heads[i % 5];
    c.block_size = blocks[i % 3];
    c.group = i % 3 == 0 ? 1 : i % 3 == 1 ? 4 : 8;
    c.alibi = i % 4 == 1;
    c.v2 = i % 2 == 1;
    c.vllm_inputs = i < 5;
    c.seq_lens = {1, 0, c.block_size - 1, c.block_size, c.block_size + 1, 129, len(rng)};
    cases.push_back(c);
  }
  if (reduced()) cases.resize(2);  // (compute-sanitizer)
  Worst worst[2];
  for (const F32Case& c : cases) {
    INFO(describe(c));
    F32Batch b;
    build(c, rng, b);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_size));
    const std::vector<double> want = reference(c, b, scale);
    b.d_out.fill_bytes(0xff);
    call(c, b, static_cast<float>(scale), longest(c), nullptr, cache);
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    compare(c, b, want, worst[c.vllm_inputs ? 0 : 1]);
  }
  MESSAGE("fp32 legacy decode vs float64: vLLM's inputs max abs "
          << worst[0].abs << " rel L2 " << worst[0].rel << "; N(0,1) inputs max abs "
          << worst[1].abs << " rel L2 " << worst[1].rel);
}

TEST_CASE(
    "gpu legacy decode fp32: direct launches with window, soft cap, sinks, 20 heads a KV "
    "head") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  std::vector<F32Case> cases;
  {
    F32Case c;
    c.block_size = 8;
    c.seq_lens = {1, 0, 37, 300, 1100};
    c.window = 45;  // the window start inside a block
    c.soft_cap = 5;
    c.sinks = true;
    cases.push_back(c);
    c.head_size = 96;
    c.block_size = 32;
    c.group = 20;  // two chunks of query heads per KV head
    c.num_kv_heads = 1;
    c.alibi = true;
    c.soft_cap = 0;
    cases.push_back(c);
  }
  Worst worst;
  for (const F32Case& c : cases) {
    INFO(describe(c));
    F32Batch b;
    build(c, rng, b);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_size));
    const std::vector<double> want = reference(c, b, scale);
    const detail::KvCacheShape kc =
        detail::check_paged_caches(b.caches.key_cache, b.caches.value_cache, DType::kFloat32);
    detail::DecodeLaunch a{{b.q_view, TensorView(), b.out_view, b.seq_view, b.bt_view,
                            static_cast<const float*>(b.d_slopes.data()),
                            static_cast<const float*>(b.d_sinks.data())}};
    a.legacy_kv = kc;
    a.num_decodes = static_cast<int>(c.seq_lens.size());
    a.scale = static_cast<float>(scale);
    a.window = c.window;
    a.soft_cap = c.soft_cap;
    const AttentionSpec spec = detail::attention_spec_for(
        KernelKind::kDecode, b.q_view, b.out_view, kc, c.window, c.soft_cap,
        detail::launch_features(current_device_arch(), false, c.alibi, c.sinks));
    CHECK(spec.dtype == DType::kFloat32);
    const detail::LoadedKernel& k = detail::load_kernel(spec, cache);
    a.max_splits = 1;
    b.d_out.fill_bytes(0xff);
    detail::launch_decode(k, a, nullptr);
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    compare(c, b, want, worst);
  }
  MESSAGE("fp32 legacy decode (window, soft cap, sinks) vs float64: max abs "
          << worst.abs << " rel L2 " << worst.rel);
}

TEST_CASE("gpu legacy decode fp32: a captured paged_attention_v2 replays with new seq_lens") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  F32Case c;
  c.block_size = 8;
  c.v2 = true;
  c.seq_lens = {2048, 2048, 2048};
  F32Batch b;
  build(c, rng, b);
  const float scale = 1.0f / std::sqrt(128.0f);
  Stream stream;
  call(c, b, scale, 2048, stream, cache);  // eager first: loads the kernel
  stream.synchronize();
  CUgraph graph;
  GA_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  paged_attention_v1(b.out_view, b.q_view, b.caches.key_cache, b.caches.value_cache, c.num_kv_heads,
                     scale, b.bt_view, b.seq_view, c.block_size, 2048, b.slopes_view, "auto", 1.0f,
                     1.0f, 0, 0, 0, 64, 0, stream, cache);
  GA_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
  CUgraphExec exec;
  GA_CU_CHECK(d.cuGraphInstantiate(&exec, graph, 0));
  Worst worst;
  for (const std::vector<int>& lens :
       {std::vector<int>{1, 0, 2048}, std::vector<int>{300, 17, 8}, std::vector<int>{9, 2, 65}}) {
    F32Case now = c;
    now.seq_lens = lens;
    INFO(describe(now));
    b.d_seq.upload(lens.data(), lens.size() * 4);
    const std::vector<double> want = reference(now, b, scale);
    b.d_out.fill_bytes(0xff);
    GA_CU_CHECK(d.cuGraphLaunch(exec, stream));
    stream.synchronize();
    compare(now, b, want, worst);
  }
  GA_CU_CHECK(d.cuGraphExecDestroy(exec));
  GA_CU_CHECK(d.cuGraphDestroy(graph));
}
