// Kernel parameter structs: the one contract between the host and the templates. Compiled both
// by the host C++ compiler and, embedded, by NVRTC, so only fixed-size C types appear here.
// Every kernel takes exactly one of these by value (__grid_constant__). Strides are in elements
// of the tensor's own type; the head dimension is always contiguous.
#pragma once

// reshape_and_cache_flash: write each token's key and value into its slot of the paged cache.
struct CacheWriteParams {
  const void* key;                // [num_tokens, num_kv_heads, head_size] dtype
  const void* value;              // [num_tokens, num_kv_heads, head_size] dtype
  void* key_cache;                // [num_blocks, block_size, num_kv_heads, head_size] NHD, or
                                  // [num_blocks, num_kv_heads, block_size, head_size] HND; kv dtype
  void* value_cache;              // same shape as key_cache
  const long long* slot_mapping;  // [num_tokens] block * block_size + offset; -1: write nothing
  long long key_token_stride;
  long long key_head_stride;
  long long value_token_stride;
  long long value_head_stride;
  long long cache_block_stride;   // shared by key_cache and value_cache
  long long cache_token_stride;
  long long cache_head_stride;
  long long num_slots;            // num_blocks * block_size; slots outside [0, num_slots) skip
  int num_tokens;
  int num_kv_heads;
  float k_scale;                  // fp8 KV: stored = key / k_scale
  float v_scale;                  // fp8 KV: stored = value / v_scale
};

// Prefill (and chunked prefill / prefix caching): variable-length queries over the paged KV
// cache, causal. The launch covers requests [first_req, first_req + gridDim.y).
struct PrefillParams {
  const void* query;              // [num_tokens, num_heads, head_size] dtype
  void* output;                   // [num_tokens, num_heads, head_size] dtype
  const void* key_cache;          // [num_blocks, block_size, num_kv_heads, head_size] NHD, or
                                  // [num_blocks, num_kv_heads, block_size, head_size] HND; kv dtype
  const void* value_cache;        // same shape as key_cache
  const int* query_start_loc;     // [num_reqs + 1] token offsets of each request's queries
  const int* seq_lens;            // [num_reqs] context + new tokens; 0: write zeros
  const int* block_table;         // [num_reqs, block_table_stride] physical block ids
  long long query_token_stride;   // elements
  long long query_head_stride;
  long long output_token_stride;
  long long output_head_stride;
  long long cache_block_stride;   // shared by key_cache and value_cache, elements
  long long cache_token_stride;
  long long cache_head_stride;
  long long block_table_stride;   // elements between block_table rows
  int first_req;                  // request of blockIdx.y == 0
  int num_kv_heads;               // == gridDim.z
  float scale_log2;               // softmax scale * k_scale (fp8) * log2(e); no soft cap
  float scale;                    // softmax scale * k_scale (fp8), used with the soft cap
  float soft_cap;                 // HAS_SOFT_CAP: scores -> soft_cap * tanh(score / soft_cap)
  float v_scale;                  // fp8 KV: multiplies the output; 1 otherwise
  int window;                     // HAS_WINDOW: key k visible from position p when p - k < window
};
