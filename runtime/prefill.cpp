// SPDX-License-Identifier: Apache-2.0
// Host side of the prefill kernel: checks the views, derives the spec, launches.
#include "runtime/prefill.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/env_flag.hpp"
#include "core/nvrtc_options.hpp"
#include "core/text.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/driver.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn::detail {
namespace {

void require_int32_vector(const TensorView& t, const char* name, int64_t min_len,
                          const char* shape) {
  require_rank(t, 1, name, shape);
  GA_REQUIRE(t.dtype == ScalarType::kInt32,
             std::string(name) + " must be int32, got " + to_string(t.dtype));
  GA_REQUIRE(t.strides[0] == 1, std::string(name) + " must be contiguous, got " + t.describe());
  GA_REQUIRE(t.shape[0] >= min_len, std::string(name) + " " + t.describe() + " needs at least " +
                                        str(min_len) + " entries for the requests launched");
}

// The launch grid: x = row tiles of the longest query, y = requests, z = KV heads.
struct PrefillGrid {
  int64_t x = 0, y = 0, z = 0;
};
PrefillGrid prefill_grid(const AttentionSpec& spec, int64_t max_query_len, int64_t num_reqs,
                         int64_t num_kv_heads) {
  const int64_t rows = max_query_len * spec.group;
  const int64_t block_m = prefill_config(spec).block_m;
  return {(rows + block_m - 1) / block_m, num_reqs, num_kv_heads};
}
// A batch split on the device (device_split_q > 0): x = room for every row tile the query's
// tokens can make, y = 1. Each prefill of q > device_split_q tokens has ceil(q * group / block_m)
// <= q * group / block_m + 1 row tiles, and at most num_tokens / (device_split_q + 1) requests
// are prefills.
PrefillGrid prefill_grid(const AttentionSpec& spec, const PrefillLaunch& a, int64_t num_kv_heads) {
  if (a.device_split_q > 0) {
    const int64_t tokens = a.query.shape[0], block_m = prefill_config(spec).block_m;
    const int64_t prefills =
        std::min<int64_t>(a.num_reqs - a.first_req, tokens / (int64_t{a.device_split_q} + 1));
    return {(tokens * spec.group + block_m - 1) / block_m + prefills, prefills > 0 ? 1 : 0,
            num_kv_heads};
  }
  return prefill_grid(spec, a.max_query_len, a.num_reqs - a.first_req, num_kv_heads);
}

void require_grid_fits(const PrefillGrid& g) {
  GA_REQUIRE(g.x < (int64_t{1} << 31) && g.y <= 65535 && g.z <= 65535,
             "prefill launch too large: " + str(g.x) + " row tiles, " + str(g.y) +
                 " requests (at most 65535), " + str(g.z) + " KV heads (at most 65535)");
}

// The scales of a prefill launch: k_scale folds into the score scale, v_scale into the output.
void set_prefill_scales(PrefillParams& p, float scale, float k_scale, float v_scale) {
  p.scale_log2 = scale * k_scale * 1.4426950408889634f;
  p.scale = scale * k_scale;
  p.v_scale = v_scale;
}

std::atomic<int> g_tma_override{-1};

static_assert(sizeof(GaTensorMap) == sizeof(CUtensorMap) && alignof(GaTensorMap) >= 64,
              "GaTensorMap must hold a CUtensorMap");

// The tensor map of one half (key or value) of a paged flash-layout 16-bit cache for the TMA
// prefill (params.h, ga_prefill_sm90_tma: 16-bit only): dimensions (head_size, token in block,
// KV head, block), the middle two in increasing stride (token_dim 1 or 2, GaPrefillTma), boxes
// of 128 bytes (64 elements) x `rows` tokens, 128-byte swizzle.
// False (the kernel then gathers every tile with cp.async) where TMA cannot address the cache:
// data not 16-byte aligned, a stride not a multiple of 16 bytes or past 2^40, or a map the
// driver refuses.
bool encode_cache_map(GaTensorMap& map, const void* data, int64_t head_size, int64_t block_size,
                      int64_t num_kv_heads, int64_t num_blocks, const PagedKvView& kv, int rows,
                      int& token_dim) {
  constexpr int64_t elem_bytes = 2;
  const int64_t tok = kv.cache_token_stride * elem_bytes, head = kv.cache_head_stride * elem_bytes,
                blk = kv.cache_block_stride * elem_bytes;
  const auto fits = [](int64_t s) { return s > 0 && s % 16 == 0 && s < (int64_t{1} << 40); };
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0 || !fits(tok) || !fits(head) || !fits(blk) ||
      num_blocks <= 0 || num_blocks > (int64_t{1} << 31))
    return false;
  token_dim = tok <= head ? 1 : 2;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_size),
                              static_cast<cuuint64_t>(token_dim == 1 ? block_size : num_kv_heads),
                              static_cast<cuuint64_t>(token_dim == 1 ? num_kv_heads : block_size),
                              static_cast<cuuint64_t>(num_blocks)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(std::min(tok, head)),
                                 static_cast<cuuint64_t>(std::max(tok, head)),
                                 static_cast<cuuint64_t>(blk)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(128 / elem_bytes),
                             static_cast<cuuint32_t>(token_dim == 1 ? rows : 1),
                             static_cast<cuuint32_t>(token_dim == 1 ? 1 : rows), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return driver().cuTensorMapEncodeTiled(
             reinterpret_cast<CUtensorMap*>(&map), CU_TENSOR_MAP_DATA_TYPE_UINT16, 4,
             const_cast<void*>(data), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The maps of a TMA prefill launch over p's cache (enabled 0 when either cannot be built, or
// TMA is switched off). Built for every launch from the launch's own views: nothing is cached,
// so no launch ever gets another cache's map; a captured graph keeps its capture's maps in its
// kernel node's parameters, valid while that cache is.
GaPrefillTma prefill_tma_maps(const AttentionSpec& spec, const PrefillParams& p,
                              int64_t num_kv_heads) {
  GaPrefillTma t{};
  if (!prefill_tma_enabled()) return t;
  const int rows = ga_prefill_sm90_tma_rows(spec.block_size, spec.head_size, spec.q_fp8);
  int tk = 0, tv = 0;
  t.enabled = encode_cache_map(t.key, p.kv.key_cache, spec.head_size, spec.block_size, num_kv_heads,
                               p.kv.num_blocks, p.kv, rows, tk) &&
              encode_cache_map(t.value, p.kv.value_cache, spec.head_size, spec.block_size,
                               num_kv_heads, p.kv.num_blocks, p.kv, rows, tv) &&
              tk == tv;
  t.token_dim = tk;
  return t;
}

template <typename Params>
void launch_prefill_grid(const LoadedKernel& k, const PrefillGrid& g, const Params& p,
                         CUstream stream) {
  const PrefillConfig cfg = prefill_config(k.compiled->spec);
  ensure_shared_limit(k, cfg.shared_bytes);
  const auto u = [](int64_t v) { return static_cast<unsigned>(v); };
  launch(k, LaunchShape{u(g.x), u(g.y), u(g.z), u(cfg.threads), u(cfg.shared_bytes)}, stream, p);
}

}  // namespace

