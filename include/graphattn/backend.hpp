// SPDX-License-Identifier: Apache-2.0
// The attention backend's device operations, vLLM v1 flash-backend semantics.
//
// The paged KV cache is one tensor viewed as [2, num_blocks, block_size, num_kv_heads, head_size]
// (index 0: keys, 1: values). NHD stores it in that order; HND stores
// [2, num_blocks, num_kv_heads, block_size, head_size] and is passed as the same logical shape
// with permuted strides. The head dimension must be contiguous.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "graphattn/blocksparse.hpp"
#include "graphattn/export.h"
#include "graphattn/jit.hpp"
#include "graphattn/layer_config_fields.h"
#include "graphattn/spec.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn {

class DeviceBuffer;

// Writes the new tokens' keys and values into their cache slots (vLLM's
// reshape_and_cache_flash). A slot of -1 (padding) writes nothing.
//   key, value:    [num_tokens, num_kv_heads, head_size], fp16, bf16 or fp32 (vLLM's float32
//                  caches), head dim contiguous
//   kv_cache:      [2, num_blocks, block_size, num_kv_heads, head_size], dtype of key or fp8;
//                  block_size 8 or a multiple of 16 up to 256 (the attention kernels: not 8)
//   slot_mapping:  [num_tokens] int64, block * block_size + offset, or -1
//   k_scale/v_scale: fp8 caches store value / scale; ignored otherwise
//   k_scale_device/v_scale_device: [1] fp32 device scalars or null; a non-null one is read by the
//                  kernel at run time instead of the float (fp8 caches; ignored otherwise)
// Asynchronous on `stream`; capture-safe once the kernel is loaded (see prepare_cache_write).
GRAPHATTN_API void write_kv_cache(const TensorView& key, const TensorView& value,
                                  const TensorView& kv_cache, const TensorView& slot_mapping,
                                  float k_scale, float v_scale, CUstream stream,
                                  KernelCache& cache = default_kernel_cache(),
                                  const float* k_scale_device = nullptr,
                                  const float* v_scale_device = nullptr);

// vLLM's Attention.calc_kv_scales on the device: from a batch's new keys and values,
//   *k_scale_out = max(amax(|key|) / k_divisor, kMinKvScale), *v_scale_out likewise,
// written into two fp32 device scalars that a layer's kernels then read (k_scale_device and
// v_scale_device of AttentionLayerConfig), so the scales change without recapturing a graph.
//   key, value:   [num_tokens, num_kv_heads, head_size] fp16/bf16, head dim contiguous, rows
//                 16-byte aligned (strided like write_kv_cache's); exactly num_tokens rows are
//                 read: pass a view of the real tokens, padded rows past it never count
//   k_scale_out, v_scale_out: [1] fp32 device scalars, 4-byte aligned, distinct; overwritten
//   k_divisor, v_divisor: finite > 0. kKScaleDivisor / kVScaleDivisor (200 / 100) are vLLM's
//                 K_SCALE_CONSTANT / V_SCALE_CONSTANT: scales computed once from a first batch
//                 leave later, larger values headroom below the fp8 maximum (448 for e4m3);
//                 fp8_max(kv_dtype) gives the amax / fp8 max (full range for this batch)
// An all-zero batch (or num_tokens 0) writes kMinKvScale, never 0; a NaN or infinite input gives
// a NaN or infinite scale, as vLLM's torch amax does. Asynchronous on `stream`: two 4-byte
// memsets and one kernel of a grid fixed by num_tokens, no scratch memory and no host sync, so
// it can be captured (compiles and loads its kernel on first use: call it once before capture).
GRAPHATTN_API void calc_kv_scales(const TensorView& key, const TensorView& value,
                                  float* k_scale_out, float* v_scale_out, float k_divisor,
                                  float v_divisor, CUstream stream,
                                  KernelCache& cache = default_kernel_cache());
constexpr float kKScaleDivisor = 200.0f;  // vLLM's K_SCALE_CONSTANT
constexpr float kVScaleDivisor = 100.0f;  // vLLM's V_SCALE_CONSTANT
constexpr float kMinKvScale = 1e-12f;     // calc_kv_scales' smallest result (GA_KV_SCALE_MIN)
// The largest finite value of an fp8 KV type: 448 (e4m3), 57344 (e5m2); auto is an Error.
GRAPHATTN_API float fp8_max(KvDType kv_dtype);

