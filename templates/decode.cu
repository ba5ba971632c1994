// SPDX-License-Identifier: Apache-2.0
// Split-KV paged decode (flash-decoding) on tensor cores.
//
// A thread block handles one (split, KV head [, chunk of 16 query heads], request). Every query
// head of the KV group is processed at once, so each KV byte is read from memory once. The
// block's warps take interleaved 16-token tiles of the split; each warp streams its tiles through
// its own shared-memory ring with cp.async (16-byte copies, up to p.stages tiles in flight) and
// keeps its own online softmax state. Scores are computed transposed, S^T = K Q^T, so that the 16
// tokens of a tile are the MMA's M and up to 8 query heads its N: a GQA group of <= 8 wastes no N.
// Likewise O^T += V^T P^T, with P^T moved into B-operand layout by movmatrix.
//
// The reduction dimension of K Q^T is the head dimension, which may be permuted freely as long
// as K and Q agree: thread (g, t) of a warp (g = lane / 4, t = lane % 4) takes whole 16-byte
// chunks of a K row and of a Q row, chunk c(i, t) = 8 * (i / 2) + 2 * t + i % 2, and feeds their
// consecutive elements to its MMA k slots. V^T's rows (head dimensions) are permuted the same
// way: thread g reads chunk g + 8 v of tokens 2t, 2t+1, 2t+8, 2t+9, so each thread ends holding
// whole output chunks. Shared-memory rows are swizzled at 16-byte granularity (chunk ^ row % 8),
// which makes both access patterns conflict-free.
//
// Multi-token decode (specs "_mt", speculative decoding): a request has 1..max_query_len query
// tokens at positions seq_len - q_len .. seq_len - 1, causal among themselves. The N columns of
// S^T are then (query token, head) pairs, token-major like the prefill kernels' rows, 16 per
// block, so the tokens of a request share every KV tile the block reads; each column has its own
// causal (and window) limit, and a column that sees no key of a split is weighted 0 when the
// splits combine. Without "_mt" every column is a head of the one query token, as before.
//
// Legacy caches (KV_LAYOUT 2, vLLM's paged_attention_v1/v2 caches): the key cache is
// [blocks, kv_heads, head_size / x, block_size, x] with x = 16 bytes, so chunk c of a tile's 16
// tokens is 256 contiguous bytes; it lands in the same swizzled [token][chunk] K tile. Another x
// (spec key_x, GA_KEY_X elements) only moves the chunks: a 32-byte x holds two chunks of a token,
// an 8-byte x (fp8, x = 8) half of one, copied as two 8-byte halves BLOCK_SIZE * 8 bytes apart.
// The value
// cache is [blocks, kv_heads, head_size, block_size]: a head dimension's tokens are contiguous, so
// V lands transposed, a V^T tile [dimension][16 tokens] of 16-byte units (2 per dimension for
// 16-bit caches: tokens 0-7 and 8-15; 1 for fp8), unit u stored at u ^ ((u / 16) % 8), and the MMA
// A operand comes straight from ldmatrix (rows are dimensions, the matrix columns tokens), in the
// same dimension permutation as the flash path, so the epilogue and the combine are unchanged.
// Block size 8 (vLLM's default, 16-bit caches): a tile's tokens 0..7 and 8..15 lie in two blocks,
// so K rows and V units take their block by token (a V unit is 8 tokens, one block).
// With fp8 a 32-bit ldmatrix word holds 4 consecutive tokens 4t..4t+3; the K tile's rows are then
// permuted (row r holds token ga_tok_of_row(r)) so that these are exactly the MMA k slots 2t,
// 2t + 1, 2t + 8, 2t + 9 of thread t. Tokens outside [lo, seq_len) read no K (zero-fill); a V
// unit is read when any of its tokens is inside, and its outside tokens are zeroed in shared
// memory before use (a never-written slot may hold NaN, and 0 * NaN is NaN). No fused cache write.
//
// Block-sparse decode (specs "_bsp", GaBlockSparse): every column masks the key blocks its head
// does not see, and a tile that no column of the block sees (a warp vote; a tile lies in one
// sparse block) is neither copied nor computed: its cp.async group stays empty. The splits still
// divide all tiles between them (a skipped tile costs a vote), so a split may see no key of a
// column; as in multi-token decode it then carries weight 0 into the combine.
//
// Softmax runs in the log2 domain with exp2; accumulation is fp32; P is rounded to the MMA's
// 16-bit type. fp8 KV is widened to fp16 exactly (e5m2 by a byte permutation, e4m3 by the
// hardware conversion from sm_89 on, by bit moves before, which land it scaled by 2^-8, folded
// into the score and output scales) and multiplied in fp16 whatever the model's type;
// a bf16 query is converted once (see MMA_BF16).

constexpr int KV_BYTES = KV_FP8 ? 1 : 2;
constexpr int NW = GA_DECODE_WARPS;
constexpr int TILE = GA_DECODE_TILE;
constexpr int CE = 16 / KV_BYTES;  // KV elements per 16-byte chunk
// KV head pairs (ga_decode_row_heads): the block covers KV heads 2y and 2y + 1, whose rows of a
// token are one tile row of 2 x HEAD_SIZE elements; each query head's Q^T is zero outside its own
// half, and its output is its half of O^T. (An enumerator: a namespace-scope variable would
// enter every kernel's constant bank.)
enum : int {
  PG = ga_decode_row_heads(HEAD_SIZE, KV_BYTES, GROUP, KV_LAYOUT,
#ifdef GA_MULTI_TOKEN
                           true,
#else
                           false,
#endif
                           GA_BLOCK_SPARSE != 0)
};
constexpr int ROW_BYTES = ga_decode_row_bytes(HEAD_SIZE * PG, KV_BYTES);
constexpr int CHUNKS_PAD = ROW_BYTES / 16;  // multiple of 8
constexpr int DIMS_PAD = CHUNKS_PAD * CE;   // padded head dimension
constexpr int REAL_BYTES = HEAD_SIZE * PG * KV_BYTES;
constexpr int CP_BYTES = REAL_BYTES % 16 == 0 ? 16 : 8;  // cp.async unit
constexpr int UNITS = REAL_BYTES / CP_BYTES;             // cp.async units per row
constexpr int FULL_CHUNKS = REAL_BYTES / 16;             // chunks wholly inside the row
constexpr int LIVE_CHUNKS = (REAL_BYTES + 15) / 16;      // chunks holding any element
constexpr int MAX_STAGES = ga_decode_max_stages(HEAD_SIZE * PG, KV_BYTES);
constexpr int TILE_BYTES = TILE * ROW_BYTES;  // K (or V) of one tile
constexpr int STAGE_BYTES = 2 * TILE_BYTES;
#ifdef GA_MULTI_TOKEN
constexpr bool MT = true;
#else
constexpr bool MT = false;
#endif
constexpr bool BSP = GA_BLOCK_SPARSE != 0;
// A split may see no key of a column (multi-token, block-sparse): weight 0 when combining.
constexpr bool EMPTY_SPLITS = MT || BSP;
// Query columns per block: heads of the one token, or (multi-token) up to 16 (token, head) pairs.
constexpr int HPB =
    MT || GROUP * PG >= GA_DECODE_HEADS_PER_BLOCK ? GA_DECODE_HEADS_PER_BLOCK : GROUP * PG;
constexpr int NT = (HPB + 7) / 8;  // head n-tiles of 8
constexpr int HEAD_CHUNKS = ga_decode_head_chunks(GROUP * PG);
constexpr int KGROUPS = CHUNKS_PAD / 4;  // K chunks per thread per token
constexpr int VGROUPS = CHUNKS_PAD / 8;  // V chunks per thread per token
constexpr int KW = CE / 2;               // 16-bit pairs per chunk
constexpr int KSUB = CE / 4;             // MMA k steps per chunk
constexpr int MSUB = CE / 2;             // MMA m tiles per V chunk
constexpr int LOAD_ITERS = (TILE * UNITS + 31) / 32;
// Whole token rows per warp instruction and a power-of-two count of tokens per lane: each lane
// keeps one unit of the row and walks LOAD_ITERS consecutive tokens (see issue()).
constexpr bool FAST_LOAD =
    32 % UNITS == 0 && TILE * UNITS % 32 == 0 && (LOAD_ITERS & (LOAD_ITERS - 1)) == 0;
constexpr bool LEGACY = KV_LAYOUT == 2;
static_assert(PG == 1 || (FAST_LOAD && !LEGACY && HPB == GROUP * PG && UNITS % 2 == 0),
              "KV head pairs: flash single-token kernels of whole 16-byte rows");
// The legacy key cache's x in bytes: GA_KEY_X elements where the spec names it, else 16. (A
// function: a namespace-scope constant is a device global, which would change every kernel's
// resource table.)
constexpr int ga_key_x_bytes() {
#ifdef GA_KEY_X
  return GA_KEY_X * KV_BYTES;
#else
  return 16;
#endif
}
static_assert(ga_key_x_bytes() == 8 || ga_key_x_bytes() == 16 || ga_key_x_bytes() == 32,
              "x: 8, 16, 32 bytes");
constexpr int VT_UNITS = KV_BYTES;        // legacy V^T: 16-byte units per dimension of a tile
constexpr int VT_TOKENS = 16 / KV_BYTES;  // legacy V^T: tokens per unit
static_assert(!LEGACY || REAL_BYTES % 16 == 0, "legacy caches hold whole 16-byte chunks");
#define GA_NEG_INF (-__int_as_float(0x7f800000))
// e4m3 -> fp16: the hardware conversion (cvt.rn.f16x2.e4m3x2, sm_89 and newer) gives the true
// value; the bit moves before sm_89 give the true value times 2^-8.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define GA_E4M3_CVT 1
#else
#define GA_E4M3_CVT 0
#endif
constexpr float KV_WIDEN_SCALE = KV_FP8 == 1 && !GA_E4M3_CVT ? 256.0f : 1.0f;

__device__ __forceinline__ unsigned ga_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ga_cp_async(unsigned dst, const void* src, bool valid) {
  const int n = valid ? CP_BYTES : 0;  // 0: zero-fill without reading
  if (CP_BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(n));
  }
}
// An 8-byte cp.async (the halves of a 16-byte chunk in a legacy key cache with 8-byte x).
__device__ __forceinline__ void ga_cp_async8(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 8 : 0));
}
__device__ __forceinline__ void ga_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void ga_cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Waits until at most stages - 1 commit groups are pending (stages is warp-uniform).
template <int N = MAX_STAGES>
__device__ __forceinline__ void ga_cp_wait_stages(int stages) {
  if constexpr (N <= 2) {
    ga_cp_wait<1>();
  } else {
    if (stages >= N) {
      ga_cp_wait<N - 1>();
    } else {
      ga_cp_wait_stages<N - 1>(stages);
    }
  }
}

