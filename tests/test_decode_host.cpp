// SPDX-License-Identifier: Apache-2.0
// Host side of the decode kernels, no GPU needed: the split policy, the workspace size, the
// configuration checks and kernel selection, and that every decode specialization the tests use
// renders.
#include <doctest/doctest.h>

#include <cmath>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "runtime/decode.hpp"
#include "templates/params.h"
#include "testing/configs.hpp"

using namespace graphattn;

// A device of `sms` multiprocessors holding b2, b3, b4 decode blocks each at 2, 3, 4 stages.
detail::DecodeDevice device(int sms, int b2, int b3, int b4, int max_cluster) {
  detail::DecodeDevice d;
  d.num_sms = sms;
  d.blocks_per_sm[2] = b2;
  d.blocks_per_sm[3] = b3;
  d.blocks_per_sm[4] = b4;
  d.max_cluster = max_cluster;
  d.cluster_at[2] =
      max_cluster;  // (an H100's: 16 at 2 and 3 stages, 1 block a multiprocessor at 4)
  d.cluster_at[3] = max_cluster;
  d.use_clusters = max_cluster > 0;
  return d;
}

TEST_CASE("decode split policy: about one block per multiprocessor for small batches") {
  const int sms = 132;
  const auto grid = [&](int b, int kvh, int g, int len, int window, int head = 128,
                        KvDType kv = KvDType::kAuto) {
    // An H100/H200 with head 128: 3, 2 or 1 blocks per multiprocessor at 2, 3 or 4 stages.
    return detail::decode_grid(b, kvh, g, len, window, head, kv, device(sms, 3, 2, 1, 16));
  };
  // One long request over 8 KV heads: splits until the blocks cover the device; long splits
  // keep the deep pipeline and the counters.
  CHECK(grid(1, 8, 4, 32768, 0).max_splits == sms / 8);
  CHECK(grid(1, 8, 4, 32768, 0).stages == ga_decode_max_stages(128, 2));
  CHECK_FALSE(grid(1, 8, 4, 32768, 0).cluster);
  // Short splits take the shallow pipeline, which leaves room for the next kernel's blocks, and
  // 16 of them fit in one cluster: they combine through distributed shared memory. A device
  // without clusters, or more splits than a cluster holds, use the counters.
  CHECK(grid(1, 8, 4, 4096, 0).stages == ga_decode_shallow_stages(128, 2));
  CHECK(grid(1, 8, 4, 4096, 0).cluster);
  CHECK_FALSE(
      detail::decode_grid(1, 8, 4, 4096, 0, 128, KvDType::kAuto, device(sms, 3, 2, 1, 0)).cluster);
  detail::DecodeDevice off = device(sms, 3, 2, 1, 16);
  off.use_clusters = false;  // GRAPHATTN_DECODE_CLUSTERS=0
  CHECK_FALSE(detail::decode_grid(1, 8, 4, 4096, 0, 128, KvDType::kAuto, off).cluster);
  CHECK_FALSE(grid(1, 1, 64, 1 << 20, 0).cluster);
  CHECK_FALSE(grid(64, 8, 4, 8192, 0).cluster);
  // The bench's B=1 step (llama-3-8b, 32/8 heads, context 1024) is a split launch, as 1 x 4096
  // is: 16 splits of 4 tiles x 8 KV heads, the shallow pipeline; its B=64 graph fills the
  // device unsplit. By default (GRAPHATTN_DECODE_CLUSTERS unset: auto_clusters) a split launch
  // of one tile a warp is a cluster launch (the pushed combine: docs/decode-small-batch-h100-
  // 2026-11-27-s12.txt), longer splits are not (1 x 2048: 2 tiles a warp; 1 x 4096: 4, 3 stages
  // with the early prologue), nor a device without clusters.
  const detail::DecodeGrid step1 = grid(1, 8, 4, 1024, 0);
  CHECK(step1.max_splits == 16);
  CHECK(step1.stages == ga_decode_shallow_stages(128, 2));
  CHECK_FALSE(detail::decode_grid(1, 8, 4, 1024, 0, 128, KvDType::kAuto, off).cluster);
  detail::DecodeDevice autod = off;
  autod.auto_clusters = true;
  const auto auto_grid = [&](int b, int len, const detail::DecodeDevice& d) {
    return detail::decode_grid(b, 8, 4, len, 0, 128, KvDType::kAuto, d);
  };
  // The auto policy's clusters take at most 8 splits (kAutoClusterSplits; 1 x 1024: 8 splits of
  // 2 tiles a warp, 3 stages with the early prologue where two such blocks and their 8-block
  // clusters fit); GRAPHATTN_DECODE_CLUSTER_SPLITS=16 (cluster_splits) keeps 16 splits of one
  // tile a warp at the shallow depth.
  CHECK(auto_grid(1, 1024, autod).cluster);
  CHECK(auto_grid(1, 1024, autod).max_splits == detail::kAutoClusterSplits);
  CHECK(auto_grid(1, 1024, autod).stages == ga_decode_shallow_stages(128, 2));
  CHECK(auto_grid(1, 1024, autod).early_stages == 3);
  detail::DecodeDevice auto16 = autod;
  auto16.cluster_splits = 16;
  CHECK(auto_grid(1, 1024, auto16).cluster);
  CHECK(auto_grid(1, 1024, auto16).max_splits == 16);
  CHECK(auto_grid(1, 1024, auto16).early_stages == 0);
  detail::DecodeDevice auto_no3 = autod;
  auto_no3.cluster_at[3] = 4;  // no 8-block cluster of 3-stage blocks: the shallow depth
  CHECK(auto_grid(1, 1024, auto_no3).max_splits == detail::kAutoClusterSplits);
  CHECK(auto_grid(1, 1024, auto_no3).early_stages == 0);
  // [policy: early trigger] only where every tile of a warp goes out before the wait: 2 tiles a
  // warp at 3 stages, 1 at 2; not 2 at 2 stages, nor the counter's launches.
  CHECK(auto_grid(1, 1024, autod).early_trigger);
  CHECK(auto_grid(1, 1024, auto16).early_trigger);
  CHECK_FALSE(auto_grid(1, 1024, auto_no3).early_trigger);
  CHECK(auto_grid(1, 512, autod).early_trigger);
  CHECK_FALSE(auto_grid(1, 4096, autod).early_trigger);
  CHECK_FALSE(auto_grid(2, 1024, autod).early_trigger);
  // GRAPHATTN_DECODE_CLUSTERS=1 (use_clusters): 16 splits of 1 tile a warp, and of 4.
  CHECK(step1.early_trigger);
  CHECK(grid(1, 8, 4, 4096, 0).cluster);
  CHECK_FALSE(grid(1, 8, 4, 4096, 0).early_trigger);
  CHECK(auto_grid(1, 512, autod).cluster);  // 8 splits of one tile a warp
  CHECK(auto_grid(1, 512, autod).max_splits == 8);
  CHECK(auto_grid(1, 512, autod).early_stages == 0);
  CHECK_FALSE(auto_grid(1, 2048, autod).cluster);
  CHECK_FALSE(auto_grid(1, 4096, autod).cluster);
  CHECK(auto_grid(1, 4096, autod).early_stages == 3);
  CHECK_FALSE(auto_grid(2, 1024, autod).cluster);  // 8 splits of 2 tiles a warp
  CHECK_FALSE(auto_grid(64, 1024, autod).cluster);
  detail::DecodeDevice auto_none = autod;
  auto_none.max_cluster = 0;
  CHECK_FALSE(auto_grid(1, 1024, auto_none).cluster);
  CHECK(grid(64, 8, 4, 1024, 0).max_splits == 1);
  // With the early prologue a split launch whose warps have 3 to 7 tiles takes 3 stages (two
  // blocks still share a multiprocessor), 8 to 16 the deepest: 1 x 4096 (4 tiles a warp at 16
  // splits), 1 x 8192 and 1 x 16384; 1 x 1024 and 1 x 2048 (1 and 2 tiles), a cluster launch and
  // a device that holds one 3-stage block a multiprocessor keep stages.
  const auto early = [&](int len, const detail::DecodeDevice& d) {
    return detail::decode_grid(1, 8, 4, len, 0, 128, KvDType::kAuto, d).early_stages;
  };
  CHECK(early(4096, off) == 3);
  CHECK(early(8192, off) == ga_decode_max_stages(128, 2));
  CHECK(early(16384, off) == ga_decode_max_stages(128, 2));
  CHECK(detail::decode_grid(1, 8, 4, 4096, 0, 128, KvDType::kAuto, off).stages ==
        ga_decode_shallow_stages(128, 2));
  CHECK(early(1024, off) == 0);
  CHECK(early(2048, off) == 0);
  CHECK(early(4096, device(sms, 3, 2, 1, 16)) == 0);  // clusters
  detail::DecodeDevice one = off;
  one.blocks_per_sm[3] = 1;
  CHECK(early(4096, one) == 0);
  CHECK(early(32768, off) == 0);  // long splits run the deepest pipeline anyway
  // ... except alone where a warp has 64 tiles or more ([policy: alone depth, long splits]):
  // 8 x 32768 (2 splits x 64 blocks, 256 tiles a warp), 4 x 32768 (4 x 32, 128) and 2 x 32768 (8
  // x 16, 64) run the shallow pipeline alone and the deepest under the early prologue and beside
  // a prefill; 1 x 32768 (32 tiles a warp) and a device that holds no shallow block keep theirs.
  for (int b : {8, 4, 2}) {
    const auto g = detail::decode_grid(b, 8, 4, 32768, 0, 128, KvDType::kAuto, off);
    CHECK(g.max_splits == 16 / b);
    CHECK_FALSE(g.cluster);
    CHECK(g.alone_depth);
    CHECK(g.stages == ga_decode_shallow_stages(128, 2));
    CHECK(g.early_stages == ga_decode_max_stages(128, 2));
    CHECK(detail::decode_grid_beside_prefill(g).stages == ga_decode_max_stages(128, 2));
    CHECK(detail::decode_grid_beside_prefill(g).early_stages == 0);
    CHECK_FALSE(detail::decode_grid_beside_prefill(g).alone_depth);
  }
  CHECK_FALSE(detail::decode_grid(1, 8, 4, 32768, 0, 128, KvDType::kAuto, off).alone_depth);
  // [policy: wide memory] A device with more memory bandwidth per multiprocessor (an H200: 36
  // GB/s a multiprocessor) keeps the deepest pipeline alone for those launches; an H100's (25)
  // takes the rule, and so does a device that reports none (0).
  detail::DecodeDevice wide = off, narrow = off;
  wide.mem_gbps_per_sm = detail::kWideMemoryGbpsPerSm + 6;
  narrow.mem_gbps_per_sm = detail::kWideMemoryGbpsPerSm - 5;
  for (int b : {8, 4, 2}) {
    const auto g = detail::decode_grid(b, 8, 4, 32768, 0, 128, KvDType::kAuto, wide);
    CHECK(g.max_splits == 16 / b);
    CHECK_FALSE(g.alone_depth);
    // (2 splits: 3 stages, [policy: wide memory, 2 long splits] below)
    CHECK(g.stages == (b == 8 ? 3 : ga_decode_max_stages(128, 2)));
    CHECK(g.early_stages == 0);
    CHECK(detail::decode_grid(b, 8, 4, 32768, 0, 128, KvDType::kAuto, narrow).stages ==
          ga_decode_shallow_stages(128, 2));
  }
  CHECK(detail::decode_grid(16, 8, 4, 8192, 0, 128, KvDType::kAuto, wide).stages ==
        ga_decode_max_stages(128, 2));
  // [policy: wide memory, 2 long splits] There, 2 splits of 64 tiles a warp or more (8 x 32768,
  // 8 x 8192) run 3 stages, as a cluster of 2 where the kernel pushes its splits (auto_clusters)
  // and the device holds 2 such blocks at 3 stages; 16-bit KV at head 128 only. The H100-like
  // device keeps every field of its grid, with or without auto_clusters.
  for (const bool autoc : {false, true})
    for (int len : {32768, 8192}) {
      detail::DecodeDevice w = wide, n = narrow, z = off;
      w.auto_clusters = n.auto_clusters = z.auto_clusters = autoc;
      const auto g = detail::decode_grid(8, 8, 4, len, 0, 128, KvDType::kAuto, w);
      CHECK(g.max_splits == 2);
      CHECK(g.stages == 3);
      CHECK(g.cluster == autoc);
      CHECK(g.early_stages == 0);
      CHECK_FALSE(g.alone_depth);
      CHECK_FALSE(g.early_trigger);
      CHECK(g.ring_stages == 0);
      CHECK(detail::decode_grid_beside_prefill(g).stages == 3);
      CHECK(detail::decode_grid_beside_prefill(g).cluster == autoc);
      for (const auto& d : {n, z}) {
        const auto h = detail::decode_grid(8, 8, 4, len, 0, 128, KvDType::kAuto, d);
        CHECK(h.max_splits == 2);
        CHECK(h.stages == ga_decode_shallow_stages(128, 2));
        CHECK(h.early_stages == ga_decode_max_stages(128, 2));
        CHECK(h.alone_depth);
        CHECK_FALSE(h.cluster);
        CHECK_FALSE(h.early_trigger);
        CHECK(h.ring_stages == 0);
      }
      // No cluster of 2 at 3 stages: 3 stages unclustered.
      detail::DecodeDevice nc = w;
      nc.cluster_at[3] = 1;
      CHECK(detail::decode_grid(8, 8, 4, len, 0, 128, KvDType::kAuto, nc).stages == 3);
      CHECK_FALSE(detail::decode_grid(8, 8, 4, len, 0, 128, KvDType::kAuto, nc).cluster);
      // e4m3 KV and head 64 keep the deepest pipeline, unclustered.
      const auto f8 = detail::decode_grid(8, 8, 4, len, 0, 128, KvDType::kFp8E4M3, w);
      CHECK(f8.stages == ga_decode_max_stages(128, 1));
      CHECK_FALSE(f8.cluster);
      const auto h64 = detail::decode_grid(8, 8, 4, len, 0, 64, KvDType::kAuto, w);
      CHECK(h64.stages == ga_decode_max_stages(64, 2));
      CHECK_FALSE(h64.cluster);
    }
  // (the unsplit 2048-4096 rule, 16 x 4096, is not keyed: flat at 2-4 stages on the H200)
  CHECK(detail::decode_grid(16, 8, 4, 4096, 0, 128, KvDType::kAuto, wide).stages ==
        ga_decode_shallow_stages(128, 2));
  detail::DecodeDevice no_shallow = off;
  no_shallow.blocks_per_sm[2] = 0;
  CHECK(detail::decode_grid(8, 8, 4, 32768, 0, 128, KvDType::kAuto, no_shallow).stages ==
        ga_decode_max_stages(128, 2));
  // Unsplit past 4096 tokens, one block a multiprocessor: 16 x 8192 (128 blocks, 128 tiles a
  // warp) alone at the shallow depth; 32 x 8192 (256 blocks, two a multiprocessor) keeps its.
  CHECK(grid(16, 8, 4, 8192, 0).max_splits == 1);
  CHECK(grid(16, 8, 4, 8192, 0).stages == ga_decode_shallow_stages(128, 2));
  CHECK(grid(16, 8, 4, 8192, 0).early_stages == ga_decode_max_stages(128, 2));
  CHECK_FALSE(grid(32, 8, 4, 8192, 0).alone_depth);
  CHECK(grid(64, 8, 4, 8192, 0).early_stages == 0);
  // A batch that fills the device by itself, one split (direct output). Three waves or more at
  // the shallow depth take it; fewer take the depth that fills the multiprocessors best, ties
  // to more resident blocks: 512 blocks are 97% of 2 waves of 2 (3 stages) or 4 waves of 1
  // (4 stages), 65% of 2 waves of 3 (2 stages).
  for (auto bl : {std::pair{256, 4096}, std::pair{256, 1024}}) {
    const auto g = grid(bl.first, 8, 4, bl.second, 0);
    CHECK(g.max_splits == 1);
    CHECK(g.stages == 2);
  }
  for (int len : {1024, 2048, 8192}) {
    const auto g = grid(64, 8, 4, len, 0);
    CHECK(g.max_splits == 1);
    CHECK(g.stages == 3);
  }
  // Blocks that fill one wave equally at several depths take the depth that leaves the fewest
  // resident slots free, as the next launch's blocks start in free slots: 64 x 1024 over 4 KV
  // heads (a two-GPU llama-3-8b's per-GPU share) is 256 blocks, 97% of 264 slots at 3 stages,
  // 65% of 396 at 2 (H200, 32 launches back to back: 32.3 against 42.4 us a launch); so do
  // longer blocks, fewer than two per multiprocessor: 32 x 4096 over 8 KV heads (H100: 176.7
  // against 207.3 us a launch). 512 longer blocks keep the tie to more resident blocks (head 64
  // below). For blocks of 2048 to 4096 tokens that depth is the early prologue's (early_stages:
  // the engine's layers); a launch without it runs alone and takes the tie to more resident
  // blocks (H100 alone: 16 x 4096 2 stages 103.6-103.8 us against 104.1-104.3 at 4, 32 x 4096
  // 191.1-191.7 against 191.5-191.9 at 3; 64 x 16384 over 4 KV heads was 0.6 us slower at 2, so
  // other lengths keep the free-slot depth for every launch). A batch with prefills keeps the
  // free-slot depth (decode_grid_beside_prefill).
  for (int len : {1024, 2048, 4096, 16384}) {
    const auto tp = grid(64, 4, 4, len, 0);
    const bool alone = len >= 2048 && len <= 4096;
    CHECK(tp.early_stages == (alone ? 3 : 0));
    CHECK(tp.stages == (alone ? 2 : 3));
    CHECK(tp.max_splits == 1);
    CHECK(detail::decode_grid_beside_prefill(tp).stages == 3);
    CHECK(detail::decode_grid_beside_prefill(tp).early_stages == 0);
  }
  CHECK(grid(16, 8, 4, 1024, 0).stages == ga_decode_max_stages(128, 2));  // unsplit, short
  CHECK(grid(16, 8, 4, 1024, 0).early_stages == 0);
  CHECK(grid(16, 8, 4, 16384, 0).early_stages == 4);  // unsplit, long: the alone depth below
  CHECK(grid(16, 8, 4, 16384, 0).stages == 2);
  CHECK(grid(32, 8, 4, 4096, 0).early_stages == 3);
  CHECK(grid(32, 8, 4, 4096, 0).stages == 2);
  CHECK(grid(32, 8, 4, 4096, 0).max_splits == 1);
  CHECK(grid(16, 8, 4, 4096, 0).early_stages == 4);
  CHECK(grid(16, 8, 4, 4096, 0).stages == 2);
  CHECK(grid(16, 8, 4, 4096, 0).max_splits == 1);
  // 64 x 2048 (512 blocks: 2 waves of 2 at 3 stages or 4 of 1 at 4) takes 3 stages either way.
  CHECK(grid(64, 8, 4, 2048, 0).early_stages == 0);
  // 64 x 4096 (the same at 3 stages) runs its ring 2 stages deep alone, in 3 stages' shared
  // memory ([policy: alone ring depth]); 64 x 2048, 64 x 1024 and 64 x 8192, a grid already at
  // the shallow depth (32 x 4096) and a batch beside a prefill keep their ring.
  CHECK(grid(64, 8, 4, 4096, 0).stages == 3);
  CHECK(grid(64, 8, 4, 4096, 0).ring_stages == 2);
  CHECK(grid(64, 8, 4, 2048, 0).ring_stages == 0);
  CHECK(grid(64, 8, 4, 1024, 0).ring_stages == 0);
  CHECK(grid(64, 8, 4, 8192, 0).ring_stages == 0);
  CHECK(grid(32, 8, 4, 4096, 0).ring_stages == 0);
  CHECK(detail::decode_grid_beside_prefill(grid(64, 8, 4, 4096, 0)).ring_stages == 0);
  CHECK(detail::decode_grid_beside_prefill(grid(64, 8, 4, 4096, 0)).stages == 3);
  // A split launch's early_stages is not a free-slot depth: beside a prefill it keeps stages.
  const detail::DecodeGrid split8k =
      detail::decode_grid(1, 8, 4, 8192, 0, 128, KvDType::kAuto, off);
  CHECK(split8k.early_stages == ga_decode_max_stages(128, 2));
  CHECK(detail::decode_grid_beside_prefill(split8k).stages == split8k.stages);
  CHECK(detail::decode_grid_beside_prefill(split8k).early_stages == split8k.early_stages);
  // Equal residency at every depth (head 256: one block per multiprocessor): the deepest.
  CHECK(
      detail::decode_grid(64, 8, 4, 8192, 0, 256, KvDType::kAuto, device(sms, 1, 1, 0, 0)).stages ==
      3);
  // Head 64: six blocks per multiprocessor at 2 stages hold all 512 at once.
  const auto h64 =
      detail::decode_grid(64, 8, 4, 8192, 0, 64, KvDType::kAuto, device(sms, 6, 4, 3, 0));
  CHECK(h64.stages == 2);
  CHECK(h64.max_splits == 1);
  // Where no depth fills the waves, the fewest splits (at most 4) that do: 512 blocks over
  // 132 x 3 slots fill 65% of two waves, 1536 fill 97% of four.
  const auto three =
      detail::decode_grid(64, 8, 4, 8192, 0, 64, KvDType::kAuto, device(sms, 3, 3, 3, 0));
  CHECK(three.max_splits == 3);
  // Blocks of short contexts are not split to fill waves (each split keeps 2048 tokens).
  CHECK(grid(17, 8, 4, 100, 0).max_splits == 1);
  CHECK(grid(64, 8, 4, 1024, 0).max_splits == 1);
  CHECK(detail::decode_grid(64, 8, 4, 4096, 0, 64, KvDType::kAuto, device(sms, 3, 3, 3, 0))
            .max_splits == 2);
  // Short contexts cap the splits at GA_DECODE_MIN_TILES_PER_SPLIT tiles each.
  CHECK(grid(1, 1, 1, 64, 0).max_splits == 1);
  CHECK(grid(1, 1, 1, 65, 0).max_splits == 2);
  // A window bounds the attended length whatever max_model_len is (plus one tile of rounding).
  CHECK(grid(1, 1, 1, 1 << 20, 64).max_splits == 2);
  // Groups above 16 heads take several blocks per KV head, so fewer splits.
  CHECK(grid(1, 1, 64, 1 << 20, 0).max_splits == sms / 4);
  CHECK(grid(0, 8, 4, 4096, 0).max_splits == 1);
  for (int b = 1; b <= 512; b += 7) {
    const auto g = grid(b, 8, 4, 131072, 0);
    CHECK(g.max_splits >= 1);
    CHECK(g.max_splits <= std::max(4, sms / (b * 8)));
    CHECK(ga_decode_smem_bytes(128, 2, g.stages) <= 227 * 1024);
  }
  // Every head size and KV type: the deepest pipeline fits in a multiprocessor's memory.
  for (int h = 32; h <= 256; h += 8)
    for (int kvb : {1, 2}) {
      INFO("head " << h << " kv bytes " << kvb);
      CHECK(ga_decode_smem_bytes(h, kvb, ga_decode_max_stages(h, kvb)) <= 227 * 1024);
      CHECK(ga_decode_shallow_stages(h, kvb) <= ga_decode_max_stages(h, kvb));
      CHECK(ga_decode_shallow_stages(h, kvb) >= 2);
      CHECK(ga_decode_max_stages(h, kvb) <= 4);
    }
}