// Prefill attention (vLLM v1 flash semantics) for requests [first_req, num_reqs) of a batch:
// query token i of a request with seq_len s and query length n sits at position s - n + i and
// attends to keys 0..position of its paged KV (cached context, then itself causally).
//   query, output:    [num_tokens, num_heads, head_size] fp16/bf16, head dim contiguous, rows
//                     16-byte aligned; output rows of the handled requests are overwritten
//   kv_cache:         [2, num_blocks, block_size, num_kv_heads, head_size] (NHD or HND strides)
//   query_start_loc:  [>= num_reqs + 1] int32; seq_lens: [>= num_reqs] int32 (0: zeros out)
//   block_table:      [>= num_reqs, max_blocks_per_seq] int32
//   max_query_len:    >= the query length of every handled request
//   scale:            softmax scale; window: sliding window in tokens, 0 = none (a key at k is
//                     seen from p when p - k < window); soft_cap: 0 = none
//   k_scale/v_scale:  fp8 caches hold value / scale; ignored otherwise
//   alibi_slopes, sinks: [num_heads] fp32 device arrays or null, as AttentionLayerConfig says
//   k_scale_device, v_scale_device: [1] fp32 device scalars or null, read instead of k_scale /
//                     v_scale (fp8 caches; ignored otherwise), as AttentionLayerConfig says
//   causal:           false: every query of a request sees all its keys 0..seq_len - 1
//                     (encoder and cross attention; no window then; the query length may
//                     exceed seq_len); ALiBi still measures key - (s - n + i)
//   softmax_lse:      ndim 0, or fp32 [num_heads, >= num_tokens] with contiguous rows: the
//                     kernel with the softmax_lse axis also writes each handled query row's
//                     log-sum-exp per head there (natural log; -inf for a row with no key)
// Compiles and loads the kernel on first use; asynchronous on `stream`.
GRAPHATTN_API void prefill_attention(
    const TensorView& query, const TensorView& kv_cache, const TensorView& output,
    const TensorView& query_start_loc, const TensorView& seq_lens, const TensorView& block_table,
    int first_req, int num_reqs, int max_query_len, float scale, int window, float soft_cap,
    float k_scale, float v_scale, CUstream stream, KernelCache& cache = default_kernel_cache(),
    const float* alibi_slopes = nullptr, const float* sinks = nullptr,
    const float* k_scale_device = nullptr, const float* v_scale_device = nullptr,
    bool causal = true, const TensorView& softmax_lse = TensorView());

// Encoder-only attention (vLLM's ENCODER_ONLY; its FlashAttention encoder path): bidirectional
// self-attention of variable-length sequences with no KV cache, through the prefill kernel
// reading dense K/V (spec "..._nc_dense").
//   query, output:    [num_tokens, num_heads, head_size] fp16/bf16, head dim contiguous, rows
//                     16-byte aligned
//   key, value:       [num_tokens, num_kv_heads, head_size] the same dtype, equal strides, rows
//                     16-byte aligned; request r's keys are its own tokens
//   query_start_loc:  [num_reqs + 1] int32 token offsets of the sequences (num_reqs from its
//                     length); rows past query_start_loc[num_reqs] are not written
//   max_query_len:    >= every sequence's length (sizes the grid)
//   scale:            softmax scale
//   alibi_slopes, sinks: [num_heads] fp32 device arrays or null (ALiBi: key - query position)
// Compiles and loads the kernel on first use; asynchronous on `stream`; allocates nothing.
GRAPHATTN_API void encoder_attention(const TensorView& query, const TensorView& key,
                                     const TensorView& value, const TensorView& output,
                                     const TensorView& query_start_loc, int max_query_len,
                                     float scale, CUstream stream,
                                     KernelCache& cache = default_kernel_cache(),
                                     const float* alibi_slopes = nullptr,
                                     const float* sinks = nullptr);

// vLLM's MultiHeadAttention (vision encoders): dense, non-causal attention of a uniform batch,
// through the same dense-K/V prefill kernel.
//   q, out:  [batch, q_len, num_heads, head_size] fp16/bf16
//   k, v:    [batch, kv_len, num_kv_heads, head_size] the same dtype, equal strides
// Each must be viewable as [batch * len, heads, head_size] (batch stride = len x token stride,
// as for contiguous tensors and slices of a packed qkv tensor), head dim contiguous, rows
// 16-byte aligned; num_heads a multiple of num_kv_heads. Query i of a batch row sees all its
// kv_len keys. Asynchronous on `stream`; allocates nothing.
GRAPHATTN_API void multi_head_attention(const TensorView& q, const TensorView& k,
                                        const TensorView& v, const TensorView& out, float scale,
                                        CUstream stream,
                                        KernelCache& cache = default_kernel_cache());