__device__ __forceinline__ ga_u32 ga_prmt(ga_u32 a, ga_u32 b, ga_u32 sel) {
  ga_u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// The MMAs' 16-bit type: the model's, except that fp8 caches always multiply in fp16. Their
// bytes widen to fp16 exactly by bit moves (a bf16 model would need a trip through fp32 for
// every K and V element); the query converts to fp16 once, pre-multiplied by the softmax scale
// (exact for |q| * scale in fp16's normal range, below 65504), and the probabilities in [0, 1]
// round to fp16 more finely than to bf16.
constexpr bool MMA_BF16 = IS_BF16 && KV_FP8 == 0;
constexpr bool Q_TO_F16 = IS_BF16 && !MMA_BF16;
// fp8 queries (spec "_qe4m3", always with an fp8 cache): where the machine code has an fp8
// mma.sync (sm_89, sm_120) S^T = K Q^T runs on it (m16n8k32, K in the cache's fp8 type, Q in
// e4m3), so the keys are never widened; the raw scores carry q_descale * k_descale, folded into
// the score scale. sm_90 and sm_100 have no such instruction: ptxas lowers it to conversions of
// both operands and two fp16 MMAs into zeroed accumulators plus adds, on every tile (the sm_90
// e4m3 decode loop: 160 F2FP conversions and 40 FADDs a tile against 128 and 8). There the
// query is widened once, exactly (cvt, no scale), and the keys take the e4m3-cache path of a
// 16-bit query (QF8_WIDE). Before sm_89 (no fp8 conversion) the query is widened to fp16 times
// the softmax scale on load, and the 16-bit path runs.
// O^T += V^T P^T stays on the fp16 MMA with P rounded to fp16 (see docs/fp8-queries.md: a
// 16-token tile is half an fp8 MMA's k = 32, and V's fp8 -> fp16 widening is exact).
// (Macros, not constexpr variables: a namespace-scope constant is a global of the module, and
// a new one would change the resource usage of every existing spec.)
#ifdef GA_Q_E4M3
#define QF8 true
#else
#define QF8 false
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && \
    !(__CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200)
#define GA_FP8_MMA_SYNC 1
#else
#define GA_FP8_MMA_SYNC 0
#endif
#define QK_FP8 (QF8 && GA_FP8_MMA_SYNC)
#define QF8_WIDE (QF8 && GA_E4M3_CVT && !GA_FP8_MMA_SYNC)

// D += A * B, m16n8k16, fp32 accumulate, A/B in the MMA type.
__device__ __forceinline__ void ga_mma(float (&d)[4], ga_u32 a0, ga_u32 a1, ga_u32 a2, ga_u32 a3,
                                       ga_u32 b0, ga_u32 b1) {
  if (MMA_BF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// D += A * B, m16n8k32, fp32 accumulate, A in the cache's fp8 type, B e4m3 (QK_FP8 only).
// Thread (g, t): a0 / a2 row g, k 4t..4t+3 / 16+4t..; a1 / a3 row g + 8; b0 / b1 column g, k
// 4t..4t+3 / 16+4t..: one 32-bit word of 4 consecutive fp8 elements each.
__device__ __forceinline__ void ga_mma_fp8(float (&d)[4], ga_u32 a0, ga_u32 a1, ga_u32 a2,
                                           ga_u32 a3, ga_u32 b0, ga_u32 b1) {
#if GA_E4M3_CVT
  if (KV_FP8 == 2) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#endif
}

__device__ __forceinline__ ga_u32 ga_movmatrix_trans(ga_u32 x) {
  ga_u32 y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Halves of a register in the MMA type -> float; two floats -> a register in the MMA type.
__device__ __forceinline__ float ga_mma_lo_f32(ga_u32 x) {
  const ga_u16 h = static_cast<ga_u16>(x & 0xffffu);
  return MMA_BF16 ? ga_bf16_to_f32(h) : ga_f16_to_f32(h);
}
__device__ __forceinline__ float ga_mma_hi_f32(ga_u32 x) {
  const ga_u16 h = static_cast<ga_u16>(x >> 16);
  return MMA_BF16 ? ga_bf16_to_f32(h) : ga_f16_to_f32(h);
}
__device__ __forceinline__ ga_u32 ga_mma_pack2(float lo, float hi) {
  return ga_pack2_as<MMA_BF16>(lo, hi);
}

// Four fp8 bytes e0..e3 -> {e0, e1}, {e2, e3} as fp16 pairs (the MMA type of fp8 caches), exact.
// This runs for every KV element, so it is as short as the arch allows: e5m2 is the high byte of
// an fp16, one byte permutation a pair; e4m3 is one hardware conversion a pair on sm_89 and newer
// (the sm_90 SASS of the e4m3 decode loop: 577 instructions a 16-token tile with bit moves, 320
// with the conversion; 64 x 8192 on an H200 4% faster), else bit moves (e4m3 bits into an fp16's
// exponent and mantissa, which lands the value times 2^-8: KV_WIDEN_SCALE).
__device__ __forceinline__ void ga_fp8x4_widen(ga_u32 w, ga_u32& lo, ga_u32& hi) {
#if GA_E4M3_CVT
  if (KV_FP8 == 1) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
        " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
    return;
  }
#endif
  // Each byte as the high byte of an fp16: bytes 0, e0, 0, e1 and 0, e2, 0, e3.
  const ga_u32 a = ga_prmt(w, 0u, 0x1404u), b = ga_prmt(w, 0u, 0x3424u);
  if (KV_FP8 == 2) {  // e5m2 is exactly that
    lo = a;
    hi = b;
    return;
  }
  lo = (a & 0x80008000u) | ((a & 0x7f007f00u) >> 1);
  hi = (b & 0x80008000u) | ((b & 0x7f007f00u) >> 1);
}
// Four e4m3 query bytes e0..e3 -> {e0, e1}, {e2, e3} as fp16 pairs, exact (QF8_WIDE only).
__device__ __forceinline__ void ga_e4m3x4_to_f16(ga_u32 w, ga_u32& lo, ga_u32& hi) {
#if GA_E4M3_CVT
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
      " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
#else
  lo = hi = w;  // (never used: QF8_WIDE needs the conversion)
#endif
}
// Two bf16 query elements -> fp16, times q_scale.
__device__ __forceinline__ ga_u32 ga_bf16x2_to_f16x2(ga_u32 x, float q_scale) {
  return ga_mma_pack2(ga_bf16_to_f32(static_cast<ga_u16>(x & 0xffffu)) * q_scale,
                      ga_bf16_to_f32(static_cast<ga_u16>(x >> 16)) * q_scale);
}

// One 16-byte shared chunk of a K row -> KW 16-bit pairs of consecutive elements.
__device__ __forceinline__ void ga_k_chunk(const uint4& c, ga_u32 (&out)[KW]) {
  const ga_u32 w[4] = {c.x, c.y, c.z, c.w};
  if (KV_FP8 == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = w[i];
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) ga_fp8x4_widen(w[i], out[2 * i], out[2 * i + 1]);
  }
}

// Chunks of V rows a and b (consecutive tokens) -> for each element e of the chunk, the pair
// {a[e], b[e]} in the MMA type (one MMA A register).
__device__ __forceinline__ void ga_v_pairs(const uint4& ca, const uint4& cb, ga_u32 (&out)[CE]) {
  const ga_u32 wa[4] = {ca.x, ca.y, ca.z, ca.w};
  const ga_u32 wb[4] = {cb.x, cb.y, cb.z, cb.w};
  if (KV_FP8 == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = ga_prmt(wa[i], wb[i], 0x5410u);
      out[2 * i + 1] = ga_prmt(wa[i], wb[i], 0x7632u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ga_fp8x4_widen(ga_prmt(wa[i], wb[i], 0x5140u), out[4 * i], out[4 * i + 1]);
      ga_fp8x4_widen(ga_prmt(wa[i], wb[i], 0x7362u), out[4 * i + 2], out[4 * i + 3]);
    }
  }
}

// The token (0..15 within its tile) in K tile row r: r itself, except for legacy fp8 caches, whose
// ldmatrix words of V^T hold tokens 4t..4t+3 for the k slots 2t, 2t + 1, 2t + 8, 2t + 9.
__device__ __forceinline__ int ga_tok_of_row(int r) {
  if (LEGACY && KV_FP8 != 0) return 4 * ((r & 7) >> 1) + 2 * (r >> 3) + (r & 1);
  return r;
}
// The byte offset of K tile row `row`'s 16-byte chunk c. Flash: rows of ROW_BYTES, chunks XOR
// the row mod 8. Legacy: chunk-major as in the cache (16 rows a chunk), so that each cp.async
// phase of 8 lanes fills 128 contiguous bytes of shared memory from 128 contiguous bytes of the
// cache (a row-major tile took one request per lane there: 1.5x the L2 sectors, H200 ncu); rows
// XOR 2 * ((c / 2) mod 4) keep the MMA's reads (threads g and chunks 2t + const) conflict-free.
__device__ __forceinline__ int ga_k_off(int row, int c) {
  if (LEGACY) return (c * TILE + (row ^ (((c >> 1) & 3) << 1))) << 4;
  return row * ROW_BYTES + ((c ^ (row & 7)) << 4);
}
// Legacy V^T tile: the stored place of 16-byte unit u (dimension u / VT_UNITS, tokens
// (u % VT_UNITS) * VT_TOKENS ..): XOR with the dimension's output chunk mod 8, which spreads the
// 8 rows of every ldmatrix phase (dimensions CE apart) and keeps each cp.async phase's 8
// consecutive units in their own 128 bytes.
__device__ __forceinline__ int ga_vt_unit(int u) { return u ^ ((u >> 4) & 7); }
__device__ __forceinline__ void ga_ldmatrix_x4(ga_u32 (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ int ga_k_chunk_index(int i, int t) {
  return 8 * (i >> 1) + 2 * t + (i & 1);
}

// [policy: fp8 pair epilogue] (GA_DECODE_FP8_PAIR 8, 16, 32: only the specs GA_FP8_TILE names
// call it; [policy: 16-bit pair tile] GA_DECODE_PAIR16 1, 2, 4: GA_PAIR16_TILE's) Stage 5 of an
// e4m3 (or 16-bit) KV-head-pair tile: S^T = K Q^T, in two accumulator chains when TWO (chunk groups
// 0 .. KGROUPS / 2 - 1 hold the first KV head's dimensions: each chain holds exact zeros in the
// other head's columns, so their sum is the one chain's S^T), then the first V_EARLY V chunk groups
// read and widened as stage 7 would (its lo01, lo89 of group v in v_early[v]).
template <int V_EARLY, bool TWO, int VE>
__device__ __forceinline__ void ga_pair_tile_qk(const unsigned char* ks, const unsigned char* vs,
                                                int g, int t, const ga_u32 (&qf)[NT][KGROUPS][KW],
                                                float (&s)[NT][4], ga_u32 (&v_early)[VE][2][CE]) {
  float s2[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) s2[nt][0] = s2[nt][1] = s2[nt][2] = s2[nt][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < KGROUPS; ++i) {
    const int sw = (ga_k_chunk_index(i, t) ^ g) << 4;
    ga_u32 ka[KW], kb[KW];
    ga_k_chunk(*reinterpret_cast<const uint4*>(ks + g * ROW_BYTES + sw), ka);
    ga_k_chunk(*reinterpret_cast<const uint4*>(ks + (g + 8) * ROW_BYTES + sw), kb);
#pragma unroll
    for (int sub = 0; sub < KSUB; ++sub)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        ga_mma(TWO && i >= KGROUPS / 2 ? s2[nt] : s[nt], ka[2 * sub], kb[2 * sub], ka[2 * sub + 1],
               kb[2 * sub + 1], qf[nt][i][2 * sub], qf[nt][i][2 * sub + 1]);
  }
  if (TWO) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] += s2[nt][e];
  }
#pragma unroll
  for (int v = 0; v < V_EARLY; ++v) {
    const int cv = g + 8 * v;
    const int sw0 = (cv ^ (2 * t)) << 4, sw1 = (cv ^ (2 * t + 1)) << 4;
    const uint4 v0 = *reinterpret_cast<const uint4*>(vs + (2 * t) * ROW_BYTES + sw0);
    const uint4 v1 = *reinterpret_cast<const uint4*>(vs + (2 * t + 1) * ROW_BYTES + sw1);
    const uint4 v8 = *reinterpret_cast<const uint4*>(vs + (2 * t + 8) * ROW_BYTES + sw0);
    const uint4 v9 = *reinterpret_cast<const uint4*>(vs + (2 * t + 9) * ROW_BYTES + sw1);
    ga_v_pairs(v0, v1, v_early[v][0]);
    ga_v_pairs(v8, v9, v_early[v][1]);
  }
}

// Thread-block clusters (sm_90): the splits of one request and head group run as one cluster
// and combine through distributed shared memory.
__device__ __forceinline__ void ga_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
#endif
}
// The pushed split combine's pieces (GA_DECODE_CLUSTER_PUSH; sm_90, nothing before): the cluster
// barrier's halves without memory ordering (its release form, ga_cluster_sync, is a
// MEMBAR.ALL.GPU in the machine code, the cost of a global fence); an mbarrier's initialization
// with the bytes it expects, its wait, and 16- and 4-byte stores into another block's shared
// memory that count their bytes on that block's mbarrier (st.async: no fence on either side).
__device__ __forceinline__ void ga_cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void ga_cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void ga_mbar_init_expect(unsigned mbar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], 1;\n"
      "fence.mbarrier_init.release.cluster;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mbar),
      "r"(bytes)
      : "memory");
#endif
}
__device__ __forceinline__ void ga_mbar_wait0(unsigned mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred q;\n mbarrier.try_wait.parity.shared::cta.b64 q, [%1], 0;\n"
        " selp.u32 %0, 1, 0, q;\n}\n"
        : "=r"(done)
        : "r"(mbar)
        : "memory");
#endif
}
__device__ __forceinline__ void ga_st_async4(unsigned dst, const float4& v, unsigned mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];" ::"r"(dst),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(mbar)
      : "memory");
#endif
}
__device__ __forceinline__ void ga_st_async1(unsigned dst, float v, unsigned mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(dst),
      "r"(__float_as_uint(v)), "r"(mbar)
      : "memory");
#endif
}
// The receive area of the pushed combine (the mbarrier, then the slots): the last
// ga_decode_cluster_recv_bytes of the block's dynamic shared memory, which starts at smem.
__device__ __forceinline__ unsigned ga_cluster_recv(const void* smem) {
  unsigned dyn = 0;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  return ga_smem_addr(smem) + dyn - static_cast<unsigned>(ga_decode_cluster_recv_bytes(HEAD_SIZE));
}
// The address of shared-memory address `a` of this block in block `rank` of this cluster.
__device__ __forceinline__ unsigned ga_cluster_addr_of(unsigned a, unsigned rank) {
  unsigned r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
#endif
  return r;
}
// The address of shared variable `p` in block `rank` of this cluster.
__device__ __forceinline__ unsigned ga_cluster_addr(const void* p, unsigned rank) {
  return ga_cluster_addr_of(ga_smem_addr(p), rank);
}
__device__ __forceinline__ float ga_cluster_ld(unsigned addr) {
  float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
#endif
  return v;
}
__device__ __forceinline__ float4 ga_cluster_ld4(unsigned addr) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
#endif
  return v;
}
// The combination of n split outputs, out = sum_s 2^(lse_s - LSE) o_s with
// LSE = log2(sum_s 2^lse_s (+ 2^sink_log2 with HAS_SINKS)): load(s, lse, o) gives split s's
// log2-sum-exp and four of its normalized outputs. The loads go out BATCH splits at a time, all
// issued before the first is used (one round trip to L2 for up to BATCH splits; the loop before
// issued four at a time after the first split's, five round trips for 16 splits), then one
// rescale per batch: 16 for the global-memory combine (32-layer B=1 step on an H200: 160.5 us
// with 8 against 174.6 with 4; 16 with the one-atomic count below: 144.3 against 159.8, same
// registers); the pulled cluster combine keeps 4, which leaves the kernel's registers as they
// were (with 8 in both, ptxas capped several specs at 128 registers and spilled); the pushed one
// reads its items from its own shared memory, 16 at a time.
// Each split saw at least one key, so every lse is finite.
// (EMPTY_SPLITS: a split that saw no key of a column has lse -inf and output 0, weight 0.)
// GA_WRITE_LSE: lse gets the combined log-sum-exp, natural log (otherwise it is left alone).
template <int BATCH, typename Load>
__device__ __forceinline__ float4 ga_combine_splits(int n, float sink_log2, Load load, float& lse) {
  float mx = GA_NEG_INF, total = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = 0; s0 < n; s0 += BATCH) {
    float ls[BATCH];
    float4 x[BATCH];
#pragma unroll
    for (int k = 0; k < BATCH; ++k) {
      ls[k] = GA_NEG_INF;
      x[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (s0 + k < n) load(s0 + k, ls[k], x[k]);
    }
    float m_new = mx;
#pragma unroll
    for (int k = 0; k < BATCH; ++k) m_new = fmaxf(m_new, ls[k]);
    // The first batch always holds a finite lse without EMPTY_SPLITS; with them every split
    // so far may be empty (m_new -inf): weights 0 either way.
    const float m_use = m_new == GA_NEG_INF ? 0.0f : m_new;
    const float a = ga_exp2(mx - m_use);  // 0 while mx is -inf
    total *= a;
    acc.x *= a;
    acc.y *= a;
    acc.z *= a;
    acc.w *= a;
#pragma unroll
    for (int k = 0; k < BATCH; ++k) {
      const float w = ga_exp2(ls[k] - m_use);  // 0 for a padded or empty split
      total += w;
      acc.x += w * x[k].x;
      acc.y += w * x[k].y;
      acc.z += w * x[k].z;
      acc.w += w * x[k].w;
    }
    mx = m_new;
  }
  const float r = HAS_SINKS ? ga_sink_normalizer(mx, total, sink_log2) : 1.0f / total;
#ifdef GA_WRITE_LSE
  lse = ga_lse(mx, total, sink_log2);
#endif
  return make_float4(acc.x * r, acc.y * r, acc.z * r, acc.w * r);
}

// Query head `head` of request `req` in the output.
__device__ __forceinline__ ga_u16* ga_output_row(const DecodeParams& p, int req, int head) {
  return static_cast<ga_u16*>(p.output) + req * p.output_token_stride + head * p.output_head_stride;
}
#ifdef GA_WRITE_LSE
// Softmax LSE of query head `head` of query row `token` (spec axis softmax_lse).
__device__ __forceinline__ void ga_store_lse(const DecodeParams& p, int token, int head, float v) {
  p.softmax_lse[head * p.lse_head_stride + token] = v;
}
#endif
// Four output elements, rounded to the model's type.
__device__ __forceinline__ void ga_store4(ga_u16* dst, const float4& v) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(ga_pack2(v.x, v.y), ga_pack2(v.z, v.w));
}

// [policy: logits transform] A raw score -> its logit in the log2 domain: times qk_scale (the
// softmax scale with the K scale and fp8 widening folded in, and log2(e)), or with a soft cap
// cap * tanh(score / cap) in log2 units (qk_scale = scale / cap, cap_log2 = cap * log2(e)).
// ALiBi then adds ga_alibi_log2 (common.cuh) where the key's position is known.
__device__ __forceinline__ float ga_logit(float raw, float qk_scale, float cap_log2) {
  return HAS_SOFT_CAP ? ga_soft_cap_log2(raw, qk_scale, cap_log2) : raw * qk_scale;
}

#ifdef GA_DECODE_TIMING
// [experiment: block timing] Only in the experiment build (GRAPHATTN_NVRTC_EXTRA_OPTIONS=
// -DGA_DECODE_TIMING=1; docs/decode-block-timing-h100-2026-11-27-s8.txt); without the macro
// none of this exists and the GA_TIMING_* marks below expand to nothing. Block b (linear: x +
// gridDim.x * (y + gridDim.y * z), the first GA_TIMING_BLOCKS) writes GA_TIMING_WORDS 64-bit
// words at ga_decode_timing[b * GA_TIMING_WORDS]: 0, 1 %globaltimer (ns) and clock64 at entry
// (thread 0); 2 %smid; 3 the block's tiles; 4 KV bytes a tile (K and V rows); 5 seq_len; and
// per warp w, from word 8 + 8 w, (%globaltimer, clock64) pairs: after the prologue (seq_lens and
// the first block-table entries loaded, the first copies issued), when its first tile has
// arrived, after its last tile's compute, after its share of the block's output. A word nobody
// wrote stays as the host set it.
// The host finds the array with cuModuleGetGlobal (graphattn-bench --block-timing).
enum : int { GA_TIMING_WORDS = 64, GA_TIMING_BLOCKS = 8192 };
static_assert(8 + 8 * GA_DECODE_WARPS <= GA_TIMING_WORDS, "timing words per block");
extern "C" {
__device__ unsigned long long ga_decode_timing[GA_TIMING_BLOCKS * GA_TIMING_WORDS];
}
__device__ __forceinline__ unsigned long long* ga_timing_row() {
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  return b < GA_TIMING_BLOCKS ? ga_decode_timing + b * GA_TIMING_WORDS : nullptr;
}
// Stores (%globaltimer, clock64) at words w, w + 1 of this block's row.
__device__ __forceinline__ void ga_timing_stamp(int w) {
  unsigned long long gt;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt)::"memory");
  const unsigned long long clk = clock64();
  unsigned long long* row = ga_timing_row();
  if (row) {
    row[w] = gt;
    row[w + 1] = clk;
  }
}
// Lane 0 of each warp: event k (0 prologue, 1 first tile, 2 last tile, 3 output).
#define GA_TIMING_WARP(k) \
  if ((threadIdx.x & 31) == 0) ga_timing_stamp(8 + 8 * (threadIdx.x >> 5) + 2 * (k))
