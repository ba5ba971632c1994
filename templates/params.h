// SPDX-License-Identifier: Apache-2.0
// Kernel parameter structs: the one contract between the host and the templates. Compiled both
// by the host C++ compiler and, embedded, by NVRTC, so only fixed-size C types appear here.
// Every kernel takes exactly one of these by value (__grid_constant__). Strides are in elements
// of the tensor's own type; the head dimension is always contiguous.
#pragma once

// Checked mode (a spec with check_bounds, "..._chk"; GA_CHECK_BOUNDS defined in its source): the
// kernels compare every block id and slot they read with the cache's size and record the first
// one out of range here instead of touching memory outside the cache (a bad block id reads block
// 0, a bad slot writes nothing). kind 1: a block id of request `request`, met for the key at
// `position`; kind 2: a slot, of batch token `position` (request -1 in the cache write kernel,
// the decode request in the decode kernel's fused write). Zero-filled by the host; found == 1
// once something was recorded. Unchecked kernels never touch it.
struct GaBoundsReport {
  int found;
  int kind;
  int request;
  int position;
  long long value;
};

// fp8 KV scales in device memory, for engines that compute them on the device (calc_kv_scales)
// or change them between replays of a captured graph: a non-null pointer is read (once per
// thread, after the wait for the previous kernel, which may be the one that wrote it) instead
// of the launch's float. A uniform branch on launch data, not a spec axis: one load per thread
// costs nothing next to the KV traffic, and one kernel then serves both kinds of scale. Kernels
// of a 16-bit (auto) cache never read them (the host passes null there).
struct GaKvScales {
  const float* k_scale_ptr;  // [1] fp32 device scalar, or null: use the float k_scale
  const float* v_scale_ptr;  // [1] fp32 device scalar, or null: use the float v_scale
};

// reshape_and_cache_flash: write each token's key and value into its slot of the paged cache.
struct CacheWriteParams {
  const void* key;                // [num_tokens, num_kv_heads, head_size] dtype
  const void* value;              // [num_tokens, num_kv_heads, head_size] dtype
  void* key_cache;                // [num_blocks, block_size, num_kv_heads, head_size] NHD, or
                                  // [num_blocks, num_kv_heads, block_size, head_size] HND; kv dtype
                                  // legacy (KV_LAYOUT 2): [num_blocks, num_kv_heads,
                                  // head_size / x, block_size, x], compact
  void* value_cache;              // same shape as key_cache; legacy: [num_blocks, num_kv_heads,
                                  // head_size, block_size], compact
  const long long* slot_mapping;  // [num_tokens] block * block_size + offset; -1: write nothing
  long long key_token_stride;
  long long key_head_stride;
  long long value_token_stride;
  long long value_head_stride;
  long long cache_block_stride;  // shared by key_cache and value_cache (flash layout only)
  long long cache_token_stride;
  long long cache_head_stride;
  long long num_slots;  // num_blocks * block_size; slots outside [0, num_slots) skip
  int num_tokens;
  int num_kv_heads;
  float k_scale;           // fp8 KV: stored = key / k_scale
  float v_scale;           // fp8 KV: stored = value / v_scale
  GaBoundsReport* bounds;  // checked mode only
  GaKvScales scales;       // fp8 KV: k/v scales in device memory (null: k_scale, v_scale)
  // Legacy layout: x of the key cache (elements of the cache type), read from the cache's shape:
  // 8 or 16, or 16 bytes of elements (vLLM's default: 4 for fp32); a power of two, a multiple of
  // the kernel's 16-byte input vector (8 16-bit or 4 fp32 elements). A launch value, not a spec
  // axis: it only scales the chunk index of a scatter. Unused (0) for the flash layout.
  int legacy_x;
};

// calc_kv_scales (spec kind kv_scale): k_scale = max(amax(|key|) / k_divisor, GA_KV_SCALE_MIN)
// over the first num_tokens rows, v_scale likewise from the values, into two fp32 device
// scalars. Grid (x, 2), GA_KV_SCALE_THREADS threads: y 0 reduces the keys, 1 the values, the x
// blocks stride over the rows. The host first sets both scalars to GA_KV_SCALE_MIN (memset
// nodes); every block then raises its scalar with an atomic max on the bits of its own
// amax / divisor: non-negative floats order as their bits, and rounding a division by a positive
// divisor is monotonic, so the result is exactly max(amax / divisor, GA_KV_SCALE_MIN) with no
// scratch memory, no second kernel and a grid fixed by the token count (graph-capturable).
struct KvScaleParams {
  const void* key;             // [num_tokens, num_kv_heads, head_size] dtype
  const void* value;           // [num_tokens, num_kv_heads, head_size] dtype
  float* k_scale_out;          // [1] fp32, holds GA_KV_SCALE_MIN at the launch
  float* v_scale_out;          // [1] fp32, holds GA_KV_SCALE_MIN at the launch
  long long key_token_stride;  // elements
  long long key_head_stride;
  long long value_token_stride;
  long long value_head_stride;
  int num_tokens;
  int num_kv_heads;
  float k_divisor;  // finite > 0
  float v_divisor;  // finite > 0
};
constexpr int GA_KV_SCALE_THREADS = 256;
constexpr int GA_KV_SCALE_MAX_BLOCKS = 512;  // grid x at most (the rows are strided over)
// The smallest scale calc_kv_scales writes: an all-zero batch gives it, never 0 (a division by
// it would be NaN). Tiny, yet normal in every product the kernels form with it (the softmax
// scale, 2^8 for e4m3); and since scale >= amax / divisor, a stored value stays within the
// divisor whatever the clamp.
constexpr float GA_KV_SCALE_MIN = 1e-12f;

// merge_attn_states (spec kind merge_states; vLLM's op, section 2.2 of arXiv 2501.01005): two
// partial attention results of the same queries over disjoint key sets (a shared prefix and a
// request's own suffix, or two splits), each softmax-normalized with its log-sum-exp (natural
// log), merged into the result over the union:
//   m = max(p_lse, s_lse); w_p = e^(p_lse - m) / (e^(p_lse - m) + e^(s_lse - m)), w_s likewise;
//   output = w_p * prefix_output + w_s * suffix_output; output_lse = log(sum) + m.
// An infinite LSE (+inf from FlashAttention 2 or -inf from 3 for an empty key set) counts as
// -inf: that side gets weight 0. Both -inf: output = prefix_output as stored, output_lse = -inf.
// Grid-stride over (token, head, 16-byte vector) with GA_MERGE_THREADS threads a block; the
// head dimension is contiguous and head_size * element size a multiple of 16 bytes.
struct MergeStatesParams {
  void* output;                   // [num_tokens, num_heads, head_size] dtype (fp16, bf16, fp32)
  float* output_lse;              // [num_heads, num_tokens] fp32, or null: not written
  const void* prefix_output;      // [num_tokens, num_heads, head_size] dtype
  const float* prefix_lse;        // [num_heads, num_tokens] fp32
  const void* suffix_output;      // [num_tokens, num_heads, head_size] dtype
  const float* suffix_lse;        // [num_heads, num_tokens] fp32
  long long output_token_stride;  // elements, here and below
  long long output_head_stride;
  long long prefix_token_stride;
  long long prefix_head_stride;
  long long suffix_token_stride;
  long long suffix_head_stride;
  long long output_lse_head_stride;
  long long output_lse_token_stride;
  long long prefix_lse_head_stride;
  long long prefix_lse_token_stride;
  long long suffix_lse_head_stride;
  long long suffix_lse_token_stride;
  long long num_vectors;  // num_tokens * num_heads * vectors_per_head
  int num_heads;
  int vectors_per_head;  // head_size * element size / 16
};
constexpr int GA_MERGE_THREADS = 256;
constexpr int GA_MERGE_MAX_BLOCKS = 65535;  // grid x at most (the vectors are strided over)

// copy_blocks with the block mapping in device memory (spec kind block_copy): grid (num_pairs,
// num_caches), GA_BLOCK_COPY_THREADS threads; block (pair, cache) copies the bytes of block
// mapping[pair][0] of that cache to block mapping[pair][1]. A pair with a block outside
// [0, num_blocks) of the cache (e.g. -1 rows padding a captured mapping) or with src == dst
// copies nothing. The caches ride in the launch's parameters (kernel parameters up to 32 KiB,
// CUDA 12.1 and newer): a captured graph holds its own cache list, no device buffer is
// allocated or written by the host, and only the mapping's contents are read at run time.
struct GaBlockCopyCache {
  char* data;              // block 0
  long long block_stride;  // bytes between blocks
  long long block_bytes;   // bytes of one block (one compact region)
  long long num_blocks;
};
constexpr int GA_BLOCK_COPY_MAX_CACHES = 256;  // per launch; more take several launches
constexpr int GA_BLOCK_COPY_THREADS = 256;
struct BlockCopyParams {
  const long long* mapping;         // [num_pairs, 2] int64 device: (src, dst) block numbers
  long long mapping_row_stride;     // elements
  long long mapping_column_stride;  // elements
  int num_caches;                   // entries of caches in use (== gridDim.y)
  GaBlockCopyCache caches[GA_BLOCK_COPY_MAX_CACHES];
};

