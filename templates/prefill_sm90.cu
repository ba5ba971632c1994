// SPDX-License-Identifier: Apache-2.0
// Prefill attention for Hopper (sm_90a, wgmma): the semantics, grid and GQA row packing of
// prefill.cu (vLLM v1 flash: variable-length causal queries over the paged KV cache, window,
// soft cap; the non-causal and dense-K/V axes likewise), for 16-bit KV caches and head sizes
// that are multiples of 64, in the flash layouts (NHD, HND) and vLLM's legacy PagedAttention
// layout (KV_LAYOUT 2, forward_prefix; see "Legacy layout" below), block-sparse too (see
// pw_bsp_tile_needed), and for e4m3 queries over fp8 caches at head size 128 in the flash
// layouts (below). The host (detail::select_prefill_kernel) sends every other spec to prefill.cu.
//
// Grid: x = query row tiles (reversed so the longest causal tiles start first), y = request
// (first_req + blockIdx.y), z = KV head. Row r of a request is query token r / GROUP, head
// kv_head * GROUP + r % GROUP, so each K/V tile serves every head of the group.
//
// Three warpgroups per block (four at head size 64, and for e4m3 where params.h's
// ga_prefill_sm90_fp8_consumers asks for it: PW_CONSUMERS), specialised:
// - warpgroup 0, the producer, gathers Q once and then K and V tiles into a PW_STAGES-deep ring
//   of shared-memory stages: in the flash layouts at some head sizes by TMA, a box per page (see
//   PW_TMA), else (and for the tile that the sequence end cuts) token row by token row through
//   the block table with 16-byte cp.async; it signals each landed tile on an mbarrier (the TMA's
//   complete_tx, or cp.async.mbarrier.arrive.noinc), and waits on an "empty" mbarrier before it
//   overwrites a stage;
// - warpgroups 1 .. PW_CONSUMERS, the consumers, own 64 query rows each: S = Q K^T with wgmma
//   (Q and K from shared memory), online softmax in registers (log2 domain), O += P V with
//   wgmma (P from registers, V from shared memory read transposed by the descriptor). Two
//   overlaps keep the tensor cores busy during the softmax: within a consumer (PW_OVERLAP,
//   where the registers allow it), iteration j issues S_j = Q K_j^T and O += P_{j-1} V_{j-1}
//   back to back, waits for S_j alone and runs its softmax while P V still runs, then rescales
//   O; across the consumers (PW_PINGPONG), named barriers make them take turns issuing wgmmas,
//   so one's softmax runs while another's wgmmas do.
// setmaxnreg moves registers from the producer to the consumers.
//
// Shared memory tiles use the 128-byte swizzle of the wgmma descriptors: a tile of R rows and
// HEAD_SIZE columns is stored as HEAD_SIZE / 64 column blocks of R rows x 128 bytes; 16-byte
// chunk c of row r sits at chunk c ^ (r % 8) of its 128-byte row. Every tile starts on a
// 1024-byte boundary. Q and K are K-major operands; V is the MN-major B operand of P V. (The
// legacy layout's K tile is K-major without swizzle, see "Legacy layout".)
//
// e4m3 queries over an fp8 cache (spec "_qe4m3", PW_FP8): the same kernel on fp8 operands.
// wgmma takes fp8 A and B K-major only, so V, stored [key][dim], is transposed: the producer
// copies each raw V tile into one of two raw buffers and, one tile later, transposes it into
// the V^T stage (pw_transpose_v: ldmatrix, byte permutes, stmatrix.trans) that the consumers
// read as the K-major B operand of P V. Tiles are 128-byte swizzled rows of 128 fp8 elements
// (head size 128), K/V tiles params.h's ga_prefill_sm90_fp8_block_n() keys (128; 192 and 256
// compile and pass the tests, PW_FP8_WIDE, but measured slower): a V^T row of more than 128 keys
// is split into 128-key column blocks HEAD_SIZE rows apart, like a K tile's 64-column blocks
// (pw_v_kstep). S = Q K^T runs on wgmma k32 e4m3 x
// {e4m3, e5m2}; P is quantized to e4m3 in registers (pw_pack_p8) in the key order that the
// transpose gives V^T, so P needs no shuffle; the descales fold into the score and output
// scales (ga_prefill_q8_scales).

#ifdef GA_Q_E4M3
constexpr bool PW_FP8 = true;
#else
constexpr bool PW_FP8 = false;
#endif
constexpr int PW_EB = PW_FP8 ? 1 : 2;       // bytes per Q/K/V element
constexpr int PW_CHUNK_ELEMS = 16 / PW_EB;  // elements per 16-byte chunk
template <bool FP8>
struct PwElemOf {
  using type = ga_u16;
};
template <>
struct PwElemOf<true> {
  using type = ga_u8;
};
using pw_elem = PwElemOf<PW_FP8>::type;  // a Q/K/V element as stored
// Legacy layout (key [blocks, kv_heads, head / 8, block, 8], value [blocks, kv_heads, head,
// block], 16-bit): only the producer's copies and the P V operand differ. A 16-byte chunk of a
// key row (8 dimensions) is contiguous in the chunk-major key cache too, so the K tile is the
// K-major operand of S = Q K^T, but stored in wgmma's layout without swizzle, which is the
// cache's own chunk-major order: [chunk][key][16 bytes], 8 keys x 16 bytes a 128-byte core
// matrix, chunk c + 1 PW_BLOCK_N * 16 bytes after chunk c (pw_legacy_load_k, pw_k_desc). The
// value cache is [dim][key] with the keys inner: the tile is stored as it comes, V^T of HEAD_SIZE
// rows x PW_BLOCK_N keys in the 128-byte swizzle (pw_legacy_load_vt), which is the K-major form
// of P V's B operand (the reduction runs over the keys), so the P V wgmma reads it untransposed.

// The consumer warpgroups take turns issuing their wgmmas (see the consumer loop); false lets
// them issue independently, for comparison. fp8 (wgmmas of half the time; H200, 4 x 4096 causal
// head 128: 860 us without against 876 us with) issues independently.
// fp8 measurement variants (GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_PREFILL_SM90_FP8_VAR=N, N a sum of
// the bits below; 16-bit specs ignore it). Timing-only ablations, which compute wrong results:
// 1 the producer does not transpose V (the V^T stages keep whatever they held), 2 no
// exponentials (P = the exponent), 4 no e4m3 packing of P (P V reads the fp32 bits of one value
// of four, the others kept alive), 8 no row maxima (the first score of a row stands for it).
// Candidates, correct: 16 the speculative softmax (PW_F8_SPEC), 32 probabilities 2^(s - m + 7)
// instead of 2^(s - m + 8) (PW_P8_SHIFT), 64 the consumers' wgmma ping-pong. With 16, timing only:
// 128 no second scoring (spec_check), 256 no check at all; 512 (correct) the producer's pass-map
// gather and per-step transpose addresses instead of PW_F8_ROWS'; 1024 (correct) PW_F8_ROWS'
// transpose pipelined one ldmatrix ahead (pw_transpose_v_rows). (An enumerator: a
// namespace-level constant would add to every spec's GLOBAL and CONSTANT totals.)
#ifdef GA_PREFILL_SM90_FP8_VAR
enum PwFp8Var : int { PW_F8V = PW_FP8 ? GA_PREFILL_SM90_FP8_VAR : 0 };
#else
enum PwFp8Var : int { PW_F8V = 0 };
#endif
constexpr bool PW_PINGPONG = !PW_FP8 || (PW_F8V & 64) != 0;
// Whether the producer also votes on block-sparse tiles or checks its block-table reads: it then
// needs more registers (a macro: a namespace-scope constexpr would change every spec's resource
// totals).
#if defined(GA_CHECK_BOUNDS) || GA_BLOCK_SPARSE
#define PW_PRODUCER_EXTRA 1
#else
#define PW_PRODUCER_EXTRA 0
#endif
// The geometry is params.h's (ga_prefill_sm90_*), which the host launch code reads too (fp8:
// two consumers for a soft cap or checked mode, `fp8_heavy`; a macro, as above).
#define PW_GEOM HEAD_SIZE, PW_FP8, PW_FP8 && (HAS_SOFT_CAP || PW_PRODUCER_EXTRA)
constexpr int PW_CONSUMERS = ga_prefill_sm90_consumers(PW_GEOM);  // 64 rows each
constexpr int PW_THREADS = ga_prefill_sm90_threads(PW_GEOM);
constexpr int PW_BLOCK_M = ga_prefill_sm90_block_m(PW_GEOM);
// Each consumer overlaps the P V wgmma of one tile with the softmax of the next, which keeps
// both tiles' probabilities in registers. Where that fits without spills (ptxas -v, with the
// register shares below): two consumers up to head size 192; head size 256 without producer
// extras; three consumers (16-bit head size 64) without producer extras and score modifiers
// (soft cap, ALiBi, sinks); never with three fp8 consumers (params.h's
// ga_prefill_sm90_fp8_consumers; the overlap spilled 31 STL at 160 registers, and so did S_j
// issued right behind P_{j-1} V_{j-1} with one wait for both).
constexpr int PW_BLOCK_N = ga_prefill_sm90_block_n(HEAD_SIZE, PW_FP8);
// fp8 with key tiles wider than 128 (params.h's ga_prefill_sm90_fp8_block_n): the overlap up to
// 192 keys without a soft cap or ALiBi (at 256 the S accumulators alone are 128 registers a
// thread, and the overlapping consumers spilled 55-150 instructions at 240 registers; 192 keys
// with a soft cap or ALiBi spilled 21-77 at 224; without the overlap none in the loop).
// (An enumerator: a namespace-level constant would add to every spec's GLOBAL and CONSTANT
// totals.)
enum PwFp8Wide : int { PW_FP8_WIDE = PW_FP8 && PW_BLOCK_N > 128 };
constexpr bool PW_OVERLAP =
    PW_CONSUMERS == 3  ? !PW_PRODUCER_EXTRA && !HAS_SOFT_CAP && !HAS_ALIBI && !HAS_SINKS && !PW_FP8
    : PW_FP8_WIDE      ? PW_BLOCK_N <= 192 && !HAS_SOFT_CAP && !HAS_ALIBI
    : HEAD_SIZE <= 192 ? true
                       : !PW_PRODUCER_EXTRA;
constexpr int PW_CHUNKS = HEAD_SIZE / PW_CHUNK_ELEMS;  // 16-byte chunks per Q/K/V row
constexpr int PW_OUT_CHUNKS = HEAD_SIZE / 8;           // 16-byte chunks per output row
constexpr int PW_Q_BYTES = ga_prefill_sm90_q_bytes(PW_GEOM);
constexpr int PW_KV_BYTES = ga_prefill_sm90_kv_bytes(HEAD_SIZE, PW_FP8);  // one K or V stage
constexpr int PW_STAGES = ga_prefill_sm90_stages(PW_GEOM);
// e4m3 output and persistence (GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_PREFILL_SM90_PERSIST=N; the
// host reads the same option, runtime/prefill.cpp, core/nvrtc_options.cpp prefill_sm90_persist):
// - N = 3, the default: persistent blocks (PW_PERSIST): the host launches one block per
//   multiprocessor (PrefillQ8PersistParams::persist_x) and each block walks tiles of the grid
//   (persist_x, num_reqs, num_kv_heads), the longest row tiles first (pw_item), so that its
//   producer loads the next tile's Q and first K/V tiles while the consumers finish the last P V
//   and store the output; the output is staged as before (16-byte stores) but in a buffer of its
//   own (PW_O_STAGE, 32 KiB after the raw V buffers), which the producer never touches. H100,
//   4 x 4096 causal, 8 alternated rounds: 703.75 us against 724.34 (-2.8%; every run below every
//   old one; docs/fp8-prefill-persistent-h100-2026-11-28-s17.txt).
// - N = 2: persistent, the output stored straight from the accumulators (PW_O_DIRECT: 4-byte
//   stores of a row's column pairs), which frees the raw V buffers that staged it: +1.9%.
// - N = 1: only the register stores, one block per tile: +5.8%.
// - N = 0: session 16's kernel (one block per tile, the output staged in the raw V buffers).
// (Macros: the 16-bit kernels compile none of it.)
#if defined(GA_Q_E4M3) && !defined(GA_PREFILL_SM90_PERSIST)
#define GA_PREFILL_SM90_PERSIST 3
#endif
#if defined(GA_Q_E4M3) && defined(GA_PREFILL_SM90_PERSIST) && \
    (GA_PREFILL_SM90_PERSIST == 1 || GA_PREFILL_SM90_PERSIST == 2)
#define PW_O_DIRECT 1
#else
#define PW_O_DIRECT 0
#endif
#if defined(GA_Q_E4M3) && defined(GA_PREFILL_SM90_PERSIST) && GA_PREFILL_SM90_PERSIST == 3
#define PW_O_STAGE 1
#else
#define PW_O_STAGE 0
#endif
#if (PW_O_DIRECT && GA_PREFILL_SM90_PERSIST == 2) || PW_O_STAGE
#define PW_PERSIST 1
#else
#define PW_PERSIST 0
#endif
// PW_O_STAGE's output buffer (16-bit rows of the block's tile); the host adds it too
// (runtime/prefill.cpp, prefill_config). (An enumerator: a namespace-level constant would change
// every spec's resource totals.)
enum PwOutStage : int { PW_O_BYTES = PW_O_STAGE ? ga_prefill_sm90_out_stage_bytes(PW_GEOM) : 0 };
constexpr int PW_SMEM_BYTES = ga_prefill_sm90_smem_bytes(PW_GEOM) + PW_O_BYTES;
// Q rows by pointer steps (params.h's ga_prefill_sm90_q_step): PW_Q_RS rows a pass of the 128
// producer threads, each thread the same chunk of every pass. (An enumerator, as below.)
enum PwQStep : int {
  PW_Q_STEP = ga_prefill_sm90_q_step(HEAD_SIZE, PW_FP8, GROUP, PW_CHUNKS, PW_BLOCK_M, KV_LAYOUT,
                                     !HAS_WINDOW && !GA_NON_CAUSAL && !HAS_SOFT_CAP && !HAS_ALIBI &&
                                         !HAS_SINKS && !GA_DENSE_KV && !PW_PRODUCER_EXTRA),
  PW_Q_RS = 128 / PW_CHUNKS
};
// The block's start and end (params.h's ga_prefill_sm90_bstart, GA_PW_BSTART_* bits;
// -DGA_PREFILL_SM90_BSTART=N asks for N, for measurement). (An enumerator, as above.)
#ifndef GA_PREFILL_SM90_BSTART
#define GA_PREFILL_SM90_BSTART -1  // params.h's default bits
#endif
enum PwBStart : int {
  PW_BSTART =
      ga_prefill_sm90_bstart(PW_Q_STEP != 0, HEAD_SIZE, KV_LAYOUT == 2, GA_PREFILL_SM90_BSTART)
};
// 16-byte k-steps of the S = Q K^T wgmmas (k16 for 16-bit, k32 for fp8: 32 bytes either way).
constexpr int PW_KSTEPS = HEAD_SIZE * PW_EB / 32;
// wgmma A fragments of P per tile: one per k-step of P V (16 keys 16-bit, 32 keys fp8).
constexpr int PW_PF_STEPS = PW_BLOCK_N / (PW_FP8 ? 32 : 16);
// setmaxnreg shares of the multiprocessor's 65536 registers (one block per multiprocessor),
// producer + consumers x 128 threads, the fewest spills found (ptxas -v):
// - two consumers, 88 + 2 x 208; at 80 the producer's tile loop spilled at head size 64 (with
//   two consumers);
// - head size 256 with the overlap, 24 + 2 x 240: the consumers spill at 232, and ptxas spills
//   8 bytes with the producer at 32 but none at 24;
// - three consumers (head size 64), 32 + 3 x 160: at 152 the overlapping consumers spill 68
//   bytes, at 160 one 8-byte value loaded once per tile (32 bytes with the producer at 24);
//   with producer extras 56 + 3 x 152 (no overlap then): the producer spills 40-48 bytes at 32.
//   fp8 with three consumers (params.h), 32 + 3 x 160 without the overlap: no spills (a soft cap
//   spilled 11 STL, checked mode at 56 + 3 x 152 248: those specs keep two consumers).
// - fp8 with wider key tiles (PW_FP8_WIDE), 56 + 2 x 224: 192 keys with the overlap, one value
//   stored once a block; 256 keys without it, nothing in the consumers' loop, and the producer
//   (8 row offsets a tile) reloads about 7 values a tile (at 40 + 2 x 232: 70-220 spill
//   instructions in the producer; at 72 + 2 x 216 the consumers spill 384).
constexpr int PW_PRODUCER_REGS = PW_CONSUMERS == 3               ? (PW_PRODUCER_EXTRA ? 56 : 32)
                                 : PW_FP8_WIDE                   ? 56
                                 : HEAD_SIZE > 192 && PW_OVERLAP ? 24
                                                                 : 88;
constexpr int PW_CONSUMER_REGS = PW_CONSUMERS == 3               ? (PW_PRODUCER_EXTRA ? 152 : 160)
                                 : PW_FP8_WIDE                   ? 224
                                 : HEAD_SIZE > 192 && PW_OVERLAP ? 240
                                                                 : 208;
// (16-bit head 128 at 40 + 2 x 232, no spills: the consumers take up to 229 registers where they
// take 204 at 208, and measured no faster, H100, 4 x 4096 988.0 / 991.2 us against 989.5 / 991.2
// with the reference maximum below; docs/prefill-h128-rescale-h100-2026-11-27-s7.txt.)
static_assert(PW_CONSUMERS == 2 || PW_CONSUMERS == 3, "prefill_sm90: two or three consumers");
// The shares must fit the block's own allocation, PW_THREADS x the registers per thread that
// __launch_bounds__(PW_THREADS, 1) leaves (65536 / PW_THREADS, rounded down to the allocation
// granularity of 8): setmaxnreg.inc waits until enough registers are free in the block's pool,
// so shares above it never complete (32 + 2 x 240 = 512 > 3 x 168 hung on an H100).
static_assert(PW_PRODUCER_REGS + PW_CONSUMERS * PW_CONSUMER_REGS <=
                  (PW_CONSUMERS + 1) * (65536 / PW_THREADS / 8 * 8),
              "prefill_sm90: setmaxnreg shares exceed the block's registers");
