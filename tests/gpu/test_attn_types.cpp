// SPDX-License-Identifier: Apache-2.0
// Attention types on the GPU against the float64 reference: encoder-only attention (dense K/V,
// variable lengths, q/k/v slices of one packed tensor), vLLM's MultiHeadAttention (uniform
// [batch, seq, heads, head] tensors, query and key lengths apart), cross attention through
// AttentionBackend (a first step that writes the encoder's keys and values and runs decoder
// prefills and decodes over them, then decode steps that write nothing), and a captured decode
// graph of a stack with a cross-attention layer replayed with new lengths against eager steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "graphattn/capture.hpp"
#include "graphattn/graphattn.hpp"
#include "runtime/driver.hpp"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;
using namespace graphattn::test;

namespace {

ScalarType scalar(DType t) {
  return t == DType::kBFloat16 ? ScalarType::kBFloat16 : ScalarType::kFloat16;
}

// n random values in `t`'s storage, and the doubles the GPU sees.
std::vector<uint16_t> random_values(std::mt19937_64& rng, DType t, size_t n,
                                    std::vector<double>& exact, double stddev = 1.0) {
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<uint16_t> out(n);
  exact.resize(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = to_storage(t, normal(rng));
    exact[i] = from_storage(t, out[i]);
  }
  return out;
}

// Output rows [0, rows) of row_elems values against the reference (relative L2 under the
// dtype's bound, no NaN); elements past `rows` (poisoned with 0xff) must stay untouched.
void check_output(DType t, const std::vector<uint16_t>& got, size_t rows, size_t row_elems,
                  const std::vector<double>& want) {
  std::vector<double> g;
  size_t nan = 0, clobbered = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (i >= rows * row_elems) {
      clobbered += got[i] != 0xffff;
      continue;
    }
    nan += is_nan16(t, got[i]);
    g.push_back(from_storage(t, got[i]));
  }
  CHECK(nan == 0);
  CHECK(clobbered == 0);
  const std::vector<double> w(want.begin(), want.begin() + static_cast<long>(rows * row_elems));
  const double err = relative_l2(g, w);
  CHECK_MESSAGE(err <= tolerance(t), "relative L2 " << err << " > " << tolerance(t));
}

struct DenseCase {
  DType dtype;
  int head_size, num_kv_heads, group;
  bool alibi, sinks;
};

}  // namespace