// Softmax LSE (spec axis softmax_lse, "_lse", GA_WRITE_LSE defined in the kernel's source): the
// last fields of DecodeParams and PrefillParams. The host always has them (it fills them for
// every launch, null and 0 without the axis); a kernel sees them only when it writes the LSE,
// so the other kernels keep their parameter size and machine code exactly (the driver copies
// as many parameter bytes as the kernel declares, and these fields come last). A kernel with
// an e4m3 query (GA_Q_E4M3) sees them too: its DecodeQ8Params / PrefillQ8Params put their
// query scales after the whole host DecodeParams / PrefillParams, so the offsets must match.
// So does the mixed graphs' decode with device-chosen splits (GA_DEVICE_SPLITS): its
// DecodeDspParams put GaDeviceSplits after the whole host DecodeParams. (Session 12 first built
// it without: the kernel read its counts 16 bytes early, from softmax_lse and lse_head_stride,
// saw 0 request slots, and every block exited.)
#if !defined(__CUDACC_RTC__) || defined(GA_WRITE_LSE) || defined(GA_Q_E4M3) || \
    defined(GA_DEVICE_SPLITS)
#define GA_LSE_FIELDS                                                                             \
  float* softmax_lse;        /* [num_heads, >= total_q] fp32, natural log; a query row with no */ \
                             /* key (seq_len 0) gets -inf */                                      \
  long long lse_head_stride; /* elements between heads' rows (total_q when compact) */
#else
#define GA_LSE_FIELDS
#endif

// The paged KV cache as an attention kernel reads it (decode and prefill): the key and value
// halves of the flash-layout cache, each request's sequence length and block table row.
//
// Dense mode (prefill specs with the dense_kv axis, "_dense", GA_DENSE_KV defined): keys and
// values come from dense tensors instead of pages, for encoder-only attention and vLLM's
// MultiHeadAttention, which have no KV cache. key_cache / value_cache are then
// [num_kv_tokens, num_kv_heads, head_size] dtype tensors sharing cache_token_stride and
// cache_head_stride; block_table, seq_lens, cache_block_stride and num_blocks are unused. Request
// r's keys are the dense rows kv_row0 .. kv_row0 + seq_len - 1, where (PrefillParams)
// query_start_loc non-null: its own query rows (kv_row0 = query_start_loc[r], seq_len = its
// query length: self-attention of variable-length sequences); null: a uniform batch,
// kv_row0 = r * uniform_kv_len, seq_len = uniform_kv_len. A spec axis rather than a run-time
// mode (say, block_table == null), so that the paged kernels' source and machine code stay
// exactly what they were: the dense address computation replaces the block-table walk at
// compile time, and neither kernel carries a branch or a register for the other.
struct PagedKvView {
  const void* key_cache;         // [num_blocks, block_size, num_kv_heads, head_size] NHD, or
                                 // [num_blocks, num_kv_heads, block_size, head_size] HND; kv dtype
                                 // legacy: [num_blocks, num_kv_heads, head_size / x, block_size,
                                 // x], compact (prefill only)
  const void* value_cache;       // same shape as key_cache; legacy: [num_blocks, num_kv_heads,
                                 // head_size, block_size], compact
  const int* block_table;        // [num_reqs, block_table_stride] int32 physical block ids
  const int* seq_lens;           // [num_reqs] int32 context + new tokens; <= 0: zeros out
  long long cache_block_stride;  // shared by key_cache and value_cache, elements
  long long cache_token_stride;  // legacy layout (KV_LAYOUT 2, forward_prefix): 0; the prefill
                                 // kernel adds the offsets inside a block itself
  long long cache_head_stride;
  long long block_table_stride;  // elements between block_table rows
  long long num_blocks;          // blocks in the cache (checked mode compares block ids with it)
};

// Per-head score terms that are launch data, shared by decode and prefill. Each pointer is read
// only by kernels built with its spec axis and may be null otherwise.
struct GaHeadTerms {
  const float* alibi_slopes;  // [num_heads] fp32, HAS_ALIBI: score += slope[h] * (key - query
                              // position), on the scaled (and capped) score
  const float* sinks;         // [num_heads] fp32, HAS_SINKS: softmax denominator += exp(sink[h])
};

// Block-sparse attention (spec axis block_sparse, "_bsp"; vLLM's BlocksparseFlashAttention with
// its paged_attention kernels' IS_BLOCK_SPARSE rule, which its prefill mask get_sparse_attn_mask
// shares): on top of the causal mask, query position qp of local query head h sees key position
// kp <= qp iff, with qb = qp / block and kb = kp / block,
//   qb - kb < local_blocks  or  (kb + offset(h)) % vert_stride == 0,
// offset(h) = (head_offset + h) * head_sliding_step + 1                 when the step is >= 0,
//             (kv_head_offset + h / group) * -head_sliding_step + 1     when it is < 0,
// so step 0 (homo_head) gives every head offset 1, a positive step slides the pattern over the
// query heads' global indices (vLLM's default: max(1, vert_stride / total heads)) and a negative
// one over the KV heads' (homo_head_group: the heads of a GQA group share it). head_offset and
// kv_head_offset are the global indices of this rank's first query and KV head (tensor
// parallelism: tp_rank * num_heads and tp_rank * num_kv_heads). block is a multiple of 16 (the
// kernels' key tiles are then all in or all out per head) and of the KV block size.
// vert_stride <= 1 is dense attention (vLLM runs its dense kernel then): no _bsp kernel.
struct GaBlockSparse {
  int block;              // tokens per sparse block, a multiple of 16 and of BLOCK_SIZE
  int local_blocks;       // >= 1: the query's own block and the local_blocks - 1 before it
  int vert_stride;        // >= 2
  int head_sliding_step;  // > 0 query heads, < 0 KV heads, 0 one pattern for every head
  int head_offset;        // global index of local query head 0
  int kv_head_offset;     // global index of local KV head 0
};

// Split-KV decode (flash-decoding), one query token per request. Grid
// (max_splits, num_kv_heads * ga_decode_head_chunks(GROUP), num_decodes), GA_DECODE_THREADS
// threads, ga_decode_smem_bytes(..., stages) bytes of dynamic shared memory. Request r's split
// count is computed on the device from seq_lens[r] (ga_decode_* below fixes the policy's
// constants); blocks past it exit at once. A request with one split writes `output` directly;
// otherwise each split writes a partial and counts itself done on its (request, grid y)
// counter, and the split that arrives last combines the partials into `output` and returns the
// counter to zero: no second kernel. In a cluster launch (cluster_splits) the splits combine
// through distributed shared memory instead.
struct DecodeParams {
  PagedKvView kv;                // request r: block table row r, seq_lens[r]
  GaHeadTerms terms;             // ALiBi slopes and sink logits (spec axes alibi, sinks)
  GaBlockSparse bsp;             // GA_BLOCK_SPARSE: the pattern (unused otherwise)
  const void* query;             // [num_tokens, num_heads, head_size] dtype; request r: token r
  void* output;                  // [num_tokens, num_heads, head_size] dtype
  float* partial_out;            // [num_decodes, num_heads, max_splits, head_size] fp32, each
                                 // split's softmax-normalized output (times v_scale)
  float* partial_lse;            // [num_decodes, num_heads, max_splits] fp32, log2 of each
                                 // split's sum of exp2(score)
  unsigned* counters;            // [num_decodes, gridDim.y] splits done so far; zero before
                                 // the launch, zero again after it
  long long query_token_stride;  // elements
  long long query_head_stride;
  long long output_token_stride;
  long long output_head_stride;
  float scale;        // softmax scale
  float k_scale;      // fp8 KV: key = stored * k_scale; 1 otherwise
  float v_scale;      // fp8 KV: value = stored * v_scale; 1 otherwise
  GaKvScales scales;  // fp8 KV: k/v scales in device memory (null: k_scale, v_scale)
  float soft_cap;     // HAS_SOFT_CAP: scores -> soft_cap * tanh(score / soft_cap)
  int window;         // HAS_WINDOW: key k visible from position p when p - k < window
  // Fused cache write (decode-only steps): the blocks holding a request's last tile store its
  // new key and value at slot_mapping[r] (skipped when negative or >= num_slots), so no
  // separate cache write kernel runs; position seq_len - 1 then attends to that row. With a
  // 16-bit cache the row is taken from new_key / new_value directly (no wait for the store);
  // fp8 reads it back from the cache. new_key null: the cache was written already.
  const void* new_key;             // [num_decodes, num_kv_heads, head_size] dtype; request r: row r
  const void* new_value;           // [num_decodes, num_kv_heads, head_size] dtype
  const long long* slot_mapping;   // [num_decodes] int64
  long long new_key_token_stride;  // elements
  long long new_key_head_stride;
  long long new_value_token_stride;
  long long new_value_head_stride;
  long long num_slots;  // num_blocks * block_size
  int max_splits;       // == gridDim.x, >= 1
  int num_heads;        // query heads (partials' row count)
  // Multi-token decode (GA_MULTI_TOKEN): request r's query rows are
  // [query_start_loc[r], query_start_loc[r + 1]), at most max_query_len of them; gridDim.y is
  // num_kv_heads * ga_decode_column_chunks(max_query_len, GROUP), and the partials and the
  // outputs are indexed by query row. Unused (null, 1) otherwise.
  const int* query_start_loc;  // [num_decodes + 1] int32
  int max_query_len;
  int stages;              // cp.async pipeline depth, 2..ga_decode_max_stages(...)
  int cluster_splits;      // 1: launched in clusters of gridDim.x blocks (the splits of a
                           // request and head group), which combine through distributed
                           // shared memory; counters unused. 0: the last split to arrive
                           // on its counter combines.
  int early_prologue;      // with the fused write: 1 reads seq_lens, block_table,
                           // slot_mapping and the KV cache before waiting for the previous
                           // kernel (programmatic dependent launch): only when it writes none;
                           // 2 also lets the next kernel be scheduled at entry (pushed-combine
                           // specs; others read 2 as 1; runtime/decode.cpp [policy: early
                           // trigger])
  GaBoundsReport* bounds;  // checked mode only
  // 1: the batch is split into decodes and prefills on the device (a graph captured for any
  // mix, AttentionMetadata::device_split): gridDim.z covers every request slot, and a block
  // whose request holds no query token or more than max_query_len (1 without GA_MULTI_TOKEN)
  // exits at once, writing nothing (a prefill, or a padded request). Decodes come first, so a
  // single-token decode's query row is still its request index. query_start_loc is then set
  // for every kernel. 0: every request of the grid is a decode.
  int device_split;
  GA_LSE_FIELDS  // GA_WRITE_LSE: softmax_lse[head * lse_head_stride + query row] (see below)
};