constexpr bool PW_LEGACY = KV_LAYOUT == 2;
// Legacy-layout measurement variants (GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_PREFILL_SM90_LEGACY_VAR=N,
// N a sum of the bits below; other layouts ignore it). Candidates, correct: 1 full tiles (a tile
// that ends at or before kv_end copies its K and V^T without the clamp to kv_end - 1, the
// zero-fill predicates and the V^T byte-count branch, block-table indices unsigned); 2 the V^T
// tile's block lookup issued with the K groups' (before the K stage's empty wait) instead of after
// the V stage's empty wait; 4 the reference maximum (PW_REF_MAX) of the flash layouts; 8 the
// flash layouts' two softmax bodies instead of one; 64 no GA_PW_SCHED_EARLY_WAIT (the flash
// layouts' schedule; with 4 and 8 and ptxas -O3, --ptxas-options=-O3, the flash consumers' code
// over the legacy tiles). Timing only, wrong results: 16 the K tile read
// through a 128-byte swizzle descriptor (the flash K tile's reads), 32 no K/V copies at all (the
// stages keep whatever they held). 128 the V^T tile as 16-key slabs in wgmma's 32-byte swizzle
// (pw_legacy_load_vs), the default where ga_prefill_sm90_legacy_slabs (not in checked mode, which
// was not GPU-tested with it): -DGA_PREFILL_SM90_LEGACY_VAR=0 gives the rows (pw_legacy_load_vt)
// there. (An enumerator, as PW_F8V.)
#ifdef GA_PREFILL_SM90_LEGACY_VAR
enum PwLegacyVar : int { PW_LV = PW_LEGACY ? GA_PREFILL_SM90_LEGACY_VAR : 0 };
#elif defined(GA_CHECK_BOUNDS)
enum PwLegacyVar : int { PW_LV = 0 };
#else
enum PwLegacyVar : int {
  PW_LV = PW_LEGACY && ga_prefill_sm90_legacy_slabs(HEAD_SIZE, BLOCK_SIZE) ? 128 : 0
};
#endif
// The softmax keeps a reference maximum per row that moves only by more than a slack, and the
// consumers rescale O only when one moved (pw_softmax, the consumers' tile): fp8, and the 16-bit
// flash layouts, where it measured faster (H100, alternated against 34b0956's kernels, 4 x 4096
// causal: head 128 1030 -> 990 us, head 256 1804 -> 1700, head 64 634 -> 630; chunked 4 x 512
// after 2048-16384 cached -4 to -5%). The legacy kernel measured slower with it (4 x 4096 1099 /
// 1105 -> 1117 / 1118 us, chunked +1 to +3%), and more so at its ptxas -O1 (4 x 4096 1026 ->
// 1175 us, chunked +15 to +20%, docs/legacy-prefill-o1-h100-2026-11-27-s8.txt): it keeps the
// exact maximum per tile. docs/prefill-h128-rescale-h100-2026-11-27-s7.txt. (An enumerator: a
// namespace-level constant would add to every spec's GLOBAL and CONSTANT totals.)
enum PwSoftmaxRef : int { PW_REF_MAX = PW_FP8 || !PW_LEGACY || (PW_LV & 4) != 0 };
// Row sums on the tensor cores (params.h's ga_prefill_sm90_rowsum_mma): each P V k-step also
// issues a wgmma m64n8 (pw_wgmma_sum) with the same P fragments against PW_ONES, a 256-byte tile
// of ones in shared memory (the consumers' ones_desc), into ls[4] (rows g and g + 8, every column
// that row's sum), which runs in O's wgmma groups (issued and waited for with them). ls holds one
// tile's sums (its first k-step overwrites it), which the consumer adds to l in fp32 once the
// P V completed: accumulating l across all tiles in the wgmma accumulator drifted (e4m3, H100,
// 4 x 4096 causal: relative L2 6.0e-2 against main's 2.43e-2; per tile, 2.43e-2 again), as the
// fp8 wgmma's accumulation keeps fewer bits than fp32. pw_softmax then adds no probabilities up,
// and l is the sum of the rounded P that P V multiplies (16-bit, e4m3), not of the fp32
// probabilities. (An enumerator, as above.)
enum PwRowSum : int {
  PW_ROWSUM = ga_prefill_sm90_rowsum_mma(HEAD_SIZE, PW_LEGACY, PW_FP8),
  // One 32-bit word of ones of the P V operand type: e4m3 1.0 = 0x38, bf16 0x3f80, fp16 0x3c00.
  PW_ONES = PW_FP8    ? 0x38383838
            : IS_BF16 ? 0x3f803f80
                      : 0x3c003c00
};
// fp8: probabilities 2^(s - m + PW_P8_SHIFT) (pw_softmax), and the speculative softmax (PW_F8_SPEC,
// see the consumers' tile). (Enumerators, as above.)
enum PwFp8Softmax : int {
  PW_P8_SHIFT = (PW_F8V & 32) ? 7 : 8,
  PW_F8_SPEC = PW_FP8 && (PW_F8V & 16) && !PW_FP8_WIDE && !HAS_SOFT_CAP && !HAS_ALIBI
};
// The speculative softmax's source is compiled only where a variant may ask for it (a macro: its
// lambdas, even unused, moved the 16-bit kernels' instruction order).
#if defined(GA_Q_E4M3) && defined(GA_PREFILL_SM90_FP8_VAR)
#define PW_F8_SPEC_CODE 1
#else
#define PW_F8_SPEC_CODE 0
#endif
// PW_PERSIST: a statement that opens the block's loop over its tiles (the kernel's pw_item; the
// body runs once a tile) and one that closes it; without persistence, nothing. (Macros, so that
// the loop's braces leave the text and layout of the default build alone.)
#if PW_PERSIST
#define PW_ITEMS_BEGIN()          \
  for (int it = 0;; ++it) {       \
    const int item = pw_item(it); \
    if (item == 0) break;         \
    if (item == 1) continue;      \
    item_vars()
#define PW_ITEMS_END() }
#else
#define PW_ITEMS_BEGIN() (void)0
#define PW_ITEMS_END() (void)0
#endif
// The 16-bit consumers' per-tile schedule (params.h's ga_prefill_sm90_sched, GA_PW_SCHED_* bits;
// -DGA_PREFILL_SM90_SCHED=N asks for N, for measurement). fp8: the row lines (the producer's
// gather) and, without scaled scores, the vote and the VIMNMX3 row maxima (pw_row_imax) at head
// 128 by default; its own bits with -DGA_PREFILL_SM90_FP8_SCHED=N. (An enumerator, as above.)
#ifndef GA_PREFILL_SM90_SCHED
#define GA_PREFILL_SM90_SCHED -1  // params.h's default bits
#endif
#ifndef GA_PREFILL_SM90_FP8_SCHED
#define GA_PREFILL_SM90_FP8_SCHED -1  // the e4m3 prefill's default bits (params.h's fp8_bits)
#endif
enum PwSched : int {
  PW_SCHED =
      ga_prefill_sm90_sched(HEAD_SIZE, PW_LEGACY, PW_FP8, HAS_SOFT_CAP || HAS_ALIBI,
                            !HAS_WINDOW && !GA_NON_CAUSAL, !GA_DENSE_KV && !PW_PRODUCER_EXTRA,
                            GA_PREFILL_SM90_SCHED, GA_PREFILL_SM90_FP8_SCHED) &
      ~(PW_LV & 64 ? GA_PW_SCHED_EARLY_WAIT : 0)
};
// GA_PW_SCHED_SPEC_EXP (params.h): the speculative exponentials of the 16-bit flash layouts with
// the overlap, for scores without a soft cap or ALiBi (pw_softmax_spec); GA_PW_SCHED_SPEC_TEST
// sends every speculative tile to the fallback (tests only). (An enumerator, as above.)
enum PwSpec16 : int {
  PW_SPEC16 = !PW_FP8 && PW_REF_MAX && PW_OVERLAP && !GA_BLOCK_SPARSE && !HAS_SOFT_CAP &&
              !HAS_ALIBI && (PW_SCHED & GA_PW_SCHED_SPEC_EXP) != 0,
  PW_SPEC16_TEST = PW_SPEC16 && (PW_SCHED & GA_PW_SCHED_SPEC_TEST) != 0
};
// The P V wgmma's B (V) operand: MN-major (1, transposed: the flash 16-bit [key][dim] tile) or
// K-major (0: the legacy V^T tile), the 16-bit wgmma's imm-trans-b. fp8's V^T stages are K-major
// too (fp8 wgmmas take K-major operands only, and no such flag).
constexpr int PW_V_TRANS = PW_LEGACY ? 0 : 1;
// Its descriptor: the leading byte offset (MN-major: 64-column blocks PW_BLOCK_N rows of 128
// bytes apart; K-major: unused by the swizzle, 16) and the offset of k-step kk in 16-byte units
// (MN-major, 16 keys: 16 rows of 128 bytes; K-major 16-bit, 16 keys: 32 bytes inside the
// swizzled 128-byte row, a 64-key column block of HEAD_SIZE rows apart; fp8, 32 keys: 32 bytes
// of the 128-byte row, which holds all PW_BLOCK_N = 128 keys).
constexpr unsigned PW_V_LEAD = PW_LEGACY || PW_FP8 ? 16 : PW_BLOCK_N * 128;
__device__ __forceinline__ unsigned pw_v_kstep(int kk) {
  if (PW_LV & 128) return kk * (HEAD_SIZE * 2);  // V^T slabs (pw_legacy_load_vs): one a k-step
  return PW_FP8 || PW_LEGACY ? (kk >> 2) * (HEAD_SIZE * 8) + (kk & 3) * 2 : kk * 128;
}
// The S = Q K^T wgmma's B (K) operand, K-major (descriptor: pw_k_desc): the offset of k-step ks
// in 16-byte units (the 128-byte swizzle: 32 bytes inside the swizzled row, 64-column blocks
// PW_BLOCK_N rows apart; the legacy K tile without swizzle: two chunks of PW_BLOCK_N * 16 bytes).
__device__ __forceinline__ unsigned pw_k_kstep(int ks) {
  return PW_LEGACY && !(PW_LV & 16) ? ks * (PW_BLOCK_N * 2)
                                    : (ks >> 2) * (PW_BLOCK_N * 8) + (ks & 3) * 2;
}
// Named barriers PW_SCHED_BAR + cw order the wgmma issues of the consumer warpgroups (ids 0:
// __syncthreads, 1 + cw: consumer cw's epilogue); PW_PRODUCER_BAR syncs the producer warpgroup
// around the V transpose (fp8).
constexpr int PW_SCHED_BAR = PW_CONSUMERS + 1;
// GA_BLOCK_SPARSE: named barrier PW_BSP_BAR + w carries warpgroup w's tile votes (w = 0: the
// producer, 1 + cw: consumer cw).
constexpr int PW_PRODUCER_BAR = 2 * PW_CONSUMERS + 1;
constexpr int PW_BSP_BAR = 2 * PW_CONSUMERS + 2;
static_assert(PW_SCHED_BAR + PW_CONSUMERS - 1 < PW_PRODUCER_BAR && PW_PRODUCER_BAR < PW_BSP_BAR &&
                  PW_BSP_BAR + PW_CONSUMERS < 16,
              "prefill_sm90: named barriers overlap");
// 16-bit KV: the k/v scales are 1 and their device pointers (GaKvScales) null here; other fp8
// caches (16-bit queries), with host or device scales, take templates/prefill.cu. An e4m3 query
// over an fp8 cache takes its scales from ga_prefill_q8_scales.
// (fp8 at head size 256 would compile, but spills: detail::select_prefill_kernel sends it to
// prefill.cu.)
static_assert(PW_FP8 ? HEAD_SIZE % 128 == 0 && KV_FP8 != 0 : HEAD_SIZE % 64 == 0 && KV_FP8 == 0,
              "prefill_sm90 needs 16-bit KV and head % 64 == 0, or an e4m3 query over fp8 KV "
              "and head % 128 == 0");
static_assert(!PW_FP8 ||
                  (PW_BLOCK_N % 64 == 0 && PW_BLOCK_N <= 256 &&
                   ga_prefill_sm90_raw_v_bytes(HEAD_SIZE, true) >= PW_BLOCK_M * HEAD_SIZE * 2),
              "prefill_sm90 fp8: V^T rows are 128-byte swizzled column blocks of 128 keys, "
              "wgmma's N is at most 256, and the raw V tiles stage the output tile");
#ifdef GA_KEY_X
static_assert(GA_KEY_X * 2 == 16, "prefill_sm90: legacy key caches with 16-byte x only");
#endif
static_assert(!PW_FP8 || (!PW_LEGACY && !GA_BLOCK_SPARSE),
              "prefill_sm90 fp8: flash layouts, not block-sparse (prefill.cu serves the rest)");
static_assert(PW_STAGES >= 2, "prefill_sm90: shared memory holds fewer than two stages");
static_assert(5 + 4 * PW_STAGES <= 256 / 8, "prefill_sm90: mbarriers overflow their slack");
static_assert(PW_SMEM_BYTES <= 227 * 1024, "prefill_sm90: shared memory over the sm_90 limit");
static_assert(!PW_PERSIST ||
                  (PW_FP8 && !PW_PINGPONG && !GA_BLOCK_SPARSE && 6 + 4 * PW_STAGES <= 32),
              "prefill_sm90: persistence is for the e4m3 kernel without turns");

__device__ __forceinline__ unsigned pw_smem_addr(const void* p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return static_cast<unsigned>(a);
}

// Byte offset of 16-byte chunk c of row r in a swizzled tile of `rows` rows.
__device__ __forceinline__ unsigned pw_swizzle(int r, int c, int rows) {
  return static_cast<unsigned>((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// v (32 bits), opaque to the compiler: what is derived from it is computed after this point, not
// hoisted out of a loop and held (fp8's producer at 32 registers, PW_LEAN_GATHER; the
// speculative prefill's second scoring, GA_PW_SCHED_HOIST).
template <class T>
__device__ __forceinline__ T pw_opaque(T v) {
  static_assert(sizeof(T) == 4, "pw_opaque: a 32-bit value");
  asm volatile("mov.b32 %0, %0;\n" : "+r"(v));
  return v;
}

// 16 bytes global -> shared; bytes beyond src_bytes (0 or 16) are zero-filled.
__device__ __forceinline__ void pw_cp_async16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
// 16 bytes global -> shared, all of them (no zero-fill operand: LDGSTS without a predicate).
__device__ __forceinline__ void pw_cp_async16_all(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void pw_cp_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// fp8's raw V copies: commit groups, one per tile, waited for one tile later.
__device__ __forceinline__ void pw_cp_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void pw_cp_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

__device__ __forceinline__ void pw_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrives on `bar` once every cp.async this thread issued so far has landed (the count of
// the barrier includes this arrival).
__device__ __forceinline__ void pw_mbar_arrive_copies(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void pw_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void pw_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// cp.async writes through the generic proxy; wgmma reads shared memory through the async
// proxy. Executed after the barrier wait that made the copies visible, before the wgmma.
__device__ __forceinline__ void pw_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void pw_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void pw_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void pw_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void pw_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most PENDING of this warpgroup's newest committed groups are in flight; groups
// complete in commit order.
template <int PENDING>
__device__ __forceinline__ void pw_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
// Pins registers an asynchronous wgmma reads or writes: the compiler may not move their uses
// across this point.
template <int N>
__device__ __forceinline__ void pw_fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pw_fence_regs(unsigned (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) asm volatile("" : "+r"(r[i][k])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle (swizzle 1) or none (0, pw_k_desc); byte
// offsets in 16-byte units.
__device__ __forceinline__ unsigned long long pw_desc(unsigned addr, unsigned lead_bytes,
                                                      unsigned stride_bytes, unsigned swizzle = 1) {
  return static_cast<unsigned long long>((addr & 0x3ffff) >> 4) |
         (static_cast<unsigned long long>(lead_bytes >> 4) << 16) |
         (static_cast<unsigned long long>(stride_bytes >> 4) << 32) |
         (static_cast<unsigned long long>(swizzle) << 62);
}

// The K tile's: the 128-byte swizzle (leading offset unused, 16; 8-row groups 1024 bytes apart),
// or for the legacy K tile none (chunks, the leading dimension, PW_BLOCK_N * 16 bytes apart; 8-key
// core matrices of 128 contiguous bytes).
__device__ __forceinline__ unsigned long long pw_k_desc(unsigned addr) {
  return PW_LEGACY && !(PW_LV & 16) ? pw_desc(addr, PW_BLOCK_N * 16, 128, 0)
                                    : pw_desc(addr, 16, 1024);
}

#define PW_F8(i)                                                                              \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// The wgmmas' accumulator operands: %0 .. %31 (PW_D32), .. %63 (PW_D64), .. %95 (PW_D96), and
// %96 .. %127 (PW_D96_127).
#define PW_D32                                                             \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PW_D64                                                               \
  PW_D32                                                                     \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PW_D96                                                               \
  PW_D64                                                                     \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define PW_D96_127                                   \
  "%96, %97, %98, %99, %100, %101, %102, %103, "     \
  "%104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, " \
  "%120, %121, %122, %123, %124, %125, %126, %127"

// wgmma m64nNk16, fp32 accumulators d (N / 2 per thread). SS: A and B from shared memory,
// both K-major; accumulate == 0 overwrites d. RS: A from registers (the m16n8k16 A-fragment
// layout per warp), B MN-major (transposed) from shared memory, always accumulates.
#define PW_WGMMA_SS_N64(TY)                                   \
  asm volatile(                                               \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"            \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY \
      " "                                                     \
      "{" PW_D32                                              \
      "}, "                                                   \
      "%32, %33, p, 1, 1, 0, 0;\n}\n"                         \
      : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24)              \
      : "l"(da), "l"(db), "r"(accumulate))

// The _ forms take the instruction (shape and types) and the immediates after the predicate,
// so that the fp8 wgmmas below share them.
#define PW_WGMMA_SS_N128_(INSTR, IMM)                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" INSTR                           \
               " "                                                                          \
               "{" PW_D64                                                                   \
               "}, "                                                                        \
               "%64, %65, p, " IMM ";\n}\n"                                                 \
               : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24), PW_F8(32), PW_F8(40), PW_F8(48), \
                 PW_F8(56)                                                                  \
               : "l"(da), "l"(db), "r"(accumulate))
#define PW_WGMMA_SS_N128(TY) \
  PW_WGMMA_SS_N128_("wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY, "1, 1, 0, 0")

#define PW_WGMMA_RS_N64(TY)                                   \
  asm volatile(                                               \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"            \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY \
      " "                                                     \
      "{" PW_D32                                              \
      "}, "                                                   \
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"         \
      : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24)              \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(PW_V_TRANS))

#define PW_WGMMA_RS_N128_(INSTR, IMM)                                                        \
  asm volatile(                                                                              \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" INSTR                                     \
      " "                                                                                    \
      "{" PW_D64                                                                             \
      "}, "                                                                                  \
      "{%64, %65, %66, %67}, %68, p, " IMM ";\n}\n"                                          \
      : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24), PW_F8(32), PW_F8(40), PW_F8(48), PW_F8(56) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(PW_V_TRANS))
#define PW_WGMMA_RS_N128(TY) \
  PW_WGMMA_RS_N128_("wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY, "1, 1, %70")

#define PW_WGMMA_RS_N192(TY)                                                                  \
  asm volatile(                                                                               \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"                                           \
      "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY                                \
      " "                                                                                     \
      "{" PW_D96                                                                              \
      "}, "                                                                                   \
      "{%96, %97, %98, %99}, %100, p, 1, 1, %102;\n}\n"                                       \
      : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24), PW_F8(32), PW_F8(40), PW_F8(48), PW_F8(56), \
        PW_F8(64), PW_F8(72), PW_F8(80), PW_F8(88)                                            \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(PW_V_TRANS))

#define PW_WGMMA_RS_N256_(INSTR, IMM)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" INSTR                             \
               " "                                                                             \
               "{" PW_D96 ", " PW_D96_127                                                      \
               "}, "                                                                           \
               "{%128, %129, %130, %131}, %132, p, " IMM ";\n}\n"                              \
               : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24), PW_F8(32), PW_F8(40), PW_F8(48),    \
                 PW_F8(56), PW_F8(64), PW_F8(72), PW_F8(80), PW_F8(88), PW_F8(96), PW_F8(104), \
                 PW_F8(112), PW_F8(120)                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(PW_V_TRANS))
#define PW_WGMMA_RS_N256(TY) \
  PW_WGMMA_RS_N256_("wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY, "1, 1, %134")

// PW_ROWSUM: wgmma m64n8 (k16 16-bit, k32 e4m3) with A = P from registers and B the ones tile,
// K-major without swizzle (fp8 has no transpose flag; both 16-byte core-matrix columns of the
// 256-byte tile read ones whatever the offsets, pw_desc(ones, 128, 128, 0)).
#define PW_WGMMA_SUM_(INSTR, IMM)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n" INSTR           \
               " {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, " IMM ";\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate))
__device__ __forceinline__ void pw_wgmma_sum(float (&d)[4], const unsigned (&a)[4],
                                             unsigned long long db, int accumulate) {
  if (PW_FP8)
    PW_WGMMA_SUM_("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", "1, 1");
  else if (IS_BF16)
    PW_WGMMA_SUM_("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", "1, 1, 0");
  else
    PW_WGMMA_SUM_("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", "1, 1, 0");
}

template <int N>
__device__ __forceinline__ void pw_wgmma_ss(float (&d)[N / 2], unsigned long long da,
                                            unsigned long long db, int accumulate) {
  if constexpr (N == 64) {
    if (IS_BF16)
      PW_WGMMA_SS_N64("bf16");
    else
      PW_WGMMA_SS_N64("f16");
  } else if constexpr (N == 128) {
    if (IS_BF16)
      PW_WGMMA_SS_N128("bf16");
    else
      PW_WGMMA_SS_N128("f16");
  } else {
    static_assert(PW_FP8 && N > 0, "pw_wgmma_ss: N is 64 or 128");  // fp8's N: never issued
  }
}

// (accumulate: N = 128 only; the others always accumulate.)
template <int N>
__device__ __forceinline__ void pw_wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4],
                                            unsigned long long db, int accumulate = 1) {
  if constexpr (N == 64) {
    if (IS_BF16)
      PW_WGMMA_RS_N64("bf16");
    else
      PW_WGMMA_RS_N64("f16");
  } else if constexpr (N == 128) {
    if (IS_BF16)
      PW_WGMMA_RS_N128("bf16");
    else
      PW_WGMMA_RS_N128("f16");
  } else if constexpr (N == 192) {
    if (IS_BF16)
      PW_WGMMA_RS_N192("bf16");
    else
      PW_WGMMA_RS_N192("f16");
  } else {
    static_assert(N == 256, "pw_wgmma_rs: N is 64, 128, 192 or 256");
    if (IS_BF16)
      PW_WGMMA_RS_N256("bf16");
    else
      PW_WGMMA_RS_N256("f16");
  }
}

// fp8 (PW_FP8): wgmma m64nNk32 with an e4m3 A (Q from shared memory, or P from registers in
// the m16n8k32 A-fragment layout per warp) and B of the cache's fp8 type, both K-major (fp8
// wgmma has no transpose): S = Q K^T with N = PW_BLOCK_N = 128, O += P V^T with N = HEAD_SIZE.
#define PW_WGMMA8_SS_N128(TB) \
  PW_WGMMA_SS_N128_("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3." TB, "1, 1")

#define PW_WGMMA8_RS_N128(TB) \
  PW_WGMMA_RS_N128_("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3." TB, "1, 1")

#define PW_WGMMA8_RS_N256(TB) \
  PW_WGMMA_RS_N256_("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3." TB, "1, 1")

#define PW_WGMMA_SS_N192_(INSTR, IMM)                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n" INSTR                           \
               " "                                                                          \
               "{" PW_D96                                                                   \
               "}, "                                                                        \
               "%96, %97, p, " IMM ";\n}\n"                                                 \
               : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24), PW_F8(32), PW_F8(40), PW_F8(48), \
                 PW_F8(56), PW_F8(64), PW_F8(72), PW_F8(80), PW_F8(88)                      \
               : "l"(da), "l"(db), "r"(accumulate))
#define PW_WGMMA8_SS_N192(TB) \
  PW_WGMMA_SS_N192_("wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3." TB, "1, 1")
#define PW_WGMMA_SS_N256_(INSTR, IMM)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" INSTR                             \
               " "                                                                             \
               "{" PW_D96 ", " PW_D96_127                                                      \
               "}, "                                                                           \
               "%128, %129, p, " IMM ";\n}\n"                                                  \
               : PW_F8(0), PW_F8(8), PW_F8(16), PW_F8(24), PW_F8(32), PW_F8(40), PW_F8(48),    \
                 PW_F8(56), PW_F8(64), PW_F8(72), PW_F8(80), PW_F8(88), PW_F8(96), PW_F8(104), \
                 PW_F8(112), PW_F8(120)                                                        \
               : "l"(da), "l"(db), "r"(accumulate))
#define PW_WGMMA8_SS_N256(TB) \
  PW_WGMMA_SS_N256_("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3." TB, "1, 1")

template <int N>
__device__ __forceinline__ void pw_wgmma8_ss(float (&d)[N / 2], unsigned long long da,
                                             unsigned long long db, int accumulate) {
  static_assert(!PW_FP8 || N == 128 || N == 192 || N == 256, "pw_wgmma8_ss: N is 128, 192 or 256");
  if constexpr (N == 128) {
    if (KV_FP8 == 2)
      PW_WGMMA8_SS_N128("e5m2");
    else
      PW_WGMMA8_SS_N128("e4m3");
  } else if constexpr (N == 192) {
    if (KV_FP8 == 2)
      PW_WGMMA8_SS_N192("e5m2");
    else
      PW_WGMMA8_SS_N192("e4m3");
  } else if constexpr (N == 256) {
    if (KV_FP8 == 2)
      PW_WGMMA8_SS_N256("e5m2");
    else
      PW_WGMMA8_SS_N256("e4m3");
  }  // other N: 16-bit instantiations (never issued)
}

// (accumulate == 0 overwrites d: N = 128 only, GA_PW_SCHED_Q_REGS's S; N = 256 always accumulates.)
template <int N>
__device__ __forceinline__ void pw_wgmma8_rs(float (&d)[N / 2], const unsigned (&a)[4],
                                             unsigned long long db, int accumulate = 1) {
  static_assert(!PW_FP8 || N == 128 || N == 256, "pw_wgmma8_rs: N is 128 or 256");
  if constexpr (N == 128) {
    if (KV_FP8 == 2)
      PW_WGMMA8_RS_N128("e5m2");
    else
      PW_WGMMA8_RS_N128("e4m3");
  } else if constexpr (N == 256) {
    if (KV_FP8 == 2)
      PW_WGMMA8_RS_N256("e5m2");
    else
      PW_WGMMA8_RS_N256("e4m3");
  }  // other N: 16-bit instantiations (never issued)
}

// The producer's gather of a K or V tile: thread ptid copies row ptid / L of every 128 / L-row
// pass and chunks ptid % L + L i of that row, L = PW_ROW_LANES, so each warp instruction moves
// 16 L contiguous bytes of 32 / L rows: L = 4, 64 bytes of 8 rows; L = 8 (PW_SCHED's
// GA_PW_SCHED_ROW_LINES), a whole 128-byte line of 4 rows, which lands in one 128-byte row of a
// swizzle column block. The swizzle of a row depends only on row % 8, which is the same in every
// pass, so the shared-memory offsets are computed once per thread (PwGather), and K and V, which
// share strides and block table, share the global offsets of each tile (pw_gather_rows). The legacy
// layout reads its tiles with pw_legacy_load_k and pw_legacy_load_vt instead.
// FULL (pw_gather_rows, pw_gather_copy): a tile that ends at or before kv_end, whose rows are all
// keys, so neither the clamp of the rows to kv_end - 1 nor the zero-fill of the rows past it is
// needed; the tile that kv_end cuts keeps them. The kernel takes that path where PW_FULL_TILES is
// set: 16-bit head size 128, flash layouts, paged, not block-sparse. There it measured 5-6% faster
// on an H100 (4 x 4096 causal 1085 -> 1024 us, chunked 4 x 512 after 16384 cached 997 -> 940 us;
// docs/prefill-h128-full-tiles-h100-2026-11-27.txt); also e4m3 (fp8) head 128 with 8 lanes a row
// (GA_PW_SCHED_ROW_LINES: K and the raw V tile;
// docs/prefill-row-lines-more-h100-2026-11-27-s11.txt); other specs keep one predicated path.
// (Enumerators: namespace-level constants could add to every spec's GLOBAL and CONSTANT totals.)
enum PwGatherRows : int {
  PW_ROW_SHIFT = PW_SCHED & GA_PW_SCHED_ROW_LINES ? 3 : 2,
  PW_ROW_LANES = 1 << PW_ROW_SHIFT,  // lanes a row
  PW_PASS_ROWS = 128 / PW_ROW_LANES  // rows a pass
};
constexpr int PW_PASSES = PW_BLOCK_N / PW_PASS_ROWS;
constexpr int PW_LANE_CHUNKS = PW_CHUNKS / PW_ROW_LANES;
static_assert(PW_BLOCK_N % PW_PASS_ROWS == 0 && PW_CHUNKS % PW_ROW_LANES == 0,
              "prefill_sm90: uneven K/V gather");

struct PwGather {
  unsigned dst[PW_LANE_CHUNKS];  // swizzled offsets of this thread's chunks in pass 0
  int row;                       // this thread's row within a pass
  long long col;                 // element offset of its first chunk in a token's head row
};

__device__ __forceinline__ PwGather pw_gather_setup(long long head_off, int ptid) {
  PwGather g;
  g.row = ptid >> PW_ROW_SHIFT;
  const int q = ptid & (PW_ROW_LANES - 1);
#pragma unroll
  for (int i = 0; i < PW_LANE_CHUNKS; ++i)
    g.dst[i] = pw_swizzle(g.row, q + PW_ROW_LANES * i, PW_BLOCK_N);
  g.col = head_off + q * PW_CHUNK_ELEMS;
  return g;
}

// GA_PW_SCHED_ROW_LINES, a full tile: the 16 rows of a pass start at a multiple of 16 keys, so
// where 16 divides the block size they lie in one cache block: one lookup a pass, the same
// address for every thread, and the row's offset in it the thread's own (its row x the token
// stride). Where the block size divides the tile, n0 starts a block, and pass k's block and row
// within it are constants away from n0's (one table address a tile). pw_pass_blocks: the passes'
// blocks; pw_pass_offset: pass k's block and row in it as an element offset (block numbers are
// not negative: zero-extended, one 64-bit multiply-add each).
__device__ __forceinline__ void pw_pass_blocks(const int* block_row, int n0,
                                               int (&blk)[PW_PASSES]) {
  constexpr bool TILE_BLOCKS = PW_BLOCK_N % BLOCK_SIZE == 0;
  const unsigned t0 = static_cast<unsigned>(n0);
  const int* bt = block_row + (TILE_BLOCKS ? t0 / BLOCK_SIZE : 0);
#pragma unroll
  for (int k = 0; k < PW_PASSES; ++k)
    blk[k] = __ldg(TILE_BLOCKS ? bt + PW_PASS_ROWS * k / BLOCK_SIZE
                               : bt + (t0 + PW_PASS_ROWS * k) / BLOCK_SIZE);
}
__device__ __forceinline__ long long pw_pass_offset(const PrefillParams& p, int blk, int n0,
                                                    int k) {
  constexpr bool TILE_BLOCKS = PW_BLOCK_N % BLOCK_SIZE == 0;
  const unsigned in_block = TILE_BLOCKS
                                ? PW_PASS_ROWS * k % BLOCK_SIZE
                                : (static_cast<unsigned>(n0) + PW_PASS_ROWS * k) % BLOCK_SIZE;
  return static_cast<long long>(static_cast<unsigned>(blk)) * p.kv.cache_block_stride +
         static_cast<long long>(in_block) * p.kv.cache_token_stride;
}

// Element offsets of this thread's rows of the tile at key n0 (rows at or past kv_end point at
// the last visible key, whose block exists; their copies are zero-filled). The block-table
// loads are all issued before any is used. GA_DENSE_KV: the dense rows after kv_row0.
template <bool FULL = false>
__device__ __forceinline__ void pw_gather_rows(const PrefillParams& p, const int* block_row,
                                               int kv_row0, const PwGather& g, int n0, int kv_end,
                                               long long (&off)[PW_PASSES]) {
#if GA_DENSE_KV
#pragma unroll
  for (int k = 0; k < PW_PASSES; ++k)
    off[k] = ga_prefill_key_offset(p, block_row, kv_row0,
                                   min(n0 + PW_PASS_ROWS * k + g.row, kv_end - 1)) +
             g.col;
#else
  // GA_PW_SCHED_ROW_LINES, a full tile: one block lookup a pass (pw_pass_blocks). (Checked mode
  // looks each row's key up.)
#ifdef GA_CHECK_BOUNDS
  constexpr bool PASS_BLOCK = false;
#else
  constexpr bool PASS_BLOCK = FULL && PW_ROW_SHIFT == 3 && BLOCK_SIZE % PW_PASS_ROWS == 0;
#endif
  if constexpr (PASS_BLOCK) {
    const long long row_off = static_cast<long long>(g.row) * p.kv.cache_token_stride + g.col;
    int blk[PW_PASSES];
    pw_pass_blocks(block_row, n0, blk);
#pragma unroll
    for (int k = 0; k < PW_PASSES; ++k) off[k] = pw_pass_offset(p, blk[k], n0, k) + row_off;
    return;
  }
  int key[PW_PASSES], blk[PW_PASSES];
#pragma unroll
  for (int k = 0; k < PW_PASSES; ++k) {
    key[k] = FULL ? n0 + PW_PASS_ROWS * k + g.row : min(n0 + PW_PASS_ROWS * k + g.row, kv_end - 1);
#ifdef GA_CHECK_BOUNDS
    blk[k] = ga_prefill_checked_block(p, block_row, key[k]);
#else
    blk[k] = __ldg(block_row + key[k] / BLOCK_SIZE);
#endif
  }
#pragma unroll
  for (int k = 0; k < PW_PASSES; ++k)
    off[k] = static_cast<long long>(blk[k]) * p.kv.cache_block_stride +
             static_cast<long long>(key[k] % BLOCK_SIZE) * p.kv.cache_token_stride + g.col;
#endif
}

// Pass k of a gathered tile: this thread's chunks of its row, from src (the row's first chunk in
// the cache) into the tile at dst; bytes 16, or 0 to zero-fill a row at or past kv_end (FULL:
// every row is a key, all 16).
template <bool FULL>
__device__ __forceinline__ void pw_copy_pass(const pw_elem* src, const PwGather& g, int k,
                                             int bytes, unsigned dst) {
#pragma unroll
  for (int i = 0; i < PW_LANE_CHUNKS; ++i) {
    if (FULL)
      pw_cp_async16_all(dst + k * PW_PASS_ROWS * 128 + g.dst[i],
                        src + PW_ROW_LANES * PW_CHUNK_ELEMS * i);
    else
      pw_cp_async16(dst + k * PW_PASS_ROWS * 128 + g.dst[i],
                    src + PW_ROW_LANES * PW_CHUNK_ELEMS * i, bytes);
  }
}

template <bool FULL = false>
__device__ __forceinline__ void pw_gather_copy(const pw_elem* cache, const PwGather& g,
                                               const long long (&off)[PW_PASSES], int n0,
                                               int kv_end, unsigned dst) {
#pragma unroll
  for (int k = 0; k < PW_PASSES; ++k)
    pw_copy_pass<FULL>(cache + off[k], g, k, n0 + PW_PASS_ROWS * k + g.row < kv_end ? 16 : 0, dst);
}

// The lean gather (PW_LEAN_GATHER: 8 lanes a row in a producer of fewer than 88 registers, where
// the offsets of pw_gather_rows, PW_PASSES 64-bit values held across the wait for the V stage,
// spilled): a tile keeps only the cache block of this thread's row in each pass (pw_lean_blocks;
// a full tile one lookup a pass, pw_pass_blocks), and pw_lean_copy forms each pass's 64-bit
// offset just before its copies, for K and again for V. Rows at or past kv_end point at the last
// visible key and are zero-filled, as in pw_gather_rows.
template <bool FULL>
__device__ __forceinline__ void pw_lean_blocks(const int* block_row, const PwGather& g, int n0,
                                               int kv_end, int (&blk)[PW_PASSES]) {
  if constexpr (FULL) {
    pw_pass_blocks(block_row, n0, blk);
  } else {
#pragma unroll
    for (int k = 0; k < PW_PASSES; ++k)
      blk[k] = __ldg(block_row + min(n0 + PW_PASS_ROWS * k + g.row, kv_end - 1) / BLOCK_SIZE);
  }
}
template <bool FULL>
__device__ __forceinline__ void pw_lean_copy(const pw_elem* cache, const PrefillParams& p,
                                             const PwGather& g, const int (&blk)[PW_PASSES], int n0,
                                             int kv_end, unsigned dst) {
#pragma unroll
  for (int k = 0; k < PW_PASSES; ++k) {
    const int key = n0 + PW_PASS_ROWS * k + g.row;
    // (The clamp, a no-op in a full tile, keeps ptxas from holding a full tile's row offset,
    // the same every tile, across the loop: at 24 registers that value spilled.)
    const unsigned in_block = static_cast<unsigned>(min(key, kv_end - 1)) % BLOCK_SIZE;
    const pw_elem* src =
        cache + (static_cast<long long>(static_cast<unsigned>(blk[k])) * p.kv.cache_block_stride +
                 static_cast<long long>(in_block) * p.kv.cache_token_stride + g.col);
    pw_copy_pass<FULL>(src, g, k, key < kv_end ? 16 : 0, dst);
  }
}

// Legacy layout: the keys [n0, n0 + PW_BLOCK_N) of one KV head into the K tile at dst, stored
// like the chunk-major key cache: chunk c of tile key n at byte (c * PW_BLOCK_N + n) * 16, the
// K-major layout without swizzle of the S = Q K^T wgmma (pw_k_desc). In the cache, chunk c of
// the keys of one block is BLOCK_SIZE * 16 contiguous bytes, 16 per key, and chunk c + 1 follows
// it. The tile is read in groups of 16 keys (each inside one block: BLOCK_SIZE is a multiple of
// 16); warp w of the producer takes the groups w * PW_LK_GPW .. and lane t + 16 h copies key t
// of a group, chunks 2 i + h: a warp instruction reads two runs of 256 contiguous bytes (one of
// 512 at block size 16) into two runs of 256 contiguous bytes of the tile.
// Why this layout: with the flash layout's swizzled [key][dim] tile, which puts keys 2 m and
// 2 m + 1 of a chunk (one 32-byte sector of the key cache) into two rows, every K instruction
// fetched 32 L2 sectors for 16 useful, whichever lanes read which keys (two maps measured), while
// the flash and V^T copies, whose sectors each land in one 32-byte piece of shared memory, fetched
// the ideal count (ncu, H200, 4 x 4096: the legacy kernel moved 1.5x the flash kernel's L2
// sectors in 2.9x its L2 requests, L2 tag lookups at 74-77% of peak;
// docs/legacy-prefill-l2-h200-2026-11-26.txt). Here each sector lands in 32 contiguous bytes.
// One block lookup per group and thread.
constexpr int PW_LK_GPW = PW_BLOCK_N / 16 / 4;  // 16-key groups per producer warp and tile
static_assert(!PW_LEGACY || (PW_BLOCK_N % 64 == 0 && BLOCK_SIZE % 16 == 0 && PW_CHUNKS % 2 == 0 &&
                             !GA_DENSE_KV),
              "prefill_sm90: uneven legacy K gather (or dense K/V, which is never legacy)");

struct PwLegacyK {
  unsigned dst;   // tile offset of this thread's key in its first group, chunk h
  long long col;  // element offset of its key and chunk h in a group's block, head included
  int t;          // its key within a group
};
__device__ __forceinline__ PwLegacyK pw_legacy_k_setup(long long head_off, int ptid) {
  PwLegacyK k;
  const int w = ptid >> 5, h = (ptid >> 4) & 1;
  k.t = ptid & 15;
  k.dst = static_cast<unsigned>(h * PW_BLOCK_N + w * PW_LK_GPW * 16 + k.t) * 16;
  k.col = head_off + static_cast<long long>(h) * 8 * BLOCK_SIZE + k.t * 8;
  return k;
}
// Element offsets of this thread's key in each of its groups of the tile at n0 (a group at or past
// kv_end looks its block up at the last visible key, whose block exists; its copies are zero-
// filled), all block-table loads issued before any is used. FULL (PW_LV & 1, a tile that ends at
// or before kv_end): no clamp, unsigned block-table indices and block numbers.
template <bool FULL = false>
__device__ __forceinline__ void pw_legacy_k_rows(const PrefillParams& p, const int* block_row,
                                                 const PwLegacyK& k, int n0, int kv_end, int ptid,
                                                 long long (&src)[PW_LK_GPW]) {
  int blk[PW_LK_GPW];
#pragma unroll
  for (int gg = 0; gg < PW_LK_GPW; ++gg) {
    const int key0 = n0 + ((ptid >> 5) * PW_LK_GPW + gg) * 16;
#ifdef GA_CHECK_BOUNDS
    blk[gg] = ga_prefill_checked_block(p, block_row, min(key0, kv_end - 1));
#else
    if (FULL)
      blk[gg] = __ldg(block_row + static_cast<unsigned>(key0) / BLOCK_SIZE);
    else
      blk[gg] = __ldg(block_row + min(key0, kv_end - 1) / BLOCK_SIZE);
#endif
  }
#pragma unroll
  for (int gg = 0; gg < PW_LK_GPW; ++gg) {
    const int key0 = n0 + ((ptid >> 5) * PW_LK_GPW + gg) * 16;
    if (FULL)
      src[gg] = static_cast<long long>(static_cast<unsigned>(blk[gg])) * p.kv.cache_block_stride +
                static_cast<long long>(static_cast<unsigned>(key0) % BLOCK_SIZE) * 8 + k.col;
    else
      src[gg] = static_cast<long long>(blk[gg]) * p.kv.cache_block_stride +
                static_cast<long long>(key0 % BLOCK_SIZE) * 8 + k.col;
  }
}
template <bool FULL = false>
__device__ __forceinline__ void pw_legacy_load_k(const pw_elem* kc, const PwLegacyK& k,
                                                 const long long (&src)[PW_LK_GPW], int n0,
                                                 int kv_end, int ptid, unsigned dst) {
#pragma unroll
  for (int gg = 0; gg < PW_LK_GPW; ++gg) {
    const int bytes = n0 + ((ptid >> 5) * PW_LK_GPW + gg) * 16 + k.t < kv_end ? 16 : 0;
#pragma unroll
    for (int i = 0; i < PW_CHUNKS / 2; ++i) {
      const unsigned d = dst + k.dst + gg * 16 * 16 + 2 * i * (PW_BLOCK_N * 16);
      const pw_elem* a = kc + src[gg] + 2 * i * 8 * BLOCK_SIZE;
      if (FULL)
        pw_cp_async16_all(d, a);
      else
        pw_cp_async16(d, a, bytes);
    }
  }
}

// Legacy layout: the values of keys [n0, n0 + PW_BLOCK_N) of one KV head into the V^T tile at
// dst: HEAD_SIZE rows (dimensions) of PW_BLOCK_N keys, 16-byte chunk tc (keys 8 tc .. 8 tc + 7)
// of row d at pw_swizzle(d, tc, HEAD_SIZE). The tile's keys fall into PW_VT_SEGS segments of
// PW_VT_SEG = gcd(BLOCK_SIZE, PW_BLOCK_N) keys, each inside one cache block, where a dimension's
// keys of the segment are PW_VT_CPS contiguous chunks and the dimensions follow each other
// BLOCK_SIZE keys apart. Each segment has PW_VT_LPS of the producer's 128 threads (one block
// lookup per thread and tile): segment thread lt copies segment chunk lt % PW_VT_CPS of the
// dimensions lt / PW_VT_CPS + PW_VT_DSTEP i, so neighbouring lanes read neighbouring 16 bytes
// of the cache and every per-chunk term is a compile-time offset (PW_VT_DSTEP is a multiple of
// 8: the swizzle's d % 8 is the same for all of a thread's rows). Keys at or past kv_end are
// zero-filled (a chunk partly inside copies its keys inside; a segment past it looks its block
// up at the last visible key, whose block exists, and copies nothing).
constexpr int PW_VT_SEG = ga_gcd(BLOCK_SIZE, PW_BLOCK_N);
constexpr int PW_VT_SEGS = PW_BLOCK_N / PW_VT_SEG;
constexpr int PW_VT_CPS = PW_VT_SEG / 8;              // chunks per dimension of a segment
constexpr int PW_VT_LPS = 128 / PW_VT_SEGS;           // threads per segment
constexpr int PW_VT_DSTEP = PW_VT_LPS / PW_VT_CPS;    // dimensions between a thread's chunks
constexpr int PW_VT_ITERS = HEAD_SIZE / PW_VT_DSTEP;  // chunks per thread and tile
static_assert(!PW_LEGACY || (PW_VT_LPS % PW_VT_CPS == 0 && PW_VT_DSTEP % 8 == 0 &&
                             HEAD_SIZE % PW_VT_DSTEP == 0),
              "prefill_sm90: uneven V^T gather");

// The cache block of this thread's V^T segment of the tile at n0 (FULL as in pw_legacy_k_rows).
template <bool FULL = false>
__device__ __forceinline__ int pw_legacy_vt_block(const PrefillParams& p, const int* block_row,
                                                  int n0, int kv_end, int ptid) {
  const int key0 = n0 + ptid / PW_VT_LPS * PW_VT_SEG;
#ifdef GA_CHECK_BOUNDS
  return ga_prefill_checked_block(p, block_row, min(key0, kv_end - 1));
#else
  if (FULL) return __ldg(block_row + static_cast<unsigned>(key0) / BLOCK_SIZE);
  return __ldg(block_row + min(key0, kv_end - 1) / BLOCK_SIZE);
#endif
}
// HOISTED (PW_LV & 2): the block was looked up before (pw_legacy_vt_block), `blk`; else here.
template <bool FULL = false, bool HOISTED = false>
__device__ __forceinline__ void pw_legacy_load_vt(const PrefillParams& p, const int* block_row,
                                                  long long head_off, int n0, int kv_end,
                                                  unsigned dst, int ptid, int hoisted_blk = 0) {
  const int sg = ptid / PW_VT_LPS, lt = ptid % PW_VT_LPS;
  const int d0 = lt / PW_VT_CPS, tc = sg * PW_VT_CPS + lt % PW_VT_CPS;
  const int key0 = n0 + sg * PW_VT_SEG;
  const int blk = HOISTED ? hoisted_blk : pw_legacy_vt_block<FULL>(p, block_row, n0, kv_end, ptid);
  const ga_u16* src =
      FULL ? static_cast<const ga_u16*>(p.kv.value_cache) +
                 static_cast<long long>(static_cast<unsigned>(blk)) * p.kv.cache_block_stride +
                 head_off + static_cast<unsigned>(key0) % BLOCK_SIZE + d0 * BLOCK_SIZE +
                 (lt % PW_VT_CPS) * 8
           : static_cast<const ga_u16*>(p.kv.value_cache) +
                 static_cast<long long>(blk) * p.kv.cache_block_stride + head_off +
                 key0 % BLOCK_SIZE + d0 * BLOCK_SIZE + (lt % PW_VT_CPS) * 8;
  // Bytes of the chunk inside the request: its keys before kv_end, 0 to 8 (FULL: all).
  const int bytes = FULL ? 16 : min(max(kv_end - (n0 + tc * 8), 0), 8) * 2;
  const unsigned d_dst =
      dst + (tc >> 3) * (HEAD_SIZE * 128) + d0 * 128 + (((tc & 7) ^ (d0 & 7)) << 4);
  // Whole chunks (or none) take the predicated copy, as the flash gather's do (FULL: none
  // predicated); only a chunk that kv_end cuts through copies a byte count (the zero-filling
  // form).
  if (bytes == 16 || bytes == 0) {
#pragma unroll
    for (int i = 0; i < PW_VT_ITERS; ++i) {
      if (FULL)
        pw_cp_async16_all(d_dst + i * (PW_VT_DSTEP * 128), src + i * (PW_VT_DSTEP * BLOCK_SIZE));
      else
        pw_cp_async16(d_dst + i * (PW_VT_DSTEP * 128), src + i * (PW_VT_DSTEP * BLOCK_SIZE),
                      bytes == 16 ? 16 : 0);
    }
  } else {
#pragma unroll
    for (int i = 0; i < PW_VT_ITERS; ++i)
      pw_cp_async16(d_dst + i * (PW_VT_DSTEP * 128), src + i * (PW_VT_DSTEP * BLOCK_SIZE), bytes);
  }
}

// PW_LV & 128 (the default at head 128, block 16: ga_prefill_sm90_legacy_slabs): the V^T tile as
// PW_BLOCK_N / 16 slabs of 16 keys, slab s (keys n0 + 16 s ..) HEAD_SIZE rows (dimensions) x 32
// bytes at s * HEAD_SIZE * 32, in wgmma's 32-byte swizzle (the 16-byte halves of rows 4-7 of every
// 8-row group swapped: byte address bit 4 ^= bit 7), K-major: one P V k-step per slab (pw_v_kstep;
// descriptor 32-byte swizzle, 8-row groups 256 bytes apart). Why: ncu (H100, 4 x 4096,
// docs/legacy-prefill-h100-2026-11-27-s12.txt): 2.6x the flash kernel's L2 requests for the same
// sectors, which fits an LDGSTS processed per 128-byte row of shared memory, each row fetching its
// own sectors: pw_legacy_load_vt's instruction writes 8 rows x 64 bytes, each from two blocks, so
// 16 one-sector L2 requests where 4 whole lines would do. In the cache a block's 16 keys of
// dimension d are 32 contiguous bytes and dimension d + 1 follows (block size 16), so a warp
// instruction here (16 dimensions x 2 halves of one slab: lane l copies half l % 2 of dimensions
// l / 2 + 16 i) reads 4 whole lines that land in 4 whole 128-byte rows. Slab s of a tile lies in
// one cache block (block sizes are multiples of 16); warp w copies slabs w * PW_VS_SPW ..; keys at
// or past kv_end are zero-filled as in pw_legacy_load_vt. (Enumerators: namespace-level constants
// would add to every spec's GLOBAL and CONSTANT totals.)
enum PwVtSlabs : int {
  PW_VS_SPW = PW_BLOCK_N / 64,  // slabs a producer warp
  PW_VS_ITERS = HEAD_SIZE / 16  // chunks a thread and slab
};
template <bool FULL = false>
__device__ __forceinline__ void pw_legacy_load_vs(const PrefillParams& p, const int* block_row,
                                                  long long head_off, int n0, int kv_end,
                                                  unsigned dst, int ptid) {
  const int w = ptid >> 5, h = ptid & 1, d0 = (ptid & 31) >> 1;
  int blk[PW_VS_SPW];
#pragma unroll
  for (int s = 0; s < PW_VS_SPW; ++s) {
    const int key0 = n0 + (w * PW_VS_SPW + s) * 16;
#ifdef GA_CHECK_BOUNDS
    blk[s] = ga_prefill_checked_block(p, block_row, min(key0, kv_end - 1));
#else
    blk[s] = __ldg(block_row + (FULL ? key0 : min(key0, kv_end - 1)) / BLOCK_SIZE);
#endif
  }
  const unsigned d_dst = dst + d0 * 32 + ((h ^ ((d0 >> 2) & 1)) << 4);
#pragma unroll
  for (int s = 0; s < PW_VS_SPW; ++s) {
    const int key0 = n0 + (w * PW_VS_SPW + s) * 16;
    const ga_u16* src = static_cast<const ga_u16*>(p.kv.value_cache) +
                        static_cast<long long>(blk[s]) * p.kv.cache_block_stride + head_off +
                        key0 % BLOCK_SIZE + d0 * BLOCK_SIZE + h * 8;
    // Bytes of this half inside the request: its keys before kv_end, 0 to 8 (FULL: all).
    const int bytes = FULL ? 16 : min(max(kv_end - (key0 + 8 * h), 0), 8) * 2;
    const unsigned s_dst = d_dst + (w * PW_VS_SPW + s) * (HEAD_SIZE * 32);
#pragma unroll
    for (int i = 0; i < PW_VS_ITERS; ++i) {
      if (FULL)
        pw_cp_async16_all(s_dst + i * (16 * 32), src + i * (16 * BLOCK_SIZE));
      else
        pw_cp_async16(s_dst + i * (16 * 32), src + i * (16 * BLOCK_SIZE), bytes);
    }
  }
}

// GA_BLOCK_SPARSE: whether some row of the block's [m0, m0 + PW_BLOCK_M) sees a key of the tile
// [n0, n0 + PW_BLOCK_N) by its block pattern (and causally), voted by the calling warpgroup's 128
// threads on named barrier `bar` (thread wt evaluates rows m0 + wt and m0 + 128 + wt). The
// producer and every consumer each vote over the same rows, so they skip the same tiles without
// talking: a skipped tile is neither loaded nor computed.
__device__ __forceinline__ int pw_bsp_row_needed(const PrefillParams& p, int n0, int row, int rows,
                                                 int ctx, int kv_head) {
  int need = 0;
  if (row < rows) {
    const int pos = ctx + row / GROUP;
    const int last = min(n0 + PW_BLOCK_N - 1, pos);
    const int qb = pos / p.bsp.block;
    const int off = ga_bsp_offset(p.bsp, kv_head * GROUP + row % GROUP);
    for (int kb = n0 / p.bsp.block; kb * p.bsp.block <= last; ++kb)
      need |= ga_bsp_visible(p.bsp, qb, kb, off) ? 1 : 0;
  }
  return need;
}
__device__ __forceinline__ bool pw_bsp_tile_needed(const PrefillParams& p, int n0, int m0, int rows,
                                                   int ctx, int kv_head, int wt, int bar) {
  int need = pw_bsp_row_needed(p, n0, m0 + wt, rows, ctx, kv_head);
  // Tiles of more than 128 rows: thread wt votes for row m0 + 128 + wt too.
  if (PW_BLOCK_M > 128 && wt + 128 < PW_BLOCK_M)
    need |= pw_bsp_row_needed(p, n0, m0 + 128 + wt, rows, ctx, kv_head);
  int any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.s32 p, %1, 0;\nbar.red.or.pred q, %2, 128, p;\n"
      "selp.s32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(need), "r"(bar)
      : "memory");
  return any != 0;
}

