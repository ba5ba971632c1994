// SPDX-License-Identifier: Apache-2.0
// graphattn-bench, decode part: decode attention time against the device's own bandwidth limits
// and the peer (cuDNN SDPA on contiguous KV), measured in the same run. bf16, 32 query heads,
// 8 KV heads, block 16 (docs/peers-h100.md's setup): random data, shuffled physical blocks, L2
// flushed before every repetition, CUDA events around each forward, median of reps. Each shape's
// first and last requests are checked against the float64 reference before timing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

#include "graphattn/graphattn.hpp"
#include "runtime/decode.hpp"
#include "runtime/module_cache.hpp"
#include "templates/params.h"
#include "testing/configs.hpp"
#include "testing/host_dtypes.hpp"
#include "testing/reference.hpp"
#include "tools/bench_parts.hpp"

namespace graphattn::bench {

using detail::driver;

std::string DecodeShape::label() const {
  std::string s = std::to_string(batch) + "x" + std::to_string(len);
  if (head_size != 128) s += " h" + std::to_string(head_size);
  if (kv != "auto") s += " " + kv;
  if (q_fp8) s += " q-e4m3";
  if (q_len > 1) s += " q" + std::to_string(q_len);
  if (sparse) s += " bsp";
  if (kv_heads != 8)
    s += " " + std::to_string(4 * kv_heads) + "/" + std::to_string(kv_heads) + " heads";
  if (hnd) s += " hnd";
  if (pages == 1) s += " seq";
  if (pages == 2) s += " near";
  if (legacy) s += use_paged_attention_v1(len, batch, 4 * kv_heads) ? " legacy v1" : " legacy v2";
  return s;
}

std::string DecodeShape::peer_key() const {
  if (kv_heads != 8) return "";  // (the peer times 32/8 heads)
  return std::to_string(batch) + ":" + std::to_string(len) + ":" + std::to_string(head_size);
}

std::vector<DecodeShape> parse_decode_shapes(const std::string& text) {
  std::vector<DecodeShape> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    DecodeShape s;
    std::string dims = item, extra;
    const size_t colon = item.find(':');
    if (colon != std::string::npos) {
      dims = item.substr(0, colon);
      extra = item.substr(colon + 1);
    }
    const size_t x = dims.find('x');
    if (x == std::string::npos)
      throw Error(
          "shape '" + item +
          "' is not BATCHxLEN[:hHEAD|:e4m3|:qe4m3|:qN|:bsp|:legacy|:kvN][:hnd][:seq|:near], e.g. "
          "64x8192:h64");
    s.batch = std::stoi(dims.substr(0, x));
    s.len = std::stoi(dims.substr(x + 1));
    // ":hnd", ":seq" and ":near" may follow (or precede) one other suffix: "64x8192:h64:hnd".
    {
      std::string rest, part;
      std::stringstream parts(extra);
      while (std::getline(parts, part, ':')) {
        if (part == "hnd")
          s.hnd = true;
        else if (part == "seq" || part == "near")
          s.pages = part == "seq" ? 1 : 2;
        else if (!rest.empty())
          throw Error("shape '" + item + "': at most one suffix besides :hnd, :seq and :near");
        else
          rest = part;
      }
      extra = rest;
    }
    if (extra == "e4m3") {
      s.kv = "e4m3";
    } else if (extra == "qe4m3") {
      s.kv = "e4m3";
      s.q_fp8 = true;
    } else if (!extra.empty() && extra[0] == 'h')
      s.head_size = std::stoi(extra.substr(1));
    else if (extra == "bsp")
      s.sparse = true;
    else if (!extra.empty() && extra[0] == 'q')
      s.q_len = std::stoi(extra.substr(1));
    else if (extra == "legacy")
      s.legacy = true;
    else if (extra.rfind("kv", 0) == 0 && extra.size() > 2 &&
             extra.find_first_not_of("0123456789", 2) == std::string::npos)
      s.kv_heads = std::stoi(extra.substr(2));
    else if (!extra.empty())
      throw Error("shape '" + item +
                  "': suffix must be :hHEAD, :e4m3, :qe4m3, :qN, :bsp, :legacy or :kvN, "
                  "and/or :hnd, :seq, :near");
    if (s.kv_heads < 1 || s.kv_heads > 64)
      throw Error("shape '" + item + "': :kvN needs N in 1..64, got " + std::to_string(s.kv_heads));
    if (s.q_len < 1 || s.q_len > kMaxDecodeQueryLen)
      throw Error("shape '" + item + "': q_len must be 1.." + std::to_string(kMaxDecodeQueryLen));
    if (s.batch <= 0 || s.len <= 0) throw Error("shape '" + item + "' must be positive");
    if (s.hnd && s.legacy)
      throw Error("shape '" + item + "': :hnd is a flash layout, :legacy another layout");
    out.push_back(s);
  }
  return out;
}

