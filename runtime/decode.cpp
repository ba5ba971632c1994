// SPDX-License-Identifier: Apache-2.0
// Host side of the split-KV decode kernels: checks the views, derives the specs, launches.
#include "runtime/decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/env_flag.hpp"
#include "core/text.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn::detail {
namespace {

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

struct WorkspaceLayout {
  size_t partial_out = 0, partial_lse = 0, total = 0;
};

WorkspaceLayout workspace_layout(int num_decodes, int num_heads, int head_size, int max_splits) {
  WorkspaceLayout w;
  // With one split every request writes its output directly: no partials.
  const size_t rows =
      max_splits > 1 ? static_cast<size_t>(num_decodes) * num_heads * max_splits : 0;
  w.partial_out = 0;
  w.partial_lse = align_up(rows * head_size * sizeof(float));
  w.total = w.partial_lse + align_up(rows * sizeof(float));
  return w;
}

void require_int32_rows(const TensorView& t, const char* name, int64_t min_rows,
                        const char* shape) {
  GA_REQUIRE(t.dtype == ScalarType::kInt32,
             std::string(name) + " must be int32, got " + to_string(t.dtype));
  GA_REQUIRE(t.shape[0] >= min_rows, std::string(name) + " " + t.describe() + " needs at least " +
                                         str(min_rows) + " rows for the requests launched " +
                                         shape);
  GA_REQUIRE(t.strides[t.ndim - 1] == 1,
             std::string(name) + " must have a contiguous last dimension, got " + t.describe());
}

int kv_bytes_of(const AttentionSpec& s) { return s.kv_dtype == KvDType::kAuto ? 2 : 1; }

// The specs whose sm_90 cluster launches push their splits into the combining block
// (ga_decode_cluster_push): the auto clusters' specs and the early trigger's.
bool pushes_cluster_splits(const AttentionSpec& s) {
  return s.arch >= 90 && ga_decode_cluster_push(s.head_size, kv_bytes_of(s) == 2,
                                                s.layout == KvLayout::kLegacy ? 2 : 0,
                                                s.multi_token, s.block_sparse);
}

// The pipeline depth a launch asks for (0: the shallow default).
int stages_of(const AttentionSpec& s, const DecodeLaunch& a) {
  return a.stages == 0 ? ga_decode_shallow_stages(s.head_size * decode_row_heads(s), kv_bytes_of(s))
                       : a.stages;
}

// The deepest pipeline a cluster launch may run: one stage past the shallow default (head 128,
// 16-bit KV: 3 stages, where two blocks with the pushed combine's receive area still share a
// multiprocessor), at most the deepest.
int cluster_stage_limit(const AttentionSpec& s) {
  const int rh = decode_row_heads(s), kvb = kv_bytes_of(s);
  return std::min(ga_decode_shallow_stages(s.head_size * rh, kvb) + 1,
                  ga_decode_max_stages(s.head_size * rh, kvb));
}

// A launch's grid y: a block per KV head (KV head pairs: per pair) and chunk of 16 query columns.
int64_t decode_grid_y(const AttentionSpec& s, int num_kv_heads, int max_query_len) {
  const int rh = decode_row_heads(s);
  return int64_t{(num_kv_heads + rh - 1) / rh} *
         ga_decode_head_chunks(s.group * max_query_len * rh);
}

// A direct launch over the legacy caches: their shape as checked into legacy_kv.
KvCacheShape check_direct_launch_legacy(const LoadedKernel& k, const DecodeLaunch& a) {
  GA_REQUIRE(k.compiled != nullptr, "launch_decode: kernel is not loaded");
  require_rank(a.query, 3, "query", "[num_tokens, num_heads, head_size]");
  GA_REQUIRE(a.legacy_kv.dtype == legacy_decode_dtype_of(a.query, a.output),
             "launch_decode: the legacy caches were checked for " +
                 std::string(to_string(a.legacy_kv.dtype)) + ", the query is " +
                 to_string(a.query.dtype));
  const int x = key_x_of(a.legacy_kv);
  GA_REQUIRE(k.compiled->spec.key_x == x,
             "launch_decode: kernel " + k.compiled->spec.to_string() +
                 " reads a legacy key cache with x = " +
                 (k.compiled->spec.key_x != 0 ? std::to_string(k.compiled->spec.key_x)
                                              : std::string("16 bytes")) +
                 ", the key cache has x = " + std::to_string(a.legacy_kv.x));
  return a.legacy_kv;
}

}  // namespace

AttentionSpec decode_spec(const DecodeLaunch& a, int arch) {
  KernelFeatures f =
      launch_features(arch, a.bounds != nullptr, a.alibi_slopes != nullptr, a.sinks != nullptr);
  f.multi_token = a.multi_token;
  f.softmax_lse = a.softmax_lse.ndim != 0;
  f.device_splits = a.device_split && a.device_sms > 0;
  return attention_spec_for(KernelKind::kDecode, a.query, a.output, a.kv_cache, a.window,
                            a.soft_cap, f);
}

size_t decode_workspace_bytes(int rows, int num_heads, int head_size, int max_splits) {
  return workspace_layout(rows, num_heads, head_size, max_splits).total;
}

int device_split_blocks(int slots, int64_t grid_y, int max_splits, int sms) {
  int64_t most = slots;
  for (int d = 1; d <= slots; ++d)
    most = std::max<int64_t>(
        most, int64_t{d} * ga_device_split_splits(d, static_cast<int>(grid_y), sms, max_splits) +
                  (slots - d));
  return static_cast<int>(std::min<int64_t>(most, int64_t{1} << 30));
}

int device_split_requests(int slots, int64_t grid_y, int max_splits, int sms) {
  int most = 0;  // the count of splits falls as d grows
  for (int d = 1; d <= slots; ++d)
    if (ga_device_split_splits(d, static_cast<int>(grid_y), sms, max_splits) > 1) most = d;
  return most;
}