// One attention layer's configuration: everything that is fixed for the life of an engine.
struct GRAPHATTN_API AttentionLayerConfig {
  int num_heads = 0;                  // query heads; a multiple of num_kv_heads
  int num_kv_heads = 0;               // KV heads; query head h reads KV head h / (num_heads / this)
  int head_size = 0;                  // 32..256, multiple of 8
  int block_size = 16;                // tokens per KV page: 16..256, multiple of 16
  DType dtype = DType::kBFloat16;     // query, key, value, output
  KvDType kv_dtype = KvDType::kAuto;  // KV cache element type (auto = dtype)
  KvLayout layout = KvLayout::kNHD;   // KV cache stride order
  int window = 0;                     // sliding window in tokens, 0 = none: a key at k is seen from
                                      // position p when p - k < window
  float soft_cap = 0.0f;              // logits soft cap c, 0 = none: s -> c * tanh(s / c)
  // ALiBi: [num_heads] fp32 slopes in device memory (null: none). Query head h adds
  // slope[h] * (key position - query position) to its scaled (and capped) scores. The engine
  // keeps the array alive and may change its contents between steps (graphs read it on replay).
  const float* alibi_slopes = nullptr;
  // Attention sinks (gpt-oss): [num_heads] fp32 logits in device memory (null: none). Head h's
  // softmax denominator gains exp(sinks[h]), which contributes no value. Kept alive likewise.
  const float* sinks = nullptr;
  // The most query tokens of a decode request: 1, or 1 + the speculative tokens a step verifies
  // (vLLM's uniform decode query length, up to kMaxDecodeQueryLen). Above 1 the decode kernel
  // is the multi-token one (spec "_mt"): decode requests (the first num_decodes) may then hold
  // 1..decode_query_len tokens each, causal among themselves, and every KV tile a request reads
  // serves all of its tokens.
  int decode_query_len = 1;
  float scale = 0.0f;    // softmax scale; 0 = 1 / sqrt(head_size)
  float k_scale = 1.0f;  // fp8 KV: key = stored * k_scale (ignored otherwise)
  float v_scale = 1.0f;  // fp8 KV: value = stored * v_scale (ignored otherwise)
  // fp8 KV scales in device memory: [1] fp32 scalars owned by the engine (null: k_scale /
  // v_scale). Every kernel of the layer (cache write, decode with its fused write, prefill)
  // reads them when it runs, so they may change between steps, e.g. by calc_kv_scales, and a
  // captured graph follows them on replay without recapture. Kept alive while the layer runs.
  // Ignored (reset to null, as the float scales are reset to 1) for a 16-bit (auto) cache.
  const float* k_scale_device = nullptr;
  const float* v_scale_device = nullptr;
  int max_model_len = 0;  // longest seq_len (context + new tokens) a request reaches
  int max_num_seqs = 0;   // most requests in one batch (sizes the decode workspace)
  int arch = 0;           // target compute capability * 10 (e.g. 90); 0 = current device
  // sm_90+, any KV cache dtype: a decode-only forward() that writes its new keys and values starts
  // reading the metadata (seq_lens, block_table, slot_mapping) and the KV cache before the
  // previous kernel in the stream has finished (the query and the new keys and values are read
  // after it). Set it only where that kernel writes none of those; AttentionLayerStack does.
  // Captured in a graph, such a decode with short cluster splits also lets the next kernel be
  // scheduled at its start (runtime/decode.cpp [policy: early trigger]), so in a run of such
  // layers back to back each one's early reads may overlap every kernel back to the last one
  // that did not: none of those may write this layer's metadata or KV cache (consecutive
  // layers write only their own caches' new slots).
  bool overlap_previous_kernel = false;
  // Checked mode (also GRAPHATTN_CHECK_BOUNDS=1): the kernels (specs "..._chk") compare every
  // block id and slot they read with kv_cache's size; the first out of range is recorded for
  // take_bounds_violation() and the access is skipped (a bad block reads block 0, a bad slot
  // writes nothing), so the context survives. Off, the fast kernels run, with no check at all (a
  // block id past the cache is read, a slot past it is skipped).
  bool check_bounds = false;
  // vLLM's attention type (spec.hpp): decoder (causal, paged; the default), encoder
  // (bidirectional over the paged cache), encoder-only (bidirectional, no KV cache: forward()
  // takes an ndim-0 kv_cache and the keys and values of the batch's tokens), encoder-decoder
  // (cross attention over a cache the encoder's output filled; forward() with ndim-0 key and
  // value writes nothing). Encoder and encoder-only layers take no window.
  AttentionType attn_type = AttentionType::kDecoder;
  // Block-sparse attention (vLLM's BlocksparseFlashAttention; graphattn/blocksparse.hpp):
  // block_size 0 is dense. Decoder layers only; decode and prefill both follow the pattern.
  BlockSparseParams blocksparse;
  // Softmax LSE (spec axis softmax_lse): the decode and prefill kernels also write each query
  // row's natural-log log-sum-exp per head, and forward() takes the softmax_lse array to write
  // it into (FlashAttention's return_softmax_lse; cascade attention merges by it). Not for
  // encoder-only layers.
  bool softmax_lse = false;
  // fp8 queries (vLLM's query_quant with an fp8 cache; FA3's fp8 forward): kAuto (the default)
  // takes queries in dtype; kFp8E4M3 takes e4m3 queries (query views of dtype fp8 e4m3) with
  // q = stored * q_scale, and the output stays in dtype. Needs an fp8 kv_dtype (e4m3 or e5m2).
  // Decode and prefill kernels "_qe4m3": the decode's QK^T on fp8 tensor cores from sm_89 on;
  // the prefill (the mma.sync kernel, every arch) widens the query exactly on load.
  KvDType q_dtype = KvDType::kAuto;
  float q_scale = 1.0f;  // e4m3 query: q = stored * q_scale (ignored otherwise)
  // e4m3 query: FA3's descales in device memory, one fp32 per (request, KV head) at
  // [r * descale_req_stride + kv_head * descale_head_stride] (both strides 0: one scalar), read
  // by the decode kernel when it runs (a graph follows new contents without recapture); null
  // takes q_scale for the query and k_scale / v_scale (or their device scalars) for keys and
  // values. k_descale / v_descale only scale the attention (the cache write uses k_scale).
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int descale_req_stride = 0;   // elements
  int descale_head_stride = 0;  // elements