// The tiles a block computes, as tile indices after tile0: first() and next(t), the next one
// after t (n_tiles when none is left). All of [0, n_tiles), or, GA_BLOCK_SPARSE, those that
// pw_bsp_tile_needed keeps (each call a vote of the calling warpgroup: wt its thread, bar its
// barrier).
struct PwTiles {
  int tile0, n_tiles, m0, rows, ctx, kv_head, wt, bar;
  __device__ __forceinline__ int skip(const PrefillParams& p, int t) const {
#if GA_BLOCK_SPARSE
    while (t < n_tiles &&
           !pw_bsp_tile_needed(p, (tile0 + t) * PW_BLOCK_N, m0, rows, ctx, kv_head, wt, bar))
      ++t;
#endif
    return t;
  }
  __device__ __forceinline__ int first(const PrefillParams& p) const { return skip(p, 0); }
  __device__ __forceinline__ int next(const PrefillParams& p, int t) const {
    return skip(p, t + 1);
  }
};

// GA_BLOCK_SPARSE, per row of this thread: the query block and the head's stride offset; and for
// the current tile, which of its n8 key groups (bit j: keys n0 + 8 j ..) the row's pattern sees
// (a sparse block is a multiple of 16 keys, so each group lies in one).
struct PwBspRows {
  int qb[2], off[2];
  unsigned vis[2];
};
__device__ __forceinline__ void pw_bsp_tile_vis(const PrefillParams& p, int n0, PwBspRows& b) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    unsigned v = 0;
    for (int kb = n0 / p.bsp.block; kb * p.bsp.block < n0 + PW_BLOCK_N; ++kb) {
      if (!ga_bsp_visible(p.bsp, b.qb[r], kb, b.off[r])) continue;
      const int lo = max(kb * p.bsp.block - n0, 0) / 8;
      const int hi = min((kb + 1) * p.bsp.block - n0, PW_BLOCK_N) / 8;  // groups [lo, hi)
      v |= ((1u << (hi - lo)) - 1u) << lo;  // at most PW_BLOCK_N / 8 = 16 groups
    }
    b.vis[r] = v;
  }
}

