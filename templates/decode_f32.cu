// SPDX-License-Identifier: Apache-2.0
// float32 decode over vLLM's legacy PagedAttention caches (spec dtype fp32, layout legacy):
// vLLM's paged_attention_v1 / v2 with float32 queries and caches. The key cache is
// [blocks, kv_heads, head_size / x, block_size, x] (x = 4, 16 bytes; or 8 or 16: spec key_x), the
// value cache [blocks, kv_heads, head_size, block_size]; any block size (8, 16, ..., 256).
//
// CUDA-core fp32 math, no tensor cores: vLLM's tests compare float32 against a float32 reference
// at an absolute tolerance of 1e-3, and tf32 MMAs round every input to 10 mantissa bits (the
// numbers behind the choice: README, "float32 decode"). The launch is the split-KV decode's
// (DecodeParams, its grid and shared memory), always unsplit: the host sets max_splits 1, so
// block (0, KV head chunk, request) does the whole request.
//
// A block takes the up-to-16 query heads of one KV head chunk (GROUP of them) and walks the
// request's keys F32_KEYS at a time: thread t scores key k0 + t against every head (its key row
// read once, 16-byte loads of the legacy chunks), the block takes each head's chunk maximum, the
// online softmax rescales the running sums, and each thread accumulates its own output elements
// (head, dimension) over the chunk's keys from the value cache. Scores in the log2 domain; the
// exp2 is ex2.approx (2 ulp), every product and sum fp32.

constexpr int F32_KEYS = GA_DECODE_THREADS;  // keys per chunk, one per thread
constexpr int F32_HPB = GROUP < GA_DECODE_HEADS_PER_BLOCK ? GROUP : GA_DECODE_HEADS_PER_BLOCK;
constexpr int F32_OUT = (F32_HPB * HEAD_SIZE + GA_DECODE_THREADS - 1) / GA_DECODE_THREADS;
#ifdef GA_KEY_X
constexpr int F32_X = GA_KEY_X;  // the key cache's x: the spec's key_x (8 or 16 fp32)
#else
constexpr int F32_X = 4;  // the key cache's x: 16 bytes of fp32
#endif
constexpr int F32_CHUNKS = ga_decode_head_chunks(GROUP);  // blocks per KV head (grid y)
static_assert(HEAD_SIZE % F32_X == 0, "fp32 legacy caches hold whole 16-byte chunks");
// Shared memory: the heads' queries, the chunk's scores, the keys' cache offsets, the heads'
// chunk maxima and sums. Fits the decode launch's dynamic shared memory at any stage count.
constexpr int F32_SMEM =
    (F32_HPB * HEAD_SIZE + F32_HPB * F32_KEYS + 2 * F32_HPB) * 4 + F32_KEYS * 8;
static_assert(F32_SMEM <= ga_decode_smem_bytes(HEAD_SIZE, 2, 2),
              "the fp32 decode's shared memory exceeds the decode launch's");
#define GA_F32_NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void __launch_bounds__(GA_DECODE_THREADS)
    graphattn_decode(const __grid_constant__ DecodeParams p) {
  ga_grid_dependency_sync();
  if (blockIdx.x != 0) return;  // unsplit: the host launches one split (max_splits 1)
  extern __shared__ __align__(128) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem);  // [F32_HPB][HEAD_SIZE], times the scale
  float* s_s = q_s + F32_HPB * HEAD_SIZE;       // [F32_HPB][F32_KEYS] scores, then p
  float* max_s = s_s + F32_HPB * F32_KEYS;      // [F32_HPB] chunk maxima
  float* sum_s = max_s + F32_HPB;               // [F32_HPB] chunk sums
  long long* off_s = reinterpret_cast<long long*>(sum_s + F32_HPB);  // [F32_KEYS] block offsets

  const int req = blockIdx.z;
  const int kv_head = blockIdx.y / F32_CHUNKS;
  const int first_col = (blockIdx.y - kv_head * F32_CHUNKS) * GA_DECODE_HEADS_PER_BLOCK;
  const int first_head = kv_head * GROUP + first_col;
  const int heads_here = GROUP - first_col < F32_HPB ? GROUP - first_col : F32_HPB;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (p.device_split != 0) {
    const int q0 = p.query_start_loc[req], n = p.query_start_loc[req + 1] - q0;
    if (n != 1 || q0 != req) return;
  }
  float* out = static_cast<float*>(p.output);
  const int seq_len = p.kv.seq_lens[req];
  if (seq_len <= 0) {  // a padded row: zeros out, no block-table read
    for (int i = tid; i < heads_here * HEAD_SIZE; i += GA_DECODE_THREADS)
      out[req * p.output_token_stride + (first_head + i / HEAD_SIZE) * p.output_head_stride +
          i % HEAD_SIZE] = 0.0f;
    return;
  }
  const int pos = seq_len - 1;
  const int lo = ga_window_first_key(pos, p.window);
  const float* query = static_cast<const float*>(p.query);
  for (int i = tid; i < F32_HPB * HEAD_SIZE; i += GA_DECODE_THREADS) {
    const int h = i / HEAD_SIZE;
    q_s[i] = h < heads_here ? query[req * p.query_token_stride +
                                    (first_head + h) * p.query_head_stride + i % HEAD_SIZE] *
                                  (HAS_SOFT_CAP ? 1.0f : p.scale * GA_LOG2E)
                            : 0.0f;
  }
  float slope[F32_HPB];
#pragma unroll
  for (int h = 0; h < F32_HPB; ++h)
    slope[h] = ga_alibi_slope_log2(p.terms, first_head + h, h < heads_here);
  // Running maximum (log2 domain) and sum per head, kept alike by every thread.
  float m_run[F32_HPB], l_run[F32_HPB];
