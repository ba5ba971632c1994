// SPDX-License-Identifier: Apache-2.0
#include "tools/bench_common.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "graphattn/error.hpp"

namespace graphattn::bench {
namespace {

// Helper kernels for the benchmark itself (not part of the library).
const char* kHelperSource = R"(
__device__ unsigned mix(unsigned long long i, unsigned seed) {
  unsigned x = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32) * 40503u ^ seed;
  x ^= x >> 15; x *= 2246822519u; x ^= x >> 13; x *= 3266489917u; x ^= x >> 16;
  return x;
}
extern "C" __global__ void fill_bf16(unsigned short* out, unsigned long long n, unsigned seed) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned x = mix(i, seed);
    // bf16 in [-2, 2): sign, exponent 126..127, random mantissa.
    out[i] = (unsigned short)(((x & 1u) << 15) | ((126u + ((x >> 1) & 1u)) << 7) | ((x >> 2) & 0x7fu));
  }
}
extern "C" __global__ void fill_fp8(unsigned char* out, unsigned long long n, unsigned seed) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    out[i] = (unsigned char)(mix(i, seed) & 0xb7u);  // e4m3 exponent <= 6: finite, below 1
}
// Read-only streaming: every byte read once with 16-byte loads, four in flight per thread; returns
// the XOR of the words. after_first(acc) runs after a thread's first four loads have arrived (the
// timed variant stamps there; read_only passes nothing to do).
template <typename F>
__device__ __forceinline__ unsigned read_pass(const uint4* in, unsigned long long n,
                                              F after_first) {
  unsigned acc = 0;
  bool first = true;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
    if (first) after_first(acc);
    first = false;
  }
  for (; i < n; i += stride) {
    const uint4 a = in[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
    if (first) after_first(acc);  // (a pass of fewer than 4 loads a thread)
    first = false;
  }
  return acc;
}
extern "C" __global__ void read_only(const uint4* in, unsigned long long n, unsigned* sink) {
  const unsigned acc = read_pass(in, n, [](unsigned) {});
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads alive, almost never stores
}
// The decode's reads without its compute (graphattn-bench --paged-read): block (x, r) of 4 warps
// reads piece x (256 bytes of each token row: a KV head's row, or a KV head pair's) of request
// r's K and V, page by page as its block table row names them (16 tokens a page and tile); warp w
// takes tiles w, w + 4, ..., with the next tile's loads in flight while it consumes one (two at
// its wait, as the decode's 3-stage ring), 16-byte loads. Dynamic shared memory (unused) sets how
// many blocks a multiprocessor holds.
__device__ __forceinline__ void paged_tile(uint4 (&t)[16], const unsigned char* k,
                                           const unsigned char* v, unsigned long long at,
                                           unsigned token_bytes) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    t[i] = *(const uint4*)(k + at + 2ull * i * token_bytes);
    t[8 + i] = *(const uint4*)(v + at + 2ull * i * token_bytes);
  }
}
extern "C" __global__ void paged_read(const unsigned char* k, const unsigned char* v,
                                      const int* bt, int bps, int tiles,
                                      unsigned long long page_bytes, unsigned token_bytes,
                                      unsigned* sink, int splits, const int* seq_lens) {
  // blockIdx.y = request * splits + split: split s reads its request's tiles [s * per, (s + 1)
  // * per), per = ceil(tiles / splits), as the decode's split launches divide them.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int req = blockIdx.y / splits, split = blockIdx.y - req * splits;
  // seq_lens (non-null): the decode's chain, the request's length read first and its tiles
  // from it; bt null: no block table, page i of request r is r * bps + i (addresses known at
  // entry).
  if (seq_lens) tiles = min(tiles, (seq_lens[req] + 15) / 16);
  const int per = (tiles + splits - 1) / splits;
  const int first = split * per, end = min(tiles, first + per);
  const int* row = bt ? bt + (long long)req * bps : nullptr;
  const long long row0 = (long long)req * bps;
#define GA_PAGE(i) (row ? (unsigned long long)row[i] : (unsigned long long)(row0 + (i)))
  const unsigned long long lane_off =
      (unsigned long long)(lane >> 4) * token_bytes + blockIdx.x * 256u + (lane & 15) * 16u;
  unsigned acc = 0;
  uint4 cur[16], nxt[16];
  tiles = end;
  if (first + warp < tiles)
    paged_tile(cur, k, v, GA_PAGE(first + warp) * page_bytes + lane_off, token_bytes);
  for (int j = first + warp; j < tiles; j += 4) {
    const bool more = j + 4 < tiles;
    if (more)
      paged_tile(nxt, k, v, GA_PAGE(j + 4) * page_bytes + lane_off, token_bytes);
#pragma unroll
    for (int i = 0; i < 16; ++i) acc ^= cur[i].x ^ cur[i].y ^ cur[i].z ^ cur[i].w;
    if (more) {
#pragma unroll
      for (int i = 0; i < 16; ++i) cur[i] = nxt[i];
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
#undef GA_PAGE
}
// Latency floors (graphattn-bench --read-latency): an empty kernel (the launch floor), and the
// read of [in, in + 16 n) built for latency rather than bandwidth: read_lat<K> gives each thread
// K 16-byte loads into registers (coalesced: thread t of T reads t, t + T, ...), written before
// any is used (ptxas may still interleave their use), so one grid of every multiprocessor's
// threads covers the bytes in one pass.
extern "C" __global__ void empty_kernel() {}
template <int K>
__device__ __forceinline__ void read_lat(const uint4* in, unsigned long long n, unsigned* sink) {
  const unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long T = (unsigned long long)gridDim.x * blockDim.x;
  uint4 a[K];
#pragma unroll
  for (int j = 0; j < K; ++j) a[j] = t + j * T < n ? in[t + j * T] : uint4{0u, 0u, 0u, 0u};
  unsigned acc = 0;
#pragma unroll
  for (int j = 0; j < K; ++j) acc ^= a[j].x ^ a[j].y ^ a[j].z ^ a[j].w;
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
// One extern "C" kernel a variant: name, body template, K, threads a block (the host's list of
// them, with the same K and threads: kOnePass below).
#define GA_ONE_PASS(name, body, K, threads)                                                  \
  extern "C" __global__ void __launch_bounds__(threads)                                     \
      name(const uint4* in, unsigned long long n, unsigned* sink) {                         \
    body<K>(in, n, sink);                                                                   \
  }
GA_ONE_PASS(read_lat2, read_lat, 2, 512)
GA_ONE_PASS(read_lat4, read_lat, 4, 512)
GA_ONE_PASS(read_lat8, read_lat, 8, 512)
// read_cpa<K>: the same loads as cp.async copies of 16 bytes into shared memory (K a thread,
// every one in flight until one wait: no registers held), threads x K x 16 bytes of dynamic
// shared memory a block.
template <int K>
__device__ __forceinline__ void read_cpa(const uint4* in, unsigned long long n, unsigned* sink) {
  extern __shared__ __align__(128) uint4 cpa[];
  const unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long T = (unsigned long long)gridDim.x * blockDim.x;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(cpa + j * blockDim.x + threadIdx.x);
    const unsigned bytes = t + j * T < n ? 16u : 0u;  // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst),
                 "l"(in + (t + j * T < n ? t + j * T : 0)), "r"(bytes)
                 : "memory");
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  const uint4 a = cpa[(K - 1) * blockDim.x + threadIdx.x];
  if ((a.x ^ a.y ^ a.z ^ a.w) == 0x9e3779b9u) sink[0] = a.x;
}
GA_ONE_PASS(read_cpa4, read_cpa, 4, 512)
GA_ONE_PASS(read_cpa8, read_cpa, 8, 512)
GA_ONE_PASS(read_cpa16, read_cpa, 16, 512)
GA_ONE_PASS(read_cpa32, read_cpa, 32, 256)
#undef GA_ONE_PASS
// The same bytes pulled by the bulk copy engine (sm_90: cp.async.bulk into shared memory,
// completing on an mbarrier): block b copies its contiguous share [b * share, ...) in pieces of
// at most `piece` bytes, every piece of a round in flight at once, rounds of at most `room`
// bytes (the dynamic shared memory); the fewest instructions a read can take.
extern "C" __global__ void read_bulk(const unsigned char* in, unsigned long long bytes,
                                     unsigned long long share, unsigned room, unsigned piece,
                                     unsigned* sink) {
#if __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
  const unsigned s = (unsigned)__cvta_generic_to_shared(buf);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    unsigned long long at = blockIdx.x * share;
    const unsigned long long end = min(bytes, at + share);
    unsigned phase = 0;
    while (at < end) {
      const unsigned round = (unsigned)min((unsigned long long)room, end - at);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(round)
                   : "memory");
      for (unsigned o = 0; o < round; o += piece) {
        const unsigned len = min(piece, round - o);
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(s + o),
            "l"(in + at + o), "r"(len), "r"(b)
            : "memory");
      }
      unsigned done = 0;
      while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, "
            "1, 0, p; }"
            : "=r"(done)
            : "r"(b), "r"(phase)
            : "memory");
      phase ^= 1;
      at += round;
    }
    if (buf[0] == 0x5a && buf[room - 1] == 0xa5) sink[0] = 1;
  }
