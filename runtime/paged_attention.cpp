// SPDX-License-Identifier: Apache-2.0
// vLLM's paged_attention_v1 / v2 over its legacy PagedAttention caches: the argument checks, the
// per-context split workspace, and a launch of the split-KV decode kernel specialized for the
// legacy layout (templates/decode.cu, KV_LAYOUT 2; float32: templates/decode_f32.cu, unsplit).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/blocksparse.hpp"
#include "graphattn/error.hpp"
#include "graphattn/paged_cache.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/module_cache.hpp"
#include "runtime/tensor_checks.hpp"
#include "templates/params.h"

namespace graphattn {
namespace {

using detail::str;

// One call's arguments as vLLM passes them (v2's temporaries aside).
struct PagedAttentionCall {
  const char* op;  // "paged_attention_v1" / "paged_attention_v2", for messages
  TensorView out, query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes;
  int num_kv_heads, block_size, max_seq_len;
  float scale;
  std::string kv_cache_dtype;
  float k_scale, v_scale;
  const float* k_scale_device;
  const float* v_scale_device;
  // vLLM's block-sparse arguments (tp_rank offsets the heads of block-sparse patterns).
  int tp_rank, local_blocks, vert_stride, sparse_block_size, head_sliding_step;
};

// vLLM's block-sparse arguments, all read here: vert_stride <= 1 is dense attention (vLLM's
// rule), larger the block-sparse decode kernel (spec "_bsp") with the pattern of this rank's
// heads (active_head_offset = tp_rank * num_heads), checked against the layer.
BlockSparseParams block_sparse_of(const PagedAttentionCall& c, const detail::KvCacheShape& kc) {
  GA_REQUIRE(c.tp_rank >= 0, std::string(c.op) + ": tp_rank " + str(c.tp_rank) + " must be >= 0");
  if (c.vert_stride <= 1) return {};
  const int num_heads = static_cast<int>(c.query.shape[1]);
  const BlockSparseParams p =
      blocksparse_from_vllm(c.local_blocks, c.vert_stride, c.sparse_block_size, c.head_sliding_step,
                            c.tp_rank, num_heads);
  const std::string problem =
      blocksparse_problem(p, num_heads, static_cast<int>(kc.num_kv_heads), c.block_size);
  GA_REQUIRE(problem.empty(), std::string(c.op) + ": block-sparse arguments (local_blocks " +
                                  str(c.local_blocks) + ", vert_stride " + str(c.vert_stride) +
                                  ", block_size " + str(c.sparse_block_size) +
                                  ", head_sliding_step " + str(c.head_sliding_step) + ", tp_rank " +
                                  str(c.tp_rank) + "): " + problem);
  return p;
}

// What check_call() found: the decode spec, the caches' shape, the block-sparse pattern.
struct CheckedCall {
  AttentionSpec spec;
  detail::KvCacheShape kc;
  BlockSparseParams blocksparse;
};

// The checks of one call, before any device use (the spec on `arch`).
CheckedCall check_call(const PagedAttentionCall& c, int arch) {
  const std::string op = c.op;
  detail::require_rank(c.query, 3, "query", "[num_seqs, num_heads, head_size]");
  detail::require_rank(c.out, 3, "out", "[num_seqs, num_heads, head_size]");
  const detail::KvCacheShape kc =
      detail::check_paged_caches(c.key_cache, c.value_cache, element_dtype_of(c.query.dtype));
  const KvDType named = kv_cache_dtype_of(c.kv_cache_dtype);
  GA_REQUIRE(named == kc.kv_dtype,
             op + ": kv_cache_dtype \"" + c.kv_cache_dtype + "\" does not match the caches' " +
                 to_string(c.key_cache.dtype) + " elements for a " + to_string(c.query.dtype) +
                 " model (auto: the model dtype; fp8, fp8_e4m3: fp8_e4m3; fp8_e5m2: fp8_e5m2)");
  GA_REQUIRE(c.num_kv_heads == kc.num_kv_heads,
             op + ": num_kv_heads " + str(c.num_kv_heads) + " differs from the caches' " +
                 str(kc.num_kv_heads) + " (value_cache " + c.value_cache.describe() + ")");
  GA_REQUIRE(c.block_size == kc.block_size, op + ": block_size " + str(c.block_size) +
                                                " differs from the caches' " + str(kc.block_size) +
                                                " (value_cache " + c.value_cache.describe() + ")");
  GA_REQUIRE(c.block_size == kCacheWriteOnlyBlockSize ||
                 (c.block_size >= 16 && c.block_size <= 256 && c.block_size % 16 == 0),
             op + ": block_size " + str(c.block_size) +
                 " is not supported; supported: 8 (16-bit and float32 caches), 16..256, "
                 "multiples of 16");
  GA_REQUIRE(c.out.shape[0] == c.query.shape[0] && c.out.shape[1] == c.query.shape[1] &&
                 c.out.shape[2] == c.query.shape[2],
             op + ": out " + c.out.describe() + " must have query's shape " + c.query.describe());
  const int64_t num_seqs = c.query.shape[0], num_heads = c.query.shape[1];
  GA_REQUIRE(c.seq_lens.ndim == 1 && c.seq_lens.shape[0] == num_seqs,
             op + ": seq_lens " + c.seq_lens.describe() + " must be int32 [num_seqs] with " +
                 "num_seqs = " + str(num_seqs) + " (query's first dimension)");
  GA_REQUIRE(
      c.block_tables.ndim == 2 && c.block_tables.shape[0] == num_seqs,
      op + ": block_tables " + c.block_tables.describe() +
          " must be int32 [num_seqs, max_num_blocks_per_seq] with num_seqs = " + str(num_seqs));
  for (const TensorView* t : {&c.seq_lens, &c.block_tables})
    GA_REQUIRE(t->dtype == ScalarType::kInt32 && t->strides[t->ndim - 1] == 1,
               op + ": " + (t == &c.seq_lens ? "seq_lens " : "block_tables ") + t->describe() +
                   " must be int32 with a contiguous last dimension");
  GA_REQUIRE(c.max_seq_len >= 1, op + ": max_seq_len " + str(c.max_seq_len) + " must be >= 1");
  if (c.alibi_slopes.ndim != 0)
    GA_REQUIRE(c.alibi_slopes.ndim == 1 && c.alibi_slopes.dtype == ScalarType::kFloat32 &&
                   c.alibi_slopes.shape[0] == num_heads && c.alibi_slopes.strides[0] == 1,
               op + ": alibi_slopes " + c.alibi_slopes.describe() +
                   " must be a contiguous fp32 [num_heads] tensor with num_heads = " +
                   str(num_heads) + " (or empty: no ALiBi)");
  const BlockSparseParams bsp = block_sparse_of(c, kc);
  KernelFeatures f = detail::launch_features(arch, false, c.alibi_slopes.ndim != 0, false);
  f.block_sparse = bsp.sparse();
  const AttentionSpec spec =
      detail::attention_spec_for(KernelKind::kDecode, c.query, c.out, kc, 0, 0.0f, f);
  detail::require_launch_scales(spec, c.scale, c.k_scale, c.v_scale);
  return {spec, kc, bsp};
}

// The split workspace of one context: counters first (zero, and left zero by every
// launch), then the partials. Buffers only grow; the ones replaced stay allocated, since a
// captured graph may still use them.
struct ContextWorkspace {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;  // the last one is current
  size_t counter_bytes = 0, partial_bytes = 0;
};

struct WorkspacePool {
  std::mutex mu;
  std::map<CUcontext, ContextWorkspace> by_context;
  std::map<CUfunction, detail::DecodeDevice> prepared;  // prepare_decode_kernel, once each
};

WorkspacePool& pool() {
  static WorkspacePool* p = new WorkspacePool;  // never destroyed: buffers live to process exit
  return *p;
}

bool capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  GA_CU_CHECK(detail::driver().cuStreamIsCapturing(stream, &status));
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void run(const PagedAttentionCall& c, CUstream stream, KernelCache& cache) {
  check_call(c, 90);  // every check before the device is touched
  const detail::DeviceKvScales scales{c.k_scale_device, c.v_scale_device};
  detail::require_device_scales(scales, c.op);
  const int num_seqs = static_cast<int>(c.query.shape[0]);
  if (num_seqs == 0) return;
  const CheckedCall checked = check_call(c, current_device_arch());
  const AttentionSpec& spec = checked.spec;
  const detail::KvCacheShape& kc = checked.kc;
  const detail::LoadedKernel& kernel = detail::load_kernel(spec, cache, stream);
  const bool in_capture = capturing(stream);
  const int num_heads = static_cast<int>(c.query.shape[1]);
  const int group = spec.group;

  detail::DecodeLaunch a;
  a.query = c.query;
  a.output = c.out;
  a.seq_lens = c.seq_lens;
  a.block_table = c.block_tables;
  a.alibi_slopes =
      c.alibi_slopes.ndim != 0 ? static_cast<const float*>(c.alibi_slopes.data) : nullptr;
  a.legacy_kv = kc;
  a.blocksparse = checked.blocksparse;
  a.num_decodes = num_seqs;
  a.scale = c.scale;
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  a.device_scales = scales;

  WorkspacePool& wp = pool();
  {
    std::lock_guard<std::mutex> lock(wp.mu);
    auto it = wp.prepared.find(kernel.function);
    if (it == wp.prepared.end())
      it = wp.prepared.emplace(kernel.function, detail::prepare_decode_kernel(kernel)).first;
    const detail::DecodeGrid g =
        detail::decode_grid(num_seqs, static_cast<int>(kc.num_kv_heads), group, c.max_seq_len, 0,
                            spec.head_size, spec.kv_dtype, it->second);
    a.max_splits = g.max_splits;
    a.stages = g.stages;
    a.ring_stages = g.ring_stages;
    a.cluster = g.cluster;
    if (spec.dtype == DType::kFloat32) {  // templates/decode_f32.cu runs unsplit
      a.max_splits = 1;
      a.cluster = false;
    }
    CUcontext ctx = nullptr;
    GA_CU_CHECK(detail::driver().cuCtxGetCurrent(&ctx));
    ContextWorkspace& ws = wp.by_context[ctx];
    const size_t counters =
        detail::decode_counter_count(num_seqs, static_cast<int>(kc.num_kv_heads), group) *
        sizeof(unsigned);
    const size_t counter_bytes = (counters + 255) / 256 * 256;
    size_t partials =
        detail::decode_workspace_bytes(num_seqs, num_heads, spec.head_size, a.max_splits);
    if (a.max_splits > 1 && (counter_bytes > ws.counter_bytes || partials > ws.partial_bytes)) {
      if (in_capture) {
        // Nothing may be allocated inside a capture: run unsplit, which needs no workspace.
        a.max_splits = 1;
        a.cluster = false;
        partials = 0;
      } else {
        // Grow (at least doubling) and keep the old buffer for graphs that captured it.
        ws.counter_bytes = std::max(counter_bytes, 2 * ws.counter_bytes);
        ws.partial_bytes = std::max(partials, 2 * ws.partial_bytes);
        ws.buffers.push_back(std::make_unique<DeviceBuffer>(ws.counter_bytes + ws.partial_bytes));
      }
    }
    if (a.max_splits > 1) {
      unsigned char* base = static_cast<unsigned char*>(ws.buffers.back()->data());
      a.counters = base;
      a.workspace = base + ws.counter_bytes;
      a.workspace_size = ws.partial_bytes;
    }
  }
  detail::check_decode_launch(spec, a, kc, c.op);
  detail::enqueue_decode(kernel, a, stream);
}

}  // namespace

int64_t paged_attention_num_partitions(int64_t max_seq_len) {
  GA_REQUIRE(max_seq_len >= 0, "max_seq_len " + str(max_seq_len) + " must be >= 0");
  return (max_seq_len + kPagedAttentionPartitionSize - 1) / kPagedAttentionPartitionSize;
}

bool use_paged_attention_v1(int64_t max_seq_len, int64_t num_seqs, int64_t num_heads) {
  const int64_t partitions = paged_attention_num_partitions(max_seq_len);
  return max_seq_len <= 8192 && (partitions == 1 || num_seqs * num_heads > 512);
}

namespace {

// v1 and v2 past v2's temporaries: one call of the decode kernel, `op` naming it in messages.
void paged_attention(const char* op, const TensorView& out, const TensorView& query,
                     const TensorView& key_cache, const TensorView& value_cache, int num_kv_heads,
                     float scale, const TensorView& block_tables, const TensorView& seq_lens,
                     int block_size, int max_seq_len, const TensorView& alibi_slopes,
                     const std::string& kv_cache_dtype, float k_scale, float v_scale, int tp_rank,
                     int local_blocks, int vert_stride, int sparse_block_size,
                     int head_sliding_step, CUstream stream, KernelCache& cache,
                     const float* k_scale_device, const float* v_scale_device) {
  const PagedAttentionCall c{op,
                             out,
                             query,
                             key_cache,
                             value_cache,
                             block_tables,
                             seq_lens,
                             alibi_slopes,
                             num_kv_heads,
                             block_size,
                             max_seq_len,
                             scale,
                             kv_cache_dtype,
                             k_scale,
                             v_scale,
                             k_scale_device,
                             v_scale_device,
                             tp_rank,
                             local_blocks,
                             vert_stride,
                             sparse_block_size,
                             head_sliding_step};
  run(c, stream, cache);
}

}  // namespace

void paged_attention_v1(const TensorView& out, const TensorView& query, const TensorView& key_cache,
                        const TensorView& value_cache, int num_kv_heads, float scale,
                        const TensorView& block_tables, const TensorView& seq_lens, int block_size,
                        int max_seq_len, const TensorView& alibi_slopes,
                        const std::string& kv_cache_dtype, float k_scale, float v_scale,
                        int tp_rank, int blocksparse_local_blocks, int blocksparse_vert_stride,
                        int blocksparse_block_size, int blocksparse_head_sliding_step,
                        CUstream stream, KernelCache& cache, const float* k_scale_device,
                        const float* v_scale_device) {
  paged_attention("paged_attention_v1", out, query, key_cache, value_cache, num_kv_heads, scale,
                  block_tables, seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype,
                  k_scale, v_scale, tp_rank, blocksparse_local_blocks, blocksparse_vert_stride,
                  blocksparse_block_size, blocksparse_head_sliding_step, stream, cache,
                  k_scale_device, v_scale_device);
}

void paged_attention_v2(const TensorView& out, const TensorView& exp_sums,
                        const TensorView& max_logits, const TensorView& tmp_out,
                        const TensorView& query, const TensorView& key_cache,
                        const TensorView& value_cache, int num_kv_heads, float scale,
                        const TensorView& block_tables, const TensorView& seq_lens, int block_size,
                        int max_seq_len, const TensorView& alibi_slopes,
                        const std::string& kv_cache_dtype, float k_scale, float v_scale,
                        int tp_rank, int blocksparse_local_blocks, int blocksparse_vert_stride,
                        int blocksparse_block_size, int blocksparse_head_sliding_step,
                        CUstream stream, KernelCache& cache, const float* k_scale_device,
                        const float* v_scale_device) {
  // vLLM's temporaries: checked, not used (the split workspace replaces them).
  detail::require_rank(query, 3, "query", "[num_seqs, num_heads, head_size]");
  detail::require_rank(exp_sums, 3, "exp_sums", "[num_seqs, num_heads, max_num_partitions]");
  detail::require_rank(max_logits, 3, "max_logits", "[num_seqs, num_heads, max_num_partitions]");
  detail::require_rank(tmp_out, 4, "tmp_out",
                       "[num_seqs, num_heads, max_num_partitions, head_size]");
  const int64_t parts = exp_sums.shape[2];
  const int64_t need = paged_attention_num_partitions(std::max(max_seq_len, 0));
  for (const TensorView* t : {&exp_sums, &max_logits, &tmp_out}) {
    const bool is_tmp = t == &tmp_out;
    const char* name = is_tmp ? "tmp_out" : t == &exp_sums ? "exp_sums" : "max_logits";
    const ScalarType want = is_tmp ? out.dtype : ScalarType::kFloat32;
    const bool ok = t->dtype == want && t->shape[0] == query.shape[0] &&
                    t->shape[1] == query.shape[1] && t->shape[2] == parts && parts >= need &&
                    (!is_tmp || t->shape[3] == query.shape[2]);
    GA_REQUIRE(ok, std::string("paged_attention_v2: ") + name + " " + t->describe() + " must be " +
                       to_string(want) + " [num_seqs " + str(query.shape[0]) + ", num_heads " +
                       str(query.shape[1]) + ", max_num_partitions >= " + str(need) +
                       (is_tmp ? ", head_size " + str(query.shape[2]) : std::string()) +
                       "] (partitions of " + str(kPagedAttentionPartitionSize) +
                       " tokens, as exp_sums' " + str(parts) + ")");
  }
  paged_attention("paged_attention_v2", out, query, key_cache, value_cache, num_kv_heads, scale,
                  block_tables, seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype,
                  k_scale, v_scale, tp_rank, blocksparse_local_blocks, blocksparse_vert_stride,
                  blocksparse_block_size, blocksparse_head_sliding_step, stream, cache,
                  k_scale_device, v_scale_device);
}

}  // namespace graphattn
