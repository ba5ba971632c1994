// SPDX-License-Identifier: Apache-2.0
// The attention backend: configuration checks, the kernels a layer needs, and forward() for a
// mixed batch (cache write, split-KV decode for the decodes, prefill for the rest).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/env_flag.hpp"
#include "core/text.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/mixed_grid.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/prefill.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn {

namespace detail {

// A batch split on the device (a graph captured for any mix) launches its decode over every
// request slot; a slot that holds no decode exits at once, but how many slots are decodes is
// known only on the device. Sized for every slot, a small mix of long decodes ran each request
// in one block per KV head (4 decodes at 2048 in a 20-slot graph: 32 blocks of 2048 tokens, where
// the host split ran 128 blocks of 512).
// divisor 0 (GRAPHATTN_MIXED_DECODE_DIVISOR unset or 0, the default since session 13; the _dsp
// kernel): the kernel counts the leading decodes d and gives each the split policy's splits for d
// decodes over the multiprocessors the prefill leaves (ga_device_split_splits over
// ga_device_split_room: at most those of one decode), the grid (1, y, device_split_blocks) covering
// the most blocks any d needs (sized with every multiprocessor); the pipeline depth is the
// divisor-4 sizing's (docs/mixed-step-h100-2026-11-27-s11.txt, -s12.txt, -s13.txt). divisor >= 1
// (session 10; 4 was the default in sessions 10-12, and sizes the layers without the _dsp kernel):
// the grid takes the splits of ceil(slots / divisor) decodes where those are more than every
// slot's; the kernel gives each request only as many splits as its own length fills (ceil(tiles /
// GA_DECODE_MIN_TILES_PER_SPLIT), at most max_splits), and the blocks of slots without a decode, or
// of splits past a request's, exit at once.
DecodeGrid mixed_decode_grid(int slots, int divisor, int num_kv_heads, int columns,
                             int max_model_len, int window, int head_size, KvDType kv_dtype,
                             const DecodeDevice& dev) {
  const DecodeGrid all =
      decode_grid(slots, num_kv_heads, columns, max_model_len, window, head_size, kv_dtype, dev);
  if (divisor == 0 && slots >= 1 && dev.num_sms > 0) {
    const int rh = std::max(1, dev.row_heads);
    const int64_t y = int64_t{(num_kv_heads + rh - 1) / rh} * ga_decode_head_chunks(columns * rh);
    // (The _dsp kernel runs no clusters: the split count of a request without the auto
    // policy's cluster cap, kAutoClusterSplits.)
    DecodeDevice no_auto = dev;
    no_auto.auto_clusters = false;
    const int most = std::max(
        decode_grid(1, num_kv_heads, columns, max_model_len, window, head_size, kv_dtype, no_auto)
            .max_splits,
        1);
    // The pipeline depth (the blocks' shared memory, fixed at capture) is the one the divisor-4
    // sizing launches for these slots: where the kernel then picks that sizing's splits
    // (4 decodes at 2048 + 16 in 20 slots: 3 splits at 2 stages) the launch differs from it
    // only in the count and the grid. Session 11 launched every slot's depth (3 stages there,
    // 4 splits: +9.6%; not separated from the splits).
    const int stages = mixed_decode_grid(slots, kMixedDecodeDivisor, num_kv_heads, columns,
                                         max_model_len, window, head_size, kv_dtype, dev)
                           .stages;
    // (Measurement switch GRAPHATTN_MIXED_DSP_SM_BLOCKS=N: the count plans for N blocks a
    // multiprocessor; the grid is sized with the same count, so it covers every choice.)
    // GRAPHATTN_MIXED_DSP_LONG_TILES=T (without SM_BLOCKS): where the depth is deeper than the
    // shallow one and still lets two blocks share a multiprocessor (16-bit KV cache, no window;
    // head 128 bf16 on an H100: 3 stages), the graph launches the _dsp_long kernel, which plans
    // two blocks a multiprocessor when every leading decode keeps T tiles a warp at that count,
    // else one; the grid is sized for two ([policy: long splits]). Graphs at the shallow depth
    // (the divisor-4 sizing's short splits: 4 x 2048 + 16 and 8 x 1024 + 32 measured +0.9% and
    // +1.4% with the larger grid, where the rule kept one block) or at one block a
    // multiprocessor keep the plain _dsp kernel and its grid.
    const bool long_splits = dev.dsp_long_tiles > 0 && dev.dsp_sm_blocks <= 1 && window <= 0 &&
                             kv_dtype == KvDType::kAuto && stages <= 4 &&
                             stages > ga_decode_shallow_stages(head_size * rh, 2) &&
                             dev.blocks_per_sm[stages] >= 2;
    const int sms = dev.num_sms * (long_splits ? 2 : std::max(1, dev.dsp_sm_blocks));
    if (y <= 65535 && device_split_blocks(slots, y, most, sms) <= 65535) {
      DecodeGrid g = all;
      g.stages = stages;
      g.long_split_tokens = long_splits ? dev.dsp_long_tiles * GA_DECODE_TILE * GA_DECODE_WARPS : 0;
      g.max_splits = most;
      g.cluster = false;
      g.early_trigger = false;
      g.early_stages = 0;
      g.alone_depth = false;
      g.ring_stages = 0;
      g.device_sms = sms;
      g.grid_y = static_cast<int>(y);
      g.split_requests = device_split_requests(slots, y, most, sms);
      return g;
    }
    divisor = kMixedDecodeDivisor;  // a grid past 65535 blocks: the default sizing
  }
  if (divisor <= 1 || slots <= 1) return all;
  const DecodeGrid few = decode_grid((slots + divisor - 1) / divisor, num_kv_heads, columns,
                                     max_model_len, window, head_size, kv_dtype, dev);
  return decode_grid_beside_prefill(few.max_splits > all.max_splits ? few : all);
}

}  // namespace detail