#endif
}
// read_only as a layer of a chain under programmatic dependent launch (the floor of the decode
// chain, graphattn-bench --try-chain): lets the next launch be scheduled at entry, and waits for
// the previous launch (griddepcontrol.wait) before its loads (wait_first) or after them, before
// its sink store (the loads under the previous launch's tail). Before sm_90 a plain read_only.
extern "C" __global__ void read_only_pdl(const uint4* in, unsigned long long n, unsigned* sink,
                                         int wait_first) {
#if __CUDA_ARCH__ >= 900
  if (wait_first) asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const unsigned acc = read_pass(in, n, [](unsigned) {});
#if __CUDA_ARCH__ >= 900
  if (!wait_first) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
// read_only with per-block records for graphattn-bench --block-timing, in the decode kernel's
// layout (tools/block_timing.hpp, one warp): thread 0 stamps %globaltimer and clock64 at entry
// (also as the prologue: the first loads go out at once), when its first loads have arrived,
// after its loop, and after the block's barrier; the block's share of the bytes as one tile.
__device__ __forceinline__ void stamp(unsigned long long* at, unsigned dep) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "r"(dep) : "memory");  // after dep
  at[0] = t;
  at[1] = clock64();
}
extern "C" __global__ void read_only_timed(const uint4* in, unsigned long long n, unsigned* sink,
                                           unsigned long long* rec) {
  unsigned long long* row = rec + blockIdx.x * 64ull;
  const bool t0 = threadIdx.x == 0;
  if (t0) {
    stamp(row, 0u);
    row[8] = row[0];
    row[9] = row[1];
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    row[2] = sm;
    row[3] = 1;
    row[4] = n * 16 / gridDim.x;
  }
  const unsigned acc = read_pass(in, n, [&](unsigned a) {
    if (t0) stamp(row + 10, a);
  });
  if (t0) stamp(row + 12, acc);
  if (acc == 0x9e3779b9u) sink[0] = acc;
  __syncthreads();
  if (t0) stamp(row + 14, 0u);
}
)";

