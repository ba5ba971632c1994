// SPDX-License-Identifier: Apache-2.0
/* graphattn's C ABI: paged attention for LLM inference engines, over the C++ API in
 * graphattn.hpp, for C callers and for other languages' bindings (the Python package uses it
 * through ctypes).
 *
 * Conventions
 * - Every function that can fail returns a graphattn_status_t. On anything but GRAPHATTN_OK,
 *   graphattn_last_error() returns this thread's message for that failure (the same text the
 *   C++ graphattn::Error carries), valid until this thread's next call into graphattn; a call
 *   that returns GRAPHATTN_OK clears it (graphattn_gpu_available excepted, see there).
 *   No C++ exception ever crosses this ABI (C++ callers see every function noexcept).
 * - Out-pointers must not be NULL unless a comment says they may be; a NULL one (or a NULL
 *   handle, a struct whose struct_size is too small, an enum value out of range, a bad
 *   DLTensor) is GRAPHATTN_ERROR_INVALID_ARGUMENT.
 * - Handles are opaque and owned by the caller (graphattn_*_destroy), except
 *   graphattn_cache_default(), which returns the process-wide cache (destroying it is a no-op).
 * - Tensors are DLPack DLTensors (dlpack/dlpack.h, 0.6 or newer): device memory owned by the
 *   caller (device_type kDLCUDA or kDLCUDAManaged), shape and strides in elements, strides
 *   NULL for a compact row-major tensor, byte_offset honoured. Accepted dtypes: float16,
 *   bfloat16, float32, int32, int64, and for fp8 KV caches uint8 (interpreted per the layer's
 *   kv_cache_dtype) or DLPack 1.1's float8 codes (e4m3fn = 10, e5m2 = 12). graphattn never
 *   copies, allocates or frees what a tensor points to.
 * - Configuration structs start with struct_size (set by the *_init functions): later ABI
 *   versions append fields, and a caller built against an older header keeps working.
 * - Streams are CUstream values passed as void* (NULL: the legacy default stream).
 * - Thread safety: handles may be used from several threads, but one backend's forward()
 *   calls that run concurrently need one workspace each. Caches are fully thread-safe.
 */
#ifndef GRAPHATTN_GRAPHATTN_H_
#define GRAPHATTN_GRAPHATTN_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#include "graphattn/export.h"

/* C++ callers see that no exception crosses this ABI. */
#ifdef __cplusplus
#define GRAPHATTN_NOEXCEPT noexcept
#else
#define GRAPHATTN_NOEXCEPT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of a function or struct below; appending a field to a
 * struct that has struct_size is compatible and does not bump it.
 * 2: graphattn_forward_prefix and graphattn_paged_attention_v1 / v2 take the fp8 scales in
 *    device memory (k_scale_device, v_scale_device after v_scale) as their C++ versions do, and
 *    paged_attention_v1 / v2 take the KV cache dtype as a graphattn_kv_dtype_t, as every other
 *    call does, instead of vLLM's name (a binding maps "fp8" to GRAPHATTN_KV_DTYPE_FP8_E4M3).
 *    Callers of version 1 of these three functions must be rebuilt; every other function and
 *    struct is unchanged. The name enumerators (graphattn_kv_dtype_name, ...) are new. */
#define GRAPHATTN_ABI_VERSION 2

/* Every enum ends in an *_ENUM_MAX of 0x7fffffff, as Vulkan's do: the type then holds every int,
 * in C and in C++, so a value from a newer caller or a binding is a value the library can check
 * and refuse (GRAPHATTN_ERROR_INVALID_ARGUMENT), never undefined behaviour. It is no valid
 * value itself. */
typedef enum graphattn_status {
  GRAPHATTN_OK = 0,
  GRAPHATTN_ERROR = 1,                  /* any graphattn::Error: bad input, driver failure, ... */
  GRAPHATTN_ERROR_INVALID_ARGUMENT = 2, /* caught at this ABI: NULL handle, bad DLTensor, enum */
  GRAPHATTN_ERROR_COMPILE = 3,          /* NVRTC rejected a kernel (the log is in last_error);
                                           prepare and precompile report a rejected kernel as
                                           GRAPHATTN_ERROR, NVRTC's log in the message */
  GRAPHATTN_ERROR_OUT_OF_MEMORY = 4,    /* host allocation failed */
  GRAPHATTN_ERROR_BUFFER_TOO_SMALL = 5, /* an output array or string is too small: *needed says */
  GRAPHATTN_ERROR_INTERNAL = 6,         /* anything else (a bug: please report it) */
  GRAPHATTN_STATUS_ENUM_MAX = 0x7fffffff
} graphattn_status_t;

typedef enum graphattn_dtype {
  GRAPHATTN_DTYPE_FLOAT16 = 0,
  GRAPHATTN_DTYPE_BFLOAT16 = 1,
  GRAPHATTN_DTYPE_FLOAT32 = 2, /* the cache writes, merge_attn_states, paged_attention_v1/v2 */
  GRAPHATTN_DTYPE_ENUM_MAX = 0x7fffffff
} graphattn_dtype_t;

typedef enum graphattn_kv_dtype {
  GRAPHATTN_KV_DTYPE_AUTO = 0, /* the model's dtype */
  GRAPHATTN_KV_DTYPE_FP8_E4M3 = 1,
  GRAPHATTN_KV_DTYPE_FP8_E5M2 = 2,
  GRAPHATTN_KV_DTYPE_ENUM_MAX = 0x7fffffff
} graphattn_kv_dtype_t;

typedef enum graphattn_kv_layout {
  GRAPHATTN_KV_LAYOUT_NHD = 0, /* [2, num_blocks, block_size, num_kv_heads, head_size] */
  GRAPHATTN_KV_LAYOUT_HND = 1, /* [2, num_blocks, num_kv_heads, block_size, head_size] */
  GRAPHATTN_KV_LAYOUT_ENUM_MAX = 0x7fffffff
} graphattn_kv_layout_t;

/* vLLM's AttentionType (C++ graphattn::AttentionType; AttentionLayerConfig::attn_type says what
 * each means). */
typedef enum graphattn_attn_type {
  GRAPHATTN_ATTN_DECODER = 0,         /* causal, over the paged cache (the default) */
  GRAPHATTN_ATTN_ENCODER = 1,         /* bidirectional, over the paged cache */
  GRAPHATTN_ATTN_ENCODER_ONLY = 2,    /* bidirectional, no KV cache: keys/values come in */
  GRAPHATTN_ATTN_ENCODER_DECODER = 3, /* cross attention over the encoder's cached keys */
  GRAPHATTN_ATTN_TYPE_ENUM_MAX = 0x7fffffff
} graphattn_attn_type_t;

