// SPDX-License-Identifier: Apache-2.0
// The C ABI's attention backend section: create, prepare, forward, and checked mode.
#include <cstddef>
#include <string>
#include <vector>

#include "capi.hpp"

namespace {
// The metadata's first version ended with max_seq_len.
constexpr size_t kMetadataV1Bytes = offsetof(graphattn_metadata_t, max_seq_len) + sizeof(int);
}  // namespace

using namespace graphattn::capi;
using graphattn::AttentionLayerConfig;
using graphattn::KvDType;
using graphattn::TensorView;

extern "C" {

graphattn_status_t graphattn_backend_create(const graphattn_layer_config_t* config,
                                            graphattn_backend_t* backend) noexcept {
  return guard([&] {
    deref(backend, "backend") = nullptr;
    *backend = new graphattn_backend(to_cpp(config));
  });
}

void graphattn_backend_destroy(graphattn_backend_t backend) noexcept { delete backend; }

graphattn_status_t graphattn_backend_config(graphattn_backend_t backend,
                                            graphattn_layer_config_t* config) noexcept {
  return guard([&] {
    const AttentionLayerConfig& c = deref(backend, "backend").attn.config();
    sized(config, "config", kLayerConfigV1Bytes);
    from_cpp(c, config);
  });
}

graphattn_status_t graphattn_backend_spec(graphattn_backend_t backend, int index, char* buf,
                                          size_t capacity, size_t* needed, int* count) noexcept {
  return guard([&] {
    const std::vector<graphattn::AttentionSpec> specs =
        deref(backend, "backend").attn.required_specs();
    const int n = static_cast<int>(specs.size());
    if (count) *count = n;
    if (index < 0 || index >= n)
      invalid("spec index " + std::to_string(index) + " is out of range; the backend has " +
              std::to_string(n) + " specs (0.." + std::to_string(n - 1) + ")");
    copy_string(specs[static_cast<size_t>(index)].to_string(), buf, capacity, needed,
                "the spec string");
  });
}

graphattn_status_t graphattn_backend_prepare(graphattn_backend_t backend,
                                             graphattn_cache_t cache) noexcept {
  return guard([&] { deref(backend, "backend").attn.prepare(cache_of(cache)); });
}

graphattn_status_t graphattn_backend_take_bounds_violation(
    graphattn_backend_t backend, graphattn_bounds_violation_t* violation) noexcept {
  return guard([&] {
    graphattn_bounds_violation_t& out = deref(violation, "violation");
    const graphattn::BoundsViolation v = deref(backend, "backend").attn.take_bounds_violation();
    static_assert(
        GRAPHATTN_BOUNDS_BLOCK_ID == static_cast<int>(graphattn::BoundsViolation::Kind::kBlockId) &&
        GRAPHATTN_BOUNDS_SLOT == static_cast<int>(graphattn::BoundsViolation::Kind::kSlot));
    out = graphattn_bounds_violation_t{};
    out.kind = static_cast<graphattn_bounds_kind_t>(v.kind);
    out.request = v.request;
    out.position = v.position;
    out.value = v.value;
    if (v) copy_fixed(out.message, v.describe());
  });
}

graphattn_status_t graphattn_backend_workspace_bytes(graphattn_backend_t backend,
                                                     size_t* bytes) noexcept {
  return guard([&] {
    const graphattn::AttentionBackend& attn = deref(backend, "backend").attn;
    size_t& out = deref(bytes, "bytes");
    out = attn.workspace_bytes();
  });
}

graphattn_status_t graphattn_backend_set_mixed_branches(graphattn_backend_t backend,
                                                        const char* mode) noexcept {
  return guard([&] {
    graphattn::AttentionBackend& attn = deref(backend, "backend").attn;
    deref(mode, "mode");
    graphattn::MixedBranches m{};
    try {
      m = graphattn::parse_mixed_branches(mode);
    } catch (const graphattn::Error& e) {
      invalid(e.what());
    }
    attn.set_mixed_branches(m);
  });
}

graphattn_status_t graphattn_backend_mixed_branches(graphattn_backend_t backend, char* buf,
                                                    size_t capacity, size_t* needed) noexcept {
  return guard([&] {
    const graphattn::AttentionBackend& attn = deref(backend, "backend").attn;
    copy_string(graphattn::mixed_branches_name(attn.mixed_branches()), buf, capacity, needed,
                "the mode name");
  });
}

void graphattn_metadata_init(graphattn_metadata_t* metadata) noexcept {
  if (!metadata) return;
  *metadata = graphattn_metadata_t{};
  metadata->struct_size = sizeof(graphattn_metadata_t);
}

namespace {

graphattn_status_t backend_forward(graphattn_backend_t backend, const DLTensor* query,
                                   const DLTensor* key, const DLTensor* value,
                                   const DLTensor* kv_cache, const DLTensor* output,
                                   const graphattn_metadata_t* metadata, void* workspace,
                                   size_t workspace_bytes, void* stream,
                                   const DLTensor* softmax_lse) noexcept {
  return guard([&] {
    const graphattn::AttentionBackend& attn = deref(backend, "backend").attn;
    const graphattn_metadata_t& m = sized(metadata, "metadata", kMetadataV1Bytes);
    // Every tensor is converted before the C++ forward sees any of them. A layer of e4m3 queries
    // (q_dtype fp8_e4m3) takes them as float8_e4m3fn or uint8; the C++ forward checks the rest.
    const KvDType q_dtype = attn.config().q_dtype;
    const TensorView q =
        view_of(query, "query", Null::kRejected, q_dtype == KvDType::kAuto ? nullptr : &q_dtype);
    const TensorView k = view_of(key, "key", Null::kEmpty);
    const TensorView v = view_of(value, "value", Null::kEmpty);
    if (key && k.ndim == 0)  // the C++ forward reads a 0-d key as "no cache write"
      invalid(
          "key is 0-d; pass [num_tokens, num_kv_heads, head_size] keys and values, or NULL "
          "for both (no cache write)");
    if (!key != !value)
      invalid(std::string(key ? "value" : "key") + " is NULL but " + (key ? "key" : "value") +
              " is not; pass both (to write them to the cache) or neither");
    const KvDType kv = attn.config().kv_dtype;
    // An encoder-only layer has no cache: its cache, sequence lengths, block table and slots
    // may be NULL (they are not read).
    const bool no_cache = attn.config().attn_type == graphattn::AttentionType::kEncoderOnly;
    const Null paged = no_cache ? Null::kEmpty : Null::kRejected;
    const TensorView cache = view_of(kv_cache, "kv_cache", paged, &kv);
    const TensorView out = view_of(output, "output");
    graphattn::AttentionMetadata md;
    md.query_start_loc = view_of(m.query_start_loc, "query_start_loc");
    md.seq_lens = view_of(m.seq_lens, "seq_lens", paged);
    md.block_table = view_of(m.block_table, "block_table", paged);
    md.slot_mapping =
        view_of(m.slot_mapping, "slot_mapping", key && !no_cache ? Null::kRejected : Null::kEmpty);
    md.num_reqs = m.num_reqs;
    md.num_decodes = m.num_decodes;
    md.num_decode_tokens = m.num_decode_tokens;
    md.num_actual_tokens = m.num_actual_tokens;
    md.max_query_len = m.max_query_len;
    md.max_seq_len = m.max_seq_len;
    md.device_split = holds(m, &graphattn_metadata_t::device_split) && m.device_split != 0;
    const TensorView lse = view_of(softmax_lse, "softmax_lse", Null::kEmpty);
    attn.forward(q, k, v, cache, out, md, workspace, workspace_bytes, static_cast<CUstream>(stream),
                 lse);
  });
}

}  // namespace

graphattn_status_t graphattn_backend_forward(graphattn_backend_t backend, const DLTensor* query,
                                             const DLTensor* key, const DLTensor* value,
                                             const DLTensor* kv_cache, const DLTensor* output,
                                             const graphattn_metadata_t* metadata, void* workspace,
                                             size_t workspace_bytes, void* stream) noexcept {
  return backend_forward(backend, query, key, value, kv_cache, output, metadata, workspace,
                         workspace_bytes, stream, nullptr);
}

graphattn_status_t graphattn_backend_forward_lse(
    graphattn_backend_t backend, const DLTensor* query, const DLTensor* key, const DLTensor* value,
    const DLTensor* kv_cache, const DLTensor* output, const graphattn_metadata_t* metadata,
    void* workspace, size_t workspace_bytes, void* stream, const DLTensor* softmax_lse) noexcept {
  return backend_forward(backend, query, key, value, kv_cache, output, metadata, workspace,
                         workspace_bytes, stream, softmax_lse);
}

}  // extern "C"
