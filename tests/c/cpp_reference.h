// SPDX-License-Identifier: Apache-2.0
/* What the C GPU test needs from C++: the C++ API's forward and cache write as references (on
 * views built here, independently of the C ABI's DLTensor conversion), and device memory,
 * streams and graph capture through the library's dlopen'ed driver table (the test links no
 * libcuda, so C has no other way to the driver). Every int function returns 0 on success, or
 * prints what failed to stderr and returns 1. */
#ifndef GRAPHATTN_TESTS_C_CPP_REFERENCE_H_
#define GRAPHATTN_TESTS_C_CPP_REFERENCE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device memory (zero-filled on allocation) and copies. */
int ref_alloc(size_t bytes, void** ptr);
void ref_free(void* ptr);
int ref_upload(void* device, const void* host, size_t bytes);
int ref_download(void* host, const void* device, size_t bytes);
int ref_fill(void* device, unsigned char value, size_t bytes);

/* A non-blocking stream (CUstream as void*). */
int ref_stream_create(void** stream);
void ref_stream_destroy(void* stream);
int ref_stream_sync(void* stream);

/* Stream capture into a graph: begin, run work on the stream, end (which instantiates). */
int ref_capture_begin(void* stream);
int ref_capture_end(void* stream, void** graph_exec);
int ref_graph_launch(void* graph_exec, void* stream);
void ref_graph_destroy(void* graph_exec);

/* A layer's geometry, as the C++ AttentionLayerConfig gets it. */
typedef struct ref_layer {
  int num_heads, num_kv_heads, head_size, block_size;
  int bf16;   /* 1: bfloat16, 0: float16 */
  int hnd;    /* 1: the KV cache is HND, 0: NHD */
  int kv_fp8; /* 0: auto, 1: fp8 e4m3, 2: fp8 e5m2 */
  float k_scale, v_scale;
  int max_model_len, max_num_seqs;
} ref_layer_t;

/* One step's device buffers, all compact row-major (the KV cache in the layer's layout):
 * query/output [num_tokens, num_heads, head_size], key/value [num_tokens, num_kv_heads,
 * head_size] (NULL: no cache write), kv_cache [2, num_blocks, ...], query_start_loc
 * [num_reqs + 1], seq_lens [num_reqs], block_table [num_reqs, max_blocks_per_seq] int32,
 * slot_mapping [num_tokens] int64. */
typedef struct ref_batch {
  void *query, *key, *value, *kv_cache, *output;
  void *query_start_loc, *seq_lens, *block_table, *slot_mapping;
  int num_tokens, num_blocks, max_blocks_per_seq;
  int num_reqs, num_decodes, num_actual_tokens, max_query_len, max_seq_len;
} ref_batch_t;

/* C++ AttentionBackend::forward on `stream` for arch 0 (the current device), through a
 * KernelCache in cache_dir, with a fresh zero-filled workspace; synchronizes the stream. */
int ref_forward(const ref_layer_t* layer, const ref_batch_t* batch, const char* cache_dir,
                void* stream);

/* C++ write_kv_cache of batch->key/value (num_tokens rows) into batch->kv_cache at
 * batch->slot_mapping, with the layer's kv dtype and scales; synchronizes the stream. */
int ref_write_kv_cache(const ref_layer_t* layer, const ref_batch_t* batch, const char* cache_dir,
                       void* stream);

/* C++ forward_prefix over vLLM's legacy caches: batch->kv_cache is one [2, num_blocks,
 * block_size * num_kv_heads * head_size] allocation (split as split_paged_kv_cache does) that
 * already holds every token's key and value; reads query, block_table, query_start_loc and
 * seq_lens, writes output; the layer's kv dtype and scales; synchronizes the stream. */
int ref_forward_prefix(const ref_layer_t* layer, const ref_batch_t* batch, const char* cache_dir,
                       void* stream);
/* C++ paged_attention_v1 over vLLM's legacy caches, the halves of kv_cache [2, num_blocks,
 * block_size * num_kv_heads * head_size] (the layer's kv dtype; hnd ignored): out and query
 * [num_seqs, num_heads, head_size], block_table int32 [num_seqs, max_blocks_per_seq], seq_lens
 * int32 [num_seqs] (batch->output, query, block_table, seq_lens, num_blocks,
 * max_blocks_per_seq, num_reqs, max_seq_len), no ALiBi; synchronizes the stream. */
int ref_paged_attention(const ref_layer_t* layer, const ref_batch_t* batch, float scale,
                        const char* cache_dir, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GRAPHATTN_TESTS_C_CPP_REFERENCE_H_ */