// The largest (NEG: smallest) of the float bits, as signed integers, of this thread's scores of
// row r (g: 0, g + 8: 1) in the wgmma accumulator layout, by three-input maxima (VIMNMX3, the
// DPX min / max of sm_90): 2 x 8 instructions where fmaxf takes 2 x 16. Non-negative floats
// order as their bits do and every negative float's bits are a negative integer, so a
// non-negative result is the row's largest score exactly; if every score is negative, their
// bits order the other way round, and the smallest integer (NEG) is the largest score (a masked
// key's -inf, 0xff800000, is the largest negative integer of them: it is taken only when every
// key of the row is masked, as fmaxf takes it). So both give fmaxf's maximum bit for bit (up to
// the sign of a zero) for finite or -inf scores; a NaN score (NaN inputs) would be taken as the
// maximum where fmaxf drops it, and the row's output is NaN either way.
template <bool NEG>
__device__ __forceinline__ int pw_row_imax(const float (&s)[PW_BLOCK_N / 2], int r) {
  constexpr int NV = PW_BLOCK_N / 4;  // the row's values in this thread: 2 of every 8 keys
  static_assert(NV % 2 == 0 && NV >= 6, "pw_row_imax: two chains of at least 3 values");
  int c[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // two chains, half the row's values each
    auto v = [&](int i) {
      const int k = h * (NV / 2) + i;  // value k of the row: group k / 2, column k % 2
      return __float_as_int(s[(k >> 1) * 4 + 2 * r + (k & 1)]);
    };
    int a = NEG ? __vimin3_s32(v(0), v(1), v(2)) : __vimax3_s32(v(0), v(1), v(2));
#pragma unroll
    for (int i = 3; i + 1 < NV / 2; i += 2)
      a = NEG ? __vimin3_s32(a, v(i), v(i + 1)) : __vimax3_s32(a, v(i), v(i + 1));
    if ((NV / 2) % 2 == 0) a = NEG ? min(a, v(NV / 2 - 1)) : max(a, v(NV / 2 - 1));
    c[h] = a;
  }
  return NEG ? min(c[0], c[1]) : max(c[0], c[1]);
}

// Scores of one KV tile -> probabilities, in place in s (fp32, log2 domain), for this thread's
// two rows; updates the running maxima and sums and returns the factors alpha by which the
// output accumulators must be rescaled. It leaves those accumulators alone, so it can run while
// the P V wgmma of the previous tile still accumulates into them.
// Scales: GaPrefillScales (e4m3 query: the block's descales folded in), or PrefillParams itself
// (16-bit KV: the host's scales), read through their common fields scale_log2 and scale.
// (PW_ROWSUM: the maxima only; the P V wgmmas sum the probabilities.)
template <bool MASK, typename Scales>
__device__ __forceinline__ void pw_softmax(const PrefillParams& p, const Scales& scales,
                                           float (&s)[PW_BLOCK_N / 2], int n0, int kv_end, int t2,
                                           const int (&pos)[2], const float (&slope)[2],
                                           float (&m)[2], float (&l)[2], float (&alpha)[2],
                                           const PwBspRows& bsp) {
  constexpr int NB = PW_BLOCK_N / 8;
  const float ninf = __int_as_float(0xff800000);
  // Without a soft cap or ALiBi the raw scores are kept and the scale is applied inside the
  // exponent, exp2(s * scale_log2 - m), one FFMA per element; m is in the scaled (log2) domain.
  // The max and sum chains are split in two per row to halve their latency.
  constexpr bool SCALED = HAS_SOFT_CAP || HAS_ALIBI;  // s is scaled here, in the loop below
  const float sc = SCALED ? 1.f : scales.scale_log2;
  // Chains per row of the thread's maxima (PW_SCHED's GA_PW_SCHED_MAX8: 4).
  constexpr int MC = PW_SCHED & GA_PW_SCHED_MAX8 ? 4 : 2;
  // GA_PW_SCHED_IMAX3 (raw scores: e4m3, and the 16-bit head-128 flash specs of params.h's
  // ga_prefill_sm90_sched): the thread's row maxima by pw_row_imax, not FMNMX.
  constexpr bool IMAX = !SCALED && (PW_SCHED & GA_PW_SCHED_IMAX3) && !(PW_F8V & 8);
  float mx[2][MC];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < MC; ++c) mx[r][c] = ninf;
#pragma unroll
  for (int j = 0; j < NB; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[j * 4 + e];
      if (HAS_SOFT_CAP)
        x = ga_soft_cap_log2(x, scales.scale / p.soft_cap, p.soft_cap * GA_LOG2E);
      else if (SCALED)
        x *= scales.scale_log2;
      const int key = n0 + j * 8 + t2 + (e & 1);
      if (HAS_ALIBI) x += ga_alibi_log2(slope[e >> 1], key, pos[e >> 1]);
      if (MASK && !ga_prefill_visible(pos[e >> 1], key, kv_end, p.window)) x = ninf;
      if (GA_BLOCK_SPARSE && MASK && !((bsp.vis[e >> 1] >> j) & 1u)) x = ninf;
      s[j * 4 + e] = x;
      if (!IMAX && (!(PW_F8V & 8) || j == 0)) mx[e >> 1][j % MC] = fmaxf(mx[e >> 1][j % MC], x);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (MC == 4) {  // down to two chains
      mx[r][0] = fmaxf(mx[r][0], mx[r][2]);
      mx[r][1] = fmaxf(mx[r][1], mx[r][3]);
    }
  }
  // vmax: IMAX's maxima of this thread's two rows (pw_row_imax); else its chains' (row_max).
  float vmax[2];
  if constexpr (IMAX) {
    const int i0 = pw_row_imax<false>(s, 0), i1 = pw_row_imax<false>(s, 1);
    // Every score of a row negative (its bits' maximum is negative as an integer): the largest
    // negative float is the smallest such integer. Taken by the warp when any of its rows needs
    // it (rare where scores have a positive maximum, as after any attention sink). 16-bit: per
    // thread and row instead (a branch each, taken by the threads that need it: e.g. all of
    // their keys masked), since the warp vote's branch took the consumers' wgmma descriptors
    // off the uniform datapath (head 128, GA_PW_SCHED_HOIST: the loop's turn 43 -> 110
    // instructions, 30 R2UR; session 12's failure mode).
    if constexpr (!PW_FP8) {
      vmax[0] = __int_as_float(i0 < 0 ? pw_row_imax<true>(s, 0) : i0);
      vmax[1] = __int_as_float(i1 < 0 ? pw_row_imax<true>(s, 1) : i1);
    } else if (__any_sync(0xffffffffu, (i0 | i1) < 0)) {
      const int n0 = pw_row_imax<true>(s, 0), n1 = pw_row_imax<true>(s, 1);
      vmax[0] = __int_as_float(i0 < 0 ? n0 : i0);
      vmax[1] = __int_as_float(i1 < 0 ? n1 : i1);
    } else {
      vmax[0] = __int_as_float(i0);
      vmax[1] = __int_as_float(i1);
    }
  }
  auto row_max = [&](int r) { return IMAX ? vmax[r] : fmaxf(mx[r][0], mx[r][1]); };
  // PW_REF_MAX: see below. M_SLACK: how far a row's maximum may pass its reference.
  constexpr float M_SLACK = !PW_FP8 ? 8.f : PW_P8_SHIFT == 8 ? 0.8f : 1.8f;
  static_assert(!PW_FP8 || M_SLACK + PW_P8_SHIFT <= 8.807f,
                "prefill_sm90 fp8: P must stay under 448");
  float m_use[2], sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  // GA_PW_SCHED_VOTE_MAX: a row's reference moves only if its maximum passes it by more than
  // M_SLACK, i.e. only if one of its four threads' own maxima does. When no thread of the warp
  // sees that (one vote), every reference stays and alpha is 1 (a row that saw nothing keeps
  // m = -inf, and O and l are 0 whatever alpha is), without the quad's shuffles; else the full
  // path below, with the same result.
  constexpr bool VOTE = PW_REF_MAX && (PW_SCHED & GA_PW_SCHED_VOTE_MAX) != 0;
  const bool stay = VOTE && !__any_sync(0xffffffffu, row_max(0) * sc > m[0] + M_SLACK ||
                                                         row_max(1) * sc > m[1] + M_SLACK);
  if (stay) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_use[r] = m[r] == ninf ? 0.f : m[r];
      alpha[r] = 1.f;
      // fp8: P's 2^8 as below (without it, session 13 measured a wrong kernel: P of the tiles
      // after the first at 2^-8 of their scale).
      if (PW_FP8) m_use[r] -= static_cast<float>(PW_P8_SHIFT);
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float v = row_max(r);
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
      // PW_REF_MAX: m is the row's reference maximum, which stays put until the row's maximum
      // passes it by more than M_SLACK, so that the probabilities are at most 2^M_SLACK (fp8:
      // 2^(s - m + 8), see below). O and l are exact for any reference (both carry the same 2^-m,
      // which cancels in O / l, the sinks and the LSE), and O is rescaled only when a reference
      // moved. fp8: the slack keeps P under 2^(8 + 0.8) = 445.7, inside e4m3's largest value 448,
      // so pw_pack_p8 never saturates; 16-bit: P <= 2^8 = 256 (FlashAttention-4's threshold), well
      // inside fp16's range, and the fp32 sums and accumulators.
      const float m_new = PW_REF_MAX && !(v * sc > m[r] + M_SLACK) ? m[r] : fmaxf(m[r], v * sc);
      // A row with nothing visible yet keeps m = -inf; subtracting 0 instead keeps its
      // probabilities and alpha at exactly 0 rather than NaN.
      m_use[r] = m_new == ninf ? 0.f : m_new;
      alpha[r] = ga_exp2(m[r] - m_use[r]);
      m[r] = m_new;
      // fp8: probabilities 2^(s - m + 8), in [0, 256], so that P's e4m3 rounding (pw_pack_p8)
      // keeps e4m3's full precision down to 2^-17 of the row maximum instead of flushing
      // everything under 2^-9 (FA3's choice too); the sums l carry the same 2^8, which cancels in
      // O / l (the epilogue takes it out of l for the sinks and the LSE).
      if (PW_FP8) m_use[r] -= static_cast<float>(PW_P8_SHIFT);
    }
  }
  // GA_PW_SCHED_EXP_CHUNKS (e4m3, params.h): the exponentials in 4 chunks of 4 key groups, the
  // offsets of chunk c > 0 passed through an FFMA (0 times the first probability of chunk c - 1,
  // exactly m_use for any finite one), so that ptxas cannot issue all 64 FFMAs ahead of the first
  // MUFU.EX2 and puts the later chunks' FFMAs into the MUFU.EX2 issue gaps instead.
  constexpr bool CHUNKS = PW_FP8 && (PW_SCHED & GA_PW_SCHED_EXP_CHUNKS) && NB % 4 == 0;
  float mo[2] = {m_use[0], m_use[1]};
#pragma unroll
  for (int j = 0; j < NB; ++j) {
    if (CHUNKS && j > 0 && j % (NB / 4) == 0) {
      const float prev = s[(j - NB / 4) * 4];
      mo[0] = fmaf(prev, 0.f, m_use[0]);
      mo[1] = fmaf(prev, 0.f, m_use[1]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = fmaf(s[j * 4 + e], sc, -(CHUNKS ? mo[e >> 1] : m_use[e >> 1]));
      s[j * 4 + e] = PW_F8V & 2 ? x : ga_exp2(x);
      if (!PW_ROWSUM) sum[e >> 1][j & 1] += s[j * 4 + e];
    }
  }
  if (!PW_ROWSUM) {  // else the P V wgmmas sum P (PW_ROWSUM), and l is unused
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + (sum[r][0] + sum[r][1]);
  }
}