namespace {

using detail::str;
std::string fstr(float v) { return std::to_string(v); }

// GRAPHATTN_CHECK_BOUNDS: an on/off flag (core/env_flag.hpp); anything else is an error naming it.
bool check_bounds_from_env() { return detail::env_flag("GRAPHATTN_CHECK_BOUNDS"); }

// kDspIdx: the mixed graphs' decode with device-chosen splits (spec _dsp), where the layer has it
// (chooses_splits_on_device).
// kDspLongIdx: the same with the long-splits count (spec _dsp_long), where
// GRAPHATTN_MIXED_DSP_LONG_TILES asks for it (chooses_long_splits).
enum SpecIndex { kWrite = 0, kDecodeIdx = 1, kPrefillIdx = 2, kDspIdx = 3, kDspLongIdx = 4 };

// GRAPHATTN_MIXED_DECODE_DIVISOR=0 on a layer whose decode can count its decodes (one query token,
// a 16-bit query, a decoder or cross layer): the mixed graphs' decode is its own kernel, spec _dsp.
// Other layers keep the divisor 4 sizing.
bool chooses_splits_on_device(const AttentionLayerConfig& c, int divisor) {
  return divisor == 0 && c.attn_type != AttentionType::kEncoderOnly && c.decode_query_len == 1 &&
         c.q_dtype != KvDType::kFp8E4M3;
}

// GRAPHATTN_MIXED_DSP_LONG_TILES on a layer with the _dsp kernel over a 16-bit KV cache without
// a window: its mixed graphs deeper than the shallow depth launch the _dsp_long kernel
// (mixed_decode_grid's long_split_tokens).
bool chooses_long_splits(const AttentionLayerConfig& c, int divisor) {
  return chooses_splits_on_device(c, divisor) && c.kv_dtype == KvDType::kAuto && c.window <= 0 &&
         detail::mixed_dsp_long_tiles_from_env() > 0;
}

}  // namespace

namespace {

// The kernels a layer of type t needs, in specs_ order: an encoder-only layer has no cache to
// write and no decodes.
std::vector<KernelKind> kernel_kinds(AttentionType t) {
  if (t == AttentionType::kEncoderOnly) return {KernelKind::kPrefill};
  return {KernelKind::kCacheWrite, KernelKind::kDecode, KernelKind::kPrefill};
}

}  // namespace

namespace {

// The fp8-query fields: q_dtype auto or fp8_e4m3 (the e4m3 query's own rule, an fp8 cache, is
// the decode spec's), its scale, and descales only with it.
std::string q_dtype_problem(const AttentionLayerConfig& c) {
  const int q = static_cast<int>(c.q_dtype);
  if (c.q_dtype != KvDType::kAuto && c.q_dtype != KvDType::kFp8E4M3)
    return std::string("q_dtype ") +
           (q >= 0 && q < enum_count<KvDType>() ? kv_cache_dtype_name(c.q_dtype) : str(q).c_str()) +
           " is not supported; supported: auto (queries in the layer's dtype), fp8_e4m3";
  const bool fp8 = c.q_dtype == KvDType::kFp8E4M3;
  if (fp8 && (!(c.q_scale > 0) || !std::isfinite(c.q_scale)))
    return "q_scale " + fstr(c.q_scale) +
           " is not supported for an e4m3 query; supported: finite > 0";
  if (!fp8 && (c.q_descale || c.k_descale || c.v_descale))
    return "q_descale, k_descale and v_descale are not supported with q_dtype auto; supported: "
           "null (they are the descales of an e4m3 query: q_dtype fp8_e4m3)";
  if (c.descale_req_stride < 0 || c.descale_head_stride < 0)
    return "descale strides " + str(c.descale_req_stride) + ", " + str(c.descale_head_stride) +
           " are not supported; supported: >= 0 (both 0: one scalar)";
  for (const float* p : {c.q_descale, c.k_descale, c.v_descale})
    if (reinterpret_cast<uintptr_t>(p) % 4 != 0)
      return "q_descale, k_descale and v_descale must be 4-byte aligned fp32 device pointers or "
             "null";
  return "";
}

}  // namespace