/* vLLM's AttentionCGSupport: how much of a batch may run inside a CUDA graph. */
typedef enum graphattn_cudagraph_support {
  GRAPHATTN_CUDAGRAPH_NEVER = 0,
  GRAPHATTN_CUDAGRAPH_UNIFORM_SINGLE_TOKEN_DECODE = 1,
  GRAPHATTN_CUDAGRAPH_UNIFORM_BATCH = 2,
  GRAPHATTN_CUDAGRAPH_ALWAYS = 3,
  GRAPHATTN_CUDAGRAPH_ENUM_MAX = 0x7fffffff
} graphattn_cudagraph_support_t;

typedef struct graphattn_backend* graphattn_backend_t;
typedef struct graphattn_cache* graphattn_cache_t;

/* ---- Library ------------------------------------------------------------------------------ */

/* GRAPHATTN_ABI_VERSION of the loaded library: a binding checks it against its own. */
GRAPHATTN_API int graphattn_abi_version(void) GRAPHATTN_NOEXCEPT;
/* The library version, e.g. "0.1.0". Static storage. */
GRAPHATTN_API const char* graphattn_version(void) GRAPHATTN_NOEXCEPT;
/* This thread's message for its last failed call ("" when there was none). Never NULL. */
GRAPHATTN_API const char* graphattn_last_error(void) GRAPHATTN_NOEXCEPT;
/* A short name for a status, e.g. "GRAPHATTN_ERROR_COMPILE". Static storage. */
GRAPHATTN_API const char* graphattn_status_string(graphattn_status_t status) GRAPHATTN_NOEXCEPT;

/* The names of an enum's values, as the C++ API, vLLM and the Python package spell them: value
 * -> name, NULL for a value past the last (enumerate from 0 until NULL), so that a binding
 * keeps no table of its own. Static storage.
 *   graphattn_dtype_t:     "float16", "bfloat16"
 *   graphattn_kv_dtype_t:  "auto", "fp8_e4m3", "fp8_e5m2" (vLLM's kv_cache_dtype names; vLLM's
 *                          "fp8" is fp8_e4m3)
 *   graphattn_kv_layout_t: "NHD", "HND"
 *   graphattn_attn_type_t: "decoder", "encoder", "encoder_only", "encoder_decoder"
 *   graphattn_mixed_branches_name: the modes of graphattn_backend_set_mixed_branches, "off",
 *                          "serial-prefill-first", "decode-first", "prefill-first",
 *                          "decode-first-high", "prefill-first-high" */
GRAPHATTN_API const char* graphattn_dtype_name(int value) GRAPHATTN_NOEXCEPT;
GRAPHATTN_API const char* graphattn_kv_dtype_name(int value) GRAPHATTN_NOEXCEPT;
GRAPHATTN_API const char* graphattn_kv_layout_name(int value) GRAPHATTN_NOEXCEPT;
GRAPHATTN_API const char* graphattn_attn_type_name(int value) GRAPHATTN_NOEXCEPT;
GRAPHATTN_API const char* graphattn_mixed_branches_name(int value) GRAPHATTN_NOEXCEPT;

/* Messages from the library to people (warnings such as a read-only cache directory; debug lines
 * such as each precompiled kernel's tier and time). level: 10 debug, 20 info, 30 warning,
 * 40 error; GRAPHATTN_LOG_LEVEL (debug, info, warning, error, off; default info) decides which
 * are sent. The handler may be called from any thread, one call at a time, and must not call
 * back into graphattn; NULL restores the default (one line on stderr). The Python package sends
 * them to the `logging` module. */
typedef void (*graphattn_log_handler_t)(int level, const char* message, void* user);
GRAPHATTN_API void graphattn_set_log_handler(graphattn_log_handler_t handler,
                                             void* user) GRAPHATTN_NOEXCEPT;
/* The least severe level sent now (GRAPHATTN_LOG_LEVEL's: 10, 20, 30, 40 or 50 for off). */
GRAPHATTN_API int graphattn_log_level(void) GRAPHATTN_NOEXCEPT;

/* Whether the driver loads and a device exists: *available 1 or 0. Never fails for want of a
 * GPU; without one, graphattn_last_error() says what is missing. */
GRAPHATTN_API graphattn_status_t graphattn_gpu_available(int* available) GRAPHATTN_NOEXCEPT;
/* Makes `device`'s primary context current on this thread unless a context already is
 * (engines that use the CUDA runtime have one). */
GRAPHATTN_API graphattn_status_t graphattn_ensure_context(int device) GRAPHATTN_NOEXCEPT;
/* CUDA devices this process can use: *count 0 where the driver does not load or no device
 * exists (never fails for want of a GPU). */
GRAPHATTN_API graphattn_status_t graphattn_device_count(int* count) GRAPHATTN_NOEXCEPT;
/* Makes `device`'s primary context current on this thread, whatever context was current
 * (C++ use_device): one thread per device in a process driving several GPUs. An out-of-range
 * device is GRAPHATTN_ERROR_INVALID_ARGUMENT naming it and the count. */
GRAPHATTN_API graphattn_status_t graphattn_use_device(int device) GRAPHATTN_NOEXCEPT;
/* Compute capability of the current context's device, major * 10 + minor (e.g. 90). */
GRAPHATTN_API graphattn_status_t graphattn_current_device_arch(int* arch) GRAPHATTN_NOEXCEPT;

/* ---- Layer configuration ------------------------------------------------------------------ */