  // Every field above, as GRAPHATTN_LAYER_CONFIG_FIELDS (graphattn/layer_config_fields.h) lists
  // them: what == compares. A member without a row there does not compile (capi/config.cpp).
  auto fields() const {
#define GRAPHATTN_LAYER_CONFIG_TIE(type, member, ...) std::tie(member),
    return std::tuple_cat(GRAPHATTN_LAYER_CONFIG_FIELDS(GRAPHATTN_LAYER_CONFIG_TIE) std::tuple<>());
#undef GRAPHATTN_LAYER_CONFIG_TIE
  }
  bool operator==(const AttentionLayerConfig& o) const { return fields() == o.fields(); }
  bool operator!=(const AttentionLayerConfig& o) const { return !(*this == o); }
};

// What checked mode recorded (AttentionBackend::take_bounds_violation()).
struct GRAPHATTN_API BoundsViolation {
  enum class Kind { kNone, kBlockId, kSlot };
  Kind kind = Kind::kNone;
  int request = -1;   // block ids: the request (block_table row); slots: the decode request, or
                      // -1 when the cache write kernel met it
  int position = 0;   // block ids: the key position in the request; slots: the batch token
  int64_t value = 0;  // the block id or slot
  explicit operator bool() const { return kind != Kind::kNone; }
  // "block id 70000 of request 3 at position 4096 is outside the cache (0..NB-1)" and the like.
  std::string describe() const;
};