// Thread 0, block events after the wait (words 40..49, session 11): 40 the wait returned (early
// prologue; without it, after the first copies), 42 the query's first word arrived (thread 0
// stores it to word 63 first, so the stamp waits for it), 44 the warps' states are in shared
// memory (stage 8), 46 the split counter's atomic returned, 48 the last block's combine issued
// its output stores. Cluster launches (session 12): 46 the block's mbarrier completed (pushed:
// every split's items arrived; pulled: the cluster barrier returned), 48 the block's combine
// issued its output stores.
#define GA_TIMING_BLOCK(w) \
  if (threadIdx.x == 0) ga_timing_stamp(w)
#define GA_TIMING_ENTRY() GA_TIMING_BLOCK(0)  // the block's entry, words 0 and 1
#else
#define GA_TIMING_WARP(k)
#define GA_TIMING_ENTRY()
#define GA_TIMING_BLOCK(w)
#endif

// [experiment: early trigger] GA_DECODE_EARLY_TRIGGER=1 (GRAPHATTN_NVRTC_EXTRA_OPTIONS=
// -DGA_DECODE_EARLY_TRIGGER=1, off by default): a launch with the early prologue lets the next
// kernel be scheduled at its entry instead of after its wait, so that the next layer's blocks
// (their metadata loads and first tiles) start under this layer's whole body rather than only
// under what follows its wait. The next kernel still waits for this one to complete before it
// reads anything this one writes (griddepcontrol.wait waits for completion, not the trigger).
#ifndef GA_DECODE_EARLY_TRIGGER
#define GA_DECODE_EARLY_TRIGGER 0
#endif
// The split combine of a cluster launch: pushed (GA_DECODE_CLUSTER_PUSH 1, sm_90's default; see
// [policy: pushed cluster combine]) or pulled (0: each block's output in its own shared memory,
// a release cluster barrier, then every block loads its items from all of them). Before sm_90 no
// launch is a cluster launch; the pulled code stays there so that its machine code is unchanged,
// and -DGA_DECODE_CLUSTER_PUSH=0 (GRAPHATTN_NVRTC_EXTRA_OPTIONS) measures it on sm_90.
// The pushed combine is compiled for the measured kernels only, 16-bit KV caches at head size 128
// in the flash layouts, single-token, not block-sparse (CLUSTER_PUSH); the other specs keep the
// pulled code and its machine code, and their launches keep the counter by default
// (runtime/decode.cpp decode_cluster_push must say the same).
#ifndef GA_DECODE_CLUSTER_PUSH
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GA_DECODE_CLUSTER_PUSH 1
#else
#define GA_DECODE_CLUSTER_PUSH 0
#endif
#endif
// [policy: fp8 pair epilogue] The fp8 KV-head-pair decodes' epilogue and prologue (issue 25),
// bits of GA_DECODE_FP8_PAIR (GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_DECODE_FP8_PAIR=N, default 471):
// 1 one split: a thread merges 8 elements of a head and writes them in one 16-byte store;
// 2 an e4m3 query's loads go out beside seq_lens (without the early prologue);
// 4 the warps' O^T rows in shared memory rotated by 4 (h / 2) elements, so that neither their
//   stores nor the merge's loads meet in a bank (rows of 256 fp32: every row starts at bank 0).
// The e4m3 pairs' tile with a 16-bit query on the archs that widen e4m3 with the hardware
// conversion but have no fp8 mma.sync (sm_90, sm_100: GA_FP8_TILE), for a shorter chain of
// dependent instructions a tile (what the launch's tail waits on when few blocks still stream;
// ga_pair_tile_qk; docs/fp8-decode-h100-2026-11-28-s15.txt: 16 is the default, 8 and 32 measured
// no better; the e4m3-query specs only with 64, docs/fp8-decode-h100-2026-11-28-s16.txt):
// 8 the tile's V chunks are read from shared memory and widened before the softmax, in the
//   same basic block as K Q^T and the softmax, so that their loads and conversions may fill the
//   latency of the QK chain and of the row-max shuffles instead of running after the vote;
// 16 S^T = K Q^T in two accumulator chains, one a KV head of the pair (8 + 8 dependent MMAs
//   instead of 16), added at the end (each holds exact zeros in the other head's columns);
// 32 (without 8) only the first V chunk group is widened before the softmax: its MMAs can start
//   right after the vote while the second group's conversions overlap them.
// 64 the e4m3-query pairs (QF8_WIDE) take the e4m3 tile too (bits 8, 16, 32), and their kernel
//   declares 2 blocks a multiprocessor (GA_DECODE_MIN_BLOCKS): without a minimum ptxas aims at 3
//   blocks of 128 threads (168 registers) and, with the second chain beside the widened query's
//   32 registers, spilled there (8-byte stack); with it the spec takes 186 registers, no stack.
//   (The pairs' 64 x 8192 grid runs 2 blocks a multiprocessor at 3 stages either way; 2 stages
//   in 3 blocks, which many-block grids may choose, are no longer possible for this spec.)
// 128 the 16-bit-query e4m3 pairs declare 2 blocks a multiprocessor too.
// 256 the softmax's row maxima: a vote whether any score passes its column's running maximum;
//   only then the shuffles (a tile past the first seldom raises a maximum: without them the
//   same maxima, one vote instead of 3 dependent shuffle rounds).
// Default 471 (23 | 64 | 128 | 256), measured (H100, session 16, 4 alternated rounds against
// 87 / 71 / 215 / 343 and session 15's 23): 64 x 8192 e4m3 q + KV 369.30 -> 368.27 us, e4m3 KV
// 369.55 -> 368.85, 16 x 4096 -0.85 / -0.37, 256 x 1024 -0.84 / -0.28; every 471 round below
// every 23 round on the 64 x 8192 rows (docs/fp8-decode-h100-2026-11-28-s16.txt).
// (Every other spec compiles none of it.)
#ifndef GA_DECODE_FP8_PAIR
#define GA_DECODE_FP8_PAIR 471
#endif
// [policy: 16-bit pair tile] The 16-bit KV-head-pair decodes' tile (head 64 bf16/fp16 with
// GQA <= 8: issue 28's head-64 row), bits of GA_DECODE_PAIR16 (GRAPHATTN_NVRTC_EXTRA_OPTIONS=
// -DGA_DECODE_PAIR16=N, N 0-7; 0 is session 15's machine code):
// 1 S^T = K Q^T in two accumulator chains, one a KV head of the pair (ga_pair_tile_qk, as the
//   e4m3 pairs' bit 16: 4 + 4 dependent MMAs instead of 8). Each chain holds exact zeros in the
//   other head's columns, and the first chain is the one chain up to its zero terms, so S^T is
//   bitwise the one chain's.
// 2 (without 4) the first V chunk group read and paired (ga_v_pairs) in stage 5, before the
//   softmax (the e4m3 pairs' bit 32); 4 every V chunk group (their bit 8).
// Default 5 (1 | 4) on sm_90 outside the mixed graphs' kernel (GA_DEVICE_SPLITS), the measured
// kernels: H100, 4 alternated rounds, 256 x 1024 h64 199.43 -> 196.68 us, 16 x 4096 h64 63.08 ->
// 62.40, 64 x 8192 h64 367.05 -> 366.73 (bit 1 alone -2.25 / -0.48 / -0.13; 3 no better than 1).
// With no compute at all (a diagnostic build) 64 x 8192 h64 ran at 364.0 us: fewer instructions
// a tile cannot take that row to 97% of the read limit (docs/decode-h64-h100-2026-11-28-s16.txt).
// sm_80 and the _dsp kernels keep 0 (not measured). (Every other spec compiles none of it.)
#ifndef GA_DECODE_PAIR16
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && !defined(GA_DEVICE_SPLITS)
#define GA_DECODE_PAIR16 5
#else
#define GA_DECODE_PAIR16 0
#endif
#endif
// Which KV-head-pair specs take which tile bits (the kernel's stages 5-8 and the launch bounds
// below).
// (the fp8 KV caches' pairs: their own epilogue and early e4m3 query; 16-bit pairs keep theirs)
#define GA_PAIR_FP8 (PG == 2 && KV_FP8 != 0)
#define GA_FP8_TILE(bit)                                                                    \
  (GA_PAIR_FP8 && KV_FP8 == 1 && (!QF8 || (GA_DECODE_FP8_PAIR & 64) != 0) && GA_E4M3_CVT && \
   !GA_FP8_MMA_SYNC && (GA_DECODE_FP8_PAIR & (bit)) != 0)
// (the 16-bit KV caches' pairs: GA_DECODE_PAIR16's tile bits)
#define GA_PAIR16_TILE(bit) (PG == 2 && KV_FP8 == 0 && !QF8 && (GA_DECODE_PAIR16 & (bit)) != 0)
// [policy: 16-bit row-max vote] Bits of GA_DECODE_VOTE16 (GRAPHATTN_NVRTC_EXTRA_OPTIONS=
// -DGA_DECODE_VOTE16=N; default 0: main's machine code): the 16-bit tiles take the e4m3 pairs'
// row-max vote (GA_DECODE_FP8_PAIR 256: one warp vote whether any score passes its column's
// running maximum, the three rounds of shuffles only then; the same maxima).
// 1 the single-KV-head tiles at head size 128 (16-bit KV and query, issue 28's rows);
// 2 the 16-bit KV-head pairs (head 64, GA_PAIR16_TILE's specs);
// 4 (with 1 or 2) a tile whose vote saw no maximum move skips the rescale's vote too.
// Measured on an H100 in session 17 (docs/decode-h128-h100-2026-11-28-s17.txt).
#ifndef GA_DECODE_VOTE16
#define GA_DECODE_VOTE16 0
#endif
#define GA_ROW_MAX_VOTE                                                                  \
  (GA_FP8_TILE(256) || (KV_FP8 == 0 && !QF8 &&                                           \
                        ((PG == 1 && HEAD_SIZE == 128 && (GA_DECODE_VOTE16 & 1) != 0) || \
                         (PG == 2 && (GA_DECODE_VOTE16 & 2) != 0))))
#define GA_ROW_MAX_SKIP (GA_ROW_MAX_VOTE && KV_FP8 == 0 && (GA_DECODE_VOTE16 & 4) != 0)
// [policy: fp8 pair epilogue] The decode kernel's __launch_bounds__ minimum of blocks a
// multiprocessor (GA_DECODE_FP8_PAIR 64 for the e4m3-query pairs, 128 for the 16-bit-query ones):
// 0 (none declared: the same machine code as no minimum) for every other spec.
enum : int { GA_DECODE_MIN_BLOCKS = GA_FP8_TILE(QF8 ? 64 : 128) ? 2 : 0 };
enum : int {
  CLUSTER_PUSH =
      GA_DECODE_CLUSTER_PUSH && ga_decode_cluster_push(HEAD_SIZE, KV_FP8 == 0, KV_LAYOUT, MT, BSP)
};
// [policy: device-chosen splits] The _dsp kernel reads the seq_lens of its count's first
// GA_DSP_SEQ_WINDOW x 32 rows beside it (0: after the count, session 13's order), so that a
// working block knows its request's length when the count is done. On sm_90 by default with the
// whole window (4 words: rows past slots load nothing; 1, 2 and 4 words took the same registers),
// for 16-bit KV caches; sm_80's _dsp kernel went from 134 registers to 128 and an 8-byte spill
// with any window, so it keeps 0 (not measured there), as do the fp8-KV _dsp kernels (SEQ_WORDS).
// [policy: long splits] GA_DSP_LONG_SPLITS (spec axis _long, with _dsp: the kernel of the mixed
// graphs whose depth lets two blocks share a multiprocessor, GRAPHATTN_MIXED_DSP_LONG_TILES)
// compiles the choice between the counts of two and one blocks a multiprocessor below; the
// plain _dsp kernel compiles none of it and keeps its machine code (the untaken branch compiled
// into it cost 0.7-1.2% on H100's short mixes: docs/mixed-step-h100-2026-11-27-s14b.txt).
#ifndef GA_DSP_LONG_SPLITS
#define GA_DSP_LONG_SPLITS 0
#endif
#ifndef GA_DSP_SEQ_WINDOW
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GA_DSP_SEQ_WINDOW 4
#else
#define GA_DSP_SEQ_WINDOW 0
#endif
#endif
// [experiment: page order by windows] GA_DECODE_PAGE_SORT=N (GRAPHATTN_NVRTC_EXTRA_OPTIONS=
// -DGA_DECODE_PAGE_SORT=N, N 1-32; default 0: compiled out. H100, N = 16: -0.2 to -1.0 us on the
// shuffled rows, +0.7 us on 64 x 8192, +2-10% compile time; docs/decode-vs-cudnn-h100-2026-11-27-
// s14.txt). A warp holds the block-table entries of its
// tiles 32 at a time (lane l: tile j0 + l). In an unsplit request whose window of 32 holds at
// least N tiles, the warp sorts the entries of the window's interior tiles by block id (a
// bitonic sort across the lanes) and copies its tiles in that order, so the warps of a wave
// read the cache in ascending address order together instead of at random (the shuffled
// cache's page order costs 2-7 us a launch against the same pages in order:
// docs/decode-vs-cudnn-h100-2026-11-27-s11.txt). Only the block a tile
// is copied from moves: every sorted tile is interior (no masked row, no window, no ALiBi, no
// fused-write row: the request's last tile keeps its place), so its mask and position terms do
// not depend on which interior tile it is, and a block holds exactly one tile (block size 16),
// so the copy's in-block offset is 0 for all. The output changes in rounding only (the
// softmax's summation order), the same for a given block table at every ring depth: window 0's
// first MAX_STAGES - 1 tiles (the ring's prologue at the deepest depth) keep their places.
// With N > 0 compiled for the 16-bit single-token flash kernels of block size 16 without
// window, ALiBi, block sparsity or bounds checks; the others keep their machine code.
#ifndef GA_DECODE_PAGE_SORT
#define GA_DECODE_PAGE_SORT 0
#endif
enum : int {
  PAGE_SORT = GA_DECODE_PAGE_SORT > 0 && !LEGACY && KV_FP8 == 0 && !QF8 && !MT && !BSP &&
              !HAS_WINDOW && !HAS_ALIBI && BLOCK_SIZE == TILE
#ifdef GA_CHECK_BOUNDS
              && false
#endif
};
// [experiment: page order by windows] entry (an int lvalue: this lane's block-table entry of the
// window) after the sort: lanes below pin and the tiles that are not interior (the request's
// last tile, lanes past the warp's tiles: a suffix of the lanes) keep their places and entries
// (keys below 32; keys from 0xffffff00 in lane order); the interior tiles' entries (keys block +
// 32) go in ascending order, by a bitonic sort across the warp (lane l: the l-th smallest key).
// (interior: the tile ends before the request's last token, the fused write's row.) A macro,
// not a function: a function called from a discarded branch still changed the register
// allocation of the kernels that never sort.
#define GA_PAGE_SORT_WINDOW(entry, pin, interior)                                              \
  do {                                                                                         \
    static_assert(MAX_STAGES <= 32, "window 0's pinned lanes: keys below 32");                 \
    unsigned key_ = lane < (pin) ? static_cast<unsigned>(lane)                                 \
                    : (interior) ? static_cast<unsigned>(entry) + 32u                          \
                                 : 0xffffff00u + static_cast<unsigned>(lane);                  \
    _Pragma("unroll") for (int k_ = 2; k_ <= 32; k_ <<= 1)                                     \
        _Pragma("unroll") for (int j_ = k_ >> 1; j_ > 0; j_ >>= 1) {                           \
      const unsigned other_ = __shfl_xor_sync(0xffffffffu, key_, j_);                          \
      key_ = ((lane & j_) == 0) == ((lane & k_) == 0) ? min(key_, other_) : max(key_, other_); \
    }                                                                                          \
    if (key_ >= 32u && key_ < 0xffffff00u) (entry) = static_cast<int>(key_ - 32u);             \
  } while (0)
