// SPDX-License-Identifier: Apache-2.0
// graphattn-bench, prefill part: a batch of pure causal prefills over the paged KV cache (bf16,
// 32/8 heads, head 128 (the plain rows also 64 and 256), block 16, shuffled blocks, random data)
// against the peer on contiguous tensors. A few output rows are checked against the float64
// reference before timing. With `legacy` the same bytes form vLLM's legacy caches, read by
// forward_prefix. With `prefix` the requests are chunked prefills: len new tokens each after prefix
// cached ones. With `bsp` the plain bf16 prefill of a block-sparse layer (Phi-3-small's pattern:
// 64-token sparse blocks, 16 local, every 8th seen from afar, sliding over the heads) through
// AttentionBackend::forward (spec "_bsp").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "graphattn/graphattn.hpp"
#include "graphattn/paged_cache.hpp"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/legacy_layout.hpp"
#include "testing/reference.hpp"
#include "tools/bench_parts.hpp"

namespace graphattn::bench {

nlohmann::json bench_prefill(const Device& dev, int batch, int len, int reps, const PeerTimes& peer,
                             bool* ok, bool legacy, bool fp8, int prefix, int head, bool bsp) {
  if (bsp && (legacy || fp8))
    throw std::invalid_argument("bench_prefill: the block-sparse row is bf16 over a flash cache");
  if (head != 128 && (legacy || fp8 || prefix != 0))
    throw std::invalid_argument("bench_prefill: head " + std::to_string(head) +
                                " is benched for the plain bf16 prefill only (legacy, fp8 and "
                                "chunked prefill: head 128)");
  const int64_t H = 32, KH = 8, D = head, B = 16, T = int64_t{batch} * len;
  const int kv_len = prefix + len;  // each request's seq_len
  const int64_t blocks_per_seq = (kv_len + B - 1) / B, NB = blocks_per_seq * batch;
  const int64_t elem = fp8 ? 1 : 2;  // query and cache bytes
  DeviceBuffer q(T * H * D * elem), out(T * H * D * 2), cache(2 * NB * B * KH * D * elem),
      qsl((batch + 1) * 4), seq(batch * 4), table(NB * 4);
  if (fp8) {
    fill_random_fp8(dev, q.data(), T * H * D, 5);
    fill_random_fp8(dev, cache.data(), 2 * NB * B * KH * D, 6);
  } else {
    fill_random_bf16(dev, q.data(), T * H * D, 5);
    fill_random_bf16(dev, cache.data(), 2 * NB * B * KH * D, 6);
  }
  std::vector<int> phys(NB), starts(batch + 1), lens(batch, kv_len);
  std::iota(phys.begin(), phys.end(), 0);
  std::mt19937_64 rng(3);
  std::shuffle(phys.begin(), phys.end(), rng);
  for (int r = 0; r <= batch; ++r) starts[r] = r * len;
  table.upload(phys.data(), phys.size() * 4);
  qsl.upload(starts.data(), starts.size() * 4);
  seq.upload(lens.data(), lens.size() * 4);
  out.fill_bytes(0xff);
  const ScalarType st = fp8 ? ScalarType::kFloat8E4M3 : ScalarType::kBFloat16;
  const auto qv = TensorView::contiguous(q.data(), st, {T, H, D});
  const auto ov = TensorView::contiguous(out.data(), ScalarType::kBFloat16, {T, H, D});
  const auto kv = TensorView::contiguous(cache.data(), st, {2, NB, B, KH, D});
  const auto qslv = TensorView::contiguous(qsl.data(), ScalarType::kInt32, {batch + 1});
  const auto seqv = TensorView::contiguous(seq.data(), ScalarType::kInt32, {batch});
  const auto tabv =
      TensorView::contiguous(table.data(), ScalarType::kInt32, {batch, blocks_per_seq});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Legacy: [2, NB, B * KH * D] split into key [NB, KH, D / 8, B, 8] and value [NB, KH, D, B].
  const PagedKvCache pc =
      legacy ? split_paged_kv_cache(
                   TensorView::contiguous(cache.data(), ScalarType::kBFloat16, {2, NB, B * KH * D}),
                   static_cast<int>(KH), static_cast<int>(D))
             : PagedKvCache{};
  // fp8: the layer's forward() with its e4m3 query (no cache write: key and value ndim 0).
  AttentionLayerConfig cfg =
      test::with_kv(test::layer_config(static_cast<int>(H), static_cast<int>(KH),
                                       static_cast<int>(D), kv_len, batch),
                    KvDType::kFp8E4M3, 1.5f);
  cfg.q_dtype = KvDType::kFp8E4M3;
  cfg.q_scale = 0.5f;
  cfg.scale = scale;
  if (bsp) {
    cfg = test::layer_config(static_cast<int>(H), static_cast<int>(KH), static_cast<int>(D), kv_len,
                             batch);
    cfg.scale = scale;
    cfg.blocksparse = blocksparse_from_vllm(
        16, 8, 64,
        blocksparse_head_sliding_step(static_cast<int>(H), static_cast<int>(KH), 8, false, false),
        0, static_cast<int>(H));
  }
  std::unique_ptr<AttentionBackend> backend;
  if (fp8 || bsp) {
    backend = std::make_unique<AttentionBackend>(cfg);
    backend->prepare();
  }
  DeviceBuffer ws(backend ? backend->workspace_bytes() : 0);
  AttentionMetadata md;
  md.query_start_loc = qslv;
  md.seq_lens = seqv;
  md.block_table = tabv;
  md.num_reqs = batch;
  md.num_actual_tokens = static_cast<int>(T);
  md.max_query_len = len;
  md.max_seq_len = kv_len;
  auto run = [&] {
    if (fp8 || bsp) {
      backend->forward(qv, TensorView{}, TensorView{}, kv, ov, md, ws.data(), ws.bytes(),
                       dev.stream);
    } else if (legacy) {
      forward_prefix(qv, TensorView{}, TensorView{}, "auto", pc.key_cache, pc.value_cache, tabv,
                     qslv, seqv, len, nullptr, 0, 1.0f, 1.0f, ov, dev.stream);
    } else {
      prefill_attention(qv, kv, ov, qslv, seqv, tabv, 0, batch, len, scale, 0, 0.0f, 1.0f, 1.0f,
                        dev.stream);
    }
  };
  run();
  GA_CU_CHECK(detail::driver().cuStreamSynchronize(dev.stream));

  // The last 4 rows of the last request against the reference (as a chunked prefill of 4).
  const int n_check = std::min(4, len);
  test::RefProblem ref =
      test::paged_problem(static_cast<int>(H), static_cast<int>(KH), static_cast<int>(D),
                          static_cast<int>(B), {0, n_check}, {kv_len},
                          std::vector<int>(phys.begin() + (batch - 1) * blocks_per_seq, phys.end()),
                          static_cast<int>(blocks_per_seq));
  ref.scale = scale;
  if (bsp) {
    ref.blocksparse.block_size = cfg.blocksparse.block_size;
    ref.blocksparse.local_blocks = cfg.blocksparse.local_blocks;
    ref.blocksparse.vert_stride = cfg.blocksparse.vert_stride;
    ref.blocksparse.head_sliding_step = cfg.blocksparse.head_sliding_step;
    ref.blocksparse.active_head_offset = cfg.blocksparse.active_head_offset;
  }
  std::vector<uint16_t> host(fp8 ? 0 : 2 * NB * B * KH * D);
  std::vector<uint8_t> host8(fp8 ? 2 * NB * B * KH * D : 0);
  if (fp8)
    cache.download(host8.data(), host8.size());
  else
    cache.download(host.data(), host.size() * 2);
  ref.k_cache.resize(NB * B * KH * D);
  ref.v_cache.resize(NB * B * KH * D);
  // The reference's caches are [block, token, kv head, dim]; the legacy ones hold element
  // (b, t, h, d) where LegacyLayout says.
  const test::LegacyLayout layout{B, KH, D, 8};
  for (int64_t i = 0; i < NB * B * KH * D; ++i) {
    int64_t ki = i, vi = i;
    if (legacy) {
      const int64_t d = i % D, h = (i / D) % KH, t = (i / (D * KH)) % B, b = i / (D * KH * B);
      ki = layout.key(b, t, h, d);
      vi = layout.value(b, t, h, d);
    }
    if (fp8) {
      ref.k_cache[i] = test::e4m3_to_double(host8[i]) * cfg.k_scale;
      ref.v_cache[i] = test::e4m3_to_double(host8[NB * B * KH * D + i]) * cfg.v_scale;
      continue;
    }
    ref.k_cache[i] = test::bf16_to_float(host[ki]);
    ref.v_cache[i] = test::bf16_to_float(host[NB * B * KH * D + vi]);
  }
  std::vector<uint16_t> rows(n_check * H * D), outs(n_check * H * D);
  std::vector<uint8_t> rows8(fp8 ? n_check * H * D : 0);
  if (fp8)
    q.download(rows8.data(), rows8.size(), (T - n_check) * H * D);
  else
    q.download(rows.data(), rows.size() * 2, (T - n_check) * H * D * 2);
  out.download(outs.data(), outs.size() * 2, (T - n_check) * H * D * 2);
  if (fp8)
    for (uint8_t x : rows8) ref.q.push_back(test::e4m3_to_double(x) * cfg.q_scale);
  else
    for (uint16_t x : rows) ref.q.push_back(test::bf16_to_float(x));
  std::vector<double> got;
  for (uint16_t x : outs) got.push_back(test::bf16_to_float(x));
  const double err = test::relative_l2(got, test::reference_attention(ref));
  // fp8 on the Hopper wgmma kernel rounds P to e4m3: about 2.6e-2 of relative L2 on random
  // data (tests/gpu/test_fp8_query.cpp derives its 5e-2); 16-bit P elsewhere, 5e-3.
  const double tol = fp8 && dev.arch == 90 ? 5e-2 : 5e-3;
  if (!(err <= tol)) *ok = false;

  for (int i = 0; i < 3; ++i) run();
  const double us = time_us(dev, reps, true, run);
  const double flops =
      4.0 * D * H * batch *
      (static_cast<double>(len) * prefix + static_cast<double>(len) * (len + 1) / 2);
  // fp8: the peer is cuDNN's fp8 SDPA, through PyTorch where it exposes it, else through cuDNN's
  // own Python frontend where that is installed (else none, and why); chunked prefill (a cached
  // prefix) and the block-sparse row have no peer row.
  const auto& peer_times = fp8 ? peer.prefill_fp8_us : peer.prefill_us;
  auto it = peer_times.find(std::to_string(batch) + ":" + std::to_string(len) +
                            (fp8 ? "" : ":" + std::to_string(D)));
  const double peer_us = prefix > 0 || bsp || it == peer_times.end() ? 0 : it->second;
  std::printf(
      "\n== prefill%s: %d x %d new tokens%s, causal, %s, 32/8 heads, head %d, block 16, "
      "median of %d\n",
      legacy ? " over vLLM's legacy caches (forward_prefix)"
      : bsp  ? " of a block-sparse layer (sparse block 64, 16 local, vertical stride 8)"
             : "",
      batch, len,
      prefix > 0 ? (" after " + std::to_string(prefix) + " cached (chunked prefill)").c_str() : "",
      fp8 ? "e4m3 q and KV (forward(), q_dtype fp8_e4m3), bf16 out" : "bf16", static_cast<int>(D),
      reps);
  std::printf("%-12s %10s %10s %10s %10s %12s %9s\n", "", "time us", "TFLOP/s", "peer us",
              "peer TF/s", "ours/peer", "max err");
  char peer_us_s[16] = "-", peer_tf_s[16] = "-", ratio_s[16] = "-";
  if (peer_us > 0) {
    std::snprintf(peer_us_s, sizeof peer_us_s, "%.1f", peer_us);
    std::snprintf(peer_tf_s, sizeof peer_tf_s, "%.1f", flops / peer_us / 1e6);
    std::snprintf(ratio_s, sizeof ratio_s, "%.2fx", peer_us / us);
  }
  const std::string label = std::to_string(batch) + "x" + std::to_string(len) +
                            (prefix > 0 ? "+" + std::to_string(prefix) : "") +
                            (legacy ? " legacy"
                             : fp8  ? " e4m3 q+kv"
                             : bsp  ? " bsp"
                                    : "") +
                            (D != 128 ? " h" + std::to_string(D) : "");
  std::printf("%-12s %10.1f %10.1f %10s %10s %12s %9.2e%s\n", label.c_str(), us, flops / us / 1e6,
              peer_us_s, peer_tf_s, ratio_s, err, err <= tol ? "" : "  FAIL");
  if (fp8 && peer.available) {
    if (peer_us > 0)
      std::printf("fp8 peer: %s%s\n", peer.fp8_backend.c_str(),
                  peer.fp8_rel_l2 >= 0
                      ? (", its output against fp32 on the same inputs: relative L2 " +
                         std::to_string(peer.fp8_rel_l2))
                            .c_str()
                      : "");
    else
      std::printf("fp8 peer: none: %s\n", peer.fp8_why.c_str());
  }
  return {
      {"block_sparse", bsp},
      {"batch", batch},
      {"len", len},
      {"prefix", prefix},
      {"head_size", D},
      {"time_us", us},
      {"tflops", flops / us / 1e6},
      {"peer_us", peer_us > 0 ? nlohmann::json(peer_us) : nlohmann::json()},
      {"ours_over_peer_throughput", peer_us > 0 ? nlohmann::json(peer_us / us) : nlohmann::json()},
      {"peer_fp8_unavailable",
       fp8 && peer_us == 0 ? nlohmann::json(peer.fp8_why) : nlohmann::json()},
      {"peer_fp8_backend",
       fp8 && peer_us > 0 ? nlohmann::json(peer.fp8_backend) : nlohmann::json()},
      {"peer_fp8_rel_l2", fp8 && peer_us > 0 && peer.fp8_rel_l2 >= 0
                              ? nlohmann::json(peer.fp8_rel_l2)
                              : nlohmann::json()},
      {"max_rel_l2_error", err}};
}

}  // namespace graphattn::bench