// PW_SPEC16, an unmasked tile whose rows all have a reference maximum m (16-bit, scores without a
// soft cap or ALiBi): the probabilities at the reference, 2^(s scale - m), in place in s, with
// this thread's row maxima of the raw scores taken beside them rather than before (no FMNMX chain
// or shuffle between S and the exponentials); then one warp vote whether some row's maximum passed
// its reference by more than pw_softmax's slack, i.e. whether pw_softmax would move a reference.
// If none did, l takes the sums and alpha is 1: pw_softmax's values bit for bit (the same
// reference, exponents and summation order). Else (true; PW_SPEC16_TEST: always) m and l are left
// as they were and s holds probabilities, not scores: the caller scores the tile again
// (pw_rescore_warp) and runs pw_softmax.
__device__ __forceinline__ bool pw_softmax_spec(float sc, float (&s)[PW_BLOCK_N / 2],
                                                const float (&m)[2], float (&l)[2],
                                                float (&alpha)[2]) {
  constexpr float M_SLACK = 8.f;  // pw_softmax's, 16-bit
  const float ninf = __int_as_float(0xff800000);
  float mx[2][2] = {{ninf, ninf}, {ninf, ninf}}, sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int j = 0; j < PW_BLOCK_N / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = s[j * 4 + e];
      mx[e >> 1][j & 1] = fmaxf(mx[e >> 1][j & 1], x);
      s[j * 4 + e] = ga_exp2(fmaf(x, sc, -m[e >> 1]));
      sum[e >> 1][j & 1] += s[j * 4 + e];
    }
  }
  // The sums before the vote (else they sink into its branch, a chain of FADDs behind it rather
  // than beside the exponentials).
  asm volatile("" : "+f"(sum[0][0]), "+f"(sum[0][1]), "+f"(sum[1][0]), "+f"(sum[1][1]));
  const bool moved = PW_SPEC16_TEST ||
                     __any_sync(0xffffffffu, fmaxf(mx[0][0], mx[0][1]) * sc > m[0] + M_SLACK ||
                                                 fmaxf(mx[1][0], mx[1][1]) * sc > m[1] + M_SLACK);
  if (!moved) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += sum[r][0] + sum[r][1];
      alpha[r] = 1.f;
    }
  }
  return moved;
}

// S of the K tile at kt for this warp's 16 rows (qr: its row g in the Q tile at q_base) by
// mma.sync, A = Q and the K-major B = K, both 128-byte swizzled in shared memory, into s in the
// wgmma accumulator layout: the speculative softmaxes' second scoring (PW_SPEC16: m16n8k16;
// fp8's PW_F8_SPEC: m16n8k32 e4m3 x {e4m3, e5m2}). Per k-step of 32 bytes a thread's A words are
// the 4 bytes at 4 (lane % 4) of chunks 2 kk and 2 kk + 1 of rows g and g + 8, its B words the
// same bytes of key row 8 nb + g: both shapes' fragments in bytes.
// A's words of k-step kk (32 bytes) for rows qr, qr + 8 of the Q tile at q_base: the 4 bytes at
// t4 = 4 (lane % 4) of chunks 2 kk and 2 kk + 1 (a0 / a2 row qr, a1 / a3 row qr + 8), the A
// fragment of mma.sync m16n8k32 e4m3 (m16n8k16 16-bit) and, per warp, of wgmma's A from registers.
__device__ __forceinline__ void pw_q_frag(unsigned q_base, int qr, int kk, unsigned t4,
                                          unsigned (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    asm volatile("ld.shared.u32 %0, [%1];\n"
                 : "=r"(a[i])
                 : "r"(q_base + pw_swizzle(qr + 8 * (i & 1), 2 * kk + (i >> 1), PW_BLOCK_M) + t4));
}

__device__ __forceinline__ void pw_rescore_warp(unsigned q_base, unsigned kt, int qr, int lane,
                                                float (&s)[PW_BLOCK_N / 2]) {
  const unsigned t4 = 4 * (lane & 3);
#pragma unroll
  for (int i = 0; i < PW_BLOCK_N / 2; ++i) s[i] = 0.f;
#pragma unroll 1
  for (int kk = 0; kk < HEAD_SIZE * PW_EB / 32; ++kk) {
    unsigned a[4];
    pw_q_frag(q_base, qr, kk, t4, a);
#pragma unroll
    for (int nb = 0; nb < PW_BLOCK_N / 8; ++nb) {
      unsigned b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        asm volatile("ld.shared.u32 %0, [%1];\n"
                     : "=r"(b[i])
                     : "r"(kt + pw_swizzle(8 * nb + (lane >> 2), 2 * kk + i, PW_BLOCK_N) + t4));
      float* d = s + nb * 4;
#define PW_MMA_SYNC(INSTR)                                                                \
  asm volatile(INSTR " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
      if constexpr (PW_FP8 && KV_FP8 == 2)
        PW_MMA_SYNC("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32");
      else if constexpr (PW_FP8)
        PW_MMA_SYNC("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32");
      else if constexpr (IS_BF16)
        PW_MMA_SYNC("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
      else
        PW_MMA_SYNC("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32");
#undef PW_MMA_SYNC
    }
  }
}

// One-body specs (16-bit, no soft cap, ALiBi or block sparsity; which ones: the consumers'
// softmax lambda): the causal/window mask of a masked tile as a pass of its own over the raw
// scores (invisible keys -inf), so that one inlined pw_softmax<false> serves masked and unmasked
// tiles; the values are pw_softmax<true>'s.
__device__ __forceinline__ void pw_mask_scores(const PrefillParams& p, float (&s)[PW_BLOCK_N / 2],
                                               int n0, int kv_end, int t2, const int (&pos)[2]) {
#pragma unroll
  for (int j = 0; j < PW_BLOCK_N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (!ga_prefill_visible(pos[e >> 1], n0 + j * 8 + t2 + (e & 1), kv_end, p.window))
        s[j * 4 + e] = __int_as_float(0xff800000);
}

// O's rows g (alpha[0]) and g + 8 (alpha[1]) times their rescale factors.
__device__ __forceinline__ void pw_rescale_o(float (&o)[HEAD_SIZE / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int d = 0; d < HEAD_SIZE / 8; ++d) {
    o[d * 4 + 0] *= alpha[0];
    o[d * 4 + 1] *= alpha[0];
    o[d * 4 + 2] *= alpha[1];
    o[d * 4 + 3] *= alpha[1];
  }
}

// Probabilities of one tile -> the A fragments (m16n8k16 layout) of P V.
__device__ __forceinline__ void pw_pack_p(const float (&s)[PW_BLOCK_N / 2],
                                          unsigned (&pf)[PW_PF_STEPS][4]) {
#pragma unroll
  for (int j = 0; j < (PW_FP8 ? 0 : PW_BLOCK_N / 8); ++j) {  // fp8: pw_pack_p8
    pf[j >> 1][(j & 1) * 2 + 0] = ga_pack2(s[j * 4 + 0], s[j * 4 + 1]);
    pf[j >> 1][(j & 1) * 2 + 1] = ga_pack2(s[j * 4 + 2], s[j * 4 + 3]);
  }
}

// Four floats -> four e4m3 bytes, a first (lowest byte): round to nearest even, saturating to
// +-448 (probabilities are at most 256, so nothing saturates).
__device__ __forceinline__ unsigned pw_e4m3x4(float a, float b, float c, float d) {
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
  return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}

// fp8: probabilities of one tile -> e4m3 A fragments of P V (m16n8k32 layout per warp: a0 / a2
// row g, a1 / a3 row g + 8, 4 bytes each at k = 4 t and 16 + 4 t of each 32-key step). This
// thread holds keys 2 t, 2 t + 1 of every 8; pw_transpose_v orders each 16 keys of a V^T row
// as 0, 8, 1, 9, .., 7, 15, so k = 4 t .. 4 t + 3 of a step are keys 2 t, 8 + 2 t, 2 t + 1,
// 9 + 2 t: exactly this thread's own probabilities, and P needs no shuffle between threads.
__device__ __forceinline__ void pw_pack_p8(const float (&s)[PW_BLOCK_N / 2],
                                           unsigned (&pf)[PW_PF_STEPS][4]) {
#pragma unroll
  for (int kk = 0; kk < (PW_FP8 ? PW_PF_STEPS : 0); ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // keys 32 kk + 16 h .. + 15: 8-key groups j, j + 1
      const int j = 4 * kk + 2 * h;
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // rows g, g + 8
        if (PW_F8V & 4) {            // timing only: no packing
          pf[kk][2 * h + r] = __float_as_uint(s[j * 4 + 2 * r]);
          asm volatile("" ::"f"(s[(j + 1) * 4 + 2 * r]), "f"(s[j * 4 + 2 * r + 1]),
                       "f"(s[(j + 1) * 4 + 2 * r + 1]));
        } else {
          pf[kk][2 * h + r] = pw_e4m3x4(s[j * 4 + 2 * r], s[(j + 1) * 4 + 2 * r],
                                        s[j * 4 + 2 * r + 1], s[(j + 1) * 4 + 2 * r + 1]);
        }
      }
    }
  }
}

// pw_pack_p8 in two steps (GA_PW_SCHED_EARLY_PACK): the e4m3 pairs of each A word, 16 bits
// each (h[kk][i][0] the word's low half), then the words into pf.
__device__ __forceinline__ void pw_pack_p8_halves(const float (&s)[PW_BLOCK_N / 2],
                                                  unsigned short (&h)[PW_PF_STEPS][4][2]) {
#pragma unroll
  for (int kk = 0; kk < (PW_FP8 ? PW_PF_STEPS : 0); ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // i = 2 half + row (pw_pack_p8's h, r)
      const int j = 4 * kk + 2 * (i >> 1), r = i & 1;
#pragma unroll
      for (int e = 0; e < 2; ++e)
        asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n"
                     : "=h"(h[kk][i][e])
                     : "f"(s[(j + 1) * 4 + 2 * r + e]), "f"(s[j * 4 + 2 * r + e]));
    }
  }
}
__device__ __forceinline__ void pw_pair_p8(const unsigned short (&h)[PW_PF_STEPS][4][2],
                                           unsigned (&pf)[PW_PF_STEPS][4]) {
#pragma unroll
  for (int kk = 0; kk < (PW_FP8 ? PW_PF_STEPS : 0); ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      asm volatile("mov.b32 %0, {%1, %2};\n"
                   : "=r"(pf[kk][i])
                   : "h"(h[kk][i][0]), "h"(h[kk][i][1]));
}

// fp8: transposes the raw V tile at `raw` ([key][dim], swizzled as a K tile) into the V^T stage
// at `vt` ([dim][key]: one 128-byte row of PW_BLOCK_N keys per head dimension, swizzled, the
// K-major B operand of P V). Producer thread ptid (of 128); warp w does keys 32 w .. 32 w + 31.
// Each step moves 16 keys x 32 dimensions: ldmatrix.x4 gives this thread 4 bytes (dimensions
// 4 q .. 4 q + 3 of two 16-byte chunks) of key row i and of key row 8 + i (i = lane / 4,
// q = lane % 4); byte permutes pair them into 16-bit words (key i, key 8 + i) of one dimension,
// and stmatrix.trans writes the 8 x 8 word matrices transposed: each V^T row gets, for its 16
// keys, the order 0, 8, 1, 9, .., 7, 15 (pw_pack_p8 packs P in the same order). Which two of its
// four dimensions a thread puts in which matrix alternates with q, so that the 8 rows of every
// stored matrix fall in 8 distinct 16-byte bank groups of the swizzle (no bank conflicts on
// either side).
// One step of pw_transpose_v: 16 keys x 32 dimensions from the raw tile at ld into the V^T stage
// at st (this lane's ldmatrix and stmatrix addresses).
// (In two halves, pw_transpose_load and pw_transpose_store, for pw_transpose_v_rows' pipelined
// form.)
__device__ __forceinline__ void pw_transpose_load(unsigned ld, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(ld)
               : "memory");
}
__device__ __forceinline__ void pw_transpose_store(const unsigned (&r)[4], unsigned st,
                                                   unsigned sel_a, unsigned sel_b) {
  unsigned x0, x1, y0, y1;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(x0) : "r"(r[0]), "r"(r[1]), "r"(sel_a));
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(x1) : "r"(r[0]), "r"(r[1]), "r"(sel_b));
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(y0) : "r"(r[2]), "r"(r[3]), "r"(sel_a));
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(y1) : "r"(r[2]), "r"(r[3]), "r"(sel_b));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(st),
               "r"(x0), "r"(x1), "r"(y0), "r"(y1)
               : "memory");
}
__device__ __forceinline__ void pw_transpose_step(unsigned ld, unsigned st, unsigned sel_a,
                                                  unsigned sel_b) {
  unsigned r[4];
  pw_transpose_load(ld, r);
  pw_transpose_store(r, st, sel_a, sel_b);
}
// A lane's place in pw_transpose_v's steps: the matrix and row it addresses (mi, j), its quad
// lane q, the ldmatrix row (key) and chunk, and the dimension (V^T row) it stores.
struct PwTransposeLane {
  int ld_key, ld_chunk, st_dim;
  unsigned sel_a, sel_b;  // byte selectors: bytes 0, 1 (or 2, 3) of both rows, and the others
};
__device__ __forceinline__ PwTransposeLane pw_transpose_lane(int lane) {
  PwTransposeLane t;
  const int mi = lane >> 3, j = lane & 7;  // the matrix and row this lane addresses
  const int q = lane & 3;
  t.sel_a = q < 2 ? 0x5140u : 0x7362u;
  t.sel_b = q < 2 ? 0x7362u : 0x5140u;
  // ldmatrix: matrices (key rows 0-7, chunk 0), (rows 8-15, chunk 0), (0-7, 1), (8-15, 1).
  t.ld_key = 8 * (mi & 1) + j;
  t.ld_chunk = mi >> 1;
  // stmatrix: row j of matrix mi is the dimension its column j holds (see sel_a / sel_b).
  const int jq = j >> 1;
  t.st_dim = 16 * (mi >> 1) + 4 * jq + ((jq < 2) == ((mi & 1) == 0) ? 0 : 2) + (j & 1);
  return t;
}
__device__ __forceinline__ void pw_transpose_v(unsigned raw, unsigned vt, int ptid) {
  const int warp = ptid >> 5;
  const PwTransposeLane t = pw_transpose_lane(ptid & 31);
  // 16-key chunks per warp; wider tiles (PW_FP8_WIDE) loop over them rather than unroll, so that
  // the producer does not keep every step's addresses in registers (it spilled at 56 registers).
  constexpr int KG = PW_BLOCK_N / 64;
#pragma unroll(KG > 2 ? 1 : KG)
  for (int kg = 0; kg < KG; ++kg) {
    const int kc = KG * warp + kg;  // 16-key chunk of the V^T rows
#pragma unroll
    for (int du = 0; du < HEAD_SIZE / 32; ++du)
      pw_transpose_step(raw + pw_swizzle(16 * kc + t.ld_key, 2 * du + t.ld_chunk, PW_BLOCK_N),
                        vt + pw_swizzle(32 * du + t.st_dim, kc, HEAD_SIZE), t.sel_a, t.sel_b);
  }
}
// PW_F8_ROWS (128-key tiles: two 16-key chunks a warp): pw_transpose_v with the lane's offsets
// formed once a block (pw_transpose_offsets) as single opaque values, so that a tile's 16
// addresses take 4 + 2 additions of the stage bases (the rest immediates: kg, 2048 bytes apart on
// the raw side; du, 4096 apart on the V^T side), where ptxas otherwise rebuilt each from its row
// and swizzle terms (two instructions an address, 32 a tile).
struct PwTransposeOffsets {
  unsigned ld[HEAD_SIZE / 32];  // raw tile offsets of step (kg 0, du)
  unsigned st[2];               // V^T offsets of step (kg, du 0)
};
__device__ __forceinline__ PwTransposeOffsets pw_transpose_offsets(int ptid) {
  const int warp = ptid >> 5;
  const PwTransposeLane t = pw_transpose_lane(ptid & 31);
  PwTransposeOffsets o;
#pragma unroll
  for (int du = 0; du < HEAD_SIZE / 32; ++du)
    o.ld[du] = pw_opaque(pw_swizzle(32 * warp + t.ld_key, 2 * du + t.ld_chunk, PW_BLOCK_N));
#pragma unroll
  for (int kg = 0; kg < 2; ++kg)
    o.st[kg] = pw_opaque(pw_swizzle(t.st_dim, 2 * warp + kg, HEAD_SIZE));
  return o;
}
// -DGA_PREFILL_SM90_FP8_VAR=1024 (correct, off): pipelined, the next step's ldmatrix issued before
// this step's permutes and stmatrix (8 registers a thread; all 8 steps' loads first spilled 45
// STL/LDL at the producer's 88 registers, 4 at a time 39), so each load's latency overlaps the
// step before: ncu (H200, session 19) had the PRMTs waiting on their LDSM as the producer's largest
// stall, with the producer busy ~86% of the time. Measured 0.4% faster alone but slower with
// GA_PW_SCHED_Q_REGS than Q_REGS alone (4 x 4096 causal: 694.9 / 696.5 / 690.3 us, main 697.5;
// docs/fp8-prefill-h200-2026-11-28-s19.txt), so the default keeps the step-by-step order.
__device__ __forceinline__ void pw_transpose_v_rows(unsigned raw, unsigned vt,
                                                    const PwTransposeOffsets& o, int ptid) {
  const PwTransposeLane t = pw_transpose_lane(ptid & 31);
  if (!(PW_F8V & 1024)) {
#pragma unroll
    for (int kg = 0; kg < 2; ++kg) {
#pragma unroll
      for (int du = 0; du < HEAD_SIZE / 32; ++du)
        pw_transpose_step(raw + o.ld[du] + kg * 16 * 128, vt + o.st[kg] + du * 32 * 128, t.sel_a,
                          t.sel_b);
    }
    return;
  }
  constexpr int DU = HEAD_SIZE / 32, STEPS = 2 * DU;  // step i: kg = i / DU, du = i % DU
  unsigned r[2][4];
  pw_transpose_load(raw + o.ld[0], r[0]);
#pragma unroll
  for (int i = 0; i < STEPS; ++i) {
    if (i + 1 < STEPS)
      pw_transpose_load(raw + o.ld[(i + 1) % DU] + (i + 1) / DU * 16 * 128, r[(i + 1) & 1]);
    pw_transpose_store(r[i & 1], vt + o.st[i / DU] + i % DU * 32 * 128, t.sel_a, t.sel_b);
  }
}

// TMA (flash layouts, paged, not block-sparse, 16-bit, the head sizes of params.h's
// ga_prefill_sm90_tma; GaPrefillTma): the producer's warp 0 loads each K and V tile with
// cp.async.bulk.tensor, one box of PW_TMA_ROWS keys x 128 bytes per page segment and 128-byte
// column block (params.h, ga_prefill_sm90_tma_rows), lane b issuing box b; the boxes land where
// pw_swizzle puts the rows (the map's 128-byte swizzle on a 1024-byte aligned box is
// chunk ^ (row % 8)), completing the stage's full mbarrier by their bytes. Only tiles that end at
// or before kv_end take it: the tile that kv_end cuts keeps the per-row gather, which zero-fills
// the rows past it (the consumers mask their scores, but P V would still multiply stale V rows, NaN
// included, by 0). Q keeps the gather (one tile a block). (Enumerators, not namespace-level
// constants: those would add to every spec's GLOBAL and CONSTANT totals, TMA or not.)
enum PwTmaGeometry : int {
  PW_TMA_ROWS = ga_prefill_sm90_tma_rows(BLOCK_SIZE, HEAD_SIZE, PW_FP8),
  PW_TMA = !PW_LEGACY && !GA_BLOCK_SPARSE && !GA_DENSE_KV && PW_TMA_ROWS > 0,
  PW_TMA_PAGES = PW_TMA ? PW_BLOCK_N / PW_TMA_ROWS : 1,  // segments per tile
  PW_TMA_COLS = HEAD_SIZE * PW_EB / 128,                 // column blocks per tile
  PW_TMA_BOXES = PW_TMA_PAGES * PW_TMA_COLS,
  // The gather's FULL path for the tiles that end at or before kv_end (see PW_PASSES).
  PW_FULL_TILES = HEAD_SIZE == 128 && (!PW_FP8 || PW_ROW_SHIFT == 3) && !PW_LEGACY &&
                  !GA_DENSE_KV && !GA_BLOCK_SPARSE,
  // The lean gather (pw_lean_blocks, pw_lean_copy) for every K/V tile the producer gathers:
  // 8 lanes a row with fewer than 88 producer registers (head size 256: 24, head size 64: 32,
  // fp8 with three consumers: 32), flash layouts, paged, not block-sparse or checked
  // (PW_PRODUCER_EXTRA). The default of head size 256's such specs (params.h's
  // ga_prefill_sm90_sched); head size 64 only forced. (fp8 also recomputes V's offsets and the
  // transpose's addresses each tile, pw_opaque: held, they spilled 32 STL at 32 registers.)
  PW_LEAN_GATHER = PW_ROW_SHIFT == 3 && PW_PRODUCER_REGS < 88 && (!PW_FP8 || PW_CONSUMERS == 3) &&
                   !PW_LEGACY && !GA_DENSE_KV && !PW_PRODUCER_EXTRA &&
                   BLOCK_SIZE % PW_PASS_ROWS == 0
};
static_assert(!PW_TMA || (!PW_FP8 && PW_BLOCK_N % PW_TMA_ROWS == 0 && PW_TMA_ROWS % 8 == 0 &&
                          PW_TMA_BOXES <= 32 && PW_TMA_ROWS <= 256),
              "prefill_sm90: uneven TMA boxes");