#if GA_DECODE_EARLY_TRIGGER
#define GA_EARLY_WAIT() ga_grid_dependency_wait()
#else
#define GA_EARLY_WAIT() ga_grid_dependency_sync()
#endif

// [stage 2] A block past num_splits: in a cluster launch it still joins both cluster barriers
// of the combine (every block of the cluster must).
__device__ __forceinline__ void ga_idle_split(bool cluster) {
  if (cluster) {
    ga_allow_dependents();
    ga_cluster_sync();
    ga_cluster_sync();
  }
}

// =============================================================================================
// The kernel, stage by stage. Fragments follow the warp's m16n8k16 MMA; thread (g, t) of a warp
// has g = lane / 4 (its MMA row group) and t = lane % 4 (its MMA column pair). Shapes as
// (rows, columns); a column is one query head (multi-token: one (query token, head) pair):
//   qf[NT][KGROUPS][KW]      Q^T, MMA B: (DIMS_PAD, HPB), 16-bit; column g (+ 8 nt), head
//                            dimensions of K chunks c(i, t) (ga_k_chunk_index)
//   s[NT][4]                 S^T = K Q^T: (TILE, HPB) fp32; element e: tile row g (e < 2) or
//                            g + 8, column 2t + e % 2 (+ 8 nt)
//   pt[NT][2]                P^T, MMA B: (TILE, HPB) in the MMA type (movmatrix of exp2(S^T))
//   o[VGROUPS][MSUB][NT][4]  O^T += V^T P^T: (DIMS_PAD, HPB) fp32; element e: dimension
//                            (g + 8 v) * CE + 2 u (e < 2) or + 1, column as in s
//   m_run, l_run[NT][2]      online softmax: running max (log2 domain) and sum, columns 2t, 2t+1
// Shared memory: per warp a ring of `stages` stages of STAGE_BYTES, K tile then V tile; after
// the loop the same bytes hold the warps' partial results (red_*, part_*).
// The stages and policies are marked "// [stage N: name]" and "// [policy: name]" below and
// described in docs/decode-kernel.md. They stay inline in this one function: moved into
// __forceinline__ functions they changed the kernel's register allocation (scripts/sass_diff.sh),
// so the machine code would no longer be the measured one.
// =============================================================================================

