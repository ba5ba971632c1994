// SPDX-License-Identifier: Apache-2.0
/* GPU tests of the C ABI, compiled as C: graphattn_backend_forward and graphattn_write_kv_cache
 * against the C++ API (tests/c/cpp_reference_forward.cpp) on the same random inputs, bit for
 * bit, and a forward captured in a CUDA graph and replayed with new sequence lengths against
 * eager forwards. Both paths run the same loaded kernels, so any difference comes from the C
 * ABI: its DLTensor conversion, metadata, scales, streams. Exits 77 (ctest: Skipped) without a
 * GPU. GRAPHATTN_TEST_SEED=n repeats a run. */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "graphattn/graphattn.h"
#include "tests/c/c_check.h"
#include "tests/c/cpp_reference.h"
#include "tests/c/readme_example.h"

#define MAX_REQS 32
#define UNUSED_BLOCK 0x3fffffff /* block-table entries no request may read */

static uint64_t rng_state;

static uint64_t next_random(void) { /* xorshift64 */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* A finite 16-bit float of magnitude 2^-4..2^1 with random sign and mantissa. */
static uint16_t random_half(int bf16) {
  const uint64_t r = next_random();
  const unsigned sign = (unsigned)(r & 1), exp = (unsigned)((r >> 8) % 5);
  if (bf16) return (uint16_t)((sign << 15) | ((123 + exp) << 7) | ((r >> 20) & 0x7f));
  return (uint16_t)((sign << 15) | ((11 + exp) << 10) | ((r >> 20) & 0x3ff));
}

static void fill_halves(uint16_t* p, size_t n, int bf16) {
  for (size_t i = 0; i < n; ++i) p[i] = random_half(bf16);
}

static int is_nan_half(uint16_t h, int bf16) {
  return bf16 ? (h & 0x7f80) == 0x7f80 && (h & 0x7f) : (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

static void* xmalloc(size_t bytes) {
  void* p = calloc(1, bytes ? bytes : 1);
  CHECK(p != NULL);
  return p;
}

static void* device_copy(const void* host, size_t bytes) {
  void* d = NULL;
  CHECK(ref_alloc(bytes, &d) == 0);
  if (host) CHECK(ref_upload(d, host, bytes) == 0);
  return d;
}

/* ---- A layer, for both paths -------------------------------------------------------------- */

typedef struct layer {
  graphattn_layer_config_t config; /* the C ABI's */
  ref_layer_t ref;                 /* the C++ reference's */
} layer_t;

static layer_t make_layer(int heads, int kv_heads, int head_size, int block_size, int bf16, int hnd,
                          int max_model_len, int max_num_seqs) {
  layer_t l;
  graphattn_layer_config_init(&l.config);
  l.config.num_heads = heads;
  l.config.num_kv_heads = kv_heads;
  l.config.head_size = head_size;
  l.config.block_size = block_size;
  l.config.dtype = bf16 ? GRAPHATTN_DTYPE_BFLOAT16 : GRAPHATTN_DTYPE_FLOAT16;
  l.config.layout = hnd ? GRAPHATTN_KV_LAYOUT_HND : GRAPHATTN_KV_LAYOUT_NHD;
  l.config.max_model_len = max_model_len;
  l.config.max_num_seqs = max_num_seqs;
  memset(&l.ref, 0, sizeof l.ref);
  l.ref.num_heads = heads;
  l.ref.num_kv_heads = kv_heads;
  l.ref.head_size = head_size;
  l.ref.block_size = block_size;
  l.ref.bf16 = bf16;
  l.ref.hnd = hnd;
  l.ref.k_scale = l.ref.v_scale = 1.0f;
  l.ref.max_model_len = max_model_len;
  l.ref.max_num_seqs = max_num_seqs;
  return l;
}

/* Element index of (kv 0/1, block, offset, head, dim) in the layer's cache layout. */
static size_t cache_index(const ref_layer_t* l, int num_blocks, int kv, int64_t block, int off,
                          int head, int dim) {
  const size_t B = (size_t)l->block_size, KH = (size_t)l->num_kv_heads, D = (size_t)l->head_size;
  const size_t base = ((size_t)kv * (size_t)num_blocks + (size_t)block) * B * KH * D;
  return l->hnd ? base + ((size_t)head * B + (size_t)off) * D + (size_t)dim
                : base + ((size_t)off * KH + (size_t)head) * D + (size_t)dim;
}

/* ---- A batch: host arrays and their device copies ----------------------------------------- */

typedef struct batch {
  int num_reqs, num_decodes, num_tokens, num_blocks, row_blocks;
  int max_query_len, max_seq_len;
  int32_t qsl[MAX_REQS + 1], seq[MAX_REQS];
  int32_t* block_table; /* [num_reqs, row_blocks] */
  int64_t* slots;       /* [num_tokens] */
} batch_t;

/* Requests with query lengths q and sequence lengths s (s 0: a padded request of one padded
 * token). Every real request owns row_blocks distinct, shuffled physical blocks (0: just enough
 * for the longest), so its length may later change up to row_blocks * block_size. */
static batch_t make_batch(const int* q, const int* s, int num_reqs, int num_decodes, int block_size,
                          int row_blocks) {
  batch_t b;
  memset(&b, 0, sizeof b);
  CHECK(num_reqs <= MAX_REQS);
  b.num_reqs = num_reqs;
  b.num_decodes = num_decodes;
  int real = 0;
  for (int r = 0; r < num_reqs; ++r) {
    b.qsl[r + 1] = b.qsl[r] + q[r];
    b.seq[r] = s[r];
    real += s[r] > 0;
    const int need = (s[r] + block_size - 1) / block_size;
    if (need > row_blocks) row_blocks = need;
    if (r >= num_decodes && q[r] > b.max_query_len) b.max_query_len = q[r];
    if (s[r] > b.max_seq_len) b.max_seq_len = s[r];
  }
  if (b.max_query_len == 0) b.max_query_len = 1;
  b.num_tokens = b.qsl[num_reqs];
  b.row_blocks = row_blocks;
  b.num_blocks = real * row_blocks + 1;
  int* pool = xmalloc(sizeof(int) * (size_t)b.num_blocks);
  for (int i = 0; i < b.num_blocks; ++i) pool[i] = i;
  for (int i = b.num_blocks - 1; i > 0; --i) {
    const int j = (int)(next_random() % (uint64_t)(i + 1));
    const int t = pool[i];
    pool[i] = pool[j];
    pool[j] = t;
  }
  b.block_table = xmalloc(sizeof(int32_t) * (size_t)(num_reqs * row_blocks));
  b.slots = xmalloc(sizeof(int64_t) * (size_t)b.num_tokens);
  int next = 0;
  for (int r = 0; r < num_reqs; ++r)
    for (int i = 0; i < row_blocks; ++i)
      b.block_table[r * row_blocks + i] = s[r] > 0 ? pool[next++] : UNUSED_BLOCK;
  free(pool);
  for (int r = 0; r < num_reqs; ++r)
    for (int t = b.qsl[r]; t < b.qsl[r + 1]; ++t) {
      const int pos = s[r] - q[r] + (t - b.qsl[r]);
      b.slots[t] = s[r] > 0
                       ? (int64_t)b.block_table[r * row_blocks + pos / block_size] * block_size +
                             pos % block_size
                       : -1;
    }
  return b;
}

static void free_batch(batch_t* b) {
  free(b->block_table);
  free(b->slots);
}

/* Device views of one step for both paths; the KV cache and output exist twice (C ABI, C++). */
typedef struct step {
  const layer_t* layer;
  batch_t* batch;
  size_t q_bytes, kv_bytes, cache_bytes;
  size_t query_offset; /* bytes before the query in its buffer (the DLTensor's byte_offset) */
  uint16_t *q, *k, *v, *cache; /* host: inputs and the KV cache before the step */
  void *d_query_buf, *d_key, *d_value, *d_qsl, *d_seq, *d_bt, *d_slots;
  void *d_cache[2], *d_out[2]; /* [0]: C ABI, [1]: C++ */
  /* DLTensors and their shapes and strides */
  int64_t q_shape[3], kv_shape[3], cache_shape[5], cache_strides[5], qsl_shape[1], seq_shape[1],
      bt_shape[2], slot_shape[1];
  DLTensor query, key, value, kv_cache, output, qsl, seq, bt, slot_mapping;
  graphattn_metadata_t md;
} step_t;

static DLTensor dl(void* data, uint8_t code, uint8_t bits, int ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCUDA;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static void make_step(step_t* st, const layer_t* l, batch_t* b, size_t query_offset) {
  memset(st, 0, sizeof *st);
  const ref_layer_t* r = &l->ref;
  const int bf16 = r->bf16;
  const int64_t T = b->num_tokens, H = r->num_heads, KH = r->num_kv_heads, D = r->head_size;
  const int64_t NB = b->num_blocks, B = r->block_size;
  st->layer = l;
  st->batch = b;
  st->query_offset = query_offset;
  st->q_bytes = (size_t)(T * H * D) * 2;
  st->kv_bytes = (size_t)(T * KH * D) * 2;
  st->cache_bytes = (size_t)(2 * NB * B * KH * D) * 2;
  st->q = xmalloc(st->q_bytes);
  st->k = xmalloc(st->kv_bytes);
  st->v = xmalloc(st->kv_bytes);
  st->cache = xmalloc(st->cache_bytes);
  fill_halves(st->q, st->q_bytes / 2, bf16);
  fill_halves(st->k, st->kv_bytes / 2, bf16);
  fill_halves(st->v, st->kv_bytes / 2, bf16);
  fill_halves(st->cache, st->cache_bytes / 2, bf16);

  CHECK(ref_alloc(query_offset + st->q_bytes, &st->d_query_buf) == 0);
  CHECK(ref_upload((char*)st->d_query_buf + query_offset, st->q, st->q_bytes) == 0);
  st->d_key = device_copy(st->k, st->kv_bytes);
  st->d_value = device_copy(st->v, st->kv_bytes);
  for (int i = 0; i < 2; ++i) {
    st->d_cache[i] = device_copy(st->cache, st->cache_bytes);
    st->d_out[i] = device_copy(NULL, st->q_bytes);
  }
  st->d_qsl = device_copy(b->qsl, sizeof(int32_t) * (size_t)(b->num_reqs + 1));
  st->d_seq = device_copy(b->seq, sizeof(int32_t) * (size_t)b->num_reqs);
  st->d_bt = device_copy(b->block_table, sizeof(int32_t) * (size_t)(b->num_reqs * b->row_blocks));
  st->d_slots = device_copy(b->slots, sizeof(int64_t) * (size_t)T);

  const uint8_t code = bf16 ? kDLBfloat : kDLFloat;
  st->q_shape[0] = T, st->q_shape[1] = H, st->q_shape[2] = D;
  st->kv_shape[0] = T, st->kv_shape[1] = KH, st->kv_shape[2] = D;
  st->query = dl(st->d_query_buf, code, 16, 3, st->q_shape);
  st->query.byte_offset = query_offset;
  st->key = dl(st->d_key, code, 16, 3, st->kv_shape);
  st->value = dl(st->d_value, code, 16, 3, st->kv_shape);
  st->output = dl(st->d_out[0], code, 16, 3, st->q_shape);
  int64_t* cs = st->cache_shape;
  cs[0] = 2, cs[1] = NB, cs[2] = B, cs[3] = KH, cs[4] = D;
  st->kv_cache = dl(st->d_cache[0], code, 16, 5, cs);
  if (r->hnd) { /* [2, NB, KH, B, D] in memory */
    int64_t* s = st->cache_strides;
    s[0] = NB * KH * B * D, s[1] = KH * B * D, s[2] = D, s[3] = B * D, s[4] = 1;
    st->kv_cache.strides = s;
  } /* NHD: NULL strides, compact */
  st->qsl_shape[0] = b->num_reqs + 1;
  st->seq_shape[0] = b->num_reqs;
  st->bt_shape[0] = b->num_reqs, st->bt_shape[1] = b->row_blocks;
  st->slot_shape[0] = T;
  st->qsl = dl(st->d_qsl, kDLInt, 32, 1, st->qsl_shape);
  st->seq = dl(st->d_seq, kDLInt, 32, 1, st->seq_shape);
  st->bt = dl(st->d_bt, kDLInt, 32, 2, st->bt_shape);
  st->slot_mapping = dl(st->d_slots, kDLInt, 64, 1, st->slot_shape);
  graphattn_metadata_init(&st->md);
  st->md.query_start_loc = &st->qsl;
  st->md.seq_lens = &st->seq;
  st->md.block_table = &st->bt;
  st->md.slot_mapping = &st->slot_mapping;
  st->md.num_reqs = b->num_reqs;
  st->md.num_decodes = b->num_decodes;
  st->md.num_decode_tokens = b->num_decodes;
  st->md.num_actual_tokens = b->num_tokens;
  st->md.max_query_len = b->max_query_len;
  st->md.max_seq_len = b->max_seq_len;
}

/* The same step for the C++ reference, on the second cache and output. */
static ref_batch_t ref_batch_of(const step_t* st) {
  ref_batch_t rb;
  const batch_t* b = st->batch;
  memset(&rb, 0, sizeof rb);
  rb.query = (char*)st->d_query_buf + st->query_offset;
  rb.key = st->d_key;
  rb.value = st->d_value;
  rb.kv_cache = st->d_cache[1];
  rb.output = st->d_out[1];
  rb.query_start_loc = st->d_qsl;
  rb.seq_lens = st->d_seq;
  rb.block_table = st->d_bt;
  rb.slot_mapping = st->d_slots;
  rb.num_tokens = b->num_tokens;
  rb.num_blocks = b->num_blocks;
  rb.max_blocks_per_seq = b->row_blocks;
  rb.num_reqs = b->num_reqs;
  rb.num_decodes = b->num_decodes;
  rb.num_actual_tokens = b->num_tokens;
  rb.max_query_len = b->max_query_len;
  rb.max_seq_len = b->max_seq_len;
  return rb;
}

static void free_step(step_t* st) {
  free(st->q);
  free(st->k);
  free(st->v);
  free(st->cache);
  ref_free(st->d_query_buf);
  ref_free(st->d_key);
  ref_free(st->d_value);
  for (int i = 0; i < 2; ++i) {
    ref_free(st->d_cache[i]);
    ref_free(st->d_out[i]);
  }
  ref_free(st->d_qsl);
  ref_free(st->d_seq);
  ref_free(st->d_bt);
  ref_free(st->d_slots);
}

/* Checks one step's results (output and cache downloaded from the C ABI path) against what
 * any correct run must show: the poison is gone, padded requests' rows are zero, real rows are
 * not, and every real token's key and value sit in its slot. */
static void check_step_result(const step_t* st, const uint16_t* out, const uint16_t* cache) {
  const ref_layer_t* r = &st->layer->ref;
  const batch_t* b = st->batch;
  const size_t row = (size_t)r->num_heads * (size_t)r->head_size;
  for (int q = 0; q < b->num_reqs; ++q) {
    int nonzero = 0;
    for (size_t i = (size_t)b->qsl[q] * row; i < (size_t)b->qsl[q + 1] * row; ++i) {
      CHECK(!is_nan_half(out[i], r->bf16));
      nonzero += (out[i] & 0x7fff) != 0;
      if (b->seq[q] == 0) CHECK(out[i] == 0);
    }
    if (b->seq[q] > 0) CHECK(nonzero > 0);
  }
  for (int t = 0; t < b->num_tokens; ++t) {
    const int64_t slot = b->slots[t];
    if (slot < 0) continue;
    for (int h = 0; h < r->num_kv_heads; ++h)
      for (int d = 0; d < r->head_size; ++d) {
        const size_t src =
            ((size_t)t * (size_t)r->num_kv_heads + (size_t)h) * (size_t)r->head_size + (size_t)d;
        const int64_t blk = slot / r->block_size;
        const int off = (int)(slot % r->block_size);
        CHECK(cache[cache_index(r, b->num_blocks, 0, blk, off, h, d)] == st->k[src]);
        CHECK(cache[cache_index(r, b->num_blocks, 1, blk, off, h, d)] == st->v[src]);
      }
  }
}

/* ---- forward: C ABI vs C++ ------------------------------------------------------------------ */

static void forward_case(const char* name, const layer_t* l, const int* q, const int* s,
                         int num_reqs, int num_decodes, size_t query_offset,
                         graphattn_cache_t cache, const char* cache_dir, void* stream) {
  size_t ws_bytes = 0;
  graphattn_backend_t backend = attention_create(&l->config, cache, &ws_bytes); /* README's */
  CHECK(backend != NULL);
  void* ws = device_copy(NULL, ws_bytes); /* zero-filled */

  batch_t b = make_batch(q, s, num_reqs, num_decodes, l->ref.block_size, 0);
  step_t st;
  make_step(&st, l, &b, query_offset);
  CHECK(ref_fill(st.d_out[0], 0xff, st.q_bytes) == 0); /* poison: NaN in fp16 and bf16 */
  CHECK(ref_fill(st.d_out[1], 0xff, st.q_bytes) == 0);

  CHECK(attention_step(backend, &st.query, &st.key, &st.value, &st.kv_cache, &st.output, &st.md, ws,
                       ws_bytes, stream) == 0);
  CHECK(ref_stream_sync(stream) == 0);
  const ref_batch_t rb = ref_batch_of(&st);
  CHECK(ref_forward(&l->ref, &rb, cache_dir, stream) == 0);

  uint16_t* out[2] = {xmalloc(st.q_bytes), xmalloc(st.q_bytes)};
  uint16_t* kv[2] = {xmalloc(st.cache_bytes), xmalloc(st.cache_bytes)};
  for (int i = 0; i < 2; ++i) {
    CHECK(ref_download(out[i], st.d_out[i], st.q_bytes) == 0);
    CHECK(ref_download(kv[i], st.d_cache[i], st.cache_bytes) == 0);
  }
  check_step_result(&st, out[0], kv[0]);
  CHECK(memcmp(out[0], out[1], st.q_bytes) == 0);
  CHECK(memcmp(kv[0], kv[1], st.cache_bytes) == 0);
  printf(
      "forward %s: %d requests (%d decodes), %d tokens: output and KV cache identical to "
      "the C++ forward\n",
      name, num_reqs, num_decodes, b.num_tokens);
  for (int i = 0; i < 2; ++i) {
    free(out[i]);
    free(kv[i]);
  }
  free_step(&st);
  free_batch(&b);
  ref_free(ws);
  graphattn_backend_destroy(backend);
}

/* ---- write_kv_cache: C ABI vs C++ ----------------------------------------------------------- */

/* kv_fp8 0: a 16-bit cache; 1: fp8 e4m3 passed as uint8; 2: fp8 e5m2 passed as DLPack 1.1's
 * float8_e5m2 (code 12). */
static void write_case(const char* name, layer_t l, int kv_fp8, float k_scale, float v_scale,
                       graphattn_cache_t cache, const char* cache_dir, void* stream) {
  enum { kTokens = 24 };
  int q[kTokens], s[kTokens];
  for (int i = 0; i < kTokens; ++i) {
    q[i] = 1;
    s[i] = i % 5 == 4 ? 0 : 1 + (int)(next_random() % 200); /* every fifth slot -1 */
  }
  l.ref.kv_fp8 = kv_fp8;
  l.ref.k_scale = k_scale;
  l.ref.v_scale = v_scale;
  batch_t b = make_batch(q, s, kTokens, kTokens, l.ref.block_size, 0);
  step_t st;
  make_step(&st, &l, &b, 0);
  /* An fp8 cache: bytes; its DLTensor has 8-bit elements and half the bytes matter. */
  if (kv_fp8) {
    st.cache_bytes /= 2;
    st.kv_cache.dtype.code = kv_fp8 == 1 ? kDLUInt : 12;
    st.kv_cache.dtype.bits = 8;
  }
  const graphattn_kv_dtype_t kv_dtype = kv_fp8 == 1   ? GRAPHATTN_KV_DTYPE_FP8_E4M3
                                        : kv_fp8 == 2 ? GRAPHATTN_KV_DTYPE_FP8_E5M2
                                                      : GRAPHATTN_KV_DTYPE_AUTO;
  CHECK_OK(graphattn_write_kv_cache(&st.key, &st.value, &st.kv_cache, &st.slot_mapping, kv_dtype,
                                    k_scale, v_scale, stream, cache));
  CHECK(ref_stream_sync(stream) == 0);
  const ref_batch_t rb = ref_batch_of(&st);
  CHECK(ref_write_kv_cache(&l.ref, &rb, cache_dir, stream) == 0);

  uint16_t* kv[2] = {xmalloc(st.cache_bytes), xmalloc(st.cache_bytes)};
  for (int i = 0; i < 2; ++i) CHECK(ref_download(kv[i], st.d_cache[i], st.cache_bytes) == 0);
  CHECK(memcmp(kv[0], kv[1], st.cache_bytes) == 0);
  CHECK(memcmp(kv[0], st.cache, st.cache_bytes) != 0); /* something was written */
  if (!kv_fp8) {                                       /* 16-bit: exactly the new rows */
    for (int t = 0; t < b.num_tokens; ++t)
      if (b.slots[t] >= 0) {
        const int64_t blk = b.slots[t] / l.ref.block_size;
        const int off = (int)(b.slots[t] % l.ref.block_size);
        for (int h = 0; h < l.ref.num_kv_heads; ++h)
          for (int d = 0; d < l.ref.head_size; ++d) {
            const size_t src =
                ((size_t)t * (size_t)l.ref.num_kv_heads + (size_t)h) * (size_t)l.ref.head_size +
                (size_t)d;
            CHECK(kv[0][cache_index(&l.ref, b.num_blocks, 0, blk, off, h, d)] == st.k[src]);
            CHECK(kv[0][cache_index(&l.ref, b.num_blocks, 1, blk, off, h, d)] == st.v[src]);
          }
      }
  }
  printf("write_kv_cache %s: %d tokens: KV cache identical to the C++ write_kv_cache\n", name,
         b.num_tokens);
  free(kv[0]);
  free(kv[1]);
  free_step(&st);
  free_batch(&b);
}

/* ---- A forward captured in a CUDA graph, replayed with new lengths ------------------------- */

/* New decode lengths for the real requests (1..limit) and the slots of their new tokens. */
static void set_lengths(step_t* st, int real, int limit) {
  batch_t* b = st->batch;
  const int B = st->layer->ref.block_size;
  b->max_seq_len = 0;
  for (int r = 0; r < real; ++r) {
    b->seq[r] = 1 + (int)(next_random() % (uint64_t)limit);
    const int pos = b->seq[r] - 1;
    b->slots[r] = (int64_t)b->block_table[r * b->row_blocks + pos / B] * B + pos % B;
    if (b->seq[r] > b->max_seq_len) b->max_seq_len = b->seq[r];
  }
  st->md.max_seq_len = b->max_seq_len;
  CHECK(ref_upload(st->d_seq, b->seq, sizeof(int32_t) * (size_t)b->num_reqs) == 0);
  CHECK(ref_upload(st->d_slots, b->slots, sizeof(int64_t) * (size_t)b->num_tokens) == 0);
}

/* Puts the KV cache back as it was before any step and poisons the output. */
static void reset(const step_t* st) {
  CHECK(ref_upload(st->d_cache[0], st->cache, st->cache_bytes) == 0);
  CHECK(ref_fill(st->d_out[0], 0xff, st->q_bytes) == 0);
}

static void graph_case(const layer_t* l, graphattn_cache_t cache, void* stream) {
  enum { kReal = 6, kPadded = 2, kRowBlocks = 64 };
  const int limit = kRowBlocks * l->ref.block_size;
  graphattn_backend_t backend = NULL;
  CHECK_OK(graphattn_backend_create(&l->config, &backend));
  CHECK_OK(graphattn_backend_prepare(backend, cache));
  size_t ws_bytes = 0;
  CHECK_OK(graphattn_backend_workspace_bytes(backend, &ws_bytes));
  void* ws = device_copy(NULL, ws_bytes);

  /* A decode-only batch of capture size 8: 6 requests and 2 padded ones (seq_len 0, slot -1). */
  int q[kReal + kPadded], s[kReal + kPadded];
  for (int r = 0; r < kReal + kPadded; ++r) {
    q[r] = 1;
    s[r] = r < kReal ? 1 + (int)(next_random() % (uint64_t)limit) : 0;
  }
  batch_t b = make_batch(q, s, kReal + kPadded, kReal + kPadded, l->ref.block_size, kRowBlocks);
  step_t st;
  make_step(&st, l, &b, 0);

  /* Capture with the first lengths. Nothing runs at capture. */
  reset(&st);
  CHECK(ref_capture_begin(stream) == 0);
  const graphattn_status_t captured =
      graphattn_backend_forward(backend, &st.query, &st.key, &st.value, &st.kv_cache, &st.output,
                                &st.md, ws, ws_bytes, stream);
  void* exec = NULL;
  const int ended = ref_capture_end(stream, &exec);
  CHECK_OK(captured);
  CHECK(ended == 0);

  const size_t q_bytes = st.q_bytes, cache_bytes = st.cache_bytes;
  uint16_t* graph_out[2] = {xmalloc(q_bytes), xmalloc(q_bytes)};
  uint16_t* eager_out = xmalloc(q_bytes);
  uint16_t* graph_cache = xmalloc(cache_bytes);
  uint16_t* eager_cache = xmalloc(cache_bytes);
  for (int replay = 0; replay < 2; ++replay) {
    set_lengths(&st, kReal, limit); /* the same query, keys and values; new lengths and slots */
    reset(&st);
    CHECK(ref_graph_launch(exec, stream) == 0);
    CHECK(ref_stream_sync(stream) == 0);
    CHECK(ref_download(graph_out[replay], st.d_out[0], q_bytes) == 0);
    CHECK(ref_download(graph_cache, st.d_cache[0], cache_bytes) == 0);
    check_step_result(&st, graph_out[replay], graph_cache);

    reset(&st);
    CHECK_OK(graphattn_backend_forward(backend, &st.query, &st.key, &st.value, &st.kv_cache,
                                       &st.output, &st.md, ws, ws_bytes, stream));
    CHECK(ref_stream_sync(stream) == 0);
    CHECK(ref_download(eager_out, st.d_out[0], q_bytes) == 0);
    CHECK(ref_download(eager_cache, st.d_cache[0], cache_bytes) == 0);
    CHECK(memcmp(graph_out[replay], eager_out, q_bytes) == 0);
    CHECK(memcmp(graph_cache, eager_cache, cache_bytes) == 0);
    printf("graph replay %d: seq_lens", replay + 1);
    for (int r = 0; r < b.num_reqs; ++r) printf(" %d", b.seq[r]);
    printf(": output and KV cache identical to an eager forward\n");
  }
  /* The replays read the new lengths: with the same inputs, other lengths give other rows. */
  CHECK(memcmp(graph_out[0], graph_out[1], q_bytes) != 0);

  free(graph_out[0]);
  free(graph_out[1]);
  free(eager_out);
  free(graph_cache);
  free(eager_cache);
  ref_graph_destroy(exec);
  free_step(&st);
  free_batch(&b);
  ref_free(ws);
  graphattn_backend_destroy(backend);
}

/* ---- main --------------------------------------------------------------------------------- */

/* ---- paged_attention_v1 / v2 over vLLM's legacy caches ----------------------------------- */

/* Every position of five requests (one padded) written into NaN-filled legacy caches by
 * graphattn_write_to_paged_cache (an fp8 cache as uint8), then graphattn_paged_attention_v1 and
 * v2 through the C ABI against the C++ paged_attention_v1 on the same memory: the same kernel on
 * the same grid, so the outputs must be identical (and free of NaN, zero for the padded row). */
static void legacy_case(const char* name, layer_t l, int kv_fp8, float k_scale, float v_scale,
                        graphattn_cache_t cache, const char* cache_dir, void* stream) {
  enum { kReqs = 5 };
  const int s[kReqs] = {1, 300, 0, 33, 2000};
  int q[kReqs];
  for (int r = 0; r < kReqs; ++r) q[r] = s[r] > 0 ? s[r] : 1; /* every position is written */
  l.ref.kv_fp8 = kv_fp8;
  l.ref.k_scale = k_scale;
  l.ref.v_scale = v_scale;
  const int bf16 = l.ref.bf16, H = l.ref.num_heads, KH = l.ref.num_kv_heads, D = l.ref.head_size;
  const int B = l.ref.block_size, elem = kv_fp8 ? 1 : 2, x = 16 / elem;
  batch_t b = make_batch(q, s, kReqs, 0, B, 0);
  const size_t kv_rows = (size_t)b.num_tokens * (size_t)KH * (size_t)D;
  uint16_t* kv_host = xmalloc(2 * kv_rows * 2);
  fill_halves(kv_host, 2 * kv_rows, bf16);
  void* d_key = device_copy(kv_host, kv_rows * 2);
  void* d_value = device_copy(kv_host + kv_rows, kv_rows * 2);
  void* d_slots = device_copy(b.slots, sizeof(int64_t) * (size_t)b.num_tokens);
  const size_t half = (size_t)b.num_blocks * (size_t)B * (size_t)KH * (size_t)D * (size_t)elem;
  void* d_cache = device_copy(NULL, 2 * half);
  CHECK(ref_fill(d_cache, 0xff, 2 * half) == 0); /* NaN wherever nothing may be read */
  const uint8_t code = kv_fp8 ? kDLUInt : bf16 ? kDLBfloat : kDLFloat;
  const uint8_t bits = kv_fp8 ? 8 : 16;
  const uint8_t model = bf16 ? kDLBfloat : kDLFloat;
  int64_t row_shape[3] = {b.num_tokens, KH, D}, slot_shape[1] = {b.num_tokens};
  int64_t kc_shape[5] = {b.num_blocks, KH, D / x, B, x}, vc_shape[4] = {b.num_blocks, KH, D, B};
  DLTensor key = dl(d_key, model, 16, 3, row_shape), value = dl(d_value, model, 16, 3, row_shape);
  DLTensor slots = dl(d_slots, kDLInt, 64, 1, slot_shape);
  DLTensor key_cache = dl(d_cache, code, bits, 5, kc_shape);
  DLTensor value_cache = dl((char*)d_cache + half, code, bits, 4, vc_shape);
  const graphattn_kv_dtype_t kv_dtype = kv_fp8 == 1   ? GRAPHATTN_KV_DTYPE_FP8_E4M3
                                        : kv_fp8 == 2 ? GRAPHATTN_KV_DTYPE_FP8_E5M2
                                                      : GRAPHATTN_KV_DTYPE_AUTO;
  CHECK_OK(graphattn_write_to_paged_cache(&key, &value, &key_cache, &value_cache, &slots, kv_dtype,
                                          k_scale, v_scale, stream, cache));

  const size_t out_elems = (size_t)kReqs * (size_t)H * (size_t)D;
  uint16_t* q_host = xmalloc(out_elems * 2);
  fill_halves(q_host, out_elems, bf16);
  void* d_query = device_copy(q_host, out_elems * 2);
  void* d_out[3];
  for (int i = 0; i < 3; ++i) {
    d_out[i] = device_copy(NULL, out_elems * 2);
    CHECK(ref_fill(d_out[i], 0xff, out_elems * 2) == 0);
  }
  void* d_seq = device_copy(b.seq, sizeof(int32_t) * kReqs);
  void* d_bt = device_copy(b.block_table, sizeof(int32_t) * (size_t)(kReqs * b.row_blocks));
  const int64_t parts = (b.max_seq_len + 511) / 512;
  void* d_sums = device_copy(NULL, (size_t)(kReqs * H * parts) * 4);
  void* d_tmp = device_copy(NULL, (size_t)(kReqs * H * parts * D) * 2);
  int64_t q_shape[3] = {kReqs, H, D}, seq_shape[1] = {kReqs}, bt_shape[2] = {kReqs, b.row_blocks};
  int64_t sums_shape[3] = {kReqs, H, parts}, tmp_shape[4] = {kReqs, H, parts, D};
  DLTensor query = dl(d_query, model, 16, 3, q_shape);
  DLTensor out1 = dl(d_out[0], model, 16, 3, q_shape), out2 = dl(d_out[1], model, 16, 3, q_shape);
  DLTensor seq = dl(d_seq, kDLInt, 32, 1, seq_shape), bt = dl(d_bt, kDLInt, 32, 2, bt_shape);
  DLTensor sums = dl(d_sums, kDLFloat, 32, 3, sums_shape), tmp = dl(d_tmp, model, 16, 4, tmp_shape);
  const float scale = 0.09f;
  /* v2 reads the fp8 scales from device memory, its float scales wrong on purpose: both must
   * equal the C++ call with the float scales. */
  float scales_host[2] = {k_scale, v_scale};
  void* d_scales = device_copy(scales_host, sizeof scales_host);
  int64_t one[1] = {1};
  DLTensor k_dev = dl(d_scales, kDLFloat, 32, 1, one);
  DLTensor v_dev = dl((char*)d_scales + sizeof(float), kDLFloat, 32, 1, one);
  CHECK_OK(graphattn_paged_attention_v1(&out1, &query, &key_cache, &value_cache, KH, scale, &bt,
                                        &seq, B, b.max_seq_len, NULL, kv_dtype, k_scale, v_scale,
                                        NULL, NULL, 0, 0, 0, 0, 0, stream, cache));
  CHECK_OK(graphattn_paged_attention_v2(&out2, &sums, &sums, &tmp, &query, &key_cache, &value_cache,
                                        KH, scale, &bt, &seq, B, b.max_seq_len, NULL, kv_dtype,
                                        4 * k_scale, 4 * v_scale, &k_dev, &v_dev, 0, 0, 1, 0, 0,
                                        stream, cache));
  CHECK(ref_stream_sync(stream) == 0);
  ref_batch_t rb;
  memset(&rb, 0, sizeof rb);
  rb.query = d_query;
  rb.output = d_out[2];
  rb.kv_cache = d_cache;
  rb.block_table = d_bt;
  rb.seq_lens = d_seq;
  rb.num_blocks = b.num_blocks;
  rb.max_blocks_per_seq = b.row_blocks;
  rb.num_reqs = kReqs;
  rb.max_seq_len = b.max_seq_len;
  CHECK(ref_paged_attention(&l.ref, &rb, scale, cache_dir, stream) == 0);
  uint16_t* got[3];
  for (int i = 0; i < 3; ++i) {
    got[i] = xmalloc(out_elems * 2);
    CHECK(ref_download(got[i], d_out[i], out_elems * 2) == 0);
  }
  CHECK(memcmp(got[0], got[2], out_elems * 2) == 0);
  CHECK(memcmp(got[1], got[2], out_elems * 2) == 0);
  size_t nan = 0, nonzero_padded = 0;
  for (size_t i = 0; i < out_elems; ++i) {
    nan += is_nan_half(got[2][i], bf16);
    nonzero_padded += s[i / ((size_t)H * (size_t)D)] == 0 && got[2][i] != 0;
  }
  CHECK(nan == 0);
  CHECK(nonzero_padded == 0);
  int use_v1 = -1;
  CHECK_OK(graphattn_use_paged_attention_v1(b.max_seq_len, kReqs, H, &use_v1));
  CHECK(use_v1 == 0); /* 2000 tokens are 4 partitions, 5 * H <= 512 rows */
  printf("paged_attention %s: v1 and v2 through the C ABI identical to the C++ call\n", name);
  for (int i = 0; i < 3; ++i) {
    free(got[i]);
    ref_free(d_out[i]);
  }
  void* bufs[] = {d_key, d_value, d_slots, d_cache, d_query, d_seq, d_bt, d_sums, d_tmp, d_scales};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) ref_free(bufs[i]);
  free(q_host);
  free(kv_host);
  free_batch(&b);
}

static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* ---- forward_prefix over vLLM's legacy caches: C ABI vs C++ ------------------------------- */

/* Three requests with cached prefixes of 0, 40 and 300 tokens (host-written, random) and new
 * chunks of 25, 1 and 90 tokens (written with graphattn_write_to_paged_cache, as vLLM does
 * before forward_prefix); every unused cache byte is 0xff (NaN in every element type). The C
 * ABI's graphattn_forward_prefix and the C++ forward_prefix must write the same bits, all
 * finite. kv_fp8 0: a 16-bit cache; 1: fp8 e4m3 as uint8. */
static void prefix_case(const char* name, int bf16, int kv_fp8, graphattn_cache_t cache,
                        const char* cache_dir, void* stream) {
  enum { R = 3, H = 8, KH = 2, D = 128, B = 16 };
  const int prefix[R] = {0, 40, 300}, chunk[R] = {25, 1, 90};
  layer_t l = make_layer(H, KH, D, B, bf16, 0, 1024, 8);
  l.ref.kv_fp8 = kv_fp8;
  l.ref.k_scale = kv_fp8 ? 0.5f : 1.0f;
  l.ref.v_scale = kv_fp8 ? 0.25f : 1.0f;
  const int elem = kv_fp8 ? 1 : 2, x = 16 / elem;
  int qsl[R + 1] = {0}, seq[R], max_blocks = 0, num_blocks = 0, max_q = 0;
  for (int r = 0; r < R; ++r) {
    qsl[r + 1] = qsl[r] + chunk[r];
    seq[r] = prefix[r] + chunk[r];
    const int nb = (seq[r] + B - 1) / B;
    if (nb > max_blocks) max_blocks = nb;
    num_blocks += nb;
    if (chunk[r] > max_q) max_q = chunk[r];
  }
  const int T = qsl[R];
  num_blocks += 1; /* one block no request names */
  int* table = xmalloc(sizeof(int) * R * max_blocks);
  int next = num_blocks - 1; /* blocks handed out from the top down */
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < max_blocks; ++b)
      table[r * max_blocks + b] = b < (seq[r] + B - 1) / B ? --next : UNUSED_BLOCK;
  const size_t per_kv = (size_t)num_blocks * B * KH * D, cache_bytes = 2 * per_kv * elem;
  unsigned char* kv = xmalloc(cache_bytes);
  memset(kv, 0xff, cache_bytes);
  for (int r = 0; r < R;
       ++r) /* the prefixes: key [blk, h, d / x, off, x], value [blk, h, d, off] */
    for (int pos = 0; pos < prefix[r]; ++pos)
      for (int h = 0; h < KH; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t blk = (size_t)table[r * max_blocks + pos / B], off = (size_t)(pos % B);
          const size_t head = (blk * KH + h) * D * B;
          const size_t k = head + ((size_t)(d / x) * B + off) * x + d % x;
          const size_t v = per_kv + head + (size_t)d * B + off;
          for (int which = 0; which < 2; ++which) {
            const size_t o = which ? v : k;
            if (kv_fp8) {
              kv[o] = (unsigned char)(next_random() & 0xf7); /* below 0x78: finite e4m3 */
            } else {
              const uint16_t h16 = random_half(bf16);
              memcpy(kv + o * 2, &h16, 2);
            }
          }
        }
  uint16_t* q = xmalloc((size_t)T * H * D * 2);
  uint16_t* kn = xmalloc((size_t)T * KH * D * 2);
  uint16_t* vn = xmalloc((size_t)T * KH * D * 2);
  fill_halves(q, (size_t)T * H * D, bf16);
  fill_halves(kn, (size_t)T * KH * D, bf16);
  fill_halves(vn, (size_t)T * KH * D, bf16);
  int64_t* slots = xmalloc(sizeof(int64_t) * T);
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < chunk[r]; ++i) {
      const int pos = prefix[r] + i;
      slots[qsl[r] + i] = (int64_t)table[r * max_blocks + pos / B] * B + pos % B;
    }
  ref_batch_t b;
  memset(&b, 0, sizeof b);
  b.kv_cache = device_copy(kv, cache_bytes);
  b.query = device_copy(q, (size_t)T * H * D * 2);
  b.key = device_copy(kn, (size_t)T * KH * D * 2);
  b.value = device_copy(vn, (size_t)T * KH * D * 2);
  b.slot_mapping = device_copy(slots, sizeof(int64_t) * T);
  b.query_start_loc = device_copy(qsl, sizeof qsl);
  b.seq_lens = device_copy(seq, sizeof seq);
  b.block_table = device_copy(table, sizeof(int) * R * max_blocks);
  b.num_tokens = T;
  b.num_blocks = num_blocks;
  b.max_blocks_per_seq = max_blocks;
  b.num_reqs = R;
  b.max_query_len = max_q;
  const size_t out_bytes = (size_t)T * H * D * 2;
  void* out_c = device_copy(NULL, out_bytes);
  b.output = device_copy(NULL, out_bytes);
  CHECK(ref_fill(out_c, 0xff, out_bytes) == 0);
  CHECK(ref_fill(b.output, 0xff, out_bytes) == 0);

  const uint8_t half_code = bf16 ? kDLBfloat : kDLFloat;
  int64_t q_shape[3] = {T, H, D}, kv_shape[3] = {T, KH, D}, slot_shape[1] = {T};
  int64_t key_cache_shape[5] = {num_blocks, KH, D / x, B, x},
          value_cache_shape[4] = {num_blocks, KH, D, B};
  int64_t qsl_shape[1] = {R + 1}, seq_shape[1] = {R}, table_shape[2] = {R, max_blocks};
  const uint8_t cache_code = kv_fp8 ? kDLUInt : half_code, cache_bits = kv_fp8 ? 8 : 16;
  DLTensor query = dl(b.query, half_code, 16, 3, q_shape);
  DLTensor key = dl(b.key, half_code, 16, 3, kv_shape);
  DLTensor value = dl(b.value, half_code, 16, 3, kv_shape);
  DLTensor key_cache = dl(b.kv_cache, cache_code, cache_bits, 5, key_cache_shape);
  DLTensor value_cache =
      dl((char*)b.kv_cache + per_kv * elem, cache_code, cache_bits, 4, value_cache_shape);
  DLTensor slot_t = dl(b.slot_mapping, kDLInt, 64, 1, slot_shape);
  DLTensor qsl_t = dl(b.query_start_loc, kDLInt, 32, 1, qsl_shape);
  DLTensor seq_t = dl(b.seq_lens, kDLInt, 32, 1, seq_shape);
  DLTensor table_t = dl(b.block_table, kDLInt, 32, 2, table_shape);
  DLTensor output = dl(out_c, half_code, 16, 3, q_shape);
  const graphattn_kv_dtype_t kvd = kv_fp8 ? GRAPHATTN_KV_DTYPE_FP8_E4M3 : GRAPHATTN_KV_DTYPE_AUTO;
  CHECK_OK(graphattn_write_to_paged_cache(&key, &value, &key_cache, &value_cache, &slot_t, kvd,
                                          l.ref.k_scale, l.ref.v_scale, stream, cache));
  CHECK_OK(graphattn_forward_prefix(&query, &key, &value, kvd, &key_cache, &value_cache, &table_t,
                                    &qsl_t, &seq_t, max_q, NULL, 0, l.ref.k_scale, l.ref.v_scale,
                                    NULL, NULL, 0.0f, 0.0f, NULL, 1, &output, stream, cache));
  CHECK(ref_stream_sync(stream) == 0);
  CHECK(ref_forward_prefix(&l.ref, &b, cache_dir, stream) == 0);

  uint16_t* got[2] = {xmalloc(out_bytes), xmalloc(out_bytes)};
  CHECK(ref_download(got[0], out_c, out_bytes) == 0);
  CHECK(ref_download(got[1], b.output, out_bytes) == 0);
  for (size_t i = 0; i < out_bytes / 2; ++i) CHECK(!is_nan_half(got[0][i], bf16));
  CHECK(memcmp(got[0], got[1], out_bytes) == 0);
  printf("forward_prefix %s: %d requests, %d tokens: identical to the C++ forward_prefix\n", name,
         R, T);
  for (int i = 0; i < 2; ++i) free(got[i]);
  void* device[] = {b.kv_cache,        b.query,    b.key,         b.value,  b.slot_mapping,
                    b.query_start_loc, b.seq_lens, b.block_table, b.output, out_c};
  for (size_t i = 0; i < sizeof device / sizeof device[0]; ++i) ref_free(device[i]);
  free(table);
  free(kv);
  free(q);
  free(kn);
  free(vn);
  free(slots);
}

int main(void) {
  int available = 0;
  CHECK(graphattn_gpu_available(&available) == GRAPHATTN_OK);
  if (!available) { /* the last error says what is missing */
    printf("graphattn-c-gpu-tests: no GPU: %s\n", graphattn_last_error());
    return 77;
  }
  const char* seed_text = getenv("GRAPHATTN_TEST_SEED");
  const uint64_t seed = seed_text ? strtoull(seed_text, NULL, 10) : (uint64_t)time(NULL);
  printf("random seed %llu (set GRAPHATTN_TEST_SEED to repeat)\n", (unsigned long long)seed);
  rng_state = seed * 2654435761u + 0x9e3779b97f4a7c15ull; /* never 0 */
  if (!rng_state) rng_state = 1;

  CHECK_OK(graphattn_ensure_context(0));
  int arch = 0;
  CHECK_OK(graphattn_current_device_arch(&arch));
  printf("device sm_%d\n", arch);
  char dir[] = "/tmp/graphattn-c-gpu-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  graphattn_cache_options_t options;
  graphattn_cache_options_init(&options);
  options.dir = dir;
  graphattn_cache_t cache = NULL;
  CHECK_OK(graphattn_cache_create(&options, &cache));
  void* stream = NULL;
  CHECK(ref_stream_create(&stream) == 0);

  /* Llama-like: 32 query heads over 8 KV heads of 128, bf16, NHD blocks of 16. A mixed batch:
   * four decodes, a prefill chunk with cached context, two padded requests. */
  const layer_t llama = make_layer(32, 8, 128, 16, 1, 0, 4096, 64);
  {
    const int q[] = {1, 1, 1, 1, 29, 1, 1}, s[] = {1, 37, 300, 1000, 99, 0, 0};
    forward_case("bf16 nhd 32/8x128 b16", &llama, q, s, 7, 4, 0, cache, dir, stream);
  }
  /* fp16, HND blocks of 32, 16 heads over 2 of 64, a query at a byte_offset: three decodes, a
   * prefill without context and one with, one padded request. */
  const layer_t hnd = make_layer(16, 2, 64, 32, 0, 1, 2048, 32);
  {
    const int q[] = {1, 1, 1, 17, 40, 1}, s[] = {5, 64, 513, 17, 140, 0};
    forward_case("fp16 hnd 16/2x64 b32", &hnd, q, s, 6, 3, 256, cache, dir, stream);
  }
  write_case("bf16 nhd", llama, 0, 1.0f, 1.0f, cache, dir, stream);
  write_case("fp16 hnd", hnd, 0, 1.0f, 1.0f, cache, dir, stream);
  write_case("fp8 e4m3 (uint8) nhd", llama, 1, 0.5f, 2.0f, cache, dir, stream);
  write_case("fp8 e5m2 (float8 code 12) hnd", hnd, 2, 0.25f, 0.75f, cache, dir, stream);
  graph_case(&llama, cache, stream);
  prefix_case("bf16 legacy b16", 1, 0, cache, dir, stream);
  prefix_case("fp16 legacy b16, fp8 e4m3 (uint8)", 0, 1, cache, dir, stream);
  legacy_case("bf16 32/8x128 b16", llama, 0, 1.0f, 1.0f, cache, dir, stream);
  legacy_case("fp16 16/2x64 b32", hnd, 0, 1.0f, 1.0f, cache, dir, stream);
  legacy_case("fp8 e4m3 (uint8) 32/8x128 b16", llama, 1, 0.5f, 2.0f, cache, dir, stream);

  ref_stream_destroy(stream);
  graphattn_cache_destroy(cache);
  remove_dir(dir);
  printf("graphattn-c-gpu-tests: all tests passed\n");
  return 0;
}
