// SPDX-License-Identifier: Apache-2.0
// The C ABI's ops: the cache writes, vLLM's legacy PagedAttention calls, dense attention, the
// fp8 scales and the block copies, each a conversion of its DLTensors and one C++ call.
#include <string>
#include <vector>

#include "capi.hpp"
#include "graphattn/kv_blocks.hpp"
#include "graphattn/paged_cache.hpp"

using namespace graphattn::capi;
using graphattn::KvDType;
using graphattn::TensorView;

namespace {

// A host block mapping of num_pairs (src, dst) int64 pairs.
std::vector<graphattn::BlockPair> pairs_of(const int64_t* mapping, size_t num_pairs) {
  if (num_pairs > 0) deref(mapping, "block_mapping");
  std::vector<graphattn::BlockPair> out(num_pairs);
  for (size_t i = 0; i < num_pairs; ++i) out[i] = {mapping[2 * i], mapping[2 * i + 1]};
  return out;
}

static_assert(GRAPHATTN_K_SCALE_DIVISOR == graphattn::kKScaleDivisor &&
                  GRAPHATTN_V_SCALE_DIVISOR == graphattn::kVScaleDivisor,
              "graphattn.h and backend.hpp name vLLM's divisors alike");

}  // namespace

extern "C" {

graphattn_status_t graphattn_write_kv_cache(const DLTensor* key, const DLTensor* value,
                                            const DLTensor* kv_cache, const DLTensor* slot_mapping,
                                            graphattn_kv_dtype_t kv_dtype, float k_scale,
                                            float v_scale, void* stream,
                                            graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    const KvDType kv = kv_dtype_value(kv_dtype, "kv_dtype");
    const TensorView c = view_of(kv_cache, "kv_cache", Null::kRejected, &kv);
    const TensorView s = view_of(slot_mapping, "slot_mapping");
    graphattn::write_kv_cache(k, v, c, s, k_scale, v_scale, static_cast<CUstream>(stream),
                              cache_of(cache));
  });
}

graphattn_status_t graphattn_write_to_paged_cache(
    const DLTensor* key, const DLTensor* value, const DLTensor* key_cache,
    const DLTensor* value_cache, const DLTensor* slot_mapping, graphattn_kv_dtype_t kv_dtype,
    float k_scale, float v_scale, void* stream, graphattn_cache_t cache) noexcept {
  return graphattn_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_dtype,
                                     k_scale, v_scale, 0, stream, cache);
}

graphattn_status_t graphattn_reshape_and_cache(const DLTensor* key, const DLTensor* value,
                                               const DLTensor* key_cache,
                                               const DLTensor* value_cache,
                                               const DLTensor* slot_mapping,
                                               graphattn_kv_dtype_t kv_dtype, float k_scale,
                                               float v_scale, int interleaved_v, void* stream,
                                               graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    const KvDType kv = kv_dtype_value(kv_dtype, "kv_dtype");
    const TensorView kc = view_of(key_cache, "key_cache", Null::kRejected, &kv);
    const TensorView vc = view_of(value_cache, "value_cache", Null::kRejected, &kv);
    const TensorView s = view_of(slot_mapping, "slot_mapping");
    graphattn::write_to_paged_cache(k, v, kc, vc, s, k_scale, v_scale,
                                    static_cast<CUstream>(stream), cache_of(cache), nullptr,
                                    nullptr, interleaved_v != 0);
  });
}

graphattn_status_t graphattn_forward_prefix(
    const DLTensor* query, const DLTensor* key, const DLTensor* value,
    graphattn_kv_dtype_t kv_dtype, const DLTensor* key_cache, const DLTensor* value_cache,
    const DLTensor* block_tables, const DLTensor* query_start_loc, const DLTensor* seq_lens,
    int max_query_len, const DLTensor* alibi_slopes, int sliding_window, float k_scale,
    float v_scale, const DLTensor* k_scale_device, const DLTensor* v_scale_device, float scale,
    float soft_cap, const DLTensor* sinks, int causal, const DLTensor* output, void* stream,
    graphattn_cache_t cache) noexcept {
  return guard([&] {
    // One statement each: the first bad tensor, in argument order, is the one named.
    const TensorView q = view_of(query, "query");
    const TensorView k = view_of(key, "key", Null::kEmpty);
    const TensorView v = view_of(value, "value", Null::kEmpty);
    const KvDType kv = kv_dtype_value(kv_dtype, "kv_dtype");
    const TensorView kc = view_of(key_cache, "key_cache", Null::kRejected, &kv);
    const TensorView vc = view_of(value_cache, "value_cache", Null::kRejected, &kv);
    const TensorView bt = view_of(block_tables, "block_tables");
    const TensorView qsl = view_of(query_start_loc, "query_start_loc");
    const TensorView sl = view_of(seq_lens, "seq_lens");
    const float* slopes = floats_of(alibi_slopes, "alibi_slopes");
    graphattn::PrefixOptions opt;
    opt.k_scale_device = device_scalar_of(k_scale_device, "k_scale_device", Null::kEmpty);
    opt.v_scale_device = device_scalar_of(v_scale_device, "v_scale_device", Null::kEmpty);
    opt.scale = scale;
    opt.soft_cap = soft_cap;
    opt.sinks = floats_of(sinks, "sinks");
    opt.causal = causal != 0;
    const TensorView o = view_of(output, "output");
    graphattn::forward_prefix(q, k, v, graphattn::kv_cache_dtype_name(kv), kc, vc, bt, qsl, sl,
                              max_query_len, slopes, sliding_window, k_scale, v_scale, o,
                              static_cast<CUstream>(stream), cache_of(cache), opt);
  });
}

}  // extern "C"

