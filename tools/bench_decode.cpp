// graphattn-bench: decode attention time against the device's own bandwidth limits, measured in
// the same run. bf16, 32 query heads, 8 KV heads, head 128, block 16 (REFERENCE.md's setup):
// random data, shuffled physical blocks, L2 flushed before every repetition (a write of twice
// the L2 size), CUDA events around each forward, median of --reps. The limits: a read-only
// streaming pass (a reduction kernel compiled here with NVRTC) and a device-to-device copy
// (bytes read + written). Each shape's first and last requests are checked against the float64
// reference before timing; a mismatch exits non-zero.
#include <nvrtc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/decode.hpp"
#include "runtime/driver.hpp"
#include "runtime/module_cache.hpp"
#include "templates/params.h"
#include "tests/host_dtypes.hpp"
#include "tests/reference.hpp"

using namespace graphattn;
using detail::driver;

namespace {

// Helper kernels for the benchmark itself (not part of the library).
const char* kHelperSource = R"(
extern "C" __global__ void fill_random(unsigned short* out, unsigned long long n, unsigned seed) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32) * 40503u ^ seed;
    x ^= x >> 15; x *= 2246822519u; x ^= x >> 13; x *= 3266489917u; x ^= x >> 16;
    // bf16 in [-2, 2): sign, exponent 126..127, random mantissa.
    out[i] = (unsigned short)(((x & 1u) << 15) | ((126u + ((x >> 1) & 1u)) << 7) |
                              ((x >> 2) & 0x7fu));
  }
}
// Read-only streaming: every byte read once with 16-byte loads, four in flight per thread.
extern "C" __global__ void read_only(const uint4* in, unsigned long long n, unsigned* sink) {
  unsigned acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
  }
  for (; i < n; i += stride) { const uint4 a = in[i]; acc ^= a.x ^ a.y ^ a.z ^ a.w; }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads alive, almost never stores
}
)";