#ifdef GA_Q_E4M3
extern "C" __global__ void __launch_bounds__(GA_DECODE_THREADS, GA_DECODE_MIN_BLOCKS)
    graphattn_decode(const __grid_constant__ DecodeQ8Params params) {
  const DecodeParams& p = params.base;
  const GaQueryScales& q8 = params.q8;
#elif defined(GA_DEVICE_SPLITS)
extern "C" __global__ void __launch_bounds__(GA_DECODE_THREADS)
    graphattn_decode(const __grid_constant__ DecodeDspParams params) {
  const DecodeParams& p = params.base;
  const GaDeviceSplits& ds = params.ds;
#else
extern "C" __global__ void __launch_bounds__(GA_DECODE_THREADS, GA_DECODE_MIN_BLOCKS)
    graphattn_decode(const __grid_constant__ DecodeParams p) {
#endif
  // Early prologue: the metadata and the KV cache are read before waiting for the previous
  // kernel, which the host allows only when that kernel writes neither; the query, the new
  // token's key and value and the device KV scales are read after the wait.
  GA_TIMING_ENTRY();
  const bool early = p.early_prologue != 0;
#if GA_DECODE_EARLY_TRIGGER
  if (early) ga_allow_dependents();
#else
  // [policy: early trigger] early_prologue 2 (the host's choice, runtime/decode.cpp
  // decode_early_prologue): the same trigger at entry for the pushed-combine specs only, whose
  // machine code alone changes; GA_EARLY_WAIT's trigger after the wait then repeats it (a
  // no-op). Other specs read 2 as 1; the mixed graphs' kernel (GA_DEVICE_SPLITS) never runs
  // the early prologue and has no such code.
#ifndef GA_DEVICE_SPLITS
  if constexpr (CLUSTER_PUSH) {
    if (p.early_prologue == 2) ga_allow_dependents();
  }
#endif
#endif
  if (!early) ga_grid_dependency_sync();
  extern __shared__ __align__(128) unsigned char smem[];
  // [stage 1: the block's work] (split, KV head, column chunk, request) and its columns.
#ifdef GA_DEVICE_SPLITS
  // [policy: device-chosen splits] (templates/params.h, GaDeviceSplits) Every warp counts the
  // leading decodes d by itself, with no barrier: lane i reads query_start_loc[base + 32 k + i]
  // for a window of 128 rows at once (one round trip; the next window only while every row
  // so far is a decode's), and eq's bits say which rows r hold r (rows 0..d do, row d + 1 does
  // not: request r is a decode when rows r and r + 1 hold r and r + 1). The batch's tokens (for
  // the prefill's estimate) are read beside them. Session 12's count read row r + 1 only after
  // row r (two round trips before any block knew its request) and met at two barriers.
  // The window's first seq_lens rows are read in the same round trip (GA_DSP_SEQ_WINDOW words):
  // a working block whose request lies among them then has its length from a shuffle, and its
  // block-table loads follow the count directly instead of after one more round trip.
  // (seq_lens words read beside the count: 16-bit KV caches; the fp8-KV _dsp kernels keep
  // session 13's order and machine code: the e4m3 one sits at 168 registers with a spill)
  constexpr int SEQ_WORDS = KV_FP8 == 0 ? GA_DSP_SEQ_WINDOW : 0;
  int split = 0, req = 0, split_cap = 1, dsp_seq_len = 0;
  {
    constexpr int WORDS = 4;  // a window of 128 rows, eq0..eq3
    const int slots = ds.slots;
    const int lane = threadIdx.x & 31;
    const int tokens = ds.prefill_block_m > 0 ? p.query_start_loc[slots] : 0;
    unsigned eq0 = 0, eq1 = 0, eq2 = 0, eq3 = 0;
    int base = 0, first = -1;  // first: the first row r that does not hold r
    int sl[WORDS];             // seq_lens of the window's first rows (lane i: rows base + 32 k + i)
    for (;; base += 32 * WORDS) {
      int v[WORDS];
#pragma unroll
      for (int k = 0; k < WORDS; ++k) {
        const int r = base + 32 * k + lane;
        v[k] = r <= slots ? p.query_start_loc[r] : -1;
        if (k < SEQ_WORDS) sl[k] = r < slots ? p.kv.seq_lens[r] : 0;
      }
      eq0 = __ballot_sync(0xffffffffu, v[0] == base + lane);
      eq1 = __ballot_sync(0xffffffffu, v[1] == base + 32 + lane);
      eq2 = __ballot_sync(0xffffffffu, v[2] == base + 64 + lane);
      eq3 = __ballot_sync(0xffffffffu, v[3] == base + 96 + lane);
      first = ~eq0   ? base + __ffs(~eq0) - 1
              : ~eq1 ? base + 31 + __ffs(~eq1)
              : ~eq2 ? base + 63 + __ffs(~eq2)
              : ~eq3 ? base + 95 + __ffs(~eq3)
                     : -1;
      if (first >= 0) break;  // within slots + 1 rows: rows past slots read as -1
    }
    const int d = first > 0 ? first - 1 : 0;
    if (d > 0) {  // the prefill's blocks (its rows over block_m, per KV head) keep their SMs
      const int room =
          ga_device_split_room(ds.sms, tokens - d, GROUP, ds.prefill_block_m, p.num_heads / GROUP);
      split_cap = ga_device_split_splits(d, gridDim.y, room, p.max_splits);
      // [policy: long splits] (spec _long; the host launches it with long_split_tokens > 0)
      // ds.sms is two blocks a multiprocessor (the grid is sized for it). That count stands
      // only where every leading decode lies in the seq_lens window and the shortest keeps at
      // least long_split_tokens tokens a split; else the count of one block a multiprocessor
      // (ds.sms / 2, the plain _dsp kernel's plan) and the surplus blocks exit below. (Without
      // the window, sm_80: always the one-block count.)
#if GA_DSP_LONG_SPLITS
      {
        bool two = false;
        if constexpr (SEQ_WORDS > 0) {
          int shortest = 0x7fffffff;
#pragma unroll
          for (int k = 0; k < SEQ_WORDS; ++k)
            if (32 * k + lane < d && sl[k] < shortest) shortest = sl[k];
          shortest = __reduce_min_sync(0xffffffffu, shortest);
          two = base == 0 && d <= 32 * SEQ_WORDS && shortest >= split_cap * ds.long_split_tokens;
        }
        if (!two)
          split_cap =
              ga_device_split_splits(d, gridDim.y,
                                     ga_device_split_room(ds.sms >> 1, tokens - d, GROUP,
                                                          ds.prefill_block_m, p.num_heads / GROUP),
                                     p.max_splits);
      }
#endif
    }
    const int z = blockIdx.z;
    if (z < d * split_cap) {
      req = static_cast<int>(static_cast<unsigned>(z) / static_cast<unsigned>(split_cap));
      split = z - req * split_cap;
    } else {
      req = d + (z - d * split_cap);
      split_cap = 1;
      if (req >= slots) return;
      // Whether the slot holds a decode after all (main's device-split check): from the
      // window's bits where rows req and req + 1 lie in it, else both rows read at once.
      const int k = req - base;
      bool dec;
      if (k >= 0 && k + 1 < 32 * WORDS) {
        // rows k and k + 1 of the window: bits k % 32 and up of words k / 32 and the next
        // (selects of named words, not an indexed array: that one went to local memory)
        const int wk = k >> 5;
        const unsigned lo = wk == 0 ? eq0 : wk == 1 ? eq1 : wk == 2 ? eq2 : eq3;
        const unsigned hi = wk == 0 ? eq1 : wk == 1 ? eq2 : eq3;
        dec = (__funnelshift_r(lo, hi, k & 31) & 3u) == 3u;
      } else {
        const int q0 = p.query_start_loc[req], q1 = p.query_start_loc[req + 1];
        dec = q0 == req && q1 == req + 1;
      }
      if (!dec) return;
    }
    // req is the block's (every lane of every warp takes the same branch here)
    const int kq = req - base;
    if (SEQ_WORDS > 0 && kq >= 0 && kq < 32 * SEQ_WORDS) {
      const int wq = kq >> 5;  // the word (named selects; only the words loaded)
      int w = sl[0];
      if (SEQ_WORDS > 1 && wq == 1) w = sl[1];
      if (SEQ_WORDS > 2 && wq == 2) w = sl[2];
      if (SEQ_WORDS > 3 && wq == 3) w = sl[3];
      dsp_seq_len = __shfl_sync(0xffffffffu, w, kq & 31);
    } else if (SEQ_WORDS > 0) {
      dsp_seq_len = p.kv.seq_lens[req];
    }
  }
#define GA_REQ_SEQ_LEN (SEQ_WORDS > 0 ? dsp_seq_len : p.kv.seq_lens[req])
#else
  const int split = blockIdx.x;
  const int req = blockIdx.z;
#define GA_REQ_SEQ_LEN p.kv.seq_lens[req]
#endif
  // Column chunks per KV head: compile-time for one token, from the launch's max_query_len for
  // multi-token kernels (the grid is fixed per captured size).
  const int chunks = MT ? (p.max_query_len * GROUP + HPB - 1) / HPB : HEAD_CHUNKS;
  const int kv_head = blockIdx.y / chunks;
  const int head_chunk = blockIdx.y - kv_head * chunks;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int first_col = head_chunk * GA_DECODE_HEADS_PER_BLOCK;
  // one token: column c is head first_head + c (KV head pairs: heads of KV head 2y, then 2y + 1)
  const int first_head = kv_head * GROUP * PG + first_col;
  // KV head pairs: whether the second KV head of the pair exists (an odd count's last has none);
  // tile row element of column c's first dimension (0 or HEAD_SIZE); the pair's head and chunk
  // (of 8 elements) of tile row chunk c. (Macros, not locals: a new local, even an unused one,
  // reorders the machine code of every other spec.)
#define GA_PAIR_SECOND (PG == 2 && kv_head * 2 + 1 < p.num_heads / GROUP)
// Element e of warp w's O^T row of column h in shared memory (stage 8; GA_DECODE_FP8_PAIR 4).
#define GA_RED_SWZ (GA_PAIR_FP8 && (GA_DECODE_FP8_PAIR & 4) != 0)
#define GA_RED_AT(w, h, e)                                    \
  (red_o + ((w)*GA_DECODE_HEADS_PER_BLOCK + (h)) * DIMS_PAD + \
   (GA_RED_SWZ ? static_cast<int>(static_cast<unsigned>((e) + 4 * ((h) >> 1)) % DIMS_PAD) : (e)))
#define GA_COL_HALF(c) (PG == 2 && (c) >= GROUP ? HEAD_SIZE : 0)
#define GA_PAIR_HEAD(c) (PG == 2 ? (c) / (HEAD_SIZE / 8) : 0)
#define GA_PAIR_CHUNK(c) (PG == 2 ? (c) % (HEAD_SIZE / 8) : (c))
  // [policy: block-table prefetch] A split launch (a small batch: several blocks per request)
  // is a chain of dependent round trips to memory: seq_lens, then the block table, then the
  // tiles. Each block asks L2 for one 128-byte line of its request's block-table row (block
  // (split, y) for line split * gridDim.y + y), issued before seq_lens is known, so that the
  // warps' block-table loads below hit L2. (Safe in either prologue: a prefetch changes no data.)
#ifdef GA_DEVICE_SPLITS
#define GA_SPLIT_CAP split_cap    // the splits this request may take
#define GA_SPLIT_COUNT split_cap  // the blocks per request and (KV head, chunk)
#define GA_SPLIT_INDEX split
#else
#define GA_SPLIT_CAP p.max_splits
#define GA_SPLIT_COUNT gridDim.x
#define GA_SPLIT_INDEX blockIdx.x
#endif
  if (GA_SPLIT_COUNT > 1 && tid == 0) {
    const unsigned long long row = reinterpret_cast<unsigned long long>(
        p.kv.block_table + static_cast<long long>(req) * p.kv.block_table_stride);
    const unsigned long long line =
        (row & ~127ull) + 128ull * (GA_SPLIT_INDEX * gridDim.y + blockIdx.y);
    if (line < row + 4ull * static_cast<unsigned long long>(p.kv.block_table_stride))
      asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
  }
  // The fused write's slot, loaded before seq_lens is known (only the last split uses it).
  const long long early_slot = !LEGACY && p.new_key != nullptr ? p.slot_mapping[req] : -1;
  // A batch split on the device (a captured graph of any decode/prefill mix): the grid covers
  // every request slot, and only the decodes (1..max_query_len query tokens, 1 without "_mt")
  // are this kernel's; a prefill or a padded request (no token) has no block here.
  // (A single-token decode must sit at query row req, decodes first; one that does not is no
  // decode of this launch and writes nothing, rather than another request's row.)
#ifndef GA_DEVICE_SPLITS  // (its blocks were checked above)
  if (p.device_split != 0) {
    const int q0 = p.query_start_loc[req], n = p.query_start_loc[req + 1] - q0;
    if (n < 1 || n > (MT ? p.max_query_len : 1) || (!MT && q0 != req)) return;
  }
#endif
  // Multi-token: the request's query rows and their count.
  const int q_begin = MT ? p.query_start_loc[req] : req;
  const int q_len = MT ? p.query_start_loc[req + 1] - q_begin : 1;
  const int cols = MT ? q_len * GROUP : GA_PAIR_SECOND ? GROUP * 2 : GROUP;
  const int heads_here = cols - first_col < HPB ? cols - first_col : HPB;  // columns here
  if (MT && heads_here <= 0) return;  // a shorter request: this chunk has no column
  // Column c's query row (token) and head.
  auto col_token = [&](int c) { return MT ? q_begin + (first_col + c) / GROUP : req; };
  auto col_head = [&](int c) {
    return MT ? kv_head * GROUP + (first_col + c) % GROUP : first_head + c;
  };

  // [stage 4a: the query's loads] A 16-bit query does not depend on seq_lens: without the early
  // prologue (the query is read after the wait either way) its loads go out here, beside
  // seq_lens, instead of after the tiles' first copies; stage 4 converts them where needed.
  // (With the early prologue they wait for the previous kernel, which may write the query.)
  ga_u32 qf[NT][KGROUPS][KW];
  // f(nt, i, half, at, ok) for each 8-element chunk of the query that thread (g, t) holds: head
  // g (+ 8 nt), chunk half of K chunk c(i, t), at elements from the query's start (ok: a real
  // head and dimension; else the chunk stays zero).
  auto for_query_chunks = [&](auto f) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int h = nt * 8 + g;
      const long long row = col_token(h) * p.query_token_stride + col_head(h) * p.query_head_stride;
#pragma unroll
      for (int i = 0; i < KGROUPS; ++i) {
        const int c = ga_k_chunk_index(i, t);
#pragma unroll
        for (int half = 0; half < KW / 4; ++half) {
          const int e = c * CE + half * 8 - GA_COL_HALF(h);  // first of 8 query elements
          f(nt, i, half, row + e, h < heads_here && (PG == 1 || e >= 0) && e < HEAD_SIZE);
        }
      }
    }
  };
  auto load_q16 = [&]() {
    for_query_chunks([&](int nt, int i, int half, long long at, bool ok) {
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (ok) v = *reinterpret_cast<const uint4*>(static_cast<const ga_u16*>(p.query) + at);
      qf[nt][i][half * 4 + 0] = v.x;
      qf[nt][i][half * 4 + 1] = v.y;
      qf[nt][i][half * 4 + 2] = v.z;
      qf[nt][i][half * 4 + 3] = v.w;
    });
  };
  if (!QF8 && !early) load_q16();
  // [policy: early e4m3 query] fp8 KV head pairs: an e4m3 query's bytes go out here too (after the
  // wait with the early prologue), 8 a chunk into qf[..][4 half + 0, 1]; stage 4 widens them.
  auto load_q8 = [&]() {
    for_query_chunks([&](int nt, int i, int half, long long at, bool ok) {
      uint2 b = make_uint2(0u, 0u);
      if (ok) b = *reinterpret_cast<const uint2*>(static_cast<const ga_u8*>(p.query) + at);
      qf[nt][i][half * 4 + 0] = b.x;
      qf[nt][i][half * 4 + 1] = b.y;
    });
  };
  if (QF8 && GA_PAIR_FP8 && (GA_DECODE_FP8_PAIR & 2) && !early) load_q8();
  const int seq_len = GA_REQ_SEQ_LEN;
  // Column c's query position (multi-token; one token: seq_len - 1).
  auto col_pos = [&](int c) { return seq_len - q_len + (MT ? (first_col + c) / GROUP : 0); };
  if (seq_len <= 0) {  // a padded row: zeros out, no block-table read
    if (early) GA_EARLY_WAIT();
    if (split == 0) {
      for (int i = tid; i < heads_here * (HEAD_SIZE / 8); i += GA_DECODE_THREADS) {
        const int h = i / (HEAD_SIZE / 8), c = i - h * (HEAD_SIZE / 8);
        *reinterpret_cast<uint4*>(ga_output_row(p, col_token(h), col_head(h)) + c * 8) =
            make_uint4(0u, 0u, 0u, 0u);
      }
#ifdef GA_WRITE_LSE
      for (int h = tid; h < heads_here; h += GA_DECODE_THREADS)
        ga_store_lse(p, col_token(h), col_head(h), GA_NEG_INF);
#endif
    }
    return;
  }

  // [stage 2: the split plan] lo, base, tiles, num_splits, tiles_per_split.
  // This request's tiles: 16-token tiles from the window start rounded down to 16.
  // (Multi-token: from the first column's window start; the columns' own limits mask the rest.)
  const int lo = ga_window_first_key(col_pos(0), p.window);
  const int base = lo & ~(TILE - 1);
  const int tiles = (seq_len - base + TILE - 1) / TILE;
  int num_splits = (tiles + GA_DECODE_MIN_TILES_PER_SPLIT - 1) / GA_DECODE_MIN_TILES_PER_SPLIT;
  if (num_splits > GA_SPLIT_CAP) num_splits = GA_SPLIT_CAP;
  const int tiles_per_split = (tiles + num_splits - 1) / num_splits;
  num_splits = (tiles + tiles_per_split - 1) / tiles_per_split;
  // Cluster launch: every block of the cluster (all splits of this request and head group)
  // joins both cluster barriers below, also the idle ones past num_splits.
  const bool cluster = p.cluster_splits != 0 && num_splits > 1;
  if (split >= num_splits) {
    ga_idle_split(cluster);
    return;
  }
  // [policy: pushed cluster combine] (GA_DECODE_CLUSTER_PUSH) In a cluster launch every block
  // pushes each item (4 output elements of a head) of its split's output, with the head's
  // log2-sum-exp, into the shared memory of the block that combines it (item i: block
  // i % num_splits, slot split * recv_cap + i / num_splits) by st.async, which counts the bytes
  // on that block's mbarrier. A block combines once its mbarrier has all of its items' bytes:
  // no fence, no global round trip, no cluster barrier between the outputs and the combine (the
  // pulled combine's release barrier is a MEMBAR.ALL.GPU, and its 8 combining threads of 128
  // load 16 splits in 4 batches one after the other: H100 1 x 1024 chain 5.5 against 4.4 us a
  // launch, docs/decode-small-batch-h100-2026-11-27-s12.txt). The receive area lies past the
  // pipeline (ga_decode_cluster_recv_bytes; pushes may arrive while the block still runs its
  // tiles). The cluster barrier is used twice, relaxed: once (arrived here, waited before the
  // first push) so that no push precedes the mbarrier's initialization, and once at the end, so
  // that no block exits before every push has landed.
  if constexpr (CLUSTER_PUSH) {
    if (cluster) {
      if (tid == 0) {
        const int items = heads_here * (HEAD_SIZE / 4);
        const int mine = items > split ? (items - split + num_splits - 1) / num_splits : 0;
        ga_mbar_init_expect(ga_cluster_recv(smem), static_cast<unsigned>(mine * num_splits * 20));
      }
      ga_cluster_arrive_relaxed();
    }
  }
  // [policy: fused cache write] (1/3) the slot and its cache offset.
  // Fused cache write: the new token (position seq_len - 1) sits in the last tile, which only
  // the last split reads. The warp that owns that tile loads the new row from new_key /
  // new_value (an fp8 cache: rounds it to the cache's bytes), stores it to the cache and
  // patches it into its shared-memory tile, so no load waits for the store.
  const bool last_split = split == num_splits - 1;
  long long new_slot = -1;
  if (!LEGACY && p.new_key != nullptr && last_split) {  // (the host refuses it for legacy)
    new_slot = early_slot;
#ifdef GA_CHECK_BOUNDS
    if (new_slot >= p.num_slots && tid == 0) ga_report_bounds(p.bounds, 2, req, req, new_slot);
#endif
    if (new_slot >= p.num_slots) new_slot = -1;
  }
  const long long new_dst = new_slot >= 0
                                ? (new_slot / BLOCK_SIZE) * p.kv.cache_block_stride +
                                      (new_slot % BLOCK_SIZE) * p.kv.cache_token_stride +
                                      static_cast<long long>(kv_head) * PG * p.kv.cache_head_stride
                                : 0;
  const int tile_begin = split * tiles_per_split;
  const int tile_end = tile_begin + tiles_per_split < tiles ? tile_begin + tiles_per_split : tiles;
  // This warp's tiles: tile_begin + warp + NW * j.
  const int my_tiles =
      tile_begin + warp < tile_end ? (tile_end - tile_begin - warp + NW - 1) / NW : 0;

  // [stage 3: the warp's ring] this warp's tiles, ring stages, zeroed row padding.
  const int stages = p.stages < 2 ? 2 : p.stages > MAX_STAGES ? MAX_STAGES : p.stages;
  unsigned char* ring = smem + warp * stages * STAGE_BYTES;
  // Zero the never-copied bytes of each padded row once: K padding must be 0 (it meets Q's
  // zero padding in the dot product), V padding only feeds discarded output columns.
  if (LEGACY && FULL_CHUNKS < CHUNKS_PAD) {
    // K rows as below; V^T: the units past the last dimension (whole 128-byte lines).
    constexpr int PAD = CHUNKS_PAD - FULL_CHUNKS;
    constexpr int V_TAIL = (TILE_BYTES - HEAD_SIZE * VT_UNITS * 16) / 16;
    for (int i = lane; i < stages * TILE * PAD; i += 32) {
      const int row = i / (PAD > 0 ? PAD : 1), r = row % TILE;
      const int c = FULL_CHUNKS + (i - row * PAD);
      *reinterpret_cast<uint4*>(ring + (row / TILE) * STAGE_BYTES + ga_k_off(r, c)) =
          make_uint4(0u, 0u, 0u, 0u);
    }
    for (int i = lane; i < stages * V_TAIL; i += 32) {
      const int st = i / (V_TAIL > 0 ? V_TAIL : 1);
      *reinterpret_cast<uint4*>(ring + st * STAGE_BYTES + TILE_BYTES +
                                (HEAD_SIZE * VT_UNITS + i - st * V_TAIL) * 16) =
          make_uint4(0u, 0u, 0u, 0u);
    }
    __syncwarp();
  } else if (FULL_CHUNKS < CHUNKS_PAD) {
    constexpr int PAD = CHUNKS_PAD - FULL_CHUNKS;
    for (int i = lane; i < stages * 2 * TILE * PAD; i += 32) {
      const int row = i / (PAD > 0 ? PAD : 1);  // over stages x {K, V} x tokens
      const int c = FULL_CHUNKS + (i - row * PAD);
      *reinterpret_cast<uint4*>(ring + row * ROW_BYTES + ((c ^ (row & 7)) * 16)) =
          make_uint4(0u, 0u, 0u, 0u);
    }
    __syncwarp();
  }

  // [policy: KV load per layout] issue(j): legacy / FAST_LOAD / row-by-row copy of tile j,
  // [policy: block-sparse mask] tile_live(t0): a tile no column sees is not read.
  const unsigned char* key_cache = static_cast<const unsigned char*>(p.kv.key_cache);
  const unsigned char* value_cache = static_cast<const unsigned char*>(p.kv.value_cache);
  const long long head_off =
      static_cast<long long>(kv_head) * PG * p.kv.cache_head_stride * KV_BYTES;
  const long long token_bytes = p.kv.cache_token_stride * KV_BYTES;
  const int* bt_row = p.kv.block_table + req * p.kv.block_table_stride;
  const unsigned ring_addr = ga_smem_addr(ring);
  // Fused write: the pipeline zero-fills the new token's row; its owner warp patches it in from
  // registers (tile new_j of that warp, row new_row).
  const bool direct = new_slot >= 0;
  const int new_owner = (tiles - 1 - tile_begin) % NW;
  const int new_j = (tiles - 1 - tile_begin) / NW;
  const int new_row = seq_len - 1 - (base + (tiles - 1) * TILE);

  // The fast gather (FAST_LOAD): lane's unit within a token row, as a byte offset, and its
  // 16-byte chunk XOR the row swizzle of its first token, plus the byte within the chunk.
  const int lane_unit = lane % UNITS;
  const int lane_unit_bytes = lane_unit * CP_BYTES;
  const int lane_chunk_sw = (lane_unit_bytes >> 4) ^ (((lane / UNITS) * LOAD_ITERS) & 7);
  const int lane_dst_low = lane_unit_bytes & 15;
  // Block-sparse: lane c < heads_here holds column c's query block and stride offset; a tile is
  // live when some column sees its sparse block (warp-uniform).
  int bsp_lane_qb = 0, bsp_lane_off = 0;
  if (BSP && lane < heads_here) {
    bsp_lane_qb = col_pos(lane) / p.bsp.block;
    bsp_lane_off = ga_bsp_offset(p.bsp, col_head(lane));
  }
  auto tile_live = [&](int t0) {
    return !BSP || __any_sync(0xffffffffu,
                              lane < heads_here && ga_bsp_visible(p.bsp, bsp_lane_qb,
                                                                  t0 / p.bsp.block, bsp_lane_off));
  };
  // Block-table entries of this warp's tiles, 32 at a time: lane l holds tile j0 + l's.
  // (Block size 8, legacy caches: bt_cached2 holds the block of the tile's tokens 8..15.)
  int bt_cached = 0, bt_j0 = -64;
  [[maybe_unused]] int bt_cached2 = 0;
  // Tile j of this warp goes to ring stage j % stages.
  int issue_stage = 0;
  auto issue = [&](int j) {
    if (j - bt_j0 >= 32) {
      bt_j0 = j;
      const int jj = j + lane;
      if (jj < my_tiles) {
        const int tok = base + (tile_begin + warp + NW * jj) * TILE;
        bt_cached = bt_row[tok / BLOCK_SIZE];
        if constexpr (BLOCK_SIZE < TILE) {  // a second block only where it holds a live token
          if (tok + BLOCK_SIZE < seq_len) bt_cached2 = bt_row[tok / BLOCK_SIZE + 1];
        }
      }
      if constexpr (PAGE_SORT) {  // windows after the first (the first: after the prologue)
        if (num_splits == 1 && j > 0 && my_tiles - j >= GA_DECODE_PAGE_SORT)
          GA_PAGE_SORT_WINDOW(
              bt_cached, 0,
              jj < my_tiles && base + (tile_begin + warp + NW * jj + 1) * TILE < seq_len);
      }
    }
    const int t0 = base + (tile_begin + warp + NW * j) * TILE;
    if (!tile_live(t0)) {  // block-sparse: a tile no column sees is not read
      issue_stage = issue_stage + 1 == stages ? 0 : issue_stage + 1;
      return;
    }
#ifdef GA_CHECK_BOUNDS
    const int block = ga_checked_block(__shfl_sync(0xffffffffu, bt_cached, j - bt_j0),
                                       p.kv.num_blocks, p.bounds, req, t0);
#else
    const int block = __shfl_sync(0xffffffffu, bt_cached, j - bt_j0);
#endif
    [[maybe_unused]] int block2 = block;
    if constexpr (BLOCK_SIZE < TILE) {
#ifdef GA_CHECK_BOUNDS
      block2 = ga_checked_block(__shfl_sync(0xffffffffu, bt_cached2, j - bt_j0), p.kv.num_blocks,
                                p.bounds, req, t0 + BLOCK_SIZE);
#else
      block2 = __shfl_sync(0xffffffffu, bt_cached2, j - bt_j0);
#endif
    }
    const long long off = static_cast<long long>(block) * p.kv.cache_block_stride * KV_BYTES +
                          (t0 % BLOCK_SIZE) * token_bytes + head_off;
    const unsigned stage = ring_addr + issue_stage * STAGE_BYTES;
    issue_stage = issue_stage + 1 == stages ? 0 : issue_stage + 1;
    if constexpr (LEGACY) {
      // The block's K and V of this head start at kv_off; the tile's first token is in_block.
      const long long kv_off =
          static_cast<long long>(block) * p.kv.cache_block_stride * KV_BYTES + head_off;
      const int in_block = t0 % BLOCK_SIZE;
      // Block size 8 (16-bit caches): tokens 8..15 of the tile (K rows, the V unit h = 1) are
      // the second block's first 8, at kv_off2.
      [[maybe_unused]] const long long kv_off2 =
          static_cast<long long>(block2) * p.kv.cache_block_stride * KV_BYTES + head_off;
      static_assert(BLOCK_SIZE >= TILE || (BLOCK_SIZE * 2 == TILE && VT_TOKENS == BLOCK_SIZE),
                    "a block smaller than the tile: 8 tokens, 16-bit caches only");
      // K: lane -> (tile row, chunk c); chunk c of token tok at (c * BLOCK_SIZE + tok) * 16.
      constexpr int K_UNITS = TILE * LIVE_CHUNKS;
#pragma unroll
      for (int it = 0; it < (K_UNITS + 31) / 32; ++it) {
        const int idx = lane + 32 * it;
        if (K_UNITS % 32 == 0 || idx < K_UNITS) {
          const int row = idx & (TILE - 1), c = idx >> 4;
          const int tok = ga_tok_of_row(row);
          const int pos = t0 + tok;
          const bool valid = pos >= lo && pos < seq_len;
          constexpr int KEY_X_BYTES = ga_key_x_bytes();
          if constexpr (KEY_X_BYTES == 16) {
            const long long src =
                BLOCK_SIZE < TILE
                    ? (tok < BLOCK_SIZE ? kv_off : kv_off2) +
                          (static_cast<long long>(c) * BLOCK_SIZE + (tok & (BLOCK_SIZE - 1))) * 16
                    : kv_off + (static_cast<long long>(c) * BLOCK_SIZE + in_block + tok) * 16;
            ga_cp_async(stage + ga_k_off(row, c), key_cache + (valid ? src : kv_off), valid);
          } else {
            // Chunk c's first byte is byte (c * 16) % x of x-group c * 16 / x of the token.
            const int tb = BLOCK_SIZE < TILE ? (tok & (BLOCK_SIZE - 1)) : in_block + tok;
            const long long src =
                (BLOCK_SIZE < TILE && tok >= BLOCK_SIZE ? kv_off2 : kv_off) +
                (static_cast<long long>(c * 16 / KEY_X_BYTES) * BLOCK_SIZE + tb) * KEY_X_BYTES +
                (c * 16) % KEY_X_BYTES;
            if constexpr (KEY_X_BYTES == 8) {
              ga_cp_async8(stage + ga_k_off(row, c), key_cache + (valid ? src : kv_off), valid);
              ga_cp_async8(stage + ga_k_off(row, c) + 8,
                           key_cache + (valid ? src + BLOCK_SIZE * 8 : kv_off), valid);
            } else {
              ga_cp_async(stage + ga_k_off(row, c), key_cache + (valid ? src : kv_off), valid);
            }
          }
        }
      }
      // V: unit idx = (dimension d, token group h) from d * BLOCK_SIZE + in_block + h * VT_TOKENS
      // elements; read when any of its tokens is inside [lo, seq_len).
      constexpr int V_UNITS = HEAD_SIZE * VT_UNITS;
#pragma unroll
      for (int it = 0; it < (V_UNITS + 31) / 32; ++it) {
        const int idx = lane + 32 * it;
        if (V_UNITS % 32 == 0 || idx < V_UNITS) {
          const int d = idx / VT_UNITS, h = idx - d * VT_UNITS;
          const int first = t0 + h * VT_TOKENS;
          const bool valid = first < seq_len && first + VT_TOKENS > lo;
          const long long src =
              BLOCK_SIZE < TILE
                  ? (h == 0 ? kv_off : kv_off2) + static_cast<long long>(d) * BLOCK_SIZE * KV_BYTES
                  : kv_off + (static_cast<long long>(d) * BLOCK_SIZE + in_block) * KV_BYTES +
                        h * 16;
          ga_cp_async(stage + TILE_BYTES + (ga_vt_unit(idx) << 4),
                      value_cache + (valid ? src : kv_off), valid);
        }
      }
    } else if constexpr (FAST_LOAD) {
      // Lane group lane / UNITS copies tokens tk0 .. tk0 + LOAD_ITERS - 1, unit lane % UNITS.
      const int tk0 = (lane / UNITS) * LOAD_ITERS;
      const int p0 = t0 + tk0;
      // (KV head pairs: the second half of the tile row is the next KV head's row, a head stride
      // further, GA_PAIR_UNIT_SKIP; none past an odd count's last head: zero-filled, as the units
      // that GA_PAIR_UNIT_LIVE is false for copy nothing.)
#define GA_PAIR_UNIT_SKIP \
  (PG == 2 && lane_unit >= UNITS / 2 ? p.kv.cache_head_stride * KV_BYTES - REAL_BYTES / 2 : 0)
#define GA_PAIR_UNIT_LIVE (PG == 1 || lane_unit < UNITS / 2 || GA_PAIR_SECOND)
      const unsigned char* ksrc =
          key_cache + off + tk0 * token_bytes + lane_unit_bytes + GA_PAIR_UNIT_SKIP;
      const unsigned char* vsrc =
          value_cache + off + tk0 * token_bytes + lane_unit_bytes + GA_PAIR_UNIT_SKIP;
      const unsigned row0 = stage + tk0 * ROW_BYTES + lane_dst_low;
      // A tile wholly inside [lo, seq_len - 1) (every tile but the window's first and the
      // request's last, which may hold the fused write's row) copies every row: no test a row.
      if (t0 >= lo && t0 + TILE < seq_len) {
#pragma unroll
        for (int it = 0; it < LOAD_ITERS; ++it) {
          const unsigned dst = row0 + it * ROW_BYTES + ((lane_chunk_sw ^ (it & 7)) << 4);
          ga_cp_async(dst, ksrc + it * token_bytes, GA_PAIR_UNIT_LIVE);
          ga_cp_async(dst + TILE_BYTES, vsrc + it * token_bytes, GA_PAIR_UNIT_LIVE);
        }
        return;
      }
#pragma unroll
      for (int it = 0; it < LOAD_ITERS; ++it) {
        const int pos = p0 + it;
        const bool valid =
            GA_PAIR_UNIT_LIVE && pos >= lo && pos < seq_len && !(direct && pos == seq_len - 1);
        // (tk0 + it) % 8 == (tk0 % 8) ^ it: tk0 is a multiple of LOAD_ITERS, a power of two.
        const unsigned dst = row0 + it * ROW_BYTES + ((lane_chunk_sw ^ (it & 7)) << 4);
        ga_cp_async(dst, ksrc + it * token_bytes, valid);
        ga_cp_async(dst + TILE_BYTES, vsrc + it * token_bytes, valid);
      }
    } else {
#pragma unroll
      for (int it = 0; it < LOAD_ITERS; ++it) {
        const int idx = lane + 32 * it;
        if (TILE * UNITS % 32 == 0 || idx < TILE * UNITS) {
          const int tok = idx / UNITS, u = idx - (idx / UNITS) * UNITS;
          const int pos = t0 + tok;
          const bool valid = pos >= lo && pos < seq_len && !(direct && pos == seq_len - 1);
          const long long src = off + tok * token_bytes + u * CP_BYTES;
          const int chunk = (u * CP_BYTES) >> 4;
          const unsigned dst =
              stage + tok * ROW_BYTES + ((chunk ^ (tok & 7)) << 4) + ((u * CP_BYTES) & 15);
          ga_cp_async(dst, key_cache + (valid ? src : off), valid);
          ga_cp_async(dst + TILE_BYTES, value_cache + (valid ? src : off), valid);
        }
      }
    }
  };

  for (int s = 0; s < stages - 1; ++s) {
    if (s < my_tiles) issue(s);
    ga_cp_commit();
  }
  if constexpr (PAGE_SORT) {  // window 0, its first MAX_STAGES - 1 tiles in place
    if (num_splits == 1 && my_tiles >= GA_DECODE_PAGE_SORT)
      GA_PAGE_SORT_WINDOW(
          bt_cached, MAX_STAGES - 1,
          lane < my_tiles && base + (tile_begin + warp + NW * lane + 1) * TILE < seq_len);
  }
#ifdef GA_DECODE_TIMING
  GA_TIMING_WARP(0);
  if (unsigned long long* row = tid == 0 ? ga_timing_row() : nullptr) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    row[2] = smid;
    row[3] = static_cast<unsigned long long>(tile_end - tile_begin);
    row[4] = 2ull * TILE * REAL_BYTES;
    row[5] = static_cast<unsigned long long>(seq_len);
  }