// e4m3 full tiles by warp rows (PW_F8_ROWS; session 14b, issue 25): the same tile bytes as
// pw_gather_rows / pw_gather_copy<true> with another map of threads to rows, so that each
// producer thread touches as few cache blocks as possible. Warp w copies tile rows 32 w .. 32 w +
// 31: lane l chunk l % 8 of rows 32 w + 4 i + l / 8, i = 0 .. 7 (each warp instruction still one
// whole 128-byte line of 4 rows). The rows of one thread then lie in PW_F8_BLOCKS cache blocks
// (block 16: 2; 32 and up: 1) instead of one a pass (8): a tile takes PW_F8_BLOCKS block-table
// loads and 64-bit block offsets a thread (for K and V each one IMAD.WIDE-style multiply-add
// onto a per-thread base pointer), and each copy only adds its row's 32-bit offset within the
// block (i % PW_F8_RPB rows of 4 tokens). The swizzle of row 32 w + 4 i + l / 8 depends only on
// i's parity: two shared-memory offsets a thread, the rest immediates. Where: e4m3 head 128 with
// 8 lanes a row, 128-key tiles, block sizes 16-64 (those the GPU tests run; 128 keeps the pass
// map), paged (not dense, not checked).
// Off with -DGA_PREFILL_SM90_FP8_VAR=512 (the pass map above, for comparison).
enum PwF8Rows : int {
  PW_F8_ROWS = PW_FP8 && PW_FULL_TILES && PW_ROW_SHIFT == 3 && PW_BLOCK_N == 128 &&
               PW_CHUNKS == 8 && 128 % BLOCK_SIZE == 0 && BLOCK_SIZE <= 64 && !PW_PRODUCER_EXTRA &&
               !PW_LEAN_GATHER && !(PW_F8V & 512),
  PW_F8_BLOCKS = BLOCK_SIZE < 32 ? 32 / BLOCK_SIZE : 1,  // cache blocks of a thread's rows
  PW_F8_RPB = 8 / PW_F8_BLOCKS                           // its rows (i) in each of them
};
struct PwF8Rows8 {
  const pw_elem* k;  // key cache + this thread's offset in its first block
  const pw_elem* v;  // value cache + the same offset
  unsigned dst[2];   // tile offsets of rows 32 w + l / 8 (+ 4): i even, i odd
  unsigned step;     // 4 tokens, elements
  int table;         // block-table index of its first block, relative to n0's
};
__device__ __forceinline__ PwF8Rows8 pw_f8_rows_setup(const PrefillParams& p, long long head_off,
                                                      int ptid) {
  PwF8Rows8 r;
  const int w = ptid >> 5, lr = (ptid & 31) >> 3, q = ptid & 7;
  const int w_rows = BLOCK_SIZE > 32 ? (32 * w) % BLOCK_SIZE : 0;  // warp's row in its block
  const long long off =
      static_cast<long long>(w_rows + lr) * p.kv.cache_token_stride + head_off + q * PW_CHUNK_ELEMS;
  r.k = static_cast<const pw_elem*>(p.kv.key_cache) + off;
  r.v = static_cast<const pw_elem*>(p.kv.value_cache) + off;
  r.dst[0] = pw_swizzle(32 * w + lr, q, PW_BLOCK_N);
  r.dst[1] = pw_swizzle(32 * w + 4 + lr, q, PW_BLOCK_N);
  r.step = static_cast<unsigned>(4 * p.kv.cache_token_stride);
  r.table = 32 * w / BLOCK_SIZE;
  return r;
}
// The tile at n0 (a full tile: n0 + PW_BLOCK_N <= kv_end) from `cache_base` (r.k or r.v) into
// dst, its blocks blk (pw_f8_rows_blocks: this thread's blocks of the tile at n0).
__device__ __forceinline__ void pw_f8_rows_blocks(const int* block_row, const PwF8Rows8& r, int n0,
                                                  int (&blk)[PW_F8_BLOCKS]) {
  const int* bt = block_row + static_cast<unsigned>(n0) / BLOCK_SIZE + r.table;
#pragma unroll
  for (int b = 0; b < PW_F8_BLOCKS; ++b) blk[b] = __ldg(bt + b);
}
__device__ __forceinline__ void pw_f8_rows_copy(const PrefillParams& p, const pw_elem* cache_base,
                                                const PwF8Rows8& r, const int (&blk)[PW_F8_BLOCKS],
                                                unsigned dst) {
#pragma unroll
  for (int b = 0; b < PW_F8_BLOCKS; ++b) {
    const pw_elem* src = cache_base + static_cast<long long>(static_cast<unsigned>(blk[b])) *
                                          p.kv.cache_block_stride;
#pragma unroll
    for (int m = 0; m < PW_F8_RPB; ++m) {
      const int i = b * PW_F8_RPB + m;
      pw_cp_async16_all(dst + r.dst[i & 1] + (i & ~1) * 4 * 128, src + m * r.step);
    }
  }
}

template <bool TMA, typename Base>
struct PwParamsOf {
  using type = Base;
};
template <typename Base>
struct PwParamsOf<true, Base> {
  using type = GaPrefillTmaParams<Base>;
};
template <typename Base>
__device__ __forceinline__ const Base& pw_base(const Base& b) {
  return b;
}
template <typename Base>
__device__ __forceinline__ const Base& pw_base(const GaPrefillTmaParams<Base>& b) {
  return b.base;
}
// The launch's maps, or null for a kernel without TMA.
template <typename Base>
__device__ __forceinline__ const GaPrefillTma* pw_tma_of(const Base&) {
  return nullptr;
}
template <typename Base>
__device__ __forceinline__ const GaPrefillTma* pw_tma_of(const GaPrefillTmaParams<Base>& b) {
  return &b.tma;
}

// Sets the tile's byte count on `bar` with this thread's arrival.
__device__ __forceinline__ void pw_mbar_arrive_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void pw_tma_load(unsigned dst, const GaTensorMap* map, int c0, int c1,
                                            int c2, int c3, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// The cache block of this lane's box of the tile at key n0 (lanes past the boxes: none).
__device__ __forceinline__ int pw_tma_block(const PrefillParams& p, const int* block_row, int n0,
                                            int lane) {
  if (lane >= PW_TMA_BOXES) return 0;
  const int key = n0 + (lane % PW_TMA_PAGES) * PW_TMA_ROWS;
#ifdef GA_CHECK_BOUNDS
  return ga_prefill_checked_block(p, block_row, key);
#else
  return __ldg(block_row + key / BLOCK_SIZE);
#endif
}
// The tile at key n0 of KV head kv_head into the stage at dst by TMA, completing `bar` (count 128:
// every producer thread arrives once, lane 0 of warp 0 with the tile's bytes). blk: this lane's
// block (pw_tma_block); token_dim1: GaPrefillTma::token_dim == 1.
__device__ __forceinline__ void pw_tma_tile(const GaTensorMap* map, bool token_dim1, int blk,
                                            int n0, int kv_head, unsigned dst, unsigned bar,
                                            int ptid) {
  if (ptid < 32) {
    if (ptid == 0) pw_mbar_arrive_tx(bar, PW_BLOCK_N * HEAD_SIZE * PW_EB);
    __syncwarp();
    if (ptid < PW_TMA_BOXES) {
      const int page = ptid % PW_TMA_PAGES, cb = ptid / PW_TMA_PAGES;
      const int tok = (n0 + page * PW_TMA_ROWS) % BLOCK_SIZE;
      pw_tma_load(dst + cb * (PW_BLOCK_N * 128) + page * (PW_TMA_ROWS * 128), map,
                  cb * (128 / PW_EB), token_dim1 ? tok : kv_head, token_dim1 ? kv_head : tok, blk,
                  bar);
    }
    if (ptid != 0) pw_mbar_arrive(bar);
  } else {
    pw_mbar_arrive(bar);
  }
}

#if PW_PERSIST
using PwBaseParams = PrefillQ8PersistParams;
#elif defined(GA_Q_E4M3)
using PwBaseParams = PrefillQ8Params;
#else
using PwBaseParams = PrefillParams;
#endif
using PwParams = PwParamsOf<PW_TMA != 0, PwBaseParams>::type;

extern "C" __global__ void __launch_bounds__(PW_THREADS, 1)
    graphattn_prefill(const __grid_constant__ PwParams kparams) {
#ifdef GA_Q_E4M3
#if PW_PERSIST
  const PrefillQ8Params& params = pw_base(kparams).base;
#else
  const PrefillQ8Params& params = pw_base(kparams);
#endif
  const PrefillParams& p = params.base;
#else
  const PrefillParams& p = pw_base(kparams);
#endif
  extern __shared__ __align__(1024) unsigned char pw_smem[];
  GaPrefillTile tile;
#if PW_PERSIST
  const int persist_x = pw_base(kparams).persist_x;
  if (persist_x == 0) {  // one block per tile (a device split): this block's tile, as without
    if (!ga_prefill_begin<PW_BLOCK_M, PW_BLOCK_N>(p, PW_SMEM_BYTES, PW_THREADS, tile)) return;
  } else {
    ga_grid_dependency_sync();
    ga_require_launch(PW_SMEM_BYTES, PW_THREADS);
  }
  // Work item `it` of this block: 0 no more, 1 none for this item (a row tile past its
  // request), 2 `tile`. Persistent launch (persist_x > 0): the grid's tiles in order of their
  // row tile from the last (the longest causal tiles) to the first, each over the requests and KV
  // heads; the blocks take them round-robin, in reverse order every other round (so that the
  // block that took a round's longest tile takes the next round's shortest), statically: every
  // thread computes the same sequence without any shared state. Otherwise the block's own tile
  // (computed above: in here, ga_prefill_begin's split walk made ptxas spill the P fragments of
  // the consumers' loop).
  auto pw_item = [&](int it) -> int {
    if (persist_x == 0) return it > 0 ? 0 : 2;  // `tile`, above
    const int nb = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int heads = p.num_kv_heads, per_x = p.num_reqs * heads;
    const long long lin = static_cast<long long>(it) * nb + ((it & 1) ? nb - 1 - b : b);
    if (lin >= static_cast<long long>(persist_x) * per_x) return 0;
    const int x = static_cast<int>(lin / per_x), rem = static_cast<int>(lin - x * per_x);
    tile.req = p.first_req + rem / heads;
    tile.kv_head = rem - (rem / heads) * heads;
    tile.m0 = (persist_x - 1 - x) * PW_BLOCK_M;
    return ga_prefill_tile_at<PW_BLOCK_M, PW_BLOCK_N>(p, tile) ? 2 : 1;
  };
  int req = 0, kv_head = 0, q_start = 0, ctx = 0, m0 = 0, rows = 0, kv_end = 0, tile0 = 0;
  int n_tiles = 0, kv_row0 = 0;
  auto item_vars = [&] {
    req = tile.req, kv_head = tile.kv_head, q_start = tile.q_start, ctx = tile.ctx;
    m0 = tile.m0, rows = tile.q_len * GROUP, kv_end = tile.kv_end, tile0 = tile.tile0;
    n_tiles = tile.n_tiles, kv_row0 = tile.kv_row0;
  };
#else
  if (!ga_prefill_begin<PW_BLOCK_M, PW_BLOCK_N>(p, PW_SMEM_BYTES, PW_THREADS, tile)) return;
  const int req = tile.req, kv_head = tile.kv_head, q_start = tile.q_start, ctx = tile.ctx;
  const int m0 = tile.m0, rows = tile.q_len * GROUP, kv_end = tile.kv_end, tile0 = tile.tile0;
  const int n_tiles = tile.n_tiles, kv_row0 = tile.kv_row0;
#endif
  const int tid = threadIdx.x;

  // Tiles start on a 1024-byte boundary (the swizzle pattern repeats every 1024 bytes).
  const unsigned raw_base = pw_smem_addr(pw_smem);
  const unsigned q_base = (raw_base + 1023u) & ~1023u;
  unsigned char* s_q = pw_smem + (q_base - raw_base);
  const unsigned k_base = q_base + PW_Q_BYTES;
  const unsigned v_base = k_base + PW_STAGES * PW_KV_BYTES;
  // mbarriers: Q full; per stage K full, V full (producer arrivals), K empty, V empty (one
  // arrival per consumer warp).
  // fp8: the two raw V tiles (PW_FP8) follow the V^T stages.
  const unsigned raw_v_base = v_base + PW_STAGES * PW_KV_BYTES;
  // PW_O_STAGE: the output buffer, then the mbarriers.
  const unsigned o_stage_base = raw_v_base + ga_prefill_sm90_raw_v_bytes(PW_GEOM);
  const unsigned bar_q = o_stage_base + PW_O_BYTES;
  const unsigned bar_k_full = bar_q + 8;
  const unsigned bar_v_full = bar_k_full + 8 * PW_STAGES;
  const unsigned bar_k_empty = bar_v_full + 8 * PW_STAGES;
  const unsigned bar_v_empty = bar_k_empty + 8 * PW_STAGES;
  // PW_PERSIST: Q empty (one arrival per consumer warp once its last S of the tile is done).
  const unsigned bar_q_empty = bar_v_empty + 8 * PW_STAGES;
  if (tid == 0) {
    if (PW_PERSIST) pw_mbar_init(bar_q_empty, 4 * PW_CONSUMERS);
    pw_mbar_init(bar_q, 128);
    for (int s = 0; s < PW_STAGES; ++s) {
      pw_mbar_init(bar_k_full + 8 * s, 128);
      pw_mbar_init(bar_v_full + 8 * s, 128);
      pw_mbar_init(bar_k_empty + 8 * s, 4 * PW_CONSUMERS);
      pw_mbar_init(bar_v_empty + 8 * s, 4 * PW_CONSUMERS);
    }
  }
  // PW_ROWSUM: the 256-byte ones tile, in the slack (GA_PREFILL_SM90_SLACK): before q_base where
  // the base alignment left room, else after the mbarriers' 256 bytes (then the alignment took
  // under 256 of its 1024 bytes); 256-byte aligned either way.
  const unsigned ones_base = q_base - raw_base >= 256 ? q_base - 256 : bar_q + 256;
  if (PW_ROWSUM && tid < 64) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(ones_base + 4 * tid), "r"(PW_ONES) : "memory");
    pw_fence_proxy_async();  // the generic-proxy stores, before the wgmmas read them
  }
  __syncthreads();

#if PW_PERSIST
  const int* block_row = nullptr;
#else
  const int* block_row = p.kv.block_table + static_cast<long long>(req) * p.kv.block_table_stride;