/* One attention layer, fixed for the life of an engine (C++ AttentionLayerConfig). */
typedef struct graphattn_layer_config {
  size_t struct_size;            /* sizeof(graphattn_layer_config_t), set by _init */
  int num_heads;                 /* query heads; a multiple of num_kv_heads */
  int num_kv_heads;              /* KV heads */
  int head_size;                 /* 32..256, multiple of 8 */
  int block_size;                /* tokens per KV page: 16..256, multiple of 16 (default 16) */
  graphattn_dtype_t dtype;       /* query, key, value, output (default bfloat16) */
  graphattn_kv_dtype_t kv_dtype; /* KV cache element type (default auto) */
  graphattn_kv_layout_t layout;  /* KV cache stride order (default NHD) */
  int window;                    /* sliding window in tokens, 0 = none: key k seen from p when
                                    p - k < window */
  float soft_cap;                /* logits soft cap c, 0 = none: s -> c * tanh(s / c) */
  float scale;                   /* softmax scale; 0 = 1 / sqrt(head_size) */
  float k_scale;                 /* fp8 KV: key = stored * k_scale (default 1) */
  float v_scale;                 /* fp8 KV: value = stored * v_scale (default 1) */
  int max_model_len;             /* longest seq_len a request reaches */
  int max_num_seqs;              /* most requests in one batch (sizes the workspace) */
  int arch;                      /* compute capability * 10, 0 = the current device */
  int overlap_previous_kernel;   /* 1: a decode-only forward may start reading metadata and KV
                                    before the previous kernel in the stream ends (sm_90+); set
                                    only where that kernel writes none of them */
  int check_bounds;              /* 1: kernels that compare every block id and slot with the
                                    cache's size, skip an access out of range and record the
                                    first (graphattn_backend_take_bounds_violation); also
                                    GRAPHATTN_CHECK_BOUNDS=1. 0 (default): the fast kernels */
  /* Fields below were added after the first version: a caller whose struct_size ends before a
   * field gets its default (NULL pointers, GRAPHATTN_ATTN_DECODER, decode_query_len 1). */
  /* ALiBi and attention sinks: [num_heads] fp32 arrays in device memory, NULL = none */
  const float* alibi_slopes; /* head h adds slope[h] * (key position - query position) */
  const float* sinks;        /* head h's softmax denominator gains exp(sinks[h]) */
  /* attention type */
  graphattn_attn_type_t attn_type; /* default GRAPHATTN_ATTN_DECODER; a caller built before this
                                      field (struct_size ending before it) gets the decoder */
  /* fp8 scales in device memory */
  const float* k_scale_device; /* fp8 KV: a float32 device scalar that every kernel of the
                                  layer reads when it runs, instead of k_scale (NULL, the
                                  default: k_scale); it may change between steps and graph
                                  replays (graphattn_calc_kv_scales writes one). 4-byte
                                  aligned; ignored for an auto cache */
  const float* v_scale_device; /* the same for v_scale */
  /* multi-token decode (speculative decoding) */
  int decode_query_len; /* the most query tokens of a decode request: 1 (the default; also what
                           a caller whose struct_size ends before this field gets), or 1 + the
                           draft tokens a step verifies, up to 16. Above 1 the decode kernel is
                           the multi-token one (spec "_mt"): each of the first num_decodes
                           requests holds 1..decode_query_len tokens, causal among themselves,
                           and num_decode_tokens may reach num_decodes * decode_query_len */
  /* block-sparse attention (vLLM's BlocksparseFlashAttention; graphattn/blocksparse.hpp says the
     rule): all 0 by default (dense); a caller whose struct_size ends before
     blocksparse_active_head_offset gets dense attention */
  int blocksparse_block_size;         /* tokens per sparse block: 0 (dense) or a multiple of 16
                                         and of block_size */
  int blocksparse_local_blocks;       /* >= 1: the query's block and the ones before it */
  int blocksparse_vert_stride;        /* >= 1; 1 is dense (vLLM's rule) */
  int blocksparse_head_sliding_step;  /* 0 homo_head, > 0 slides over query heads, < 0 over KV
                                         heads (graphattn_blocksparse_head_sliding_step) */
  int blocksparse_active_head_offset; /* tp_rank * num_heads (vLLM's active_head_range[0]) */
  int softmax_lse;                    /* 1: the attention kernels also write the softmax LSE;
                                         forward through graphattn_backend_forward_lse */
  /* fp8 queries (AttentionLayerConfig::q_dtype says the rule): GRAPHATTN_KV_AUTO (queries in
     dtype) or GRAPHATTN_KV_FP8_E4M3 (e4m3 query views, q = stored * q_scale or the device
     q_descale; needs an fp8 kv_dtype); a caller whose struct_size ends before
     descale_head_stride gets 16-bit queries */
  graphattn_kv_dtype_t q_dtype;
  float q_scale;
  const float* q_descale;  /* [num_reqs, num_kv_heads] fp32 device descales (strided), or NULL */
  const float* k_descale;  /* same; NULL: k_scale / k_scale_device */
  const float* v_descale;  /* same; NULL: v_scale / v_scale_device */
  int descale_req_stride;  /* elements; 0 with descale_head_stride 0: one scalar */
  int descale_head_stride; /* elements */
} graphattn_layer_config_t;

/* vLLM's default head_sliding_step of a block-sparse layer with total_num_heads query heads and
 * total_num_kv_heads KV heads over all tensor-parallel ranks: 0 with homo_head,
 * -max(1, vert_stride / total_num_kv_heads) with homo_head_group, else
 * max(1, vert_stride / total_num_heads). GRAPHATTN_ERROR for counts or a stride below 1. */
GRAPHATTN_API graphattn_status_t graphattn_blocksparse_head_sliding_step(
    int total_num_heads, int total_num_kv_heads, int vert_stride, int homo_head,
    int homo_head_group, int* step) GRAPHATTN_NOEXCEPT;

/* Fills *config with the defaults above (counts and lengths 0: the caller sets them). */
GRAPHATTN_API void graphattn_layer_config_init(graphattn_layer_config_t* config) GRAPHATTN_NOEXCEPT;
/* GRAPHATTN_OK when the configuration is supported; otherwise GRAPHATTN_ERROR (or
 * GRAPHATTN_ERROR_INVALID_ARGUMENT for a NULL config, a struct_size below the first release's
 * (up to check_bounds; fields appended since read as their defaults when not covered), or an
 * enum field out of range) and graphattn_last_error() names the bad value and
 * what is allowed. Needs no GPU (arch 0 is taken as supported here and checked by
 * graphattn_backend_create). */
GRAPHATTN_API graphattn_status_t
graphattn_layer_config_check(const graphattn_layer_config_t* config) GRAPHATTN_NOEXCEPT;

/* ---- Kernel cache ------------------------------------------------------------------------- */