std::string attention_config_problem(const AttentionLayerConfig& c) {
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    return "num_heads " + str(c.num_heads) + " and num_kv_heads " + str(c.num_kv_heads) +
           " are not supported; supported: positive counts with num_heads a multiple of "
           "num_kv_heads";
  if (static_cast<int>(c.attn_type) < 0 ||
      static_cast<int>(c.attn_type) > static_cast<int>(AttentionType::kEncoderDecoder))
    return "attn_type " + str(static_cast<int>(c.attn_type)) +
           " is not supported; supported: decoder, encoder, encoder_only, encoder_decoder";
  if (c.window < 0)
    return "window " + str(c.window) + " is not supported; supported: 0 (none) or >= 1 tokens";
  // forward() takes one flash-layout kv_cache; the legacy caches have their own calls.
  if (c.layout == KvLayout::kLegacy)
    return "layout legacy is not supported by AttentionBackend, whose forward() reads the flash "
           "layout; supported: nhd, hnd (vLLM's legacy caches: paged_attention_v1 / v2 and "
           "forward_prefix in graphattn/paged_cache.hpp)";
  if (c.decode_query_len < 1 || c.decode_query_len > kMaxDecodeQueryLen)
    return "decode_query_len " + str(c.decode_query_len) + " is not supported; supported: 1.." +
           str(kMaxDecodeQueryLen) + " (1 + speculative tokens)";
  if (c.window > 0 && c.attn_type != AttentionType::kDecoder)
    return "window " + str(c.window) + " is not supported for attn_type " + to_string(c.attn_type) +
           " (non-causal); supported: 0 (none)";
  if (!(c.soft_cap >= 0) || !std::isfinite(c.soft_cap))
    return "soft_cap " + fstr(c.soft_cap) + " is not supported; supported: 0 (none) or finite > 0";
  if (!(c.scale >= 0) || !std::isfinite(c.scale))
    return "scale " + fstr(c.scale) +
           " is not supported; supported: 0 (1/sqrt(head_size)) or "
           "finite > 0";
  if (c.kv_dtype != KvDType::kAuto && (!(c.k_scale > 0) || !(c.v_scale > 0) ||
                                       !std::isfinite(c.k_scale) || !std::isfinite(c.v_scale)))
    return "k_scale " + fstr(c.k_scale) + " / v_scale " + fstr(c.v_scale) +
           " are not supported for an fp8 KV cache; supported: finite > 0";
  const std::string scales = detail::device_scales_problem({c.k_scale_device, c.v_scale_device});
  if (!scales.empty()) return scales;
  const std::string q8 = q_dtype_problem(c);
  if (!q8.empty()) return q8;
  const std::string sparse =
      blocksparse_problem(c.blocksparse, c.num_heads, c.num_kv_heads, c.block_size);
  if (!sparse.empty()) return sparse;
  if (c.blocksparse.block_size != 0 && c.attn_type != AttentionType::kDecoder)
    return "blocksparse attention is not supported for attn_type " +
           std::string(to_string(c.attn_type)) + "; supported: decoder (causal self-attention)";
  if (c.softmax_lse && c.attn_type == AttentionType::kEncoderOnly)
    return "softmax_lse is not supported for attn_type encoder_only; supported: decoder, "
           "encoder, encoder_decoder (the paged-cache kernels write it)";
  if (c.max_model_len <= 0)
    return "max_model_len " + str(c.max_model_len) + " is not supported; supported: >= 1";
  if (c.max_num_seqs <= 0 || c.max_num_seqs > 65535)
    return "max_num_seqs " + str(c.max_num_seqs) + " is not supported; supported: 1..65535";
  try {
    // arch 0 means the current device, checked at construction; any supported arch stands in.
    AttentionLayerConfig any = c;
    if (any.arch == 0) any.arch = 90;
    for (KernelKind k : kernel_kinds(c.attn_type)) spec_for(any, k).validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

DecodeKernel select_decode_kernel(const AttentionLayerConfig& config) {
  return attention_config_problem(config).empty() ? DecodeKernel::kSplitKv : DecodeKernel::kNone;
}

struct AttentionBackend::Loaded {
  const detail::LoadedKernel* kernels[5] = {};  // in specs_ order (encoder-only: prefill only)
  detail::DecodeDevice device;                  // multiprocessors and occupancy
  CUcontext context = nullptr;                  // where the kernels are loaded
  int device_ordinal = 0;                       // that context's device
};

struct AttentionBackend::ClearedWorkspaces {
  std::mutex mu;
  std::vector<const void*> addresses;
};

// The mixed-batch mode and, per caller stream key, the prefill's stream and the fork and join
// events. One mutex over each forward()'s fork, launches and join: a stream's record/wait pair
// must not interleave with another thread's use of the same events, and a side stream serves
// one caller stream only (while that stream is being captured the side stream belongs to its
// capture until the capture ends, so no other caller stream may fork onto it).
struct AttentionBackend::MixedStreams {
  struct Side {
    CUcontext context = nullptr;
    CUstream origin = nullptr;
    std::thread::id thread;  // CU_STREAM_PER_THREAD only: the caller's thread
    CUstream stream = nullptr;
    CUevent fork = nullptr, join = nullptr;
  };
  explicit MixedStreams(MixedBranches m) : mode(resolve_mixed_branches(m)) {}
  ~MixedStreams() {
    if (sides.empty()) return;
    const auto& d = detail::driver();
    for (Side& s : sides) {  // best effort: the context may be gone at exit
      if (s.join) d.cuEventDestroy(s.join);
      if (s.fork) d.cuEventDestroy(s.fork);
      if (s.stream) d.cuStreamDestroy(s.stream);
    }
  }
  MixedStreams(const MixedStreams&) = delete;
  MixedStreams& operator=(const MixedStreams&) = delete;

  // The side stream for `origin` in `context` (made there on first use); call with mu held.
  Side& side(CUcontext context, CUstream origin) {
    const std::thread::id t =
        origin == CU_STREAM_PER_THREAD ? std::this_thread::get_id() : std::thread::id();
    for (Side& s : sides)
      if (s.context == context && s.origin == origin && s.thread == t) return s;
    const auto& d = detail::driver();
    CUcontext current = nullptr;
    GA_CU_CHECK(d.cuCtxGetCurrent(&current));
    if (current != context) GA_CU_CHECK(d.cuCtxSetCurrent(context));
    Side s;
    s.context = context;
    s.origin = origin;
    s.thread = t;
    const bool high =
        mode == MixedBranches::kDecodeFirstHigh || mode == MixedBranches::kPrefillFirstHigh;
    int least = 0, greatest = 0;
    CUresult r = high ? d.cuCtxGetStreamPriorityRange(&least, &greatest) : CUDA_SUCCESS;
    const char* what = "cuCtxGetStreamPriorityRange";
    if (r == CUDA_SUCCESS) {
      r = d.cuStreamCreateWithPriority(&s.stream, CU_STREAM_NON_BLOCKING, high ? greatest : 0);
      what = "cuStreamCreateWithPriority";
    }
    if (r == CUDA_SUCCESS) {  // ordering only: no timing, no blocking sync
      r = d.cuEventCreate(&s.fork, CU_EVENT_DISABLE_TIMING);
      what = "cuEventCreate";
    }
    if (r == CUDA_SUCCESS) r = d.cuEventCreate(&s.join, CU_EVENT_DISABLE_TIMING);
    if (current != context) d.cuCtxSetCurrent(current);
    if (r != CUDA_SUCCESS) {
      if (s.fork) d.cuEventDestroy(s.fork);
      if (s.stream) d.cuStreamDestroy(s.stream);
      const char* name = nullptr;
      if (d.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "?";
      throw Error(std::string("forward: could not make the mixed batch's prefill stream and "
                              "events (GRAPHATTN_MIXED_BRANCHES=") +
                  mixed_branches_name(mode) + "): " + what + " returned " + name +
                  "; GRAPHATTN_MIXED_BRANCHES=off launches both kernels on forward()'s stream");
    }
    sides.push_back(s);
    return sides.back();
  }

  MixedBranches mode;
  std::mutex mu;
  std::vector<Side> sides;  // few: one per caller stream
};

void AttentionBackend::set_mixed_branches(MixedBranches mode) {
  mixed_ = std::make_shared<MixedStreams>(mode);
}
MixedBranches AttentionBackend::mixed_branches() const { return mixed_->mode; }

AttentionBackend::AttentionBackend(const AttentionLayerConfig& config)
    : config_(config),
      cleared_(std::make_shared<ClearedWorkspaces>()),
      mixed_(std::make_shared<MixedStreams>(MixedBranches::kDefault)),
      mixed_decode_divisor_(mixed_decode_divisor_from_env()),
      mixed_dsp_no_room_(detail::env_flag("GRAPHATTN_MIXED_DSP_NO_ROOM")) {
  const std::string problem = attention_config_problem(config_);
  if (!problem.empty()) throw Error("attention layer configuration: " + problem);
  if (config_.arch == 0) {
    ensure_context(0);
    config_.arch = current_device_arch();
    const std::string p = attention_config_problem(config_);
    if (!p.empty()) throw Error("attention layer configuration on the current device: " + p);
  }
  config_.check_bounds = config_.check_bounds || check_bounds_from_env();
  if (config_.scale == 0) config_.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_size));
  if (config_.kv_dtype == KvDType::kAuto) {
    config_.k_scale = config_.v_scale = 1.0f;
    config_.k_scale_device = config_.v_scale_device = nullptr;
  }
  for (KernelKind k : kernel_kinds(config_.attn_type)) specs_.push_back(spec_for(config_, k));
  if (chooses_splits_on_device(config_, mixed_decode_divisor_)) {
    AttentionSpec dsp = specs_[kDecodeIdx];
    dsp.device_splits = true;
    specs_.push_back(dsp);
    if (chooses_long_splits(config_, mixed_decode_divisor_)) {
      dsp.dsp_long_splits = true;
      specs_.push_back(dsp);
    }
  }
  for (const auto& s : specs_) s.validate();
}

std::vector<AttentionSpec> AttentionBackend::required_specs() const { return specs_; }

void AttentionBackend::prepare(KernelCache& cache) {
  const int arch = current_device_arch();
  GA_REQUIRE(arch == config_.arch, "attention backend was configured for sm_" + str(config_.arch) +
                                       " but the current device is sm_" + str(arch));
  CUcontext context = nullptr;
  GA_CU_CHECK(detail::driver().cuCtxGetCurrent(&context));
  const int device = current_device();
  // The kernels, the split policy's device and the bounds report belong to one context: a
  // backend serves the device it was first prepared on (make one backend per device).
  GA_REQUIRE(!loaded_ || loaded_->context == context,
             "attention backend was prepared on device " +
                 str(loaded_ ? loaded_->device_ordinal : 0) +
                 "'s context and cannot be prepared again on device " + str(device) +
                 "'s; make one backend per device");
  for (const PrecompileResult& r : cache.precompile(specs_))
    GA_REQUIRE(r.error.empty(), "compiling kernel " + r.spec + " failed: " + r.error);
  auto loaded = std::make_shared<Loaded>();
  for (size_t i = 0; i < specs_.size(); ++i)
    loaded->kernels[i] = &detail::load_kernel(specs_[i], cache);
  if (!encoder_only()) loaded->device = detail::prepare_decode_kernel(*loaded->kernels[kDecodeIdx]);
  if (specs_.size() > kDspIdx)  // its shared-memory limit; the split policy is the decode's
    detail::prepare_decode_kernel(*loaded->kernels[kDspIdx]);
  if (specs_.size() > kDspLongIdx)
    detail::prepare_decode_kernel(*loaded->kernels[kDspLongIdx]);
  else if (!encoder_only())
    loaded->device.dsp_long_tiles = 0;  // no _dsp_long kernel: every graph plans one block
  loaded->context = context;
  loaded->device_ordinal = device;
  loaded_ = std::move(loaded);
  if (config_.check_bounds && !bounds_)
    bounds_ = std::make_shared<DeviceBuffer>(sizeof(GaBoundsReport));  // zero-filled
  cache_ = &cache;
  prepared_ = true;
}

namespace {

// The split policy's grid for a configuration on a prepared device (null: not prepared):
// num_decodes decodes, or, with a divisor > 1, a batch split on the device over num_decodes
// request slots (detail::mixed_decode_grid; divisor 1 is decode_grid's grid).
// mixed: the decode of a batch with prefills (decode_grid_beside_prefill).
detail::DecodeGrid grid_of(const AttentionLayerConfig& c, const detail::DecodeDevice* device,
                           int num_decodes, const char* caller, int divisor = 1,
                           bool mixed = false) {
  GA_REQUIRE(device, std::string(caller) + ": call prepare() first (the policy needs the device)");
  // A layer without the _dsp kernel keeps the default sizing.
  if (divisor == 0 && !chooses_splits_on_device(c, divisor)) divisor = kMixedDecodeDivisor;
  const detail::DecodeGrid g = detail::mixed_decode_grid(
      num_decodes, divisor, c.num_kv_heads, c.num_heads / c.num_kv_heads * c.decode_query_len,
      c.max_model_len, c.window, c.head_size, c.kv_dtype, *device);
  return mixed ? detail::decode_grid_beside_prefill(g) : g;
}

}  // namespace

int AttentionBackend::mixed_decode_max_splits(int request_slots) const {
  return grid_of(config_, loaded_ ? &loaded_->device : nullptr, request_slots,
                 "mixed_decode_max_splits", mixed_decode_divisor_, true)
      .max_splits;
}

int AttentionBackend::mixed_decode_stages(int request_slots) const {
  return grid_of(config_, loaded_ ? &loaded_->device : nullptr, request_slots,
                 "mixed_decode_stages", mixed_decode_divisor_, true)
      .stages;
}

int AttentionBackend::mixed_decode_splits(int request_slots, int num_decodes, int prefill_tokens,
                                          int shortest_decode) const {
  const detail::DecodeGrid g = grid_of(config_, loaded_ ? &loaded_->device : nullptr, request_slots,
                                       "mixed_decode_splits", mixed_decode_divisor_, true);
  if (g.device_sms <= 0) return g.max_splits;
  const auto splits_at = [&](int sms) {
    const int room = ga_device_split_room(
        sms, prefill_tokens, config_.num_heads / config_.num_kv_heads,
        mixed_dsp_no_room_ ? 0 : detail::prefill_config(specs_[kPrefillIdx]).block_m,
        config_.num_kv_heads);
    return ga_device_split_splits(num_decodes, g.grid_y, room, g.max_splits);
  };
  const int two = splits_at(g.device_sms);
  // [policy: long splits] (templates/decode.cu; the kernel's seq_lens window is 128 rows, and
  // the count window's first 126 decodes)
  if (g.long_split_tokens > 0 &&
      !(num_decodes <= 126 && shortest_decode >= int64_t{two} * g.long_split_tokens))
    return splits_at(g.device_sms / 2);
  return two;
}

int AttentionBackend::decode_max_splits(int num_decodes) const {
  return grid_of(config_, loaded_ ? &loaded_->device : nullptr, num_decodes, "decode_max_splits")
      .max_splits;
}

int AttentionBackend::decode_stages(int num_decodes) const {
  return grid_of(config_, loaded_ ? &loaded_->device : nullptr, num_decodes, "decode_stages")
      .stages;
}

bool AttentionBackend::decode_cluster(int num_decodes) const {
  return grid_of(config_, loaded_ ? &loaded_->device : nullptr, num_decodes, "decode_cluster")
      .cluster;
}

size_t AttentionBackend::workspace_bytes() const {
  GA_REQUIRE(prepared_,
             "workspace_bytes: call prepare() first (the split policy needs the device)");
  if (encoder_only()) return 0;  // no decode: nothing to split
  // Host split: b decodes; device split: b request slots, sized by the divisor (at least the
  // host split's splits for every slot) or with the splits chosen on the device (partials for
  // the leading decodes that may split only).
  size_t most = 0;
  const int q = config_.decode_query_len;
  for (int b = 1; b <= config_.max_num_seqs; ++b) {
    const detail::DecodeGrid g =
        grid_of(config_, &loaded_->device, b, "workspace_bytes", mixed_decode_divisor_);
    const int rows = g.device_sms > 0 ? g.split_requests * q : b * q;
    most = std::max(most, detail::decode_workspace_bytes(rows, config_.num_heads, config_.head_size,
                                                         g.max_splits));
    most = std::max(most, detail::decode_workspace_bytes(b * q, config_.num_heads,
                                                         config_.head_size, decode_max_splits(b)));
  }
  return detail::layer_workspace(config_).total(most);
}

namespace {

// forward()'s steps, in the order forward() runs them. The checks all come before the first
// launch, so a bad call launches nothing.

// The metadata's request counts; returns how many requests the decode kernel covers: the
// decodes, or with a device split every request slot (the kernel skips the others).
int checked_decode_count(const AttentionLayerConfig& c, const AttentionMetadata& md) {
  const bool dev = md.device_split;
  const int num_decodes = dev ? md.num_reqs : md.num_decodes;
  GA_REQUIRE(md.num_reqs >= 0, "metadata: num_reqs " + str(md.num_reqs) + " must be >= 0");
  if (!dev) {
    GA_REQUIRE(md.num_decodes >= 0 && md.num_decodes <= md.num_reqs,
               "metadata: num_decodes " + str(md.num_decodes) + " must be in [0, num_reqs " +
                   str(md.num_reqs) + "]");
    GA_REQUIRE(md.num_decode_tokens >= md.num_decodes &&
                   md.num_decode_tokens <= int64_t{md.num_decodes} * c.decode_query_len,
               "metadata: num_decode_tokens " + str(md.num_decode_tokens) + " must be in [" +
                   str(md.num_decodes) + ", num_decodes * decode_query_len " +
                   str(md.num_decodes * c.decode_query_len) + "] (a decode has 1.." +
                   str(c.decode_query_len) + " query tokens)");
  }
  GA_REQUIRE(num_decodes <= c.max_num_seqs,
             std::string("metadata: ") + (dev ? "num_reqs " : "num_decodes ") + str(num_decodes) +
                 " exceeds max_num_seqs " + str(c.max_num_seqs) +
                 " that the workspace was sized for");
  return num_decodes;
}

// The query's shape and dtype, and the batch's token count against it.
void check_query(const AttentionLayerConfig& c, const TensorView& query,
                 const AttentionMetadata& md) {
  detail::require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  GA_REQUIRE(query.shape[1] == c.num_heads && query.shape[2] == c.head_size,
             "query " + query.describe() + " must have " + str(c.num_heads) + " heads of size " +
                 str(c.head_size));
  const ScalarType want =
      c.q_dtype == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3 : scalar_type_of(c.dtype);
  GA_REQUIRE(query.dtype == want,
             "query dtype " + std::string(to_string(query.dtype)) + " differs from the layer's " +
                 to_string(want) + (c.q_dtype == KvDType::kFp8E4M3 ? " (q_dtype fp8_e4m3)" : ""));
  const int64_t min_tokens = md.device_split ? 0 : md.num_decode_tokens;
  GA_REQUIRE(md.num_actual_tokens >= min_tokens && md.num_actual_tokens <= query.shape[0],
             "metadata: num_actual_tokens " + str(md.num_actual_tokens) + " must be in [" +
                 str(min_tokens) + ", query tokens " + str(query.shape[0]) + "]");
}

// The KV cache view against the layer, then the block table against max_seq_len.
detail::KvCacheShape check_paged_cache(const AttentionLayerConfig& c, const TensorView& kv_cache,
                                       const AttentionMetadata& md) {
  const detail::KvCacheShape kc = detail::check_kv_cache(kv_cache, c.dtype);
  GA_REQUIRE(kc.layout == c.layout && kc.kv_dtype == c.kv_dtype && kc.block_size == c.block_size &&
                 kc.num_kv_heads == c.num_kv_heads && kc.head_size == c.head_size,
             "kv_cache " + kv_cache.describe() + " (" + to_string(kc.layout) + ", kv " +
                 to_string(kc.kv_dtype) + ") does not match the layer: block size " +
                 str(c.block_size) + ", " + str(c.num_kv_heads) + " KV heads of size " +
                 str(c.head_size) + ", " + to_string(c.layout) + ", kv " + to_string(c.kv_dtype));
  detail::require_rank(md.block_table, 2, "block_table", "[num_reqs, max_blocks_per_seq]");
  GA_REQUIRE(md.max_seq_len >= 0 && md.max_seq_len <= md.block_table.shape[1] * c.block_size,
             "metadata: max_seq_len " + str(md.max_seq_len) + " does not fit block_table " +
                 md.block_table.describe() + " of " + str(c.block_size) + "-token blocks");
  return kc;
}

// The cache write's rows: none (key ndim 0), the batch's tokens, or with cross attention the
// encoder's tokens (key's rows, as many as vLLM's cross slot mapping holds).
struct CacheWriteRows {
  bool write = false;
  bool cross = false;
  int64_t rows = 0;
};
CacheWriteRows check_cache_write_rows(const AttentionLayerConfig& c, const TensorView& key,
                                      const TensorView& value, const AttentionMetadata& md) {
  CacheWriteRows w;
  w.write = key.ndim != 0;
  w.cross = c.attn_type == AttentionType::kEncoderDecoder;
  w.rows = md.num_actual_tokens;
  if (!w.write) return w;
  detail::require_rank(md.slot_mapping, 1, "slot_mapping", "[num_tokens]");
  detail::require_rank(key, 3, "key", "[num_tokens, num_kv_heads, head_size]");
  detail::require_rank(value, 3, "value", "[num_tokens, num_kv_heads, head_size]");
  detail::require_kv_dtype(key, value, c.dtype, "forward");
  if (w.cross) {
    w.rows = key.shape[0];
    GA_REQUIRE(value.shape[0] >= w.rows && md.slot_mapping.shape[0] >= w.rows,
               "cross attention writes key's " + str(w.rows) + " encoder rows: value " +
                   value.describe() + " and slot_mapping " + md.slot_mapping.describe() +
                   " need as many");
  }
  GA_REQUIRE(
      key.shape[0] >= w.rows && value.shape[0] >= w.rows && md.slot_mapping.shape[0] >= w.rows,
      "key " + key.describe() + ", value " + value.describe() + " and slot_mapping " +
          md.slot_mapping.describe() + " need num_actual_tokens " + str(md.num_actual_tokens) +
          " rows");
  return w;
}

// The views every kernel of the layer reads.
detail::AttentionViews layer_views(const AttentionLayerConfig& c, const TensorView& query,
                                   const TensorView& kv_cache, const TensorView& output,
                                   const AttentionMetadata& md) {
  detail::AttentionViews views{query,          kv_cache,       output, md.seq_lens,
                               md.block_table, c.alibi_slopes, c.sinks};
  views.non_causal = c.attn_type != AttentionType::kDecoder;
  views.blocksparse = c.blocksparse;
  return views;
}

// The decode launch without the fused write: the grid from the split policy, the layer's
// scalars, and the workspace split into counters and partials.
detail::DecodeLaunch decode_launch(const AttentionLayerConfig& c,
                                   const detail::AttentionViews& views, const AttentionMetadata& md,
                                   int num_decodes, const detail::DecodeGrid& grid, void* bounds,
                                   void* workspace, size_t workspace_size) {
  detail::DecodeLaunch d{views};
  d.num_decodes = num_decodes;
  if (c.decode_query_len > 1) {  // the multi-token kernel: rows from query_start_loc
    d.multi_token = true;
    d.max_query_len = c.decode_query_len;
  }
  d.device_split = md.device_split;
  d.device_sms = md.device_split ? grid.device_sms : 0;
  d.long_split_tokens = md.device_split ? grid.long_split_tokens : 0;
  if (d.multi_token || md.device_split) d.query_start_loc = md.query_start_loc;
  d.max_splits = grid.max_splits;
  d.stages = grid.stages;
  d.early_stages = grid.early_stages;
  d.ring_stages = grid.ring_stages;
  d.cluster = grid.cluster;
  d.early_trigger = grid.early_trigger;
  d.scale = c.scale;
  d.window = c.window;
  d.soft_cap = c.soft_cap;
  d.k_scale = c.k_scale;
  d.v_scale = c.v_scale;
  d.device_scales = detail::DeviceKvScales{c.k_scale_device, c.v_scale_device};
  d.q8 = detail::FpQueryScales{c.q_scale,   c.q_descale,          c.k_descale,
                               c.v_descale, c.descale_req_stride, c.descale_head_stride};
  d.bounds = bounds;
  const detail::LayerWorkspace ws = detail::layer_workspace(c);
  d.counters = workspace;
  d.workspace = workspace_size >= ws.partials ? static_cast<unsigned char*>(workspace) + ws.partials
                                              : nullptr;
  d.workspace_size = workspace_size >= ws.partials ? workspace_size - ws.partials : 0;
  return d;
}

// The workspace for this batch's decodes (its message names workspace_bytes(), which engines
// call), then the launch against the decode kernel's spec.
void check_decode(const AttentionLayerConfig& c, const AttentionSpec& spec,
                  const detail::DecodeLaunch& d, const detail::KvCacheShape& kc,
                  const void* workspace, size_t workspace_size) {
  const size_t need = detail::layer_workspace(c).total(
      detail::decode_workspace_bytes(detail::decode_partial_rows(spec, d, c.num_kv_heads),
                                     c.num_heads, c.head_size, d.max_splits));
  GA_REQUIRE(workspace != nullptr && workspace_size >= need,
             "forward: workspace of " + str(static_cast<int64_t>(workspace_size)) +
                 " bytes is smaller than the " + str(static_cast<int64_t>(need)) +
                 " this batch needs (allocate workspace_bytes())");
  detail::check_decode_launch(spec, d, kc, "forward");
}

// The prefill launch: the requests after the decodes (a device split: every request, the
// kernel skipping the decodes of up to decode_query_len tokens).
detail::PrefillLaunch prefill_launch(const AttentionLayerConfig& c,
                                     const detail::AttentionViews& views,
                                     const AttentionMetadata& md, void* bounds) {
  const bool dev = md.device_split;
  detail::PrefillLaunch pf{views};
  pf.query_start_loc = md.query_start_loc;
  pf.first_req = dev ? 0 : md.num_decodes;
  pf.num_reqs = md.num_reqs;
  pf.max_query_len = md.max_query_len;
  pf.device_split_q = dev ? c.decode_query_len : 0;
  pf.scale = c.scale;
  pf.window = c.window;
  pf.soft_cap = c.soft_cap;
  pf.k_scale = c.k_scale;
  pf.v_scale = c.v_scale;
  pf.device_scales = detail::DeviceKvScales{c.k_scale_device, c.v_scale_device};
  pf.q8 = detail::FpQueryScales{c.q_scale,   c.q_descale,          c.k_descale,
                                c.v_descale, c.descale_req_stride, c.descale_head_stride};
  pf.bounds = bounds;
  return pf;
}

bool has_prefills(const AttentionMetadata& md) {
  return md.device_split ? md.num_reqs > 0 : md.num_reqs > md.num_decodes;
}

void check_prefill(const AttentionSpec& spec, const detail::PrefillLaunch& pf,
                   const detail::KvCacheShape& kc, const AttentionMetadata& md) {
  GA_REQUIRE(md.device_split || md.max_query_len >= 1,
             "metadata: max_query_len " + str(md.max_query_len) +
                 " must be >= 1 when the batch has prefills");
  detail::check_prefill_launch(spec, pf, kc, "forward");
}

// The split counters must start at zero; every launch leaves them so. The first split launch on
// a workspace clears them (an asynchronous memset, stream-ordered and capturable), so a
// workspace that was not zero-filled cannot give wrong outputs.
void clear_split_counters_once(std::mutex& mu, std::vector<const void*>& cleared, void* workspace,
                               size_t counter_bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(cleared.begin(), cleared.end(), workspace) != cleared.end()) return;
  GA_CU_CHECK(detail::driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(workspace), 0,
                                               counter_bytes, stream));
  cleared.push_back(workspace);
}

}  // namespace