TEST_CASE("decode KV head pairs: which specs pair, and the grid over pairs") {
  const auto spec = [](const std::string& text) { return AttentionSpec::parse(text); };
  // 128-byte head rows in NHD, one token, not block-sparse, GQA up to 8.
  CHECK(detail::decode_row_heads(spec("decode_h64_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90")) == 2);
  CHECK(detail::decode_row_heads(spec("decode_h64_b32_fp16_kvauto_g8_swa1_cap1_nhd_sm80")) == 2);
  CHECK(detail::decode_row_heads(spec("decode_h128_b16_bf16_kve4m3_g1_swa0_cap0_nhd_sm90")) == 2);
  CHECK(detail::decode_row_heads(spec("decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_qe4m3")) ==
        2);
  CHECK(detail::decode_row_heads(spec("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90")) == 1);
  CHECK(detail::decode_row_heads(spec("decode_h64_b16_bf16_kvauto_g4_swa0_cap0_hnd_sm90")) == 1);
  CHECK(detail::decode_row_heads(spec("decode_h64_b16_bf16_kvauto_g16_swa0_cap0_nhd_sm90")) == 1);
  CHECK(detail::decode_row_heads(spec("decode_h64_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90")) == 1);
  CHECK(detail::decode_row_heads(spec("decode_h64_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_mt")) == 1);
  CHECK(detail::decode_row_heads(spec("decode_h64_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_bsp")) ==
        1);
  CHECK(detail::decode_row_heads(spec("decode_h64_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90")) == 1);
  // The rows' bytes double, the stage counts stay: head 64 16-bit and fp8 head 128 pipelines are
  // those of head 128 16-bit and fp8 head 256.
  for (int st = 2; st <= 4; ++st) {
    CHECK(ga_decode_smem_bytes(64, 2, st, 2) == ga_decode_smem_bytes(128, 2, st));
    // (fp8: the combine's rows of 256 dimensions; its output rows stay 128 wide)
    CHECK(ga_decode_smem_bytes(128, 1, st, 2) ==
          std::max(st * ga_decode_stage_bytes(256, 1),
                   GA_DECODE_WARPS * GA_DECODE_HEADS_PER_BLOCK * (256 + 2) * 4 +
                       GA_DECODE_HEADS_PER_BLOCK * (128 + 1) * 4));
  }
  CHECK(ga_decode_max_stages(128, 2) == ga_decode_max_stages(64, 2));
  CHECK(ga_decode_shallow_stages(128, 2) == ga_decode_shallow_stages(64, 2));
  // The policy over pairs: 64 requests x 8 KV heads of head 64 are 256 blocks of pairs; with 3
  // pair blocks per multiprocessor at 2 stages they fit one wave unsplit.
  detail::DecodeDevice d = device(132, 3, 2, 1, 0);
  d.row_heads = 2;
  const auto g = detail::decode_grid(64, 8, 4, 8192, 0, 64, KvDType::kAuto, d);
  CHECK(g.max_splits == 1);
  // The same as the unpaired grid of half the KV heads, twice the group and head size.
  const auto wide =
      detail::decode_grid(64, 4, 8, 8192, 0, 128, KvDType::kAuto, device(132, 3, 2, 1, 0));
  CHECK(g.max_splits == wide.max_splits);
  CHECK(g.stages == wide.stages);
  // One request: splits up to the device over ceil(3 / 2) = 2 pair blocks.
  CHECK(detail::decode_grid(1, 3, 4, 32768, 0, 64, KvDType::kAuto, d).max_splits == 132 / 2);
}