namespace {

// The first and last requests of a shape against the float64 reference.
// A block is one contiguous region in both layouts; element (offset, head, dim) sits at
// (offset * KH + head) * D + dim in a flash (NHD) block, and in a legacy key block at
// ((head * D / x + dim / x) * B + offset) * x + dim % x, a value block (head * D + dim) * B +
// offset; in an HND block at (head * B + offset) * D + dim.
double check_shape(const DecodeShape& s, const AttentionLayerConfig& c, const DeviceBuffer& cache,
                   const DeviceBuffer& q, const DeviceBuffer& out, const std::vector<int>& phys,
                   int64_t blocks_per_seq, int64_t NB) {
  const int H = c.num_heads, KH = c.num_kv_heads, D = c.head_size, B = c.block_size;
  const bool fp8 = s.kv == "e4m3";
  const int Q = s.q_len;  // query rows of a request
  std::vector<uint16_t> out_h(static_cast<size_t>(s.batch) * Q * H * D), q_h(out_h.size());
  std::vector<uint8_t> q8_h(s.q_fp8 ? out_h.size() : 0);  // e4m3 queries
  out.download(out_h.data(), out_h.size() * 2);
  if (s.q_fp8)
    q.download(q8_h.data(), q8_h.size());
  else
    q.download(q_h.data(), q_h.size() * 2);
  double worst = 0;
  for (int r : {0, s.batch - 1}) {
    test::RefProblem p;
    p.num_heads = H;
    p.num_kv_heads = KH;
    p.head_size = D;
    p.block_size = B;
    p.query_start_loc = {0, Q};
    p.seq_lens = {s.len};
    p.max_blocks_per_seq = static_cast<int>(blocks_per_seq);
    p.scale = c.scale;
    const size_t q0 = static_cast<size_t>(r) * Q * H * D;
    for (int i = 0; i < Q * H * D; ++i)
      p.q.push_back(s.q_fp8 ? test::e4m3_to_double(q8_h[q0 + i]) * c.q_scale
                            : test::bf16_to_float(q_h[q0 + i]));
    // This request's blocks, copied into a compact cache numbered 0..blocks_per_seq-1.
    const size_t block_elems = static_cast<size_t>(B) * KH * D;
    const size_t elem = fp8 ? 1 : 2;
    std::vector<unsigned char> blk(block_elems * elem);
    p.k_cache.resize(blocks_per_seq * block_elems);
    p.v_cache.resize(blocks_per_seq * block_elems);
    for (int64_t i = 0; i < blocks_per_seq; ++i) {
      p.block_table.push_back(static_cast<int>(i));
      const int64_t pb = phys[r * blocks_per_seq + i];
      for (int which = 0; which < 2; ++which) {
        cache.download(blk.data(), blk.size(), (which * NB + pb) * block_elems * elem);
        auto& dst = which == 0 ? p.k_cache : p.v_cache;
        const double scale = which == 0 ? c.k_scale : c.v_scale;
        const size_t x = 16 / elem;
        for (size_t e = 0; e < block_elems; ++e) {
          const size_t off = e / (KH * D), h = e / D % KH, dim = e % D;
          const size_t src = s.hnd        ? (h * B + off) * D + dim
                             : !s.legacy  ? e
                             : which == 0 ? ((h * (D / x) + dim / x) * B + off) * x + dim % x
                                          : (h * D + dim) * B + off;
          double v;
          if (fp8) {
            v = test::e4m3_to_double(blk[src]) * scale;
          } else {
            uint16_t half;
            std::memcpy(&half, &blk[2 * src], 2);
            v = test::bf16_to_float(half);
          }
          dst[i * block_elems + e] = v;
        }
      }
    }
    const std::vector<double> want = test::reference_attention(p);
    std::vector<double> got(static_cast<size_t>(Q) * H * D);
    for (size_t i = 0; i < got.size(); ++i)
      got[i] = test::bf16_to_float(out_h[static_cast<size_t>(r) * Q * H * D + i]);
    worst = std::max(worst, test::relative_l2(got, want));
  }
  return worst;
}

// --paged-read: the row's decode reads alone (the bench's paged_read helper) over the same cache,
// block table and grid as the decode's policy (one split only), at the shared memory of the
// policy's depth, so the same number of blocks share a multiprocessor.
// Then the same reads with each request's pages visited in ascending address order (its block
// table row sorted): what a decode that visits its tiles by physical block could read at, since
// every block then sweeps the cache from its start as the others do.
void paged_read_row(const Device& dev, const AttentionBackend& attn, int reps, CUdeviceptr cache,
                    int elem, CUdeviceptr bt, CUdeviceptr seq, const std::vector<int>& phys,
                    const DecodeShape& s, int64_t blocks_per_seq, int64_t NB, double graph_us,
                    double rd_us) {
  const auto& d = driver();
  const detail::LoadedKernel& dk =
      detail::load_kernel(attn.required_specs()[1], default_kernel_cache());
  const detail::DecodeDevice ddev = detail::prepare_decode_kernel(dk);
  const AttentionLayerConfig& lc = attn.config();
  const detail::DecodeGrid g = detail::decode_grid(
      s.batch, lc.num_kv_heads, lc.num_heads / lc.num_kv_heads * lc.decode_query_len,
      lc.max_model_len, lc.window, lc.head_size, lc.kv_dtype, ddev);
  const int rh = std::max(1, ddev.row_heads), KH = s.kv_heads, D = s.head_size;
  if (D * elem * rh != 256 || KH % rh != 0) {
    std::printf("   paged read: skipped (%d-byte rows: the helper reads 256-byte rows)\n",
                D * elem * rh);
    return;
  }
  PagedRead r;
  r.key = cache;
  r.page_bytes = static_cast<size_t>(16) * KH * D * elem;
  r.value = cache + static_cast<CUdeviceptr>(NB) * r.page_bytes;
  r.block_table = bt;
  r.pieces = KH / rh;
  r.requests = s.batch;
  r.blocks_per_seq = static_cast<int>(blocks_per_seq);
  r.tiles = (s.len + 15) / 16;
  r.splits = g.max_splits;  // each split block its range of tiles, as the decode's
  r.token_bytes = static_cast<size_t>(KH) * D * elem;
  r.smem_bytes = static_cast<unsigned>(ga_decode_smem_bytes(D, elem, g.stages, rh));
  GA_CU_CHECK(d.cuFuncSetAttribute(dev.paged_read, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   static_cast<int>(r.smem_bytes)));
  int per_sm = 0;
  GA_CU_CHECK(
      d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dev.paged_read, 128, r.smem_bytes));
  const double t =
      time_graph_us(dev, reps, [&] { launch_paged_read(dev, r, dev.flush_sink->ptr()); });
  std::printf(
      "   paged read (%d x %d blocks, %d a multiprocessor (decode: %d at %d stages), loads "
      "only): %.1f us (%.1f%% of rd); decode graph - paged read %.1f us\n",
      r.pieces, r.requests * r.splits, per_sm, ddev.blocks_per_sm[g.stages], g.stages, t,
      100.0 * rd_us / t, graph_us - t);
  // The chain's parts: the same reads with no block table (pages in order, addresses known at
  // entry), and after reading the request's length first (seq_lens -> block table -> KV, as the
  // decode).
  {
    PagedRead f = r;
    f.block_table = 0;
    const double tf =
        time_graph_us(dev, reps, [&] { launch_paged_read(dev, f, dev.flush_sink->ptr()); });
    PagedRead c = r;
    c.seq_lens = seq;
    const double tc =
        time_graph_us(dev, reps, [&] { launch_paged_read(dev, c, dev.flush_sink->ptr()); });
    std::printf(
        "   paged read without the block table (pages in order): %.1f us; seq_lens first, then "
        "the block table: %.1f us\n",
        tf, tc);
  }
  std::vector<int> sorted(phys);
  for (int64_t q = 0; q < s.batch; ++q)
    std::sort(sorted.begin() + q * blocks_per_seq, sorted.begin() + (q + 1) * blocks_per_seq);
  DeviceBuffer sorted_bt(sorted.size() * 4);
  sorted_bt.upload(sorted.data(), sorted.size() * 4);
  r.block_table = sorted_bt.ptr();
  const double ts =
      time_graph_us(dev, reps, [&] { launch_paged_read(dev, r, dev.flush_sink->ptr()); });
  std::printf(
      "   paged read, each request's pages in ascending address order: %.1f us (%.1f%% of rd)\n",
      ts, 100.0 * rd_us / ts);
}

}  // namespace