namespace {

// What paged_attention_v1 and v2 share after their own tensors, converted.
struct PagedAttentionArgs {
  TensorView query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes;
  const char* kv_cache_dtype;  // vLLM's name of the caches' element type
  const float* k_scale_device;
  const float* v_scale_device;
};
PagedAttentionArgs paged_attention_args(const DLTensor* query, const DLTensor* key_cache,
                                        const DLTensor* value_cache, const DLTensor* block_tables,
                                        const DLTensor* seq_lens, const DLTensor* alibi_slopes,
                                        graphattn_kv_dtype_t kv_dtype,
                                        const DLTensor* k_scale_device,
                                        const DLTensor* v_scale_device) {
  // One statement each: the first bad tensor, in argument order, is the one named.
  PagedAttentionArgs a;
  a.query = view_of(query, "query");
  const KvDType kv = kv_dtype_value(kv_dtype, "kv_dtype");  // uint8 caches are read as it says
  a.kv_cache_dtype = graphattn::kv_cache_dtype_name(kv);
  a.key_cache = view_of(key_cache, "key_cache", Null::kRejected, &kv);
  a.value_cache = view_of(value_cache, "value_cache", Null::kRejected, &kv);
  a.block_tables = view_of(block_tables, "block_tables");
  a.seq_lens = view_of(seq_lens, "seq_lens");
  a.alibi_slopes = view_of(alibi_slopes, "alibi_slopes", Null::kEmpty);
  a.k_scale_device = device_scalar_of(k_scale_device, "k_scale_device", Null::kEmpty);
  a.v_scale_device = device_scalar_of(v_scale_device, "v_scale_device", Null::kEmpty);
  return a;
}

}  // namespace

extern "C" {

graphattn_status_t graphattn_paged_attention_v1(
    const DLTensor* out, const DLTensor* query, const DLTensor* key_cache,
    const DLTensor* value_cache, int num_kv_heads, float scale, const DLTensor* block_tables,
    const DLTensor* seq_lens, int block_size, int max_seq_len, const DLTensor* alibi_slopes,
    graphattn_kv_dtype_t kv_dtype, float k_scale, float v_scale, const DLTensor* k_scale_device,
    const DLTensor* v_scale_device, int tp_rank, int blocksparse_local_blocks,
    int blocksparse_vert_stride, int blocksparse_block_size, int blocksparse_head_sliding_step,
    void* stream, graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView o = view_of(out, "out");
    const PagedAttentionArgs a =
        paged_attention_args(query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes,
                             kv_dtype, k_scale_device, v_scale_device);
    graphattn::paged_attention_v1(
        o, a.query, a.key_cache, a.value_cache, num_kv_heads, scale, a.block_tables, a.seq_lens,
        block_size, max_seq_len, a.alibi_slopes, a.kv_cache_dtype, k_scale, v_scale, tp_rank,
        blocksparse_local_blocks, blocksparse_vert_stride, blocksparse_block_size,
        blocksparse_head_sliding_step, static_cast<CUstream>(stream), cache_of(cache),
        a.k_scale_device, a.v_scale_device);
  });
}