#endif
  if (early) GA_EARLY_WAIT();
  GA_TIMING_BLOCK(40);

  // [stage 4: Q^T fragments] qf; the score scales; O, m, l and the per-column mask terms.
  // Q^T fragments (MMA B operand): thread (g, t) holds head g (+ 8 nt) chunks c(i, t).
  // (fp8 queries: QK_FP8 keeps the e4m3 bytes, 4 a word, in qf[..][0..3]; the fallback widens
  // them to fp16 times the softmax scale.)
  // (QK_FP8: no softmax scale in the query, whatever Q_TO_F16 says: the bytes stay e4m3.)
  // (QF8_WIDE: none either: the query is widened exactly and the softmax scale stays in
  // score_scale.)
  const float q_scale = !QK_FP8 && !QF8_WIDE && (Q_TO_F16 || QF8) ? p.scale : 1.0f;
  if constexpr (!QF8) {
    if (early) load_q16();
    if (Q_TO_F16) {  // a bf16 query for fp16 MMAs: converted once, times the softmax scale
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < KGROUPS; ++i)
#pragma unroll
          for (int k = 0; k < KW; ++k) qf[nt][i][k] = ga_bf16x2_to_f16x2(qf[nt][i][k], q_scale);
    }
  } else {
    if (GA_PAIR_FP8 && (!(GA_DECODE_FP8_PAIR & 2) || early)) load_q8();
    for_query_chunks([&](int nt, int i, int half, long long at, bool ok) {
      uint2 b = make_uint2(0u, 0u);
      if constexpr (GA_PAIR_FP8)
        b = make_uint2(qf[nt][i][half * 4 + 0], qf[nt][i][half * 4 + 1]);
      else if (ok)
        b = *reinterpret_cast<const uint2*>(static_cast<const ga_u8*>(p.query) + at);
      if constexpr (QK_FP8) {
        qf[nt][i][half * 2 + 0] = b.x;
        qf[nt][i][half * 2 + 1] = b.y;
      } else if constexpr (QF8_WIDE) {
        ga_e4m3x4_to_f16(b.x, qf[nt][i][half * 4 + 0], qf[nt][i][half * 4 + 1]);
        ga_e4m3x4_to_f16(b.y, qf[nt][i][half * 4 + 2], qf[nt][i][half * 4 + 3]);
      } else {
        const ga_u8* x = reinterpret_cast<const ga_u8*>(&b);
#pragma unroll
        for (int k = 0; k < 4; ++k)
          qf[nt][i][half * 4 + k] = ga_mma_pack2(ga_e4m3_to_f32(x[2 * k]) * q_scale,
                                                 ga_e4m3_to_f32(x[2 * k + 1]) * q_scale);
      }
    });
  }

  // [policy: fused cache write] (2/3) load the new rows, store them to the cache. (After the
  // query's loads, so that the owner warp's two loads overlap: its store waits for its load.)
  // The new token's K and V rows (chunks of 8 elements: 0..HEAD_SIZE/8-1 of K, then of V),
  // loaded by its owner warp, stored to the cache by the first head chunk's block, patched into
  // the tile below. A chunk is 16 bytes in a 16-bit cache, 8 rounded bytes (.x, .y) in fp8.
  // (KV head pairs: a tile row's chunks, the first head's then the second's, whose rows lie a
  // head stride further in new_key / new_value and in the cache; no second head: zeros.)
  constexpr int NEW_CHUNKS = 2 * (HEAD_SIZE * PG / 8);
  constexpr int NEW_PER_LANE = (NEW_CHUNKS + 31) / 32;
  uint4 new_rows[NEW_PER_LANE];
  if (direct && warp == new_owner) {
#pragma unroll
    for (int k = 0; k < NEW_PER_LANE; ++k) {
      const int idx = lane + 32 * k;
      if (idx < NEW_CHUNKS) {
        const int which = idx / (HEAD_SIZE * PG / 8), c = idx - which * (HEAD_SIZE * PG / 8);
        if (PG == 2 && c >= HEAD_SIZE / 8 && !GA_PAIR_SECOND) {
          new_rows[k] = make_uint4(0u, 0u, 0u, 0u);
          continue;
        }
        const ga_u16* src =
            which ? static_cast<const ga_u16*>(p.new_value) + req * p.new_value_token_stride +
                        (kv_head * PG + GA_PAIR_HEAD(c)) * p.new_value_head_stride
                  : static_cast<const ga_u16*>(p.new_key) + req * p.new_key_token_stride +
                        (kv_head * PG + GA_PAIR_HEAD(c)) * p.new_key_head_stride;
        const uint4 x = *reinterpret_cast<const uint4*>(src + GA_PAIR_CHUNK(c) * 8);
        void* cache = const_cast<void*>(which ? p.kv.value_cache : p.kv.key_cache);
        if (KV_FP8 != 0) {
          const ga_u16* h = reinterpret_cast<const ga_u16*>(&x);
          const float scale = which ? ga_kv_scale(p.scales.v_scale_ptr, p.v_scale)
                                    : ga_kv_scale(p.scales.k_scale_ptr, p.k_scale);
          __align__(8) ga_u8 q8[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) q8[e] = ga_f32_to_kv_fp8(ga_to_float(h[e]) / scale);
          const uint2 b = *reinterpret_cast<const uint2*>(q8);
          new_rows[k] = make_uint4(b.x, b.y, 0u, 0u);
          if (head_chunk == 0)
            *reinterpret_cast<uint2*>(static_cast<ga_u8*>(cache) + new_dst +
                                      GA_PAIR_HEAD(c) * p.kv.cache_head_stride +
                                      GA_PAIR_CHUNK(c) * 8) = b;
        } else {
          new_rows[k] = x;
          if (head_chunk == 0)
            *reinterpret_cast<uint4*>(static_cast<ga_u16*>(cache) + new_dst +
                                      GA_PAIR_HEAD(c) * p.kv.cache_head_stride +
                                      GA_PAIR_CHUNK(c) * 8) = x;
        }
      }
    }
  }

  // Scores in the log2 domain: no cap: raw * qk_scale; cap: ga_soft_cap_log2(raw, qk_scale,
  // cap_log2).