nlohmann::json bench_decode(const Device& dev, const DecodeOptions& o, const PeerTimes& peer,
                            bool* ok) {
  const auto& d = driver();
  const int B = 16;
  std::printf(
      "\n== decode: bf16, 32 query heads, 8 KV heads (:kvN rows: 4N and N), block %d, shuffled "
      "blocks, median of %d, L2 flushed\n",
      B, o.reps);
  std::printf(
      "time: eager forward() between events; graph: the same forward captured and "
      "replayed; peer: %s\n",
      peer.available ? ("PyTorch SDPA (" + peer.backend + ") on contiguous bf16 KV").c_str()
                     : ("unavailable, " + peer.why).c_str());
  std::printf(
      "%% read: against the read-only streaming limit above (2 GiB, read with L2 clean); rd us / "
      "%% rd: the same KV bytes read by that streaming kernel after the same flush as the row\n");
  std::printf("%-16s %7s %9s %9s %8s %8s %9s %8s %7s %9s %7s %9s\n", "batch x len", "KV MiB",
              "time us", "graph us", "GB/s", "% read", "floor us", "rd us", "% rd", "peer us",
              "peer/us", "max err");
  nlohmann::json results = nlohmann::json::array();
  std::mt19937_64 rng(12345);
  for (const DecodeShape& s : o.shapes) {
    const int KH = s.kv_heads, H = 4 * KH;
    const int D = s.head_size;
    const bool fp8 = s.kv == "e4m3";
    const int elem = fp8 ? 1 : 2;
    AttentionLayerConfig cfg = test::layer_config(H, KH, D, s.len, s.batch);
    cfg.block_size = B;
    if (s.hnd) cfg.layout = KvLayout::kHND;
    cfg.decode_query_len = s.q_len;   // > 1: the multi-token kernel, s.q_len tokens a request
    const int T = s.batch * s.q_len;  // query rows
    cfg = test::with_kv(cfg, fp8 ? KvDType::kFp8E4M3 : KvDType::kAuto, 1.5f);
    // The softmax scale as the backend resolves 0; the legacy rows and the reference take it.
    cfg.scale = 1.0f / std::sqrt(static_cast<float>(D));
    if (s.q_fp8) {
      cfg.q_dtype = KvDType::kFp8E4M3;
      cfg.q_scale = 0.5f;
    }
    const int q_elem = s.q_fp8 ? 1 : 2;
    // Block-sparse rows: the 16-token tiles some head of each KV head sees (what the kernel
    // reads), counted on the host by the kernels' rule (GaBlockSparse in templates/params.h).
    double live_fraction = 1.0;
    if (s.sparse) {
      cfg.blocksparse = {64, 4, 8, blocksparse_head_sliding_step(H, KH, 8, false, false), 0};
      const int64_t tiles = (s.len + 15) / 16, qb = (s.len - 1) / 64;
      int64_t live = 0;
      for (int kh = 0; kh < KH; ++kh)
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t kb = t * 16 / 64;
          bool seen = false;
          for (int h = kh * (H / KH); h < (kh + 1) * (H / KH); ++h) {
            const int64_t off = (int64_t{h} * cfg.blocksparse.head_sliding_step + 1) % 8;
            seen = seen || qb - kb < 4 || (kb + off) % 8 == 0;
          }
          live += seen;
        }
      live_fraction = static_cast<double>(live) / (tiles * KH);
    }
    // Legacy rows call paged_attention_v1 / v2 (graphattn's own split workspace), no backend.
    std::unique_ptr<AttentionBackend> backend;
    if (!s.legacy) {
      backend = std::make_unique<AttentionBackend>(cfg);
      backend->prepare();
    }
    DeviceBuffer ws(backend ? backend->workspace_bytes() : 0);
    const int64_t blocks_per_seq = (s.len + B - 1) / B;
    const int64_t NB = s.batch * blocks_per_seq;
    const size_t cache_elems = static_cast<size_t>(2) * NB * B * KH * D;
    DeviceBuffer cache(cache_elems * elem), q(static_cast<size_t>(T) * H * D * q_elem),
        out(static_cast<size_t>(T) * H * D * 2), seq(s.batch * 4), bt(static_cast<size_t>(NB) * 4),
        qsl((s.batch + 1) * 4);
    if (fp8)
      fill_random_fp8(dev, cache.data(), cache_elems, 7 + s.batch);
    else
      fill_random_bf16(dev, cache.data(), cache_elems, 7 + s.batch);
    if (s.q_fp8)
      fill_random_fp8(dev, q.data(), static_cast<size_t>(T) * H * D, 99 + s.len);
    else
      fill_random_bf16(dev, q.data(), static_cast<size_t>(T) * H * D, 99 + s.len);
    std::vector<int> phys(NB), lens(s.batch, s.len), starts(s.batch + 1);
    std::iota(phys.begin(), phys.end(), 0);
    std::shuffle(phys.begin(), phys.end(), rng);  // (also for :seq and :near: the next rows'
                                                  // shuffles stay those of the default rows)
    if (s.pages != 0) std::iota(phys.begin(), phys.end(), 0);
    if (s.pages == 2) {  // shuffled within groups of blocks spanning 2 MiB of K
      const int64_t group = std::max<int64_t>(1, (int64_t{2} << 20) / (int64_t{B} * KH * D * elem));
      std::mt19937_64 near_rng(777);
      for (int64_t g0 = 0; g0 < NB; g0 += group)
        std::shuffle(phys.begin() + g0, phys.begin() + std::min(NB, g0 + group), near_rng);
    }
    for (int r = 0; r <= s.batch; ++r) starts[r] = r * s.q_len;
    bt.upload(phys.data(), phys.size() * 4);
    seq.upload(lens.data(), lens.size() * 4);
    qsl.upload(starts.data(), starts.size() * 4);
    const ScalarType kst = fp8 ? ScalarType::kFloat8E4M3 : ScalarType::kBFloat16;
    // [2, NB, B, KH, D]: NHD contiguous; HND pages hold [KH][B][D].
    auto kv_view = [&](void* data) {
      return s.hnd
                 ? TensorView::strided(data, kst, {2, NB, B, KH, D},
                                       {NB * B * KH * D, int64_t{B} * KH * D, D, int64_t{B} * D, 1})
                 : TensorView::contiguous(data, kst, {2, NB, B, KH, D});
    };
    const TensorView cache_v = kv_view(cache.data());
    const TensorView q_v = TensorView::contiguous(
        q.data(), s.q_fp8 ? ScalarType::kFloat8E4M3 : ScalarType::kBFloat16, {T, H, D});
    const TensorView o_v = TensorView::contiguous(out.data(), ScalarType::kBFloat16, {T, H, D});
    AttentionMetadata md;
    md.query_start_loc = TensorView::contiguous(qsl.data(), ScalarType::kInt32, {s.batch + 1});
    md.seq_lens = TensorView::contiguous(seq.data(), ScalarType::kInt32, {s.batch});
    md.block_table =
        TensorView::contiguous(bt.data(), ScalarType::kInt32, {s.batch, blocks_per_seq});
    md.num_reqs = md.num_decodes = s.batch;
    md.num_decode_tokens = md.num_actual_tokens = T;
    md.max_query_len = 1;
    md.max_seq_len = s.len;
    // Legacy: the same bytes as vLLM's [2, NB, B * KH * D] cache, split as it does.
    const PagedKvCache legacy = split_paged_kv_cache(
        TensorView::contiguous(cache.data(), kst, {2, NB, int64_t{B} * KH * D}), KH, D);
    const bool v1 = use_paged_attention_v1(s.len, s.batch, H);
    const int64_t parts = paged_attention_num_partitions(s.len);
    DeviceBuffer sums(s.legacy && !v1 ? static_cast<size_t>(s.batch) * H * parts * 4 : 0),
        tmp(s.legacy && !v1 ? static_cast<size_t>(s.batch) * H * parts * D * 2 : 0);
    const TensorView sums_v =
        TensorView::contiguous(sums.data(), ScalarType::kFloat32, {s.batch, H, parts});
    const TensorView tmp_v =
        TensorView::contiguous(tmp.data(), ScalarType::kBFloat16, {s.batch, H, parts, D});
    const char* kv_name = fp8 ? "fp8" : "auto";
    auto run = [&] {
      if (!s.legacy) {
        backend->forward(q_v, TensorView{}, TensorView{}, cache_v, o_v, md, ws.data(), ws.bytes(),
                         dev.stream);
      } else if (v1) {
        paged_attention_v1(o_v, q_v, legacy.key_cache, legacy.value_cache, KH, cfg.scale,
                           md.block_table, md.seq_lens, B, s.len, TensorView{}, kv_name,
                           cfg.k_scale, cfg.v_scale, 0, 0, 0, 0, 0, dev.stream);
      } else {
        paged_attention_v2(o_v, sums_v, sums_v, tmp_v, q_v, legacy.key_cache, legacy.value_cache,
                           KH, cfg.scale, md.block_table, md.seq_lens, B, s.len, TensorView{},
                           kv_name, cfg.k_scale, cfg.v_scale, 0, 0, 0, 0, 0, dev.stream);
      }
    };
    out.fill_bytes(0xff);
    run();
    GA_CU_CHECK(d.cuStreamSynchronize(dev.stream));
    // (The reference check is dense: block-sparse rows are checked by the GPU tests instead.)
    const bool check = o.check && !s.sparse;
    const double err = check ? check_shape(s, cfg, cache, q, out, phys, blocks_per_seq, NB) : 0;
    const double tol = 5e-3;
    if (check && !(err <= tol)) *ok = false;

    for (int i = 0; i < 5; ++i) run();
    const double us = time_us(dev, o.reps, true, run);
    const double graph_us = time_graph_us(dev, o.reps, run);
    const double kv_bytes =
        static_cast<double>(s.batch) * s.len * KH * D * elem * 2 * live_fraction;
    const double best = std::min(us, graph_us);
    const double gbs = kv_bytes / best / 1e3;
    // The KV cache's first kv_bytes: as many bytes as the row reads, from the same allocation.
    const double rd_us =
        read_same_flush_us(dev, o.reps, cache.ptr(), static_cast<size_t>(kv_bytes));
    // The peer times one query token a request: no peer for multi-token rows.
    auto it = s.q_len > 1 ? peer.decode_us.end() : peer.decode_us.find(s.peer_key());
    const double peer_us = it == peer.decode_us.end() ? 0 : it->second;
    char peer_col[16] = "-", ratio_col[16] = "-";
    if (peer_us > 0) {
      std::snprintf(peer_col, sizeof peer_col, "%.1f", peer_us);
      std::snprintf(ratio_col, sizeof ratio_col, "%.2f", peer_us / best);
    }
    char err_col[16] = "-";  // rows without the reference check print no error
    if (check) std::snprintf(err_col, sizeof err_col, "%.2e", err);
    std::printf("%-16s %7.0f %9.1f %9.1f %8.0f %7.1f%% %9.1f %8.1f %6.1f%% %9s %7s %9s%s\n",
                s.label().c_str(), kv_bytes / (1 << 20), us, graph_us, gbs,
                100.0 * gbs / dev.read_gbs, kv_bytes / dev.read_gbs / 1e3, rd_us,
                100.0 * rd_us / best, peer_col, ratio_col, err_col,
                check && !(err <= tol) ? "  FAIL" : "");
    if (o.read_latency) read_latency_rows(dev, o.reps, cache.ptr(), static_cast<size_t>(kv_bytes));
    if (o.block_timing > 0 && s.q_len == 1 && backend)
      decode_block_timing(dev, *backend, run, o.block_timing, rd_us, o.block_timing_out, s.label(),
                          cache.ptr(), static_cast<size_t>(kv_bytes));
    if (o.paged_read && s.q_len == 1 && backend && !s.hnd && !s.sparse)
      paged_read_row(dev, *backend, o.reps, cache.ptr(), elem, bt.ptr(), seq.ptr(), phys, s,
                     blocks_per_seq, NB, graph_us, rd_us);
    if (!o.try_splits.empty() && s.q_len == 1 && backend) {  // (flash single-token kernels)
      const AttentionBackend& attn = *backend;
      // The decode kernel alone at other grid widths and every pipeline depth, each captured and
      // replayed; split launches also as clusters where the device holds them.
      const AttentionSpec ds = attn.required_specs()[1];
      const detail::LoadedKernel& dk = detail::load_kernel(ds, default_kernel_cache());
      const int most = *std::max_element(o.try_splits.begin(), o.try_splits.end());
      DeviceBuffer tws(detail::decode_workspace_bytes(s.batch, H, D, most));
      DeviceBuffer counters(detail::decode_counter_count(s.batch, KH, H / KH) * 4);
      const detail::DecodeDevice ddev = detail::prepare_decode_kernel(dk);
      // The largest cluster at each depth (prepare_decode_kernel; 0 where none).
      auto cluster_at = [&](int stages) { return stages <= 4 ? ddev.cluster_at[stages] : 0; };
      // The kernel's arguments at a forced grid over `kv` into `output`.
      auto forced = [&](const TensorView& kv, const TensorView& output, int sp, int stages,
                        void* workspace, size_t workspace_size, void* split_counters) {
        detail::DecodeLaunch a{{q_v, kv, output, md.seq_lens, md.block_table}};
        a.num_decodes = s.batch;
        a.max_splits = sp;
        a.stages = stages;
        a.scale = attn.config().scale;
        a.k_scale = attn.config().k_scale;
        a.v_scale = attn.config().v_scale;
        a.q8.q_scale = attn.config().q_scale;
        a.workspace = workspace;
        a.workspace_size = workspace_size;
        a.counters = split_counters;
        return a;
      };
      // Percent of the read-only bandwidth at t us a launch.
      auto pct_read = [&](double t) { return 100.0 * kv_bytes / t / 1e3 / dev.read_gbs; };
      for (int row = 0; row < 2 * ga_decode_max_stages(D, elem); ++row) {
        const int stages = row / 2 + 1;
        const bool cluster = row % 2 == 1;
        // Clusters at the depths prepare_decode_kernel sized them for.
        if (stages < 2 || (cluster && cluster_at(stages) < 2)) continue;
        std::printf("   %d stages%s, splits:", stages, cluster ? ", cluster" : "");
        for (int sp : o.try_splits) {
          if (cluster && (sp < 2 || sp > cluster_at(stages))) continue;
          detail::DecodeLaunch a =
              forced(cache_v, o_v, sp, stages, tws.data(), tws.bytes(), counters.data());
          a.cluster = cluster;
          const double t =
              time_graph_us(dev, o.reps, [&] { detail::launch_decode(dk, a, dev.stream); });
          std::printf("  %d: %.1f us (%.0f%%)", sp, t, pct_read(t));
        }
        std::printf("\n");
      }
      const double chain_bytes = static_cast<double>(cache_elems) * elem * o.chain;
      if (o.chain > 0 && s.q_fp8) {
        std::printf("   chain of %d: skipped (e4m3 queries)\n", o.chain);
      } else if (o.chain > 0 && chain_bytes > 16.0 * (1 << 30)) {
        std::printf("   chain of %d: skipped (%.0f GiB of caches > 16)\n", o.chain,
                    chain_bytes / (1 << 30));
      } else if (o.chain > 0) {
        // o.chain launches in one graph, each over its own cache (same block table) with its own
        // output, workspace and counters, writing request r's new key and value into its last
        // slot before attending (the fused write) and starting its prologue early, as the
        // step's layers do.
        const size_t cache_bytes = cache_elems * elem;
        DeviceBuffer caches(cache_bytes * o.chain), outs(out.bytes() * o.chain),
            ctr(counters.bytes() * o.chain), nk(static_cast<size_t>(s.batch) * KH * D * 2),
            nv(nk.bytes()), slots(static_cast<size_t>(s.batch) * 8);
        // The policy's grid, at the depth a launch with the early prologue takes (early_stages).
        const AttentionLayerConfig& lc = attn.config();
        const detail::DecodeGrid pg = detail::decode_grid(
            s.batch, lc.num_kv_heads, lc.num_heads / lc.num_kv_heads * lc.decode_query_len,
            lc.max_model_len, lc.window, lc.head_size, lc.kv_dtype, ddev);
        const int psp = pg.max_splits, pst = pg.early_stages != 0 ? pg.early_stages : pg.stages;
        const size_t ws_each =
            (detail::decode_workspace_bytes(s.batch, H, D, std::max(most, psp)) + 255) / 256 * 256;
        DeviceBuffer wss(ws_each * o.chain);
        for (int l = 0; l < o.chain; ++l) {
          char* c = static_cast<char*>(caches.data()) + cache_bytes * l;
          if (fp8)
            fill_random_fp8(dev, c, cache_elems, 200 + l);
          else
            fill_random_bf16(dev, c, cache_elems, 200 + l);
        }
        fill_random_bf16(dev, nk.data(), nk.bytes() / 2, 5);  // (the layer's dtype, bf16)
        fill_random_bf16(dev, nv.data(), nv.bytes() / 2, 6);
        std::vector<int64_t> slot(s.batch);
        for (int r = 0; r < s.batch; ++r)
          slot[r] = int64_t{phys[r * blocks_per_seq + (s.len - 1) / B]} * B + (s.len - 1) % B;
        slots.upload(slot.data(), slot.size() * 8);
        auto chain_of = [&](int sp, int stages, bool cluster, bool trigger = false) {
          std::vector<detail::DecodeLaunch> as;
          for (int l = 0; l < o.chain; ++l) {
            detail::DecodeLaunch a =
                forced(kv_view(static_cast<char*>(caches.data()) + cache_bytes * l),
                       TensorView::contiguous(static_cast<char*>(outs.data()) + out.bytes() * l,
                                              ScalarType::kBFloat16, {T, H, D}),
                       sp, stages, static_cast<char*>(wss.data()) + ws_each * l, ws_each,
                       static_cast<char*>(ctr.data()) + counters.bytes() * l);
            a.new_key = TensorView::contiguous(nk.data(), ScalarType::kBFloat16, {s.batch, KH, D});
            a.new_value = TensorView::contiguous(nv.data(), a.new_key.dtype, {s.batch, KH, D});
            a.slot_mapping = TensorView::contiguous(slots.data(), ScalarType::kInt64, {s.batch});
            a.early_prologue = true;
            a.cluster = cluster;
            a.early_trigger = trigger;
            as.push_back(a);
          }
          return as;
        };
        auto chain_us = [&](int sp, int stages, bool cluster = false, bool trigger = false) {
          const std::vector<detail::DecodeLaunch> as = chain_of(sp, stages, cluster, trigger);
          const double t = time_graph_us(dev, o.reps, [&] {
            for (const auto& a : as) detail::launch_decode(dk, a, dev.stream);
          });
          return t / o.chain;
        };
        const double pt = chain_us(psp, pst, pg.cluster, pg.early_trigger);
        std::printf(
            "   chain of %d, us per launch: policy (%d splits, %d stages%s%s) %.1f us (%.0f%%)\n",
            o.chain, psp, pst, pg.cluster ? ", cluster" : "",
            pg.early_trigger ? ", entry trigger" : "", pt, pct_read(pt));
        if (o.block_timing > 0) {  // the policy chain's per-block records (the last launch's)
          const std::vector<detail::DecodeLaunch> as =
              chain_of(psp, pst, pg.cluster, pg.early_trigger);
          decode_chain_block_records(
              dev, dk.module,
              [&] {
                for (const auto& a : as) detail::launch_decode(dk, a, dev.stream);
              },
              o.block_timing, o.block_timing_out, s.label());
        }
        // The floor: the same chain of plain reads, each of the row's bytes from the start of
        // its launch's cache, with the same programmatic dependent launch; waiting for the
        // previous read before the loads (wait first) or only at the end (loads under the
        // previous read's tail); blocks of 512 threads, two and eight a multiprocessor.
        std::printf("   chain of %d plain reads (PDL), us per launch:", o.chain);
        DeviceBuffer sink(64);
        for (const unsigned per_sm : {2u, 8u})
          for (const bool wait_first : {true, false}) {
            const double t = time_graph_us(dev, o.reps, [&] {
              for (int l = 0; l < o.chain; ++l)
                launch_read_only_pdl(dev, caches.ptr() + cache_bytes * l,
                                     static_cast<size_t>(kv_bytes), sink.ptr(),
                                     per_sm * static_cast<unsigned>(dev.sms), wait_first);
            });
            std::printf("  %u/SM wait %s %.1f", per_sm, wait_first ? "first" : "last", t / o.chain);
          }
        std::printf("\n");
        for (int stages = 2; stages <= ga_decode_max_stages(D, elem); ++stages) {
          std::printf("   chain of %d, %d stages, splits:", o.chain, stages);
          for (int sp : o.try_splits) {
            const double t = chain_us(sp, stages);
            std::printf("  %d: %.1f us (%.0f%%)", sp, t, pct_read(t));
          }
          std::printf("\n");
        }
        for (int st = 2; st <= ga_decode_max_stages(D, elem); ++st) {
          if (cluster_at(st) < 2) continue;  // the splits combined through distributed smem
          std::printf("   chain of %d, %d stages, cluster, splits:", o.chain, st);
          for (int sp : o.try_splits) {
            if (sp < 2 || sp > cluster_at(st)) continue;
            const double t = chain_us(sp, st, true);
            std::printf("  %d: %.1f us (%.0f%%)", sp, t, pct_read(t));
          }
          std::printf("\n");
        }
      }
    }
    results.push_back(
        {{"shape", s.label()},
         {"batch", s.batch},
         {"len", s.len},
         {"head_size", D},
         {"num_heads", H},
         {"num_kv_heads", KH},
         {"q_len", s.q_len},
         {"kv_dtype", s.kv},
         {"q_dtype", s.q_fp8 ? "fp8_e4m3" : "bf16"},
         {"kv_mib", kv_bytes / (1 << 20)},
         {"layout", s.legacy ? (v1 ? "legacy v1" : "legacy v2")
                    : s.hnd  ? "flash hnd"
                             : "flash"},
         // (legacy rows: the policy's choice inside paged_attention, not reported)
         {"max_splits", backend ? nlohmann::json(backend->decode_max_splits(s.batch)) : nullptr},
         {"stages", backend ? nlohmann::json(backend->decode_stages(s.batch)) : nullptr},
         {"cluster", backend ? nlohmann::json(backend->decode_cluster(s.batch)) : nullptr},
         {"time_us", us},
         {"graph_us", graph_us},
         {"gb_per_s", gbs},
         {"percent_of_read_only", 100.0 * gbs / dev.read_gbs},
         {"floor_us", kv_bytes / dev.read_gbs / 1e3},
         {"read_same_flush_us", rd_us},
         {"percent_of_read_same_flush", 100.0 * rd_us / best},
         {"peer_us", peer_us > 0 ? nlohmann::json(peer_us) : nlohmann::json()},
         {"peer_over_ours", peer_us > 0 ? nlohmann::json(peer_us / best) : nlohmann::json()},
         {"max_rel_l2_error", check ? nlohmann::json(err) : nlohmann::json()}});
  }
  return results;
}

}  // namespace graphattn::bench
