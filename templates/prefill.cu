// SPDX-License-Identifier: Apache-2.0
// Prefill attention over the paged KV cache (vLLM v1 flash semantics): variable-length queries,
// causal, GQA, sliding window, soft cap, fp8 KV. Covers chunked prefill and prefix caching: the
// new tokens of a request attend to its cached context and, causally, to themselves. Spec axes
// make it non-causal (GA_NON_CAUSAL: encoder and cross attention) and read dense K/V instead of
// pages (GA_DENSE_KV: encoder-only attention, MultiHeadAttention; see PagedKvView).
//
// Grid: x = query row tiles (reversed so the longest causal tiles start first), y = request
// (first_req + blockIdx.y), z = KV head. The GROUP query heads of a KV head are packed into the
// M dimension: row r of a request is query token r / GROUP, head kv_head * GROUP + r % GROUP, so
// every K/V tile read from the pages serves all the heads that share it.
//
// Each block has 4 warps; a warp owns PF_MT m16 row tiles (32 rows up to head size 128, else 16)
// and runs FlashAttention-2: S = Q K^T and O += P V with mma.sync m16n8k16 (fp16/bf16 in, fp32
// accumulate), online softmax in the log2 domain. Two row tiles per warp let every K/V fragment
// read from shared memory feed two MMAs.
// K/V tiles come from the pages through cp.async into padded shared memory rows (no bank
// conflicts for ldmatrix), double-buffered. fp8 tiles land raw, double-buffered, and each thread
// converts the chunks it loaded into the fp16/bf16 tile (exact: every e4m3/e5m2 value is
// representable); k_scale folds into the score scale and v_scale into the output.
// Head sizes that are not multiples of 16 are padded with zero columns in shared memory.
// Block-sparse prefill (GA_BLOCK_SPARSE, GaBlockSparse): every tile is masked per (row, key) by
// the rows' block patterns, and a key tile that no row of the block sees (a block-wide vote) is
// neither loaded nor computed.
// KV_LAYOUT 2 (vLLM's legacy PagedAttention caches, key [blocks, kv_heads, head / x, block, x],
// value [blocks, kv_heads, head, block]): the K tile is the same [key][dim] tile, read from
// other addresses; the V tile is transposed, [dim][key] with the keys contiguous (the cache's own
// order), so that the P V MMA's B fragments come from the non-transposed ldmatrix (see
// pf_load_vt).

// The geometry is params.h's (ga_prefill_*), which the host launch code reads too.
constexpr int PF_HEAD_PAD = ga_prefill_head_pad(HEAD_SIZE);  // MMA k-dimension of Q.K^T
constexpr int PF_WARPS = GA_PREFILL_WARPS;
constexpr int PF_THREADS = GA_PREFILL_THREADS;
constexpr int PF_MT = ga_prefill_row_tiles(HEAD_SIZE);  // m16 row tiles per warp
constexpr int PF_BLOCK_M = ga_prefill_block_m(HEAD_SIZE);
constexpr int PF_BLOCK_N = ga_prefill_block_n(HEAD_SIZE);
constexpr bool PF_Q_IN_REGS = PF_HEAD_PAD * PF_MT <= 128;   // else Q fragments re-read from smem
constexpr int PF_QF = PF_Q_IN_REGS ? PF_HEAD_PAD / 16 : 1;  // Q fragments held in registers
constexpr int PF_ROW = ga_prefill_row_elems(HEAD_SIZE);     // smem row stride (16-bit elements)
constexpr int PF_STAGES = ga_prefill_stages(KV_FP8);        // 16-bit K/V tile buffers
constexpr int PF_CHUNKS = HEAD_SIZE / 8;                    // 8-element chunks per row
constexpr int PF_SMEM_16 = (PF_BLOCK_M + 2 * PF_STAGES * PF_BLOCK_N) * PF_ROW * 2;
constexpr bool PF_LEGACY = KV_LAYOUT == 2;
// Legacy layout: x of the key cache (elements in 16 bytes, or the spec's key_x) and the
// transposed V tile's geometry.
// A V^T row (one dimension) holds PF_BLOCK_N keys, PF_VT_CPR 16-byte chunks of 8 keys, with no
// padding; chunk c of row d sits at chunk c ^ pf_vt_swizzle(d), which spreads the 8 rows an
// ldmatrix reads (dims d0..d0+7 at one chunk) over all 32 banks: PF_VT_RPL rows share a
// 128-byte line, and the XOR key runs through every chunk of the line as d % 8 does.
#ifdef GA_KEY_X
constexpr int PF_LEGACY_X = GA_KEY_X;  // spec key_x: x elements that are not 16 bytes
#else
constexpr int PF_LEGACY_X = KV_FP8 ? 16 : 8;
#endif
static_assert(PF_LEGACY_X % 8 == 0, "the K loads take 8-element chunks inside one x group");
constexpr int PF_VT_CPR = PF_BLOCK_N / 8;  // 16-byte chunks (8 keys of 16-bit) per V^T row
constexpr int PF_VT_RPL = 8 / PF_VT_CPR;   // V^T rows per 128-byte line
static_assert(PF_VT_CPR * PF_VT_RPL == 8, "a V^T row is 64 or 128 bytes");
static_assert(PF_HEAD_PAD * PF_BLOCK_N <= PF_BLOCK_N * PF_ROW, "V^T fits the V tile buffer");
__device__ __forceinline__ int pf_vt_swizzle(int d) { return (d & 7) / PF_VT_RPL; }
// Keys per 16-byte chunk of one dimension in the legacy value cache (8 16-bit, 16 fp8) and the
// V^T load's walk: a tile's keys fall into segments of PF_VT_SEG = gcd(block size, tile) keys,
// each inside one cache block (segments and blocks both start at multiples of PF_VT_SEG; whole
// blocks when the block size divides the tile, e.g. not for 48 or 96), and one dimension's keys
// of a segment are contiguous in the cache, its dimensions too when the segment is a whole block.
constexpr int PF_VT_TOK = KV_FP8 ? 16 : 8;
constexpr int PF_VT_SEG = ga_gcd(BLOCK_SIZE, PF_BLOCK_N);
constexpr int PF_VT_CPS = PF_VT_SEG / PF_VT_TOK;  // chunks per dimension of a segment
constexpr int PF_SMEM_BYTES = ga_prefill_smem_bytes(HEAD_SIZE, KV_FP8);