bool prefill_uses_tma(const AttentionSpec& spec) {
  // The cheap conditions first: this runs for every launch.
  return spec.arch == 90 && spec.layout != KvLayout::kLegacy && !spec.block_sparse &&
         !spec.dense_kv &&
         ga_prefill_sm90_tma_rows(spec.block_size, spec.head_size, spec.q_fp8) > 0 &&
         select_prefill_kernel(spec) == PrefillKernel::kWgmma;
}

bool prefill_tma_enabled() {
  const int o = g_tma_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool on = [] {
    const char* v = std::getenv("GRAPHATTN_PREFILL_TMA");
    return v == nullptr || *v == '\0' || env_flag("GRAPHATTN_PREFILL_TMA");
  }();
  return on;
}

void set_prefill_tma_override(int mode) {
  g_tma_override.store(mode < 0 ? -1 : mode != 0 ? 1 : 0, std::memory_order_relaxed);
}

PrefillConfig prefill_config(const AttentionSpec& spec) {
  // The templates size their tiles with the same params.h functions.
  const int d = spec.head_size;
  switch (select_prefill_kernel(spec)) {
    case PrefillKernel::kNone:
      break;
    case PrefillKernel::kWgmma: {
      const bool fp8 = spec.q_fp8;  // e4m3 q over an fp8 cache: fp8 tiles and the V transpose
      const bool heavy = fp8 && (spec.soft_cap || spec.check_bounds);  // two consumers (params.h)
      // e4m3 (-DGA_PREFILL_SM90_PERSIST=3, the default): the persistent kernel's output buffer
      const int o_stage =
          fp8 && prefill_sm90_persist() == 3 ? ga_prefill_sm90_out_stage_bytes(d, fp8, heavy) : 0;
      return {ga_prefill_sm90_block_m(d, fp8, heavy), ga_prefill_sm90_block_n(d, fp8),
              ga_prefill_sm90_threads(d, fp8, heavy),
              ga_prefill_sm90_smem_bytes(d, fp8, heavy) + o_stage};
    }
    case PrefillKernel::kMmaSync: {
      const bool fp8 = spec.kv_dtype != KvDType::kAuto;
      return {ga_prefill_block_m(d), ga_prefill_block_n(d), GA_PREFILL_THREADS,
              ga_prefill_smem_bytes(d, fp8)};
    }
  }
  throw Error("prefill_config: " + spec.to_string() + " is not a valid prefill spec");
}

