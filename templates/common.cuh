// SPDX-License-Identifier: Apache-2.0
// Device helpers shared by every kernel family. Self-contained: no toolkit header is needed, so
// NVRTC compiles these with nothing but libnvrtc. The renderer defines before this text:
//   HEAD_SIZE, BLOCK_SIZE, GROUP, IS_BF16, KV_FP8 (0 auto, 1 e4m3, 2 e5m2),
//   KV_LAYOUT (0 nhd, 1 hnd, 2 legacy),
//   HAS_WINDOW, HAS_SOFT_CAP (all constexpr int), and HAS_ALIBI / HAS_SINKS / GA_NON_CAUSAL /
//   GA_DENSE_KV / GA_BLOCK_SPARSE (#define 1) for specs with those suffixes.
#ifndef HAS_ALIBI
#define HAS_ALIBI 0
#endif
#ifndef HAS_SINKS
#define HAS_SINKS 0
#endif
#ifndef GA_NON_CAUSAL
#define GA_NON_CAUSAL 0
#endif
#ifndef GA_DENSE_KV
#define GA_DENSE_KV 0
#endif
#ifndef GA_BLOCK_SPARSE
#define GA_BLOCK_SPARSE 0
#endif

// Programmatic dependent launch (sm_90+; the host sets the launch attribute there). Every kernel
// calls this first, before any global memory access: it waits until the previous kernel in the
// stream has finished and its writes are visible, then lets the next kernel be scheduled early.
__device__ __forceinline__ void ga_grid_dependency_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Only the first half: waits for the previous kernel (its writes visible), schedules nobody.
__device__ __forceinline__ void ga_grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Only the second half: lets the next kernel be scheduled. The next kernel starts once every
// block of this one has called either or exited, so a block that lingers without touching
// memory (an idle member of a cluster) calls this.
__device__ __forceinline__ void ga_allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

typedef unsigned short ga_u16;  // storage of one fp16 or bf16 value
typedef unsigned char ga_u8;    // storage of one fp8 value
typedef unsigned int ga_u32;    // a register of two 16-bit values

constexpr float GA_LOG2E = 1.4426950408889634f;

__device__ __forceinline__ float ga_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float ga_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The logits soft cap, one formula for every kernel: a raw score x becomes
// cap * tanh(x * x_over_cap) in the log2 domain (cap_log2 = cap * log2(e); x_over_cap folds the
// softmax scale and 1 / cap), with tanh(y) = 1 - 2 / (e^{2y} + 1) from ex2.approx and
// rcp.approx: a few ulp over the whole range, and at large |y| e^{2y} overflows to inf (-> cap)
// or underflows to 0 (-> -cap), never NaN.
__device__ __forceinline__ float ga_soft_cap_log2(float x, float x_over_cap, float cap_log2) {
  const float ex = ga_exp2(x * (2.f * GA_LOG2E) * x_over_cap);
  return cap_log2 * (1.f - 2.f * ga_rcp(ex + 1.f));
}

// The sliding window, one rule for every kernel: query position pos sees key position key when
// key <= pos and pos - key < window (every earlier key without a window).
__device__ __forceinline__ bool ga_visible(int pos, int key, int window) {
  return key <= pos && (!HAS_WINDOW || pos - key < window);
}
// The first key position that query position pos sees.
__device__ __forceinline__ int ga_window_first_key(int pos, int window) {
  return HAS_WINDOW ? max(0, pos - window + 1) : 0;
}
// The prefill mask: causal, the window rule; non-causal (no window), every key before kv_end,
// the request's seq_len. The last tile's rows at or past kv_end are zero-filled, which would
// score 0 rather than -inf: the mask is what removes them.
__device__ __forceinline__ bool ga_prefill_visible(int pos, int key, int kv_end, int window) {
  return GA_NON_CAUSAL ? key < kv_end : ga_visible(pos, key, window);
}
// Whether the key tile [n0, n0 + block_n) needs the mask for rows at positions
// [pos_lo, pos_hi]: causal, when a key lies past pos_lo or (window) falls out of pos_hi's window;
// non-causal, only when the tile reaches past kv_end. Full tiles take the unmasked fast path.
__device__ __forceinline__ bool ga_prefill_tile_masked(int n0, int block_n, int pos_lo, int pos_hi,
                                                       int kv_end, int window) {
  if (GA_NON_CAUSAL) return n0 + block_n > kv_end;
  return n0 + block_n - 1 > pos_lo || (HAS_WINDOW && pos_hi - n0 >= window);
}