__device__ __forceinline__ unsigned pf_smem_addr(const void* p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return static_cast<unsigned>(a);
}

// 16 (or 8) bytes global -> shared; bytes beyond src_bytes (0 or the full size) are zero-filled.
__device__ __forceinline__ void pf_cp_async16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void pf_cp_async8(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void pf_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void pf_cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void pf_ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void pf_ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b, m16n8k16, row.col, fp32 accumulate.
__device__ __forceinline__ void pf_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                       unsigned b1) {
  if (IS_BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Calls f(row, c) for every 8-element chunk c of the rows [0, ROWS) of a tile that thread tid
// handles: chunks tid, tid + PF_THREADS, ... in row-major order (CHUNK_MAJOR: in chunk-major
// order, consecutive threads on consecutive rows of one chunk). The Q and K/V loads and the fp8
// conversion all use this map, so each thread converts exactly the chunks it loaded.
template <int ROWS, bool CHUNK_MAJOR = false, class F>
__device__ __forceinline__ void pf_for_each_chunk(int tid, const F& f) {
  constexpr int TOTAL = ROWS * PF_CHUNKS;
  constexpr int ITERS = (TOTAL + PF_THREADS - 1) / PF_THREADS;
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const int idx = tid + i * PF_THREADS;
    if (TOTAL % PF_THREADS == 0 || idx < TOTAL) {
      if (CHUNK_MAJOR) {
        const int c = idx / ROWS;
        f(idx - c * ROWS, c);
      } else {
        const int row = idx / PF_CHUNKS;
        f(row, idx - row * PF_CHUNKS);
      }
    }
  }
}

// Legacy layout: the element offset of column col of key `key` within its head of a key cache
// block: [head_size / x, block_size, x].
__device__ __forceinline__ long long pf_legacy_key_col(int key, int col) {
  return (col / PF_LEGACY_X) * (BLOCK_SIZE * PF_LEGACY_X) + (key % BLOCK_SIZE) * PF_LEGACY_X +
         col % PF_LEGACY_X;
}
// Legacy layout: the K tile is chunk-major like the cache, [chunk][key] with 16-byte chunks of
// 8 dimensions (PF_HEAD_PAD / 8 of them, padding chunks zero): each cp.async phase of 8 lanes then
// reads and writes 128 contiguous bytes (a [key][dim] tile filled from the chunk-major cache
// scatters every lane to its own sector), and ldmatrix rows (8 keys of one chunk) are 128
// contiguous bytes. The byte offset of key row `key`'s chunk `chunk`:
__device__ __forceinline__ unsigned pf_legacy_k_off(int key, int chunk) {
  return static_cast<unsigned>(chunk * PF_BLOCK_N + key) * 16u;
}
static_assert(PF_HEAD_PAD * PF_BLOCK_N <= PF_BLOCK_N * PF_ROW, "a [chunk][key] K tile fits");

// Legacy V^T: calls f(d, tc) for every 16-byte chunk of the value cache in a tile (dimension d,
// the tile's keys [tc * PF_VT_TOK, (tc + 1) * PF_VT_TOK)) that thread tid handles: segment by
// segment, dimension-major within a segment, so that neighbouring threads read neighbouring 16
// bytes of the cache. The load and the fp8 conversion share it, so each thread converts exactly
// the chunks it loaded.
template <class F>
__device__ __forceinline__ void pf_for_each_vt_chunk(int tid, const F& f) {
  constexpr int PER_SEG = HEAD_SIZE * PF_VT_CPS;
  constexpr int TOTAL = PER_SEG * (PF_BLOCK_N / PF_VT_SEG);
  constexpr int ITERS = (TOTAL + PF_THREADS - 1) / PF_THREADS;
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const int idx = tid + i * PF_THREADS;
    if (TOTAL % PF_THREADS == 0 || idx < TOTAL) {
      const int seg = idx / PER_SEG;
      const int rem = idx - seg * PER_SEG;
      const int d = rem / PF_VT_CPS;
      f(d, seg * PF_VT_CPS + rem - d * PF_VT_CPS);
    }
  }
}