AttentionSpec prefill_spec(const PrefillLaunch& a, int arch) {
  KernelFeatures f =
      launch_features(arch, a.bounds != nullptr, a.alibi_slopes != nullptr, a.sinks != nullptr);
  f.non_causal = a.non_causal;
  f.softmax_lse = a.softmax_lse.ndim != 0;
  return attention_spec_for(KernelKind::kPrefill, a.query, a.output, a.kv_cache, a.window,
                            a.soft_cap, f);
}

void check_prefill_launch(const AttentionSpec& spec, const PrefillLaunch& a, const KvCacheShape& kc,
                          const char* where) {
  require_launch_kernel(KernelKind::kPrefill, spec, a, kc, where);
  GA_REQUIRE(a.output.shape[1] == a.query.shape[1] && a.output.shape[2] == a.query.shape[2] &&
                 a.output.shape[0] >= a.query.shape[0],
             "output " + a.output.describe() + " does not match query " + a.query.describe());
  GA_REQUIRE(a.first_req >= 0 && a.num_reqs >= a.first_req,
             "requests [" + str(a.first_req) + ", " + str(a.num_reqs) + ") are not a valid range");
  GA_REQUIRE(a.max_query_len >= 0, "max_query_len " + str(a.max_query_len) + " must be >= 0");
  GA_REQUIRE(a.device_split_q >= 0, "device_split_q " + str(a.device_split_q) + " must be >= 0");
  require_int32_vector(a.query_start_loc, "query_start_loc", a.num_reqs + 1, "[num_reqs + 1]");
  require_int32_vector(a.seq_lens, "seq_lens", a.num_reqs, "[num_reqs]");
  require_rank(a.block_table, 2, "block_table", "[num_reqs, max_blocks_per_seq]");
  GA_REQUIRE(a.block_table.dtype == ScalarType::kInt32 && a.block_table.strides[1] == 1 &&
                 a.block_table.shape[0] >= a.num_reqs,
             "block_table " + a.block_table.describe() +
                 " must be int32 with contiguous rows and at least " + str(a.num_reqs) + " rows");
  require_grid_fits(prefill_grid(spec, a, kc.num_kv_heads));
}

void enqueue_prefill(const LoadedKernel& k, const PrefillLaunch& a, CUstream stream) {
  PrefillParams p{};
  set_paged_attention_views(p, a);
  enqueue_prefill_params(k, a, p, a.kv_cache.shape[3], stream);
}