void nvrtc_ok(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) throw Error(std::string(what) + ": " + nvrtcGetErrorString(r));
}

std::vector<char> compile_helpers(int arch) {
  nvrtcProgram prog;
  nvrtc_ok(nvrtcCreateProgram(&prog, kHelperSource, "bench_helpers.cu", 0, nullptr, nullptr),
           "nvrtcCreateProgram");
  const std::string arch_opt = "--gpu-architecture=sm_" + std::to_string(arch);
  const char* opts[] = {arch_opt.c_str(), "-std=c++17"};
  if (nvrtcCompileProgram(prog, 2, opts) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    throw Error("benchmark helper kernels failed to compile:\n" + log);
  }
  size_t size = 0;
  nvrtc_ok(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
  std::vector<char> cubin(size);
  nvrtc_ok(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&prog);
  return cubin;
}

void launch_fill(const Device& dev, CUfunction f, void* ptr, size_t n, unsigned seed) {
  unsigned long long count = n;
  void* args[] = {&ptr, &count, &seed};
  GA_CU_CHECK(
      detail::driver().cuLaunchKernel(f, 1024, 1, 1, 256, 1, 1, 0, dev.stream, args, nullptr));
}

}  // namespace

void launch_read_only(const Device& dev, CUdeviceptr in, size_t bytes, CUdeviceptr sink) {
  unsigned long long n16 = bytes / 16;
  void* args[] = {&in, &n16, &sink};
  GA_CU_CHECK(detail::driver().cuLaunchKernel(dev.read_only, read_only_blocks(dev), 1, 1, 512, 1, 1,
                                              0, dev.stream, args, nullptr));
}