#endif
  if (tid < 128) {
    // Producer.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PW_PRODUCER_REGS));
#if PW_PERSIST
    // The ring continues across the block's tiles: `base` K/V tiles were loaded before this one,
    // q_loads Q tiles.
    int stage = 0, base = 0, q_loads = 0;
    unsigned phase = 0;
#else
    constexpr int base = 0;
#endif
    PW_ITEMS_BEGIN();
#if PW_PERSIST
    block_row = p.kv.block_table + static_cast<long long>(req) * p.kv.block_table_stride;
#endif
    if (n_tiles > 0) {
#if PW_PERSIST
      // Q is refilled once every consumer warp's last S of the previous tile is done.
      if (q_loads > 0) pw_mbar_wait(bar_q_empty, (q_loads - 1) & 1);
#endif
      // GA_PW_BSTART_TABLE_L1: the block-table lines of this block's K/V tiles into L1, a line
      // a thread, before the Q copies (the tiles' block lookups then hit L1).
      if (PW_BSTART & GA_PW_BSTART_TABLE_L1) {
        const unsigned long long first =
            reinterpret_cast<unsigned long long>(block_row + tile0 * PW_BLOCK_N / BLOCK_SIZE);
        const unsigned long long last =
            reinterpret_cast<unsigned long long>(block_row + (kv_end - 1) / BLOCK_SIZE);
        const unsigned long long line = (first & ~127ull) + 128ull * tid;
        if (line <= last) asm volatile("prefetch.global.L1 [%0];\n" ::"l"(line));
      }
      // Q rows of this tile (rows past the request are zero-filled).
      constexpr int TOTAL = PW_BLOCK_M * PW_CHUNKS;
      const pw_elem* q = static_cast<const pw_elem*>(p.query);
      if constexpr (PW_Q_STEP) {
        // Row row0 + PW_Q_RS i lies (PW_Q_RS / GROUP) i query tokens after row0, in the same head.
        const int row0 = tid / PW_CHUNKS, c = tid % PW_CHUNKS;
        const pw_elem* src =
            q + ga_prefill_row_offset(m0 + row0, c * PW_CHUNK_ELEMS, q_start, kv_head,
                                      p.query_token_stride, p.query_head_stride);
        const long long step = (PW_Q_RS / GROUP) * p.query_token_stride;
#pragma unroll
        for (int i = 0; i < PW_BLOCK_M / PW_Q_RS; ++i) {
          const int row = row0 + i * PW_Q_RS;
          const bool valid = m0 + row < rows;
          pw_cp_async16(q_base + pw_swizzle(row, c, PW_BLOCK_M), valid ? src : q, valid ? 16 : 0);
          src += step;
        }
      } else {
#pragma unroll 4
        for (int idx = tid; idx < TOTAL; idx += 128) {
          const int row = idx / PW_CHUNKS;
          const int c = idx - row * PW_CHUNKS;
          const int r = m0 + row;
          const bool valid = r < rows;
          const long long off =
              valid ? ga_prefill_row_offset(r, c * PW_CHUNK_ELEMS, q_start, kv_head,
                                            p.query_token_stride, p.query_head_stride)
                    : 0;
          pw_cp_async16(q_base + pw_swizzle(row, c, PW_BLOCK_M), q + off, valid ? 16 : 0);
        }
      }
      pw_mbar_arrive_copies(bar_q);

      const pw_elem* kc = static_cast<const pw_elem*>(p.kv.key_cache);
      const pw_elem* vc = static_cast<const pw_elem*>(p.kv.value_cache);
      const PwGather gather =
          pw_gather_setup(static_cast<long long>(kv_head) * p.kv.cache_head_stride, tid);
      const PwLegacyK legacy_k =
          pw_legacy_k_setup(static_cast<long long>(kv_head) * p.kv.cache_head_stride, tid);
      const PwF8Rows8 f8_rows =
          pw_f8_rows_setup(p, static_cast<long long>(kv_head) * p.kv.cache_head_stride, tid);
      // TMA: the maps (kernel parameters), and whether this launch uses them.
      const GaTensorMap* k_map = nullptr;
      const GaTensorMap* v_map = nullptr;
      bool tma_on = false, tma_tok1 = true;
      if constexpr (PW_TMA) {
        const GaPrefillTma* tma = pw_tma_of(kparams);
        k_map = &tma->key;
        v_map = &tma->value;
        tma_on = tma->enabled != 0;
        tma_tok1 = tma->token_dim == 1;
        if (tma_on && tid == 0) {
          asm volatile(
              "prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(k_map))
              : "memory");
          asm volatile(
              "prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(v_map))
              : "memory");
        }
      }
      // fp8: tile i's raw V, once landed (its copies are commit group i; with `last`, the
      // newest), transposed into its V^T stage.
      PwTransposeOffsets vt_offsets;  // PW_F8_ROWS
      if (PW_F8_ROWS) vt_offsets = pw_transpose_offsets(tid);
      auto transpose_v = [&](int i, bool last) {
        if (last)
          pw_cp_wait_group<0>();
        else
          pw_cp_wait_group<1>();
        pw_bar_sync(PW_PRODUCER_BAR, 128);  // every thread's copies of the tile landed
        const int st = i % PW_STAGES;
        if (i >= PW_STAGES) pw_mbar_wait(bar_v_empty + 8 * st, ((i / PW_STAGES) & 1) ^ 1);
        if (PW_F8V & 1) {  // (1: timing only)
        } else if (PW_F8_ROWS) {
          pw_transpose_v_rows(raw_v_base + (i & 1) * PW_KV_BYTES, v_base + st * PW_KV_BYTES,
                              vt_offsets, tid);
        } else {
          pw_transpose_v(raw_v_base + (i & 1) * PW_KV_BYTES, v_base + st * PW_KV_BYTES,
                         PW_LEAN_GATHER ? pw_opaque(tid) : tid);
        }
        pw_fence_proxy_async();  // the generic-proxy stores, before the wgmmas read them
        pw_mbar_arrive(bar_v_full + 8 * st);
      };
#if !PW_PERSIST
      int stage = 0;
      unsigned phase = 0;
#endif
#if GA_BLOCK_SPARSE
      // The tiles kept: j counts the tiles loaded, t is the tile's index.
      const PwTiles tiles{tile0, n_tiles, m0, rows, ctx, kv_head, tid, PW_BSP_BAR};
      for (int j = 0, t = tiles.first(p); t < n_tiles; ++j, t = tiles.next(p, t)) {
        const int n0 = (tile0 + t) * PW_BLOCK_N;
#else
      for (int j = 0; j < n_tiles; ++j) {
        const int n0 = (tile0 + j) * PW_BLOCK_N;
#endif
        long long off[PW_PASSES], lk_src[PW_LK_GPW];
        int lean_blk[PW_PASSES];   // PW_LEAN_GATHER
        int f8_blk[PW_F8_BLOCKS];  // PW_F8_ROWS
        // TMA for the tiles that end at or before kv_end (the tile kv_end cuts zero-fills).
        const bool tma = PW_TMA && tma_on && n0 + PW_BLOCK_N <= kv_end;
        const bool full = (PW_FULL_TILES || PW_LEAN_GATHER) && n0 + PW_BLOCK_N <= kv_end;
        int tma_blk = 0;
        // Legacy measurement variants (PW_LV): 1 full tiles, 2 the V^T block looked up here.
        const bool lfull = (PW_LV & 1) && n0 + PW_BLOCK_N <= kv_end;
        int vt_blk = 0;
        if constexpr (PW_LEGACY) {
          if (lfull)
            pw_legacy_k_rows<true>(p, block_row, legacy_k, n0, kv_end, tid, lk_src);
          else
            pw_legacy_k_rows(p, block_row, legacy_k, n0, kv_end, tid, lk_src);
          if (PW_LV & 2)
            vt_blk = lfull ? pw_legacy_vt_block<true>(p, block_row, n0, kv_end, tid)
                           : pw_legacy_vt_block(p, block_row, n0, kv_end, tid);
        } else if (tma)
          tma_blk = pw_tma_block(p, block_row, n0, tid);
        else if (PW_LEAN_GATHER && full)
          pw_lean_blocks<true>(block_row, gather, n0, kv_end, lean_blk);
        else if (PW_LEAN_GATHER)
          pw_lean_blocks<false>(block_row, gather, n0, kv_end, lean_blk);
        else if (PW_F8_ROWS && full)
          pw_f8_rows_blocks(block_row, f8_rows, n0, f8_blk);
        else if (full)
          pw_gather_rows<true>(p, block_row, kv_row0, gather, n0, kv_end, off);
        else
          pw_gather_rows(p, block_row, kv_row0, gather, n0, kv_end, off);
        // A stage is refilled once all consumer warps released its previous use.
        // GA_PW_BSTART_RAMP: tile 1's copies wait until tile 0's K (issued after Q) has landed.
        if ((PW_BSTART & GA_PW_BSTART_RAMP) && j == 1) pw_mbar_wait(bar_k_full, 0);
        if (base + j >= PW_STAGES) pw_mbar_wait(bar_k_empty + 8 * stage, phase ^ 1);
        if constexpr (PW_LEGACY) {
          if (PW_LV & 32) {  // (timing only: no copies)
          } else if (lfull) {
            pw_legacy_load_k<true>(kc, legacy_k, lk_src, n0, kv_end, tid,
                                   k_base + stage * PW_KV_BYTES);
          } else {
            pw_legacy_load_k(kc, legacy_k, lk_src, n0, kv_end, tid, k_base + stage * PW_KV_BYTES);
          }
          pw_mbar_arrive_copies(bar_k_full + 8 * stage);
        } else if (tma) {
          pw_tma_tile(k_map, tma_tok1, tma_blk, n0, kv_head, k_base + stage * PW_KV_BYTES,
                      bar_k_full + 8 * stage, tid);
        } else {
          if (PW_LEAN_GATHER && full)
            pw_lean_copy<true>(kc, p, gather, lean_blk, n0, kv_end, k_base + stage * PW_KV_BYTES);
          else if (PW_LEAN_GATHER)
            pw_lean_copy<false>(kc, p, gather, lean_blk, n0, kv_end, k_base + stage * PW_KV_BYTES);
          else if (PW_F8_ROWS && full)
            pw_f8_rows_copy(p, f8_rows.k, f8_rows, f8_blk, k_base + stage * PW_KV_BYTES);
          else if (full)
            pw_gather_copy<true>(kc, gather, off, n0, kv_end, k_base + stage * PW_KV_BYTES);
          else
            pw_gather_copy(kc, gather, off, n0, kv_end, k_base + stage * PW_KV_BYTES);
          pw_mbar_arrive_copies(bar_k_full + 8 * stage);
        }
        if (PW_FP8) {
          // Raw buffer j % 2 is free once every producer thread has transposed tile j - 2
          // (PW_PERSIST: the block's tiles counted, base + j).
          pw_bar_sync(PW_PRODUCER_BAR, 128);
          if (PW_LEAN_GATHER) {  // V's offsets formed again, not K's held
#pragma unroll
            for (int k = 0; k < PW_PASSES; ++k) lean_blk[k] = pw_opaque(lean_blk[k]);
          }
          if (PW_LEAN_GATHER && full)
            pw_lean_copy<true>(vc, p, gather, lean_blk, n0, kv_end,
                               raw_v_base + ((base + j) & 1) * PW_KV_BYTES);
          else if (PW_LEAN_GATHER)
            pw_lean_copy<false>(vc, p, gather, lean_blk, n0, kv_end,
                                raw_v_base + ((base + j) & 1) * PW_KV_BYTES);
          else if (PW_F8_ROWS && full)
            pw_f8_rows_copy(p, f8_rows.v, f8_rows, f8_blk,
                            raw_v_base + ((base + j) & 1) * PW_KV_BYTES);
          else if (full)
            pw_gather_copy<true>(vc, gather, off, n0, kv_end,
                                 raw_v_base + ((base + j) & 1) * PW_KV_BYTES);
          else
            pw_gather_copy(vc, gather, off, n0, kv_end,
                           raw_v_base + ((base + j) & 1) * PW_KV_BYTES);
          pw_cp_commit();
          if (j > 0) transpose_v(base + j - 1, false);
        } else {
          if (j >= PW_STAGES) pw_mbar_wait(bar_v_empty + 8 * stage, phase ^ 1);
          if constexpr (PW_LEGACY) {
            constexpr bool hoisted = (PW_LV & 2) != 0;
            if (PW_LV & 32) {  // (timing only: no copies)
            } else if ((PW_LV & 128) && lfull) {
              pw_legacy_load_vs<true>(p, block_row,
                                      static_cast<long long>(kv_head) * p.kv.cache_head_stride, n0,
                                      kv_end, v_base + stage * PW_KV_BYTES, tid);
            } else if (PW_LV & 128) {
              pw_legacy_load_vs(p, block_row,
                                static_cast<long long>(kv_head) * p.kv.cache_head_stride, n0,
                                kv_end, v_base + stage * PW_KV_BYTES, tid);
            } else if (lfull) {
              pw_legacy_load_vt<true, hoisted>(
                  p, block_row, static_cast<long long>(kv_head) * p.kv.cache_head_stride, n0,
                  kv_end, v_base + stage * PW_KV_BYTES, tid, vt_blk);
            } else {
              pw_legacy_load_vt<false, hoisted>(
                  p, block_row, static_cast<long long>(kv_head) * p.kv.cache_head_stride, n0,
                  kv_end, v_base + stage * PW_KV_BYTES, tid, vt_blk);
            }
            pw_mbar_arrive_copies(bar_v_full + 8 * stage);
          } else if (tma) {
            pw_tma_tile(v_map, tma_tok1, tma_blk, n0, kv_head, v_base + stage * PW_KV_BYTES,
                        bar_v_full + 8 * stage, tid);
          } else {
            if (PW_LEAN_GATHER && full)
              pw_lean_copy<true>(vc, p, gather, lean_blk, n0, kv_end, v_base + stage * PW_KV_BYTES);
            else if (PW_LEAN_GATHER)
              pw_lean_copy<false>(vc, p, gather, lean_blk, n0, kv_end,
                                  v_base + stage * PW_KV_BYTES);
            else if (full)
              pw_gather_copy<true>(vc, gather, off, n0, kv_end, v_base + stage * PW_KV_BYTES);
            else
              pw_gather_copy(vc, gather, off, n0, kv_end, v_base + stage * PW_KV_BYTES);
            pw_mbar_arrive_copies(bar_v_full + 8 * stage);
          }
        }
        if (++stage == PW_STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      if (PW_FP8) transpose_v(base + n_tiles - 1, true);
      pw_cp_wait_all();
    }
#if PW_PERSIST
    base += n_tiles;
    q_loads += n_tiles > 0;
#endif
    PW_ITEMS_END();
  } else {
    // Consumers: warpgroup cw owns tile rows [64 cw, 64 cw + 64); warp w of it rows
    // [row0, row0 + 16), this thread rows row0 + g and row0 + g + 8.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(PW_CONSUMER_REGS));
    // GA_PW_SCHED_HOIST (params.h): cw broadcast from lane 0, so that ptxas knows it is
    // warp-uniform and the descriptors built from it live on the uniform datapath.
    constexpr bool hoist = (PW_SCHED & GA_PW_SCHED_HOIST) != 0;
    // GA_PW_SCHED_UNIFORM_CW (e4m3, params.h): the warpgroup index by a shuffle too, so that the
    // Q descriptors of S stay on the uniform datapath (no R2UR before each S wgmma).
    constexpr bool ucw = PW_FP8 && (PW_SCHED & GA_PW_SCHED_UNIFORM_CW) != 0;
    const int cw = hoist || ucw ? __shfl_sync(0xffffffffu, (tid >> 7) - 1, 0) : (tid >> 7) - 1;
    const int lane = tid & 31;
    const int row0 = cw * 64 + ((tid >> 5) & 3) * 16;
    const int g = lane >> 2;
    const int t2 = (lane & 3) * 2;
#if PW_PERSIST
    // The ring's stages and phases of tiles j and j - 1 and Q's phase continue across the
    // block's tiles.
    int stage = 0, prev = 0;
    unsigned phase = 0, prev_phase = 0, q_phase = 0;
#else
    constexpr unsigned q_phase = 0;
#endif
    PW_ITEMS_BEGIN();
    int pos[2];
    float slope[2], sink[2];  // ALiBi slopes and sink logits of the rows' heads (log2 domain)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + row0 + g + r * 8;
      pos[r] = row < rows ? ctx + row / GROUP : -1;
      const int head = kv_head * GROUP + row % GROUP;
      slope[r] = ga_alibi_slope_log2(p.terms, head, row < rows);
      sink[r] = ga_sink_log2(p.terms, head, row < rows);
    }
    PwBspRows bsp{};
#if GA_BLOCK_SPARSE
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + row0 + g + r * 8;
      bsp.qb[r] = pos[r] >= 0 ? pos[r] / p.bsp.block : 0;
      bsp.off[r] = ga_bsp_offset(p.bsp, kv_head * GROUP + row % GROUP);
    }
#endif
    const PwTiles tiles{tile0, n_tiles, m0, rows, ctx, kv_head, tid & 127, PW_BSP_BAR + 1 + cw};
    // Positions of the warp's first and last rows (rows past the request are never stored,
    // so they need no mask).
    const int w_pos_lo = ctx + (m0 + row0) / GROUP;
    const int w_pos_hi = ctx + (min(rows, m0 + row0 + 16) - 1) / GROUP;

    // o: output accumulators; s: scores, then probabilities, of the newest tile; pf: the
    // probabilities of the tile whose P V is issued next, as wgmma A fragments.
    float o[HEAD_SIZE / 2];
    float s[PW_BLOCK_N / 2];
    unsigned pf[PW_PF_STEPS][4];
    const float ninf = __int_as_float(0xff800000);
    float m[2] = {ninf, ninf}, l[2] = {0.f, 0.f}, alpha[2];
    float ls[4] = {0.f, 0.f, 0.f, 0.f};  // PW_ROWSUM's row sums (rows g, g + 8: ls[0], ls[2])
    const unsigned long long ones_desc = pw_desc(ones_base, 128, 128, 0);
#pragma unroll
    for (int i = 0; i < HEAD_SIZE / 2; ++i) o[i] = 0.f;

    // Descriptors: Q and K K-major (8-row groups 1024 bytes apart; k-steps of 16 columns are
    // 32 bytes inside the swizzled 128-byte row, column blocks of 64 a whole block apart; the
    // legacy K tile unswizzled: pw_k_desc, pw_k_kstep); V MN-major (64-column blocks PW_BLOCK_N
    // rows apart, 8-row groups 1024 bytes apart), the legacy and fp8 V^T K-major (PW_V_LEAD,
    // pw_v_kstep).
    const unsigned long long q_desc = pw_desc(q_base + cw * 64 * 128, 16, 1024);
    const unsigned long long k_desc = pw_k_desc(k_base);
    const unsigned long long v_desc = PW_LV & 128 ? pw_desc(v_base, 16, 256, 3)  // 32-byte swizzle
                                                  : pw_desc(v_base, PW_V_LEAD, 1024);
#ifdef GA_Q_E4M3
    const GaPrefillScales scales = ga_prefill_q8_scales(p, params.q8, req, kv_head);
#else
    const PrefillParams& scales = p;  // 16-bit KV: the host's scales, no k/v scales
#endif

    // GA_PW_SCHED_HOIST: a tile's descriptors (S's Q and K k-steps, P V's V k-steps), formed
    // before the turn's barrier (hoist_s, hoist_v). With cw uniform (above) the Q descriptors stay
    // in uniform registers across the loop; ptxas still forms the K and V k-steps' (UIADD3.64)
    // next to their wgmmas inside the turn (params.h gives the counts).
    unsigned long long hq[PW_KSTEPS], hk[PW_KSTEPS], hv[PW_PF_STEPS];
    auto hoist_s = [&](int stage) {
      const unsigned long long kd = k_desc + ((stage * PW_KV_BYTES) >> 4);
#pragma unroll
      for (int ks = 0; ks < PW_KSTEPS; ++ks) {
        hq[ks] = q_desc + (ks >> 2) * (PW_BLOCK_M * 8) + (ks & 3) * 2;
        hk[ks] = kd + pw_k_kstep(ks);
        asm volatile("" : "+l"(hq[ks]), "+l"(hk[ks]));
      }
    };
    auto hoist_v = [&](int stage) {
      const unsigned long long vd = v_desc + ((stage * PW_KV_BYTES) >> 4);
#pragma unroll
      for (int kk = 0; kk < PW_PF_STEPS; ++kk) {
        hv[kk] = vd + pw_v_kstep(kk);
        asm volatile("" : "+l"(hv[kk]));
      }
    };
    // GA_PW_SCHED_Q_REGS (e4m3, params.h): this warp's 16 Q rows as wgmma A registers (qf, loaded
    // once an item by load_q), S = Q K^T with A from registers: shared memory then serves S only
    // K (16 KiB a warpgroup-tile where the Q slice added 8).
    // (Only with the producer's warp-row gather, PW_F8_ROWS: block size 256 spilled more with it,
    // 19 -> 32 STL/LDL.)
    constexpr bool q_regs = PW_FP8 && PW_BLOCK_N == 128 && PW_F8_ROWS && !PW_F8_SPEC && !hoist &&
                            (PW_SCHED & GA_PW_SCHED_Q_REGS) != 0;
    unsigned qf[PW_KSTEPS][4];  // unused (and gone) without q_regs
    auto load_q = [&] {
#pragma unroll
      for (int ks = 0; ks < PW_KSTEPS; ++ks) pw_q_frag(q_base, row0 + g, ks, t2 * 2, qf[ks]);
    };
    // S = Q K^T of the K tile in `stage`, into s.
    auto issue_s = [&](int stage) {
      if (q_regs) {
        const unsigned long long kd = k_desc + ((stage * PW_KV_BYTES) >> 4);
#pragma unroll
        for (int ks = 0; ks < PW_KSTEPS; ++ks)
          pw_wgmma8_rs<PW_BLOCK_N>(s, qf[ks], kd + pw_k_kstep(ks), ks > 0);
        return;
      }
      if (hoist) {
#pragma unroll
        for (int ks = 0; ks < PW_KSTEPS; ++ks) {
          if (PW_FP8)
            pw_wgmma8_ss<PW_BLOCK_N>(s, hq[ks], hk[ks], ks > 0);
          else
            pw_wgmma_ss<PW_BLOCK_N>(s, hq[ks], hk[ks], ks > 0);
        }
        return;
      }
      const unsigned long long kd = k_desc + ((stage * PW_KV_BYTES) >> 4);
#pragma unroll
      for (int ks = 0; ks < PW_KSTEPS; ++ks) {
        // Descriptor addresses count 16-byte units: a column block is rows * 8 of them, a
        // k-step of 32 bytes (16 columns, fp8 32) 2.
        const unsigned long long qd = q_desc + (ks >> 2) * (PW_BLOCK_M * 8) + (ks & 3) * 2;
        const unsigned long long kd_ks = kd + pw_k_kstep(ks);
        if (PW_FP8)
          pw_wgmma8_ss<PW_BLOCK_N>(s, qd, kd_ks, ks > 0);
        else
          pw_wgmma_ss<PW_BLOCK_N>(s, qd, kd_ks, ks > 0);
      }
    };
    // O += P V with P from pf and the V tile in `stage`.
    auto issue_pv = [&](int stage) {
      const unsigned long long vd = v_desc + ((stage * PW_KV_BYTES) >> 4);
#pragma unroll
      for (int kk = 0; kk < PW_PF_STEPS; ++kk) {
        const unsigned long long vd_kk = hoist ? hv[kk] : vd + pw_v_kstep(kk);
        if (PW_FP8)
          pw_wgmma8_rs<HEAD_SIZE>(o, pf[kk], vd_kk);
        else
          pw_wgmma_rs<HEAD_SIZE>(o, pf[kk], vd_kk);
        if (PW_ROWSUM) pw_wgmma_sum(ls, pf[kk], ones_desc, kk > 0);
      }
    };
    // o (and PW_ROWSUM's ls), pinned around the P V wgmmas.
    auto fence_acc = [&] {
      pw_fence_regs(o);
      if (PW_ROWSUM) pw_fence_regs(ls);
    };
    // One softmax body (pw_mask_scores), half the softmax code to compile, where it was
    // measured no slower (params.h).
    constexpr bool one_body = ga_prefill_sm90_one_body(HEAD_SIZE, PW_LEGACY, PW_FP8, HAS_SOFT_CAP,
                                                       HAS_ALIBI, GA_BLOCK_SPARSE) &&
                              !(PW_LV & 8);
    // `peeled`: tile 0 of the overlap, peeled off the loop (below). With two softmax bodies and
    // ga_prefill_sm90_peel_masked it takes the masked one whether or not the tile needs the mask
    // (on a tile that needs none it computes the same values for every row that is stored), so
    // that the peeled tile inlines one softmax instead of two.
    constexpr bool peel_masked =
        !one_body && ga_prefill_sm90_peel_masked(HEAD_SIZE, PW_LEGACY, PW_FP8);
    // GA_PW_SCHED_EARLY_PACK (e4m3, params.h): P's e4m3 pairs (cvt ... e4m3x2, 16 bits each)
    // are converted into registers of their own at the end of each softmax body, where they can
    // issue beside its exponentials, and only paired into pf (one prmt a word) once the previous
    // tile's P V, which reads pf, is complete; without it, all of pw_pack_p8 after that wait.
    constexpr bool early_pack =
        PW_FP8 && !PW_F8_SPEC && !(PW_F8V & 4) && (PW_SCHED & GA_PW_SCHED_EARLY_PACK) != 0;
    unsigned short p8h[PW_PF_STEPS][4][2];  // unused (and gone) without early_pack
    auto softmax = [&](int j, bool peeled) {
      const int n0 = (tile0 + j) * PW_BLOCK_N;
      if (GA_BLOCK_SPARSE) pw_bsp_tile_vis(p, n0, bsp);
      const bool masked =
          GA_BLOCK_SPARSE || (peel_masked && peeled) ||
          ga_prefill_tile_masked(n0, PW_BLOCK_N, w_pos_lo, w_pos_hi, kv_end, p.window);
      if (one_body) {
        if (masked) pw_mask_scores(p, s, n0, kv_end, t2, pos);
        pw_softmax<false>(p, scales, s, n0, kv_end, t2, pos, slope, m, l, alpha, bsp);
        if (early_pack) pw_pack_p8_halves(s, p8h);
      } else if (masked) {
        pw_softmax<true>(p, scales, s, n0, kv_end, t2, pos, slope, m, l, alpha, bsp);
        if (early_pack) pw_pack_p8_halves(s, p8h);
      } else {
        pw_softmax<false>(p, scales, s, n0, kv_end, t2, pos, slope, m, l, alpha, bsp);
        if (early_pack) pw_pack_p8_halves(s, p8h);
      }
    };
    // Every batch of wgmmas is issued between these two. With PW_PINGPONG the consumer
    // warpgroups take turns in a ring: a warpgroup issues a batch only after the one before it
    // (cw - 1, consumer 0 after the last) has issued its batch, so one's wgmmas run while the
    // others do their softmax. Consumer cw waits on barrier PW_SCHED_BAR + cw, completed by its
    // own 128 threads syncing and its predecessor's 128 arriving. Every consumer issues the same
    // number of batches (n_tiles is per block) and consumer 0 is released once up front, so the
    // last consumer skips its arrive after its last batch: every barrier phase that starts also
    // completes.
    // GA_PW_SCHED_NO_TURNS (16-bit, params.h): no turns.
    constexpr bool turns = PW_PINGPONG && !(PW_SCHED & GA_PW_SCHED_NO_TURNS);
    auto issue_begin = [&] {
      if (turns) pw_bar_sync(PW_SCHED_BAR + cw, 256);
      // The normal writes of o and pf (rescale, packing) complete before wgmmas read them.
      fence_acc();
      pw_fence_regs(pf);
      pw_wgmma_fence();
    };
    auto issue_end = [&](bool last) {
      if (turns && !(last && cw == PW_CONSUMERS - 1))
        pw_bar_arrive(PW_SCHED_BAR + (PW_CONSUMERS == 2        ? 1 - cw
                                      : cw == PW_CONSUMERS - 1 ? 0
                                                               : cw + 1),
                      256);
    };
    // The P V of the tile in (stage, phase), waited for.
    auto pv = [&](int stage, unsigned phase, bool last) {
      pw_mbar_wait(bar_v_full + 8 * stage, phase);
      pw_fence_proxy_async();
      if (hoist) hoist_v(stage);
      issue_begin();
      issue_pv(stage);
      pw_wgmma_commit();
      issue_end(last);
      pw_wgmma_wait<0>();
      fence_acc();
      pw_fence_regs(pf);
      if (lane == 0) pw_mbar_arrive(bar_v_empty + 8 * stage);
      if (PW_ROWSUM) {  // the tile's row sums, at the reference that l has (see tile)
        l[0] += ls[0];
        l[1] += ls[2];
      }
    };

#if !PW_PERSIST
    int stage = 0, prev = 0;  // ring stages and phases of tiles j and j - 1
    unsigned phase = 0, prev_phase = 0;
#endif

    // PW_F8_SPEC, the speculative softmax (fp8, loop tiles): a tile without a mask whose rows all
    // have a reference maximum m (every row of the warp) takes its probabilities at that
    // reference right away, P = 2^(s - m + PW_P8_SHIFT), without the rows' maxima (no FMNMX, no
    // shuffles, no alpha on the way from S to the exponentials); O and l keep their scale (alpha
    // 1). Only then, on the packed e4m3 P, one check per warp: a byte at 0x7e (448, i.e. P >=
    // 432, or more, saturated) or 0x7f (NaN) means some row's maximum passed its reference by
    // more than the pack can hold (spec_check). Such a warp takes its rows' maxima of P (fp32,
    // exact, still in s): a row whose maximum reached 416 moves its reference there (m += log2(max
    // P) - PW_P8_SHIFT, so its largest P becomes 2^PW_P8_SHIFT), and that row's P, O and l are
    // multiplied by alpha = 2^(m_old - m_new); P is packed again. P can be infinite only if a
    // score passed its reference by 120 or more (log2 domain); then P has lost the scores, and
    // the warp scores the tile again from shared memory (spec_rescore: mma.sync m16n8k32, the K
    // stage is released only after the check) and runs pw_softmax as a tile without the
    // speculation would.
#if PW_F8_SPEC_CODE
    auto spec_ok = [&](int j) {
      const int n0 = (tile0 + j) * PW_BLOCK_N;
      return !ga_prefill_tile_masked(n0, PW_BLOCK_N, w_pos_lo, w_pos_hi, kv_end, p.window) &&
             !__any_sync(0xffffffffu, m[0] == ninf || m[1] == ninf);
    };
    auto spec_exp = [&] {
      const float sc = scales.scale_log2;
      const float mu[2] = {m[0] - static_cast<float>(PW_P8_SHIFT),
                           m[1] - static_cast<float>(PW_P8_SHIFT)};
#pragma unroll
      for (int i = 0; i < PW_BLOCK_N / 2; ++i) s[i] = ga_exp2(fmaf(s[i], sc, -mu[(i >> 1) & 1]));
      alpha[0] = 1.f;
      alpha[1] = 1.f;
    };
    // S of tile stage st for this warp's 16 rows by mma.sync (e4m3 A = Q, K-major B = K, both
    // 128-byte swizzled in shared memory), in the wgmma accumulator layout of s.
    auto spec_rescore = [&](int st) {
      pw_rescore_warp(q_base, k_base + st * PW_KV_BYTES, row0 + g, lane, s);
    };
    auto spec_check = [&](int j) {
      unsigned hi = 0;  // bit 7 of a byte: that byte of some P was 0x7e or 0x7f (bytes <= 0x7f)
#pragma unroll
      for (int kk = 0; kk < PW_PF_STEPS; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) hi |= pf[kk][i] + 0x02020202u;
      if (!(PW_F8V & 256) && __any_sync(0xffffffffu, (hi & 0x80808080u) != 0)) {
        float pm[2] = {0.f, 0.f};
#pragma unroll
        for (int i = 0; i < PW_BLOCK_N / 2; ++i) pm[(i >> 1) & 1] = fmaxf(pm[(i >> 1) & 1], s[i]);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          pm[r] = fmaxf(pm[r], __shfl_xor_sync(0xffffffffu, pm[r], 1));
          pm[r] = fmaxf(pm[r], __shfl_xor_sync(0xffffffffu, pm[r], 2));
        }
        if (!(PW_F8V & 128) &&
            __any_sync(0xffffffffu, !(pm[0] <= 0x1p126f) || !(pm[1] <= 0x1p126f))) {
          spec_rescore(stage);
          softmax(j, false);  // alpha and m from the old reference, P from the scores
        } else {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float lg;
            asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(lg) : "f"(pm[r]));
            const bool mv = pm[r] >= 416.f;
            const float mn = m[r] + (lg - static_cast<float>(PW_P8_SHIFT));
            alpha[r] = mv ? ga_exp2(m[r] - mn) : 1.f;
            if (mv) m[r] = mn;
          }
#pragma unroll
          for (int i = 0; i < PW_BLOCK_N / 2; ++i) s[i] *= alpha[(i >> 1) & 1];
        }
        l[0] *= alpha[0];
        l[1] *= alpha[1];
        pw_rescale_o(o, alpha);
        pw_pack_p8(s, pf);
      }
      if (lane == 0) pw_mbar_arrive(bar_k_empty + 8 * stage);
    };