void enqueue_prefill_params(const LoadedKernel& k, const PrefillLaunch& a, PrefillParams p,
                            int64_t num_kv_heads, CUstream stream) {
  const AttentionSpec& spec = k.compiled->spec;
  const bool fp8 = spec.kv_dtype != KvDType::kAuto;
  const PrefillGrid g = prefill_grid(spec, a, num_kv_heads);
  if (g.x == 0 || g.y == 0) return;
  p.query_start_loc = static_cast<const int*>(a.query_start_loc.data);
  p.first_req = a.first_req;
  p.num_kv_heads = static_cast<int>(g.z);
  p.device_split_q = a.device_split_q;
  p.num_reqs = a.num_reqs - a.first_req;
  // A device k scale is multiplied in by the kernel (ga_prefill_scales), in the host's order.
  // (An e4m3 query's k_descale, likewise: the kernel multiplies it in, pf_q8_scales.)
  const bool device_k =
      fp8 && (a.device_scales.k != nullptr || (spec.q_fp8 && a.q8.k_descale != nullptr));
  set_prefill_scales(p, a.scale, fp8 && !device_k ? a.k_scale : 1.0f, fp8 ? a.v_scale : 1.0f);
  if (fp8)
    p.scales = {spec.q_fp8 && a.q8.k_descale != nullptr ? nullptr : a.device_scales.k,
                a.device_scales.v};
  p.soft_cap = a.soft_cap;
  p.window = a.window;
  p.bounds = static_cast<GaBoundsReport*>(a.bounds);
  if (spec.q_fp8) {  // the e4m3 query's kernel takes its descales after the common block (no TMA)
    const PrefillQ8Params p8{p, query_scales_of(a.q8)};
    if (prefill_sm90_persist() >= 2 && select_prefill_kernel(spec) == PrefillKernel::kWgmma) {
      // Compiled persistent (prefill_sm90.cu, PW_PERSIST): one block per multiprocessor walks
      // the grid's tiles; a device split keeps one block per tile (persist_x 0).
      PrefillQ8PersistParams pp{p8, 0};
      PrefillGrid pg = g;
      if (a.device_split_q == 0) {
        const auto& d = driver();
        CUdevice dev;
        GA_CU_CHECK(d.cuCtxGetDevice(&dev));
        int sms = 0;
        GA_CU_CHECK(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
        pp.persist_x = static_cast<int>(g.x);
        pg = {std::min<int64_t>(g.x * g.y * g.z, std::max(1, sms)), 1, 1};
      }
      launch_prefill_grid(k, pg, pp, stream);
    } else {
      launch_prefill_grid(k, g, p8, stream);
    }
  } else if (prefill_uses_tma(spec)) {
    launch_prefill_grid(k, g, GaPrefillTmaParams<PrefillParams>{prefill_tma_maps(spec, p, g.z), p},
                        stream);
  } else {
    launch_prefill_grid(k, g, p, stream);
  }
}

AttentionSpec dense_prefill_spec(const DensePrefillLaunch& a, int arch) {
  require_rank(a.query, 3, "query", "[num_tokens, num_heads, head_size]");
  require_rank(a.key, 3, "key", "[num_kv_tokens, num_kv_heads, head_size]");
  require_rank(a.value, 3, "value", "[num_kv_tokens, num_kv_heads, head_size]");
  const DType dtype = dtype_of(a.query.dtype);
  require_kv_dtype(a.key, a.value, dtype, "dense attention");
  GA_REQUIRE(a.value.shape[0] == a.key.shape[0] && a.value.shape[1] == a.key.shape[1] &&
                 a.value.shape[2] == a.key.shape[2] && a.value.strides[0] == a.key.strides[0] &&
                 a.value.strides[1] == a.key.strides[1],
             "value " + a.value.describe() + " must have the shape and strides of key " +
                 a.key.describe());
  require_vector_access(a.key, "key");
  require_vector_access(a.value, "value");
  GA_REQUIRE(a.num_reqs >= 0, "num_reqs " + str(a.num_reqs) + " must be >= 0");
  GA_REQUIRE(a.max_query_len >= 0, "max_query_len " + str(a.max_query_len) + " must be >= 0");
  if (a.query_start_loc.ndim != 0) {
    require_int32_vector(a.query_start_loc, "query_start_loc", a.num_reqs + 1, "[num_reqs + 1]");
  } else {
    // A uniform batch: every row is addressed from the lengths, so they must fit the views.
    GA_REQUIRE(a.uniform_kv_len >= 0, "kv length " + str(a.uniform_kv_len) + " must be >= 0");
    GA_REQUIRE(int64_t{a.num_reqs} * a.max_query_len <= a.query.shape[0] &&
                   int64_t{a.num_reqs} * a.uniform_kv_len <= a.key.shape[0],
               "a uniform batch of " + str(a.num_reqs) + " x " + str(a.max_query_len) +
                   " queries and " + str(a.uniform_kv_len) + " keys does not fit query " +
                   a.query.describe() + " and key " + a.key.describe());
  }
  // The dense kernel reads no cache: the shape a cache of these keys would have stands in for
  // the checks and the spec (block size, layout and element type are the canonical ones).
  KvCacheShape kc;
  kc.block_size = 16;
  kc.num_kv_heads = a.key.shape[1];
  kc.head_size = a.key.shape[2];
  kc.dtype = dtype;
  GA_REQUIRE(kc.num_kv_heads > 0, "key " + a.key.describe() + " has no KV heads");
  KernelFeatures f = launch_features(arch, false, a.alibi_slopes != nullptr, a.sinks != nullptr);
  f.non_causal = true;
  f.dense_kv = true;
  const AttentionSpec spec =
      attention_spec_for(KernelKind::kPrefill, a.query, a.output, kc, 0, 0.0f, f);
  GA_REQUIRE(a.output.shape[1] == a.query.shape[1] && a.output.shape[2] == a.query.shape[2] &&
                 a.output.shape[0] >= a.query.shape[0],
             "output " + a.output.describe() + " does not match query " + a.query.describe());
  require_query_access(a.query);
  require_vector_access(a.output, "output");
  require_launch_scales(spec, a.scale, 1.0f, 1.0f);
  require_grid_fits(prefill_grid(spec, a.max_query_len, a.num_reqs, kc.num_kv_heads));
  return spec;
}

void enqueue_dense_prefill(const LoadedKernel& k, const DensePrefillLaunch& a, CUstream stream) {
  const AttentionSpec& spec = k.compiled->spec;
  const PrefillGrid g = prefill_grid(spec, a.max_query_len, a.num_reqs, a.key.shape[1]);
  if (g.x == 0 || g.y == 0) return;
  PrefillParams p{};
  set_query_output_views(p, a.query, a.output, a.alibi_slopes, a.sinks);
  p.kv.key_cache = a.key.data;
  p.kv.value_cache = a.value.data;
  p.kv.cache_token_stride = a.key.strides[0];
  p.kv.cache_head_stride = a.key.strides[1];
  p.query_start_loc =
      a.query_start_loc.ndim != 0 ? static_cast<const int*>(a.query_start_loc.data) : nullptr;
  p.uniform_q_len = a.max_query_len;
  p.uniform_kv_len = a.uniform_kv_len;
  p.num_kv_heads = static_cast<int>(g.z);
  set_prefill_scales(p, a.scale, 1.0f, 1.0f);
  launch_prefill_grid(k, g, p, stream);
}

void launch_prefill(const LoadedKernel& k, const PrefillLaunch& a, CUstream stream) {
  const KvCacheShape kc = check_direct_launch(k, a.query, a.output, a.kv_cache, "launch_prefill");
  check_prefill_launch(k.compiled->spec, a, kc, "launch_prefill");
  enqueue_prefill(k, a, stream);
}

}  // namespace graphattn::detail