typedef struct graphattn_cache_options {
  size_t struct_size;  /* set by _init */
  const char* dir;     /* NULL or "": GRAPHATTN_CACHE_DIR, $XDG_CACHE_HOME/graphattn,
                          ~/.cache/graphattn */
  int use_disk;        /* 0: memory only (default 1) */
  uint64_t max_bytes;  /* 0: GRAPHATTN_CACHE_MAX_BYTES, else 2 GiB */
  int lock_timeout_ms; /* wait for another process's compile of a key (default 60000) */
  int dump_source;     /* 1: write each compiled source beside its entry */
  int shared_dir;      /* 1: accept a directory a group shares (group-writable, setgid, never
                          world-writable; also GRAPHATTN_CACHE_SHARED=1): every member of the
                          group can then plant GPU code this process runs. 0 (default): the
                          directory must be this user's (or root's) and writable by no one
                          else, or the cache runs memory-only with one warning */
} graphattn_cache_options_t;

GRAPHATTN_API void graphattn_cache_options_init(graphattn_cache_options_t* options)
    GRAPHATTN_NOEXCEPT;
/* options NULL: the defaults of graphattn_cache_options_init. A directory that cannot be used
 * (read-only, not creatable, writable by others) is no failure: the cache runs memory-only
 * (cache_dir says "") and one warning goes to stderr. */
GRAPHATTN_API graphattn_status_t graphattn_cache_create(
    const graphattn_cache_options_t* options, graphattn_cache_t* cache) GRAPHATTN_NOEXCEPT;
/* The process-wide cache the C++ API uses when none is given. Not owned by the caller. */
GRAPHATTN_API graphattn_status_t graphattn_cache_default(graphattn_cache_t* cache)
    GRAPHATTN_NOEXCEPT;
/* Frees a cache from graphattn_cache_create (NULL and the default cache: no-op). Backends
 * prepared from it must be destroyed first. */