// Legacy layout: the values of keys [n0, n0 + PF_BLOCK_N) of one KV head into the V^T tile at
// dst ([HEAD_SIZE][PF_BLOCK_N] 16-bit, chunks swizzled by pf_vt_swizzle) or, fp8, the raw V^T
// staging tile ([HEAD_SIZE][PF_BLOCK_N] bytes, unswizzled). A chunk's 8 (16) keys lie in one cache
// block (block sizes are multiples of 16); keys at or past kv_end are zero-filled (a chunk
// partly inside copies only its keys inside), and a chunk wholly past it reads nothing.
__device__ __forceinline__ void pf_load_vt(const PrefillParams& p, const int* block_row,
                                           int kv_head, int n0, int kv_end, unsigned dst, int tid) {
  constexpr int EB = KV_FP8 ? 1 : 2;  // bytes per cache element
  const long long head_off = static_cast<long long>(kv_head) * p.kv.cache_head_stride;
  const ga_u8* vc = static_cast<const ga_u8*>(p.kv.value_cache);
  pf_for_each_vt_chunk(tid, [&](int d, int tc) {
    const int key = n0 + tc * PF_VT_TOK;
    const int n = min(kv_end - key, PF_VT_TOK);  // keys of the chunk inside the request
    long long off = 0;
    if (n > 0)
      off = ga_prefill_key_offset(p, block_row, 0, key) + head_off +
            static_cast<long long>(d) * BLOCK_SIZE + key % BLOCK_SIZE;
    const unsigned so =
        KV_FP8 ? d * PF_BLOCK_N + tc * 16 : (d * PF_BLOCK_N + (tc ^ pf_vt_swizzle(d)) * 8) * 2;
    pf_cp_async16(dst + so, vc + off * EB, n > 0 ? n * EB : 0);
  });
}

// Loads the K and V rows [n0, n0 + PF_BLOCK_N) of one KV head from their pages (GA_DENSE_KV:
// from the dense rows after kv_row0); rows at or past kv_end are zero-filled and read nothing
// (not even the block table). 16-bit caches go straight into the tile buffers, fp8 caches into
// the raw staging buffers. Legacy layout: V goes through pf_load_vt.
__device__ __forceinline__ void pf_load_kv(const PrefillParams& p, const int* block_row,
                                           int kv_row0, int kv_head, int n0, int kv_end,
                                           unsigned k_dst, unsigned v_dst, int tid) {
  const long long head_off = static_cast<long long>(kv_head) * p.kv.cache_head_stride;
  // The legacy 16-bit K tile is chunk-major (pf_legacy_k_off), and so is this walk over it:
  // consecutive lanes take consecutive keys of one chunk.
  pf_for_each_chunk<PF_BLOCK_N, PF_LEGACY && !KV_FP8>(tid, [&](int row, int c) {
    const int key = n0 + row;
    const bool valid = key < kv_end;
    long long off = 0;
    if (valid)
      off = ga_prefill_key_offset(p, block_row, kv_row0, key) + head_off +
            (PF_LEGACY ? pf_legacy_key_col(key, c * 8) : c * 8);
    if (KV_FP8) {
      const ga_u8* kc = static_cast<const ga_u8*>(p.kv.key_cache);
      const ga_u8* vc = static_cast<const ga_u8*>(p.kv.value_cache);
      const unsigned so = static_cast<unsigned>(row * HEAD_SIZE + c * 8);
      pf_cp_async8(k_dst + so, kc + off, valid ? 8 : 0);
      if (!PF_LEGACY) pf_cp_async8(v_dst + so, vc + off, valid ? 8 : 0);
    } else {
      const ga_u16* kc = static_cast<const ga_u16*>(p.kv.key_cache);
      const ga_u16* vc = static_cast<const ga_u16*>(p.kv.value_cache);
      const unsigned so = static_cast<unsigned>((row * PF_ROW + c * 8) * 2);
      pf_cp_async16(k_dst + (PF_LEGACY ? pf_legacy_k_off(row, c) : so), kc + off, valid ? 16 : 0);
      if (!PF_LEGACY) pf_cp_async16(v_dst + so, vc + off, valid ? 16 : 0);
    }
  });
  if (PF_LEGACY) pf_load_vt(p, block_row, kv_head, n0, kv_end, v_dst, tid);
}

// fp8: 8 cache bytes widened to 8 fp16/bf16 values (exact).
__device__ __forceinline__ uint4 pf_widen8(const ga_u8* b) {
  uint4 out;
  unsigned* o = reinterpret_cast<unsigned*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j)
    o[j] = ga_pack2(ga_kv_fp8_to_f32(b[2 * j]), ga_kv_fp8_to_f32(b[2 * j + 1]));
  return out;
}

// fp8: converts the chunks this thread loaded from the raw staging tile into the 16-bit tile.
// (chunk_major: the legacy K tile, pf_legacy_k_off.)
template <bool chunk_major = false>
__device__ __forceinline__ void pf_convert_kv(const ga_u8* raw, ga_u16* dst, int tid) {
  pf_for_each_chunk<PF_BLOCK_N>(tid, [&](int row, int c) {
    const uint2 in = *reinterpret_cast<const uint2*>(raw + row * HEAD_SIZE + c * 8);
    if (chunk_major) {
      *reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(dst) + pf_legacy_k_off(row, c)) =
          pf_widen8(reinterpret_cast<const ga_u8*>(&in));
    } else {
      *reinterpret_cast<uint4*>(dst + row * PF_ROW + c * 8) =
          pf_widen8(reinterpret_cast<const ga_u8*>(&in));
    }
  });
}

// fp8, legacy layout: the same for the raw V^T tile; each 16 raw keys of a dimension become two
// swizzled 16-byte chunks of the 16-bit V^T tile.
__device__ __forceinline__ void pf_convert_vt(const ga_u8* raw, ga_u16* dst, int tid) {
  pf_for_each_vt_chunk(tid, [&](int d, int tc) {
    const uint4 in = *reinterpret_cast<const uint4*>(raw + d * PF_BLOCK_N + tc * 16);
    const ga_u8* b = reinterpret_cast<const ga_u8*>(&in);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<uint4*>(dst + d * PF_BLOCK_N + ((2 * tc + h) ^ pf_vt_swizzle(d)) * 8) =
          pf_widen8(b + 8 * h);
  });
}