namespace graphattn {

void prefill_attention(const TensorView& query, const TensorView& kv_cache,
                       const TensorView& output, const TensorView& query_start_loc,
                       const TensorView& seq_lens, const TensorView& block_table, int first_req,
                       int num_reqs, int max_query_len, float scale, int window, float soft_cap,
                       float k_scale, float v_scale, CUstream stream, KernelCache& cache,
                       const float* alibi_slopes, const float* sinks, const float* k_scale_device,
                       const float* v_scale_device, bool causal, const TensorView& softmax_lse) {
  detail::PrefillLaunch a{{query, kv_cache, output, seq_lens, block_table, alibi_slopes, sinks}};
  a.non_causal = !causal;
  a.softmax_lse = softmax_lse;
  a.query_start_loc = query_start_loc;
  a.first_req = first_req;
  a.num_reqs = num_reqs;
  a.max_query_len = max_query_len;
  a.scale = scale;
  a.window = window;
  a.soft_cap = soft_cap;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  a.device_scales = {k_scale_device, v_scale_device};
  detail::require_device_scales(a.device_scales, "prefill_attention");
  detail::require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  const detail::KvCacheShape kc = detail::check_kv_cache(kv_cache, dtype_of(query.dtype));
  KernelFeatures f = detail::launch_features(current_device_arch(), false, alibi_slopes != nullptr,
                                             sinks != nullptr);
  f.non_causal = !causal;
  f.softmax_lse = softmax_lse.ndim != 0;
  const AttentionSpec spec =
      detail::attention_spec_for(KernelKind::kPrefill, query, output, kc, window, soft_cap, f);
  const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);
  detail::check_prefill_launch(spec, a, kc, "prefill_attention");
  detail::enqueue_prefill(k, a, stream);
}