TEST_CASE("decode early trigger: captured cluster launches of the pushed-combine specs") {
  int asked = 0;
  const auto capturing = [&asked] {
    ++asked;
    return true;
  };
  const auto eager = [&asked] {
    ++asked;
    return false;
  };
  // The policy (mode 0): 2 only for a captured cluster launch of a pushed-combine spec whose
  // grid allows it (DecodeGrid::early_trigger; the third argument).
  CHECK(detail::decode_early_prologue(true, true, true, 0, capturing) == 2);
  CHECK(detail::decode_early_prologue(true, true, true, 0, eager) == 1);
  CHECK(asked == 2);
  CHECK(detail::decode_early_prologue(true, true, false, 0, capturing) == 1);  // grid: no
  CHECK(detail::decode_early_prologue(true, false, true, 0, capturing) == 1);  // other spec
  CHECK(detail::decode_early_prologue(false, true, true, 0, capturing) == 0);  // no early prologue
  CHECK(asked == 2);  // the stream is asked only where it decides
  // GRAPHATTN_DECODE_EARLY_TRIGGER: 1 never, 2 captured launches cluster or not, 3 every launch.
  CHECK(detail::decode_early_prologue(true, true, true, 1, capturing) == 1);
  CHECK(detail::decode_early_prologue(true, true, false, 2, capturing) == 2);
  CHECK(detail::decode_early_prologue(true, true, false, 2, eager) == 1);
  CHECK(detail::decode_early_prologue(true, true, false, 3, eager) == 2);
  CHECK(detail::decode_early_prologue(true, false, true, 3, eager) == 1);
  CHECK(detail::decode_early_prologue(false, true, true, 3, eager) == 0);
}