#define NVRTC_OK(call)                                                                         \
  do {                                                                                         \
    nvrtcResult r_ = (call);                                                                   \
    if (r_ != NVRTC_SUCCESS) throw Error(std::string(#call) + ": " + nvrtcGetErrorString(r_)); \
  } while (0)

struct Helpers {
  CUmodule module = nullptr;
  CUfunction fill = nullptr, read = nullptr;
};

Helpers build_helpers(int arch) {
  nvrtcProgram prog;
  NVRTC_OK(nvrtcCreateProgram(&prog, kHelperSource, "bench_helpers.cu", 0, nullptr, nullptr));
  const std::string arch_opt = "--gpu-architecture=sm_" + std::to_string(arch);
  const char* opts[] = {arch_opt.c_str(), "-std=c++17"};
  if (nvrtcCompileProgram(prog, 2, opts) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    throw Error("benchmark helper kernels failed to compile:\n" + log);
  }
  size_t size = 0;
  NVRTC_OK(nvrtcGetCUBINSize(prog, &size));
  std::vector<char> cubin(size);
  NVRTC_OK(nvrtcGetCUBIN(prog, cubin.data()));
  nvrtcDestroyProgram(&prog);
  Helpers h;
  const auto& d = driver();
  GA_CU_CHECK(d.cuModuleLoadData(&h.module, cubin.data()));
  GA_CU_CHECK(d.cuModuleGetFunction(&h.fill, h.module, "fill_random"));
  GA_CU_CHECK(d.cuModuleGetFunction(&h.read, h.module, "read_only"));
  return h;
}

void fill_random(const Helpers& h, void* ptr, size_t elems, unsigned seed, CUstream s) {
  unsigned long long n = elems;
  void* args[] = {&ptr, &n, &seed};
  GA_CU_CHECK(driver().cuLaunchKernel(h.fill, 1024, 1, 1, 256, 1, 1, 0, s, args, nullptr));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `work` `reps` times with events, flushing L2 first when flush is given.
template <typename Work>
double time_us(CUstream s, int reps, DeviceBuffer* flush, Work work) {
  const auto& d = driver();
  CUevent a, b;
  GA_CU_CHECK(d.cuEventCreate(&a, CU_EVENT_DEFAULT));
  GA_CU_CHECK(d.cuEventCreate(&b, CU_EVENT_DEFAULT));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    if (flush)
      GA_CU_CHECK(
          d.cuMemsetD8Async(flush->ptr(), static_cast<unsigned char>(i), flush->bytes(), s));
    GA_CU_CHECK(d.cuEventRecord(a, s));
    work();
    GA_CU_CHECK(d.cuEventRecord(b, s));
    GA_CU_CHECK(d.cuEventSynchronize(b));
    float ms = 0;
    GA_CU_CHECK(d.cuEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0);
  }
  d.cuEventDestroy(a);
  d.cuEventDestroy(b);
  return median(t);
}

// Captures `work` (launches on s) into an executable graph.
template <typename Work>
CUgraphExec capture(CUstream s, Work work) {
  const auto& d = driver();
  CUgraph g;
  GA_CU_CHECK(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  work();
  GA_CU_CHECK(d.cuStreamEndCapture(s, &g));
  CUgraphExec e;
  GA_CU_CHECK(d.cuGraphInstantiate(&e, g, 0));
  d.cuGraphDestroy(g);
  return e;
}

std::vector<int> parse_ints(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    out.push_back(std::stoi(item));
    if (out.back() < 1) throw Error("split count '" + item + "' must be >= 1");
  }
  return out;
}

struct Shape {
  int batch, len;
};

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t x = item.find('x');
    if (x == std::string::npos) throw Error("shape '" + item + "' is not BATCHxLEN, e.g. 64x8192");
    out.push_back({std::stoi(item.substr(0, x)), std::stoi(item.substr(x + 1))});
    if (out.back().batch <= 0 || out.back().len <= 0)
      throw Error("shape '" + item + "' must be positive");
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"graphattn decode benchmark: time and bandwidth against the device's limits"};
  int reps = 100;
  std::string shapes_text = "1x4096,1x32768,16x4096,64x2048,64x8192,256x1024,256x4096";
  std::string json_path;
  bool check = true;
  int rounds = 1;
  std::string try_splits_text;
  app.add_option("--reps", reps, "timed repetitions per shape (median reported), >= 50")
      ->check(CLI::Range(50, 100000));
  app.add_option("--shapes", shapes_text, "comma-separated BATCHxLEN list");
  app.add_option("--json", json_path, "also write the results as JSON to this file");
  app.add_flag("!--no-check", check, "skip the float64 reference check of each shape");
  app.add_option("--rounds", rounds, "run the whole shape list this many times")
      ->check(CLI::Range(1, 100));
  app.add_option("--try-splits", try_splits_text,
                 "also time the decode kernels alone (graph replay) at these max_splits, e.g. "
                 "1,2,4,8,16,32,64");
  CLI11_PARSE(app, argc, argv);

  try {
    std::string why;
    if (!gpu_available(&why)) {
      std::fprintf(stderr, "graphattn-bench: no GPU (%s)\n", why.c_str());
      return 2;
    }
    ensure_context(0);
    const auto& d = driver();
    std::vector<Shape> shapes;
    for (int r = 0; r < rounds; ++r)
      for (const Shape& x : parse_shapes(shapes_text)) shapes.push_back(x);
    const std::vector<int> try_splits = parse_ints(try_splits_text);
    CUdevice dev;
    GA_CU_CHECK(d.cuCtxGetDevice(&dev));
    char name[256] = {};
    GA_CU_CHECK(d.cuDeviceGetName(name, sizeof name, dev));
    int l2 = 0, sms = 0;
    GA_CU_CHECK(d.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
    GA_CU_CHECK(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    const int arch = current_device_arch();
    CUstream stream;
    GA_CU_CHECK(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    const Helpers helpers = build_helpers(arch);
    DeviceBuffer flush(2 * static_cast<size_t>(l2));

    // The limits, measured now.
    const size_t bw_bytes = size_t{2} << 30;
    double read_gbs = 0, copy_gbs = 0;
    {
      DeviceBuffer src(bw_bytes), dst(bw_bytes), sink(64);
      fill_random(helpers, src.data(), bw_bytes / 2, 1, stream);
      unsigned long long n16 = bw_bytes / 16;
      CUdeviceptr in = src.ptr(), out = sink.ptr();
      void* args[] = {&in, &n16, &out};
      const double read_us = time_us(stream, 30, nullptr, [&] {
        GA_CU_CHECK(
            d.cuLaunchKernel(helpers.read, sms * 8, 1, 1, 512, 1, 1, 0, stream, args, nullptr));
      });
      const double copy_us = time_us(stream, 30, nullptr, [&] {
        GA_CU_CHECK(d.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), bw_bytes, stream));
      });
      read_gbs = bw_bytes / read_us / 1e3;
      copy_gbs = 2.0 * bw_bytes / copy_us / 1e3;
    }

    const int H = 32, KH = 8, D = 128, B = 16;
    int max_len = 1, max_batch = 1;
    for (const Shape& s : shapes) {
      max_len = std::max(max_len, s.len);
      max_batch = std::max(max_batch, s.batch);
    }
    AttentionLayerConfig cfg;
    cfg.num_heads = H;
    cfg.num_kv_heads = KH;
    cfg.head_size = D;
    cfg.block_size = B;
    cfg.dtype = DType::kBFloat16;
    cfg.max_model_len = max_len;
    cfg.max_num_seqs = max_batch;
    AttentionBackend attn(cfg);
    attn.prepare();
    DeviceBuffer ws(attn.workspace_bytes());

    std::printf("device: %s, %d SMs, L2 %d MiB, sm_%d\n", name, sms, l2 >> 20, arch);
    std::printf("read-only streaming: %.0f GB/s; device-to-device copy (read + write): %.0f GB/s\n",
                read_gbs, copy_gbs);
    std::printf(
        "decode: bf16, %d query heads, %d KV heads, head %d, block %d, median of %d, L2 "
        "flushed\n\n",
        H, KH, D, B, reps);
    std::printf(
        "time: eager forward() between events; graph: the same forward captured and "
        "replayed; host: forward()'s enqueue time on the CPU\n");
    std::printf("%-12s %8s %7s %10s %10s %9s %8s %9s %9s %9s\n", "batch x len", "KV MiB",
                "splits/st", "time us", "GB/s", "% read", "floor us", "graph us", "host us",
                "max err");
    nlohmann::json results = nlohmann::json::array();
    std::mt19937_64 rng(12345);
    bool ok = true;
    for (const Shape& s : shapes) {
      const int64_t blocks_per_seq = (s.len + B - 1) / B;
      const int64_t NB = s.batch * blocks_per_seq;
      const size_t cache_elems = static_cast<size_t>(2) * NB * B * KH * D;
      DeviceBuffer cache(cache_elems * 2), q(static_cast<size_t>(s.batch) * H * D * 2),
          out(static_cast<size_t>(s.batch) * H * D * 2), seq(s.batch * 4),
          bt(static_cast<size_t>(NB) * 4), qsl((s.batch + 1) * 4);
      fill_random(helpers, cache.data(), cache_elems, 7 + s.batch, stream);
      fill_random(helpers, q.data(), static_cast<size_t>(s.batch) * H * D, 99 + s.len, stream);
      std::vector<int> phys(NB), lens(s.batch, s.len), starts(s.batch + 1);
      std::iota(phys.begin(), phys.end(), 0);
      std::shuffle(phys.begin(), phys.end(), rng);
      std::iota(starts.begin(), starts.end(), 0);
      bt.upload(phys.data(), phys.size() * 4);
      seq.upload(lens.data(), lens.size() * 4);
      qsl.upload(starts.data(), starts.size() * 4);
      const TensorView cache_v =
          TensorView::contiguous(cache.data(), ScalarType::kBFloat16, {2, NB, B, KH, D});
      const TensorView q_v =
          TensorView::contiguous(q.data(), ScalarType::kBFloat16, {s.batch, H, D});
      const TensorView o_v =
          TensorView::contiguous(out.data(), ScalarType::kBFloat16, {s.batch, H, D});
      AttentionMetadata md;
      md.query_start_loc = TensorView::contiguous(qsl.data(), ScalarType::kInt32, {s.batch + 1});
      md.seq_lens = TensorView::contiguous(seq.data(), ScalarType::kInt32, {s.batch});
      md.block_table =
          TensorView::contiguous(bt.data(), ScalarType::kInt32, {s.batch, blocks_per_seq});
      md.num_reqs = md.num_decodes = md.num_decode_tokens = md.num_actual_tokens = s.batch;
      md.max_query_len = 1;
      md.max_seq_len = s.len;
      auto run = [&] {
        attn.forward(q_v, TensorView{}, TensorView{}, cache_v, o_v, md, ws.data(), ws.bytes(),
                     stream);
      };
      out.fill_bytes(0xff);
      run();
      GA_CU_CHECK(d.cuStreamSynchronize(stream));

      double max_err = 0;
      if (check) {
        // The first and last requests against the float64 reference.
        std::vector<uint16_t> out_h(static_cast<size_t>(s.batch) * H * D), q_h(out_h.size());
        out.download(out_h.data(), out_h.size() * 2);
        q.download(q_h.data(), q_h.size() * 2);
        for (int r : {0, s.batch - 1}) {
          test::RefProblem p;
          p.num_heads = H;
          p.num_kv_heads = KH;
          p.head_size = D;
          p.block_size = B;
          p.query_start_loc = {0, 1};
          p.seq_lens = {s.len};
          p.max_blocks_per_seq = static_cast<int>(blocks_per_seq);
          p.scale = attn.config().scale;
          for (int i = 0; i < H * D; ++i) p.q.push_back(test::bf16_to_float(q_h[r * H * D + i]));
          // Copy this request's blocks into a compact cache numbered 0..blocks_per_seq-1.
          const size_t block_elems = static_cast<size_t>(B) * KH * D;
          std::vector<uint16_t> blk(block_elems);
          p.k_cache.resize(blocks_per_seq * block_elems);
          p.v_cache.resize(blocks_per_seq * block_elems);
          for (int64_t i = 0; i < blocks_per_seq; ++i) {
            p.block_table.push_back(static_cast<int>(i));
            const int64_t pb = phys[r * blocks_per_seq + i];
            for (int which = 0; which < 2; ++which) {
              cache.download(blk.data(), block_elems * 2, ((which * NB + pb) * block_elems) * 2);
              auto& dst = which == 0 ? p.k_cache : p.v_cache;
              for (size_t e = 0; e < block_elems; ++e)
                dst[i * block_elems + e] = test::bf16_to_float(blk[e]);
            }
          }
          const std::vector<double> want = test::reference_attention(p);
          std::vector<double> got(H * D);
          for (int i = 0; i < H * D; ++i) got[i] = test::bf16_to_float(out_h[r * H * D + i]);
          max_err = std::max(max_err, test::relative_l2(got, want));
        }
        if (!(max_err <= 5e-3)) ok = false;
      }

      for (int i = 0; i < 5; ++i) run();
      std::vector<double> host;
      const double us = time_us(stream, reps, &flush, [&] {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        host.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      });
      const CUgraphExec exec = capture(stream, run);
      const double graph_us =
          time_us(stream, reps, &flush, [&] { GA_CU_CHECK(d.cuGraphLaunch(exec, stream)); });
      d.cuGraphExecDestroy(exec);
      const double kv_bytes = static_cast<double>(s.batch) * s.len * KH * D * 2 * 2;
      const double gbs = kv_bytes / us / 1e3;
      char label[32];
      std::snprintf(label, sizeof label, "%dx%d", s.batch, s.len);
      const int splits = attn.decode_max_splits(s.batch);
      const int stages = attn.decode_stages(s.batch);
      char grid[32];
      std::snprintf(grid, sizeof grid, "%d/%d", splits, stages);
      std::printf("%-12s %8.0f %7s %10.1f %10.0f %8.1f%% %8.1f %9.1f %9.1f %9.2e%s\n", label,
                  kv_bytes / (1 << 20), grid, us, gbs, 100.0 * gbs / read_gbs,
                  kv_bytes / copy_gbs / 1e3, graph_us, median(host), max_err,
                  check && !(max_err <= 5e-3) ? "  FAIL" : "");
      if (!try_splits.empty()) {
        // The decode kernels alone at other grid widths, each captured and replayed.
        const AttentionSpec ds = attn.required_specs()[1];
        const detail::LoadedKernel& dk = detail::load_kernel(ds, default_kernel_cache());
        const detail::LoadedKernel& rk =
            detail::load_kernel(detail::decode_reduce_spec(ds), default_kernel_cache());
        const int most = *std::max_element(try_splits.begin(), try_splits.end());
        DeviceBuffer tws(detail::decode_workspace_bytes(s.batch, H, D, most));
        for (int deep = 0; deep < 2; ++deep) {
          std::printf("   %s splits:", deep ? "deep" : "shallow");
          for (int sp : try_splits) {
            detail::DecodeLaunch a;
            a.query = q_v;
            a.kv_cache = cache_v;
            a.output = o_v;
            a.seq_lens = md.seq_lens;
            a.block_table = md.block_table;
            a.num_decodes = s.batch;
            a.max_splits = sp;
            a.stages = deep ? ga_decode_max_stages(D, 2) : ga_decode_shallow_stages(D, 2);
            a.scale = attn.config().scale;
            a.workspace = tws.data();
            a.workspace_size = tws.bytes();
            const CUgraphExec e =
                capture(stream, [&] { detail::launch_decode(dk, rk, a, stream); });
            const double t =
                time_us(stream, reps, &flush, [&] { GA_CU_CHECK(d.cuGraphLaunch(e, stream)); });
            d.cuGraphExecDestroy(e);
            std::printf("  %d: %.1f us (%.0f%%)", sp, t, 100.0 * kv_bytes / t / 1e3 / read_gbs);
          }
          std::printf("\n");
        }
      }
      results.push_back({{"batch", s.batch},
                         {"len", s.len},
                         {"kv_mib", kv_bytes / (1 << 20)},
                         {"max_splits", splits},
                         {"stages", stages},
                         {"time_us", us},
                         {"graph_us", graph_us},
                         {"host_us", median(host)},
                         {"gb_per_s", gbs},
                         {"percent_of_read_only", 100.0 * gbs / read_gbs},
                         {"max_rel_l2_error", max_err}});
    }
    if (!json_path.empty()) {
      nlohmann::json j = {{"device", name},
                          {"sms", sms},
                          {"read_only_gb_per_s", read_gbs},
                          {"d2d_copy_gb_per_s", copy_gbs},
                          {"reps", reps},
                          {"results", results}};
      std::ofstream(json_path) << j.dump(2) << "\n";
    }
    if (!ok) {
      std::fprintf(stderr, "graphattn-bench: a shape failed its reference check\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graphattn-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
