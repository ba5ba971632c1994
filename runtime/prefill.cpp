// Host side of the prefill kernel: checks the views, derives the spec, launches.
#include "runtime/prefill.hpp"

#include <cmath>
#include <string>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "jit_cache/prefill_kernels.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn::detail {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

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
PrefillGrid prefill_grid(const PrefillConfig& cfg, const AttentionSpec& spec,
                         const PrefillLaunch& a) {
  const int64_t rows = static_cast<int64_t>(a.max_query_len) * spec.group;
  return {(rows + cfg.block_m - 1) / cfg.block_m, a.num_reqs - a.first_req, a.kv_cache.shape[3]};
}

}  // namespace

PrefillConfig prefill_config(const AttentionSpec& spec) {
  // The templates size their tiles with the same params.h functions.
  const int d = spec.head_size;
  switch (select_prefill_kernel(spec)) {
    case PrefillKernel::kNone:
      break;
    case PrefillKernel::kWgmma:
      return {GA_PREFILL_SM90_BLOCK_M, ga_prefill_sm90_block_n(d), GA_PREFILL_SM90_THREADS,
              ga_prefill_sm90_smem_bytes(d)};
    case PrefillKernel::kMmaSync: {
      const bool fp8 = spec.kv_dtype != KvDType::kAuto;
      return {ga_prefill_block_m(d), ga_prefill_block_n(d), GA_PREFILL_THREADS,
              ga_prefill_smem_bytes(d, fp8)};
    }
  }
  throw Error("prefill_config: " + spec.to_string() + " is not a valid prefill spec");
}

AttentionSpec prefill_spec(const PrefillLaunch& a, int arch) {
  return attention_spec_for(KernelKind::kPrefill, a.query, a.output, a.kv_cache, a.window,
                            a.soft_cap, arch, a.bounds != nullptr, a.alibi_slopes != nullptr,
                            a.sinks != nullptr);
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
  require_int32_vector(a.query_start_loc, "query_start_loc", a.num_reqs + 1, "[num_reqs + 1]");
  require_int32_vector(a.seq_lens, "seq_lens", a.num_reqs, "[num_reqs]");
  require_rank(a.block_table, 2, "block_table", "[num_reqs, max_blocks_per_seq]");
  GA_REQUIRE(a.block_table.dtype == ScalarType::kInt32 && a.block_table.strides[1] == 1 &&
                 a.block_table.shape[0] >= a.num_reqs,
             "block_table " + a.block_table.describe() +
                 " must be int32 with contiguous rows and at least " + str(a.num_reqs) + " rows");
  const PrefillGrid g = prefill_grid(prefill_config(spec), spec, a);
  GA_REQUIRE(g.x < (int64_t{1} << 31) && g.y <= 65535 && g.z <= 65535,
             "prefill launch too large: " + str(g.x) + " row tiles, " + str(g.y) +
                 " requests (at most 65535), " + str(g.z) + " KV heads (at most 65535)");
}

void enqueue_prefill(const LoadedKernel& k, const PrefillLaunch& a, CUstream stream) {
  const AttentionSpec& spec = k.compiled->spec;
  const bool fp8 = spec.kv_dtype != KvDType::kAuto;
  const PrefillConfig cfg = prefill_config(spec);
  const PrefillGrid g = prefill_grid(cfg, spec, a);
  if (g.x == 0 || g.y == 0) return;

  PrefillParams p{};
  set_paged_attention_views(p, a);
  p.query_start_loc = static_cast<const int*>(a.query_start_loc.data);
  p.first_req = a.first_req;
  p.num_kv_heads = static_cast<int>(g.z);
  const float qk_scale = a.scale * (fp8 ? a.k_scale : 1.0f);
  p.scale_log2 = qk_scale * 1.4426950408889634f;
  p.scale = qk_scale;
  p.soft_cap = a.soft_cap;
  p.v_scale = fp8 ? a.v_scale : 1.0f;
  p.window = a.window;
  p.bounds = static_cast<GaBoundsReport*>(a.bounds);

  ensure_shared_limit(k, cfg.shared_bytes);
  const auto u = [](int64_t v) { return static_cast<unsigned>(v); };
  launch(k, LaunchShape{u(g.x), u(g.y), u(g.z), u(cfg.threads), u(cfg.shared_bytes)}, stream, p);
}

void launch_prefill(const LoadedKernel& k, const PrefillLaunch& a, CUstream stream) {
  const KvCacheShape kc = check_direct_launch(k, a.query, a.kv_cache, "launch_prefill");
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
                       const float* alibi_slopes, const float* sinks) {
  detail::PrefillLaunch a{{query, kv_cache, output, seq_lens, block_table, alibi_slopes, sinks}};
  a.query_start_loc = query_start_loc;
  a.first_req = first_req;
  a.num_reqs = num_reqs;
  a.max_query_len = max_query_len;
  a.scale = scale;
  a.window = window;
  a.soft_cap = soft_cap;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  detail::require_rank(query, 3, "query", "[num_tokens, num_heads, head_size]");
  const detail::KvCacheShape kc = detail::check_kv_cache(kv_cache, dtype_of(query.dtype));
  const AttentionSpec spec = detail::attention_spec_for(
      KernelKind::kPrefill, query, output, kc, window, soft_cap, current_device_arch(), false,
      alibi_slopes != nullptr, sinks != nullptr);
  const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);
  detail::check_prefill_launch(spec, a, kc, "prefill_attention");
  detail::enqueue_prefill(k, a, stream);
}

}  // namespace graphattn