TEST_CASE("decode workspace: partials only when a batch can split") {
  CHECK(detail::decode_workspace_bytes(4, 32, 128, 1) == 0);  // one split writes the output
  const size_t w = detail::decode_workspace_bytes(4, 32, 128, 10);
  CHECK(w >= 4 * 32 * 10 * (128 + 1) * sizeof(float));
  CHECK(w % 256 == 0);
}

TEST_CASE("attention config: selection and errors agree") {
  AttentionLayerConfig c = test::layer_config(32, 8, 128, 4096, 8);
  c.arch = 90;
  CHECK(attention_config_problem(c).empty());
  CHECK(select_decode_kernel(c) == DecodeKernel::kSplitKv);
  AttentionBackend attn(c);  // arch given: no device needed to list the kernels
  const auto specs = attn.required_specs();
  // and the mixed graphs' decodes (divisor 0 and GRAPHATTN_MIXED_DSP_LONG_TILES 8, the defaults)
  REQUIRE(specs.size() == 5);
  CHECK(specs[0].to_string() == "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
  CHECK(specs[1].to_string() == "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  CHECK(specs[2].to_string() == "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  CHECK(specs[3].to_string() == "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dsp");
  CHECK(specs[4].to_string() == "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dsp_long");
  CHECK(attn.config().scale == doctest::Approx(1.0 / std::sqrt(128.0)));
  CHECK_THROWS_WITH_AS(attn.workspace_bytes(), doctest::Contains("call prepare() first"), Error);

  struct Bad {
    void (*edit)(AttentionLayerConfig&);
    const char* message;
  };
  const Bad bad[] = {
      {[](AttentionLayerConfig& x) { x.num_kv_heads = 5; }, "num_heads 32 and num_kv_heads 5"},
      {[](AttentionLayerConfig& x) { x.head_size = 100; }, "head size 100 is not supported"},
      {[](AttentionLayerConfig& x) { x.block_size = 8; }, "block size 8 is not supported"},
      {[](AttentionLayerConfig& x) { x.window = -1; }, "window -1"},
      {[](AttentionLayerConfig& x) { x.soft_cap = -3; }, "soft_cap -3"},
      {[](AttentionLayerConfig& x) { x.max_model_len = 0; }, "max_model_len 0"},
      {[](AttentionLayerConfig& x) { x.max_num_seqs = 70000; }, "max_num_seqs 70000"},
      {[](AttentionLayerConfig& x) { x.arch = 75; }, "target arch sm_75"},
      {[](AttentionLayerConfig& x) {
         x.kv_dtype = KvDType::kFp8E4M3;
         x.k_scale = 0;
       },
       "k_scale 0"},
      {[](AttentionLayerConfig& x) { x.num_heads = 8 * 65; }, "group) 65 is not supported"},
  };
  for (const Bad& b : bad) {
    AttentionLayerConfig x = c;
    b.edit(x);
    INFO(b.message);
    CHECK(select_decode_kernel(x) == DecodeKernel::kNone);
    CHECK(attention_config_problem(x).find(b.message) != std::string::npos);
    CHECK_THROWS_WITH_AS(AttentionBackend{x}, doctest::Contains(b.message), Error);
  }
}

TEST_CASE("decode specs: rendering names the entry point and carries the spec's constants") {
  AttentionSpec a = AttentionSpec::parse("decode_h96_b64_fp16_kve4m3_g8_swa1_cap1_hnd_sm90");
  const KernelSource src = render_kernel(a);
  CHECK(src.entry == "graphattn_decode");
  CHECK(src.source.find("constexpr int HEAD_SIZE = 96;") != std::string::npos);
  CHECK(src.source.find("constexpr int GROUP = 8;") != std::string::npos);
}

TEST_CASE("decode counters: one per request, KV head and chunk of 16 query heads") {
  CHECK(detail::decode_counter_count(64, 8, 4) == 64 * 8);
  CHECK(detail::decode_counter_count(3, 2, 20) == 3 * 2 * 2);
  CHECK(detail::decode_counter_count(0, 8, 4) == 0);
}

TEST_CASE("multi-token decode: the _mt axis, its configuration and its grid") {
  // decode_query_len > 1 selects the multi-token decode kernel; prefill and cache write stay.
  AttentionLayerConfig c = test::layer_config(32, 8, 128, 4096, 64);
  c.arch = 90;
  c.decode_query_len = 4;
  const auto specs = AttentionBackend(c).required_specs();
  CHECK(specs[0].to_string() == "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
  CHECK(specs[1].to_string() == "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_mt");
  CHECK(specs[2].to_string() == "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  CHECK(AttentionSpec::parse(specs[1].to_string()) == specs[1]);
  CHECK_THROWS_WITH_AS(
      AttentionSpec::parse("prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_mt"),
      doctest::Contains(
          "the prefill kernel does not depend on multi-token decode (mt); use no _mt"),
      Error);
  for (int bad : {0, -1, kMaxDecodeQueryLen + 1}) {
    c.decode_query_len = bad;
    const std::string want =
        "decode_query_len " + std::to_string(bad) + " is not supported; supported: 1..16";
    CHECK_THROWS_WITH_AS(AttentionBackend{c}, doctest::Contains(want.c_str()), Error);
  }
  // Columns per KV head: group x tokens, 16 a block.
  CHECK(ga_decode_column_chunks(4, 4) == 1);
  CHECK(ga_decode_column_chunks(5, 4) == 2);
  CHECK(ga_decode_column_chunks(16, 8) == 8);
  CHECK(detail::decode_counter_count(3, 2, 4 * 8) == 3 * 2 * 2);
}