// GA_BLOCK_SPARSE: row `row` of a tile's query block qb and its head's stride residue res: the
// key blocks kb with kb % vert_stride == res are the head's vertical stripes (ga_bsp_visible's
// (kb + off) % vert_stride == 0 with off = ga_bsp_offset in [0, vert_stride), for kb >= 0).
__device__ __forceinline__ void pf_bsp_row(const PrefillParams& p, int row, int pos, int kv_head,
                                           int& qb, int& res) {
  qb = pos >= 0 ? pos / p.bsp.block : 0;
  const int off = ga_bsp_offset(p.bsp, kv_head * GROUP + row % GROUP);
  res = off == 0 ? 0 : p.bsp.vert_stride - off;
}
// GA_BLOCK_SPARSE, for the tile [n0, n0 + PF_BLOCK_N) and this thread's rows (pf_bsp_row's qb and
// res; pos: their positions, -1 past the request): vis bit pf_bsp_bit(i, r, j) set where row
// (i, r)'s pattern sees the n8 key group j (keys n0 + 8 j ..; a sparse block is a multiple of 16
// keys, so each group lies in one), and the return value nonzero where some row sees a key of the
// tile causally (a sparse block starting at or before the row's position). One division and one
// remainder a tile (its vote, one tile ahead, which keeps the mask for it), none per element or
// row: the loop walks the tile's sparse blocks, stepping kb % vert_stride.
__device__ constexpr int pf_bsp_bit(int i, int r, int j) {
  return (i * 2 + r) * (PF_BLOCK_N / 8) + j;
}
static_assert(pf_bsp_bit(PF_MT - 1, 1, PF_BLOCK_N / 8 - 1) < 32, "one word holds a tile's mask");
__device__ __forceinline__ int pf_bsp_tile_vis(const PrefillParams& p, int n0,
                                               const int (&qb)[PF_MT][2],
                                               const int (&res)[PF_MT][2],
                                               const int (&pos)[PF_MT][2], unsigned& vis) {
  int need = 0;
  vis = 0u;
  const int block = p.bsp.block, vs = p.bsp.vert_stride;
  int kb = n0 / block;
  int km = kb % vs;  // kb % vert_stride, stepped with kb
  for (int k0 = kb * block; k0 < n0 + PF_BLOCK_N; k0 += block) {
    const int lo = max(k0 - n0, 0) / 8;
    const int hi = min(k0 + block - n0, PF_BLOCK_N) / 8;   // groups [lo, hi)
    const unsigned bits = ((1u << (hi - lo)) - 1u) << lo;  // at most PF_BLOCK_N / 8 = 8 groups
#pragma unroll
    for (int i = 0; i < PF_MT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (qb[i][r] - kb < p.bsp.local_blocks || km == res[i][r]) {
          vis |= bits << pf_bsp_bit(i, r, 0);
          need |= k0 <= pos[i][r] ? 1 : 0;
        }
    ++kb;
    km = km + 1 == vs ? 0 : km + 1;
  }
  return need;
}
// GA_BLOCK_SPARSE: whether some row of the block sees a key of the tile [n0, n0 + PF_BLOCK_N)
// by the block pattern (and causally). A block-wide vote: every thread of the block calls it.
// vis: pf_bsp_tile_vis's mask of this thread's rows, for pf_tile when the tile comes.
__device__ __forceinline__ bool pf_bsp_tile_needed(const PrefillParams& p, int n0,
                                                   const int (&qb)[PF_MT][2],
                                                   const int (&res)[PF_MT][2],
                                                   const int (&pos)[PF_MT][2], unsigned& vis) {
  return __syncthreads_or(pf_bsp_tile_vis(p, n0, qb, res, pos, vis)) != 0;
}

// Whether masked tiles (causal or window: ga_prefill_tile_masked) get their own inlined copy of
// pf_tile (PF_MASKED, the mask applied as the scores are formed, beside PF_UNMASKED) or share one
// body with the unmasked tiles (PF_MASK_IF: the mask is a pass of its own under the
// block-uniform `mask`). One body emits the tile's MMAs once (about a third less PTX and compile
// time) and spills less; measured on an H200 (docs/jit-cost-cpu-2026-11-26.txt, session 4) it
// made the legacy-layout 16-bit prefill 23-25% faster, but the flash-layout bf16 rows 1-3% and the
// e4m3 row 2% slower, so only the legacy 16-bit kernels take it (legacy fp8 was not measured).
// (A function, not a namespace-scope constant: that would add a global to the module.)
__device__ constexpr bool pf_one_body() { return PF_LEGACY && !KV_FP8; }
enum PfMask { PF_UNMASKED, PF_MASKED, PF_MASK_IF };

// One KV tile for one warp's PF_MT * 16 rows: S = Q K^T, online softmax, O += P V.
template <PfMask MASK>
__device__ __forceinline__ void pf_tile(bool mask, const PrefillParams& p,
                                        const GaPrefillScales& sc,
                                        const unsigned (&qf)[PF_MT][PF_QF][4], unsigned q_addr,
                                        unsigned k_addr, unsigned v_addr, int n0, int kv_end,
                                        int lane, const int (&pos)[PF_MT][2],
                                        const float (&slope)[PF_MT][2], unsigned bsp_vis,
                                        float (&m)[PF_MT][2], float (&l)[PF_MT][2],
                                        float (&o)[PF_MT][PF_HEAD_PAD / 8][4]) {
  constexpr int NB = PF_BLOCK_N / 8;
  float s[PF_MT][NB][4];
#pragma unroll
  for (int i = 0; i < PF_MT; ++i)
#pragma unroll
    for (int j = 0; j < NB; ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.f;

  // ldmatrix lane addressing (see the fragment layouts of m16n8k16).
  const int mi = lane >> 3;
  const unsigned k_lane = PF_LEGACY
                              ? k_addr + pf_legacy_k_off((mi >> 1) * 8 + (lane & 7), mi & 1)
                              : k_addr + (((mi >> 1) * 8 + (lane & 7)) * PF_ROW + (mi & 1) * 8) * 2;
#pragma unroll
  for (int ks = 0; ks < PF_HEAD_PAD / 16; ++ks) {
    unsigned a[PF_MT][4];
#pragma unroll
    for (int i = 0; i < PF_MT; ++i) {
      if (PF_Q_IN_REGS) {
        a[i][0] = qf[i][ks][0];
        a[i][1] = qf[i][ks][1];
        a[i][2] = qf[i][ks][2];
        a[i][3] = qf[i][ks][3];
      } else {
        pf_ldmatrix_x4(a[i], q_addr + (i * 16 * PF_ROW + ks * 16) * 2);
      }
    }
#pragma unroll
    for (int nb2 = 0; nb2 < NB / 2; ++nb2) {
      unsigned b[4];
      pf_ldmatrix_x4(b, PF_LEGACY ? k_lane + pf_legacy_k_off(nb2 * 16, ks * 2)
                                  : k_lane + (nb2 * 16 * PF_ROW + ks * 16) * 2);
#pragma unroll
      for (int i = 0; i < PF_MT; ++i) {
        pf_mma(s[i][2 * nb2], a[i], b[0], b[1]);
        pf_mma(s[i][2 * nb2 + 1], a[i], b[2], b[3]);
      }
    }
  }

  // Scores in the log2 domain, masked, and the running row maxima (PF_MASK_IF: the mask, where
  // `mask`, and the maxima are passes of their own after the scores).
  const float ninf = __int_as_float(0xff800000);
  const int t2 = (lane & 3) * 2;
  unsigned pf[PF_MT][NB / 2][4];
#pragma unroll
  for (int i = 0; i < PF_MT; ++i) {
    float mx[2] = {ninf, ninf};
#pragma unroll
    for (int j = 0; j < NB; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[i][j][e];
        if (HAS_SOFT_CAP) {
          x = ga_soft_cap_log2(x, sc.scale / p.soft_cap, p.soft_cap * GA_LOG2E);
        } else {
          x *= sc.scale_log2;
        }
        const int key = n0 + j * 8 + t2 + (e & 1);
        if (HAS_ALIBI) x += ga_alibi_log2(slope[i][e >> 1], key, pos[i][e >> 1]);
        if (MASK == PF_MASKED && !ga_prefill_visible(pos[i][e >> 1], key, kv_end, p.window))
          x = ninf;
        if (GA_BLOCK_SPARSE && !((bsp_vis >> pf_bsp_bit(i, e >> 1, j)) & 1u)) x = ninf;
        s[i][j][e] = x;
        if (MASK != PF_MASK_IF) mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    }
    if (MASK == PF_MASK_IF) {
      if (mask) {
#pragma unroll
        for (int j = 0; j < NB; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (!ga_prefill_visible(pos[i][e >> 1], n0 + j * 8 + t2 + (e & 1), kv_end, p.window))
              s[i][j][e] = ninf;
      }
#pragma unroll
      for (int j = 0; j < NB; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[i][j][e]);
    }
    float alpha[2], m_use[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[i][r], mx[r]);
      m_use[r] = m_new == ninf ? 0.f : m_new;  // a row with nothing visible yet stays at zero
      alpha[r] = ga_exp2(m[i][r] - m_use[r]);
      m[i][r] = m_new;
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const float p0 = ga_exp2(s[i][j][0] - m_use[0]);
      const float p1 = ga_exp2(s[i][j][1] - m_use[0]);
      const float p2 = ga_exp2(s[i][j][2] - m_use[1]);
      const float p3 = ga_exp2(s[i][j][3] - m_use[1]);
      sum[0] += p0 + p1;
      sum[1] += p2 + p3;
      pf[i][j >> 1][(j & 1) * 2 + 0] = ga_pack2(p0, p1);
      pf[i][j >> 1][(j & 1) * 2 + 1] = ga_pack2(p2, p3);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[i][r] = l[i][r] * alpha[r] + sum[r];
#pragma unroll
    for (int d = 0; d < PF_HEAD_PAD / 8; ++d) {
      o[i][d][0] *= alpha[0];
      o[i][d][1] *= alpha[0];
      o[i][d][2] *= alpha[1];
      o[i][d][3] *= alpha[1];
    }
  }

  // O += P V; P's accumulator layout is already the A-operand layout. V^T (legacy layout): the
  // lanes' matrices are dims (mi >> 1) * 8 + lane % 8 of a 16-dim slab at the 8-key chunk
  // 2 * kk + (mi & 1), unswizzled by the dimension's key (d % 8 == lane % 8), so the plain
  // ldmatrix yields b0..b3 in the order the transposed one does from the [key][dim] tile.
  const unsigned v_lane = PF_LEGACY
                              ? v_addr + ((mi >> 1) * 8 + (lane & 7)) * PF_BLOCK_N * 2
                              : v_addr + (((mi & 1) * 8 + (lane & 7)) * PF_ROW + (mi >> 1) * 8) * 2;
  const int vt_key = pf_vt_swizzle(lane);
#pragma unroll
  for (int kk = 0; kk < NB / 2; ++kk) {
#pragma unroll
    for (int db2 = 0; db2 < PF_HEAD_PAD / 16; ++db2) {
      unsigned b[4];
      if (PF_LEGACY)
        pf_ldmatrix_x4(b,
                       v_lane + (db2 * 16 * PF_BLOCK_N + ((2 * kk + (mi & 1)) ^ vt_key) * 8) * 2);
      else
        pf_ldmatrix_x4_trans(b, v_lane + (kk * 16 * PF_ROW + db2 * 16) * 2);
#pragma unroll
      for (int i = 0; i < PF_MT; ++i) {
        pf_mma(o[i][2 * db2], pf[i][kk], b[0], b[1]);
        pf_mma(o[i][2 * db2 + 1], pf[i][kk], b[2], b[3]);
      }
    }
  }
}

#ifdef GA_Q_E4M3
// e4m3 queries (spec "_qe4m3"): the descales fold into the scales (ga_prefill_q8_scales,
// common.cuh); the query's bytes widen exactly to the MMA type on their way to shared memory
// (every e4m3 value is a bf16 and an fp16 value), so the 16-bit MMAs run unchanged.
extern "C" __global__ void __launch_bounds__(PF_THREADS)
    graphattn_prefill(const __grid_constant__ PrefillQ8Params params) {
  const PrefillParams& p = params.base;
  const GaQueryScales& q8 = params.q8;
#else
extern "C" __global__ void __launch_bounds__(PF_THREADS)
    graphattn_prefill(const __grid_constant__ PrefillParams p) {
#endif
  extern __shared__ __align__(16) unsigned char pf_smem[];
  GaPrefillTile tile;
  if (!ga_prefill_begin<PF_BLOCK_M, PF_BLOCK_N>(p, PF_SMEM_BYTES, PF_THREADS, tile)) return;
  const int tid = threadIdx.x;
  const int req = tile.req, kv_head = tile.kv_head, q_start = tile.q_start, ctx = tile.ctx;
  const int m0 = tile.m0, rows = tile.q_len * GROUP, pos_lo = tile.pos_lo, pos_hi = tile.pos_hi;
  const int kv_end = tile.kv_end, tile0 = tile.tile0, n_tiles = tile.n_tiles;
  const int kv_row0 = tile.kv_row0;
#ifdef GA_Q_E4M3
  const GaPrefillScales sc = ga_prefill_q8_scales(p, q8, req, kv_head);
#else
  const GaPrefillScales sc = ga_prefill_scales(p);  // after the wait in ga_prefill_begin
#endif

  ga_u16* s_q = reinterpret_cast<ga_u16*>(pf_smem);
  ga_u16* s_k = s_q + PF_BLOCK_M * PF_ROW;
  ga_u16* s_v = s_k + PF_STAGES * PF_BLOCK_N * PF_ROW;
  ga_u8* s_raw = reinterpret_cast<ga_u8*>(s_v + PF_STAGES * PF_BLOCK_N * PF_ROW);
  const unsigned q_base = pf_smem_addr(s_q);
  const unsigned k_base = pf_smem_addr(s_k);
  const unsigned v_base = pf_smem_addr(s_v);
  const unsigned raw_base = pf_smem_addr(s_raw);
  constexpr unsigned KV_TILE_BYTES = PF_BLOCK_N * PF_ROW * 2;
  constexpr unsigned RAW_TILE_BYTES = PF_BLOCK_N * HEAD_SIZE;

  // Zero padding columns (head sizes that are not multiples of 16): loads never write them.
  // Legacy layout: the K tiles' padding is chunks PF_CHUNKS.. of each, the V^T tiles' rows
  // HEAD_SIZE.. of each (the [row][PF_ROW] walk covers Q only).
  if (PF_HEAD_PAD != HEAD_SIZE && n_tiles > 0) {
    constexpr int PAD_ROWS = PF_BLOCK_M + (PF_LEGACY ? 0 : 2) * PF_STAGES * PF_BLOCK_N;
    for (int r = tid; r < PAD_ROWS; r += PF_THREADS)
      *reinterpret_cast<uint4*>(s_q + r * PF_ROW + HEAD_SIZE) = make_uint4(0, 0, 0, 0);
    constexpr int K_PAD = (PF_HEAD_PAD / 8 - PF_CHUNKS) * PF_BLOCK_N;  // chunks per K tile
    for (int i = tid; PF_LEGACY && i < PF_STAGES * K_PAD; i += PF_THREADS) {
      const int st = i / K_PAD;
      *reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(s_k + st * PF_BLOCK_N * PF_ROW) +
                                pf_legacy_k_off(i - st * K_PAD, PF_CHUNKS)) =
          make_uint4(0, 0, 0, 0);
    }
    constexpr int VT_PAD = (PF_HEAD_PAD - HEAD_SIZE) * PF_VT_CPR;  // chunks per V^T tile
    for (int i = tid; PF_LEGACY && i < PF_STAGES * VT_PAD; i += PF_THREADS) {
      const int st = i / VT_PAD;
      *reinterpret_cast<uint4*>(s_v + st * PF_BLOCK_N * PF_ROW + HEAD_SIZE * PF_BLOCK_N +
                                (i - st * VT_PAD) * 8) = make_uint4(0, 0, 0, 0);
    }
  }

  const int* block_row = p.kv.block_table + static_cast<long long>(req) * p.kv.block_table_stride;
  // Block-sparse: this thread's rows' (pf_tile's rows, below) positions (-1 past the request),
  // query blocks and stride residues (pf_bsp_row), and whether the current tile is loaded and
  // computed (block-uniform).
  int bsp_pos[PF_MT][2] = {}, bsp_qb[PF_MT][2] = {}, bsp_res[PF_MT][2] = {};
#pragma unroll
  for (int i = 0; i < PF_MT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + (tid >> 5) * 16 * PF_MT + i * 16 + ((tid & 31) >> 2) + r * 8;
      bsp_pos[i][r] = row < rows ? ctx + row / GROUP : -1;
      if (GA_BLOCK_SPARSE) pf_bsp_row(p, row, bsp_pos[i][r], kv_head, bsp_qb[i][r], bsp_res[i][r]);
    }
  unsigned bsp_vis = 0u;  // the current tile's visible key groups (pf_bsp_tile_vis)
  bool need = !GA_BLOCK_SPARSE || (n_tiles > 0 && pf_bsp_tile_needed(p, tile0 * PF_BLOCK_N, bsp_qb,
                                                                     bsp_res, bsp_pos, bsp_vis));
  if (n_tiles > 0) {
    // Q rows of this tile (rows past the request are zero-filled).
#ifdef GA_Q_E4M3
    // e4m3: 8 bytes a chunk, widened exactly into the MMA type (a plain store; the barrier
    // before the first ldmatrix of Q covers it as it covers the copies).
    const ga_u8* q8_bytes = static_cast<const ga_u8*>(p.query);
    pf_for_each_chunk<PF_BLOCK_M>(tid, [&](int row, int c) {
      const int r = m0 + row;
      uint2 b = make_uint2(0u, 0u);
      if (r < rows)
        b = *reinterpret_cast<const uint2*>(
            q8_bytes + ga_prefill_row_offset(r, c * 8, q_start, kv_head, p.query_token_stride,
                                             p.query_head_stride));
      const ga_u8* x = reinterpret_cast<const ga_u8*>(&b);
      *reinterpret_cast<uint4*>(s_q + row * PF_ROW + c * 8) =
          make_uint4(ga_pack2(ga_e4m3_to_f32(x[0]), ga_e4m3_to_f32(x[1])),
                     ga_pack2(ga_e4m3_to_f32(x[2]), ga_e4m3_to_f32(x[3])),
                     ga_pack2(ga_e4m3_to_f32(x[4]), ga_e4m3_to_f32(x[5])),
                     ga_pack2(ga_e4m3_to_f32(x[6]), ga_e4m3_to_f32(x[7])));
    });
#else
    const ga_u16* q = static_cast<const ga_u16*>(p.query);
    pf_for_each_chunk<PF_BLOCK_M>(tid, [&](int row, int c) {
      const int r = m0 + row;
      const bool valid = r < rows;
      const long long off = valid ? ga_prefill_row_offset(r, c * 8, q_start, kv_head,
                                                          p.query_token_stride, p.query_head_stride)
                                  : 0;
      pf_cp_async16(q_base + (row * PF_ROW + c * 8) * 2, q + off, valid ? 16 : 0);
    });
#endif
    pf_cp_commit();
    if (!need) {
    } else if (KV_FP8)
      pf_load_kv(p, block_row, kv_row0, kv_head, tile0 * PF_BLOCK_N, kv_end, raw_base,
                 raw_base + RAW_TILE_BYTES, tid);
    else
      pf_load_kv(p, block_row, kv_row0, kv_head, tile0 * PF_BLOCK_N, kv_end, k_base, v_base, tid);
    pf_cp_commit();
  }

  const int warp = tid >> 5;
  const int lane = tid & 31;
  // The warp's rows are [warp * 16 * PF_MT, (warp + 1) * 16 * PF_MT) of the tile. This thread's
  // rows (lane / 4 and lane / 4 + 8 of each m16 tile): their positions, or -1 past the request.
  const int warp_row = warp * 16 * PF_MT;
  // Their heads' ALiBi slopes and sink logits (log2 domain), where the spec has them.
  int pos[PF_MT][2];
  float slope[PF_MT][2], sink[PF_MT][2];
#pragma unroll
  for (int i = 0; i < PF_MT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + warp_row + i * 16 + (lane >> 2) + r * 8;
      pos[i][r] = row < rows ? ctx + row / GROUP : -1;
      const int head = kv_head * GROUP + row % GROUP;
      slope[i][r] = ga_alibi_slope_log2(p.terms, head, row < rows);
      sink[i][r] = ga_sink_log2(p.terms, head, row < rows);
    }
  const unsigned q_lane = q_base + ((warp_row + (lane & 15)) * PF_ROW + (lane >> 4) * 8) * 2;
  unsigned qf[PF_MT][PF_QF][4];
  float o[PF_MT][PF_HEAD_PAD / 8][4];
  const float ninf = __int_as_float(0xff800000);
  float m[PF_MT][2], l[PF_MT][2];
#pragma unroll
  for (int i = 0; i < PF_MT; ++i) {
#pragma unroll
    for (int d = 0; d < PF_HEAD_PAD / 8; ++d)
      o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.f;
    m[i][0] = m[i][1] = ninf;
    l[i][0] = l[i][1] = 0.f;
  }

  for (int j = 0; j < n_tiles; ++j) {
    const int n0 = (tile0 + j) * PF_BLOCK_N;
    const int stage = KV_FP8 ? 0 : (j & 1);
    bool need_next = true;
    unsigned bsp_vis_next = 0u;
    if (j + 1 < n_tiles) {
      const int nxt = (j + 1) & 1;
      if (GA_BLOCK_SPARSE)
        need_next = pf_bsp_tile_needed(p, n0 + PF_BLOCK_N, bsp_qb, bsp_res, pos, bsp_vis_next);
      if (!need_next) {
      } else if (KV_FP8)
        pf_load_kv(p, block_row, kv_row0, kv_head, n0 + PF_BLOCK_N, kv_end,
                   raw_base + nxt * 2 * RAW_TILE_BYTES,
                   raw_base + nxt * 2 * RAW_TILE_BYTES + RAW_TILE_BYTES, tid);
      else
        pf_load_kv(p, block_row, kv_row0, kv_head, n0 + PF_BLOCK_N, kv_end,
                   k_base + nxt * KV_TILE_BYTES, v_base + nxt * KV_TILE_BYTES, tid);
      pf_cp_commit();
      pf_cp_wait<1>();
    } else {
      pf_cp_wait<0>();
    }
    if (KV_FP8 && need) {
      const ga_u8* raw = s_raw + (j & 1) * 2 * RAW_TILE_BYTES;
      pf_convert_kv<PF_LEGACY>(raw, s_k, tid);
      if (PF_LEGACY)
        pf_convert_vt(raw + RAW_TILE_BYTES, s_v, tid);
      else
        pf_convert_kv(raw + RAW_TILE_BYTES, s_v, tid);
    }
    __syncthreads();
    if (PF_Q_IN_REGS && j == 0) {
#pragma unroll
      for (int i = 0; i < PF_MT; ++i)
#pragma unroll
        for (int ks = 0; ks < PF_QF; ++ks)
          pf_ldmatrix_x4(qf[i][ks], q_lane + (i * 16 * PF_ROW + ks * 16) * 2);
    }
    const bool mask = ga_prefill_tile_masked(n0, PF_BLOCK_N, pos_lo, pos_hi, kv_end, p.window);
    const unsigned k_addr = k_base + stage * KV_TILE_BYTES;
    const unsigned v_addr = v_base + stage * KV_TILE_BYTES;
    if (!need) {
    } else if (pf_one_body()) {
      pf_tile<PF_MASK_IF>(mask, p, sc, qf, q_lane, k_addr, v_addr, n0, kv_end, lane, pos, slope,
                          bsp_vis, m, l, o);
    } else if (mask) {
      pf_tile<PF_MASKED>(true, p, sc, qf, q_lane, k_addr, v_addr, n0, kv_end, lane, pos, slope,
                         bsp_vis, m, l, o);
    } else {
      pf_tile<PF_UNMASKED>(false, p, sc, qf, q_lane, k_addr, v_addr, n0, kv_end, lane, pos, slope,
                           bsp_vis, m, l, o);
    }
    __syncthreads();
    need = need_next;
    bsp_vis = bsp_vis_next;
  }

  // Normalise; rows that saw no key (seq_len 0) become zeros. Stage through this warp's own Q
  // rows in shared memory, then store whole 16-byte chunks.
  ga_u16* s_o = s_q + warp_row * PF_ROW;
#pragma unroll
  for (int i = 0; i < PF_MT; ++i) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float li = l[i][r];
      li += __shfl_xor_sync(0xffffffffu, li, 1);
      li += __shfl_xor_sync(0xffffffffu, li, 2);
      inv[r] = HAS_SINKS  ? sc.v_scale * ga_sink_normalizer(m[i][r], li, sink[i][r])
               : li > 0.f ? sc.v_scale / li
                          : 0.f;
#ifdef GA_WRITE_LSE
      const int row = m0 + warp_row + i * 16 + (lane >> 2) + r * 8;
      if ((lane & 3) == 0 && row < rows) {
        const int tok = row / GROUP;
        p.softmax_lse[(kv_head * GROUP + row - tok * GROUP) * p.lse_head_stride + q_start + tok] =
            ga_lse(m[i][r], li, sink[i][r]);
      }
#endif
    }
    const int g = i * 16 + (lane >> 2);
    const int t2 = (lane & 3) * 2;
#pragma unroll
    for (int d = 0; d < PF_HEAD_PAD / 8; ++d) {
      *reinterpret_cast<unsigned*>(s_o + g * PF_ROW + d * 8 + t2) =
          ga_pack2(o[i][d][0] * inv[0], o[i][d][1] * inv[0]);
      *reinterpret_cast<unsigned*>(s_o + (g + 8) * PF_ROW + d * 8 + t2) =
          ga_pack2(o[i][d][2] * inv[1], o[i][d][3] * inv[1]);
    }
  }
  __syncwarp();
  ga_u16* out = static_cast<ga_u16*>(p.output);
  for (int idx = lane; idx < 16 * PF_MT * PF_CHUNKS; idx += 32) {
    const int row = idx / PF_CHUNKS;
    const int c = idx - row * PF_CHUNKS;
    const int r = m0 + warp_row + row;
    if (r < rows)
      *reinterpret_cast<uint4*>(out + ga_prefill_row_offset(r, c * 8, q_start, kv_head,
                                                            p.output_token_stride,
                                                            p.output_head_stride)) =
          *reinterpret_cast<const uint4*>(s_o + row * PF_ROW + c * 8);
  }
}
