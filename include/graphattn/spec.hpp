// SPDX-License-Identifier: Apache-2.0
// AttentionSpec: one compile-time specialization of one kernel. Everything that changes the
// generated code is a field here; everything that does not (lengths, scale, window length,
// soft-cap value, pointers) is a launch argument.
#pragma once

#include <string>
#include <vector>

#include "graphattn/export.h"

namespace graphattn {

// The enums of the spec and the layer configuration, each with the names its values go by,
// declared once: X(enumerator, spec name, long name). The spec name is what to_string() and the
// canonical spec string use; the long name is the one vLLM, the C ABI's name enumerators
// (graphattn_kv_dtype_name, ...) and the Python package use. enum_count<E>() comes from here,
// so a new value cannot be missed by a range check, a name table or a C enum's static_assert.
//
// kKvScale: calc_kv_scales (a batch's amax of |key| and |value| into device scalars); it depends
// only on the head size, the dtype and the arch, so its spec keeps every other axis at its
// default (block 16, kv auto, g1, swa0, cap0, nhd, no suffix).
// kMergeStates: merge_attn_states (two partial attention results combined by their LSEs); it
// depends only on the dtype (fp16, bf16, fp32) and the arch: every other axis at its default.
// kBlockCopy: copy_blocks with a device block mapping (every cache of a call in one launch); it
// copies bytes and depends only on the arch: every other axis at its default (h128, bf16 too).
// clang-format off
#define GRAPHATTN_KERNEL_KINDS(X)                  \
  X(kCacheWrite, "cache_write", "cache_write")     \
  X(kDecode, "decode", "decode")                   \
  X(kPrefill, "prefill", "prefill")                \
  X(kKvScale, "kv_scale", "kv_scale")              \
  X(kMergeStates, "merge_states", "merge_states")  \
  X(kBlockCopy, "block_copy", "block_copy")
// query, output and (auto) KV element type. kFloat32: the cache writes (float32 keys, values
// and caches, as vLLM's reshape_and_cache[_flash] take), merge_states and the legacy-layout
// decode (vLLM's paged_attention_v1 / v2 with float32; templates/decode_f32.cu, fp32 math); the
// other attention kernels refuse it (spec IS_BF16 constant: the value's index, 2 for fp32).
#define GRAPHATTN_DTYPES(X)                        \
  X(kFloat16, "fp16", "float16")                   \
  X(kBFloat16, "bf16", "bfloat16")                 \
  X(kFloat32, "fp32", "float32")
// KV cache element type; auto = DType (vLLM also calls fp8_e4m3 "fp8": kv_cache_dtype_of)
#define GRAPHATTN_KV_DTYPES(X)                     \
  X(kAuto, "auto", "auto")                         \
  X(kFp8E4M3, "e4m3", "fp8_e4m3")                  \
  X(kFp8E5M2, "e5m2", "fp8_e5m2")
// The KV cache's layout. kNHD / kHND: the flash layout [2, num_blocks, ...] with block_size
// before num_kv_heads or after it. kLegacy: vLLM's legacy PagedAttention caches, a key cache
// [num_blocks, num_kv_heads, head_size / x, block_size, x] (x = 16 bytes of elements, or 8 or 16
// elements: the key_x axis) and a value cache [num_blocks, num_kv_heads, head_size, block_size];
// written by the cache write kernel (write_to_paged_cache) and read by the decode kernel
// (paged_attention_v1 / v2) and the prefill kernel (forward_prefix).
// A layer configuration (and the C ABI's graphattn_kv_layout_t) takes NHD or HND only.
#define GRAPHATTN_KV_LAYOUTS(X)                    \
  X(kNHD, "nhd", "NHD")                            \
  X(kHND, "hnd", "HND")                            \
  X(kLegacy, "legacy", "legacy")
// vLLM's AttentionType: what a layer's queries see and where its keys come from.
//   kDecoder        causal self-attention over the paged KV cache (what forward() always did)
//   kEncoder        bidirectional self-attention over the paged KV cache, which forward() writes
//                   as for a decoder (prefill specs "_nc")
//   kEncoderOnly    bidirectional self-attention with no KV cache: keys and values come in with
//                   the queries, [num_tokens, heads, head_size], per request by query_start_loc
//                   (prefill specs "_nc_dense")
//   kEncoderDecoder cross attention: decoder queries read keys and values that the encoder's
//                   output wrote into the paged cache once; non-causal (prefill "_nc"; a decode
//                   query sees every key anyway, so decodes run the decode kernel)
#define GRAPHATTN_ATTENTION_TYPES(X)               \
  X(kDecoder, "decoder", "decoder")                \
  X(kEncoder, "encoder", "encoder")                \
  X(kEncoderOnly, "encoder_only", "encoder_only")  \
  X(kEncoderDecoder, "encoder_decoder", "encoder_decoder")
// clang-format on

#define GRAPHATTN_ENUMERATOR(e, spec_name, long_name) e,
enum class KernelKind { GRAPHATTN_KERNEL_KINDS(GRAPHATTN_ENUMERATOR) };
enum class DType { GRAPHATTN_DTYPES(GRAPHATTN_ENUMERATOR) };
enum class KvDType { GRAPHATTN_KV_DTYPES(GRAPHATTN_ENUMERATOR) };
enum class KvLayout { GRAPHATTN_KV_LAYOUTS(GRAPHATTN_ENUMERATOR) };
enum class AttentionType { GRAPHATTN_ATTENTION_TYPES(GRAPHATTN_ENUMERATOR) };
#undef GRAPHATTN_ENUMERATOR

// The names of an enum's values, index = value: EnumNames<E>::spec_names / long_names.
template <typename E>
struct EnumNames;  // only the enums above have them
#define GRAPHATTN_ENUM_SPEC_NAME(e, spec_name, long_name) spec_name,
#define GRAPHATTN_ENUM_LONG_NAME(e, spec_name, long_name) long_name,
#define GRAPHATTN_ENUM_NAMES(E, LIST)                                                      \
  template <>                                                                              \
  struct EnumNames<E> {                                                                    \
    static constexpr const char* spec_names[] = {LIST(GRAPHATTN_ENUM_SPEC_NAME)};          \
    static constexpr const char* long_names[] = {LIST(GRAPHATTN_ENUM_LONG_NAME)};          \
    static constexpr int count = static_cast<int>(sizeof spec_names / sizeof *spec_names); \
  };
GRAPHATTN_ENUM_NAMES(KernelKind, GRAPHATTN_KERNEL_KINDS)
GRAPHATTN_ENUM_NAMES(DType, GRAPHATTN_DTYPES)
GRAPHATTN_ENUM_NAMES(KvDType, GRAPHATTN_KV_DTYPES)
GRAPHATTN_ENUM_NAMES(KvLayout, GRAPHATTN_KV_LAYOUTS)
GRAPHATTN_ENUM_NAMES(AttentionType, GRAPHATTN_ATTENTION_TYPES)
#undef GRAPHATTN_ENUM_NAMES
#undef GRAPHATTN_ENUM_LONG_NAME
#undef GRAPHATTN_ENUM_SPEC_NAME

// How many values E has (its values are 0..count-1).
template <typename E>
constexpr int enum_count() {
  return EnumNames<E>::count;
}
// E's long name for value i ("fp8_e4m3", "bfloat16", "encoder_only", ...), or null past the end.
template <typename E>
constexpr const char* enum_long_name(int i) {
  return i >= 0 && i < enum_count<E>() ? EnumNames<E>::long_names[i] : nullptr;
}

// Every axis of AttentionSpec, in the order of its canonical string. This one list declares the
// fields and drives validate(), to_string(), parse(), operator==, the memory tier's packed key
// and the constants the renderer puts in front of the templates, so a new axis is one line here
// (plus its template code); tests/test_spec_axes.cpp checks that every axis changes the cache
// key, the memory-tier entry and the rendered source.
//
//   X(type, field, default, form, tag, label, radix, constant, kernels, canonical, rule)
//   form:  kName   tag then the value's name (EnumNames<type>::spec_names: "decode", "bf16", ...)
//          kNumber tag then the value in decimal (allowed: `rule`)
//          kFlag   tag then 0 or 1
//          kSuffix tag when set, nothing otherwise
//          kOptNumber tag then the value in decimal when it is not the canonical value, nothing
//                 otherwise (allowed: `rule`)
//   label: the field's name in messages
//   radix: every value lies in 0..radix-1 (the packed key's digit); spec.cpp static_asserts that
//          the radix covers every allowed value (a name's count, a rule's largest value)
//   constant: the template's name for the value: "constexpr int <constant> = <value>;" (a name's
//          index, a flag's 0/1), for kSuffix "#define <constant> 1" when set, for kOptNumber
//          "#define <constant> <value>" when not canonical; "" for none (the
//          kernel kind picks the template file instead)
//   kernels: the kernels that have the axis (spec.cpp: kAnyKernel, kLayerKernels = every kernel
//          but merge_states and block_copy, kDTypeKernels = those and merge_states,
//          kPagedKernels = cache write, decode and prefill over the paged cache,
//          kCacheWriteKernel = the cache write only,
//          kAttentionKernels = decode and both prefills,
//          kPagedAttention = decode and paged prefill, kDecodeKernel, kPrefillKernels = both
//          prefills; the dense-KV prefill counts as its own kernel)
//   canonical: the value every other kernel's spec holds: for_kernel() (and so spec_for) puts
//          it there and validate() requires it, so one kernel serves every layer that differs
//          only in what the kernel does not read
//   rule:  kNumber, kOptNumber: the NumberRule of the allowed values (spec.cpp); the others:
//          kNoRule. A forgotten column does not compile; a number axis without a rule is a
//          static_assert.
// clang-format off
#define GRAPHATTN_SPEC_AXES(X)                                                                     \
  X(KernelKind, kind, KernelKind::kDecode, kName, "", "kernel kind", 8, "",                        \
    kAnyKernel, KernelKind::kDecode, kNoRule)                                                      \
  /* 32..256, multiple of 8 */                                                                     \
  X(int, head_size, 128, kNumber, "_h", "head size", 512, "HEAD_SIZE",                             \
    kLayerKernels, 128, &kHeadSizeRule)                                                            \
  /* tokens per KV page: 16..256, multiple of 16 (cache writes, legacy decode: 8 too) */           \
  X(int, block_size, 16, kNumber, "_b", "block size", 512, "BLOCK_SIZE",                           \
    kPagedKernels, 16, &kBlockSizeRule)                                                            \
  X(DType, dtype, DType::kBFloat16, kName, "_", "dtype", 4, "IS_BF16",                             \
    kDTypeKernels, DType::kBFloat16, kNoRule)                                                      \
  X(KvDType, kv_dtype, KvDType::kAuto, kName, "_kv", "KV cache dtype", 4, "KV_FP8",                \
    kPagedKernels, KvDType::kAuto, kNoRule)                                                        \
  /* query heads per KV head (GQA): 1..64 */                                                       \
  X(int, group, 1, kNumber, "_g", "queries per KV head (group)", 128, "GROUP",                     \
    kAttentionKernels, 1, &kGroupRule)                                                             \
  /* the window length itself is a launch argument */                                              \
  X(bool, sliding_window, false, kFlag, "_swa", "window", 2, "HAS_WINDOW",                         \
    kAttentionKernels, false, kNoRule)                                                             \
  /* the cap value itself is a launch argument */                                                  \
  X(bool, soft_cap, false, kFlag, "_cap", "soft cap", 2, "HAS_SOFT_CAP",                           \
    kAttentionKernels, false, kNoRule)                                                             \
  X(KvLayout, layout, KvLayout::kNHD, kName, "_", "KV layout", 4, "KV_LAYOUT",                     \
    kPagedKernels, KvLayout::kNHD, kNoRule)                                                        \
  /* compute capability * 10 + minor, e.g. 80, 89, 90 */                                           \
  X(int, arch, 90, kNumber, "_sm", "target arch", 1024, "TARGET_ARCH",                             \
    kAnyKernel, 90, &kArchRule)                                                                    \
  /* ALiBi: score += slope[head] * (key position - query position); the slopes are launch */       \
  /* data (a device array of num_heads floats) */                                                  \
  X(bool, alibi, false, kSuffix, "_alibi", "ALiBi", 2, "HAS_ALIBI",                                \
    kAttentionKernels, false, kNoRule)                                                             \
  /* attention sinks (gpt-oss): one logit per head joins the softmax denominator and adds */       \
  /* no value; the logits are launch data (a device array of num_heads floats) */                  \
  X(bool, sinks, false, kSuffix, "_sink", "attention sinks", 2, "HAS_SINKS",                       \
    kAttentionKernels, false, kNoRule)                                                             \
  /* multi-token decode (speculative decoding): decode requests of 1..max_query_len query */       \
  /* tokens, causal among themselves, sharing each KV tile; decode kernels only */                 \
  X(bool, multi_token, false, kSuffix, "_mt", "multi-token decode", 2, "GA_MULTI_TOKEN",           \
    kDecodeKernel, false, kNoRule)                                                                 \
  /* Non-causal (bidirectional) prefill: every query row of a request sees all of its keys */      \
  /* [0, seq_len) (encoder, encoder-only and cross attention). Prefill only, no window. */         \
  X(bool, non_causal, false, kSuffix, "_nc", "non-causal", 2, "GA_NON_CAUSAL",                     \
    kPrefillKernels, false, kNoRule)                                                               \
  /* Dense K/V (encoder-only attention, MultiHeadAttention): the prefill kernel reads keys */      \
  /* and values from [tokens, kv_heads, head_size] tensors instead of the paged cache (see */      \
  /* PagedKvView in templates/params.h). Prefill only; the paged axes take their canonical */      \
  /* values (b16, kvauto, nhd, no _chk). */                                                        \
  X(bool, dense_kv, false, kSuffix, "_dense", "dense KV", 2, "GA_DENSE_KV",                        \
    kPrefillKernels, false, kNoRule)                                                               \
  /* Block-sparse attention (vLLM's BlocksparseFlashAttention): a causal decode or prefill */      \
  /* whose keys are also masked per head by the local + vertical-stride block pattern of */        \
  /* GaBlockSparse (templates/params.h; the pattern's numbers are launch data); KV tiles */        \
  /* that no query of a thread block sees are skipped without being read */                        \
  X(bool, block_sparse, false, kSuffix, "_bsp", "block-sparse", 2, "GA_BLOCK_SPARSE",              \
    kPagedAttention, false, kNoRule)                                                               \
  /* Checked mode: the kernel compares every block id and slot it reads with the cache's */        \
  /* size and reports the first one out of range (AttentionBackend::take_bounds_violation) */      \
  /* instead of reading or writing outside the cache. Off: the fast path, whose source and */      \
  /* machine code carry no check at all. */                                                        \
  X(bool, check_bounds, false, kSuffix, "_chk", "checked mode", 2, "GA_CHECK_BOUNDS",              \
    kPagedKernels, false, kNoRule)                                                                 \
  /* Interleaved V cache (vLLM's reshape_and_cache(..., interleaved_v=True), the layout its */     \
  /* ROCm fused QK-norm/RoPE/cache writer emits): the legacy value cache's elements stored */      \
  /* [num_blocks, num_kv_heads, block_size / kx, head_size, kx], kx = 16 bytes of cache */         \
  /* elements, instead of [.., head_size, block_size]. Legacy cache writes only. */                \
  X(bool, interleaved_v, false, kSuffix, "_iv", "interleaved V cache", 2, "GA_INTERLEAVED_V",      \
    kCacheWriteKernel, false, kNoRule)                                                             \
  /* Softmax LSE: the kernel also writes each (query head, query token)'s natural-log */           \
  /* log-sum-exp of its scaled (and capped, biased) scores, FlashAttention's softmax_lse */        \
  /* [num_heads, total_q] fp32 (with sinks: the sink's term included; no key: -inf), for */        \
  /* merge_attn_states and cascade attention. Off: the kernels' source and machine code */         \
  /* carry no LSE at all. */                                                                       \
  X(bool, softmax_lse, false, kSuffix, "_lse", "softmax LSE", 2, "GA_WRITE_LSE",                   \
    kPagedAttention, false, kNoRule)                                                               \
  /* fp8 e4m3 queries (vLLM's query_quant with an fp8 KV cache, FA3's fp8 forward): the */         \
  /* query arrives as e4m3 bytes with a descale (q = stored * q_descale; per tensor or per */      \
  /* (request, KV head), launch data); the output stays in the dtype axis's type. Needs an */      \
  /* fp8 KV dtype (e4m3 or e5m2). Decode: QK^T on fp8 MMA from sm_89 on, the query widened */      \
  /* to fp16 before; paged prefill (mma.sync kernel): the query widened exactly to the */          \
  /* 16-bit MMA type on load. "q bf16/fp16" is the dtype axis, so no suffix names them */          \
  X(bool, q_fp8, false, kSuffix, "_qe4m3", "query dtype e4m3", 2, "GA_Q_E4M3",                     \
    kPagedAttention, false, kNoRule)                                                               \
  /* x of vLLM's legacy key cache [.., head_size / x, block_size, x] (elements; vLLM reads it */   \
  /* from the tensor) where it is not 16 bytes of the cache element: 8 (fp8 caches; vLLM's */      \
  /* tests build them so) or 16 (16-bit and fp32 caches; fp32 also 8). 0: 16 bytes, which */       \
  /* the spec string does not name, so the kernels of the usual x keep their names and code. */    \
  /* Legacy decode and prefill only; the cache write reads x as a launch argument */               \
  X(int, key_x, 0, kOptNumber, "_x", "legacy key cache x", 17, "GA_KEY_X",                         \
    kPagedAttention, 0, &kKeyXRule)                                                                \
  /* Device-chosen splits: the decode kernel of a mixed graph (a batch split on the device) */     \
  /* counts the leading decodes and chooses their splits itself (templates/params.h, */            \
  /* GaDeviceSplits). One-token decodes over the flash layout, 16-bit queries. Off: the */         \
  /* kernels' source and machine code carry none of it */                                          \
  X(bool, device_splits, false, kSuffix, "_dsp", "device-chosen splits", 2, "GA_DEVICE_SPLITS",    \
    kDecodeKernel, false, kNoRule)                                                                 \
  /* Long splits (with _dsp only): the mixed graph's decode may plan two blocks a */               \
  /* multiprocessor where every leading decode is long (templates/decode.cu [policy: long */       \
  /* splits]; GRAPHATTN_MIXED_DSP_LONG_TILES). Off: the _dsp kernel's source and machine code */   \
  /* carry none of it */                                                                           \
  X(bool, dsp_long_splits, false, kSuffix, "_long", "long device splits", 2, "GA_DSP_LONG_SPLITS", \
    kDecodeKernel, false, kNoRule)
// clang-format on

struct GRAPHATTN_API AttentionSpec {
#define GRAPHATTN_SPEC_FIELD(type, field, default_value, ...) type field = default_value;
  GRAPHATTN_SPEC_AXES(GRAPHATTN_SPEC_FIELD)
#undef GRAPHATTN_SPEC_FIELD