void AttentionBackend::forward(const TensorView& query, const TensorView& key,
                               const TensorView& value, const TensorView& kv_cache,
                               const TensorView& output, const AttentionMetadata& md,
                               void* workspace, size_t workspace_size, CUstream stream,
                               const TensorView& softmax_lse) const {
  GA_REQUIRE(prepared_, "forward: call prepare() before the first forward (and before capture)");
  GA_REQUIRE(config_.softmax_lse == (softmax_lse.ndim != 0),
             config_.softmax_lse
                 ? "forward: the layer writes the softmax LSE (config softmax_lse); pass "
                   "softmax_lse, fp32 [num_heads, num_tokens]"
                 : "forward: softmax_lse was given but the layer does not write it (set config "
                   "softmax_lse)");
  if (encoder_only()) return forward_encoder_only(query, key, value, output, md, stream);
  const AttentionLayerConfig& c = config_;
  const int num_decodes = checked_decode_count(c, md);
  check_query(c, query, md);
  const detail::KvCacheShape kc = check_paged_cache(c, kv_cache, md);
  const CacheWriteRows w = check_cache_write_rows(c, key, value, md);

  detail::AttentionViews views = layer_views(c, query, kv_cache, output, md);
  views.softmax_lse = softmax_lse;
  void* const bounds = bounds_ ? bounds_->data() : nullptr;
  const detail::DecodeDevice* device = loaded_ ? &loaded_->device : nullptr;
  detail::DecodeLaunch d = decode_launch(
      c, views, md, num_decodes,
      grid_of(config_, device, num_decodes, "forward", md.device_split ? mixed_decode_divisor_ : 1,
              has_prefills(md) || md.device_split),
      bounds, workspace, workspace_size);
  const bool decode = num_decodes > 0;
  // The mixed graphs' _dsp kernel keeps the prefill's blocks their multiprocessors (see
  // GaDeviceSplits) unless GRAPHATTN_MIXED_DSP_NO_ROOM is set.
  const int decode_idx =
      d.device_sms > 0 ? (d.long_split_tokens > 0 ? kDspLongIdx : kDspIdx) : kDecodeIdx;
  if (d.device_sms > 0 && !mixed_dsp_no_room_)
    d.prefill_block_m = detail::prefill_config(specs_[kPrefillIdx]).block_m;
  if (decode) check_decode(c, specs_[decode_idx], d, kc, workspace, workspace_size);
  const detail::PrefillLaunch pf = prefill_launch(c, views, md, bounds);
  const bool prefill = has_prefills(md);
  if (prefill) check_prefill(specs_[kPrefillIdx], pf, kc, md);

  // A decode-only step writes its new keys and values inside the decode kernel: one launch fewer
  // per layer. The kernel patches the new rows (rounded to fp8 for an fp8 cache) into its
  // shared-memory tile, so the write costs no wait. Batches with prefills run the cache write
  // kernel first.
  TensorView k = key, v = value;
  if (w.write) {
    k.shape[0] = w.rows;
    v.shape[0] = w.rows;
    detail::check_cache_write(k, v, kc, md.slot_mapping, c.k_scale, c.v_scale);
  }
  const bool fused_write = w.write && !w.cross && !md.device_split && decode && !prefill &&
                           !d.multi_token && md.num_actual_tokens == md.num_decodes;
  if (fused_write) {
    d.new_key = k;
    d.new_value = v;
    d.slot_mapping = md.slot_mapping;
    d.early_prologue = c.overlap_previous_kernel;
  } else if (w.write) {
    // The layer's own cache write kernel, loaded by prepare(): no lookup per call.
    detail::launch_cache_write(*loaded_->kernels[kWrite], k, v, kc, md.slot_mapping, c.k_scale,
                               c.v_scale, stream, bounds, d.device_scales);
  }
  if (decode && d.max_splits > 1 && !d.cluster)
    clear_split_counters_once(cleared_->mu, cleared_->addresses, workspace,
                              detail::layer_workspace(c).counters, stream);
  // A mixed batch (MixedBranches): the decode and the prefill follow the write, read the cache
  // only and write disjoint rows. Branch modes fork after the write and join before returning.
  const MixedBranches mode = mixed_->mode;
  if (decode && prefill && mode != MixedBranches::kSerial) {
    const detail::LoadedKernel& dk = *loaded_->kernels[decode_idx];
    const detail::LoadedKernel& pk = *loaded_->kernels[kPrefillIdx];
    if (mode == MixedBranches::kSerialPrefillFirst) {
      detail::enqueue_prefill(pk, pf, stream);
      detail::enqueue_decode(dk, d, stream);
      return;
    }
    const bool prefill_first =
        mode == MixedBranches::kPrefillFirst || mode == MixedBranches::kPrefillFirstHigh;
    const auto& drv = detail::driver();
    std::lock_guard<std::mutex> lock(mixed_->mu);
    MixedStreams::Side& side = mixed_->side(loaded_->context, stream);
    GA_CU_CHECK(drv.cuEventRecord(side.fork, stream));
    GA_CU_CHECK(drv.cuStreamWaitEvent(side.stream, side.fork, 0));
    // From here the side stream is forked: join it even when a launch throws, so that the
    // caller's stream (and a capture on it) stays ordered after everything that was launched.
    struct Join {
      const detail::DriverApi& drv;
      MixedStreams::Side& side;
      CUstream stream;
      bool done = false;
      void operator()() {
        done = true;
        GA_CU_CHECK(drv.cuEventRecord(side.join, side.stream));
        GA_CU_CHECK(drv.cuStreamWaitEvent(stream, side.join, 0));
      }
      ~Join() {
        if (!done) {
          drv.cuEventRecord(side.join, side.stream);
          drv.cuStreamWaitEvent(stream, side.join, 0);
        }
      }
    } join{drv, side, stream};
    if (prefill_first) {
      detail::enqueue_prefill(pk, pf, side.stream);
      detail::enqueue_decode(dk, d, stream);
    } else {
      detail::enqueue_decode(dk, d, stream);
      detail::enqueue_prefill(pk, pf, side.stream);
    }
    join();
    return;
  }
  if (decode) detail::enqueue_decode(*loaded_->kernels[decode_idx], d, stream);
  if (prefill) detail::enqueue_prefill(*loaded_->kernels[kPrefillIdx], pf, stream);
}