// ALiBi, one rule for every kernel: the bias of key position key seen from query position pos,
// in the log2 domain (slope_log2 = slope * log2(e)), added after the soft cap.
__device__ __forceinline__ float ga_alibi_log2(float slope_log2, int key, int pos) {
  return slope_log2 * static_cast<float>(key - pos);
}
// head's ALiBi slope in the log2 domain (0 without ALiBi, or for a head past the layer's).
__device__ __forceinline__ float ga_alibi_slope_log2(const GaHeadTerms& t, int head, bool valid) {
  return HAS_ALIBI && valid ? __ldg(t.alibi_slopes + head) * GA_LOG2E : 0.f;
}
// head's sink logit in the log2 domain (-inf without sinks, or for a head past the layer's).
__device__ __forceinline__ float ga_sink_log2(const GaHeadTerms& t, int head, bool valid) {
  return HAS_SINKS && valid ? __ldg(t.sinks + head) * GA_LOG2E : __int_as_float(0xff800000);
}
// Block-sparse attention (GA_BLOCK_SPARSE; the rule is GaBlockSparse's in params.h): local query
// head `head`'s stride offset modulo vert_stride (64-bit product: global head x step).
__device__ __forceinline__ int ga_bsp_offset(const GaBlockSparse& b, int head) {
  const long long step = b.head_sliding_step;
  const long long g = step >= 0 ? static_cast<long long>(b.head_offset + head) * step
                                : static_cast<long long>(b.kv_head_offset + head / GROUP) * -step;
  return static_cast<int>((g + 1) % b.vert_stride);
}
// Whether a head of stride offset `off` (ga_bsp_offset) sees key block kb from query block qb
// (kb <= qb; the causal mask handles later keys).
__device__ __forceinline__ bool ga_bsp_visible(const GaBlockSparse& b, int qb, int kb, int off) {
  return qb - kb < b.local_blocks || (kb + off) % b.vert_stride == 0;
}
// The softmax normalizer of a row whose scores (log2 domain) have maximum m and sum
// l = sum 2^(s - m), with an attention sink of logit sink_log2 in the denominator:
// 1 / (l + 2^(sink - m)), computed without overflow for a sink far above m. 0 for a row that saw
// no key (m = -inf).
__device__ __forceinline__ float ga_sink_normalizer(float m, float l, float sink_log2) {
  const float top = fmaxf(m, sink_log2);
  const float a = ga_exp2(m - top);
  return a / (l * a + ga_exp2(sink_log2 - top));
}
#ifdef GA_WRITE_LSE
// Softmax LSE (spec axis softmax_lse): a row's log-sum-exp, natural log, from its maximum m and
// sum l = sum 2^(s - m) in the log2 domain (with sinks, the sink's 2^sink joins the sum); -inf
// for a row that saw no key (m = -inf, l = 0), with or without a sink, as for a padded row.
__device__ __forceinline__ float ga_lse(float m, float l, float sink_log2) {
  constexpr float LN2 = 0.6931471805599453f;
  if (!HAS_SINKS || l == 0.f) return (m + __log2f(l)) * LN2;
  const float top = fmaxf(m, sink_log2);
  return (top + __log2f(l * ga_exp2(m - top) + ga_exp2(sink_log2 - top))) * LN2;
}
#endif