  // Throws graphattn::Error naming the first bad field and the allowed values, or an axis that
  // its kernel does not have away from its canonical value.
  void validate() const;

  // This spec as the kernel of `kind` has it: every axis that kernel does not have (the axis
  // list's kernels column) at its canonical value. What spec_for() makes of a layer's features.
  AttentionSpec for_kernel(KernelKind kind) const;

  // Canonical, stable form, e.g. "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90" (checked
  // mode appends "_chk"): the axes in order, each written as its form says.
  std::string to_string() const;

  // Parses the canonical form; throws graphattn::Error on anything else. The result is
  // validated, so parse(s).to_string() == s for every accepted s.
  static AttentionSpec parse(const std::string& text);

  bool operator==(const AttentionSpec& o) const;
  bool operator!=(const AttentionSpec& o) const { return !(*this == o); }
};

// Element sizes in bytes.
GRAPHATTN_API int dtype_bytes(DType t);
GRAPHATTN_API int kv_dtype_bytes(KvDType t, DType auto_type);

GRAPHATTN_API const char* to_string(KernelKind k);
GRAPHATTN_API const char* to_string(DType t);     // "fp16" / "bf16"
GRAPHATTN_API const char* to_string(KvDType t);   // "auto" / "e4m3" / "e5m2"
GRAPHATTN_API const char* to_string(KvLayout l);  // "nhd" / "hnd" / "legacy"
// "decoder", "encoder", "encoder_only", "encoder_decoder" (vLLM's AttentionType values).
GRAPHATTN_API const char* to_string(AttentionType t);
// vLLM's kv_cache_dtype names: "auto" (the model dtype), "fp8" and "fp8_e4m3" (e4m3),
// "fp8_e5m2"; anything else throws graphattn::Error naming the allowed ones.
GRAPHATTN_API KvDType kv_cache_dtype_of(const std::string& kv_cache_dtype);
// vLLM's canonical name of t: "auto", "fp8_e4m3", "fp8_e5m2".
GRAPHATTN_API const char* kv_cache_dtype_name(KvDType t);

// The closed sets that validate() checks against, for messages and for tools.
GRAPHATTN_API const std::vector<int>& supported_head_sizes();
GRAPHATTN_API const std::vector<int>& supported_block_sizes();
GRAPHATTN_API const std::vector<int>& supported_archs();
// The block size that only the cache write kernels and the legacy-layout decode (vLLM's
// paged_attention_v1 / v2) take besides supported_block_sizes() (vLLM accepts it there); the
// other attention kernels need multiples of 16.
constexpr int kCacheWriteOnlyBlockSize = 8;
constexpr int kMaxGroup = 64;
// The most query tokens a multi-token decode request holds (spec "_mt";
// AttentionLayerConfig::decode_query_len, the metadata builder's decode threshold).
constexpr int kMaxDecodeQueryLen = 16;

}  // namespace graphattn