void AttentionBackend::forward_encoder_only(const TensorView& query, const TensorView& key,
                                            const TensorView& value, const TensorView& output,
                                            const AttentionMetadata& md, CUstream stream) const {
  const AttentionLayerConfig& c = config_;
  GA_REQUIRE(key.ndim != 0 && value.ndim != 0,
             "forward: an encoder-only layer has no KV cache; key and value (the batch's tokens, "
             "[num_tokens, num_kv_heads, head_size]) are required");
  detail::require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  detail::require_rank(key, 3, "key", "[num_tokens, num_kv_heads, head_size]");
  GA_REQUIRE(query.shape[1] == c.num_heads && query.shape[2] == c.head_size &&
                 key.shape[1] == c.num_kv_heads,
             "query " + query.describe() + " and key " + key.describe() + " must have " +
                 str(c.num_heads) + " and " + str(c.num_kv_heads) + " heads of size " +
                 str(c.head_size));
  GA_REQUIRE(query.dtype == scalar_type_of(c.dtype),
             "query dtype " + std::string(to_string(query.dtype)) + " differs from the layer's " +
                 to_string(c.dtype));
  GA_REQUIRE(md.num_reqs >= 0 && md.num_actual_tokens <= query.shape[0] &&
                 md.num_actual_tokens <= key.shape[0],
             "metadata: num_actual_tokens " + str(md.num_actual_tokens) + " exceeds query " +
                 query.describe() + " or key " + key.describe());
  detail::DensePrefillLaunch a;
  a.query = query;
  a.key = key;
  a.value = value;
  a.output = output;
  a.query_start_loc = md.query_start_loc;
  a.num_reqs = md.num_reqs;
  a.max_query_len = md.max_query_len;
  a.scale = c.scale;
  a.alibi_slopes = c.alibi_slopes;
  a.sinks = c.sinks;
  GA_REQUIRE(a.query_start_loc.ndim == 1,
             "metadata: query_start_loc " + md.query_start_loc.describe() +
                 " must be [num_reqs + 1] int32 (each sequence's tokens)");
  const AttentionSpec spec = detail::dense_prefill_spec(a, c.arch);
  GA_REQUIRE(spec == specs_[0], "forward: the views need kernel " + spec.to_string() +
                                    " but the layer prepared " + specs_[0].to_string());
  detail::enqueue_dense_prefill(*loaded_->kernels[0], a, stream);
}