int decode_partial_rows(const AttentionSpec& spec, const DecodeLaunch& a, int num_kv_heads) {
  if (!a.device_split || a.device_sms <= 0) return a.num_decodes * a.max_query_len;
  return device_split_requests(a.num_decodes, decode_grid_y(spec, num_kv_heads, a.max_query_len),
                               a.max_splits, a.device_sms) *
         a.max_query_len;
}

int decode_row_heads(const AttentionSpec& s) {
  if (s.kind != KernelKind::kDecode || s.dtype == DType::kFloat32) return 1;
  return ga_decode_row_heads(s.head_size, kv_bytes_of(s), s.group, static_cast<int>(s.layout),
                             s.multi_token, s.block_sparse);
}

size_t decode_counter_count(int num_decodes, int num_kv_heads, int columns) {
  return static_cast<size_t>(std::max(num_decodes, 0)) * std::max(num_kv_heads, 0) *
         ga_decode_head_chunks(columns);
}

LayerWorkspace layer_workspace(const AttentionLayerConfig& c) {
  LayerWorkspace w;
  w.counters = decode_counter_count(c.max_num_seqs, c.num_kv_heads,
                                    c.num_heads / c.num_kv_heads * c.decode_query_len) *
               sizeof(unsigned);
  w.partials = align_up(w.counters);
  return w;
}

DecodeDevice prepare_decode_kernel(const LoadedKernel& decode) {
  GA_REQUIRE(decode.compiled != nullptr, "prepare_decode_kernel: kernel is not loaded");
  const AttentionSpec& s = decode.compiled->spec;
  const int kvb = kv_bytes_of(s);
  const int rh = decode_row_heads(s);
  const int max_stages = ga_decode_max_stages(s.head_size * rh, kvb);
  const int deep = ga_decode_smem_bytes(s.head_size, kvb, max_stages, rh);
  ensure_shared_limit(
      decode, std::max(deep, ga_decode_smem_bytes(s.head_size, kvb, cluster_stage_limit(s), rh) +
                                 ga_decode_cluster_recv_bytes(s.head_size)));
  const auto& d = driver();
  CUdevice dev;
  GA_CU_CHECK(d.cuCtxGetDevice(&dev));
  DecodeDevice out;
  out.row_heads = rh;
  GA_CU_CHECK(d.cuDeviceGetAttribute(&out.num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  int mem_khz = 0, bus_bits = 0;  // (double data rate: two transfers a clock)
  if (d.cuDeviceGetAttribute(&mem_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev) ==
          CUDA_SUCCESS &&
      d.cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev) ==
          CUDA_SUCCESS &&
      out.num_sms > 0)
    out.mem_gbps_per_sm =
        static_cast<int>(int64_t{mem_khz} * 2 * (bus_bits / 8) / 1000000 / out.num_sms);
  for (int st = 2; st <= max_stages; ++st)
    GA_CU_CHECK(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        &out.blocks_per_sm[st], decode.function, GA_DECODE_THREADS,
        ga_decode_smem_bytes(s.head_size, kvb, st, rh)));
  GA_REQUIRE(out.blocks_per_sm[max_stages] > 0, "decode kernel " + s.to_string() +
                                                    " cannot run on this device (" + str(deep) +
                                                    " bytes of shared memory per block)");
  // The split policy's clusters (where the device co-schedules them, below):
  // GRAPHATTN_DECODE_CLUSTERS=1 for every split launch of short splits, 0 for none; unset, for
  // the split launches that give each warp one tile (auto_clusters), on the specs whose kernel
  // pushes its splits (ga_decode_cluster_push: 16-bit KV at head 128, flash layouts, single
  // token, not block-sparse; sm_90+). With the pushed combine (templates/decode.cu) the 32-layer
  // B=1 step at context 1024 (16 splits of one tile a warp) took 139.4-139.6 us against 157.8-158.6
  // with the global counter on an H100; 1 x 4096 (4 tiles a warp, which the counter path runs 3
  // stages deep in a chain) 16.0 against 15.6-15.8 us alone and 8.9 against 8.5 a launch in a chain
  // of 32, so longer splits keep the counter (docs/decode-small-batch-h100-2026-11-27-s12.txt).
  // Such a launch takes at most kAutoClusterSplits splits (decode_grid, [policy: 8-block
  // clusters]; session 13: step 134.3-134.6 us).
  // (The pulled cluster combine before it: step 9% faster on an H200, 4.5% slower on an H100,
  // 2026-11-22.)
  const char* clusters_env = std::getenv("GRAPHATTN_DECODE_CLUSTERS");
  out.use_clusters = detail::env_flag("GRAPHATTN_DECODE_CLUSTERS");
  out.auto_clusters = (clusters_env == nullptr || *clusters_env == 0) && pushes_cluster_splits(s);
  if (s.arch >= 90) {
    // Clusters of up to 16 split blocks (8 is the portable limit); the device says how large a
    // cluster of shallow blocks it can actually co-schedule. A driver that cannot answer gets
    // no clusters.
    // The same at each deeper pipeline a cluster launch may run (cluster_stage_limit).
    if (d.cuFuncSetAttribute(decode.function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                             1) == CUDA_SUCCESS) {
      const int shallow_stages = ga_decode_shallow_stages(s.head_size * rh, kvb);
      for (int st = shallow_stages; st <= cluster_stage_limit(s); ++st) {
        CUlaunchConfig cfg{};
        cfg.gridDimX = 16;
        cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = GA_DECODE_THREADS;
        cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.sharedMemBytes = static_cast<unsigned>(ga_decode_smem_bytes(s.head_size, kvb, st, rh) +
                                                   ga_decode_cluster_recv_bytes(s.head_size));
        int size = 0;
        if (d.cuOccupancyMaxPotentialClusterSize(&size, decode.function, &cfg) == CUDA_SUCCESS)
          out.cluster_at[st] = std::min(size, 16);
      }
      out.max_cluster = out.cluster_at[shallow_stages];
    }
  }
  // Measurement switch: GRAPHATTN_DECODE_CLUSTER_SPLITS=N (2..16) makes a split launch with
  // clusters take at most N splits, as one cluster of N blocks (docs/decode-small-batch-h100-
  // 2026-11-27-s12.txt: 8, the portable cluster size, against the 16 the device allows); unset,
  // GRAPHATTN_DECODE_CLUSTERS=1 launches take as many as fit and the auto policy's at most
  // kAutoClusterSplits (=16: the auto policy of main 65693c3, docs/decode-small-batch-h100-
  // 2026-11-27-s13.txt).
  out.cluster_splits = detail::decode_cluster_splits_from_env();
  out.dsp_sm_blocks = detail::mixed_dsp_sm_blocks_from_env();
  // GRAPHATTN_MIXED_DSP_LONG_TILES (the backend zeroes it where it has no _dsp_long kernel)
  out.dsp_long_tiles = detail::mixed_dsp_long_tiles_from_env();
  return out;
}