#endif
    // Tile j: S_j = Q K_j^T and its softmax, then O rescaled and P_j packed into pf. With
    // `with_pv`, O += P_{j-1} V_{j-1} is issued right behind S_j as a second wgmma group and
    // still runs during the softmax of S_j, which therefore leaves o and pf alone; without
    // PW_OVERLAP, the P V of tile j itself follows, waited for.
    // GA_PW_SCHED_EARLY_WAIT (with the overlap, not block-sparse): tile j waits for tile j + 1's K
    // and its own V and runs the proxy fence right after its wgmma issue, where the warpgroup
    // waits for S_j anyway, and tile j + 1 starts with the issue.
    constexpr bool early = (PW_SCHED & GA_PW_SCHED_EARLY_WAIT) && PW_OVERLAP && !GA_BLOCK_SPARSE;
    // GA_PW_SCHED_PV_OUT (params.h): P_{j-1} V_{j-1} issued after the turn's arrive, so that the
    // turn holds S_j's wgmmas alone (the other consumer's S may then reach the tensor cores
    // before this P V). GA_PW_SCHED_PV_LATE: P_{j-1} V_{j-1} issued only once S_j is complete
    // (after the wait for it), so that no P V stands between another consumer's S and the tensor
    // cores; P V then runs under the rest of tile j's softmax.
    constexpr bool pv_out = (PW_SCHED & GA_PW_SCHED_PV_OUT) != 0;
    constexpr bool pv_late = (PW_SCHED & GA_PW_SCHED_PV_LATE) != 0;
    auto tile = [&](int j, bool with_pv, bool last) {
      if (!early || j == 0) {
        pw_mbar_wait(bar_k_full + 8 * stage, phase);
        if (with_pv) pw_mbar_wait(bar_v_full + 8 * prev, prev_phase);
        pw_fence_proxy_async();
      }
      if (hoist) {
        hoist_s(stage);
        if (with_pv) hoist_v(prev);
      }
      issue_begin();
      issue_s(stage);
      pw_wgmma_commit();
      if (with_pv && !pv_out && !pv_late) {
        issue_pv(prev);
        pw_wgmma_commit();
      }
      issue_end(false);
      if (with_pv && pv_out && !pv_late) {
        issue_pv(prev);
        pw_wgmma_commit();
      }
      if (early && j + 1 < n_tiles) {
        const bool wrap = stage + 1 == PW_STAGES;
        pw_mbar_wait(bar_k_full + 8 * (wrap ? 0 : stage + 1), wrap ? phase ^ 1 : phase);
        pw_mbar_wait(bar_v_full + 8 * stage, phase);
        pw_fence_proxy_async();
      }
      if (with_pv && !pv_late)
        pw_wgmma_wait<1>();  // groups complete in order: S_j is done, P V may still run
      else
        pw_wgmma_wait<0>();
      pw_fence_regs(s);
      if (with_pv && pv_late) {
        pw_wgmma_fence();
        issue_pv(prev);
        pw_wgmma_commit();
      }
      // PW_F8_SPEC: the speculative softmax for this warp (spec_ok), which releases the K stage
      // only after its check (spec_check may score the tile again).
#if PW_F8_SPEC_CODE
      const bool spec = PW_F8_SPEC && with_pv && spec_ok(j);
      if (lane == 0 && !spec) pw_mbar_arrive(bar_k_empty + 8 * stage);
      if (spec)
        spec_exp();
      else
        softmax(j, PW_OVERLAP && !with_pv);
#else
      constexpr bool spec = false;
      // PW_SPEC16: the speculative exponentials (pw_softmax_spec) in a loop tile without a mask
      // whose rows all have a reference maximum (every row of the warp); the K stage is released
      // only after the vote, since a warp whose vote found a moved reference scores the tile
      // again from it.
      const bool spec16 = PW_SPEC16 && with_pv &&
                          !ga_prefill_tile_masked((tile0 + j) * PW_BLOCK_N, PW_BLOCK_N, w_pos_lo,
                                                  w_pos_hi, kv_end, p.window) &&
                          __all_sync(0xffffffffu, m[0] != ninf && m[1] != ninf);
      bool redo = false;
      if (lane == 0 && !spec16) pw_mbar_arrive(bar_k_empty + 8 * stage);
      if (spec16) {
        redo = pw_softmax_spec(scales.scale_log2, s, m, l, alpha);
        if (redo) {
          // With GA_PW_SCHED_HOIST the second scoring reads Q and K through an opaque copy of
          // q_base, so that ptxas keeps the wgmma descriptors (built from q_base) uniform.
          const unsigned qb = hoist ? pw_opaque(q_base) : q_base;
          pw_rescore_warp(qb, qb + PW_Q_BYTES + stage * PW_KV_BYTES, row0 + g, lane, s);
          softmax(j, PW_OVERLAP && !with_pv);
        }
        if (lane == 0) pw_mbar_arrive(bar_k_empty + 8 * stage);
      } else {
        softmax(j, PW_OVERLAP && !with_pv);
      }
#endif
      if (with_pv) {
        pw_wgmma_wait<0>();
        fence_acc();
        pw_fence_regs(pf);
        if (lane == 0) pw_mbar_arrive(bar_v_empty + 8 * prev);
      }
      // PW_ROWSUM: l takes tile j - 1's sums (with_pv; without, pv added them) and moves to
      // tile j's reference.
      if (PW_ROWSUM) {
        l[0] = (with_pv ? l[0] + ls[0] : l[0]) * alpha[0];
        l[1] = (with_pv ? l[1] + ls[2] : l[1]) * alpha[1];
      }
      // PW_REF_MAX: a warp whose rows' reference maxima all stayed (alpha exactly 1) skips the
      // rescale (fp8, where it weighs more against the halved wgmma time: H200, 4 x 4096 causal
      // 838 us against 876).
      // (PW_SPEC16 without a moved reference: alpha is 1.)
#if PW_F8_SPEC_CODE
      constexpr bool alpha_one = false;
#else
      // (With GA_PW_SCHED_HOIST the vote runs anyway: the skip's predicate, reaching the
      // loop's join, took the descriptors off the uniform datapath.)
      const bool alpha_one = !hoist && spec16 && !redo;
#endif
      if (!PW_REF_MAX ||
          (!spec && !alpha_one && __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)))
        pw_rescale_o(o, alpha);
      if (early_pack)
        pw_pair_p8(p8h, pf);
      else if (PW_FP8)
        pw_pack_p8(s, pf);
      else
        pw_pack_p(s, pf);
#if PW_F8_SPEC_CODE
      if (spec) spec_check(j);
#endif
      if (!PW_OVERLAP) pv(stage, phase, GA_BLOCK_SPARSE ? last : j == n_tiles - 1);
    };

    auto advance = [&] {
      prev = stage;
      prev_phase = phase;
      if (++stage == PW_STAGES) {
        stage = 0;
        phase ^= 1;
      }
    };

    // With PW_OVERLAP, tile 0 (no P V before it) is peeled off the loop and the last tile's
    // P V follows it, so the loop body issues both kinds of wgmma without a branch between.
    if (n_tiles > 0) {
      // GA_PW_BSTART_Q_L2: this warp's 16 rows of the Q tile of the block %nsmid blocks later in
      // launch order (x fastest, as ga_prefill_begin's plain grid), into L2, a 128-byte line a
      // prefetch (lane k: line k % QL of row k / QL, then k + 32), while Q is on its way.
      if ((PW_BSTART & GA_PW_BSTART_Q_L2) && p.device_split_q == 0) {
        constexpr int QL = PW_CHUNKS / 8;  // 128-byte lines a Q row
        unsigned nsm;
        asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
        const unsigned gx = gridDim.x, gy = gridDim.y;
        const unsigned lin = blockIdx.x + gx * (blockIdx.y + gy * blockIdx.z) + nsm;
        const unsigned z = lin / (gx * gy);
        if (z < gridDim.z) {
          const unsigned yx = lin - z * (gx * gy), y = yx / gx;
          const int req2 = p.first_req + static_cast<int>(y);
          const int qs = __ldg(p.query_start_loc + req2);
          const int rows2 = (__ldg(p.query_start_loc + req2 + 1) - qs) * GROUP;
          const int m2 = static_cast<int>(gx - 1 - (yx - y * gx)) * PW_BLOCK_M + row0;
#pragma unroll
          for (int k = lane; k < 16 * QL; k += 32) {
            const int row = m2 + k / QL;
            if (row < rows2) {
              const pw_elem* src =
                  static_cast<const pw_elem*>(p.query) +
                  ga_prefill_row_offset(row, (k % QL) * 8 * PW_CHUNK_ELEMS, qs, static_cast<int>(z),
                                        p.query_token_stride, p.query_head_stride);
              asm volatile("prefetch.global.L2 [%0];\n" ::"l"(src) : "memory");
            }
          }
        }
      }
      pw_mbar_wait(bar_q, q_phase);
      if (q_regs) {
        load_q();
#if PW_PERSIST
        // Q is in registers (every lane's loads done: the warp's sync): the producer may load
        // the next item's Q now.
        __syncwarp();
        if (lane == 0) pw_mbar_arrive(bar_q_empty);
#endif
      }
#if !GA_BLOCK_SPARSE
      if (turns && cw == PW_CONSUMERS - 1) pw_bar_arrive(PW_SCHED_BAR, 256);  // consumer 0 starts
      // GA_PW_SCHED_STAGGER (e4m3, two consumers without turns): consumer 1 starts its first
      // tile once consumer 0 has finished its own, so that the two run their tiles' softmax
      // phases (the exponentials on MUFU, the maxima, pack and wgmma issue beside) about half a
      // tile apart instead of side by side.
      constexpr bool stagger = PW_FP8 && PW_OVERLAP && !turns && PW_CONSUMERS == 2 &&
                               (PW_SCHED & GA_PW_SCHED_STAGGER) != 0;
      if (stagger && cw == 1) pw_bar_sync(PW_SCHED_BAR, 256);
      if (PW_OVERLAP) {
        tile(0, false, n_tiles == 1);
        advance();
      }
      if (stagger && cw == 0) pw_bar_arrive(PW_SCHED_BAR, 256);
      for (int j = PW_OVERLAP ? 1 : 0; j < n_tiles; ++j) {
        tile(j, PW_OVERLAP, j == n_tiles - 1);
        advance();
      }
#if PW_PERSIST
      // This warp's last S is done: the producer may load the next tile's Q (q_regs: above).
      if (lane == 0 && !q_regs) pw_mbar_arrive(bar_q_empty);
      q_phase ^= 1;
#endif
      if (PW_OVERLAP) pv(prev, prev_phase, true);
#else
      // The same over the tiles kept: t is a tile's index, u the next one's.
      int t = tiles.first(p);
      if (t < n_tiles) {
        if (turns && cw == PW_CONSUMERS - 1) pw_bar_arrive(PW_SCHED_BAR, 256);
        if (PW_OVERLAP) {
          const int u = tiles.next(p, t);
          tile(t, false, u >= n_tiles);
          advance();
          t = u;
        }
        for (int u; t < n_tiles; t = u) {
          u = tiles.next(p, t);
          tile(t, PW_OVERLAP, u >= n_tiles);
          advance();
        }
        if (PW_OVERLAP) pv(prev, prev_phase, true);
      }
#endif
    }

    // Normalise; rows that saw no key (seq_len 0) become zeros. Stage through this warp's own
    // Q rows (swizzled, so the 4-byte stores and 16-byte loads are conflict-free; fp8: the same
    // rows of the raw V tiles, which the producer no longer reads once the last V^T stage is
    // full, and a 16-bit output tile fills exactly), then store whole 16-byte chunks.
#if PW_O_STAGE
    unsigned char* s_o = pw_smem + (o_stage_base - raw_base);
#elif !PW_O_DIRECT
    unsigned char* s_o = PW_FP8 ? pw_smem + (raw_v_base - raw_base) : s_q;
#endif
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float li = l[r];
      if (!PW_ROWSUM) {  // PW_ROWSUM: ls held the whole row's sum in every column
        li += __shfl_xor_sync(0xffffffffu, li, 1);
        li += __shfl_xor_sync(0xffffffffu, li, 2);
      }
      if (PW_FP8) li *= 1.f / (1 << PW_P8_SHIFT);  // l and O carry P's 2^8 (pw_softmax)
      inv[r] = HAS_SINKS  ? scales.v_scale * ga_sink_normalizer(m[r], li, sink[r])
               : li > 0.f ? scales.v_scale / li
                          : 0.f;
      if (PW_FP8) inv[r] *= 1.f / (1 << PW_P8_SHIFT);
#ifdef GA_WRITE_LSE
      const int row = m0 + row0 + g + r * 8;
      if ((lane & 3) == 0 && row < rows) {
        const int tok = row / GROUP;
        p.softmax_lse[(kv_head * GROUP + row - tok * GROUP) * p.lse_head_stride + q_start + tok] =
            ga_lse(m[r], li, sink[r]);
      }
#endif
    }
#if PW_O_DIRECT
    // Straight from the accumulators: a thread's two rows, 4 bytes (a column pair) of every
    // 8 columns (a quad covers 16 contiguous bytes).
    ga_u16* out = static_cast<ga_u16*>(p.output);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + row0 + g + r * 8;
      if (row < rows) {
        ga_u16* dst = out + ga_prefill_row_offset(row, t2, q_start, kv_head, p.output_token_stride,
                                                  p.output_head_stride);
#pragma unroll
        for (int d = 0; d < HEAD_SIZE / 8; ++d)
          *reinterpret_cast<unsigned*>(dst + d * 8) =
              ga_pack2(o[d * 4 + 2 * r] * inv[r], o[d * 4 + 2 * r + 1] * inv[r]);
      }
    }
    PW_ITEMS_END();
#else
    // (PW_O_STAGE: each warp stages only its own rows in a buffer of its own)
    if (!PW_O_STAGE) pw_bar_sync(1 + cw, 128);  // every warp of the warpgroup is done with Q
#pragma unroll
    for (int d = 0; d < HEAD_SIZE / 8; ++d) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + r * 8;
        *reinterpret_cast<unsigned*>(s_o + pw_swizzle(row, d, PW_BLOCK_M) + t2 * 2) =
            ga_pack2(o[d * 4 + 2 * r] * inv[r], o[d * 4 + 2 * r + 1] * inv[r]);
      }
    }
    __syncwarp();
    ga_u16* out = static_cast<ga_u16*>(p.output);
    if constexpr ((PW_BSTART & GA_PW_BSTART_OUT_STEP) != 0) {
      // GA_PW_BSTART_OUT_STEP: the same stores (lane's chunk c of rows rl + OS i) from one row
      // offset: the warp's first row is a multiple of 16, and OS divides GROUP (4), so row
      // rl + OS i lies (OS i) / GROUP tokens and (OS i) % GROUP heads after row rl.
      // (params.h gives the bit only where GROUP is 4 and OS 1, 2 or 4.)
      constexpr int OS = PW_OUT_CHUNKS <= 32 ? 32 / PW_OUT_CHUNKS : 1;  // rows a step of the warp
      const int rl = lane / PW_OUT_CHUNKS, c = lane % PW_OUT_CHUNKS;
      ga_u16* const dst0 = out + ga_prefill_row_offset(m0 + row0 + rl, c * 8, q_start, kv_head,
                                                       p.output_token_stride, p.output_head_stride);
#pragma unroll
      for (int i = 0; i < 16 / OS; ++i) {
        if (m0 + row0 + rl + OS * i < rows)
          *reinterpret_cast<uint4*>(dst0 + (OS * i / GROUP) * p.output_token_stride +
                                    (OS * i % GROUP) * p.output_head_stride) =
              *reinterpret_cast<const uint4*>(s_o + pw_swizzle(row0 + rl + OS * i, c, PW_BLOCK_M));
      }
    } else {
#pragma unroll 4
      for (int idx = lane; idx < 16 * PW_OUT_CHUNKS; idx += 32) {
        const int row = idx / PW_OUT_CHUNKS;
        const int c = idx - row * PW_OUT_CHUNKS;
        const int r = m0 + row0 + row;
        if (r < rows)
          *reinterpret_cast<uint4*>(out + ga_prefill_row_offset(r, c * 8, q_start, kv_head,
                                                                p.output_token_stride,
                                                                p.output_head_stride)) =
              *reinterpret_cast<const uint4*>(s_o + pw_swizzle(row0 + row, c, PW_BLOCK_M));
      }
    }
#if PW_O_STAGE
    __syncwarp();  // every lane's loads of its rows, before the next tile's stores to them
    PW_ITEMS_END();
#endif
#endif
  }
}