TEST_CASE("gpu attention types: encoder-only attention (dense K/V, variable lengths)") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const DenseCase cases[] = {
      {DType::kBFloat16, 128, 2, 4, false, false}, {DType::kFloat16, 64, 1, 6, true, false},
      {DType::kBFloat16, 72, 2, 2, false, true},   {DType::kFloat16, 128, 4, 1, true, true},
      {DType::kBFloat16, 256, 1, 8, false, false}, {DType::kFloat16, 64, 2, 3, false, false}};
  for (const DenseCase& c : cases) {
    const int KH = c.num_kv_heads, H = KH * c.group, D = c.head_size;
    INFO("dtype " << to_string(c.dtype) << " head " << D << " heads " << H << "/" << KH);
    // Lengths on both sides of the row tiles (64/128) and key tiles (32/64/128).
    std::vector<int> lens = {1, 17, 63, 64, 65, 127, 128, 129, 200, 257};
    std::shuffle(lens.begin(), lens.end(), rng);
    const int R = static_cast<int>(lens.size());
    std::vector<int> qsl(R + 1, 0);
    for (int r = 0; r < R; ++r) qsl[r + 1] = qsl[r] + lens[r];
    const int T = qsl[R], max_len = *std::max_element(lens.begin(), lens.end());
    // q, k and v are slices of one packed [T, H + 2 KH, D] tensor (vLLM's qkv projection).
    const int64_t row = int64_t{H + 2 * KH} * D;
    std::vector<double> packed_exact;
    const std::vector<uint16_t> packed =
        random_values(rng, c.dtype, static_cast<size_t>(T) * row, packed_exact);
    RefProblem ref;
    ref.num_heads = H;
    ref.num_kv_heads = KH;
    ref.head_size = D;
    ref.query_start_loc = qsl;
    ref.seq_lens = lens;
    ref.kv_start_loc.assign(qsl.begin(), qsl.end() - 1);
    ref.causal = false;
    ref.scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (int t = 0; t < T; ++t)
      for (int part = 0; part < 3; ++part) {
        std::vector<double>& dst = part == 0 ? ref.q : part == 1 ? ref.k_cache : ref.v_cache;
        const int heads = part == 0 ? H : KH, off = part == 0 ? 0 : part == 1 ? H : H + KH;
        for (int i = 0; i < heads * D; ++i) dst.push_back(packed_exact[t * row + off * D + i]);
      }
    ref.alibi_slopes = random_alibi_slopes(rng, H, c.alibi);
    ref.sinks = random_sinks(rng, H, c.sinks);
    const DeviceBuffer slopes = upload_floats(ref.alibi_slopes), sinks = upload_floats(ref.sinks);
    DeviceBuffer d_packed(packed.size() * 2), d_out(static_cast<size_t>(T + 3) * H * D * 2),
        d_qsl(qsl.size() * 4);
    d_packed.upload(packed.data(), packed.size() * 2);
    d_qsl.upload(qsl.data(), qsl.size() * 4);
    d_out.fill_bytes(0xff);
    const ScalarType st = scalar(c.dtype);
    auto* base = static_cast<uint16_t*>(d_packed.data());
    const auto view = [&](int head0, int heads) {
      return TensorView::strided(base + int64_t{head0} * D, st, {T, heads, D}, {row, D, 1});
    };
    // The output holds 3 spare rows past the batch: they must stay poisoned.
    encoder_attention(view(0, H), view(H, KH), view(H + KH, KH),
                      TensorView::contiguous(d_out.data(), st, {T + 3, H, D}),
                      TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {R + 1}), max_len,
                      static_cast<float>(ref.scale), nullptr, cache,
                      static_cast<const float*>(slopes.data()),
                      static_cast<const float*>(sinks.data()));
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<uint16_t> out(static_cast<size_t>(T + 3) * H * D);
    d_out.download(out.data(), out.size() * 2);
    check_output(c.dtype, out, T, static_cast<size_t>(H) * D, reference_attention(ref));
  }
}

TEST_CASE("gpu attention types: multi_head_attention ([batch, seq, heads, head], non-causal)") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  struct MhaCase {
    DType dtype;
    int batch, q_len, kv_len, head_size, heads, kv_heads;
  };
  const MhaCase cases[] = {{DType::kBFloat16, 3, 130, 130, 64, 16, 16},
                           {DType::kFloat16, 2, 1, 257, 128, 8, 2},
                           {DType::kBFloat16, 4, 200, 77, 72, 12, 4},
                           {DType::kFloat16, 1, 129, 300, 128, 4, 4}};
  for (const MhaCase& c : cases) {
    INFO("batch " << c.batch << " q " << c.q_len << " kv " << c.kv_len << " head " << c.head_size);
    const int B = c.batch, H = c.heads, KH = c.kv_heads, D = c.head_size;
    RefProblem ref;
    ref.num_heads = H;
    ref.num_kv_heads = KH;
    ref.head_size = D;
    ref.causal = false;
    ref.scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (int b = 0; b <= B; ++b) ref.query_start_loc.push_back(b * c.q_len);
    for (int b = 0; b < B; ++b) {
      ref.seq_lens.push_back(c.kv_len);
      ref.kv_start_loc.push_back(b * c.kv_len);
    }
    const size_t nq = static_cast<size_t>(B) * c.q_len * H * D,
                 nk = static_cast<size_t>(B) * c.kv_len * KH * D;
    const std::vector<uint16_t> q = random_values(rng, c.dtype, nq, ref.q);
    const std::vector<uint16_t> k = random_values(rng, c.dtype, nk, ref.k_cache);
    const std::vector<uint16_t> v = random_values(rng, c.dtype, nk, ref.v_cache);
    DeviceBuffer d_q(nq * 2), d_k(nk * 2), d_v(nk * 2), d_out(nq * 2);
    d_q.upload(q.data(), nq * 2);
    d_k.upload(k.data(), nk * 2);
    d_v.upload(v.data(), nk * 2);
    d_out.fill_bytes(0xff);
    const ScalarType st = scalar(c.dtype);
    multi_head_attention(TensorView::contiguous(d_q.data(), st, {B, c.q_len, H, D}),
                         TensorView::contiguous(d_k.data(), st, {B, c.kv_len, KH, D}),
                         TensorView::contiguous(d_v.data(), st, {B, c.kv_len, KH, D}),
                         TensorView::contiguous(d_out.data(), st, {B, c.q_len, H, D}),
                         static_cast<float>(ref.scale), nullptr, cache);
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<uint16_t> out(nq);
    d_out.download(out.data(), nq * 2);
    check_output(c.dtype, out, static_cast<size_t>(B) * c.q_len, static_cast<size_t>(H) * D,
                 reference_attention(ref));
  }
}