graphattn_status_t graphattn_paged_attention_v2(
    const DLTensor* out, const DLTensor* exp_sums, const DLTensor* max_logits,
    const DLTensor* tmp_out, const DLTensor* query, const DLTensor* key_cache,
    const DLTensor* value_cache, int num_kv_heads, float scale, const DLTensor* block_tables,
    const DLTensor* seq_lens, int block_size, int max_seq_len, const DLTensor* alibi_slopes,
    graphattn_kv_dtype_t kv_dtype, float k_scale, float v_scale, const DLTensor* k_scale_device,
    const DLTensor* v_scale_device, int tp_rank, int blocksparse_local_blocks,
    int blocksparse_vert_stride, int blocksparse_block_size, int blocksparse_head_sliding_step,
    void* stream, graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView o = view_of(out, "out");
    const TensorView es = view_of(exp_sums, "exp_sums");
    const TensorView ml = view_of(max_logits, "max_logits");
    const TensorView tmp = view_of(tmp_out, "tmp_out");
    const PagedAttentionArgs a =
        paged_attention_args(query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes,
                             kv_dtype, k_scale_device, v_scale_device);
    graphattn::paged_attention_v2(
        o, es, ml, tmp, a.query, a.key_cache, a.value_cache, num_kv_heads, scale, a.block_tables,
        a.seq_lens, block_size, max_seq_len, a.alibi_slopes, a.kv_cache_dtype, k_scale, v_scale,
        tp_rank, blocksparse_local_blocks, blocksparse_vert_stride, blocksparse_block_size,
        blocksparse_head_sliding_step, static_cast<CUstream>(stream), cache_of(cache),
        a.k_scale_device, a.v_scale_device);
  });
}

graphattn_status_t graphattn_use_paged_attention_v1(int64_t max_seq_len, int64_t num_seqs,
                                                    int64_t num_heads, int* use_v1) noexcept {
  return guard([&] {
    if (!use_v1) invalid("use_v1 is NULL");
    *use_v1 = graphattn::use_paged_attention_v1(max_seq_len, num_seqs, num_heads) ? 1 : 0;
  });
}

graphattn_status_t graphattn_encoder_attention(const DLTensor* query, const DLTensor* key,
                                               const DLTensor* value, const DLTensor* output,
                                               const DLTensor* query_start_loc, int max_query_len,
                                               float scale, const DLTensor* alibi_slopes,
                                               const DLTensor* sinks, void* stream,
                                               graphattn_cache_t cache) noexcept {
  return guard([&] {
    // One statement each: the first bad tensor, in argument order, is the one named.
    const TensorView q = view_of(query, "query");
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    const TensorView o = view_of(output, "output");
    const TensorView qsl = view_of(query_start_loc, "query_start_loc");
    const float* slopes = floats_of(alibi_slopes, "alibi_slopes");
    const float* sink = floats_of(sinks, "sinks");
    graphattn::encoder_attention(q, k, v, o, qsl, max_query_len, scale,
                                 static_cast<CUstream>(stream), cache_of(cache), slopes, sink);
  });
}

graphattn_status_t graphattn_multi_head_attention(const DLTensor* q, const DLTensor* k,
                                                  const DLTensor* v, const DLTensor* out,
                                                  float scale, void* stream,
                                                  graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView qv = view_of(q, "q");
    const TensorView kv = view_of(k, "k");
    const TensorView vv = view_of(v, "v");
    const TensorView ov = view_of(out, "out");
    graphattn::multi_head_attention(qv, kv, vv, ov, scale, static_cast<CUstream>(stream),
                                    cache_of(cache));
  });
}

graphattn_status_t graphattn_calc_kv_scales(const DLTensor* key, const DLTensor* value,
                                            const DLTensor* k_scale, const DLTensor* v_scale,
                                            float k_divisor, float v_divisor, void* stream,
                                            graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    graphattn::calc_kv_scales(k, v, device_scalar_of(k_scale, "k_scale"),
                              device_scalar_of(v_scale, "v_scale"), k_divisor, v_divisor,
                              static_cast<CUstream>(stream), cache_of(cache));
  });
}

// ---- Block copies

graphattn_status_t graphattn_swap_blocks(const DLTensor* src, const DLTensor* dst,
                                         const int64_t* block_mapping, size_t num_pairs,
                                         void* stream) noexcept {
  return guard([&] {
    const TensorView s = block_cache_of(src, "src", true);
    const TensorView d = block_cache_of(dst, "dst", true);
    graphattn::swap_blocks(s, d, pairs_of(block_mapping, num_pairs), static_cast<CUstream>(stream));
  });
}

graphattn_status_t graphattn_copy_blocks(const DLTensor* const* caches, size_t num_caches,
                                         const int64_t* block_mapping, size_t num_pairs,
                                         void* stream) noexcept {
  return guard([&] {
    if (num_caches > 0) deref(caches, "caches");
    std::vector<TensorView> views;
    for (size_t i = 0; i < num_caches; ++i)
      views.push_back(
          block_cache_of(caches[i], ("caches[" + std::to_string(i) + "]").c_str(), false));
    graphattn::copy_blocks(views, pairs_of(block_mapping, num_pairs),
                           static_cast<CUstream>(stream));
  });
}

}  // extern "C"