GRAPHATTN_API void graphattn_cache_destroy(graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;

typedef struct graphattn_cache_stats {
  size_t struct_size; /* the caller sets it (sizeof); fields past it are not written */
  uint64_t memory_hits;
  uint64_t disk_hits;
  uint64_t misses;
  uint64_t compiles;
  uint64_t compile_failures;
  uint64_t repairs;
  uint64_t evictions;
  double compile_ms;
  uint64_t write_failures; /* compiled kernels that could not be written to disk */
} graphattn_cache_stats_t;

GRAPHATTN_API graphattn_status_t
graphattn_cache_stats(graphattn_cache_t cache, graphattn_cache_stats_t* stats) GRAPHATTN_NOEXCEPT;

/* The cache's disk directory ("" when memory-only) as a NUL-terminated string in buf of
 * capacity bytes; *needed (may be NULL) receives the bytes needed, NUL included. A too small
 * buffer returns GRAPHATTN_ERROR_BUFFER_TOO_SMALL. */
GRAPHATTN_API graphattn_status_t graphattn_cache_dir(graphattn_cache_t cache, char* buf,
                                                     size_t capacity,
                                                     size_t* needed) GRAPHATTN_NOEXCEPT;

/* Where a kernel came from on one request. */
typedef enum graphattn_cache_origin {
  GRAPHATTN_ORIGIN_MEMORY = 0,
  GRAPHATTN_ORIGIN_DISK = 1,
  GRAPHATTN_ORIGIN_COMPILED = 2,
  GRAPHATTN_ORIGIN_REMOTE = 3, /* a verified value from the remote tier (Redis) */
  GRAPHATTN_ORIGIN_ENUM_MAX = 0x7fffffff
} graphattn_cache_origin_t;

typedef struct graphattn_precompile_result {
  graphattn_cache_origin_t origin;
  double ms; /* wall time of this request */
  int ok;    /* 1 on success; 0: error holds NVRTC's or the spec parser's first line(s)
                (truncated to fit; last_error has the whole message) and origin means
                nothing */
  char error[512];
} graphattn_precompile_result_t;

/* Compiles (or finds) every kernel named by a canonical spec string (e.g.
 * "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90") on `threads` workers (0: hardware
 * threads). results (may be NULL) has num_specs slots. Needs no GPU. Returns GRAPHATTN_OK
 * when every spec compiled; otherwise GRAPHATTN_ERROR, and last_error names the first failure.
 */
GRAPHATTN_API graphattn_status_t graphattn_cache_precompile(
    graphattn_cache_t cache, const char* const* specs, size_t num_specs, unsigned threads,
    graphattn_precompile_result_t* results) GRAPHATTN_NOEXCEPT;

/* One file of the cache directory. */
typedef struct graphattn_cache_entry {
  char key[33];   /* 32 hex digits */
  char spec[128]; /* canonical spec string ("" when the entry is bad) */
  int arch;
  int ok;          /* 1: header and checksums verify; 0: status says what is wrong */
  char status[32]; /* the disk tier's verdict: "ok", "truncated", "bad magic",
                      "format version mismatch", "bad header", "key mismatch",
                      "checksum mismatch", "I/O error", "not a regular file",
                      "untrusted", "too large", "bad cubin" */
  uint64_t file_bytes;
  int64_t last_used_ms;   /* Unix time, milliseconds */
  int64_t compiled_at_ms; /* Unix time, milliseconds (0 when bad) */
} graphattn_cache_entry_t;

/* The entries on disk, sorted by file name: up to capacity of them into entries (may be NULL
 * when capacity is 0); *count receives how many there are. More than capacity:
 * GRAPHATTN_ERROR_BUFFER_TOO_SMALL with the first capacity entries written. A memory-only
 * cache has none. */
GRAPHATTN_API graphattn_status_t graphattn_cache_list(graphattn_cache_t cache,
                                                      graphattn_cache_entry_t* entries,
                                                      size_t capacity,
                                                      size_t* count) GRAPHATTN_NOEXCEPT;

/* ---- Attention backend -------------------------------------------------------------------- */

/* Validates the configuration and resolves arch 0 from the current device (making device 0's
 * primary context current if none is). Needs a GPU only for arch 0. */
GRAPHATTN_API graphattn_status_t graphattn_backend_create(
    const graphattn_layer_config_t* config, graphattn_backend_t* backend) GRAPHATTN_NOEXCEPT;
GRAPHATTN_API void graphattn_backend_destroy(graphattn_backend_t backend) GRAPHATTN_NOEXCEPT;
/* The configuration with scale and arch resolved, into *config, whose struct_size the caller
 * sets (graphattn_layer_config_init does); fields past it are not written. */
GRAPHATTN_API graphattn_status_t graphattn_backend_config(
    graphattn_backend_t backend, graphattn_layer_config_t* config) GRAPHATTN_NOEXCEPT;
/* The canonical spec strings of the kernels it needs (cache write, decode, prefill): index
 * 0..*count-1 into buf (see graphattn_cache_dir for buf and *needed). index past the end
 * fails; count (may be NULL) receives how many there are. */
GRAPHATTN_API graphattn_status_t graphattn_backend_spec(graphattn_backend_t backend, int index,
                                                        char* buf, size_t capacity, size_t* needed,
                                                        int* count) GRAPHATTN_NOEXCEPT;
/* Compiles (through `cache`; NULL: the default cache) and loads every kernel in the current
 * context. Call before any capture. */
GRAPHATTN_API graphattn_status_t
graphattn_backend_prepare(graphattn_backend_t backend, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;
/* Bytes of device scratch forward() needs (after prepare). Zero-fill it once before its first
 * forward; every forward leaves it fit for the next. */
GRAPHATTN_API graphattn_status_t
graphattn_backend_workspace_bytes(graphattn_backend_t backend, size_t* bytes) GRAPHATTN_NOEXCEPT;
/* How forward launches a batch with both decodes and prefills (C++
 * AttentionBackend::set_mixed_branches; the environment's GRAPHATTN_MIXED_BRANCHES gives the
 * mode a backend starts with): `mode` is one of its names, "off" (one stream: cache write,
 * decode, prefill), "serial-prefill-first", "decode-first", "prefill-first" (the default: the
 * prefill on a stream of the backend's own, joined before forward returns; two graph branches
 * under capture), "decode-first-high", "prefill-first-high". Anything else fails
 * (GRAPHATTN_ERROR_INVALID_ARGUMENT) naming it and the allowed names, and keeps the mode. Not
 * while forward runs on another thread. */
GRAPHATTN_API graphattn_status_t graphattn_backend_set_mixed_branches(
    graphattn_backend_t backend, const char* mode) GRAPHATTN_NOEXCEPT;
/* The backend's mode (one of the names above) into buf (see graphattn_cache_dir for buf and
 * *needed). */
GRAPHATTN_API graphattn_status_t graphattn_backend_mixed_branches(
    graphattn_backend_t backend, char* buf, size_t capacity, size_t* needed) GRAPHATTN_NOEXCEPT;

/* One step's batch, vLLM v1 semantics: requests ordered decodes first (one query token each,
 * or 1..decode_query_len with a multi-token layer), then prefills. Tensors on the device, int32
 * unless noted; counts host-known. */
typedef struct graphattn_metadata {
  size_t struct_size;              /* set by _init */
  const DLTensor* query_start_loc; /* [>= num_reqs + 1] token offsets, non-decreasing */
  const DLTensor* seq_lens;        /* [>= num_reqs] context + new tokens; 0 = padding */
  const DLTensor* block_table;     /* [>= num_reqs, max_blocks_per_seq] physical blocks */
  const DLTensor* slot_mapping;    /* int64 [>= num_actual_tokens] slot or -1 (padding); may
                                      be NULL when forward is given no key/value */
  int num_reqs;
  int num_decodes;       /* requests [0, num_decodes) are decodes */
  int num_decode_tokens; /* == num_decodes; with decode_query_len > 1, the decodes' tokens
                            (num_decodes..num_decodes * decode_query_len) */
  int num_actual_tokens; /* tokens written to the cache */
  int max_query_len;     /* over the prefills (1 when there are none) */
  int max_seq_len;
  /* Appended (read only where struct_size holds it): nonzero splits the batch into decodes
   * and prefills on the device (C++ AttentionMetadata::device_split), for one CUDA graph per
   * token count that serves any mix: num_reqs counts request slots (padded ones hold no token:
   * query_start_loc repeats its last offset, seq_lens 0), decodes come first, num_decodes,
   * num_decode_tokens and max_query_len are not read. */
  int device_split;
} graphattn_metadata_t;

GRAPHATTN_API void graphattn_metadata_init(graphattn_metadata_t* metadata) GRAPHATTN_NOEXCEPT;

/* One step on `stream` (C++ AttentionBackend::forward):
 *   query, output: [num_tokens, num_heads, head_size] dtype, head dim contiguous
 *   key, value:    [num_tokens, num_kv_heads, head_size] dtype, written to their slots first;
 *                  both NULL: no cache write
 *   kv_cache:      [2, num_blocks, block_size, num_kv_heads, head_size] (NHD or HND strides)
 *   workspace:     graphattn_backend_workspace_bytes() bytes, zero-filled before first use
 * An encoder-only layer (GRAPHATTN_ATTN_ENCODER_ONLY) has no cache: key and value are the
 * batch's tokens, and kv_cache, metadata's seq_lens, block_table and slot_mapping may be NULL.
 * Launches nothing when it fails. After prepare it compiles, loads, allocates and
 * synchronizes nothing, so it can be captured in a CUDA graph. */
GRAPHATTN_API graphattn_status_t graphattn_backend_forward(
    graphattn_backend_t backend, const DLTensor* query, const DLTensor* key, const DLTensor* value,
    const DLTensor* kv_cache, const DLTensor* output, const graphattn_metadata_t* metadata,
    void* workspace, size_t workspace_bytes, void* stream) GRAPHATTN_NOEXCEPT;
/* graphattn_backend_forward of a layer configured with softmax_lse = 1: also writes
 * softmax_lse, fp32 [num_heads, >= num_tokens] (rows contiguous; FlashAttention's layout),
 * natural log, -inf for a query row that saw no key. */
GRAPHATTN_API graphattn_status_t graphattn_backend_forward_lse(
    graphattn_backend_t backend, const DLTensor* query, const DLTensor* key, const DLTensor* value,
    const DLTensor* kv_cache, const DLTensor* output, const graphattn_metadata_t* metadata,
    void* workspace, size_t workspace_bytes, void* stream,
    const DLTensor* softmax_lse) GRAPHATTN_NOEXCEPT;

/* Checked mode (config check_bounds) only: the first block id or slot out of the cache's range
 * that a kernel of this backend met since the last call, and clears the record. Synchronizes
 * the context: call it outside captures, e.g. after a step. GRAPHATTN_ERROR outside checked
 * mode. */
typedef enum graphattn_bounds_kind {
  GRAPHATTN_BOUNDS_NONE = 0,
  GRAPHATTN_BOUNDS_BLOCK_ID = 1,
  GRAPHATTN_BOUNDS_SLOT = 2,
  GRAPHATTN_BOUNDS_ENUM_MAX = 0x7fffffff
} graphattn_bounds_kind_t;
typedef struct graphattn_bounds_violation {
  graphattn_bounds_kind_t kind;
  int request;       /* block ids: the request (block_table row); slots: the decode request, or
                        -1 when the cache write kernel met it */
  int position;      /* block ids: the key position in the request; slots: the batch token */
  int64_t value;     /* the block id or slot */
  char message[256]; /* e.g. "block id 70000 of request 3 at position 4096 is outside ..." */
} graphattn_bounds_violation_t;
GRAPHATTN_API graphattn_status_t graphattn_backend_take_bounds_violation(
    graphattn_backend_t backend, graphattn_bounds_violation_t* violation) GRAPHATTN_NOEXCEPT;

/* Encoder-only attention (C++ encoder_attention): bidirectional self-attention of the sequences
 * of query_start_loc (int32 [num_reqs + 1]) over dense keys and values, no KV cache.
 * query, output [num_tokens, num_heads, head_size]; key, value [num_tokens, num_kv_heads,
 * head_size] (equal strides); max_query_len >= every sequence's length. alibi_slopes and sinks
 * (may be NULL): float32 [num_heads] device tensors. Compiles its kernel on first use. */
GRAPHATTN_API graphattn_status_t graphattn_encoder_attention(
    const DLTensor* query, const DLTensor* key, const DLTensor* value, const DLTensor* output,
    const DLTensor* query_start_loc, int max_query_len, float scale, const DLTensor* alibi_slopes,
    const DLTensor* sinks, void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;
/* vLLM's MultiHeadAttention (C++ multi_head_attention): q, out [batch, q_len, num_heads,
 * head_size], k, v [batch, kv_len, num_kv_heads, head_size], non-causal, no cache. */
GRAPHATTN_API graphattn_status_t graphattn_multi_head_attention(
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* out, float scale,
    void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;

/* The cache write alone (vLLM's reshape_and_cache_flash): key and value [num_tokens,
 * num_kv_heads, head_size] (float16, bfloat16 or float32; block_size 8 or a multiple of 16)
 * into kv_cache at slot_mapping (int64 [num_tokens], -1 skipped).
 * fp8 caches store value / scale. Compiles and loads its kernel through `cache` (NULL: the
 * default) on first use, so warm it before capturing it. */
GRAPHATTN_API graphattn_status_t
graphattn_write_kv_cache(const DLTensor* key, const DLTensor* value, const DLTensor* kv_cache,
                         const DLTensor* slot_mapping, graphattn_kv_dtype_t kv_dtype, float k_scale,
                         float v_scale, void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;

/* fp8 scales in device memory: vLLM's Attention.calc_kv_scales on the device (C++
 * graphattn::calc_kv_scales). key and value [num_tokens, num_kv_heads, head_size] float16 or
 * bfloat16 (exactly these rows are read: pass a view of the real tokens); k_scale and v_scale
 * one-element float32 device tensors, overwritten with max(amax(|key|) / k_divisor, 1e-12) and
 * likewise for the values. Divisors finite > 0: vLLM's are 200 (keys) and 100 (values)
 * (GRAPHATTN_K_SCALE_DIVISOR, GRAPHATTN_V_SCALE_DIVISOR); 448 (e4m3) or 57344 (e5m2) give
 * amax / fp8 max. Two memsets and one kernel on `stream`, no host sync: capturable once its
 * kernel is loaded (compiled through `cache`, NULL: the default, on first use). */
#define GRAPHATTN_K_SCALE_DIVISOR 200.0f
#define GRAPHATTN_V_SCALE_DIVISOR 100.0f
GRAPHATTN_API graphattn_status_t graphattn_calc_kv_scales(
    const DLTensor* key, const DLTensor* value, const DLTensor* k_scale, const DLTensor* v_scale,
    float k_divisor, float v_divisor, void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;

/* vLLM's reshape_and_cache into its legacy PagedAttention caches (C++ write_to_paged_cache,
 * graphattn/paged_cache.hpp): key_cache [num_blocks, num_kv_heads, head_size / x, block_size,
 * x] and value_cache [num_blocks, num_kv_heads, head_size, block_size], compact, x read from
 * key_cache (8, 16, or 16 bytes of elements: 4 for float32); kv_dtype says how to read uint8
 * caches (auto: the keys' dtype). key, value (float16, bfloat16 or float32), slot_mapping,
 * scales and cache as graphattn_write_kv_cache; block_size 8 or a multiple of 16.
 * graphattn_forward_prefix (16-bit queries, block sizes from 16) and
 * graphattn_paged_attention_v1 / v2 (16-bit or float32 queries, block size 8 too) read these
 * caches with the same x values. */
GRAPHATTN_API graphattn_status_t graphattn_write_to_paged_cache(
    const DLTensor* key, const DLTensor* value, const DLTensor* key_cache,
    const DLTensor* value_cache, const DLTensor* slot_mapping, graphattn_kv_dtype_t kv_dtype,
    float k_scale, float v_scale, void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;
/* vLLM 0.33's reshape_and_cache(..., interleaved_v): graphattn_write_to_paged_cache, and with
 * interleaved_v != 0 the value cache (same shape) holds [num_blocks, num_kv_heads, block_size /
 * kx, head_size, kx], kx = 16 bytes of cache elements (8 16-bit, 4 float32, 16 fp8; block_size
 * a multiple of kx): the layout of vLLM's ROCm fused writer (spec suffix "_iv"). graphattn's
 * readers take the plain layout only. */
GRAPHATTN_API graphattn_status_t graphattn_reshape_and_cache(
    const DLTensor* key, const DLTensor* value, const DLTensor* key_cache,
    const DLTensor* value_cache, const DLTensor* slot_mapping, graphattn_kv_dtype_t kv_dtype,
    float k_scale, float v_scale, int interleaved_v, void* stream,
    graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;

/* vLLM's PagedAttention.forward_prefix over its legacy caches (C++ forward_prefix,
 * graphattn/paged_cache.hpp, which says the semantics): the new tokens of each request of
 * query_start_loc (int32 [num_reqs + 1]) at positions seq_lens[r] - q_len .. seq_lens[r] - 1
 * attend causally to the cached prefix and to themselves, every key and value read from
 * key_cache / value_cache through block_tables (int32 [num_reqs, max_blocks]): write the new
 * tokens there first (graphattn_write_to_paged_cache), as vLLM does. key and value
 * ([num_tokens, num_kv_heads, head_size], or NULL) are checked but not read; with an fp8 cache
 * the new tokens therefore take part quantized, where vLLM reads them unquantized. kv_dtype as
 * graphattn_write_to_paged_cache; block_size a multiple of 16 (vLLM's 8 is refused);
 * sliding_window 0: none. alibi_slopes, sinks: float32 [num_heads] device tensors or NULL.
 * k_scale_device, v_scale_device: one-element float32 device tensors read when the kernel runs
 * instead of k_scale / v_scale (fp8 caches), or NULL (graphattn_calc_kv_scales writes them).
 * scale 0: 1 / sqrt(head_size); soft_cap 0: none; causal 0: every new token sees all keys.
 * output [num_tokens, num_heads, head_size] is written. Compiles its kernel on first use. */
GRAPHATTN_API graphattn_status_t graphattn_forward_prefix(
    const DLTensor* query, const DLTensor* key, const DLTensor* value,
    graphattn_kv_dtype_t kv_dtype, const DLTensor* key_cache, const DLTensor* value_cache,
    const DLTensor* block_tables, const DLTensor* query_start_loc, const DLTensor* seq_lens,
    int max_query_len, const DLTensor* alibi_slopes, int sliding_window, float k_scale,
    float v_scale, const DLTensor* k_scale_device, const DLTensor* v_scale_device, float scale,
    float soft_cap, const DLTensor* sinks, int causal, const DLTensor* output, void* stream,
    graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;
/* vLLM's paged_attention_v1 / v2 over its legacy caches (C++ graphattn/paged_cache.hpp, which
 * documents every argument): out, query [num_seqs, num_heads, head_size] fp16/bf16/fp32;
 * key_cache, value_cache as graphattn_write_to_paged_cache (uint8 caches read as kv_dtype
 * says); block_tables int32 [num_seqs, max_blocks]; seq_lens int32 [num_seqs]; alibi_slopes
 * float32 [num_heads] or NULL; kv_dtype the caches' element type (vLLM's "fp8" is
 * GRAPHATTN_KV_DTYPE_FP8_E4M3); k_scale_device, v_scale_device as graphattn_forward_prefix;
 * blocksparse_vert_stride <= 1 is dense, larger block-sparse (vLLM's rule). v2's
 * exp_sums, max_logits (float32 [num_seqs, num_heads, max_num_partitions]) and tmp_out ([num_seqs,
 * num_heads, max_num_partitions, head_size], out's dtype) are checked, not used: graphattn keeps
 * a split workspace per device, allocated by the first call that needs it, so calls must not run
 * concurrently on different streams. Capturable after one eager call of the same configuration
 * (which loads the kernel and sizes the workspace). */
GRAPHATTN_API graphattn_status_t graphattn_paged_attention_v1(
    const DLTensor* out, const DLTensor* query, const DLTensor* key_cache,
    const DLTensor* value_cache, int num_kv_heads, float scale, const DLTensor* block_tables,
    const DLTensor* seq_lens, int block_size, int max_seq_len, const DLTensor* alibi_slopes,
    graphattn_kv_dtype_t kv_dtype, float k_scale, float v_scale, const DLTensor* k_scale_device,
    const DLTensor* v_scale_device, int tp_rank, int blocksparse_local_blocks,
    int blocksparse_vert_stride, int blocksparse_block_size, int blocksparse_head_sliding_step,
    void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;
GRAPHATTN_API graphattn_status_t graphattn_paged_attention_v2(
    const DLTensor* out, const DLTensor* exp_sums, const DLTensor* max_logits,
    const DLTensor* tmp_out, const DLTensor* query, const DLTensor* key_cache,
    const DLTensor* value_cache, int num_kv_heads, float scale, const DLTensor* block_tables,
    const DLTensor* seq_lens, int block_size, int max_seq_len, const DLTensor* alibi_slopes,
    graphattn_kv_dtype_t kv_dtype, float k_scale, float v_scale, const DLTensor* k_scale_device,
    const DLTensor* v_scale_device, int tp_rank, int blocksparse_local_blocks,
    int blocksparse_vert_stride, int blocksparse_block_size, int blocksparse_head_sliding_step,
    void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;
/* vLLM's v1-vs-v2 rule: *use_v1 = 1 when max_seq_len <= 8192 and (max_seq_len <= 512 or
 * num_seqs * num_heads > 512), else 0. max_seq_len < 0 is GRAPHATTN_ERROR. */
GRAPHATTN_API graphattn_status_t graphattn_use_paged_attention_v1(int64_t max_seq_len,
                                                                  int64_t num_seqs,
                                                                  int64_t num_heads,
                                                                  int* use_v1) GRAPHATTN_NOEXCEPT;

/* ---- Block copies (vLLM's swap_blocks and copy_blocks; C++ graphattn/kv_blocks.hpp) -------- */

/* For each pair i in order, block block_mapping[2i + 1] of dst := block block_mapping[2i] of
 * src. src and dst are [num_blocks, ...] caches of one dtype and block shape (the dims after
 * the first), each block one compact region (NHD or HND pages; for a flash KV cache [2,
 * num_blocks, ...] pass its key and value halves, e.g. kv_cache[0] and kv_cache[1]); either may
 * be host memory (kDLCPU, or kDLCUDAHost for pinned memory, which keeps the copy asynchronous).
 * block_mapping: host int64 [num_pairs][2]. One cuMemcpyAsync per pair on stream; every view
 * and pair is checked first (GRAPHATTN_ERROR naming the pair by index and the allowed range). */
GRAPHATTN_API graphattn_status_t graphattn_swap_blocks(const DLTensor* src, const DLTensor* dst,
                                                       const int64_t* block_mapping,
                                                       size_t num_pairs,
                                                       void* stream) GRAPHATTN_NOEXCEPT;
/* Copy-on-write: in every one of num_caches device caches ([num_blocks, ...] as above, e.g.
 * every layer's key and value halves), for each pair in order, block dst := block src (a pair
 * with src == dst copies nothing). Device-to-device copies on stream; capturable. */
GRAPHATTN_API graphattn_status_t graphattn_copy_blocks(const DLTensor* const* caches,
                                                       size_t num_caches,
                                                       const int64_t* block_mapping,
                                                       size_t num_pairs,
                                                       void* stream) GRAPHATTN_NOEXCEPT;

/* copy_blocks as vLLM calls it, with block_mapping an int64 [num_pairs, 2] (src, dst) CUDA device
 * tensor (C++ copy_blocks_device in graphattn/kv_blocks.hpp): one kernel reads
 * the pairs on the device and copies them in every one of num_caches device caches (as
 * graphattn_copy_blocks takes them) in one launch (256 caches a launch). No host sync, no
 * allocation: capturable once its kernel is loaded (compiled through `cache`, NULL: the
 * default, on the first call), and a replay reads the mapping's current contents. A pair with a
 * block outside a cache (e.g. a -1 row padding a captured mapping) or with src == dst copies
 * nothing; the pairs run in parallel, so no block may be written twice or written and read. A
 * host block_mapping is GRAPHATTN_ERROR_INVALID_ARGUMENT (graphattn_copy_blocks takes those). */
GRAPHATTN_API graphattn_status_t graphattn_copy_blocks_device(
    const DLTensor* const* caches, size_t num_caches, const DLTensor* block_mapping, void* stream,
    graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;

/* ---- Merging attention states (vLLM's merge_attn_states; C++ graphattn/merge_states.hpp) --- */

/* output[t, h] = the attention over two disjoint key sets from their partial results, weighted by
 * their log-sum-exps (natural log): prefix_output, suffix_output and output [num_tokens,
 * num_heads, head_size] of one dtype (float16, bfloat16 or float32; head_size * element size a
 * multiple of 16 bytes, head dim contiguous); prefix_lse, suffix_lse float32 [num_heads,
 * num_tokens]; output_lse the same or NULL (not written). An infinite LSE counts as -inf (an
 * empty key set): that side gets weight 0; both infinite: output = prefix_output, output_lse =
 * -inf. C++ merge_attn_states documents every argument. One kernel on stream, no host sync, no
 * allocation: capturable once its kernel is loaded (the first call compiles it through `cache`,
 * NULL: the default). */
GRAPHATTN_API graphattn_status_t graphattn_merge_attn_states(
    const DLTensor* output, const DLTensor* prefix_output, const DLTensor* prefix_lse,
    const DLTensor* suffix_output, const DLTensor* suffix_lse, const DLTensor* output_lse,
    void* stream, graphattn_cache_t cache) GRAPHATTN_NOEXCEPT;

/* ---- Metadata builder and capture sizes (host only) --------------------------------------- */

/* What the flash metadata builder supports inside CUDA graphs. */
GRAPHATTN_API graphattn_cudagraph_support_t graphattn_cudagraph_support(void) GRAPHATTN_NOEXCEPT;

/* Whether a batch (query_start_loc: host int32 [num_reqs + 1]) can replay a graph captured
 * for decodes: *result 1 or 0. */
GRAPHATTN_API graphattn_status_t graphattn_can_run_in_cudagraph(const int32_t* query_start_loc,
                                                                int num_reqs,
                                                                int* result) GRAPHATTN_NOEXCEPT;

/* Speculative decoding (layers with decode_query_len > 1: 1 + the draft tokens a step
 * verifies, up to 16): the builder's support level for that decode query length
 * (GRAPHATTN_CUDAGRAPH_UNIFORM_BATCH above 1), and whether a batch is a uniform decode batch
 * (every request exactly decode_query_len tokens) that a full graph serves. A decode_query_len
 * out of 1..16 is GRAPHATTN_ERROR naming it. graphattn_can_run_in_cudagraph is the
 * decode_query_len 1 case. */
GRAPHATTN_API graphattn_status_t graphattn_cudagraph_support_for(
    int decode_query_len, graphattn_cudagraph_support_t* support) GRAPHATTN_NOEXCEPT;
GRAPHATTN_API graphattn_status_t graphattn_can_run_uniform_decode(const int32_t* query_start_loc,
                                                                  int num_reqs,
                                                                  int decode_query_len,
                                                                  int* result) GRAPHATTN_NOEXCEPT;

/* graphattn's rule for cascade attention (C++ use_cascade_attention, graphattn/metadata.hpp:
 * vLLM's, with a measured floor for GQA decode batches): *result = 1 to use it for a batch of
 * num_reqs requests with these scheduled query lengths ([num_reqs], host) and a common prefix
 * of common_prefix_len tokens. */
GRAPHATTN_API graphattn_status_t graphattn_use_cascade_attention(
    int common_prefix_len, const int32_t* query_lens, int num_reqs, int num_query_heads,
    int num_kv_heads, int use_alibi, int use_sliding_window, int num_sms,
    int* result) GRAPHATTN_NOEXCEPT;

/* vLLM's split of a batch ordered decodes first (query length <= decode_threshold). A decode
 * after a prefill fails, naming the request. */
typedef struct graphattn_decode_prefill_split {
  int num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens;
} graphattn_decode_prefill_split_t;
GRAPHATTN_API graphattn_status_t graphattn_split_decodes_and_prefills(
    const int32_t* query_start_loc, int num_reqs, int decode_threshold,
    graphattn_decode_prefill_split_t* split) GRAPHATTN_NOEXCEPT;

/* The default capture sizes for max_num_seqs ([1, 2, 4] + range(8, 256, 8) + range(256,
 * max + 1, 16), max = min(2 * max_num_seqs, 512)): up to capacity into sizes, *count the
 * total (BUFFER_TOO_SMALL when more than capacity). */
GRAPHATTN_API graphattn_status_t graphattn_default_capture_sizes(int max_num_seqs, int* sizes,
                                                                 size_t capacity,
                                                                 size_t* count) GRAPHATTN_NOEXCEPT;
/* The same for graphs of uniform decode batches of decode_query_len tokens a request (C++
 * default_capture_sizes(max_num_seqs, decode_query_len)): the list for max = min(2 *
 * max_num_seqs * decode_query_len, 512), each size rounded up to a multiple of decode_query_len,
 * duplicates and sizes above max dropped. decode_query_len 1 is the list above. */
GRAPHATTN_API graphattn_status_t
graphattn_uniform_decode_capture_sizes(int max_num_seqs, int decode_query_len, int* sizes,
                                       size_t capacity, size_t* count) GRAPHATTN_NOEXCEPT;
/* The smallest of sorted_sizes >= num_tokens, or 0 when num_tokens is above them all. */
GRAPHATTN_API graphattn_status_t graphattn_padded_capture_size(const int* sorted_sizes,
                                                               size_t num_sizes, int num_tokens,
                                                               int* padded) GRAPHATTN_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GRAPHATTN_GRAPHATTN_H_ */