#ifdef GA_Q_E4M3
  // fp8 queries: the descales of this (request, KV head), FA3's q_descale and k_descale. (KV
  // head pairs: of the first head; the second head's in score_scale2.)
  const long long descale_at = static_cast<long long>(req) * q8.req_stride +
                               static_cast<long long>(kv_head) * PG * q8.head_stride;
  auto q8_score_scale = [&](long long at) {
    return p.scale / q_scale * (q8.q_descale ? q8.q_descale[at] : q8.q_scale) *
           (q8.k_descale ? q8.k_descale[at] : ga_kv_scale(p.scales.k_scale_ptr, p.k_scale)) *
           (QK_FP8 ? 1.0f : KV_WIDEN_SCALE);
  };
  const float score_scale = q8_score_scale(descale_at);
  const long long descale_at2 = descale_at + (GA_PAIR_SECOND ? q8.head_stride : 0);
  const float score_scale2 = PG == 2 ? q8_score_scale(descale_at2) : score_scale;
  const float qk_scale2 = HAS_SOFT_CAP ? score_scale2 / p.soft_cap : score_scale2 * GA_LOG2E;
#else
  const float score_scale =
      p.scale / q_scale * ga_kv_scale(p.scales.k_scale_ptr, p.k_scale) * KV_WIDEN_SCALE;
#endif
  const float qk_scale = HAS_SOFT_CAP ? score_scale / p.soft_cap : score_scale * GA_LOG2E;
  const float cap_log2 = HAS_SOFT_CAP ? p.soft_cap * GA_LOG2E : 0.0f;

  float o[VGROUPS][MSUB][NT][4];
#pragma unroll
  for (int v = 0; v < VGROUPS; ++v)
#pragma unroll
    for (int u = 0; u < MSUB; ++u)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[v][u][nt][e] = 0.0f;
  float m_run[NT][2], l_run[NT][2];
  float slope[NT][2];                 // ALiBi slopes (log2 domain) of columns 2t, 2t + 1 (+ 8 nt)
  int col_hi[NT][2], col_lo[NT][2];   // multi-token: the keys [lo, hi] a column sees
  int bsp_qb[NT][2], bsp_off[NT][2];  // block-sparse: a column's query block and stride offset
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    m_run[nt][0] = m_run[nt][1] = GA_NEG_INF;
    l_run[nt][0] = l_run[nt][1] = 0.0f;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int h = nt * 8 + 2 * t + k;
      slope[nt][k] = ga_alibi_slope_log2(p.terms, col_head(h), h < heads_here);
      col_hi[nt][k] = h < heads_here ? col_pos(h) : -1;
      col_lo[nt][k] = ga_window_first_key(col_hi[nt][k], p.window);
      if (BSP) {
        bsp_qb[nt][k] = h < heads_here ? col_pos(h) / p.bsp.block : 0;
        bsp_off[nt][k] = ga_bsp_offset(p.bsp, col_head(h));
      }
    }
  }

#ifdef GA_DECODE_TIMING
  if (tid == 0) {  // (the store waits for the query's first word, the stamp after it)
    if (unsigned long long* row = ga_timing_row()) row[63] = qf[0][0][0];
    ga_timing_stamp(42);
  }
#endif
  // [stage 5..7: the tile loop] per tile j: wait for it, patch in the fused write's row (3/3).
  int use_stage = 0;
  for (int j = 0; j < my_tiles; ++j) {
    if (j + stages - 1 < my_tiles) issue(j + stages - 1);
    ga_cp_commit();
    // (stages - 1) + (j + 1) groups are committed; tile j's is complete when at most
    // stages - 1 are pending.
    ga_cp_wait_stages(stages);
    __syncwarp();
#ifdef GA_DECODE_TIMING
    if (j == 0) GA_TIMING_WARP(1);
#endif
    unsigned char* ks = ring + use_stage * STAGE_BYTES;
    use_stage = use_stage + 1 == stages ? 0 : use_stage + 1;
    unsigned char* vs = ks + TILE_BYTES;
    if (direct && warp == new_owner && j == new_j) {
#pragma unroll
      for (int k = 0; k < NEW_PER_LANE; ++k) {
        const int idx = lane + 32 * k;
        if (idx < NEW_CHUNKS) {
          const int which = idx / (HEAD_SIZE * PG / 8), c = idx - which * (HEAD_SIZE * PG / 8);
          unsigned char* tile = which ? vs : ks;  // (flash: V rows as K rows, ga_k_off)
          if (KV_FP8 != 0) {  // bytes 8c .. 8c + 7 of the row: half of 16-byte chunk c / 2
            *reinterpret_cast<uint2*>(tile + ga_k_off(new_row, c >> 1) + (c & 1) * 8) =
                make_uint2(new_rows[k].x, new_rows[k].y);
          } else {
            *reinterpret_cast<uint4*>(tile + ga_k_off(new_row, c)) = new_rows[k];
          }
        }
      }
      __syncwarp();
    }
    const int t0 = base + (tile_begin + warp + NW * j) * TILE;
    if (!tile_live(t0)) {  // block-sparse: not issued, nothing to compute
      __syncwarp();
      continue;
    }
    if (LEGACY && (t0 < lo || t0 + TILE > seq_len)) {
      // Zero the V^T entries of the tokens outside [lo, seq_len) that came in whole units.
      for (int i = lane; i < HEAD_SIZE * TILE; i += 32) {
        const int d = i >> 4, tok = i & 15, pos = t0 + tok;
        if (pos < lo || pos >= seq_len) {
          unsigned char* dst =
              vs + (ga_vt_unit(d * VT_UNITS + tok / VT_TOKENS) << 4) + (tok % VT_TOKENS) * KV_BYTES;
          if (KV_BYTES == 2) {
            *reinterpret_cast<ga_u16*>(dst) = 0;
          } else {
            *dst = 0;
          }
        }
      }
      __syncwarp();
    }
    // Block-sparse: whether columns 2t, 2t + 1 (+ 8 nt) see this tile's sparse block.
    bool bsp_vis[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 2; ++k)
        bsp_vis[nt][k] =
            !BSP || ga_bsp_visible(p.bsp, bsp_qb[nt][k], t0 / p.bsp.block, bsp_off[nt][k]);

    // [stage 5: compute_qk]
    // S^T = K Q^T: rows tokens g, g + 8; columns heads 2t, 2t + 1 (+ 8 nt).
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    // (GA_DECODE_FP8_PAIR 8, 16, 32: ga_pair_tile_qk, which also widens the tile's first V_EARLY
    // V chunk groups for stage 7)
    constexpr int V_EARLY = GA_FP8_TILE(8) || GA_PAIR16_TILE(4)    ? VGROUPS
                            : GA_FP8_TILE(32) || GA_PAIR16_TILE(2) ? 1
                                                                   : 0;
    ga_u32 v_early[V_EARLY > 0 ? V_EARLY : 1][2][CE];
    if constexpr (V_EARLY > 0 || GA_FP8_TILE(16) || GA_PAIR16_TILE(1)) {
      ga_pair_tile_qk<V_EARLY, GA_FP8_TILE(16) || GA_PAIR16_TILE(1)>(ks, vs, g, t, qf, s, v_early);
    } else {
#pragma unroll
      for (int i = 0; i < KGROUPS; ++i) {
        if (8 * (i >> 1) + (i & 1) >= LIVE_CHUNKS) continue;  // the whole chunk group is padding
        const int c = ga_k_chunk_index(i, t);
        const int sw = (c ^ g) << 4;  // (flash: ga_k_off of rows g and g + 8)
        const int k0 = LEGACY ? ga_k_off(g, c) : g * ROW_BYTES + sw;
        const int k1 = LEGACY ? ga_k_off(g + 8, c) : (g + 8) * ROW_BYTES + sw;
        if constexpr (QK_FP8) {
          // 16 fp8 keys a row chunk, 4 a word: two k = 32 MMAs (words 0, 1 and 2, 3 of the chunk
          // of rows g and g + 8 against the same words of the query's chunk).
          const uint4 ca = *reinterpret_cast<const uint4*>(ks + k0);
          const uint4 cb = *reinterpret_cast<const uint4*>(ks + k1);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            ga_mma_fp8(s[nt], ca.x, cb.x, ca.y, cb.y, qf[nt][i][0], qf[nt][i][1]);
            ga_mma_fp8(s[nt], ca.z, cb.z, ca.w, cb.w, qf[nt][i][2], qf[nt][i][3]);
          }
          continue;
        }
        ga_u32 ka[KW], kb[KW];
        ga_k_chunk(*reinterpret_cast<const uint4*>(ks + k0), ka);
        ga_k_chunk(*reinterpret_cast<const uint4*>(ks + k1), kb);
#pragma unroll
        for (int sub = 0; sub < KSUB; ++sub)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            ga_mma(s[nt], ka[2 * sub], kb[2 * sub], ka[2 * sub + 1], kb[2 * sub + 1],
                   qf[nt][i][2 * sub], qf[nt][i][2 * sub + 1]);
      }
    }

    // [stage 6: update_local_state] [policy: logits transform] soft cap, ALiBi; [policy: mask]
    // window / multi-token causal limits, block-sparse; then the online softmax.
    const int pos0 = t0 + ga_tok_of_row(g), pos1 = t0 + ga_tok_of_row(g + 8);
    const bool ok0 = pos0 >= lo && pos0 < seq_len;
    const bool ok1 = pos1 >= lo && pos1 < seq_len;
    ga_u32 pt[NT][2];  // P^T as MMA B fragments
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
#ifdef GA_Q_E4M3
        float x =
            ga_logit(s[nt][e], PG == 2 && nt * 8 + 2 * t + (e & 1) >= GROUP ? qk_scale2 : qk_scale,
                     cap_log2);
#else
        float x = ga_logit(s[nt][e], qk_scale, cap_log2);
#endif
        const int pos = e < 2 ? pos0 : pos1;
        if (HAS_ALIBI)
          x += ga_alibi_log2(slope[nt][e & 1], pos, MT ? col_hi[nt][e & 1] : seq_len - 1);
        const bool ok = (MT      ? pos >= col_lo[nt][e & 1] && pos <= col_hi[nt][e & 1]
                         : e < 2 ? ok0
                                 : ok1) &&
                        bsp_vis[nt][e & 1];
        s[nt][e] = ok ? x : GA_NEG_INF;
      }
      float mx0 = fmaxf(s[nt][0], s[nt][2]), mx1 = fmaxf(s[nt][1], s[nt][3]);
      // (GA_DECODE_FP8_PAIR 256, GA_DECODE_VOTE16: when no thread's scores pass its columns'
      // running maxima, every column's new maximum is its running one whatever the shuffles
      // would give: one vote instead of the three rounds of shuffles, the same values)
      const bool max_moved =
          !GA_ROW_MAX_VOTE || __any_sync(0xffffffffu, mx0 > m_run[nt][0] || mx1 > m_run[nt][1]);
      if (max_moved) {
#pragma unroll
        for (int d = 4; d < 32; d <<= 1) {
          mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
          mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
        }
      }
      const float mn0 = fmaxf(m_run[nt][0], mx0), mn1 = fmaxf(m_run[nt][1], mx1);
      const float mu0 = mn0 == GA_NEG_INF ? 0.0f : mn0, mu1 = mn1 == GA_NEG_INF ? 0.0f : mn1;
      const float alpha0 = ga_exp2(m_run[nt][0] - mu0), alpha1 = ga_exp2(m_run[nt][1] - mu1);
      m_run[nt][0] = mn0;
      m_run[nt][1] = mn1;
      const ga_u32 x0 = ga_mma_pack2(ga_exp2(s[nt][0] - mu0), ga_exp2(s[nt][1] - mu1));  // token g
      const ga_u32 x1 = ga_mma_pack2(ga_exp2(s[nt][2] - mu0), ga_exp2(s[nt][3] - mu1));  // g+8
      // The row sums use the rounded weights that the MMA multiplies with.
      l_run[nt][0] = l_run[nt][0] * alpha0 + ga_mma_lo_f32(x0) + ga_mma_lo_f32(x1);
      l_run[nt][1] = l_run[nt][1] * alpha1 + ga_mma_hi_f32(x0) + ga_mma_hi_f32(x1);
      pt[nt][0] = ga_movmatrix_trans(x0);
      pt[nt][1] = ga_movmatrix_trans(x1);
      // Past the first tiles a tile seldom raises a column's maximum: when no column of the warp
      // moved (every alpha exactly 1) the rescale of O, VGROUPS * MSUB * 4 multiplications a
      // thread, is skipped (the same result; one vote a tile).
      // (GA_DECODE_VOTE16 4: when the row-max vote saw no maximum move, every alpha is 1, or 0
      // where the running maximum is still -inf and O is still zero: no vote, no rescale)
      if ((!GA_ROW_MAX_SKIP || max_moved) &&
          __any_sync(0xffffffffu, alpha0 != 1.0f || alpha1 != 1.0f)) {
#pragma unroll
        for (int v = 0; v < VGROUPS; ++v)
#pragma unroll
          for (int u = 0; u < MSUB; ++u) {
            o[v][u][nt][0] *= alpha0;
            o[v][u][nt][1] *= alpha1;
            o[v][u][nt][2] *= alpha0;
            o[v][u][nt][3] *= alpha1;
          }
      }
    }

    // [stage 7: O^T += V^T P^T] legacy (ldmatrix of V^T) or flash (ga_v_pairs).
    // O^T += V^T P^T: rows head dimensions, columns heads.
    if constexpr (LEGACY) {
      // Lane supplies row lane % 8 of ldmatrix matrix lane / 8; thread (g, t) receives row g:
      // dimension (g + 8 v) * CE + 2 u (MMA rows g) or + 1 (rows g + 8), as the flash path.
      const unsigned vt = ga_smem_addr(vs);
      const int r = lane & 7, mi = lane >> 3;
#pragma unroll
      for (int v = 0; v < VGROUPS; ++v) {
        if (8 * v >= LIVE_CHUNKS) continue;
        if constexpr (KV_BYTES == 2) {
          // Matrices: {dim 2u, 2u + 1} x {tokens 0-7, 8-15} -> the A registers a0..a3.
#pragma unroll
          for (int u = 0; u < MSUB; ++u) {
            const int d = (r + 8 * v) * CE + 2 * u + (mi & 1);
            ga_u32 a[4];
            ga_ldmatrix_x4(a, vt + (ga_vt_unit(d * 2 + (mi >> 1)) << 4));
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              ga_mma(o[v][u][nt], a[0], a[1], a[2], a[3], pt[nt][0], pt[nt][1]);
          }
        } else {
          // Matrices: dims 2u, 2u + 1, 2u + 2, 2u + 3; word k holds tokens 4t..4t+3 of one
          // dimension = k slots {2t, 2t + 1} (low pair) and {2t + 8, 2t + 9} (high pair).
#pragma unroll
          for (int u = 0; u < MSUB; u += 2) {
            const int d = (r + 8 * v) * CE + 2 * u + mi;
            ga_u32 a[4], w[8];
            ga_ldmatrix_x4(a, vt + (ga_vt_unit(d) << 4));
#pragma unroll
            for (int k = 0; k < 4; ++k) ga_fp8x4_widen(a[k], w[2 * k], w[2 * k + 1]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              ga_mma(o[v][u][nt], w[0], w[2], w[1], w[3], pt[nt][0], pt[nt][1]);
              ga_mma(o[v][u + 1][nt], w[4], w[6], w[5], w[7], pt[nt][0], pt[nt][1]);
            }
          }
        }
      }
      __syncwarp();
      continue;
    }