__device__ __forceinline__ float ga_f16_to_f32(ga_u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ ga_u16 ga_f32_to_f16(float f) {
  ga_u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float ga_bf16_to_f32(ga_u16 h) {
  return __uint_as_float(static_cast<unsigned>(h) << 16);
}
__device__ __forceinline__ ga_u16 ga_f32_to_bf16(float f) {
  ga_u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// The query/output element type chosen by the spec.
__device__ __forceinline__ float ga_to_float(ga_u16 h) {
  return IS_BF16 ? ga_bf16_to_f32(h) : ga_f16_to_f32(h);
}
__device__ __forceinline__ ga_u16 ga_from_float(float f) {
  return IS_BF16 ? ga_f32_to_bf16(f) : ga_f32_to_f16(f);
}

// Two floats -> one register of two bf16 (BF16) or fp16 values, lo in the low half.
template <bool BF16>
__device__ __forceinline__ ga_u32 ga_pack2_as(float lo, float hi) {
  ga_u32 d;
  if (BF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  }
  return d;
}
// ... of the model's 16-bit type.
__device__ __forceinline__ ga_u32 ga_pack2(float lo, float hi) {
  return ga_pack2_as<IS_BF16 != 0>(lo, hi);
}

// fp8 -> float, exact. e5m2 is the upper byte of an fp16; e4m3 moves its bits into an fp16 and
// scales by 2^8 to account for the bias difference (15 - 7), subnormals included.
__device__ __forceinline__ float ga_e4m3_to_f32(ga_u8 b) {
  const ga_u16 h = static_cast<ga_u16>(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
  return ga_f16_to_f32(h) * 256.0f;
}
__device__ __forceinline__ float ga_e5m2_to_f32(ga_u8 b) {
  return ga_f16_to_f32(static_cast<ga_u16>(b << 8));
}

// float -> fp8 with round-to-nearest-even and saturation to the largest finite value (vLLM's
// __NV_SATFINITE); NaN stays NaN. EXP_BIAS / MANT_BITS: e4m3 7 / 3, e5m2 15 / 2.
// The hardware conversion: sm_89 and later convert in one instruction (cvt.rn.satfinite: the same
// rounding and saturation; every float bit pattern gives the same byte both ways, e4m3 and e5m2,
// checked on an H100 in session 12). A few dozen PTX instructions fewer a value: the e4m3 decode's
// compile -10..-13%, the e4m3 cache write's -31% (docs/jit-cost-cpu-2026-11-27-s12.txt). Its NaN
// is 0x7f, so the sign is ORed in (a no-op for every other value: the result already carries it).
// Default: e4m3 on sm_90, where it was GPU-tested and timed (H100, e4m3 decode rows even with the
// software rounding's, docs/switches-h100-2026-11-27-s12.txt); e5m2 and other archs keep the
// software rounding. GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_FP8_CVT_HW=1: both formats on sm_89+;
// =0: the software rounding everywhere.
#ifdef GA_FP8_CVT_HW
#define GA_FP8_CVT_HW_ON(EXP_BIAS) (GA_FP8_CVT_HW && TARGET_ARCH >= 89)
#else
#define GA_FP8_CVT_HW_ON(EXP_BIAS) (TARGET_ARCH == 90 && (EXP_BIAS) == 7)
#endif
template <int EXP_BIAS, int MANT_BITS, int MAX_CODE>
__device__ __forceinline__ ga_u8 ga_f32_to_fp8(float x) {
  const unsigned bits = __float_as_uint(x);
  const unsigned sign = (bits >> 24) & 0x80u;
  if constexpr (GA_FP8_CVT_HW_ON(EXP_BIAS)) {
    static_assert(EXP_BIAS == 7 || EXP_BIAS == 15, "e4m3 or e5m2");
    unsigned short r;
    if constexpr (EXP_BIAS == 7)
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.f), "f"(x));
    else
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.f), "f"(x));
    return static_cast<ga_u8>((r & 0xffu) | sign);
  } else {
    const unsigned abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return static_cast<ga_u8>(sign | 0x7fu);  // NaN
    const int e = static_cast<int>(abs_bits >> 23) - 127;
    int code;
    if (e < 1 - EXP_BIAS) {
      // Subnormal range of the fp8 type: a multiple of 2^(1 - bias - mant). Scaling by a power
      // of two is exact and rintf rounds to nearest even; a carry lands on the smallest normal.
      code = static_cast<int>(
          rintf(__uint_as_float(abs_bits) *
                __uint_as_float(static_cast<unsigned>(127 + EXP_BIAS - 1 + MANT_BITS) << 23)));
    } else {
      const int shift = 23 - MANT_BITS;
      const unsigned mant = abs_bits & 0x7fffffu;
      unsigned r = mant >> shift;
      const unsigned rem = mant & ((1u << shift) - 1u);
      const unsigned half = 1u << (shift - 1);
      if (rem > half || (rem == half && (r & 1u))) ++r;
      code = ((e + EXP_BIAS) << MANT_BITS) + static_cast<int>(r);
    }
    if (code > MAX_CODE) code = MAX_CODE;
    return static_cast<ga_u8>(sign | static_cast<unsigned>(code));
  }
}