void launch_read_only_pdl(const Device& dev, CUdeviceptr in, size_t bytes, CUdeviceptr sink,
                          unsigned blocks, bool wait_first) {
  unsigned long long n16 = bytes / 16;
  int wf = wait_first ? 1 : 0;
  void* args[] = {&in, &n16, &sink, &wf};
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = blocks;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 512;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = dev.stream;
  cfg.attrs = &attr;
  cfg.numAttrs = dev.arch >= 90 ? 1 : 0;
  GA_CU_CHECK(detail::driver().cuLaunchKernelEx(&cfg, dev.read_only_pdl, args, nullptr));
}

void launch_read_only_timed(const Device& dev, CUdeviceptr in, size_t bytes, CUdeviceptr sink,
                            CUdeviceptr records) {
  unsigned long long n16 = bytes / 16;
  void* args[] = {&in, &n16, &sink, &records};
  GA_CU_CHECK(detail::driver().cuLaunchKernel(dev.read_only_timed, read_only_blocks(dev), 1, 1, 512,
                                              1, 1, 0, dev.stream, args, nullptr));
}

void launch_paged_read(const Device& dev, const PagedRead& r, CUdeviceptr sink) {
  unsigned long long page = r.page_bytes;
  unsigned token = r.token_bytes;
  int bps = r.blocks_per_seq, tiles = r.tiles, splits = r.splits;
  CUdeviceptr k = r.key, v = r.value, bt = r.block_table, sl = r.seq_lens;
  void* args[] = {&k, &v, &bt, &bps, &tiles, &page, &token, &sink, &splits, &sl};
  GA_CU_CHECK(detail::driver().cuLaunchKernel(dev.paged_read, r.pieces, r.requests * r.splits, 1,
                                              128, 1, 1, r.smem_bytes, dev.stream, args, nullptr));
}

// The one-pass readers of the kernel source above (its GA_ONE_PASS lines: name, K, threads), in
// Device::one_pass's order; cp.async ones take threads x K x 16 bytes of dynamic shared memory.
struct OnePassReader {
  const char* name;
  int k, threads;
  bool cp_async;
};
constexpr OnePassReader kOnePass[] = {{"read_lat2", 2, 512, false}, {"read_lat4", 4, 512, false},
                                      {"read_lat8", 8, 512, false}, {"read_cpa4", 4, 512, true},
                                      {"read_cpa8", 8, 512, true},  {"read_cpa16", 16, 512, true},
                                      {"read_cpa32", 32, 256, true}};
static_assert(std::size(kOnePass) == sizeof(Device::one_pass) / sizeof(CUfunction),
              "one CUfunction a reader");