// One step's batch, vLLM v1 semantics. Requests are ordered decodes first (one query token
// each, or 1..decode_query_len with multi-token decode), then prefills. Device views are int32
// unless noted; the counts are host-known.
struct GRAPHATTN_API AttentionMetadata {
  TensorView query_start_loc;  // [>= num_reqs + 1] token offsets, non-decreasing, [0] = 0
  TensorView seq_lens;         // [>= num_reqs] context + new tokens; 0 = padded request
  TensorView block_table;      // [>= num_reqs, max_blocks_per_seq] physical block ids
  TensorView slot_mapping;     // int64 [>= num_actual_tokens] cache slot of each new token or -1
  int num_reqs = 0;
  int num_decodes = 0;        // requests [0, num_decodes) are decodes
  int num_decode_tokens = 0;  // num_decodes; up to num_decodes * decode_query_len (multi-token)
  int num_actual_tokens = 0;  // tokens written to the cache (a captured graph's padded count)
  int max_query_len = 0;      // over the prefills (1 when there are none)
  int max_seq_len = 0;
  // A batch split on the device, for a CUDA graph captured once per token count that serves
  // any mix of decodes and prefills (vLLM's full graphs, CudaGraphSupport::kAlways): the
  // kernels read the split from query_start_loc instead of num_decodes, so nothing the host
  // knows about one batch is baked into the launches. num_reqs is then the request slots
  // (padded requests hold no token: query_start_loc repeats its last value, seq_lens 0), every
  // request of up to decode_query_len tokens must come before the others, num_decodes,
  // num_decode_tokens and max_query_len are not used, and the cache write runs as its own
  // kernel. Launches the same kernels as a host split (the results are equal); a decode-only
  // batch is a little faster with the host split (its decode kernel writes the cache).
  bool device_split = false;
};

// What a layer's kernels do, as the spec's axes: head and block size, dtypes, layout, group,
// arch, and whether there is a window, a soft cap, ALiBi, sinks, multi-token decode, a non-causal
// or dense-K/V prefill, a block-sparse pattern, checked mode. Its kind is not chosen yet:
// spec_for(features, kind) is features.for_kernel(kind), which puts every axis that kernel does
// not have at its canonical value (the axis list's columns, spec.hpp). features_of() fills it
// from a layer; the direct calls (forward_prefix, paged_attention, launch_decode, ...) fill it
// from their views and arguments.
using KernelFeatures = AttentionSpec;
GRAPHATTN_API KernelFeatures features_of(const AttentionLayerConfig& config);

// The spec of `kind`'s kernel for a layer of this configuration on config.arch (set it: arch 0
// is resolved to the current device by AttentionBackend, not here): the cache write depends on
// neither the group, the window nor the soft cap, so one cache write kernel serves every layer
// of a head size, block size, dtype and cache.
GRAPHATTN_API AttentionSpec spec_for(const KernelFeatures& features, KernelKind kind);
GRAPHATTN_API AttentionSpec spec_for(const AttentionLayerConfig& config, KernelKind kind);

// The decode kernel a configuration gets. A pure function: kNone exactly when the constructor
// of AttentionBackend would reject the configuration (attention_config_problem() says why).
// arch 0 (the current device) is taken as supported here and checked at construction.
enum class DecodeKernel { kNone, kSplitKv };
GRAPHATTN_API DecodeKernel select_decode_kernel(const AttentionLayerConfig& config);
// Empty when the configuration is supported; otherwise what is wrong, naming the value and the
// allowed set.
GRAPHATTN_API std::string attention_config_problem(const AttentionLayerConfig& config);

// How forward() runs a batch that has both decodes and prefills (a mixed batch, host or device
// split). Both kernels follow the layer's cache write, read the cache only, read disjoint query
// rows and write disjoint output rows, so they may run side by side: a branch mode records an
// event on forward()'s stream after the write, runs the prefill on a stream of the backend's
// own (non-blocking, made at the first mixed forward() from each caller stream) after waiting
// for it, the decode on forward()'s stream, and makes forward()'s stream wait for the prefill
// before forward() returns. Everything a forward() launched is thus ordered on the caller's
// stream, eagerly and under stream capture (there: two graph branches, joined before the
// stream's next work). The outputs are bit-identical to kSerial's. The 32-layer llama-3-8b
// mixed step (56 decodes at 2048 + a 512-token chunk over 2048) on an H100: kSerial 6681 us in
// a graph, kPrefillFirst 6473 (3.1% less), kDecodeFirst 6488, the high-priority modes 6623-6646
// (docs/mixed-step-h100-2026-11-27-s9.txt, docs/mixed-forward-branches-h100-2026-11-27-s9.txt).
// The modes other than kDefault, in the order of the C ABI's graphattn_mixed_branches_name(i):
// X(enumerator, its name as GRAPHATTN_MIXED_BRANCHES spells it). The enum, the names, the parser
// below, the C enumerator and Python's AttentionBackend.MIXED_BRANCHES all come from this list.
//   kSerial              one stream: cache write, decode, prefill
//   kSerialPrefillFirst  one stream: cache write, prefill, decode
//   kDecodeFirst         two branches, the decode launched (and captured) first
//   kPrefillFirst        two branches, the prefill launched (and captured) first
//   kDecodeFirstHigh     kDecodeFirst with the prefill's stream at the greatest priority
//   kPrefillFirstHigh    kPrefillFirst with the prefill's stream at the greatest priority
#define GRAPHATTN_MIXED_BRANCHES_MODES(X)        \
  X(kSerial, "off")                              \
  X(kSerialPrefillFirst, "serial-prefill-first") \
  X(kDecodeFirst, "decode-first")                \
  X(kPrefillFirst, "prefill-first")              \
  X(kDecodeFirstHigh, "decode-first-high")       \
  X(kPrefillFirstHigh, "prefill-first-high")