// The decode kernel's parameters with an e4m3 query (spec "_qe4m3"): query holds e4m3 bytes,
// q = stored * q_descale. A struct of its own, so that every other decode spec keeps its
// parameter block (and machine code) unchanged. Descales per (request, KV head), FA3's
// q_descale / k_descale / v_descale: element [r * req_stride + kv_head * head_stride] (both
// strides 0: one per-tensor device scalar). A null pointer takes q_scale for the query, the KV
// scales of base (k_scale, v_scale or their device scalars) for keys and values.
struct GaQueryScales {
  const float* q_descale;  // [num_decodes, num_kv_heads] fp32 (strided), or null
  const float* k_descale;  // [num_decodes, num_kv_heads] fp32 (strided), or null
  const float* v_descale;  // [num_decodes, num_kv_heads] fp32 (strided), or null
  long long req_stride;    // elements
  long long head_stride;   // elements
  float q_scale;           // q = stored * q_scale when q_descale is null
};
struct DecodeQ8Params {
  DecodeParams base;
  GaQueryScales q8;
};

// [policy: device-chosen splits] The decode kernel of a mixed graph (spec "_dsp", device_split
// 1): the grid is (1, y, z) with z from runtime/decode.hpp's device_split_blocks(slots, ...).
// Every block counts the leading decodes d in query_start_loc; each takes
// ga_device_split_splits(d, y, room, max_splits) splits, where room is the multiprocessors left
// after the prefill's blocks (estimated from the prefill's tokens, query_start_loc[slots] - d:
// ceil(tokens * group / prefill_block_m) per KV head; prefill_block_m 0: no room kept), and blocks
// z < d * splits are (request z / splits, split z % splits); the rest take the other request
// slots in order, one split each (main's device-split check decides whether one is a decode),
// and the surplus exits at once. Other decode specs keep DecodeParams alone and their code.
struct GaDeviceSplits {
  int slots;            // request slots (query_start_loc has slots + 1 rows)
  int sms;              // the split policy's multiprocessor count
  int prefill_block_m;  // query rows (tokens x group) of one prefill block; 0: no room kept
  // > 0: sms is two blocks a multiprocessor, a count that stands only where every leading
  // decode keeps at least this many tokens a split (else sms / 2; templates/decode.cu
  // [policy: long splits]). 0: sms as it is.
  int long_split_tokens;
};
struct DecodeDspParams {
  DecodeParams base;
  GaDeviceSplits ds;
};
// The host's DecodeParams (with the LSE fields). A kernel whose parameters put more after it
// (DecodeQ8Params, DecodeDspParams) must see the same size, else it reads those from the wrong
// offset; checked in both compilers (change the size when DecodeParams changes). (A literal,
// not a constexpr variable: one at namespace scope is a global of every kernel's module.)
#if !defined(__CUDACC_RTC__) || defined(GA_Q_E4M3) || defined(GA_DEVICE_SPLITS)
static_assert(sizeof(DecodeParams) == 352,
              "DecodeParams differs from the host's: the fields after it would move");
#endif

// Launch geometry shared by the host and the decode templates (evaluated at compile time by both).
constexpr int GA_DECODE_WARPS = 4;  // warps per thread block
constexpr int GA_DECODE_THREADS = 32 * GA_DECODE_WARPS;
constexpr int GA_DECODE_TILE = 16;                // tokens per warp step (one MMA M tile)
constexpr int GA_DECODE_MIN_TILES_PER_SPLIT = 4;  // shortest split, in tiles
constexpr int GA_DECODE_HEADS_PER_BLOCK = 16;     // query heads one block handles at most
// Bytes of one token's head row in shared memory: padded to whole 128-byte groups (8 chunks of
// 16 bytes) so the chunk XOR swizzle stays inside the row.
constexpr int ga_decode_row_bytes(int head_size, int kv_bytes) {
  return (head_size * kv_bytes + 127) / 128 * 128;
}
// Pipeline depth per warp (a launch argument, 2..ga_decode_max_stages): shallow, about 32 KiB of
// K and V tiles per block but 2 stages at least, so that several blocks share a multiprocessor;
// deep, up to 4 stages within about 200 KiB. (For head size 64 and fp8 at 64 x 8192 on an H200,
// 2 stages in 6 or 4 blocks per multiprocessor beat 4 stages in 3 blocks by 4-10%, and 8 stages
// in one block were 10-30% slower.)
constexpr int ga_decode_stage_bytes(int head_size, int kv_bytes) {
  return GA_DECODE_WARPS * 2 * GA_DECODE_TILE * ga_decode_row_bytes(head_size, kv_bytes);
}
constexpr int ga_decode_shallow_stages(int head_size, int kv_bytes) {
  const int n = 32768 / ga_decode_stage_bytes(head_size, kv_bytes);
  return n < 2 ? 2 : n > 4 ? 4 : n;
}
constexpr int ga_decode_max_stages(int head_size, int kv_bytes) {
  const int n = 204800 / ga_decode_stage_bytes(head_size, kv_bytes);
  return n < 2 ? 2 : n > 4 ? 4 : n;
}
// A batch split on the device with its splits chosen there (spec "_dsp"): each of its d leading
// decodes takes at most this many splits, the split policy's count for d decodes that do not fill
// the device by themselves (runtime/decode.cpp decode_grid: sms / (d * grid_y) blocks per
// request, at most max_splits); 1 where they fill it. The kernel passes the multiprocessors the
// prefill leaves (at most sms), so the host's grid, sized with sms, covers every count.
constexpr int ga_device_split_splits(int d, int grid_y, int sms, int max_splits) {
  // sms / grid_y / d as one unsigned 32-bit division (floor(floor(a / b) / c) == floor(a / bc)
  // for positive b, c): signed and 64-bit divisions are long instruction sequences on the GPU,
  // and the _dsp kernel's blocks wait for this one before they know their request.
  const unsigned long long den = static_cast<unsigned long long>(grid_y) * d;
  const int s = d < 1 || grid_y < 1 || sms < 1 ? 1
                : den > static_cast<unsigned long long>(sms)
                    ? 0
                    : static_cast<int>(static_cast<unsigned>(sms) / static_cast<unsigned>(den));
  return s < 1 ? 1 : s > max_splits ? max_splits : s;
}
// The multiprocessors a mixed graph's decode leaves to the prefill beside it: prefill_tokens
// query tokens make ceil(tokens * group / block_m) row tiles per KV head (block_m 0: none kept).
// (The rows' division is 32-bit where they fit, as it always does for a captured batch.)
constexpr int ga_device_split_room(int sms, int prefill_tokens, int group, int block_m,
                                   int num_kv_heads) {
  const unsigned long long rows =
      block_m > 0 && prefill_tokens > 0 && group > 0
          ? static_cast<unsigned long long>(prefill_tokens) * static_cast<unsigned>(group) +
                static_cast<unsigned>(block_m - 1)
          : 0;
  const unsigned long long tiles =
      rows < (1ull << 32)
          ? static_cast<unsigned>(rows) / static_cast<unsigned>(block_m > 0 ? block_m : 1)
          : rows / static_cast<unsigned>(block_m);
  const long long blocks = static_cast<long long>(tiles) * num_kv_heads;
  return blocks >= sms ? 0 : sms - static_cast<int>(blocks);
}
constexpr int ga_decode_head_chunks(int group) {
  return (group + GA_DECODE_HEADS_PER_BLOCK - 1) / GA_DECODE_HEADS_PER_BLOCK;
}
// Blocks per KV head of a multi-token decode: q_len * group (token, head) columns, 16 a block.
constexpr int ga_decode_column_chunks(int max_query_len, int group) {
  return ga_decode_head_chunks(max_query_len * group);
}
// KV head pairs: where one KV head's row of a token is 128 bytes (head 64 16-bit, head 128 fp8)
// in the NHD flash layout, a decode block covers two adjacent KV heads and reads their rows of a
// token as one 256-byte row (row_heads 2): 128-byte pieces 1 KiB apart (8 KV heads) read 6%
// slower than 256-byte ones (docs/decode-128b-rows-h200-2026-11-26-s5.txt). Single-token,
// not block-sparse, GQA groups up to 8 (the pair's columns fit one block). Grid y then counts
// pairs, (num_kv_heads + 1) / 2; an odd last head is a pair with no second head.
constexpr int ga_decode_row_heads(int head_size, int kv_bytes, int group, int layout,
                                  bool multi_token, bool block_sparse) {
  return layout == 0 && !multi_token && !block_sparse && head_size * kv_bytes == 128 &&
                 group <= GA_DECODE_HEADS_PER_BLOCK / 2
             ? 2
             : 1;
}
constexpr int ga_decode_smem_bytes(int head_size, int kv_bytes, int stages, int row_heads = 1) {
  // The K/V pipeline, reused at the end for the cross-warp combine (per warp, 16 heads of
  // padded-dimension fp32 rows plus their max and sum) and, in a cluster launch, the block's
  // split output (16 heads of fp32 rows and their log2-sum-exp). (KV head pairs: rows of
  // row_heads heads.)
  const int row = ga_decode_row_bytes(head_size * row_heads, kv_bytes);
  const int pipeline = stages * ga_decode_stage_bytes(head_size * row_heads, kv_bytes);
  const int combine = GA_DECODE_WARPS * GA_DECODE_HEADS_PER_BLOCK * (row / kv_bytes + 2) * 4 +
                      GA_DECODE_HEADS_PER_BLOCK * (head_size + 1) * 4;
  return pipeline > combine ? pipeline : combine;
}
// A cluster launch's receive area at the end of the dynamic shared memory (templates/decode.cu,
// GA_DECODE_CLUSTER_PUSH): an mbarrier, then, for the items (4 output elements each) that the
// block combines, every split's 4 fp32 outputs [slots] and log2-sum-exp [slots]; slots covers
// 16 heads (num_splits * ceil(items / num_splits) <= items + 15).
// Whether a decode spec combines a cluster launch's splits by pushing (templates/decode.cu
// CLUSTER_PUSH, from sm_90): 16-bit KV caches at head size 128 in the flash layouts (NHD, HND),
// single-token, not block-sparse, the kernels it was measured on; the policy's default clusters
// (runtime/decode.cpp) are for these only.
constexpr bool ga_decode_cluster_push(int head_size, bool kv16, int layout, bool multi_token,
                                      bool block_sparse) {
  return head_size == 128 && kv16 && layout != 2 && !multi_token && !block_sparse;
}
constexpr int ga_decode_cluster_slots(int head_size) {
  return GA_DECODE_HEADS_PER_BLOCK * head_size / 4 + 16;
}
constexpr int ga_decode_cluster_recv_bytes(int head_size) {
  return 16 + (ga_decode_cluster_slots(head_size) * 20 + 15) / 16 * 16;
}