TEST_CASE("gpu attention types: cross attention prefill and decode through AttentionBackend") {
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int head : {128, 72}) {
    INFO("head " << head);
    const DType dt = DType::kBFloat16;
    const int KH = 2, H = 8, D = head, BS = 16, W = 24, max_len = W * BS;
    AttentionLayerConfig cfg = layer_config(H, KH, D, max_len, 16);
    cfg.attn_type = AttentionType::kEncoderDecoder;
    AttentionBackend attn(cfg);
    attn.prepare(cache);
    CHECK(attn.required_specs()[2].non_causal);
    DeviceBuffer ws(std::max<size_t>(attn.workspace_bytes(), 16));
    // Requests: two decodes (one decoder token on their first step), then decoder prefills.
    const int R = 6;
    std::vector<int32_t> dec_q = {1, 1}, enc(R);
    for (int r = 2; r < R; ++r) dec_q.push_back(uni(2, 140));
    for (int r = 0; r < R; ++r) enc[r] = uni(1, max_len);
    enc[R - 1] = max_len;  // keys across every key tile
    const int NB = R * W + 2;
    std::vector<int32_t> pool(NB);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> table(pool.begin(), pool.begin() + R * W);
    CommonAttentionMetadata m = CommonAttentionMetadata::make(
        dec_q, dec_q, table, W,
        std::vector<int64_t>(std::accumulate(dec_q.begin(), dec_q.end(), 0), -1));
    m.encoder_seq_lens = enc;
    const FlashAttentionMetadataBuilder builder(AttentionType::kEncoderDecoder, BS);
    const FlashAttentionMetadata f = builder.build(0, m);
    const int T = m.num_actual_tokens, E = static_cast<int>(f.common.slot_mapping.size());
    CHECK(E == std::accumulate(enc.begin(), enc.end(), 0));

    // The encoder's keys and values (E rows), the decoder's queries, a poisoned cache.
    RefProblem ref;
    ref.num_heads = H;
    ref.num_kv_heads = KH;
    ref.head_size = D;
    ref.block_size = BS;
    ref.query_start_loc.assign(f.common.query_start_loc.begin(), f.common.query_start_loc.end());
    ref.seq_lens.assign(enc.begin(), enc.end());
    ref.block_table.assign(table.begin(), table.end());
    ref.max_blocks_per_seq = W;
    ref.causal = false;
    ref.scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<double> k_exact, v_exact;
    const std::vector<uint16_t> q = random_values(rng, dt, static_cast<size_t>(T) * H * D, ref.q);
    const std::vector<uint16_t> k =
        random_values(rng, dt, static_cast<size_t>(E) * KH * D, k_exact);
    const std::vector<uint16_t> v =
        random_values(rng, dt, static_cast<size_t>(E) * KH * D, v_exact);
    const size_t per_kv = static_cast<size_t>(NB) * BS * KH * D;
    ref.k_cache.assign(per_kv, 0.0);
    ref.v_cache.assign(per_kv, 0.0);
    for (int e = 0; e < E; ++e)
      for (int i = 0; i < KH * D; ++i) {
        ref.k_cache[static_cast<size_t>(f.common.slot_mapping[e]) * KH * D + i] =
            k_exact[e * KH * D + i];
        ref.v_cache[static_cast<size_t>(f.common.slot_mapping[e]) * KH * D + i] =
            v_exact[e * KH * D + i];
      }
    const ScalarType st = scalar(dt);
    DeviceBuffer d_q(q.size() * 2), d_k(k.size() * 2), d_v(v.size() * 2), d_cache(2 * per_kv * 2),
        d_out(q.size() * 2), d_qsl((R + 1) * 4), d_seq(R * 4), d_table(table.size() * 4),
        d_slots(static_cast<size_t>(E) * 8);
    d_q.upload(q.data(), q.size() * 2);
    d_k.upload(k.data(), k.size() * 2);
    d_v.upload(v.data(), v.size() * 2);
    d_cache.fill_bytes(0);  // zero keys past seq_len would still take softmax weight if read
    d_qsl.upload(f.common.query_start_loc.data(), (R + 1) * 4);
    d_seq.upload(enc.data(), R * 4);
    d_table.upload(table.data(), table.size() * 4);
    d_slots.upload(f.common.slot_mapping.data(), static_cast<size_t>(E) * 8);
    d_out.fill_bytes(0xff);
    AttentionMetadata md;
    md.query_start_loc = TensorView::contiguous(d_qsl.data(), ScalarType::kInt32, {R + 1});
    md.seq_lens = TensorView::contiguous(d_seq.data(), ScalarType::kInt32, {R});
    md.block_table = TensorView::contiguous(d_table.data(), ScalarType::kInt32, {R, W});
    md.slot_mapping = TensorView::contiguous(d_slots.data(), ScalarType::kInt64, {E});
    md.num_reqs = R;
    md.num_decodes = md.num_decode_tokens = f.split.num_decodes;
    md.num_actual_tokens = T;
    md.max_query_len = f.common.max_query_len;
    md.max_seq_len = f.common.max_seq_len;
    CHECK(md.num_decodes == 2);
    const auto kv_view = TensorView::contiguous(d_cache.data(), st, {2, NB, BS, KH, D});
    attn.forward(TensorView::contiguous(d_q.data(), st, {T, H, D}),
                 TensorView::contiguous(d_k.data(), st, {E, KH, D}),
                 TensorView::contiguous(d_v.data(), st, {E, KH, D}), kv_view,
                 TensorView::contiguous(d_out.data(), st, {T, H, D}), md, ws.data(), ws.bytes(),
                 nullptr);
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    std::vector<uint16_t> out(q.size());
    d_out.download(out.data(), out.size() * 2);
    check_output(dt, out, T, static_cast<size_t>(H) * D, reference_attention(ref));

    // Later steps: one decoder token per request, the cache as the first step left it, nothing
    // written (key and value absent).
    std::vector<int32_t> ones(R, 1), qsl(R + 1);
    std::iota(qsl.begin(), qsl.end(), 0);
    d_qsl.upload(qsl.data(), qsl.size() * 4);
    ref.query_start_loc.assign(qsl.begin(), qsl.end());
    const std::vector<uint16_t> q1 = random_values(rng, dt, static_cast<size_t>(R) * H * D, ref.q);
    d_q.upload(q1.data(), q1.size() * 2);
    d_out.fill_bytes(0xff);
    md.num_decodes = md.num_decode_tokens = md.num_actual_tokens = R;
    md.max_query_len = 1;
    attn.forward(TensorView::contiguous(d_q.data(), st, {R, H, D}), TensorView{}, TensorView{},
                 kv_view, TensorView::contiguous(d_out.data(), st, {R, H, D}), md, ws.data(),
                 ws.bytes(), nullptr);
    GA_CU_CHECK(detail::driver().cuCtxSynchronize());
    d_out.download(out.data(), out.size() * 2);
    check_output(dt, out, R, static_cast<size_t>(H) * D, reference_attention(ref));
  }
}

