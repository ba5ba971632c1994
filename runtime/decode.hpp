// SPDX-License-Identifier: Apache-2.0
// Host side of the split-KV decode kernel (templates/decode.cu).
//
// How AttentionBackend uses it (runtime/attention.cpp):
//   prepare(), once, before any capture:
//     const LoadedKernel& dk = load_kernel(spec_for(config, KernelKind::kDecode), cache);
//     const DecodeDevice device = detail::prepare_decode_kernel(dk);  // SMs, occupancy
//   forward(), every step (capture-safe):
//     const DecodeGrid g = detail::decode_grid(num_decodes, ..., device);  // fixed per batch size
//     args.max_splits = g.max_splits; args.stages = g.stages; args.cluster = g.cluster;
//     args.workspace = decode_workspace_bytes(...) bytes (any content);
//     args.counters = decode_counter_count(...) uint32 split counters, zeroed before their first
//                     use and left at zero by every launch;
//     detail::launch_decode(dk, args, stream);  // checks args against dk's spec (decode_spec)
#pragma once

#include <cuda.h>

#include <cstddef>

#include "graphattn/backend.hpp"
#include "graphattn/spec.hpp"
#include "graphattn/tensor.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"

namespace graphattn::detail {

// What the decode split policy knows of the device and the loaded kernel.
// The most splits the auto policy's cluster launches take (runtime/decode.cpp, [policy: 8-block
// clusters]).
constexpr int kAutoClusterSplits = 8;
// Tiles a warp from which a launch of at most one block a multiprocessor runs the shallow
// pipeline alone (runtime/decode.cpp, [policy: alone depth, long splits]).
constexpr int kAloneLongWarpTiles = 64;
// Peak device-memory bandwidth per multiprocessor (GB/s) from which that rule does not apply
// (runtime/decode.cpp, [policy: wide memory]: H100 SXM 25, H200 36).
constexpr int kWideMemoryGbpsPerSm = 30;
struct DecodeDevice {
  int num_sms = 0;             // multiprocessors
  int blocks_per_sm[5] = {};   // resident decode blocks per multiprocessor with a pipeline of
                               // [stages] stages (2..4; 0 where the spec allows no such depth)
  int max_cluster = 0;         // largest cluster of shallow split blocks it can run (sm_90+)
  int cluster_at[5] = {};      // the same at [stages] stages (2..4; with the pushed combine's
                               // receive area; [shallow] is max_cluster)
  bool use_clusters = false;   // short split launches use clusters (GRAPHATTN_DECODE_CLUSTERS=1)
  bool auto_clusters = false;  // split launches of one tile a warp do (the variable unset)
  int cluster_splits = 0;      // with clusters, split launches take at most this many splits
                               // (GRAPHATTN_DECODE_CLUSTER_SPLITS; 0: as many as fit, and
                               // auto_clusters' launches kAutoClusterSplits)
  int row_heads = 1;           // KV heads a block covers (2: KV head pairs, ga_decode_row_heads)
  int dsp_sm_blocks = 0;       // the _dsp count's blocks a multiprocessor (0 or 1: one;
                               // GRAPHATTN_MIXED_DSP_SM_BLOCKS, runtime/mixed_grid.hpp)
  int dsp_long_tiles = 0;      // > 0: the _dsp count plans two blocks a multiprocessor where
                               // every leading decode keeps this many tiles a warp
                               // (GRAPHATTN_MIXED_DSP_LONG_TILES; 0: one block)
  int mem_gbps_per_sm = 0;     // the device memory's peak bandwidth over the multiprocessors,
                               // GB/s (the driver's memory clock and bus width; 0: unknown,
                               // taken as an H100's; kWideMemoryGbpsPerSm)
};
// A decode launch's geometry (runtime/decode.hpp's split policy).
struct DecodeGrid {
  int max_splits = 1;    // splits per request at most (grid x)
  int stages = 2;        // cp.async stages per warp
  bool cluster = false;  // the splits of a request run as one cluster of max_splits blocks
  int early_stages = 0;  // stages of a launch that runs the early prologue (0: stages)
  // stages is the depth of a launch that runs alone and early_stages the one it takes with the
  // early prologue and beside a prefill (decode_grid_beside_prefill).
  bool alone_depth = false;
  // The ring depth of a launch without the early prologue, in the shared memory (so the resident
  // blocks) of stages (0: stages; [policy: alone ring depth]).
  int ring_stages = 0;
  // A cluster launch whose warps issue all their tiles before the wait (tiles a warp <= the early
  // prologue's depth - 1): captured with the early prologue, it lets the next kernel be scheduled
  // at its entry ([policy: early trigger], decode_early_prologue).
  bool early_trigger = false;
  // A batch split on the device whose splits the kernel chooses from the decodes it counts
  // (runtime/mixed_grid.hpp; 0: max_splits for every request): the policy's multiprocessor
  // count, grid y (blocks per request and split), and the leading decodes that may take more
  // than one split (the partials' requests).
  int device_sms = 0;
  int grid_y = 0;
  int split_requests = 0;
  // > 0: device_sms is two blocks a multiprocessor, taken only where the shortest leading decode
  // has this many tokens a split (GaDeviceSplits::long_split_tokens); else device_sms / 2.
  int long_split_tokens = 0;
};

// One decode launch over requests [0, num_decodes) of a batch (decodes come first, one query
// token each: request r's query is token r).
// The views (AttentionViews) hold at least num_decodes tokens and requests.
struct DecodeLaunch : AttentionViews {
  DecodeLaunch() = default;
  explicit DecodeLaunch(const AttentionViews& views) : AttentionViews(views) {}
  int num_decodes = 0;
  int max_splits = 1;  // grid width; each request uses at most this many splits
  int stages = 0;      // pipeline depth 2..ga_decode_max_stages; 0: the shallow default
  // The pipeline depth instead of stages when the launch runs the early prologue (early_prologue
  // and the fused write): 0 (stages), else 2..ga_decode_max_stages, not with cluster.
  int early_stages = 0;
  int ring_stages = 0;  // DecodeGrid::ring_stages (0: stages)
  // With the fused write: read seq_lens, block_table, slot_mapping and the KV cache before the
  // previous kernel in the stream finishes (it must write none of them).
  bool early_prologue = false;
  // sm_90+, max_splits <= 16: run the splits of each request as one thread-block cluster and
  // combine them through distributed shared memory (the counters are then not used).
  bool cluster = false;
  // DecodeGrid::early_trigger: with the early prologue, on a capturing stream, a cluster launch of
  // a pushed-combine spec lets the next kernel be scheduled at its entry (decode_early_prologue).
  bool early_trigger = false;
  float scale = 1.0f;            // softmax scale
  int window = 0;                // sliding window in tokens; 0 = none (the spec must agree)
  float soft_cap = 0.0f;         // logits soft cap; 0 = none (the spec must agree)
  float k_scale = 1.0f;          // fp8 KV: key = stored * k_scale; ignored otherwise
  float v_scale = 1.0f;          // fp8 KV: value = stored * v_scale; ignored otherwise
  DeviceKvScales device_scales;  // fp8 KV: device scalars read instead of k_scale / v_scale
  void* workspace = nullptr;     // decode_workspace_bytes(...) bytes, 16-byte aligned, any content
  size_t workspace_size = 0;
  // decode_counter_count(...) uint32 at 4-byte alignment, all zero before the launch; the kernel
  // leaves them zero. Needed when max_splits > 1 (the last split of a request combines).
  void* counters = nullptr;
  // Fused cache write, checked as check_cache_write() checks the cache write's views (dtype the
  // layer's, whatever the cache stores): request r's new key and value (row r) go to
  // slot_mapping[r] inside the decode kernel. ndim 0: no write.
  TensorView new_key;       // [>= num_decodes, num_kv_heads, head_size] dtype of query
  TensorView new_value;     // same
  TensorView slot_mapping;  // [>= num_decodes] int64
  // Checked mode: a zero-filled GaBoundsReport (templates/params.h) where the kernel records the
  // first block id or fused-write slot outside the cache; the launch then needs the checked
  // kernel (spec "_chk"). nullptr: the fast kernel.
  void* bounds = nullptr;
  // Multi-token decode (multi_token true, a "_mt" kernel): request r's query rows are
  // [query_start_loc[r], query_start_loc[r + 1]), at most max_query_len (1..16) of them; no
  // fused cache write. The grid and workspace are sized for num_decodes * max_query_len rows.
  TensorView query_start_loc;  // [>= num_decodes + 1] int32
  int max_query_len = 1;
  // A batch split on the device (a graph captured for any decode/prefill mix): num_decodes
  // counts every request slot, and the kernel skips those whose query_start_loc length is 0 or
  // above max_query_len (prefills and padding). query_start_loc is needed then also without
  // multi_token; no fused cache write.
  bool device_split = false;
  // With device_split, > 0: the kernel (spec _dsp) chooses the splits (templates/params.h,
  // ga_device_split_splits with at most this multiprocessor count, max_splits at most) from the
  // leading decodes it counts; the grid is (1, y, device_split_blocks(...)) and no cluster.
  int device_sms = 0;
  // With device_sms: query rows (tokens x group) of one block of the prefill that runs beside
  // it (its block_m); the kernel leaves the prefill's blocks their multiprocessors. 0: none.
  int prefill_block_m = 0;
  // With device_sms: DecodeGrid::long_split_tokens (0: device_sms as it is).
  int long_split_tokens = 0;
  // vLLM's legacy caches (spec layout legacy; paged_attention_v1 / v2): their checked shape,
  // data and block / head strides (check_paged_caches); kv_cache is then unused and there is no
  // fused cache write. Layout nhd (the default): the flash kv_cache is read.
  KvCacheShape legacy_kv;
  // An e4m3 query (query dtype fp8_e4m3, spec "_qe4m3"; unread otherwise): q = stored * the
  // query's descale. Device descales (FA3's q_descale / k_descale / v_descale) hold one fp32 per
  // (request, KV head) at [r * descale_req_stride + kv_head * descale_head_stride] (strides 0: a
  // per-tensor scalar); a null one takes q_scale for the query, k_scale / v_scale (or the
  // device_scales) for keys and values.
  FpQueryScales q8;
};

// The decode spec these views and options need on `arch`. Checks ranks, dtypes and head counts
// (throws graphattn::Error naming the bad argument); does not touch the device.
AttentionSpec decode_spec(const DecodeLaunch& args, int arch);

// Workspace for the partial results of one launch of `rows` query rows (num_decodes, or for a
// multi-token launch num_decodes * max_query_len).
size_t decode_workspace_bytes(int rows, int num_heads, int head_size, int max_splits);
// A batch split on the device with the splits chosen there (DecodeLaunch::device_sms): blocks
// along z over `slots` request slots (the most any count of leading decodes needs), and the
// leading decodes that may take more than one split (the requests with partials).
int device_split_blocks(int slots, int64_t grid_y, int max_splits, int sms);
int device_split_requests(int slots, int64_t grid_y, int max_splits, int sms);
// Query rows of a launch's partials (decode_workspace_bytes' rows): num_decodes *
// max_query_len, or with the splits chosen on the device device_split_requests' rows.
int decode_partial_rows(const AttentionSpec& spec, const DecodeLaunch& a, int num_kv_heads);
// Split counters of one launch: one per (request, KV head, chunk of 16 query columns). columns:
// query columns per KV head, the GQA group (times max_query_len for a multi-token launch).
size_t decode_counter_count(int num_decodes, int num_kv_heads, int columns);
// KV heads one block of this decode spec covers: 2 for KV head pairs (templates/params.h,
// ga_decode_row_heads: 128-byte head rows, NHD, single token, not block-sparse, GQA <= 8), else 1.
int decode_row_heads(const AttentionSpec& spec);

// A layer's workspace (AttentionBackend::workspace_bytes()): the split counters for max_num_seqs
// requests first, at a fixed place so that every batch size finds its counters at zero, then,
// 256-byte aligned, the partials of one launch (decode_workspace_bytes of its batch).
struct LayerWorkspace {
  size_t counters = 0;  // bytes of split counters at offset 0
  size_t partials = 0;  // offset of the launch's partials
  size_t total(size_t partial_bytes) const { return partials + partial_bytes; }
};
LayerWorkspace layer_workspace(const AttentionLayerConfig& config);

// Raises `decode`'s dynamic shared-memory limit to what its deepest pipeline needs and reads
// the device's multiprocessor count and the kernel's occupancy. Call once per loaded kernel
// before any capture.
DecodeDevice prepare_decode_kernel(const LoadedKernel& decode);

// The split policy, a pure function. A batch whose (request, KV head) blocks fill the
// multiprocessors by itself takes the pipeline depth whose resident blocks fill them best over
// the waves (the most resident blocks when there are three waves or more; between depths that
// fill them equally, for blocks of 2048 tokens or fewer, or fewer blocks than two per
// multiprocessor, the one leaving the fewest resident slots free (early_stages where a launch
// alone takes the most resident blocks, stages; decode_grid_beside_prefill), else the most
// resident blocks),
// and splits (up to 4, each of 2048 tokens or more) only where no depth fills them; one split
// writes its output directly. A smaller batch is split until there is about one block per
// multiprocessor, never into splits of fewer than GA_DECODE_MIN_TILES_PER_SPLIT tiles: short splits
// (up to 16 tiles a warp) take the shallow pipeline (ga_decode_shallow_stages) and run as clusters
// where the device holds max_splits blocks in one; long ones the deepest (ga_decode_max_stages),
// except alone where a warp has kAloneLongWarpTiles tiles or more: the shallow one (alone_depth).
//   max_model_len: longest seq_len; window: sliding window (0 none); columns: query columns per
//   KV head, the GQA group (times max_query_len for multi-token decode)
DecodeGrid decode_grid(int num_decodes, int num_kv_heads, int columns, int max_model_len,
                       int window, int head_size, KvDType kv_dtype, const DecodeDevice& device);

// [policy: early trigger] The early_prologue word (templates/params.h) of a launch: 0 without the
// early prologue (early: the fused write and DecodeLaunch::early_prologue); 2, which also lets
// the next kernel be scheduled at the kernel's entry, for a launch of a pushed-combine spec
// (push_spec: ga_decode_cluster_push on sm_90+) on a capturing stream whose grid allows it
// (trigger: a cluster launch with DecodeLaunch::early_trigger); else 1. mode:
// GRAPHATTN_DECODE_EARLY_TRIGGER (0 unset: as said; 1 never; 2 every captured launch, whatever
// its grid; 3 every launch of such a spec, captured or not). capturing is asked only where it
// decides.
template <class Capturing>
int decode_early_prologue(bool early, bool push_spec, bool trigger, int mode,
                          const Capturing& capturing) {
  if (!early) return 0;
  if (!push_spec || mode == 1 || (mode == 0 && !trigger)) return 1;
  return mode == 3 || capturing() ? 2 : 1;
}

// The grid of a decode that runs beside a prefill (a mixed batch), whose blocks take the slots
// the decode leaves free: a grid whose stages are a launch's alone depth (alone_depth) takes
// early_stages, and its ring runs stages deep (ring_stages 0).
DecodeGrid decode_grid_beside_prefill(DecodeGrid g);

// Every check of a decode launch's arguments against the kernel spec `ks`, given the KV cache's
// shape (check_kv_cache of args.kv_cache, checked once by the caller); `where` names the caller
// in the messages. Throws graphattn::Error naming the bad argument.
void check_decode_launch(const AttentionSpec& ks, const DecodeLaunch& args, const KvCacheShape& kc,
                         const char* where);
// Launches decode on arguments that check_decode_launch() accepted for decode's spec; checks
// nothing. num_decodes 0 launches nothing.
void enqueue_decode(const LoadedKernel& decode, const DecodeLaunch& args, CUstream stream);

// Checks `args` against the loaded kernel and launches decode on `stream` (one kernel: split
// partials are combined by the last split of each request). Allocates and synchronizes nothing;
// capture-safe once loaded and prepare_decode_kernel() has been called for `decode`.
// num_decodes 0 launches nothing.
void launch_decode(const LoadedKernel& decode, const DecodeLaunch& args, CUstream stream);

}  // namespace graphattn::detail