enum class MixedBranches {
  kDefault,  // GRAPHATTN_MIXED_BRANCHES (one of the names above) if set, else kPrefillFirst
#define GRAPHATTN_X_(e, name) e,
  GRAPHATTN_MIXED_BRANCHES_MODES(GRAPHATTN_X_)
#undef GRAPHATTN_X_
};
// The modes of GRAPHATTN_MIXED_BRANCHES_MODES, in its order (kDefault not among them).
inline constexpr MixedBranches kMixedBranchesModes[] = {
#define GRAPHATTN_X_(e, name) MixedBranches::e,
    GRAPHATTN_MIXED_BRANCHES_MODES(GRAPHATTN_X_)
#undef GRAPHATTN_X_
};
// The mode's name as GRAPHATTN_MIXED_BRANCHES spells it ("default" for kDefault).
GRAPHATTN_API const char* mixed_branches_name(MixedBranches mode);
// kDefault: GRAPHATTN_MIXED_BRANCHES, else kPrefillFirst; any other mode unchanged. Throws
// Error naming a value that is not a mode's name, with the allowed names.
GRAPHATTN_API MixedBranches resolve_mixed_branches(MixedBranches mode);
// The mode named `name` as GRAPHATTN_MIXED_BRANCHES spells it (mixed_branches_name's inverse
// over kMixedBranchesModes). Throws Error naming any other value, with the allowed names.
GRAPHATTN_API MixedBranches parse_mixed_branches(const std::string& name);

// A batch split on the device (AttentionMetadata::device_split: a graph captured for any mix)
// launches its decode over every request slot, not knowing on the host how many hold a decode.
// GRAPHATTN_MIXED_DECODE_DIVISOR (an integer 0..65535, read when a backend is made; anything
// else is an error naming it) sets how its splits are chosen:
//   0 (the default since session 13, kMixedDecodeDivisorDefault): the mixed graphs' decode is
//     its own kernel (spec _dsp, so every other decode kernel keeps its machine code) that
//     counts the leading decodes d in query_start_loc (one round trip per warp) and gives each
//     the split policy's count for d decodes over the multiprocessors the prefill beside it
//     leaves (its row tiles per KV head, estimated from the batch's other tokens;
//     GRAPHATTN_MIXED_DSP_NO_ROOM keeps none), the grid (1, y, z) covering the most blocks any d
//     needs, the pipeline depth divisor 4's; one-token decodes with a 16-bit query only (other
//     layers take divisor 4). Such a layer compiles four kernels instead of three.
//     H100, llama-3-8b's 32 layers, graph against divisor 4 and the eager host split
//     (docs/mixed-step-h100-2026-11-27-s13.txt): 1 decode at 4096 + 16 new tokens 483 us
//     (divisor 4 637, host split 581), 4 at 8192 + 64 1823 (2678, 1815), 4 at 2048 + 16 632
//     (620, 703), a 512-token prefill alone 1279 (1258, 1296);
//   N >= 1 (the default in sessions 10-12): the grid's split count for every decode is the
//     larger of the split policy's for every slot and for ceil(slots / N) decodes (1: every
//     slot's, as before session 10; docs/mixed-step-h100-2026-11-27-s10.txt).
//     docs/mixed-step-h100-2026-11-27-s11.txt and -s12.txt: the _dsp kernel's first count (two
//     round trips and two barriers) was 1-5% slower than divisor 4 where both pick the same
//     splits.
constexpr int kMixedDecodeDivisorDefault = 0;
// The divisor that sizes layers without the _dsp kernel, the _dsp launch's pipeline depth and
// a _dsp grid past 65535 blocks.
constexpr int kMixedDecodeDivisor = 4;
GRAPHATTN_API int mixed_decode_divisor_from_env();