DecodeGrid decode_grid(int num_decodes, int num_kv_heads, int columns, int max_model_len,
                       int window, int head_size, KvDType kv_dtype, const DecodeDevice& dev) {
  const int kvb = kv_dtype == KvDType::kAuto ? 2 : 1;
  // KV head pairs (dev.row_heads 2): a block covers 2 KV heads, their columns and 2-head rows.
  const int rh = std::max(1, dev.row_heads);
  num_kv_heads = (num_kv_heads + rh - 1) / rh;
  columns *= rh;
  head_size *= rh;
  DecodeGrid g;
  g.stages = ga_decode_max_stages(head_size, kvb);
  if (num_decodes <= 0 || dev.num_sms <= 0) return g;
  const int shallow = ga_decode_shallow_stages(head_size, kvb);
  const int64_t blocks_per_split =
      int64_t{num_decodes} * num_kv_heads * ga_decode_head_chunks(columns);
  // Attended tokens of the longest request, plus the window start's rounding down to a tile.
  const int64_t len = window > 0
                          ? std::min<int64_t>(max_model_len, int64_t{window} + GA_DECODE_TILE - 1)
                          : max_model_len;
  const int64_t tiles = (len + GA_DECODE_TILE - 1) / GA_DECODE_TILE;
  const int64_t cap = std::max<int64_t>(
      1, (tiles + GA_DECODE_MIN_TILES_PER_SPLIT - 1) / GA_DECODE_MIN_TILES_PER_SPLIT);
  if (blocks_per_split >= dev.num_sms) {
    // The batch fills the device by itself. The pipeline depth sets how many blocks share a
    // multiprocessor. With three waves or more at the shallow depth the most resident blocks
    // hide latency best (H200, head 128: 256 x 1024 and 256 x 4096 fastest at 2 stages);
    // otherwise the depth whose blocks fill the multiprocessors best over the waves (64 x 1024,
    // 2048 and 8192 fastest at 3 stages, 4% ahead at 64 x 2048; head 64 and fp8 at 2, 4-10%
    // ahead of 4). Ties go, for short blocks (2048 tokens or fewer) or fewer than two blocks per
    // multiprocessor, to the depth whose resident slots the blocks fill best: slots a launch
    // leaves free take the next launch's blocks early (programmatic dependent launch; inferred,
    // not profiled) and the layers share the SMs unevenly. 32 back-to-back launches of 256
    // blocks: H200, 64 x 1024 with 16/4 heads (the per-GPU share of a two-GPU llama-3-8b step),
    // 3 stages (256 of 264 slots) 32.3 us a launch, 2 stages (256 of 396) 42.4 us, though alone
    // 2 stages was 0.8% faster (docs/decode-splits-h200-2026-11-26.txt); H100, 32 x 4096 with
    // 32/8 heads, 176.7 against 207.3 us, alone 192.2 against 191.7 (docs/decode-stage-ties-
    // h100-2026-11-26.txt). Longer blocks of larger batches (64 x 8192 head 64: 512 blocks) were
    // measured alone only, within 0.2% at 2 and 3 stages, and keep the rule below. Other ties go
    // to more resident blocks, then to more stages.
    const int64_t sms = dev.num_sms;
    auto fill = [&](int64_t blocks, int per_sm) {
      const int64_t slots = sms * per_sm;
      const int64_t unit = blocks <= slots ? sms : slots;  // one wave: the busiest SM decides
      return static_cast<double>(blocks) / static_cast<double>((blocks + unit - 1) / unit * unit);
    };
    auto slot_fill = [&](int64_t blocks, int per_sm) {  // over whole waves of every slot
      const int64_t slots = sms * per_sm;
      return static_cast<double>(blocks) /
             static_cast<double>((blocks + slots - 1) / slots * slots);
    };
    const int max_stages = g.stages;
    const bool many_waves = blocks_per_split >= 3 * sms * std::max(1, dev.blocks_per_sm[shallow]);
    const auto depth = [&](bool by_free_slots) {
      int chosen = 0;
      double best = 0, best_slots = 0;
      for (int st = shallow; st <= max_stages; ++st) {
        const int per_sm = dev.blocks_per_sm[st];
        if (per_sm <= 0) continue;
        const double f = many_waves ? 1.0 : fill(blocks_per_split, per_sm);
        const double sf = slot_fill(blocks_per_split, per_sm);
        const bool tie = chosen != 0 && f > best - 0.02 && f < best + 0.02;
        const bool fuller = by_free_slots && sf >= best_slots + 0.02;
        const bool emptier = by_free_slots && sf <= best_slots - 0.02;
        if (chosen == 0 || f >= best + 0.02 ||
            (tie && (fuller || (!emptier && per_sm >= dev.blocks_per_sm[chosen])))) {
          chosen = st;
          best = f;
          best_slots = sf;
        }
      }
      return chosen;
    };
    const bool by_free_slots = !many_waves && (len <= 2048 || blocks_per_split < 2 * sms);
    const bool alone_range = len >= 2048 && len <= 4096;
    const int chosen = depth(by_free_slots);
    if (chosen != 0) g.stages = chosen;
    if (many_waves) return g;
    // Splits even out what the depth could not, for long blocks only: the fewest (up to 4, each
    // of 2048 tokens or more) that fill at least 90%, else the fullest (64 x 1024 with its
    // short blocks measured 5% slower split in three).
    const int64_t longest = std::max<int64_t>(1, tiles / (2048 / GA_DECODE_TILE));
    const auto splits = [&](int stages) {
      const int per_sm = std::max(1, dev.blocks_per_sm[stages]);
      int most = 1;
      double best_fill = 0;
      for (int64_t s = 1; s <= std::min<int64_t>({4, cap, longest}); ++s) {
        const double f = fill(s * blocks_per_split, per_sm);
        if (f > best_fill + 1e-9) {
          best_fill = f;
          most = static_cast<int>(s);
        }
        if (f >= 0.9) break;
      }
      return most;
    };
    g.max_splits = splits(g.stages);
    // The free-slot tie-break serves launches that follow each other closely: the engine's
    // layers, whose next launch starts its early prologue in the slots this one leaves free.
    // A launch without the early prologue runs alone, at the depth the tie-break without free
    // slots takes (more resident blocks), where both take the same splits; the early prologue
    // keeps the free-slot depth (early_stages). Blocks of 2048 to 4096 tokens only, as measured
    // (H100, 256 blocks alone, 3 runs each: 32 x 4096 191.1-191.7 us at 2 stages against
    // 191.5-191.9 at 3, 64 x 2048 over 4 KV heads 103.8-104.0 against 104.2-104.3; 64 x 16384
    // over 4 KV heads 714.5-714.8 against 713.8-714.2, so longer blocks keep 3 stages;
    // docs/decode-vs-cudnn-h100-2026-11-27-s13.txt).
    if (by_free_slots && chosen != 0 && alone_range) {
      const int alone = depth(false);
      if (alone != 0 && alone != chosen && splits(alone) == g.max_splits) {
        g.stages = alone;
        g.early_stages = chosen;
        g.alone_depth = true;
      }
    }
    // [policy: alone ring depth] Blocks of 2049 to 4096 tokens that stay deeper than the shallow
    // pipeline (64 x 4096: 512 blocks, two a multiprocessor at 3 stages) run the ring shallow
    // alone, at the same resident blocks (one tile in flight a warp while it computes one,
    // instead of two). H100, session 15, four alternated pairs each, graph us: 64 x 4096
    // 369.1-369.7 -> 368.4-369.1 (-0.6, every pair); 64 x 2048 193.1 / 192.9-193.1 -> 192.6-193.4
    // (-0.1, two ways), so blocks of 2048 tokens keep their ring; 64 x 8192 (s13: +0.4 with the
    // switch) keeps it too (docs/decode-vs-cudnn-h100-2026-11-28-s15.txt).
    if (alone_range && len > 2048 && g.stages > shallow && g.max_splits == 1)
      g.ring_stages = shallow;
    return g;
  }
  g.max_splits =
      static_cast<int>(std::min(cap, std::max<int64_t>(1, dev.num_sms / blocks_per_split)));
  // A split launch has about one block per multiprocessor. With short splits (up to 16 tiles a
  // warp) the shallow pipeline leaves room for the next kernel's blocks to start (programmatic
  // dependent launch) while this one runs, and the splits combine through distributed shared
  // memory when one cluster can hold them all; long splits keep the deep pipeline (1 x 32768
  // on an H200: 48 us deep, 50 us shallow) and the counters.
  if (dev.use_clusters && dev.cluster_splits >= 2 && dev.cluster_splits <= dev.max_cluster)
    g.max_splits = std::min(g.max_splits, dev.cluster_splits);
  // Unsplit (fewer blocks than multiprocessors, one each at any depth), blocks of 2048 to 4096
  // tokens: alone, the shallow pipeline (H100, 16 x 4096: 103.6-103.8 us at 2 stages, 103.9-104.2
  // at 3, 104.1-104.3 at 4, sessions 4, 11 and 13); with the early prologue the deepest (32
  // launches back to back: 89.5-89.7 us a launch at 4 stages, 91.1-91.3 at 2).
  if (g.max_splits == 1 && len >= 2048 && len <= 4096 && shallow < g.stages &&
      dev.blocks_per_sm[shallow] >= 1) {
    g.early_stages = g.stages;
    g.stages = shallow;
    g.alone_depth = true;
  }
  if (g.max_splits > 1 && tiles <= int64_t{g.max_splits} * 16 * GA_DECODE_WARPS) {
    g.stages = shallow;
    const int64_t per_warp = (tiles + int64_t{g.max_splits} * GA_DECODE_WARPS - 1) /
                             (int64_t{g.max_splits} * GA_DECODE_WARPS);
    g.cluster = (dev.use_clusters || (dev.auto_clusters && per_warp <= 1)) &&
                g.max_splits <= dev.max_cluster;
    // [policy: 8-block clusters] The auto policy's clusters take at most kAutoClusterSplits
    // splits (GRAPHATTN_DECODE_CLUSTER_SPLITS=N: N): 16 split blocks of 8 KV heads are 8
    // clusters of 16, which the H100 placed on 112 SMs, two blocks on 16 of them, the slowest
    // blocks of every launch (docs/decode-small-batch-h100-2026-11-27-s12.txt); 8 splits run 64
    // blocks on 64 SMs with twice the tiles a warp. With the early prologue those warps take 3
    // stages where the device co-schedules such clusters, so that both of a warp's tiles are
    // issued before the wait. H100, 32-layer B=1 step (context 1024): 134.3-134.6 us graph,
    // 142.5-143.3 eager, against 141.4-142.4 / 148.9-150.2 at 16 splits (docs/decode-small-
    // batch-h100-2026-11-27-s13.txt; at 8 splits and 2 stages b112 measured 137.9 / 159.1).
    // [policy: early trigger] A cluster launch whose warps issue every tile before the wait
    // (tiles a warp <= the early prologue's depth - 1) lets the next kernel be scheduled at its
    // entry when captured. H100, chains of 32 x 1 x 1024 in one graph, us a launch, entry trigger
    // against after the wait: 8 splits (2 tiles a warp) at 3 stages 4.0 / 4.2, 16 splits (1) 4.1
    // / 4.6 at 3 and 4.3 / 4.4 at 2; but 8 splits at 2 stages (one tile left after the wait)
    // 4.8 / 4.3 and 1 x 4096 at 16 splits (4 tiles a warp) 9.0 / 8.2 at 3 stages, 10.2 / 8.7 at 2
    // (docs/decode-small-batch-h100-2026-11-27-s14.txt).
    const auto tiles_a_warp = [&] {
      return (tiles + int64_t{g.max_splits} * GA_DECODE_WARPS - 1) /
             (int64_t{g.max_splits} * GA_DECODE_WARPS);
    };
    if (g.cluster && !dev.use_clusters) {
      const int cap = dev.cluster_splits != 0 ? dev.cluster_splits : kAutoClusterSplits;
      if (g.max_splits > cap) {
        g.max_splits = cap;
        if (tiles_a_warp() >= 2 && shallow < 3 && ga_decode_max_stages(head_size, kvb) >= 3 &&
            dev.blocks_per_sm[3] >= 2 && dev.cluster_at[3] >= cap)
          g.early_stages = 3;
      }
    }
    g.early_trigger =
        g.cluster && tiles_a_warp() <= (g.early_stages != 0 ? g.early_stages : g.stages) - 1;
    // With the early prologue (the engine's layers: fused write, programmatic dependent launch)
    // a warp issues its first stages - 1 tiles before waiting for the previous kernel, under that
    // kernel's tail, so longer splits gain from a deeper pipeline there. H100, 32 launches back
    // to back at 16 splits, us a launch at 2 / 3 / 4 stages (docs/decode-small-batch-h100-2026-11-
    // 27-s9.txt): 1 x 2048 (2 tiles a warp) 6.4 / 6.5 / 6.4; 1 x 4096 (4) 9.0 / 8.6 / 9.0;
    // 1 x 8192 (8) 15.9 / 15.0 / 14.4; 1 x 16384 (16) 26.9 / 27.2 / 25.2. So 3 to 7 tiles a warp
    // take 3 stages (where two such blocks share a multiprocessor), 8 or more the deepest. A plain
    // launch keeps the shallow depth: alone, 3 and 4 stages were even or up to 0.4 us slower.
    const int deepest = ga_decode_max_stages(head_size, kvb);
    if (!g.cluster && per_warp >= 8 && deepest > shallow && dev.blocks_per_sm[deepest] >= 1)
      g.early_stages = deepest;
    else if (!g.cluster && per_warp >= 3 && per_warp < 8 && shallow < 3 && deepest >= 3 &&
             dev.blocks_per_sm[3] >= 2)
      g.early_stages = 3;
  }
  // [policy: alone depth, long splits] A launch of at most one block a multiprocessor whose
  // warps have 64 tiles or more (blocks of 4096 tokens or more), split or (past 4096 tokens, the
  // range above) unsplit, runs the shallow pipeline alone and keeps its depth under the early
  // prologue (early_stages) and beside a prefill (decode_grid_beside_prefill), as the unsplit
  // 16 x 4096 above. H100, session 15, four alternated pairs each, graph us, 4 -> 2 stages:
  // 8 x 32768 (2 splits x 64 blocks, 256 tiles a warp) 371.0-371.5 -> 368.1-368.5, its legacy
  // v2 cache 371.0-371.3 -> 368.8-369.0, 4 x 32768 (4 x 32, 128) 194.3-194.6 -> 192.9-193.7,
  // 2 x 32768 (8 x 16, 64) 106.3-106.4 -> 105.3-105.9, unsplit 16 x 8192 (128) 192.6-193.1 ->
  // 192.0-192.8 (docs/decode-vs-cudnn-h100-2026-11-28-s15.txt). Shorter splits (1 x 32768: 32
  // tiles a warp; H200 48 us deep against 50 shallow) keep the deepest.
  // [policy: wide memory] Only where the device memory's peak bandwidth per multiprocessor is
  // below kWideMemoryGbpsPerSm (an H100 SXM: 3352 GB/s over 132 SMs, 25): one block a
  // multiprocessor must keep more bytes in flight where each multiprocessor's share of the
  // bandwidth is larger. H200 (4814 GB/s, 36 a multiprocessor), session 18, kernel alone, graph
  // us: 8 x 32768 (2 splits) 255.6 at 2 stages, 252.6 at 3, 252.9 at 4; the policy's launch with
  // its ring 2 deep in 3 or 4 stages' shared memory 255.6 / 256.1, so the ring depth is what
  // costs (docs/decode-h200-2026-11-28-s18.txt).
  const int64_t warp_tiles = (tiles + int64_t{g.max_splits} * GA_DECODE_WARPS - 1) /
                             (int64_t{g.max_splits} * GA_DECODE_WARPS);
  const bool long_alone = g.early_stages == 0 && !g.cluster && warp_tiles >= kAloneLongWarpTiles &&
                          (g.max_splits > 1 || len > 4096);
  if (long_alone && dev.mem_gbps_per_sm < kWideMemoryGbpsPerSm && shallow < g.stages &&
      dev.blocks_per_sm[shallow] >= 1) {
    g.early_stages = g.stages;
    g.stages = shallow;
    g.alone_depth = true;
  } else if (long_alone && dev.mem_gbps_per_sm >= kWideMemoryGbpsPerSm && g.max_splits == 2 &&
             kvb == 2 && rh == 1 && head_size == 128 && g.stages > 3 && dev.blocks_per_sm[3] >= 1) {
    // [policy: wide memory, 2 long splits] There, 2 long splits of 16-bit KV at head 128 run 3
    // stages, as one cluster of 2 (the splits combined through distributed shared memory) where
    // the kernel pushes its splits and the device co-schedules such clusters. H200, session 18,
    // kernel alone, graph us, two rounds: 8 x 32768 (2 splits x 64 blocks, 256 tiles a warp)
    // 258.0-258.2 at 4 stages, 256.8-257.0 at 3, 255.9-256.0 as a cluster at 3 (2 stages: 260.0
    // either way; 4 splits 257.0-257.5). Then old / new alternated, 4 rounds, graph us: 8 x 32768
    // 252.1-253.2 -> 250.2-251.3 (cuDNN 251.0), its legacy v2 cache (no cluster: 3 stages)
    // 254.7-255.3 -> 253.2-253.3; 8 launches in one graph with the early prologue 241.7 -> 238.9
    // us a launch; the control 64 x 4096 252.4-253.1 / 252.1-252.9
    // (docs/decode-grids-h200-2026-11-28-s18.txt).
    g.stages = 3;
    g.cluster = dev.auto_clusters && dev.cluster_at[3] >= 2;
  }
  return g;
}