#pragma unroll
  for (int h = 0; h < F32_HPB; ++h) {
    m_run[h] = GA_F32_NEG_INF;
    l_run[h] = 0.0f;
  }
  float acc[F32_OUT];
#pragma unroll
  for (int i = 0; i < F32_OUT; ++i) acc[i] = 0.0f;
  const float* key_cache = static_cast<const float*>(p.kv.key_cache);
  const float* value_cache = static_cast<const float*>(p.kv.value_cache);
  const long long head_off = static_cast<long long>(kv_head) * p.kv.cache_head_stride;
  const int* bt_row = p.kv.block_table + req * p.kv.block_table_stride;
  const float cap_log2 = p.soft_cap * GA_LOG2E, x_over_cap = p.scale / p.soft_cap;
  __syncthreads();

  for (int k0 = lo; k0 < seq_len; k0 += F32_KEYS) {
    // Scores of key k0 + tid against every head.
    const int key = k0 + tid;
    const bool valid = key < seq_len;
    float s[F32_HPB];
    long long base = -1;
    if (valid) {
      base = static_cast<long long>(bt_row[key / BLOCK_SIZE]) * p.kv.cache_block_stride + head_off;
      const float* krow = key_cache + base + (key % BLOCK_SIZE) * F32_X;
#pragma unroll
      for (int h = 0; h < F32_HPB; ++h) s[h] = 0.0f;
#pragma unroll 4
      for (int c = 0; c < HEAD_SIZE / 4; ++c) {  // 16-byte chunks: elements 4c .. 4c + 3
        const float* kc = F32_X == 4
                              ? krow + c * (BLOCK_SIZE * F32_X)
                              : krow + (c * 4 / F32_X) * (BLOCK_SIZE * F32_X) + c * 4 % F32_X;
        const float4 k = *reinterpret_cast<const float4*>(kc);
#pragma unroll
        for (int h = 0; h < F32_HPB; ++h) {
          const float4 q = *reinterpret_cast<const float4*>(q_s + h * HEAD_SIZE + c * 4);
          s[h] = fmaf(q.x, k.x, fmaf(q.y, k.y, fmaf(q.z, k.z, fmaf(q.w, k.w, s[h]))));
        }
      }
#pragma unroll
      for (int h = 0; h < F32_HPB; ++h) {
        if (HAS_SOFT_CAP) s[h] = cap_log2 * tanhf(s[h] * x_over_cap);
        s[h] += ga_alibi_log2(slope[h], key, pos);
      }
    } else {
#pragma unroll
      for (int h = 0; h < F32_HPB; ++h) s[h] = GA_F32_NEG_INF;
    }
    off_s[tid] = base;
#pragma unroll
    for (int h = 0; h < F32_HPB; ++h) s_s[h * F32_KEYS + tid] = s[h];
    __syncthreads();
    // Each head's chunk maximum: warp w reduces heads w, w + 4, ...
    for (int h = warp; h < F32_HPB; h += GA_DECODE_WARPS) {
      float m = GA_F32_NEG_INF;
      for (int i = lane; i < F32_KEYS; i += 32) m = fmaxf(m, s_s[h * F32_KEYS + i]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      if (lane == 0) max_s[h] = m;
    }
    __syncthreads();
    float alpha[F32_HPB];
#pragma unroll
    for (int h = 0; h < F32_HPB; ++h) {
      const float m_new = fmaxf(m_run[h], max_s[h]);  // finite: key k0 is valid
      alpha[h] = ga_exp2(m_run[h] - m_new);
      m_run[h] = m_new;
      s_s[h * F32_KEYS + tid] = valid ? ga_exp2(s[h] - m_new) : 0.0f;
    }
    __syncthreads();
    for (int h = warp; h < F32_HPB; h += GA_DECODE_WARPS) {
      float l = 0.0f;
      for (int i = lane; i < F32_KEYS; i += 32) l += s_s[h * F32_KEYS + i];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
      if (lane == 0) sum_s[h] = l;
    }
    // Output element e = tid + i * threads: head e / HEAD_SIZE, dimension e % HEAD_SIZE.
    const int n = seq_len - k0 < F32_KEYS ? seq_len - k0 : F32_KEYS;
#pragma unroll
    for (int i = 0; i < F32_OUT; ++i) {
      const int e = tid + i * GA_DECODE_THREADS;
      const int h = e / HEAD_SIZE, d = e - h * HEAD_SIZE;
      if (F32_OUT * GA_DECODE_THREADS == F32_HPB * HEAD_SIZE || h < F32_HPB) {
        float a = acc[i] * alpha[h];
        const float* pv = s_s + h * F32_KEYS;
        for (int t = 0; t < n; ++t) {
          const int kt = k0 + t;
          a = fmaf(pv[t],
                   value_cache[off_s[t] + static_cast<long long>(d) * BLOCK_SIZE + kt % BLOCK_SIZE],
                   a);
        }
        acc[i] = a;
      }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < F32_HPB; ++h) l_run[h] = l_run[h] * alpha[h] + sum_s[h];
  }

  // out = acc / (sum (+ the sink's share)).
#pragma unroll
  for (int i = 0; i < F32_OUT; ++i) {
    const int e = tid + i * GA_DECODE_THREADS;
    const int h = e / HEAD_SIZE, d = e - h * HEAD_SIZE;
    if (h < heads_here) {
      float r = 1.0f / l_run[h];
      if (HAS_SINKS)
        r = ga_sink_normalizer(m_run[h], l_run[h], ga_sink_log2(p.terms, first_head + h, true));
      out[req * p.output_token_stride + (first_head + h) * p.output_head_stride + d] = acc[i] * r;
    }
  }
}