BoundsViolation AttentionBackend::take_bounds_violation() const {
  GA_REQUIRE(config_.check_bounds,
             "take_bounds_violation: the backend is not in checked mode (set "
             "AttentionLayerConfig::check_bounds or GRAPHATTN_CHECK_BOUNDS=1)");
  GA_REQUIRE(bounds_ != nullptr, "take_bounds_violation: call prepare() first");
  const auto& d = detail::driver();
  GA_CU_CHECK(d.cuCtxSynchronize());
  GaBoundsReport r{};
  bounds_->download(&r, sizeof r);
  BoundsViolation v;
  if (r.found) {
    v.kind = r.kind == 1 ? BoundsViolation::Kind::kBlockId : BoundsViolation::Kind::kSlot;
    v.request = r.request;
    v.position = r.position;
    v.value = r.value;
    GA_CU_CHECK(d.cuMemsetD8(bounds_->ptr(), 0, sizeof r));
    GA_CU_CHECK(d.cuCtxSynchronize());
  }
  return v;
}

std::string BoundsViolation::describe() const {
  switch (kind) {
    case Kind::kNone:
      return "no block id or slot outside the cache";
    case Kind::kBlockId:
      return "block id " + str(value) + " of request " + str(request) +
             " (for the key at position " + str(position) + ") is outside the cache";
    case Kind::kSlot:
      return "slot " + str(value) + " of batch token " + str(position) +
             (request >= 0 ? " (decode request " + str(request) + ")" : std::string()) +
             " is outside the cache";
  }
  return "?";
}

}  // namespace graphattn