namespace {

void run_dense(const detail::DensePrefillLaunch& a, CUstream stream, KernelCache& cache) {
  // Every argument is checked before the device is asked for its arch, so a bad call fails the
  // same way on a machine without a GPU; sm_90 stands in for it (as in
  // attention_config_problem).
  detail::dense_prefill_spec(a, 90);
  const AttentionSpec spec = detail::dense_prefill_spec(a, current_device_arch());
  detail::enqueue_dense_prefill(detail::load_kernel(spec, cache, stream), a, stream);
}

// [batch, len, heads, head_size] as [batch * len, heads, head_size]; `name` for messages.
TensorView flatten_batch(const TensorView& t, const char* name) {
  detail::require_rank(t, 4, name, "[batch, seq_len, heads, head_size]");
  GA_REQUIRE(t.shape[0] <= 1 || t.strides[0] == t.shape[1] * t.strides[1],
             std::string(name) + " " + t.describe() +
                 " cannot be viewed as [batch * seq_len, heads, head_size]: its batch stride "
                 "must be seq_len x its token stride");
  TensorView f = t;
  f.ndim = 3;
  f.shape[0] = t.shape[0] * t.shape[1];
  for (int d = 1; d < 3; ++d) {
    f.shape[d] = t.shape[d + 1];
    f.strides[d] = t.strides[d + 1];
  }
  f.strides[0] = t.strides[1];
  return f;
}

}  // namespace

void encoder_attention(const TensorView& query, const TensorView& key, const TensorView& value,
                       const TensorView& output, const TensorView& query_start_loc,
                       int max_query_len, float scale, CUstream stream, KernelCache& cache,
                       const float* alibi_slopes, const float* sinks) {
  detail::require_rank(query_start_loc, 1, "query_start_loc", "[num_reqs + 1]");
  GA_REQUIRE(query_start_loc.shape[0] >= 1,
             "query_start_loc " + query_start_loc.describe() + " needs num_reqs + 1 >= 1 entries");
  detail::DensePrefillLaunch a;
  a.query = query;
  a.key = key;
  a.value = value;
  a.output = output;
  a.query_start_loc = query_start_loc;
  a.num_reqs = static_cast<int>(query_start_loc.shape[0] - 1);
  a.max_query_len = max_query_len;
  a.scale = scale;
  a.alibi_slopes = alibi_slopes;
  a.sinks = sinks;
  run_dense(a, stream, cache);
}

void multi_head_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, float scale, CUstream stream, KernelCache& cache) {
  detail::DensePrefillLaunch a;
  a.query = flatten_batch(q, "q");
  a.key = flatten_batch(k, "k");
  a.value = flatten_batch(v, "v");
  a.output = flatten_batch(out, "out");
  GA_REQUIRE(k.shape[0] == q.shape[0] && v.shape[0] == q.shape[0] && out.shape[0] == q.shape[0] &&
                 out.shape[1] == q.shape[1],
             "q " + q.describe() + ", k " + k.describe() + ", v " + v.describe() + " and out " +
                 out.describe() + " must agree in batch (and out with q in seq_len)");
  GA_REQUIRE(q.shape[1] <= INT32_MAX && k.shape[1] <= INT32_MAX,
             "q " + q.describe() + " / k " + k.describe() + ": sequence lengths must fit int32");
  a.num_reqs = static_cast<int>(q.shape[0]);
  a.max_query_len = static_cast<int>(q.shape[1]);
  a.uniform_kv_len = static_cast<int>(k.shape[1]);
  a.scale = scale;
  run_dense(a, stream, cache);
}

}  // namespace graphattn