// Prefill (and chunked prefill / prefix caching): variable-length queries over the paged KV
// cache, causal (GA_NON_CAUSAL: every row sees all keys [0, seq_len)); GA_DENSE_KV: over dense
// K/V (PagedKvView). The launch covers requests [first_req, first_req + gridDim.y).
struct PrefillParams {
  PagedKvView kv;                // request r: block table row r, seq_lens[r] (0: write zeros)
  GaHeadTerms terms;             // ALiBi slopes and sink logits (spec axes alibi, sinks)
  GaBlockSparse bsp;             // GA_BLOCK_SPARSE: the pattern (unused otherwise)
  const void* query;             // [num_tokens, num_heads, head_size] dtype
  void* output;                  // [num_tokens, num_heads, head_size] dtype
  const int* query_start_loc;    // [num_reqs + 1] token offsets of each request's queries;
                                 // GA_DENSE_KV only: null for a uniform batch (below)
  long long query_token_stride;  // elements
  long long query_head_stride;
  long long output_token_stride;
  long long output_head_stride;
  int first_req;     // request of blockIdx.y == 0
  int num_kv_heads;  // == gridDim.z
  float scale_log2;  // softmax scale * k_scale (fp8) * log2(e); no soft cap
  float scale;       // softmax scale * k_scale (fp8), used with the soft cap
  float soft_cap;    // HAS_SOFT_CAP: scores -> soft_cap * tanh(score / soft_cap)
  float v_scale;     // fp8 KV: multiplies the output; 1 otherwise
  // fp8 KV: k/v scales in device memory (null: the floats above). With a device k scale the
  // host leaves k_scale out of scale and scale_log2, and the kernel forms both products itself
  // (ga_prefill_scales, common.cuh) as the host would: equal scales give equal results.
  GaKvScales scales;
  int window;              // HAS_WINDOW: key k visible from position p when p - k < window
  GaBoundsReport* bounds;  // checked mode only
  // GA_DENSE_KV with query_start_loc null: request r's queries are rows
  // [r * uniform_q_len, (r + 1) * uniform_q_len) and its keys rows
  // [r * uniform_kv_len, (r + 1) * uniform_kv_len) (MultiHeadAttention's [batch, seq, ...]).
  int uniform_q_len;
  int uniform_kv_len;
  // > 0: the batch is split into decodes and prefills on the device (a graph captured for any
  // mix, AttentionMetadata::device_split). The prefills are the requests of
  // [first_req, first_req + num_reqs) holding more than device_split_q query tokens;
  // blockIdx.x enumerates all their row tiles, request by request (gridDim.y == 1; the grid
  // has room for the most tiles the captured token count allows, and blocks past the batch's
  // tiles exit). 0: the grid above.
  int device_split_q;
  int num_reqs;  // device_split_q > 0: request slots after first_req
  GA_LSE_FIELDS  // GA_WRITE_LSE: softmax_lse[head * lse_head_stride + query token] (see below)
};

// The prefill kernel's parameters with an e4m3 query (spec "_qe4m3"; the mma.sync kernel):
// as DecodeQ8Params, a struct of its own so that every other spec's parameter block stays.
struct PrefillQ8Params {
  PrefillParams base;
  GaQueryScales q8;
};
// The sm_90 e4m3 prefill compiled persistent (GA_PREFILL_SM90_PERSIST=2 or 3, the default): its
// parameters, a struct of its own so that the default kernels' parameter block stays. persist_x
// > 0: a persistent launch, whose blocks walk the tiles of the grid (persist_x, num_reqs,
// num_kv_heads) of a launch without the device split; 0: one block per tile.
struct PrefillQ8PersistParams {
  PrefillQ8Params base;
  int persist_x;
};