double read_latency_rows(const Device& dev, int reps, CUdeviceptr in, size_t bytes) {
  const auto& d = detail::driver();
  CUdeviceptr sink = dev.flush_sink->ptr();
  const unsigned sms = static_cast<unsigned>(dev.sms);
  std::printf("   latency floors (graph us, same flush): empty kernel 1 block %.1f",
              time_graph_us(dev, reps, [&] {
                GA_CU_CHECK(d.cuLaunchKernel(dev.empty_kernel, 1, 1, 1, 32, 1, 1, 0, dev.stream,
                                             nullptr, nullptr));
              }));
  std::printf(", %u x 128 threads %.1f\n", sms, time_graph_us(dev, reps, [&] {
                GA_CU_CHECK(d.cuLaunchKernel(dev.empty_kernel, sms, 1, 1, 128, 1, 1, 0, dev.stream,
                                             nullptr, nullptr));
              }));
  double best = 1e30;
  unsigned long long n16 = bytes / 16;
  // One pass: grid = the blocks that cover the bytes at K loads a thread, at least per_sm blocks
  // on every multiprocessor; a grid that needs more is not timed.
  auto one_pass = [&](const char* what, CUfunction f, int k, int threads, unsigned smem) {
    if (smem > 0)
      GA_CU_CHECK(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(smem)));
    int fit = 0;
    GA_CU_CHECK(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&fit, f, threads, smem));
    const unsigned long long per_block = static_cast<unsigned long long>(threads) * k;
    const unsigned long long blocks = (n16 + per_block - 1) / per_block;
    for (unsigned per_sm : {1u, 2u, 4u}) {
      if (static_cast<int>(per_sm) > fit) continue;
      const unsigned long long grid = std::max<unsigned long long>(blocks, sms * per_sm);
      if (grid > static_cast<unsigned long long>(sms) * per_sm) continue;  // more than one pass
      void* args[] = {&in, &n16, &sink};
      const double t = time_graph_us(dev, reps, [&] {
        GA_CU_CHECK(d.cuLaunchKernel(f, static_cast<unsigned>(grid), 1, 1, threads, 1, 1, smem,
                                     dev.stream, args, nullptr));
      });
      best = std::min(best, t);
      std::printf("  %s K=%d %llux%d %.1f", what, k, grid, threads, t);
    }
  };
  std::printf("   one-pass reads (K 16-byte loads a thread; grid x threads: us):");
  for (size_t i = 0; i < std::size(kOnePass); ++i) {
    const OnePassReader& r = kOnePass[i];
    if (r.cp_async && (i == 0 || !kOnePass[i - 1].cp_async)) std::printf("\n  ");
    one_pass(r.cp_async ? "cp.async" : "ld", dev.one_pass[i], r.k, r.threads,
             r.cp_async ? static_cast<unsigned>(r.threads) * r.k * 16u : 0u);
  }
  std::printf("\n");
  if (dev.arch >= 90) {
    std::printf("   bulk copies into shared memory (blocks a SM, piece: us):");
    for (unsigned per_sm : {1u, 2u})
      for (unsigned piece : {16384u, 65536u}) {
        unsigned room = per_sm == 1 ? 200u << 10 : 100u << 10;
        const unsigned grid = sms * per_sm;
        unsigned long long share = (bytes + grid - 1) / grid;
        share = (share + 127) / 128 * 128;
        room = static_cast<unsigned>(std::min<unsigned long long>(room, share));
        room = (room + 15) / 16 * 16;
        unsigned long long total = bytes;
        GA_CU_CHECK(d.cuFuncSetAttribute(dev.read_bulk,
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(room)));
        void* args[] = {&in, &total, &share, &room, &piece, &sink};
        const double t = time_graph_us(dev, reps, [&] {
          GA_CU_CHECK(d.cuLaunchKernel(dev.read_bulk, grid, 1, 1, 32, 1, 1, room, dev.stream, args,
                                       nullptr));
        });
        best = std::min(best, t);
        std::printf("  %u/SM %uK %.1f", per_sm, piece >> 10, t);
      }
    std::printf("\n");
  }
  return best;
}

double read_same_flush_us(const Device& dev, int reps, CUdeviceptr in, size_t bytes) {
  const auto pass = [&] { launch_read_only(dev, in, bytes, dev.flush_sink->ptr()); };
  return std::min(time_us(dev, reps, true, pass), time_graph_us(dev, reps, pass));
}