TEST_CASE("gpu attention types: a captured decode graph with a cross-attention layer") {
  // Layer 0 is a decoder (writes its cache), layer 1 cross attention over an encoder cache that
  // no step writes. 60 decode steps with new decoder and encoder lengths: graph replay equals
  // an eager run of the same step exactly, and the cross layer's encoder cache is unchanged.
  GA_REQUIRE_GPU();
  TempKernelCache cache;
  auto rng = make_rng();
  const auto& d = detail::driver();
  constexpr int kH = 8, kKH = 2, kD = 128, kBS = 16, kMaxLen = 1024, kMaxTokens = 32;
  constexpr int kW = kMaxLen / kBS, kBlocks = kMaxTokens * kW + 4;
  AttentionLayerStack::Options o;
  for (int l = 0; l < 2; ++l) {
    AttentionLayerConfig c = layer_config(kH, kKH, kD, kMaxLen, kMaxTokens);
    c.attn_type = l == 1 ? AttentionType::kEncoderDecoder : AttentionType::kDecoder;
    o.layers.push_back(c);
  }
  o.max_tokens = kMaxTokens;
  o.num_blocks = kBlocks;
  o.max_blocks_per_seq = kW;
  AttentionLayerStack graph_stack(o), eager_stack(o);
  graph_stack.prepare(cache);
  eager_stack.prepare(cache);
  const size_t kv_bytes = size_t{2} * kBlocks * kBS * kKH * kD * 2;
  std::vector<unsigned char> init(kv_bytes);
  for (auto& b : init) b = static_cast<unsigned char>(rng() & 0x3f);  // small finite bf16 bytes
  for (int l = 0; l < 2; ++l)
    for (auto* s : {&graph_stack, &eager_stack})
      GA_CU_CHECK(d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(s->kv_cache(l).data), init.data(),
                                 init.size()));
  Stream stream;
  GraphRunner::Options go;
  go.capture_sizes = {1, 2, 4, 8, 16};
  GraphRunner runner(
      go, [&](CUstream s, int n) { graph_stack.step(s, n); },
      [&] { return graph_stack.fingerprint(); });
  runner.capture_all(stream);
  const FlashAttentionMetadataBuilder builder;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int replays = 0;
  for (int step = 0; step < 60; ++step) {
    const int R = 1 + static_cast<int>(rng() % 16);
    std::vector<int32_t> q(R, 1), k(R), enc(R);
    std::vector<int32_t> pool(kBlocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> table(pool.begin(), pool.begin() + R * kW);
    std::vector<int64_t> slots;
    for (int r = 0; r < R; ++r) {
      k[r] = 1 + static_cast<int>(rng() % kMaxLen);
      enc[r] = 1 + static_cast<int>(rng() % kMaxLen);
      slots.push_back(int64_t{table[r * kW + (k[r] - 1) / kBS]} * kBS + (k[r] - 1) % kBS);
    }
    CommonAttentionMetadata m = CommonAttentionMetadata::make(q, k, table, kW, slots);
    m.encoder_seq_lens = enc;
    std::vector<uint16_t> qh(static_cast<size_t>(R) * kH * kD),
        kh(static_cast<size_t>(R) * kKH * kD), vh(kh.size());
    for (auto* v : {&qh, &kh, &vh})
      for (auto& x : *v) x = float_to_bf16(normal(rng));
    const int padded = runner.padded_size(R);
    REQUIRE(padded > 0);
    graph_stack.set_batch(m, padded, stream, &qh, &kh, &vh);
    eager_stack.set_batch(m, padded, stream, &qh, &kh, &vh);
    replays += runner.run(stream, R, builder.can_run_in_cudagraph(m)) > 0;
    eager_stack.step(stream, padded);
    GA_CU_CHECK(d.cuStreamSynchronize(stream));
    for (int l = 0; l < 2; ++l) {
      const size_t bytes = static_cast<size_t>(R) * kH * kD * 2;
      std::vector<unsigned char> g(bytes), e(bytes);
      GA_CU_CHECK(d.cuMemcpyDtoH(g.data(),
                                 reinterpret_cast<CUdeviceptr>(graph_stack.output(l).data), bytes));
      GA_CU_CHECK(d.cuMemcpyDtoH(e.data(),
                                 reinterpret_cast<CUdeviceptr>(eager_stack.output(l).data), bytes));
      INFO("step " << step << " layer " << l << " requests " << R);
      REQUIRE(g == e);
    }
  }
  CHECK(replays == 60);
  std::vector<unsigned char> after(kv_bytes);
  GA_CU_CHECK(d.cuMemcpyDtoH(
      after.data(), reinterpret_cast<CUdeviceptr>(graph_stack.kv_cache(1).data), kv_bytes));
  CHECK(after == init);  // the cross layer's encoder cache: never written
}
