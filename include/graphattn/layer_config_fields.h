// SPDX-License-Identifier: Apache-2.0
/* Every field of one attention layer's configuration, declared once: the C++
 * AttentionLayerConfig (graphattn/backend.hpp) documents what each means and holds its
 * default; this list says, per field, what the faces need:
 *
 *   X(type, member, default, c_type, c_name, py_ctype, py_kwarg)
 *   type, member, default: the C++ member (blocksparse.* are BlockSparseParams's) with its type
 *            and default; a static_assert in capi/config.cpp checks both, and that every member
 *            of AttentionLayerConfig and BlockSparseParams has a row
 *   c_type, c_name: the field of graphattn_layer_config_t (graphattn.h), in the C struct's order
 *            (rows are only ever appended: a caller's struct_size says which it holds);
 *            capi/config.cpp checks the C struct against these rows and converts with them
 *   py_ctype, py_kwarg: the ctypes type of the field in python/graphattn/_lib.py's LayerConfig
 *            and the keyword argument of graphattn.AttentionBackend that sets it;
 *            python/tests/test_faces.py checks both, and graphattn.h's struct, against this list
 *
 * From it come AttentionLayerConfig::fields() (what == compares, and so which layers of an
 * AttentionLayerStack share a backend) and the C face's to_cpp / from_cpp. docs/faces.md walks
 * through adding a field. */
#ifndef GRAPHATTN_LAYER_CONFIG_FIELDS_H_
#define GRAPHATTN_LAYER_CONFIG_FIELDS_H_

/* clang-format off */
#define GRAPHATTN_LAYER_CONFIG_FIELDS(X)                                                           \
  X(int, num_heads, 0, int, num_heads, c_int, num_heads)                                           \
  X(int, num_kv_heads, 0, int, num_kv_heads, c_int, num_kv_heads)                                  \
  X(int, head_size, 0, int, head_size, c_int, head_size)                                           \
  X(int, block_size, 16, int, block_size, c_int, block_size)                                       \
  X(DType, dtype, DType::kBFloat16, graphattn_dtype_t, dtype, c_int, dtype)                        \
  X(KvDType, kv_dtype, KvDType::kAuto, graphattn_kv_dtype_t, kv_dtype, c_int, kv_cache_dtype)      \
  X(KvLayout, layout, KvLayout::kNHD, graphattn_kv_layout_t, layout, c_int, layout)                \
  X(int, window, 0, int, window, c_int, window)                                                    \
  X(float, soft_cap, 0.0f, float, soft_cap, c_float, soft_cap)                                     \
  X(float, scale, 0.0f, float, scale, c_float, scale)                                              \
  X(float, k_scale, 1.0f, float, k_scale, c_float, k_scale)                                        \
  X(float, v_scale, 1.0f, float, v_scale, c_float, v_scale)                                        \
  X(int, max_model_len, 0, int, max_model_len, c_int, max_model_len)                               \
  X(int, max_num_seqs, 0, int, max_num_seqs, c_int, max_num_seqs)                                  \
  X(int, arch, 0, int, arch, c_int, arch)                                                          \
  X(bool, overlap_previous_kernel, false, int, overlap_previous_kernel, c_int,                     \
    overlap_previous_kernel)                                                                       \
  X(bool, check_bounds, false, int, check_bounds, c_int, check_bounds)                             \
  /* appended after the first version (struct_size ending at check_bounds) */                      \
  X(const float*, alibi_slopes, nullptr, const float*, alibi_slopes, c_void_p, alibi_slopes)       \
  X(const float*, sinks, nullptr, const float*, sinks, c_void_p, sinks)                            \
  X(AttentionType, attn_type, AttentionType::kDecoder, graphattn_attn_type_t, attn_type, c_int,    \
    attn_type)                                                                                     \
  X(const float*, k_scale_device, nullptr, const float*, k_scale_device, c_void_p, k_scale_device) \
  X(const float*, v_scale_device, nullptr, const float*, v_scale_device, c_void_p, v_scale_device) \
  X(int, decode_query_len, 1, int, decode_query_len, c_int, decode_query_len)                      \
  X(int, blocksparse.block_size, 0, int, blocksparse_block_size, c_int, blocksparse_params)        \
  X(int, blocksparse.local_blocks, 0, int, blocksparse_local_blocks, c_int, blocksparse_params)    \
  X(int, blocksparse.vert_stride, 0, int, blocksparse_vert_stride, c_int, blocksparse_params)      \
  X(int, blocksparse.head_sliding_step, 0, int, blocksparse_head_sliding_step, c_int,              \
    blocksparse_params)                                                                            \
  X(int, blocksparse.active_head_offset, 0, int, blocksparse_active_head_offset, c_int,            \
    blocksparse_params)                                                                            \
  X(bool, softmax_lse, false, int, softmax_lse, c_int, softmax_lse)                                \
  /* fp8 queries; the descale strides come from the Python descale tensors' strides */             \
  X(KvDType, q_dtype, KvDType::kAuto, graphattn_kv_dtype_t, q_dtype, c_int, q_dtype)               \
  X(float, q_scale, 1.0f, float, q_scale, c_float, q_scale)                                        \
  X(const float*, q_descale, nullptr, const float*, q_descale, c_void_p, q_descale)                \
  X(const float*, k_descale, nullptr, const float*, k_descale, c_void_p, k_descale)                \
  X(const float*, v_descale, nullptr, const float*, v_descale, c_void_p, v_descale)                \
  X(int, descale_req_stride, 0, int, descale_req_stride, c_int, q_descale)                         \
  X(int, descale_head_stride, 0, int, descale_head_stride, c_int, q_descale)
/* clang-format on */

#endif /* GRAPHATTN_LAYER_CONFIG_FIELDS_H_ */