void flush_l2_now(const Device& dev, int seed) {
  const auto& d = detail::driver();
  if (!dev.flush_by_reading) {
    GA_CU_CHECK(d.cuMemsetD8Async(dev.flush->ptr(), static_cast<unsigned char>(seed),
                                  dev.flush->bytes(), dev.stream));
    return;
  }
  launch_read_only(dev, dev.flush->ptr(), dev.flush->bytes(), dev.flush_sink->ptr());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void fill_random_bf16(const Device& d, void* ptr, size_t elems, unsigned seed) {
  launch_fill(d, d.fill_bf16, ptr, elems, seed);
}
void fill_random_fp8(const Device& d, void* ptr, size_t bytes, unsigned seed) {
  launch_fill(d, d.fill_fp8, ptr, bytes, seed);
}

Device open_device(int device) {
  std::string why;
  if (!gpu_available(&why)) throw Error("no GPU (" + why + ")");
  use_device(device);
  const auto& d = detail::driver();
  Device dev;
  dev.ordinal = device;
  CUdevice cu;
  GA_CU_CHECK(d.cuCtxGetDevice(&cu));
  char name[256] = {};
  GA_CU_CHECK(d.cuDeviceGetName(name, sizeof name, cu));
  dev.name = name;
  GA_CU_CHECK(d.cuDeviceGetAttribute(&dev.l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cu));
  GA_CU_CHECK(d.cuDeviceGetAttribute(&dev.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu));
  dev.arch = current_device_arch();
  dev.owned_stream = std::make_unique<Stream>();
  dev.stream = *dev.owned_stream;
  const std::vector<char> cubin = compile_helpers(dev.arch);
  GA_CU_CHECK(d.cuModuleLoadData(&dev.helpers, cubin.data()));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.fill_bf16, dev.helpers, "fill_bf16"));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.fill_fp8, dev.helpers, "fill_fp8"));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.read_only, dev.helpers, "read_only"));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.read_only_timed, dev.helpers, "read_only_timed"));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.read_only_pdl, dev.helpers, "read_only_pdl"));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.paged_read, dev.helpers, "paged_read"));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.empty_kernel, dev.helpers, "empty_kernel"));
  GA_CU_CHECK(d.cuModuleGetFunction(&dev.read_bulk, dev.helpers, "read_bulk"));
  for (size_t i = 0; i < std::size(kOnePass); ++i)
    GA_CU_CHECK(d.cuModuleGetFunction(&dev.one_pass[i], dev.helpers, kOnePass[i].name));
  dev.flush = std::make_unique<DeviceBuffer>(2 * static_cast<size_t>(dev.l2_bytes));
  dev.flush->fill_bytes(0);
  dev.flush_sink = std::make_unique<DeviceBuffer>(64);

  // The limits, measured now over 2 GiB (far beyond L2).
  const size_t bytes = size_t{2} << 30;
  DeviceBuffer src(bytes), dst(bytes), sink(64);
  fill_random_bf16(dev, src.data(), bytes / 2, 1);
  const double read_us =
      time_us(dev, 30, false, [&] { launch_read_only(dev, src.ptr(), bytes, sink.ptr()); });
  const double copy_us = time_us(dev, 30, false, [&] {
    GA_CU_CHECK(d.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), bytes, dev.stream));
  });
  dev.read_gbs = bytes / read_us / 1e3;
  dev.copy_gbs = 2.0 * bytes / copy_us / 1e3;
  return dev;
}

PeerTimes run_peer(const std::string& script, const std::string& out_json,
                   const std::vector<std::string>& decode_keys,
                   const std::vector<std::string>& prefill_keys) {
  PeerTimes p;
  std::string cmd = "python3 '" + script + "' '" + out_json + "'";
  if (!decode_keys.empty()) {
    cmd += " --decode";
    for (const auto& k : decode_keys) cmd += " " + k;
  }
  if (!prefill_keys.empty()) {
    cmd += " --prefill";
    for (const auto& k : prefill_keys) cmd += " " + k;
  }
  cmd += " > '" + out_json + ".log' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    p.why = "peer script exited with status " + std::to_string(rc) + " (see " + out_json + ".log)";
    return p;
  }
  std::ifstream in(out_json);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) {
    p.why = "peer script wrote no readable JSON to " + out_json;
    return p;
  }
  for (const auto& r : j.value("decode", nlohmann::json::array())) {
    p.decode_us[std::to_string(r["batch"].get<int>()) + ":" +
                std::to_string(r["context"].get<int>()) + ":" +
                std::to_string(r["head_size"].get<int>())] = r["us"].get<double>();
    p.backend = r["backend"].get<std::string>();
  }
  for (const auto& r : j.value("prefill", nlohmann::json::array())) {
    p.backend = r.value("backend", p.backend);
    p.prefill_us[std::to_string(r["batch"].get<int>()) + ":" +
                 std::to_string(r["tokens"].get<int>()) + ":" +
                 std::to_string(r.value("head_size", 128))] = r["us"].get<double>();
  }
  for (const auto& r : j.value("prefill_fp8", nlohmann::json::array())) {
    if (r.contains("us")) {
      p.prefill_fp8_us[std::to_string(r["batch"].get<int>()) + ":" +
                       std::to_string(r["tokens"].get<int>())] = r["us"].get<double>();
      p.fp8_backend = r.value("backend", "");
      p.fp8_rel_l2 = r.value("rel_l2_vs_fp32", -1.0);
    } else {
      p.fp8_why = r.value("error", "no time");
    }
  }
  p.available = true;
  return p;
}

}  // namespace graphattn::bench