// The attention of one layer (or of every layer sharing a configuration): cache write, then
// split-KV decode for the decodes and prefill for the rest.
//
//   AttentionBackend attn(config);          // validates; resolves arch 0 from the device
//   attn.prepare(cache);                     // compiles and loads every kernel
//   DeviceBuffer ws(attn.workspace_bytes()); // once, shared by every layer run in sequence
//   attn.forward(q, k, v, kv_cache, out, metadata, ws.data(), ws.bytes(), stream);
//
// After prepare(), forward() compiles, loads, allocates and synchronizes nothing (a branch
// mode's mixed batch makes one stream and two events at the first such call from a caller
// stream: MixedBranches), so it can be captured in a CUDA graph; one graph per batch size
// serves every context length.
//
// Threads: prepare() of different backend objects may run on several threads at once, sharing
// one KernelCache (each kernel is compiled once and loaded once per context); each thread needs
// the context current (ensure_context). After prepare(), forward() is const and may
// run on several threads at once on different streams, each stream with its own workspace (the
// split counters and partials in a workspace belong to the launches of one stream at a time).
// Construction, prepare() and destruction of one backend object must not race with each other
// or with forward() on it.
//
// Devices: a backend belongs to the device whose context was current at its first prepare()
// (preparing it again under another device's context throws); forward() runs with that context
// current, on that device's streams and memory. Several GPUs in one process: one backend (or
// AttentionLayerStack) per device, each made and prepared on a thread that called
// use_device(device); the kernels are compiled once per arch and loaded once per context.
class GRAPHATTN_API AttentionBackend {
 public:
  explicit AttentionBackend(const AttentionLayerConfig& config);

  // The configuration with scale and arch resolved.
  const AttentionLayerConfig& config() const { return config_; }
  // cache_write, decode and prefill specs of this configuration (encoder-only: the prefill
  // spec alone, "..._nc_dense").
  std::vector<AttentionSpec> required_specs() const;
  // Compiles (in parallel, through `cache`) and loads every kernel in the current context, and
  // reads that device's multiprocessor count and the decode kernel's occupancy. Throws Error or
  // CompileError (also when a previous prepare() was on another context). Call before any
  // capture.
  void prepare(KernelCache& cache = default_kernel_cache());
  bool prepared() const { return prepared_; }
  // Bytes of scratch that forward() needs for any batch of up to max_num_seqs requests
  // (split-KV counters and partials). Valid after prepare(). Any content will do: the first
  // forward() that splits on a workspace address clears its counters (one asynchronous memset on
  // the stream, captured too if that forward is inside a capture), and every forward leaves
  // them fit for the next. A workspace freed and re-allocated at the same address must be
  // zero-filled, or given to a new backend.
  size_t workspace_bytes() const;
  // The split-KV grid width for a batch of num_decodes (fixed per captured batch size).
  int decode_max_splits(int num_decodes) const;
  // The most splits a request of a batch split on the device over request_slots slots takes
  // (see kMixedDecodeDivisorDefault), and how many it takes with num_decodes leading decodes and
  // prefill_tokens other tokens (divisor 0: the prefill's blocks keep their multiprocessors),
  // the shortest of them holding shortest_decode keys (seq_lens; it matters only with
  // GRAPHATTN_MIXED_DSP_LONG_TILES, where 0 gives the one-block count).
  int mixed_decode_max_splits(int request_slots) const;
  int mixed_decode_splits(int request_slots, int num_decodes, int prefill_tokens = 0,
                          int shortest_decode = 0) const;
  int mixed_decode_stages(int request_slots) const;  // its pipeline depth
  // The divisor that sizes it (GRAPHATTN_MIXED_DECODE_DIVISOR when the backend was made).
  int mixed_decode_divisor() const { return mixed_decode_divisor_; }
  // The decode kernel's pipeline depth for a batch of num_decodes.
  int decode_stages(int num_decodes) const;
  // Whether the splits of a request run as one thread-block cluster (sm_90+: they combine
  // through distributed shared memory) for a batch of num_decodes.
  bool decode_cluster(int num_decodes) const;

  // Checked mode only (config().check_bounds): the first out-of-range block id or slot that a
  // kernel of this backend met since the last call (kind kNone when none), and clears the
  // record. Synchronizes the context: call it outside captures, e.g. after a step. Throws Error
  // outside checked mode.
  BoundsViolation take_bounds_violation() const;