__device__ __forceinline__ float ga_kv_fp8_to_f32(ga_u8 b) {
  return KV_FP8 == 1 ? ga_e4m3_to_f32(b) : ga_e5m2_to_f32(b);
}
__device__ __forceinline__ ga_u8 ga_f32_to_kv_fp8(float x) {
  return KV_FP8 == 1 ? ga_f32_to_fp8<7, 3, 0x7e>(x) : ga_f32_to_fp8<15, 2, 0x7b>(x);
}

// An fp8 k or v scale: the device scalar when the launch gives one (GaKvScales), else the
// launch's float. Call after ga_grid_dependency_sync(): the previous kernel may have written it.
// A 16-bit cache never reads the pointer.
__device__ __forceinline__ float ga_kv_scale(const float* ptr, float value) {
  return KV_FP8 != 0 && ptr != nullptr ? *ptr : value;
}

// The score and output scales a prefill kernel applies. With a device k scale the host passed
// the softmax scale alone in p.scale, and the products are formed here in the host's order
// (scale * k_scale, then * log2(e)), so a device scale and an equal float give the same bits.
struct GaPrefillScales {
  float scale_log2;  // softmax scale * k_scale * log2(e)
  float scale;       // softmax scale * k_scale
  float v_scale;
};
__device__ __forceinline__ GaPrefillScales ga_prefill_scales(const PrefillParams& p) {
  GaPrefillScales s{p.scale_log2, p.scale, ga_kv_scale(p.scales.v_scale_ptr, p.v_scale)};
  if (KV_FP8 != 0 && p.scales.k_scale_ptr != nullptr) {
    s.scale = p.scale * *p.scales.k_scale_ptr;
    s.scale_log2 = s.scale * GA_LOG2E;
  }
  return s;
}
#ifdef GA_Q_E4M3
// e4m3 queries (spec "_qe4m3", both prefill kernels): this block's (request, KV head) descales
// fold into the score scale (q_descale, and k_descale, which the host then leaves out of
// p.scale) and the output scale (v_descale).
__device__ __forceinline__ GaPrefillScales ga_prefill_q8_scales(const PrefillParams& p,
                                                                const GaQueryScales& q8, int req,
                                                                int kv_head) {
  GaPrefillScales s = ga_prefill_scales(p);
  const long long at = static_cast<long long>(req) * q8.req_stride +
                       static_cast<long long>(kv_head) * q8.head_stride;
  const float qk =
      (q8.q_descale ? q8.q_descale[at] : q8.q_scale) * (q8.k_descale ? q8.k_descale[at] : 1.0f);
  s.scale *= qk;
  s.scale_log2 *= qk;
  if (q8.v_descale) s.v_scale = q8.v_descale[at];
  return s;
}
#endif

// Fails loudly when the launch disagrees with the kernel's own tiling: the host sizes shared
// memory and the block from its copy of it (detail::prefill_config), and a mismatch must trap,
// never corrupt memory.
__device__ __forceinline__ void ga_require_launch(unsigned smem_bytes, unsigned threads) {
  unsigned dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn));
  if (dyn < smem_bytes || blockDim.x != threads) __trap();
}

