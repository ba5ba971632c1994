// Prefill timing: a batch of pure causal prefills over the paged KV cache (shuffled physical
// blocks, random data). Checks a few output rows against the float64 reference, then reports
// the median kernel time (CUDA events, one pair per repetition) and the attention TFLOP/s
// (4 * head_size * num_heads * visible (query, key) pairs).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "tests/host_dtypes.hpp"
#include "tests/reference.hpp"

using namespace graphattn;

int main(int argc, char** argv) {
  CLI::App app{"graphattn prefill benchmark"};
  int batch = 4, len = 4096, heads = 32, kv_heads = 8, head_size = 128, block_size = 16;
  int reps = 20, window = 0;
  float soft_cap = 0;
  std::string dtype = "bf16";
  app.add_option("--batch", batch, "requests");
  app.add_option("--len", len, "new tokens per request (pure prefill, causal)");
  app.add_option("--heads", heads, "query heads");
  app.add_option("--kv-heads", kv_heads, "KV heads");
  app.add_option("--head-size", head_size, "head size");
  app.add_option("--block-size", block_size, "KV block size");
  app.add_option("--dtype", dtype, "bf16 or fp16")->check(CLI::IsMember({"bf16", "fp16"}));
  app.add_option("--window", window, "sliding window (0: none)");
  app.add_option("--soft-cap", soft_cap, "soft cap (0: none)");
  app.add_option("--reps", reps, "timed repetitions");
  CLI11_PARSE(app, argc, argv);

  try {
    ensure_context(0);
    const auto& d = detail::driver();
    const bool bf16 = dtype == "bf16";
    const ScalarType st = bf16 ? ScalarType::kBFloat16 : ScalarType::kFloat16;
    const int64_t T = int64_t{batch} * len, H = heads, KH = kv_heads, D = head_size, B = block_size;
    const int64_t blocks_per_seq = (len + B - 1) / B, NB = blocks_per_seq * batch;
    std::mt19937_64 rng(1234);
    std::normal_distribution<float> normal(0.f, 1.f);
    auto store = [&](float x) { return bf16 ? test::float_to_bf16(x) : test::float_to_fp16(x); };
    auto load = [&](uint16_t h) {
      return static_cast<double>(bf16 ? test::bf16_to_float(h) : test::fp16_to_float(h));
    };
    std::vector<uint16_t> q(T * H * D), cache(2 * NB * B * KH * D);
    for (auto& x : q) x = store(normal(rng));
    for (auto& x : cache) x = store(normal(rng));
    std::vector<int> phys(NB);
    std::iota(phys.begin(), phys.end(), 0);
    std::shuffle(phys.begin(), phys.end(), rng);
    std::vector<int> qsl(batch + 1), seq(batch, len);
    for (int r = 0; r <= batch; ++r) qsl[r] = r * len;

    DeviceBuffer d_q(q.size() * 2), d_out(q.size() * 2), d_cache(cache.size() * 2),
        d_qsl(qsl.size() * 4), d_seq(seq.size() * 4), d_table(phys.size() * 4);
    d_q.upload(q.data(), q.size() * 2);
    d_cache.upload(cache.data(), cache.size() * 2);
    d_qsl.upload(qsl.data(), qsl.size() * 4);
    d_seq.upload(seq.data(), seq.size() * 4);
    d_table.upload(phys.data(), phys.size() * 4);
    d_out.fill_bytes(0xff);

    const auto qv = TensorView::contiguous(d_q.data(), st, {T, H, D});
    const auto ov = TensorView::contiguous(d_out.data(), st, {T, H, D});
    const auto kv = TensorView::contiguous(d_cache.data(), st, {2, NB, B, KH, D});
    const auto qslv = TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {batch + 1});
    const auto seqv = TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {batch});
    const auto tabv =
        TensorView::contiguous(d_table.data(), ScalarType::kInt32, {batch, blocks_per_seq});
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    auto run = [&] {
      prefill_attention(qv, kv, ov, qslv, seqv, tabv, 0, batch, len, scale, window, soft_cap, 1, 1,
                        nullptr);
    };
    run();  // compiles and loads
    GA_CU_CHECK(d.cuCtxSynchronize());

    // The last 4 query rows of the last request, through the reference as a chunked prefill.
    test::RefProblem ref;
    ref.num_heads = heads;
    ref.num_kv_heads = kv_heads;
    ref.head_size = head_size;
    ref.block_size = block_size;
    const int n_check = std::min(4, len);
    ref.query_start_loc = {0, n_check};
    ref.seq_lens = {len};
    ref.max_blocks_per_seq = static_cast<int>(blocks_per_seq);
    ref.block_table.assign(phys.begin() + (batch - 1) * blocks_per_seq,
                           phys.begin() + batch * blocks_per_seq);
    const int64_t first_row = T - n_check;
    for (int64_t i = first_row * H * D; i < T * H * D; ++i) ref.q.push_back(load(q[i]));
    ref.k_cache.resize(NB * B * KH * D);
    ref.v_cache.resize(NB * B * KH * D);
    for (int64_t i = 0; i < NB * B * KH * D; ++i) {
      ref.k_cache[i] = load(cache[i]);
      ref.v_cache[i] = load(cache[NB * B * KH * D + i]);
    }
    ref.scale = scale;
    ref.window = window;
    ref.soft_cap = soft_cap;
    const std::vector<double> want = test::reference_attention(ref);
    std::vector<uint16_t> out(q.size());
    d_out.download(out.data(), out.size() * 2);
    std::vector<double> got;
    size_t nan = 0;
    for (int64_t i = 0; i < T * H * D; ++i) nan += std::isnan(load(out[i]));
    for (int64_t i = first_row * H * D; i < T * H * D; ++i) got.push_back(load(out[i]));
    const double err = test::relative_l2(got, want);

    CUevent e0, e1;
    GA_CU_CHECK(d.cuEventCreate(&e0, CU_EVENT_DEFAULT));
    GA_CU_CHECK(d.cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (int i = 0; i < 3; ++i) run();
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      GA_CU_CHECK(d.cuEventRecord(e0, nullptr));
      run();
      GA_CU_CHECK(d.cuEventRecord(e1, nullptr));
      GA_CU_CHECK(d.cuEventSynchronize(e1));
      float t = 0;
      GA_CU_CHECK(d.cuEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    // Visible (query, key) pairs per request: causal, clipped by the window.
    double pairs = 0;
    for (int64_t i = 0; i < len; ++i)
      pairs += window > 0 ? std::min<int64_t>(i + 1, window) : i + 1;
    const double flops = 4.0 * D * H * pairs * batch;
    std::printf(
        "prefill %s batch %d x %d, heads %d/%d, head %d, block %d, window %d, cap %g: median "
        "%.3f ms (min %.3f, max %.3f, %d reps), %.1f TFLOP/s; check rows rel L2 %.2e, NaN %zu\n",
        dtype.c_str(), batch, len, heads, kv_heads, head_size, block_size, window, soft_cap, med,
        ms.front(), ms.back(), reps, flops / (med * 1e-3) / 1e12, err, nan);
    d.cuEventDestroy(e0);
    d.cuEventDestroy(e1);
    return err <= (bf16 ? 5e-3 : 1e-3) && nan == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