DecodeGrid decode_grid_beside_prefill(DecodeGrid g) {
  if (g.alone_depth) {
    g.stages = g.early_stages;
    g.early_stages = 0;
    g.alone_depth = false;
  }
  g.ring_stages = 0;
  return g;
}

void check_decode_launch(const AttentionSpec& spec, const DecodeLaunch& a, const KvCacheShape& kc,
                         const char* where) {
  // The mixed graphs' kernel (spec _dsp) serves exactly the launches whose splits the device
  // chooses; otherwise it is the spec the views need.
  const bool chosen = a.device_split && a.device_sms > 0;
  GA_REQUIRE(spec.device_splits == chosen,
             std::string(where) + ": kernel " + spec.to_string() +
                 (chosen ? " cannot choose the splits on the device (a launch with device_sms "
                           "needs the _dsp kernel)"
                         : " chooses the splits on the device; the launch has no device_split "
                           "with device_sms"));
  // The _dsp_long kernel serves exactly the launches with long_split_tokens (its count reads it).
  GA_REQUIRE(spec.dsp_long_splits == (chosen && a.long_split_tokens > 0),
             std::string(where) + ": kernel " + spec.to_string() +
                 (spec.dsp_long_splits ? " needs a launch with long_split_tokens"
                                       : " does not plan long splits; the launch has "
                                         "long_split_tokens (the _dsp_long kernel's)"));
  AttentionSpec plain = spec;
  plain.device_splits = false;
  plain.dsp_long_splits = false;
  require_launch_kernel(KernelKind::kDecode, plain, a, kc, where);
  const int64_t num_heads = a.query.shape[1];
  GA_REQUIRE(a.output.shape[1] == num_heads && a.output.shape[2] == a.query.shape[2],
             "output " + a.output.describe() + " does not match query " + a.query.describe());
  GA_REQUIRE(a.num_decodes >= 0 && a.num_decodes <= 65535,
             "num_decodes " + str(a.num_decodes) + " must be in [0, 65535]");
  GA_REQUIRE(a.query.shape[0] >= a.num_decodes && a.output.shape[0] >= a.num_decodes,
             "query " + a.query.describe() + " and output " + a.output.describe() +
                 " need a token per decode request (" + str(a.num_decodes) + ")");
  require_rank(a.seq_lens, 1, "seq_lens", "[num_reqs]");
  require_int32_rows(a.seq_lens, "seq_lens", a.num_decodes, "[num_reqs]");
  require_rank(a.block_table, 2, "block_table", "[num_reqs, max_blocks_per_seq]");
  require_int32_rows(a.block_table, "block_table", a.num_decodes, "[num_reqs, max_blocks_per_seq]");
  GA_REQUIRE(a.max_splits >= 1 && a.max_splits <= (1 << 20),
             "max_splits " + str(a.max_splits) + " must be in [1, 1048576]");
  GA_REQUIRE(!a.cluster || (spec.arch >= 90 && a.max_splits <= 16),
             "a cluster launch needs sm_90 or newer and max_splits <= 16, got sm_" +
                 str(spec.arch) + " and " + str(a.max_splits));
  const int kvb = kv_bytes_of(spec);
  const int rh = decode_row_heads(spec);
  const int stages = stages_of(spec, a);
  GA_REQUIRE(stages >= 2 && stages <= ga_decode_max_stages(spec.head_size * rh, kvb),
             "stages " + str(a.stages) + " is not supported for " + spec.to_string() +
                 "; supported: 0 (default), 2.." +
                 str(ga_decode_max_stages(spec.head_size * rh, kvb)));
  // prepare_decode_kernel sized the clusters for pipelines up to cluster_stage_limit.
  const bool clustered = a.cluster && a.max_splits > 1;
  const int early_limit =
      clustered ? cluster_stage_limit(spec) : ga_decode_max_stages(spec.head_size * rh, kvb);
  GA_REQUIRE(a.early_stages == 0 || (a.early_stages >= 2 && a.early_stages <= early_limit),
             "early_stages " + str(a.early_stages) + " is not supported for " + spec.to_string() +
                 (clustered ? " with cluster" : "") + "; supported: 0 (stages), 2.." +
                 str(early_limit));
  GA_REQUIRE(!clustered || stages <= cluster_stage_limit(spec),
             "a cluster launch runs at most " + str(cluster_stage_limit(spec)) +
                 " stages: stages " + str(stages) +
                 " is not supported with cluster; supported: 0 (default), 2.." +
                 str(cluster_stage_limit(spec)));
  if (a.multi_token || a.device_split) {
    require_rank(a.query_start_loc, 1, "query_start_loc", "[num_reqs + 1]");
    require_int32_rows(a.query_start_loc, "query_start_loc", int64_t{a.num_decodes} + 1,
                       "[num_reqs + 1]");
  }
  GA_REQUIRE(!a.device_split || a.new_key.ndim == 0,
             std::string(where) +
                 ": a decode launch split on the device takes no fused cache write (write the "
                 "new tokens first)");
  if (a.multi_token) {
    GA_REQUIRE(a.max_query_len >= 1 && a.max_query_len <= kMaxDecodeQueryLen,
               "max_query_len " + str(a.max_query_len) +
                   " is not supported for multi-token "
                   "decode; supported: 1.." +
                   str(kMaxDecodeQueryLen));
    GA_REQUIRE(a.new_key.ndim == 0, std::string(where) +
                                        ": a multi-token decode launch takes no fused cache "
                                        "write (write the new tokens first)");
  } else {
    GA_REQUIRE(a.max_query_len == 1, "max_query_len " + str(a.max_query_len) +
                                         " needs a multi-token decode kernel (spec _mt)");
  }
  const int rows = decode_partial_rows(spec, a, static_cast<int>(kc.num_kv_heads));
  const WorkspaceLayout w =
      workspace_layout(rows, static_cast<int>(num_heads), spec.head_size, a.max_splits);
  GA_REQUIRE(w.total == 0 || (a.workspace != nullptr && a.workspace_size >= w.total &&
                              reinterpret_cast<uintptr_t>(a.workspace) % 16 == 0),
             "decode workspace of " + str(static_cast<int64_t>(a.workspace_size)) + " bytes at " +
                 (a.workspace ? "an address" : "null") + " is too small or misaligned: " +
                 str(static_cast<int64_t>(w.total)) + " bytes, 16-byte aligned, are needed for " +
                 str(a.num_decodes) + " requests and " + str(a.max_splits) + " splits");
  const int num_kv_heads = static_cast<int>(kc.num_kv_heads);
  const int columns = spec.group * a.max_query_len;
  const int64_t grid_y = decode_grid_y(spec, num_kv_heads, a.max_query_len);
  GA_REQUIRE(grid_y <= 65535, "decode launch too large: " + str(grid_y) +
                                  " KV-head blocks per request (at most 65535)");
  if (a.device_split && a.device_sms > 0) {
    GA_REQUIRE(!a.cluster, std::string(where) +
                               ": a decode launch whose splits the device chooses takes no "
                               "cluster (the counters combine)");
    const int z = device_split_blocks(a.num_decodes, grid_y, a.max_splits, a.device_sms);
    GA_REQUIRE(z <= 65535, "decode launch too large: " + str(z) +
                               " blocks for the requests and splits chosen on the device (at "
                               "most 65535)");
  }
  GA_REQUIRE(
      a.max_splits == 1 || a.cluster ||
          (a.counters != nullptr && reinterpret_cast<uintptr_t>(a.counters) % 4 == 0),
      "decode counters must be a 4-byte aligned pointer to " +
          str(static_cast<int64_t>(decode_counter_count(a.num_decodes, num_kv_heads, columns))) +
          " zero-filled uint32 when max_splits (" + str(a.max_splits) + ") > 1, got " +
          (a.counters ? "a misaligned pointer" : "null"));
  GA_REQUIRE(kc.layout != KvLayout::kLegacy || a.new_key.ndim == 0,
             std::string(where) +
                 ": the legacy caches take no fused cache write (write_to_paged_cache first)");
  if (a.new_key.ndim != 0) {
    // The fused cache write: forward() checked these through check_cache_write; a direct
    // launch gets the same checks of the rows the kernel reads.
    require_kv_dtype(a.new_key, a.new_value, spec.dtype, where);
    TensorView k = a.new_key, v = a.new_value;
    GA_REQUIRE(
        k.ndim == 3 && v.ndim == 3 && k.shape[0] >= a.num_decodes && v.shape[0] >= a.num_decodes,
        std::string(where) + ": new_key " + k.describe() + " and new_value " + v.describe() +
            " must be [>= num_decodes (" + str(a.num_decodes) + "), num_kv_heads, head_size]");
    k.shape[0] = v.shape[0] = a.num_decodes;
    check_cache_write(k, v, kc, a.slot_mapping, a.k_scale, a.v_scale);
  }
}