// A prefill thread block's work: query rows [m0, m_end) of request req for the query heads of
// KV head kv_head (row r is query token r / GROUP, head kv_head * GROUP + r % GROUP; row tiles
// run in reverse so the longest causal tiles start first) and the key tiles
// [tile0, tile0 + n_tiles) of BLOCK_N keys that some of its rows can see.
// kv_row0: GA_DENSE_KV only, the dense K/V row of the request's key 0 (PagedKvView).
struct GaPrefillTile {
  int req, kv_head, q_start, q_len, seq_len, ctx, m0, m_end, pos_lo, pos_hi, kv_begin, kv_end,
      tile0, n_tiles, kv_row0;
};
// The start of both prefill kernels: waits for the previous kernel (before any global memory
// access), checks the launch, then computes the block's tile. False when the block has no rows:
// it must return at once.
// A batch split on the device (PrefillParams::device_split_q > 0): row tile `tile` of the
// enumeration of every prefill's row tiles, request by request, as (request, row tile of it,
// the request's tile count). Each warp walks the requests 32 at a time with a prefix sum over
// their tile counts (every warp the same, so no shared memory and no barrier); all 32 lanes
// must be active. False when the batch has fewer tiles.
template <int BLOCK_M>
__device__ __forceinline__ bool ga_prefill_find_tile(const PrefillParams& p, int tile, int& req,
                                                     int& tile_in_req, int& req_tiles) {
  const int lane = threadIdx.x & 31;
  const int end = p.first_req + p.num_reqs;
  int before = 0;  // tiles of the requests walked so far
  for (int r0 = p.first_req; r0 < end; r0 += 32) {
    const int r = r0 + lane;
    int tiles = 0;
    if (r < end) {
      const int q_len = p.query_start_loc[r + 1] - p.query_start_loc[r];
      if (q_len > p.device_split_q) tiles = (q_len * GROUP + BLOCK_M - 1) / BLOCK_M;
    }
    int incl = tiles;  // inclusive prefix sum over the lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (tile < before + total) {
      const int l = __ffs(__ballot_sync(0xffffffffu, before + incl > tile)) - 1;
      req = r0 + l;
      req_tiles = __shfl_sync(0xffffffffu, tiles, l);
      tile_in_req = tile - before - (__shfl_sync(0xffffffffu, incl, l) - req_tiles);
      return true;
    }
    before += total;
  }
  return false;
}

// The rest of a prefill tile from its request, KV head and first row (t.req, t.kv_head, t.m0),
// returning false from the function it is expanded in when the tile has no rows (a macro, so
// that ga_prefill_begin's code stays token for token what it was: as a function call it moved
// the mma.sync prefill's sm_80 instruction order). ctx: the position of the request's first
// query token (its keys end with its queries; for non-causal attention it matters only to
// ALiBi's key - query distance).
#define GA_PREFILL_TILE_AT(p, t)                                                                 \
  const bool uniform = GA_DENSE_KV && p.query_start_loc == nullptr;                              \
  if (uniform) {                                                                                 \
    t.q_start = t.req * p.uniform_q_len;                                                         \
    t.q_len = p.uniform_q_len;                                                                   \
  } else {                                                                                       \
    t.q_start = p.query_start_loc[t.req];                                                        \
    t.q_len = p.query_start_loc[t.req + 1] - t.q_start;                                          \
  }                                                                                              \
  const int rows = t.q_len * GROUP;                                                              \
  if (t.m0 >= rows) return false;                                                                \
  if (GA_DENSE_KV) {                                                                             \
    t.seq_len = uniform ? p.uniform_kv_len : t.q_len;                                            \
    t.kv_row0 = uniform ? t.req * p.uniform_kv_len : t.q_start;                                  \
  } else {                                                                                       \
    t.seq_len = p.kv.seq_lens[t.req];                                                            \
    t.kv_row0 = 0;                                                                               \
  }                                                                                              \
  t.ctx = t.seq_len - t.q_len;                                                                   \
  t.m_end = min(rows, t.m0 + BLOCK_M);                                                           \
  t.pos_lo = t.ctx + t.m0 / GROUP;                                                               \
  t.pos_hi = t.ctx + (t.m_end - 1) / GROUP;                                                      \
  t.kv_end = GA_NON_CAUSAL ? max(0, t.seq_len) : max(0, min(t.seq_len, t.pos_hi + 1));           \
  t.kv_begin = ga_window_first_key(t.pos_lo, p.window);                                          \
  t.tile0 = t.kv_begin / BLOCK_N;                                                                \
  t.n_tiles =                                                                                    \
      t.kv_end > t.tile0 * BLOCK_N ? (t.kv_end - t.tile0 * BLOCK_N + BLOCK_N - 1) / BLOCK_N : 0; \
  return true;

// The same as a function, for kernels that walk several tiles (prefill_sm90.cu, PW_PERSIST).
template <int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ bool ga_prefill_tile_at(const PrefillParams& p, GaPrefillTile& t) {
  GA_PREFILL_TILE_AT(p, t)
}