// Prefill tile geometry, shared by the host (runtime/prefill.cpp) and the two prefill templates
// (evaluated at compile time by both). detail::select_prefill_kernel() picks the template.
// Cache-block segments of a key tile are gcd(block size, tile) keys (both templates' V^T walks,
// ga_prefill_sm90_tma_rows).
constexpr int ga_gcd(int a, int b) { return b == 0 ? a : ga_gcd(b, a % b); }
//
// templates/prefill.cu (mma.sync, every arch): GA_PREFILL_WARPS warps; a warp owns
// ga_prefill_row_tiles() m16 row tiles of the block's ga_prefill_block_m() rows; K/V tiles of
// ga_prefill_block_n() keys in padded shared-memory rows, double-buffered (16-bit KV) or staged
// raw and converted (fp8 KV).
constexpr int GA_PREFILL_WARPS = 4;
constexpr int GA_PREFILL_THREADS = 32 * GA_PREFILL_WARPS;
constexpr int ga_prefill_head_pad(int head_size) { return (head_size + 15) / 16 * 16; }
constexpr int ga_prefill_row_tiles(int head_size) {
  return ga_prefill_head_pad(head_size) <= 128 ? 2 : 1;
}
constexpr int ga_prefill_block_m(int head_size) {
  return GA_PREFILL_WARPS * 16 * ga_prefill_row_tiles(head_size);
}
constexpr int ga_prefill_block_n(int head_size) {
  return ga_prefill_head_pad(head_size) <= 128 ? 64 : 32;
}
// Shared-memory row stride in 16-bit elements (8 of padding: no ldmatrix bank conflicts).
constexpr int ga_prefill_row_elems(int head_size) { return ga_prefill_head_pad(head_size) + 8; }
constexpr int ga_prefill_stages(bool kv_fp8) { return kv_fp8 ? 1 : 2; }
constexpr int ga_prefill_smem_bytes(int head_size, bool kv_fp8) {
  // Q and the 16-bit K/V tiles, then (fp8) the raw K/V tiles: [stage][k/v][n][head_size].
  return (ga_prefill_block_m(head_size) +
          2 * ga_prefill_stages(kv_fp8) * ga_prefill_block_n(head_size)) *
             ga_prefill_row_elems(head_size) * 2 +
         (kv_fp8 ? 2 * 2 * ga_prefill_block_n(head_size) * head_size : 0);
}
//
// templates/prefill_sm90.cu (Hopper wgmma, sm_90a, 16-bit KV, head size a multiple of 64; or
// an e4m3 query over an fp8 KV cache, `fp8`, head size 128): one producer warpgroup and
// ga_prefill_sm90_consumers consumer warpgroups of 64 rows each; a ring of K and V stages in as
// much shared memory as a block may have (227 KiB), at most 4. fp8: K and V^T stages of
// ga_prefill_sm90_fp8_block_n() keys (128: one 128-byte swizzled row of V^T per head dimension;
// wider: 128-key column blocks), and two raw V tiles that the producer
// copies and transposes into the V^T stages (the output tile is staged in them at the end).
// Head size 64 takes three consumers (192-row tiles): its wgmmas are half as long per score as
// at head 128, so a third warpgroup's softmax hides behind two others' wgmmas, and each K/V tile
// serves 1.5 times the rows (H200, 4 x 4096 causal: 866 -> 688 us against two consumers;
// docs/prefill-geometry-h200-2026-11-26-s5.txt).
constexpr int GA_PREFILL_SM90_WG_THREADS = 128;   // threads of a warpgroup
constexpr int GA_PREFILL_SM90_WG_ROWS = 64;       // query rows of a consumer warpgroup
constexpr int GA_PREFILL_SM90_MAX_CONSUMERS = 3;  // consumer warpgroups at most
// fp8 (e4m3 queries) at head size 128 with 128-key tiles: ga_prefill_sm90_fp8_consumers()
// consumer warpgroups (see there), except `fp8_heavy` specs (a soft cap, or checked mode), whose
// consumers spill at three consumers' 160 (152) registers a thread: two. Every geometry function
// below takes the same (head_size, fp8, fp8_heavy).
constexpr int ga_prefill_sm90_fp8_block_n();
constexpr int ga_prefill_sm90_fp8_consumers();
constexpr int ga_prefill_sm90_consumers(int head_size, bool fp8 = false, bool fp8_heavy = false) {
  return !fp8 && head_size <= 64 ? GA_PREFILL_SM90_MAX_CONSUMERS
         : fp8 && !fp8_heavy && head_size == 128 && ga_prefill_sm90_fp8_block_n() == 128
             ? ga_prefill_sm90_fp8_consumers()
             : 2;
}
constexpr int ga_prefill_sm90_threads(int head_size, bool fp8 = false, bool fp8_heavy = false) {
  return GA_PREFILL_SM90_WG_THREADS * (ga_prefill_sm90_consumers(head_size, fp8, fp8_heavy) + 1);
}
constexpr int ga_prefill_sm90_block_m(int head_size, bool fp8 = false, bool fp8_heavy = false) {
  return GA_PREFILL_SM90_WG_ROWS * ga_prefill_sm90_consumers(head_size, fp8, fp8_heavy);
}
constexpr int GA_PREFILL_SM90_SLACK = 1024 + 256;  // base alignment + mbarriers
// fp8's key tile width (templates/prefill_sm90.cu, PW_FP8, PW_FP8_WIDE): 128, 192 or 256 keys,
// V^T rows of 128-key column blocks of the 128-byte swizzle (a 192-key stage takes 256 keys'
// room, so 192 and 256 leave room for two stages, 128 for four). 128: the wider tiles measured
// slower (H100, 4 x 4096 causal, alternated with main's kernels: 795.7 / 792.8 us; 192 keys with
// the overlap 806.1 / 800.3, +1.1%; 256 without it 848.8 / 851.3, +7.1%;
// docs/fp8-prefill-wide-tiles-h100-2026-11-27-s9.txt). A function, not a constant: a
// namespace-level constant would change every spec's resource totals.
constexpr int ga_prefill_sm90_fp8_block_n() { return 128; }
// fp8's consumer warpgroups at head size 128 without a soft cap or checked mode: 2, or 3
// (192-row tiles: more warps a scheduler to hide the softmax's latency, and each K/V tile serves
// 1.5 times the rows; setmaxnreg 32 + 3 x 160, so the consumers run without the P V overlap,
// which spilled at 160, and the producer takes the lean gather). 2: three measured slower (H100,
// 4 x 4096 causal, alternated with main's kernels: 800.6 / 798.8 / 793.3 us against 783.9 /
// 793.6 / 790.7, +1.0%; with the consumers' wgmma turns +9.4%; GPU tests passed with it;
// docs/fp8-prefill-h100-2026-11-27-s12.txt). A function, as above.
constexpr int ga_prefill_sm90_fp8_consumers() { return 2; }
constexpr int ga_prefill_sm90_block_n(int head_size, bool fp8 = false) {
  return fp8 ? ga_prefill_sm90_fp8_block_n() : head_size <= 128 ? 128 : 64;
}
constexpr int ga_prefill_sm90_q_bytes(int head_size, bool fp8 = false, bool fp8_heavy = false) {
  return ga_prefill_sm90_block_m(head_size, fp8, fp8_heavy) * head_size * (fp8 ? 1 : 2);
}
// One K or V stage. fp8: V^T rows of whole 128-key column blocks (the 128-byte swizzle), so a
// 192-key tile takes 256 keys' room.
constexpr int ga_prefill_sm90_kv_bytes(int head_size, bool fp8 = false) {
  return fp8 ? (ga_prefill_sm90_block_n(head_size, fp8) + 127) / 128 * 128 * head_size
             : ga_prefill_sm90_block_n(head_size, fp8) * head_size * 2;
}
// fp8: the two raw V tiles, and a third with three consumers (the 192-row output tile is staged
// in them at the end).
constexpr int ga_prefill_sm90_raw_v_bytes(int head_size, bool fp8, bool fp8_heavy = false) {
  return fp8 ? ga_prefill_sm90_consumers(head_size, fp8, fp8_heavy) *
                   ga_prefill_sm90_kv_bytes(head_size, fp8)
             : 0;
}
constexpr int ga_prefill_sm90_stages(int head_size, bool fp8 = false, bool fp8_heavy = false) {
  const int fit =
      (227 * 1024 - GA_PREFILL_SM90_SLACK - ga_prefill_sm90_q_bytes(head_size, fp8, fp8_heavy) -
       ga_prefill_sm90_raw_v_bytes(head_size, fp8, fp8_heavy)) /
      (2 * ga_prefill_sm90_kv_bytes(head_size, fp8));
  return fit > 4 ? 4 : fit;
}
// The persistent e4m3 kernel's output buffer (templates/prefill_sm90.cu, PW_O_STAGE): 16-bit rows
// of the block's tile, beside the tiles below (the host adds it to the launch's shared memory).
constexpr int ga_prefill_sm90_out_stage_bytes(int head_size, bool fp8, bool fp8_heavy = false) {
  return ga_prefill_sm90_block_m(head_size, fp8, fp8_heavy) * head_size * 2;
}
constexpr int ga_prefill_sm90_smem_bytes(int head_size, bool fp8 = false, bool fp8_heavy = false) {
  return ga_prefill_sm90_q_bytes(head_size, fp8, fp8_heavy) +
         2 * ga_prefill_sm90_stages(head_size, fp8, fp8_heavy) *
             ga_prefill_sm90_kv_bytes(head_size, fp8) +
         ga_prefill_sm90_raw_v_bytes(head_size, fp8, fp8_heavy) + GA_PREFILL_SM90_SLACK;
}
// Whether a spec's consumers inline one softmax body (the causal/window mask of a masked tile as
// a pass of its own, pw_mask_scores) instead of a masked and an unmasked copy: where it measured
// no slower (H100, 4 x 4096: head 64 5% faster, legacy head 128 1% faster; flash head 128 and 256
// 2-4% slower, so they keep two bodies). The renderer gives the legacy one-body kernel its own
// ptxas option (jit_cache/render.cpp, which tests/test_legacy_prefill.cpp holds to this).
constexpr bool ga_prefill_sm90_one_body(int head_size, bool legacy, bool q_fp8, bool soft_cap,
                                        bool alibi, bool block_sparse) {
  return !q_fp8 && !soft_cap && !alibi && !block_sparse &&
         (legacy ? head_size == 128 : head_size == 64);
}
// Whether a two-body spec's tile 0 (peeled off the overlapped loop) takes only the masked softmax
// body, one inlined softmax fewer (templates/prefill_sm90.cu, `peeled`; 8-16% less compile time).
// Taken where it was measured no slower (docs/jit-cost-cpu-2026-11-27-s12.txt, H100): the e4m3
// q+kv kernel (4x4096 -1.6%) and the flash-layout 16-bit head 256 (-0.3%); not the 16-bit head
// 128 (+0.4-0.9% on every row).
constexpr bool ga_prefill_sm90_peel_masked(int head_size, bool legacy, bool q_fp8) {
  return q_fp8 || (!legacy && head_size == 256);
}
// Whether the legacy-layout (vLLM's 5-D key / 4-D value caches) sm_90 prefill copies its V^T tile
// as 16-key slabs in wgmma's 32-byte swizzle (templates/prefill_sm90.cu, pw_legacy_load_vs; PW_LV
// bit 128) instead of 64-key rows in the 128-byte swizzle (pw_legacy_load_vt). At block 16 a
// slab's dimensions are contiguous in the cache, so a copy instruction reads 4 whole lines into 4
// whole shared-memory rows (4 L2 requests where the rows' gather makes 16 one-sector ones). Taken
// where it was GPU-tested and timed: head 128, block 16 (H100, 4 x 4096 causal bf16 1024.7 ->
// 944.2 us, 4 x 512 after 16384 cached 880.7 -> 846.4 us, now 0.99x the flash layout's row;
// docs/switches-h100-2026-11-27-s12.txt). Larger blocks read 32 bytes of every 64+ (no fewer
// requests predicted) and other heads were not timed: they keep the rows.
constexpr bool ga_prefill_sm90_legacy_slabs(int head_size, int block_size) {
  return head_size == 128 && block_size == 16;
}
// Whether the consumers take the softmax row sums l on the tensor cores instead of adding the
// probabilities up (templates/prefill_sm90.cu, PW_ROWSUM): with each P V k-step one more wgmma
// m64n8 with the same P fragments and a shared-memory tile of ones as B; 64 FADDs a consumer
// thread and tile fewer on the issue-bound softmax for ~3% more tensor work. Taken where it
// measured faster: e4m3 (H100, 4 x 4096 causal, alternated with main's kernels: 802.4 / 802.7 us
// against 823.4 / 823.1, -2.5%). The 16-bit kernels with it (l then accumulated across tiles in
// the wgmma accumulator) measured even or slower: head 128 +0.7%, chunked after 2048-16384
// cached +0.8 to +0.9%, legacy +0.2 to +2.0%, head 256 +0.3%, head 64 -0.1%, against +-0.4%
// between identical kernels; they keep the FADDs.
// docs/prefill-rowsum-wgmma-h100-2026-11-27-s8.txt.
constexpr bool ga_prefill_sm90_rowsum_mma(int head_size, bool legacy, bool q_fp8) {
  return q_fp8 && head_size == 128 && !legacy;
}
// The 16-bit consumers' per-tile schedule (templates/prefill_sm90.cu, PW_SCHED), a set of bits:
// - GA_PW_SCHED_EARLY_WAIT: with the overlap (not block-sparse), a consumer waits for the next
//   tile's K and this tile's V and runs the proxy fence right after issuing its wgmmas, under the
//   wait for S, instead of at the top of the next tile;
// - GA_PW_SCHED_VOTE_MAX: with the reference maximum (flash layouts), the thread's own row maxima
//   are checked against the references and the warp votes; the quad shuffles of the row maxima
//   (and alpha's exponentials) run only when some row's reference moves;
// - GA_PW_SCHED_MAX8: the thread's row maxima in 4 chains a row instead of 2;
// - GA_PW_SCHED_NO_TURNS: the consumer warpgroups issue their wgmmas without taking turns (no
//   ping-pong ring of named barriers, as fp8 always runs): slower (H100, alternated: head 128
//   +2.2%, head 64 +4.5%, legacy +2.1%, head 256 even), so no spec takes it (session 10; the
//   turns around the exponentials instead of the wgmma issue, cuDNN's order, were slower too:
//   head 128 +5%, head 64 +17%, legacy +18%; docs/prefill-h128-turns-h100-2026-11-27-s10.txt).
// - GA_PW_SCHED_ROW_LINES: the producer's per-row cp.async gather of the flash layouts
//   (pw_gather_*) with 8 lanes a row instead of 4: each LDGSTS warp instruction then reads 4
//   whole 128-byte lines (one swizzle column block of 4 rows) and writes 4 whole 128-byte rows
//   of the tile, 4 L1 tag lookups and 4 shared-memory wavefronts where 8 rows of 64 bytes take
//   8 and 8 (ncu, session 8: 1.9x cuDNN's L2 requests, 34.6 M excessive shared wavefronts, all
//   on the LDGSTS); the same LDGSTS count. A full tile's 16-row passes each lie in one cache
//   block, so it takes one block-table address a tile (8 lookups of it), ~25% fewer producer
//   instructions a tile than the 4-lane gather. Measured faster (H100, session 11, old and new
//   alternated in one call; docs/prefill-h128-row-lines-h100-2026-11-27-s11.txt): 4 x 4096
//   causal head 128 986.5 -> 931.2 us (-5.6%; cuDNN 927.5 in the same call), chunked 4 x 512
//   after 2048 / 8192 / 16384 cached -5.5% / -3.4% / -6.1%. So it is the default of the 16-bit
//   flash specs at head sizes 128-192, whose producer has 88 registers. Head 256 (a 24-register
//   producer) spilled with it (4 STL / 4 LDL, the offsets of all passes held across the wait
//   for the V stage) until the producers under 88 registers took the lean gather
//   (templates/prefill_sm90.cu, PW_LEAN_GATHER: 32-bit block numbers held, each pass's offset
//   formed before its copies; full tiles one lookup a pass): no spills, and 4 x 4096 causal head
//   256 1713.8 -> 1685.9 us (-1.6%, H100, alternated, every new run faster; test_prefill passed
//   with it; docs/prefill-row-lines-h256-h100-2026-11-27-s11.txt). So head 256 takes it where the
//   lean gather applies (`plain_paged`: paged, not dense K/V, block-sparse or checked); head 64
//   (32 registers, TMA for its full tiles) measured slower with it (+3.1%) and keeps 4 lanes, as
//   do head 256's dense, block-sparse and checked specs. Block-sparse, dense K/V and checked
//   specs take it too (their GPU tests passed with it, and the block-sparse 4 x 4096 row went
//   1422.8 -> 1417.3 us; docs/prefill-row-lines-more-h100-2026-11-27-s11.txt). The e4m3 prefill
//   (fp8, head 128: a K/V row is one 128-byte line, so 8 lanes copy one row each instruction and
//   the full tiles take the one-lookup-a-pass path) takes it at head 128: 4 x 4096 794.5 ->
//   785.7 us (-1.1%, every run faster), test_fp8_query passed; fp8 head 256 (a 24-register
//   producer) keeps 4 lanes. Only this bit of a forced N reaches fp8.
// - GA_PW_SCHED_SPEC_EXP: speculative exponentials (templates/prefill_sm90.cu, pw_softmax_spec):
//   in an unmasked tile whose rows all have a reference maximum, the consumers take the
//   probabilities at the reference right away, 2^(s scale - m), and the thread's row maxima of
//   the raw scores beside them (no FMNMX chain or shuffle between S and the exponentials); one
//   warp vote afterwards asks whether some row's maximum passed its reference by more than the
//   slack; such a warp scores the tile again from shared memory (mma.sync, pw_rescore_warp) and
//   takes the exact softmax. Without a moved reference the results are pw_softmax's bits. 16-bit
//   flash layouts with the overlap, scores without a soft cap or ALiBi. Measured SLOWER (H100,
//   session 12, old and new alternated in one call; docs/prefill-h128-h100-2026-11-27-s12.txt):
//   4 x 4096 causal head 128 925.7 -> 992.3 us (+7.2%), chunked 4 x 512 after 2048 / 8192 /
//   16384 cached +6.9% / +7.2% / +7.0%; so no spec takes it (-DGA_PREFILL_SM90_SCHED=48 asks for
//   it with the row lines).
// - GA_PW_SCHED_SPEC_TEST (tests only): every speculative tile takes the fallback (a second
//   scoring and the exact softmax), so that the GPU tests reach that path.
// - GA_PW_SCHED_HOIST: a shorter turn (templates/prefill_sm90.cu, hoist_s / hoist_v): the
//   consumer's warpgroup index is broadcast from lane 0 (ptxas then knows it is warp-uniform and
//   keeps the Q descriptors in uniform registers across the loop instead of 14 regular ones moved
//   over by R2UR inside the turn), and a tile's descriptors are formed before the turn's
//   barrier. Main's loop turn (BAR.SYNC .. BAR.ARV) held 54 instructions (16 HGMMA, 14
//   UIADD3.64, 13 R2UR), now 43 (16 HGMMA, 14 UIADD3.64, no R2UR; ptxas still forms the K and V
//   k-step descriptors next to their wgmmas), the peeled tile's 78 -> 43. With
//   GA_PW_SCHED_SPEC_EXP it also runs the rescale vote after every speculative tile and gives the
//   second scoring an opaque copy of the shared-memory base (both took the descriptors off the
//   uniform datapath). Measured (H100, session 12, old and new alternated in one call;
//   docs/prefill-h128-turns-h100-2026-11-27-s12.txt): 4 x 4096 causal head 128 938.2 -> 929.9
//   us (-0.9%, 4 rounds), chunked 4 x 512 after 2048 / 8192 / 16384 cached -0.9% / -0.9% /
//   -1.0% (one run each); with the speculative exponentials (176) 939.2, main's time. So the
//   16-bit head-128 flash specs (causal, no window, paged, without soft cap / ALiBi) take it
//   beside the row lines; other specs keep their machine code.
// - GA_PW_SCHED_IMAX3 (also e4m3's, below) in those 16-bit head-128 flash specs too: the row
//   maxima by VIMNMX3 on the scores' bits (68 FMNMX -> 32 VIMNMX3 / VIMNMX a thread and tile, the
//   same maxima bit for bit). Measured (H100, session 16, old and new alternated in one call;
//   docs/prefill-h128-h100-2026-11-28-s16.txt): 4 x 4096 causal 927.0 -> 925.5 us (-0.2%, five
//   rounds each, inside the noise), chunked 4 x 512 after 2048 / 8192 / 16384 cached -0.8% /
//   -1.0% / -1.0% (one run each; unchanged rows of the same runs -0.5% to +0.1%): even to slightly
//   faster, kept; -DGA_PREFILL_SM90_SCHED=144 gives main's machine code back.
// - GA_PW_SCHED_PV_OUT: the loop's P_{j-1} V_{j-1} wgmmas issued after the turn's arrive (the
//   turn holds S_j's 8 wgmmas alone: 29 instructions instead of 43). Measured even (H100, session
//   14, alternated in one call; docs/prefill-h128-h100-2026-11-27-s14.txt): 4 x 4096 causal head
//   128 929.0 us against 929.2 (main) / 924.8 (the same code as main); chunked -0.1% to -0.5%,
//   one run each. ncu: a wgmma's issue holds the warp (~30 cycles each for the P V's register-A
//   wgmmas), and in main's order that time already lies under S's tensor time, so nothing moved.
// - GA_PW_SCHED_PV_LATE: P_{j-1} V_{j-1} issued only after the wait for S_j: SLOWER, 4 x 4096
//   1011.3 us (+8.8%; with GA_PW_SCHED_NO_TURNS as well +9.3%): its issue then sits between S and
//   the softmax. So no spec takes either (-DGA_PREFILL_SM90_SCHED=400 / 656 ask for them).
// The results are the same bits either way (the references and probabilities are unchanged).
// Measured (H100, 4 x 4096 causal and chunked 4 x 512 after 2048-16384 cached, old and new
// alternated; docs/prefill-h128-critical-path-h100-2026-11-27-s9.txt): the early waits make the
// legacy-layout kernel at head 128 faster (4 x 4096 -0.9%, chunked -2.8% / -4.2% / -4.3%) and
// the flash kernels slower (head 128 +1.7%, chunked +2.2% to +2.6%, head 64 +2.0%, head 256 with
// its two stages +22.6%); the vote gained nothing at head 128 (1.6% back at head 64, not enough
// to pass the flash kernels' old code) and the 4 chains nothing anywhere. So only the legacy
// head-128 kernel without soft cap or ALiBi takes the early waits; every other spec keeps 0, its
// old machine code. Of the legacy variants (graphattn-bench --parts legacy-variants, one round
// each, the coordinator's final call of session 9) the sliding window (+3.7%: 600.1 -> 622.4 us)
// and the non-causal kernel (+3.7%: 1887.7 -> 1956.9) were slower with them, sinks, fp16, GQA 1
// and 8 and block size 32 2-5% faster: so `plain_causal` (causal, no window) is required too. fp8
// takes GA_PW_SCHED_ROW_LINES alone (above); specs with a soft cap or ALiBi (scores scaled in the
// max pass) never take the vote (with it the consumers spill, 7-12 instructions at head 128).
// `bits` < 0: the default; templates compiled with -DGA_PREFILL_SM90_SCHED=N
// (GRAPHATTN_NVRTC_EXTRA_OPTIONS, for measurement) ask for N. (Enumerators: namespace-level
// constants could add to every spec's GLOBAL and CONSTANT totals.)
enum GaPwSched : int {
  GA_PW_SCHED_EARLY_WAIT = 1,
  GA_PW_SCHED_VOTE_MAX = 2,
  GA_PW_SCHED_MAX8 = 4,
  GA_PW_SCHED_NO_TURNS = 8,
  GA_PW_SCHED_ROW_LINES = 16,
  GA_PW_SCHED_SPEC_EXP = 32,
  GA_PW_SCHED_SPEC_TEST = 64,
  GA_PW_SCHED_HOIST = 128,
  GA_PW_SCHED_PV_OUT = 256,
  GA_PW_SCHED_PV_LATE = 512,
  // The thread's row maxima of the raw scores on their float bits as signed integers, three a
  // VIMNMX3 (prefill_sm90.cu's pw_row_imax; e4m3 since session 14, the 16-bit head-128 flash
  // specs since session 16, below); e4m3 only: consumer 1 a tile behind consumer 0 (the
  // consumers' stagger).
  GA_PW_SCHED_IMAX3 = 1024,
  GA_PW_SCHED_STAGGER = 2048,
  // e4m3 only: P's e4m3 halves converted right after the exponentials, before the wait for the
  // previous tile's P V, and only paired into the wgmma A registers after it (prefill_sm90.cu's
  // tile, early_pack). With EXP_CHUNKS the e4m3 default at head 128 without scaled scores (H200,
  // 4 x 4096 causal 706.22 -> 702.72 us; alone it measured +1.4%; s18 doc below).
  GA_PW_SCHED_EARLY_PACK = 4096,
  // e4m3 only: the softmax's exponentials in 4 chunks, each chunk's offsets through an FFMA on the
  // chunk before (prefill_sm90.cu's pw_softmax, CHUNKS).
  GA_PW_SCHED_EXP_CHUNKS = 8192,
  // e4m3 only: the consumers' warpgroup index made warp-uniform by a shuffle (prefill_sm90.cu,
  // ucw), as GA_PW_SCHED_HOIST does, without hoisting the descriptors (H200, 4 x 4096 causal:
  // 701.60 us against 702.72 with the default bits, not beyond noise; off).
  GA_PW_SCHED_UNIFORM_CW = 16384,
  // e4m3 only, head 128 with 128-key tiles: each consumer warp's 16 Q rows loaded once an item
  // from shared memory into wgmma A registers (16 a thread), S = Q K^T as wgmma with A from
  // registers (K alone read from shared memory: 16 KiB a warpgroup-tile instead of 24), and the
  // Q buffer released to the producer right after that load (prefill_sm90.cu, q_regs). The e4m3
  // default at head 128 without scaled scores (H200, 4 x 4096 causal, 8 alternated rounds: 697.5
  // -> 690.3 us, -1.0%; s19 doc).
  GA_PW_SCHED_Q_REGS = 32768
};
// The e4m3 prefill's (fp8) bits: `fp8_bits` >= 0 (-DGA_PREFILL_SM90_FP8_SCHED=N, for measurement)
// sets them all, of GA_PW_SCHED_EARLY_WAIT, _VOTE_MAX, _MAX8, _ROW_LINES, _HOIST, _IMAX3 and
// _STAGGER (the vote never with scaled scores); else at head 128 the row lines and, without scaled
// scores, the vote (session 13, f8p13: the vote's e4m3 path fixed, 4 x 4096 -3.6%;
// docs/fp8-prefill-h100-2026-11-27-s13.txt) and the VIMNMX3 row maxima (session 14, f8p14:
// H100, 4 x 4096 causal 734.0 us against 744.1 / 746.8 for main's kernel, -1.4%; the early waits
// +4.4%, the stagger +3.8%, both off; docs/fp8-prefill-h100-2026-11-27-s14.txt) and the early
// pack with the exponentials in chunks (session 18, f818: H200, 4 x 4096 causal, see
// docs/fp8-prefill-h200-2026-11-28-s18.txt) and Q in registers (session 19, f819:
// docs/fp8-prefill-h200-2026-11-28-s19.txt), or `bits`' row-lines bit.
constexpr int ga_prefill_sm90_sched(int head_size, bool legacy, bool fp8, bool scaled_scores,
                                    bool plain_causal, bool plain_paged, int bits = -1,
                                    int fp8_bits = -1) {
  return fp8 ? (fp8_bits >= 0
                    ? fp8_bits & (GA_PW_SCHED_EARLY_WAIT | GA_PW_SCHED_MAX8 |
                                  GA_PW_SCHED_ROW_LINES | GA_PW_SCHED_HOIST | GA_PW_SCHED_IMAX3 |
                                  GA_PW_SCHED_STAGGER | GA_PW_SCHED_EARLY_PACK |
                                  GA_PW_SCHED_EXP_CHUNKS | GA_PW_SCHED_UNIFORM_CW |
                                  GA_PW_SCHED_Q_REGS | (scaled_scores ? 0 : GA_PW_SCHED_VOTE_MAX))
                : bits < 0
                    ? (head_size == 128
                           ? GA_PW_SCHED_ROW_LINES |
                                 (scaled_scores ? 0
                                                : GA_PW_SCHED_VOTE_MAX | GA_PW_SCHED_IMAX3 |
                                                      GA_PW_SCHED_EARLY_PACK |
                                                      GA_PW_SCHED_EXP_CHUNKS | GA_PW_SCHED_Q_REGS)
                           : 0)
                    : bits & GA_PW_SCHED_ROW_LINES)
         : bits < 0
             ? (legacy && head_size == 128 && !scaled_scores && plain_causal
                    ? GA_PW_SCHED_EARLY_WAIT
                : !legacy && head_size == 128 && !scaled_scores && plain_causal && plain_paged
                    ? GA_PW_SCHED_ROW_LINES | GA_PW_SCHED_HOIST | GA_PW_SCHED_IMAX3
                : !legacy && head_size >= 128 && (head_size <= 192 || plain_paged)
                    ? GA_PW_SCHED_ROW_LINES
                    : 0)
         : scaled_scores ? bits & ~GA_PW_SCHED_VOTE_MAX
                         : bits;
}
// The producer's gather of a tile's Q rows by pointer steps (templates/prefill_sm90.cu, PW_Q_STEP):
// a producer thread copies the same 16-byte chunk of every (128 / chunks)-th row of the tile, and
// where GROUP divides that row step, consecutive copies of a thread lie a fixed number of query
// tokens apart; so one row offset (ga_prefill_row_offset) a thread and a 64-bit pointer step a
// copy, all copies unrolled, instead of each copy's own offset (a division by GROUP and two 64-bit
// products, ~740 instructions a producer thread at head 128, in 4 unrolled passes; now ~240 in
// one). The same copies, bytes and zero fill. ncu source counters of main's head-128 kernel (4 x
// 4096 causal bf16, H100): the producer spent ~4.8% of the block's time issuing Q while the
// consumers waited at the Q barrier (4.3% of their samples, the largest consumer long-scoreboard
// site). Measured faster (H100, session 17, old and new in one call, 1-2 old and 3-4 new runs a
// row; docs/prefill-h128-h100-2026-11-28-s17.txt): 4 x 4096 causal bf16 head 128 924.3 -> 905.0
// us (-2.1%; cuDNN 976.3 in the same call: 1.08x), legacy 944.4 -> 915.8 (-3.0%), head 64 624.6
// -> 616.4 (-1.3%), head 256 1688.8 -> 1652.5 (-2.2%), chunked 4 x 512 after 2048 / 8192 / 16384
// cached -1.7% / -0.8% / -0.5% (legacy -2.7% / -2.0% / -2.2%); the unchanged e4m3 row moved
// -0.8% in the same runs. So the default of the specs timed there: 16-bit, heads 64 / 128 / 256,
// GROUP 4, NHD or legacy caches (`kv_layout` 0 or 2), `plain` (causal, no window, soft cap, ALiBi
// or sinks, paged, no producer extras: not block-sparse or checked). Other specs keep their
// machine code (untimed; the code is the same for any GROUP dividing the row step). `chunks`:
// 16-byte chunks a row; `block_m`: the tile's rows.
constexpr bool ga_prefill_sm90_q_step(int head_size, bool fp8, int group, int chunks, int block_m,
                                      int kv_layout, bool plain) {
  return !fp8 && (head_size == 64 || head_size == 128 || head_size == 256) && group == 4 &&
         kv_layout != 1 && plain && chunks > 0 && 128 % chunks == 0 &&
         (128 / chunks) % group == 0 && block_m % (128 / chunks) == 0;
}
// The 16-bit sm_90 prefill's block start and end (templates/prefill_sm90.cu, PW_BSTART; bits,
// -DGA_PREFILL_SM90_BSTART=N asks for N, for measurement): GA_PW_BSTART_Q_L2 each consumer warp,
// while it waits for its own Q, prefetches into L2 its 16 rows of the Q tile of the block that
// starts one multiprocessor count (%nsmid) later in launch order (plain grids: device_split_q
// 0); GA_PW_BSTART_TABLE_L1 the producer prefetches into L1 the block-table lines of the block's
// K/V tiles before it issues the Q copies, so that tile 0's block lookups do not wait on L2;
// GA_PW_BSTART_OUT_STEP the consumers store the output tile by pointer steps (one row offset a
// thread, as PW_Q_STEP's Q copies) instead of one row offset a 16-byte chunk;
// GA_PW_BSTART_RAMP the producer issues tile 1's copies only once tile 0's K tile (and so,
// mostly, Q before it) has landed, so that the block's first Q and K do not share the
// multiprocessor's incoming bandwidth with tiles 1 and 2. Only where
// ga_prefill_sm90_q_step holds (`q_step`: GROUP 4 is what the output steps need), so every other
// spec keeps its machine code even when asked. Default Q_L2 | OUT_STEP | RAMP (13) at heads 64 and
// 128 in the flash layouts, where it measured faster (H200, session 18, old and new alternated,
// 3 rounds each; docs/prefill-h128-h200-2026-11-28-s18.txt): 4 x 4096 causal bf16 head 128
// 905.6 -> 891.5 us (-1.6%), head 64 625.5 -> 621.9 (-0.6%); the chunked rows on the head-128
// kernel (4 x 512 after 2048 / 8192 / 16384 cached) +0.6% / +0.2% / +0.1%, about 1 us; 0 elsewhere:
// the legacy layout (4 x 4096 +0.7%, chunked +1.8% to +2.4%) and head 256 (+0.5%) measured slower
// with it. N = 0 gives main 6b664b8's machine code back everywhere.
enum GaPrefillSm90BlockStart : int {
  GA_PW_BSTART_Q_L2 = 1,
  GA_PW_BSTART_TABLE_L1 = 2,
  GA_PW_BSTART_OUT_STEP = 4,
  GA_PW_BSTART_RAMP = 8
};
constexpr int ga_prefill_sm90_bstart(bool q_step, int head_size, bool legacy, int bits = -1) {
  return !q_step    ? 0
         : bits < 0 ? (legacy || head_size > 128
                           ? 0
                           : GA_PW_BSTART_Q_L2 | GA_PW_BSTART_OUT_STEP | GA_PW_BSTART_RAMP)
                    : bits & (GA_PW_BSTART_Q_L2 | GA_PW_BSTART_TABLE_L1 | GA_PW_BSTART_OUT_STEP |
                              GA_PW_BSTART_RAMP);
}
// TMA loads of the K and V tiles (flash layouts NHD and HND, paged, not block-sparse): each tile
// of block_n keys is gathered page by page, one tensor-map box of rows x 128 bytes per page
// segment and 128-byte column block, where rows = gcd(block size, block_n) (every segment lies
// inside one cache block; every supported block size is a multiple of 16, so rows >= 16 and each
// box lands on a 1024-byte boundary of the 128-byte swizzle). 0: no TMA for this geometry.
// Taken where it measured faster than the per-row cp.async gather (4 x 4096 causal, block 16):
// 16-bit head size 64 (H200, two consumers: -9%, docs/prefill-sm90-tma-h200-2026-11-26.txt; H100,
// with head 64's three consumers: 666-678 us against 692-698 gathered,
// docs/prefill-h128-full-tiles-h100-2026-11-27.txt). Head size 256 measured faster with two
// consumers' register split (H200, -2%) but slower with its overlap split (producer at 24
// registers, spilling: H100 2190-2207 us against 1883-1887), so it gathers. At head size 128 it
// was slower, 16-bit (H200 +2%; H100 against the full-tile gather +8.8%,
// docs/prefill-h128-tma-h100-2026-11-27-s6.txt) and e4m3 (+5%, the raw tiles by TMA), and 192
// was not measured: those keep the gather.
constexpr bool ga_prefill_sm90_tma(int head_size, bool fp8) { return !fp8 && head_size == 64; }
constexpr int ga_prefill_sm90_tma_rows(int block_size, int head_size, bool fp8) {
  if (!ga_prefill_sm90_tma(head_size, fp8)) return 0;
  const int rows = ga_gcd(block_size, ga_prefill_sm90_block_n(head_size, fp8));
  return block_size > 0 && rows % 8 == 0 ? rows : 0;
}
// A CUtensorMap (cuda.h: 128 bytes, 64-byte aligned), opaque to the kernels.
struct alignas(64) GaTensorMap {
  unsigned long long opaque[16];
};
// The key and value caches' tensor maps of a TMA prefill launch (runtime/prefill.cpp builds them
// on the host for every launch; a captured graph keeps the ones of its capture, which name that
// launch's cache), and whether to use them: 0 takes the per-row cp.async gather for every tile
// (GRAPHATTN_PREFILL_TMA=0, or cache strides TMA cannot take).
struct GaPrefillTma {
  GaTensorMap key, value;
  int enabled;
  // The maps' dimensions are (head dims, token in block, KV head, block) when 1, (head dims, KV
  // head, token in block, block) when 2: the two middle ones in increasing stride (HND, NHD).
  int token_dim;
};
// The parameters of a TMA prefill kernel: the maps first, so that the base block (PrefillParams)
// may end where the kernel's own layout ends (without the LSE fields, say) as the plain kernels'
// blocks do.
template <typename Base>
struct GaPrefillTmaParams {
  GaPrefillTma tma;
  Base base;
};