void enqueue_decode(const LoadedKernel& decode, const DecodeLaunch& a, CUstream stream) {
  if (a.num_decodes == 0) return;
  const AttentionSpec& spec = decode.compiled->spec;
  const bool fp8 = spec.kv_dtype != KvDType::kAuto;
  const int64_t num_heads = a.query.shape[1];
  const bool legacy = a.legacy_kv.layout == KvLayout::kLegacy;
  const int num_kv_heads =
      static_cast<int>(legacy ? a.legacy_kv.num_kv_heads : a.kv_cache.shape[3]);
  const WorkspaceLayout w =
      workspace_layout(decode_partial_rows(spec, a, num_kv_heads), static_cast<int>(num_heads),
                       spec.head_size, a.max_splits);

  DecodeParams p{};
  unsigned char* ws = static_cast<unsigned char*>(a.workspace);
  set_paged_attention_views(p, a);
  if (legacy) {  // the key and value caches share their block and head strides (vLLM's)
    p.kv.key_cache = a.legacy_kv.key_data;
    p.kv.value_cache = a.legacy_kv.value_data;
    p.kv.cache_block_stride = a.legacy_kv.block_stride;
    p.kv.cache_token_stride = 0;
    p.kv.cache_head_stride = a.legacy_kv.head_stride;
    p.kv.num_blocks = a.legacy_kv.num_blocks;
    p.bsp = block_sparse_launch_data(a.blocksparse, a.query.shape[1], a.legacy_kv.num_kv_heads);
  }
  p.partial_out = reinterpret_cast<float*>(ws + w.partial_out);
  p.partial_lse = reinterpret_cast<float*>(ws + w.partial_lse);
  p.counters = static_cast<unsigned*>(a.counters);
  p.scale = a.scale;
  p.k_scale = fp8 ? a.k_scale : 1.0f;
  p.v_scale = fp8 ? a.v_scale : 1.0f;
  if (fp8) p.scales = {a.device_scales.k, a.device_scales.v};
  p.soft_cap = a.soft_cap > 0 ? a.soft_cap : 1.0f;
  p.window = a.window;
  p.max_splits = a.max_splits;
  p.num_heads = static_cast<int>(num_heads);
  if (a.new_key.ndim != 0) {
    p.new_key = a.new_key.data;
    p.new_value = a.new_value.data;
    p.slot_mapping = static_cast<const long long*>(a.slot_mapping.data);
    p.new_key_token_stride = a.new_key.strides[0];
    p.new_key_head_stride = a.new_key.strides[1];
    p.new_value_token_stride = a.new_value.strides[0];
    p.new_value_head_stride = a.new_value.strides[1];
    p.num_slots = a.kv_cache.shape[1] * a.kv_cache.shape[2];
  }
  p.bounds = static_cast<GaBoundsReport*>(a.bounds);
  p.query_start_loc =
      a.multi_token || a.device_split ? static_cast<const int*>(a.query_start_loc.data) : nullptr;
  p.max_query_len = a.max_query_len;
  p.device_split = a.device_split ? 1 : 0;
  const bool chosen = spec.device_splits;  // the device chooses the splits (check_decode_launch)

  const int rh = decode_row_heads(spec);
  const int64_t grid_y = decode_grid_y(spec, num_kv_heads, a.max_query_len);
  const int kvb = kv_bytes_of(spec);
  p.cluster_splits = a.cluster && a.max_splits > 1 && !chosen ? 1 : 0;
  // [policy: early trigger] A captured cluster launch with the early prologue whose grid allows it
  // (DecodeGrid::early_trigger) lets the next kernel be scheduled at its entry (early_prologue 2),
  // so that the next layer's blocks start their metadata loads and first tiles under this
  // layer's whole body instead of after its wait. H100, 32-layer B=1 step (8-block clusters, 3
  // stages): graph 128.7-128.9 us against 135.5-135.7 without the trigger (main 134.2-134.9);
  // eager launches keep the trigger after the wait: with it at entry eager took 152.3-157.9
  // against 143.0-144.3 (docs/decode-small-batch-h100-2026-11-27-s14.txt).
  static const int trigger_mode = detail::decode_early_trigger_from_env();
  p.early_prologue =
      decode_early_prologue(a.early_prologue && a.new_key.ndim != 0, pushes_cluster_splits(spec),
                            p.cluster_splits != 0 && a.early_trigger, trigger_mode, [stream] {
                              CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
                              GA_CU_CHECK(driver().cuStreamIsCapturing(stream, &status));
                              return status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
                            });
  const int stages = p.early_prologue && a.early_stages != 0 ? a.early_stages : stages_of(spec, a);
  // Measurement switch (off by default): GRAPHATTN_DECODE_RING_STAGES=N runs the ring N stages
  // deep (fewer tiles in flight) with the shared memory, so the resident blocks, of `stages`.
  // Set, it replaces the policy's ring depth of a launch without the early prologue
  // (a.ring_stages, [policy: alone ring depth]); =4: every launch's ring as deep as its stages.
  static const int ring_env = detail::decode_ring_stages_from_env();
  const int ring = ring_env >= 2 ? ring_env : p.early_prologue ? 0 : a.ring_stages;
  p.stages = ring >= 2 && ring < stages && !p.cluster_splits ? ring : stages;
  // A cluster launch also holds the receive area of the pushed combine (GA_DECODE_CLUSTER_PUSH).
  const int smem = ga_decode_smem_bytes(spec.head_size, kvb, stages, rh) +
                   (p.cluster_splits ? ga_decode_cluster_recv_bytes(spec.head_size) : 0);
  ensure_shared_limit(decode, smem);
  const auto u = [](int64_t v) { return static_cast<unsigned>(v); };
  const LaunchShape shape{
      chosen ? 1u : u(a.max_splits),
      u(grid_y),
      chosen ? u(device_split_blocks(a.num_decodes, grid_y, a.max_splits, a.device_sms))
             : u(a.num_decodes),
      GA_DECODE_THREADS,
      u(smem),
      p.cluster_splits ? u(a.max_splits) : 1u};
  if (spec.q_fp8) {  // the e4m3 query's kernel takes its descales after the common block
    const DecodeQ8Params p8{p, query_scales_of(a.q8)};
    launch(decode, shape, stream, p8);
  } else if (chosen) {  // so does the mixed graph's kernel its counts
    const DecodeDspParams pd{p,
                             {a.num_decodes, a.device_sms, a.prefill_block_m, a.long_split_tokens}};
    launch(decode, shape, stream, pd);
  } else {
    launch(decode, shape, stream, p);
  }
}

void launch_decode(const LoadedKernel& decode, const DecodeLaunch& a, CUstream stream) {
  const KvCacheShape kc =
      a.legacy_kv.layout == KvLayout::kLegacy
          ? check_direct_launch_legacy(decode, a)
          : check_direct_launch(decode, a.query, a.output, a.kv_cache, "launch_decode");
  check_decode_launch(decode.compiled->spec, a, kc, "launch_decode");
  enqueue_decode(decode, a, stream);
}

}  // namespace graphattn::detail