template <int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ bool ga_prefill_begin(const PrefillParams& p, unsigned smem_bytes,
                                                 unsigned threads, GaPrefillTile& t) {
  ga_grid_dependency_sync();
  ga_require_launch(smem_bytes, threads);
  t.kv_head = blockIdx.z;
  if (p.device_split_q > 0) {
    // Tile-major over the KV heads, in launch order (x fastest): the batch's tiles of every
    // head come first and the grid's spare blocks last, so no spare block is dispatched before
    // a tile with work.
    const unsigned linear = blockIdx.x + gridDim.x * blockIdx.z;
    t.kv_head = static_cast<int>(linear % gridDim.z);
    int tile_in_req = 0, req_tiles = 0;
    if (!ga_prefill_find_tile<BLOCK_M>(p, static_cast<int>(linear / gridDim.z), t.req, tile_in_req,
                                       req_tiles))
      return false;
    t.m0 = (req_tiles - 1 - tile_in_req) * BLOCK_M;  // a request's longest tiles first
  } else {
    t.req = p.first_req + blockIdx.y;
    t.m0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
  }
  GA_PREFILL_TILE_AT(p, t)
}

// Element offset of column col of row r of a prefill tile in the query or the output (strides in
// elements): query token q_start + r / GROUP of the request, head kv_head * GROUP + r % GROUP.
__device__ __forceinline__ long long ga_prefill_row_offset(int r, int col, int q_start, int kv_head,
                                                           long long token_stride,
                                                           long long head_stride) {
  const int tok = r / GROUP;
  const int head = kv_head * GROUP + (r - tok * GROUP);
  return static_cast<long long>(q_start + tok) * token_stride +
         static_cast<long long>(head) * head_stride + col;
}

#ifdef GA_CHECK_BOUNDS
__device__ __forceinline__ int ga_prefill_checked_block(const PrefillParams& p,
                                                        const int* block_row, int key);
#endif
// Element offset of key `key` of a prefill tile's request in the key (or value) data, before the
// head and column offsets: through the block table row block_row (checked in checked mode), or
// GA_DENSE_KV, the dense row kv_row0 + key.
__device__ __forceinline__ long long ga_prefill_key_offset(const PrefillParams& p,
                                                           const int* block_row, int kv_row0,
                                                           int key) {
#if GA_DENSE_KV
  return static_cast<long long>(kv_row0 + key) * p.kv.cache_token_stride;
#else
#ifdef GA_CHECK_BOUNDS
  const int blk = ga_prefill_checked_block(p, block_row, key);
#else
  const int blk = __ldg(block_row + key / BLOCK_SIZE);
#endif
  return static_cast<long long>(blk) * p.kv.cache_block_stride +
         static_cast<long long>(key % BLOCK_SIZE) * p.kv.cache_token_stride;
#endif
}

#ifdef GA_CHECK_BOUNDS
// Checked mode: records the first out-of-range block id or slot (GaBoundsReport, params.h); the
// later ones are dropped.
__device__ __noinline__ void ga_report_bounds(GaBoundsReport* r, int kind, int request,
                                              int position, long long value) {
  if (atomicCAS(&r->found, 0, 1) == 0) {
    r->kind = kind;
    r->request = request;
    r->position = position;
    r->value = value;
    __threadfence();
  }
}
// A block id read from a block table: itself when inside the cache, else reported and 0.
__device__ __forceinline__ int ga_checked_block(int block, long long num_blocks, GaBoundsReport* r,
                                                int request, int position) {
  if (block >= 0 && block < num_blocks) return block;
  ga_report_bounds(r, 1, request, position, block);
  return 0;
}
// The block of the prefill key at `key` in the block-table row block_row, checked.
__device__ __forceinline__ int ga_prefill_checked_block(const PrefillParams& p,
                                                        const int* block_row, int key) {
  const int block = __ldg(block_row + key / BLOCK_SIZE);
  if (block >= 0 && block < p.kv.num_blocks) return block;
  const long long request =
      p.kv.block_table_stride > 0 ? (block_row - p.kv.block_table) / p.kv.block_table_stride : 0;
  ga_report_bounds(p.bounds, 1, static_cast<int>(request), key, block);
  return 0;
}
#endif