#pragma unroll
    for (int v = 0; v < VGROUPS; ++v) {
      if (8 * v >= LIVE_CHUNKS) continue;
      const int cv = g + 8 * v;
      const int sw0 = (cv ^ (2 * t)) << 4, sw1 = (cv ^ (2 * t + 1)) << 4;
      const uint4 v0 = *reinterpret_cast<const uint4*>(vs + (2 * t) * ROW_BYTES + sw0);
      const uint4 v1 = *reinterpret_cast<const uint4*>(vs + (2 * t + 1) * ROW_BYTES + sw1);
      const uint4 v8 = *reinterpret_cast<const uint4*>(vs + (2 * t + 8) * ROW_BYTES + sw0);
      const uint4 v9 = *reinterpret_cast<const uint4*>(vs + (2 * t + 9) * ROW_BYTES + sw1);
      ga_u32 lo01[CE], lo89[CE];
      if (v < V_EARLY) {  // (GA_DECODE_FP8_PAIR 8, 32: widened before the softmax)
#pragma unroll
        for (int e = 0; e < CE; ++e) {
          lo01[e] = v_early[v < V_EARLY ? v : 0][0][e];
          lo89[e] = v_early[v < V_EARLY ? v : 0][1][e];
        }
      } else {
        ga_v_pairs(v0, v1, lo01);
        ga_v_pairs(v8, v9, lo89);
      }
#pragma unroll
      for (int u = 0; u < MSUB; ++u)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          ga_mma(o[v][u][nt], lo01[2 * u], lo01[2 * u + 1], lo89[2 * u], lo89[2 * u + 1], pt[nt][0],
                 pt[nt][1]);
    }
    __syncwarp();
  }
  GA_TIMING_WARP(2);
  ga_cp_wait<0>();

  // [stage 8: sync_state] the warps' states into shared memory.
  // Combine the warps: each writes its max, sum and unnormalized output per head.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int d = 4; d < 32; d <<= 1) {
      l_run[nt][0] += __shfl_xor_sync(0xffffffffu, l_run[nt][0], d);
      l_run[nt][1] += __shfl_xor_sync(0xffffffffu, l_run[nt][1], d);
    }
  __syncthreads();  // every warp is done with its ring before the combine reuses it
  float* red_o = reinterpret_cast<float*>(smem);                     // [NW][16][DIMS_PAD]
  float* red_m = red_o + NW * GA_DECODE_HEADS_PER_BLOCK * DIMS_PAD;  // [NW][16]
  float* red_l = red_m + NW * GA_DECODE_HEADS_PER_BLOCK;             // [NW][16]
  float* part_o = red_l + NW * GA_DECODE_HEADS_PER_BLOCK;            // [16][HEAD_SIZE], cluster
  float* part_lse = part_o + GA_DECODE_HEADS_PER_BLOCK * HEAD_SIZE;  // [16], cluster
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int h = nt * 8 + 2 * t + k;
      if (g == 0) {
        red_m[warp * GA_DECODE_HEADS_PER_BLOCK + h] = m_run[nt][k];
        red_l[warp * GA_DECODE_HEADS_PER_BLOCK + h] = l_run[nt][k];
      }
      float* row = red_o + (warp * GA_DECODE_HEADS_PER_BLOCK + h) * DIMS_PAD;
#pragma unroll
      for (int v = 0; v < VGROUPS; ++v) {
        if (8 * v >= LIVE_CHUNKS) continue;
        // (fp8 KV head pairs: only the column's own head's half, the one the merge reads)
        if (GA_PAIR_FP8 && (8 * v * CE >= HEAD_SIZE) != (h >= GROUP)) continue;
        float* dst = row + (g + 8 * v) * CE;
#pragma unroll
        for (int u = 0; u < MSUB; u += 2) {
          // Element 2u of the chunk is o[..][u][nt][k], element 2u + 1 is o[..][u][nt][k + 2].
          *reinterpret_cast<float4*>(GA_PAIR_FP8 ? GA_RED_AT(warp, h, (g + 8 * v) * CE + 2 * u)
                                                 : dst + 2 * u) =
              make_float4(o[v][u][nt][k], o[v][u][nt][k + 2], o[v][u + 1][nt][k],
                          o[v][u + 1][nt][k + 2]);
        }
      }
    }
  }
  __syncthreads();
  GA_TIMING_BLOCK(44);

  // [stage 9: the block's output] merge the warps; one split: the output, else the partials.
#ifdef GA_Q_E4M3
#define GA_Q8_OUT_SCALE(at)                                                           \
  ((q8.v_descale ? q8.v_descale[at] : ga_kv_scale(p.scales.v_scale_ptr, p.v_scale)) * \
   KV_WIDEN_SCALE)
  const float out_scale = GA_Q8_OUT_SCALE(descale_at);
  const float out_scale2 = PG == 2 ? GA_Q8_OUT_SCALE(descale_at2) : out_scale;
#else
  const float out_scale = ga_kv_scale(p.scales.v_scale_ptr, p.v_scale) * KV_WIDEN_SCALE;
#endif
  constexpr int D4 = HEAD_SIZE / 4;
  if constexpr (CLUSTER_PUSH) {
    if (cluster) ga_cluster_wait();  // every block's mbarrier is initialized
  }
#ifdef GA_Q_E4M3
#define GA_OUT_SCALE (PG == 2 && h >= GROUP ? out_scale2 : out_scale)
#else
#define GA_OUT_SCALE out_scale
#endif
  // [policy: pair epilogue] fp8 KV head pairs, one split: a thread merges 8 elements of a head (one
  // pass over the 2 x 4 heads x 128 outputs of 128 threads, the warps' weights computed once
  // an item) and writes them in one 16-byte store.
  // (GA_DECODE_FP8_PAIR 4: the threads of lanes 4..7 mod 8 load the second 4 elements first:
  // then each quarter warp's loads cover the 32 banks once.)
  if constexpr (GA_PAIR_FP8 && (GA_DECODE_FP8_PAIR & 1) != 0) {
    if (num_splits == 1) {
      constexpr int D8 = HEAD_SIZE / 8;
      const int s = GA_RED_SWZ ? (tid >> 2) & 1 : 0;
      for (int i = tid; i < heads_here * D8; i += GA_DECODE_THREADS) {
        const int h = i / D8, d = (i - h * D8) * 8;
        float wm[NW], mx = GA_NEG_INF, l = 0.0f, y[8] = {};
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          wm[w] = red_m[w * GA_DECODE_HEADS_PER_BLOCK + h];
          mx = fmaxf(mx, wm[w]);
        }
#pragma unroll
        for (int w = 0; w < NW; ++w) {
          const float f = wm[w] == GA_NEG_INF ? 0.0f : ga_exp2(wm[w] - mx);
          l += f * red_l[w * GA_DECODE_HEADS_PER_BLOCK + h];
          const float4 a =
              *reinterpret_cast<const float4*>(GA_RED_AT(w, h, GA_COL_HALF(h) + d + 4 * s));
          const float4 b =
              *reinterpret_cast<const float4*>(GA_RED_AT(w, h, GA_COL_HALF(h) + d + 4 - 4 * s));
          y[0] += f * a.x, y[1] += f * a.y, y[2] += f * a.z, y[3] += f * a.w;
          y[4] += f * b.x, y[5] += f * b.y, y[6] += f * b.z, y[7] += f * b.w;
        }
        if (s) {  // y[0..3] hold elements d + 4.., y[4..7] elements d..
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float z = y[k];
            y[k] = y[k + 4];
            y[k + 4] = z;
          }
        }
        const int head = col_head(h);
        const float r =
            HAS_SINKS ? GA_OUT_SCALE * ga_sink_normalizer(mx, l, ga_sink_log2(p.terms, head, true))
                      : GA_OUT_SCALE / l;
        *reinterpret_cast<uint4*>(ga_output_row(p, col_token(h), head) + d) =
            make_uint4(ga_pack2(y[0] * r, y[1] * r), ga_pack2(y[2] * r, y[3] * r),
                       ga_pack2(y[4] * r, y[5] * r), ga_pack2(y[6] * r, y[7] * r));
#ifdef GA_WRITE_LSE
        if (d == 0)
          ga_store_lse(p, col_token(h), head, ga_lse(mx, l, ga_sink_log2(p.terms, head, true)));
#endif
      }
      GA_TIMING_WARP(3);
      return;
    }
  }
  for (int i = tid; i < heads_here * D4; i += GA_DECODE_THREADS) {
    const int h = i / D4, d = (i - h * D4) * 4;
    float mx = GA_NEG_INF;
#pragma unroll
    for (int w = 0; w < NW; ++w) mx = fmaxf(mx, red_m[w * GA_DECODE_HEADS_PER_BLOCK + h]);
    float l = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float mw = red_m[w * GA_DECODE_HEADS_PER_BLOCK + h];
      const float f = mw == GA_NEG_INF ? 0.0f : ga_exp2(mw - mx);
      l += f * red_l[w * GA_DECODE_HEADS_PER_BLOCK + h];
      const float4 x = *reinterpret_cast<const float4*>(
          GA_PAIR_FP8
              ? GA_RED_AT(w, h, GA_COL_HALF(h) + d)
              : red_o + (w * GA_DECODE_HEADS_PER_BLOCK + h) * DIMS_PAD + GA_COL_HALF(h) + d);
      acc.x += f * x.x;
      acc.y += f * x.y;
      acc.z += f * x.z;
      acc.w += f * x.w;
    }
    // One split: the sink joins here; several: in the combine of the splits. (Multi-token: a
    // column that saw no key here has l = 0 and contributes a zero output with lse -inf.)
    const float r =
        HAS_SINKS && num_splits == 1
            ? GA_OUT_SCALE * ga_sink_normalizer(mx, l, ga_sink_log2(p.terms, col_head(h), true))
        : EMPTY_SPLITS && l == 0.0f ? 0.0f
                                    : GA_OUT_SCALE / l;
    acc.x *= r;
    acc.y *= r;
    acc.z *= r;
    acc.w *= r;
    const int head = col_head(h), token = col_token(h);
    if (num_splits == 1) {
      ga_store4(ga_output_row(p, token, head) + d, acc);
#ifdef GA_WRITE_LSE
      if (d == 0) ga_store_lse(p, token, head, ga_lse(mx, l, ga_sink_log2(p.terms, head, true)));
#endif
    } else if (cluster) {
      if constexpr (CLUSTER_PUSH) {
        const unsigned rank = static_cast<unsigned>(i % num_splits);
        const int recv_cap = (heads_here * D4 + num_splits - 1) / num_splits;
        const unsigned slot = static_cast<unsigned>(split * recv_cap + i / num_splits);
        const unsigned mbar = ga_cluster_addr_of(ga_cluster_recv(smem), rank);
        ga_st_async4(mbar + 16 + slot * 16, acc, mbar);
        ga_st_async1(mbar + 16 + ga_decode_cluster_slots(HEAD_SIZE) * 16 + slot * 4,
                     mx + __log2f(l), mbar);
      } else {
        *reinterpret_cast<float4*>(part_o + h * HEAD_SIZE + d) = acc;
        if (d == 0) part_lse[h] = mx + __log2f(l);
      }
    } else {
      const long long row =
          (static_cast<long long>(token) * p.num_heads + head) * p.max_splits + split;
      *reinterpret_cast<float4*>(p.partial_out + row * HEAD_SIZE + d) = acc;
      if (d == 0) p.partial_lse[row] = mx + __log2f(l);
    }
  }
  // [stage 10: combine the splits] in the cluster's shared memory, or by the last arrival.
  GA_TIMING_WARP(3);
  if (num_splits == 1) return;
  if constexpr (CLUSTER_PUSH) {
    if (cluster) {
      // This block's items: every split's outputs in the receive area once the mbarrier completes.
      const int items = heads_here * D4;
      const int mine = items > split ? (items - split + num_splits - 1) / num_splits : 0;
      const int recv_cap = (items + num_splits - 1) / num_splits;
      const unsigned recv_mbar = ga_cluster_recv(smem);
      ga_mbar_wait0(recv_mbar);
      GA_TIMING_BLOCK(46);
      const float4* recv_o =
          reinterpret_cast<const float4*>(smem + (recv_mbar - ga_smem_addr(smem)) + 16);
      const float* recv_lse =
          reinterpret_cast<const float*>(recv_o + ga_decode_cluster_slots(HEAD_SIZE));
      for (int k = tid; k < mine; k += GA_DECODE_THREADS) {
        const int i = split + num_splits * k;
        const int h = i / D4, d = (i - h * D4) * 4;
        float lse;
        ga_store4(ga_output_row(p, col_token(h), col_head(h)) + d,
                  ga_combine_splits<16>(
                      num_splits, ga_sink_log2(p.terms, col_head(h), true),
                      [&](int sp, float& ls, float4& x) {
                        ls = recv_lse[sp * recv_cap + k];
                        x = recv_o[sp * recv_cap + k];
                      },
                      lse));
#ifdef GA_WRITE_LSE
        if (d == 0) ga_store_lse(p, col_token(h), col_head(h), lse);
#endif
      }
      GA_TIMING_BLOCK(48);
      ga_cluster_arrive_relaxed();
      ga_cluster_wait();
      return;
    }
  }
  if (cluster) {
    // Every split's output and log2-sum-exp sit in its block's shared memory; block `split`
    // combines items split, split + num_splits, ... from all of them, and the second barrier
    // keeps every block's shared memory alive until all have read it.
    ga_cluster_sync();
    GA_TIMING_BLOCK(46);  // (timing build: the cluster barrier returned)
    for (int i = split + num_splits * tid; i < heads_here * D4;
         i += num_splits * GA_DECODE_THREADS) {
      const int h = i / D4, d = (i - h * D4) * 4;
      float lse;
      ga_store4(ga_output_row(p, col_token(h), col_head(h)) + d,
                ga_combine_splits<4>(
                    num_splits, ga_sink_log2(p.terms, col_head(h), true),
                    [&](int sp, float& ls, float4& x) {
                      ls = ga_cluster_ld(ga_cluster_addr(part_lse + h, sp));
                      x = ga_cluster_ld4(ga_cluster_addr(part_o + h * HEAD_SIZE + d, sp));
                    },
                    lse));
#ifdef GA_WRITE_LSE
      if (d == 0) ga_store_lse(p, col_token(h), col_head(h), lse);
#endif
    }
    GA_TIMING_BLOCK(48);
    ga_cluster_sync();
    return;
  }

  // The split that finishes last combines: each block publishes its partial, counts itself on
  // its (request, grid y) counter, and the one that sees num_splits - 1 reads every split's
  // partial. The increment wraps at num_splits - 1, so the counter is back at zero for the next
  // launch. One thread counts for the block, with one acquire-release atomic (no separate
  // fences): the barrier orders the block's partial stores before thread 0's release
  // (cumulative); in the last block its acquire and the barrier order every thread's loads after
  // the other blocks' stores (a fence in each thread cost a memory barrier wait in each warp).
  __shared__ unsigned ga_last_arrival;
  __syncthreads();
  if (tid == 0) {
    unsigned done;
    asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;"
                 : "=r"(done)
                 : "l"(p.counters + static_cast<long long>(req) * gridDim.y + blockIdx.y),
                   "r"(static_cast<unsigned>(num_splits - 1))
                 : "memory");
    ga_last_arrival = done == static_cast<unsigned>(num_splits - 1);
    GA_TIMING_BLOCK(46);
  }
  __syncthreads();
  if (!ga_last_arrival) return;
  for (int i = tid; i < heads_here * D4; i += GA_DECODE_THREADS) {
    const int h = i / D4, d = (i - h * D4) * 4;
    const int head = col_head(h), token = col_token(h);
    const long long row0 = (static_cast<long long>(token) * p.num_heads + head) * p.max_splits;
    const float* lse = p.partial_lse + row0;
    const float* part = p.partial_out + row0 * HEAD_SIZE + d;
    float lse_out;
    ga_store4(ga_output_row(p, token, head) + d,
              ga_combine_splits<16>(
                  num_splits, ga_sink_log2(p.terms, head, true),
                  [&](int sp, float& ls, float4& x) {
                    ls = __ldcg(lse + sp);
                    x = __ldcg(reinterpret_cast<const float4*>(part + sp * HEAD_SIZE));
                  },
                  lse_out));
#ifdef GA_WRITE_LSE
    if (d == 0) ga_store_lse(p, token, head, lse_out);
#endif
  }
  GA_TIMING_BLOCK(48);
}
