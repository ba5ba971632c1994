// Host side of the prefill kernel: checks the views, derives the spec, launches.
#include "runtime/prefill.hpp"

#include <cmath>
#include <mutex>
#include <set>
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

// Raises the kernel's dynamic shared memory limit once per loaded function.
void ensure_shared_limit(CUfunction f, int bytes) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mu;
  static std::set<CUfunction>* done = new std::set<CUfunction>;
  std::lock_guard<std::mutex> lock(mu);
  if (done->count(f)) return;
  GA_CU_CHECK(
      driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
  done->insert(f);
}

}  // namespace

PrefillConfig prefill_config(const AttentionSpec& spec) {
  PrefillConfig c;
  switch (select_prefill_kernel(spec)) {
    case PrefillKernel::kNone:
      throw Error("prefill_config: " + spec.to_string() + " is not a valid prefill spec");
    case PrefillKernel::kWgmma: {
      // Mirrors the PW_* constants of templates/prefill_sm90.cu.
      const int d = spec.head_size;
      c.threads = 384;  // one producer and two consumer warpgroups
      c.block_m = 128;
      c.block_n = d <= 128 ? 128 : 64;
      const int q_bytes = c.block_m * d * 2, kv_bytes = c.block_n * d * 2;
      const int slack = 1024 + 256;  // base alignment + mbarriers
      int stages = (227 * 1024 - slack - q_bytes) / (2 * kv_bytes);
      if (stages > 4) stages = 4;
      c.shared_bytes = q_bytes + 2 * stages * kv_bytes + slack;
      return c;
    }
    case PrefillKernel::kMmaSync:
      break;
  }
  // Mirrors the PF_* constants of templates/prefill.cu.
  const int head_pad = (spec.head_size + 15) / 16 * 16;
  const bool fp8 = spec.kv_dtype != KvDType::kAuto;
  c.threads = 128;
  c.block_m = 64 * (head_pad <= 128 ? 2 : 1);  // 4 warps x 16 rows x row tiles per warp
  c.block_n = head_pad <= 128 ? 64 : 32;
  const int row = head_pad + 8;
  const int stages = fp8 ? 1 : 2;
  c.shared_bytes = (c.block_m + 2 * stages * c.block_n) * row * 2 +
                   (fp8 ? 2 * 2 * c.block_n * spec.head_size : 0);
  return c;
}

AttentionSpec prefill_spec(const PrefillLaunch& a, int arch) {
  return attention_spec_for(KernelKind::kPrefill, a.query, a.output, a.kv_cache, a.window,
                            a.soft_cap, arch, a.bounds != nullptr);
}

void launch_prefill(const LoadedKernel& k, const PrefillLaunch& a, CUstream stream) {
  GA_REQUIRE(k.compiled != nullptr, "launch_prefill: kernel is not loaded");
  const AttentionSpec& ks = k.compiled->spec;
  const AttentionSpec spec = prefill_spec(a, ks.arch);
  GA_REQUIRE(spec == ks, "launch_prefill: the arguments need kernel " + spec.to_string() +
                             " but kernel " + ks.to_string() + " was given");
  require_vector_access(a.query, "query");
  require_vector_access(a.output, "output");
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
  GA_REQUIRE(std::isfinite(a.scale) && a.scale > 0,
             "scale " + std::to_string(a.scale) + " must be finite and > 0");
  const bool fp8 = spec.kv_dtype != KvDType::kAuto;
  if (fp8)
    GA_REQUIRE(
        a.k_scale > 0 && a.v_scale > 0 && std::isfinite(a.k_scale) && std::isfinite(a.v_scale),
        "fp8 KV cache needs positive k_scale and v_scale, got " + std::to_string(a.k_scale) +
            " and " + std::to_string(a.v_scale));

  const PrefillConfig cfg = prefill_config(spec);
  const int64_t rows = static_cast<int64_t>(a.max_query_len) * spec.group;
  const int64_t grid_x = (rows + cfg.block_m - 1) / cfg.block_m;
  const int64_t grid_y = a.num_reqs - a.first_req;
  const int64_t grid_z = a.kv_cache.shape[3];
  if (grid_x == 0 || grid_y == 0) return;
  GA_REQUIRE(grid_x < (int64_t{1} << 31) && grid_y <= 65535 && grid_z <= 65535,
             "prefill launch too large: " + str(grid_x) + " row tiles, " + str(grid_y) +
                 " requests (at most 65535), " + str(grid_z) + " KV heads (at most 65535)");

  PrefillParams p{};
  set_paged_attention_views(p, a.query, a.output, a.kv_cache, a.seq_lens, a.block_table);
  p.query_start_loc = static_cast<const int*>(a.query_start_loc.data);
  p.first_req = a.first_req;
  p.num_kv_heads = static_cast<int>(grid_z);
  const float qk_scale = a.scale * (fp8 ? a.k_scale : 1.0f);
  p.scale_log2 = qk_scale * 1.4426950408889634f;
  p.scale = qk_scale;
  p.soft_cap = a.soft_cap;
  p.v_scale = fp8 ? a.v_scale : 1.0f;
  p.window = a.window;
  p.num_blocks = a.kv_cache.shape[1];
  p.bounds = static_cast<GaBoundsReport*>(a.bounds);

  ensure_shared_limit(k.function, cfg.shared_bytes);
  LaunchShape shape;
  shape.grid_x = static_cast<unsigned>(grid_x);
  shape.grid_y = static_cast<unsigned>(grid_y);
  shape.grid_z = static_cast<unsigned>(grid_z);
  shape.block_x = static_cast<unsigned>(cfg.threads);
  shape.shared_bytes = static_cast<unsigned>(cfg.shared_bytes);
  launch(k, shape, stream, p);
}

}  // namespace graphattn::detail

namespace graphattn {

void prefill_attention(const TensorView& query, const TensorView& kv_cache,
                       const TensorView& output, const TensorView& query_start_loc,
                       const TensorView& seq_lens, const TensorView& block_table, int first_req,
                       int num_reqs, int max_query_len, float scale, int window, float soft_cap,
                       float k_scale, float v_scale, CUstream stream, KernelCache& cache) {
  detail::PrefillLaunch a;
  a.query = query;
  a.kv_cache = kv_cache;
  a.output = output;
  a.query_start_loc = query_start_loc;
  a.seq_lens = seq_lens;
  a.block_table = block_table;
  a.first_req = first_req;
  a.num_reqs = num_reqs;
  a.max_query_len = max_query_len;
  a.scale = scale;
  a.window = window;
  a.soft_cap = soft_cap;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  const AttentionSpec spec = detail::prefill_spec(a, current_device_arch());
  const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);
  detail::launch_prefill(k, a, stream);
}

}  // namespace graphattn