  // Runs one step on `stream` (per config().attn_type, below):
  //   query, output: [num_tokens, num_heads, head_size] dtype, head dim contiguous, rows
  //                  16-byte aligned; output rows of requests are overwritten (padded requests
  //                  get zeros)
  //   key, value:    [num_tokens, num_kv_heads, head_size] dtype, the new tokens' keys and
  //                  values, written to their slots first; a view with ndim 0 skips the write
  //   kv_cache:      [2, num_blocks, block_size, num_kv_heads, head_size] (NHD or HND strides)
  //   workspace:     workspace_bytes() bytes of device memory, 16-byte aligned (see
  //                  workspace_bytes()); one workspace per stream that runs forwards concurrently
  // Attention types: a decoder is causal; an encoder layer's prefills are bidirectional over
  // the cache; a cross-attention (encoder-decoder) layer's metadata holds the encoder lengths
  // as seq_lens (FlashAttentionMetadataBuilder(kEncoderDecoder) makes it), its prefills are
  // bidirectional, its decodes the usual ones, and key/value, when present, are the encoder's
  // rows (key.shape[0] of them, written to slot_mapping's first entries; ndim 0: the cache
  // holds them already, nothing is written). An encoder-only layer ignores kv_cache (pass an
  // ndim-0 view) and the decode counts: every request [0, num_reqs) is a sequence whose
  // queries see its own keys, rows query_start_loc[r].. of key and value; no workspace needed.
  // softmax_lse: a layer with config().softmax_lse writes each query row's LSE per head there,
  // fp32 [num_heads, >= num_tokens] with contiguous rows (natural log, -inf for a padded
  // request's rows); required then, and an ndim-0 view otherwise.
  // Throws Error naming the bad argument; launches nothing then.
  void forward(const TensorView& query, const TensorView& key, const TensorView& value,
               const TensorView& kv_cache, const TensorView& output,
               const AttentionMetadata& metadata, void* workspace, size_t workspace_size,
               CUstream stream, const TensorView& softmax_lse = TensorView()) const;

  // How forward() launches a mixed batch's decode and prefill (MixedBranches above; kDefault is
  // resolved at construction and here). Not while forward() runs on another thread; copies
  // made before keep their mode. The prefill's streams and events are made at the first mixed
  // forward() from each caller stream (in the backend's context), per stream key: the context,
  // the stream and, for CU_STREAM_PER_THREAD, the thread. Their creation failing throws Error.
  void set_mixed_branches(MixedBranches mode);
  MixedBranches mixed_branches() const;

 private:
  bool encoder_only() const { return config_.attn_type == AttentionType::kEncoderOnly; }
  // forward() of an encoder-only layer: the dense prefill over every request.
  void forward_encoder_only(const TensorView& query, const TensorView& key, const TensorView& value,
                            const TensorView& output, const AttentionMetadata& metadata,
                            CUstream stream) const;

  AttentionLayerConfig config_;
  std::vector<AttentionSpec> specs_;  // cache_write, decode, prefill (encoder-only: prefill)
  bool prepared_ = false;
  KernelCache* cache_ = nullptr;  // the cache prepare() loaded from
  // What prepare() loaded: the kernels (in specs_ order) and the device's multiprocessors and
  // occupancy for the split policy (runtime/attention.cpp).
  struct Loaded;
  std::shared_ptr<const Loaded> loaded_;
  // Workspace addresses whose split counters forward() has cleared (on their first split
  // launch), so that an engine's workspace need not be zero-filled. Shared by copies.
  struct ClearedWorkspaces;
  std::shared_ptr<ClearedWorkspaces> cleared_;
  // The mixed-batch mode and the prefill branch's streams and events (runtime/attention.cpp);
  // a mutex makes each forward()'s fork, launches and join one section.
  struct MixedStreams;
  std::shared_ptr<MixedStreams> mixed_;
  int mixed_decode_divisor_ = kMixedDecodeDivisorDefault;  // mixed_decode_max_splits' divisor
  // GRAPHATTN_MIXED_DSP_NO_ROOM (an on/off flag, off by default; divisor 0 only): the _dsp
  // decode kernel takes every multiprocessor for its splits, none kept for the prefill.
  bool mixed_dsp_no_room_ = false;
  // Checked mode: the device record (a GaBoundsReport), allocated by prepare().
  std::shared_ptr<DeviceBuffer> bounds_;
};

}  // namespace graphattn
