// SPDX-License-Identifier: Apache-2.0
// graphattn-bench-jit: what the JIT kernel cache costs on this machine, measured on the cache
// write kernel. No GPU is needed: it times NVRTC compiles, disk hits and memory hits.
//
//   first compile   one get() in a fresh process and an empty directory: NVRTC's own start-up
//                   (library loading, initialisation) is in it, so it is reported on its own
//   cold compile    after that warm-up, get() of a spec never compiled, each in a new empty
//                   directory with a new KernelCache (median and max over distinct specs)
//   disk hit        get() on a new KernelCache over a populated directory
//   memory hit      get() of a spec that this KernelCache already holds (median per call)
//   remote hit      with GRAPHATTN_REMOTE_CACHE=redis://...: get() of llama-3-8b's kernels by a
//                   new KernelCache over an empty directory, served by the Redis server (the
//                   other rows never use the remote tier)
//
// graphattn-bench-jit --phases [--repeat N] [SPEC...]: where a cold compile's time goes, per
// kernel (default: llama-3-8b's set on sm_90 and sm_80, and one spec of each other template):
// the process CPU time of one NVRTC compile (single-threaded; load on the machine moves it less
// than wall time, and --repeat N keeps the least of N compiles) and NVRTC's own per-phase times
// (--time: front end, NVVM optimizer, PTX to SASS; wall clock, so they grow with the load). The CPU
// split: "to PTX" is the CPU time of a second compile of the same source to PTX only (front end and
// NVVM; the virtual architecture compute_NN in place of sm_NN), and PTX->SASS CPU is the rest of
// the full compile's CPU time (ptxas inside NVRTC).
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
#include "testing/configs.hpp"
#include "tools/version.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kDiskHitRepeats = 50;
constexpr int kMemoryBatches = 200;
constexpr int kMemoryBatchCalls = 1000;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A new empty directory under $TMPDIR, removed with its contents at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "graphattn-bench-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

graphattn::CacheOptions options_for(const std::string& dir) {
  graphattn::CacheOptions o;
  o.dir = dir;
  o.use_remote = false;
  o.warn = [](const std::string& w) { std::cerr << "warning: " << w << "\n"; };
  return o;
}

graphattn::CacheOptions remote_options_for(const std::string& dir, const std::string& url) {
  graphattn::CacheOptions o = options_for(dir);
  o.use_remote = true;
  o.remote_url = url;
  return o;
}

constexpr int kRemoteRepeats = 20;

graphattn::AttentionSpec cache_write(int head, graphattn::DType dtype, graphattn::KvDType kv,
                                     graphattn::KvLayout layout, int arch) {
  graphattn::AttentionSpec s;
  s.kind = graphattn::KernelKind::kCacheWrite;
  s.head_size = head;
  s.block_size = 16;
  s.dtype = dtype;
  s.kv_dtype = kv;
  s.group = 1;
  s.layout = layout;
  s.arch = arch;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

std::string fmt(double v, const char* unit) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f %s", v, unit);
  return buf;
}

void row(const std::string& what, const std::string& med, const std::string& max, size_t n) {
  std::printf("%-46s %14s %14s %8zu\n", what.c_str(), med.c_str(), max.c_str(), n);
}

// get() that insists on where the kernel came from, so a broken setup cannot pass as fast.
void get_expect(graphattn::KernelCache& cache, const graphattn::AttentionSpec& spec,
                graphattn::CacheOrigin want) {
  graphattn::CacheOrigin got;
  cache.get(spec, &got);
  if (got != want)
    throw graphattn::Error("expected a " + std::string(graphattn::to_string(want)) + " for " +
                           spec.to_string() + ", got " + graphattn::to_string(got));
}

// llama-3-8b's attention layer (32 query / 8 KV heads of 128, max_model_len 4096, 256 sequences).
graphattn::AttentionLayerConfig llama3_8b() {
  return graphattn::test::layer_config(32, 8, 128, 4096, 256);
}

double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// NVRTC's --time CSV ("file, phase, value, unit" rows): the value of the row naming phase.
double phase_ms(const std::string& csv, const std::string& phase) {
  std::istringstream in(csv);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find(", " + phase + ", ");
    if (at == std::string::npos) continue;
    return std::atof(line.c_str() + at + phase.size() + 4);
  }
  return -1;
}

// The CPU time of compiling src to PTX only (front end and NVVM, no PTX-to-SASS): the same
// options with the virtual architecture (compute_NN[a]) in place of the real one (sm_NN[a]).
// *ptx_bytes: the PTX's size.
double ptx_only_cpu_ms(const graphattn::KernelSource& src, size_t* ptx_bytes) {
  std::vector<std::string> options = src.options;
  const std::string real = "--gpu-architecture=sm_";
  for (std::string& o : options)
    if (o.compare(0, real.size(), real) == 0)
      o = "--gpu-architecture=compute_" + o.substr(real.size());
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  const graphattn::detail::NvrtcProgram program(src);
  const nvrtcProgram prog = program.get();
  const double t0 = process_cpu_ms();
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  const double cpu = process_cpu_ms() - t0;
  if (r != NVRTC_SUCCESS)
    throw graphattn::Error(src.spec + ": the PTX-only compile failed: " + nvrtcGetErrorString(r));
  GA_NVRTC_CHECK(nvrtcGetPTXSize(prog, ptx_bytes));
  return cpu;
}

// extra: NVRTC options appended to every kernel's own (--nvrtc-option), e.g. to time
// --Ofast-compile=min; the machine code may then differ (scripts/sass_diff.sh compares).
int run_phases(std::vector<std::string> names, int repeat, const std::vector<std::string>& extra) {
  std::vector<graphattn::AttentionSpec> specs;
  if (names.empty()) {
    for (int arch : {90, 80}) {
      graphattn::AttentionLayerConfig llama = llama3_8b();
      llama.arch = arch;
      for (const auto& spec : graphattn::AttentionBackend(llama).required_specs())
        specs.push_back(spec);
    }
    for (const char* extra : {"merge_states_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                              "block_copy_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
                              "decode_h128_b16_bf16_kve4m3_g4_swa0_cap0_nhd_sm90_qe4m3",
                              "decode_h128_b16_fp32_kvauto_g4_swa0_cap0_legacy_sm90",
                              "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_legacy_sm90"})
      specs.push_back(graphattn::AttentionSpec::parse(extra));
  } else {
    for (const std::string& n : names) specs.push_back(graphattn::AttentionSpec::parse(n));
  }
  ScratchDir dir;
  const std::string csv_path = dir.path() + "/time.csv";
  // NVRTC's start-up (library loading) is paid once, before the first row.
  graphattn::detail::nvrtc_compile(graphattn::render_kernel(specs.front()), nullptr);
  std::printf("%-62s %10s %10s %10s %10s %10s %10s %8s\n", "spec", "CPU ms", "to PTX", "PTX->SASS",
              "front end", "NVVM opt", "PTX->SASS", "PTX KiB");
  std::printf("%-62s %10s %10s %10s %10s %10s %10s %8s\n", "", "", "CPU ms", "CPU ms", "wall ms",
              "wall ms", "wall ms", "");
  double total = 0, total_ptx = 0;
  for (const auto& spec : specs) {
    graphattn::KernelSource src = graphattn::render_kernel(spec);
    src.options.insert(src.options.end(), extra.begin(), extra.end());
    // With --repeat, the least CPU time of the repeats (and the phases of that compile): load
    // from other processes only ever adds to a compile's CPU time.
    double cpu = 0, to_ptx = 0;
    std::string csv;
    size_t ptx_bytes = 0;
    for (int r = 0; r < repeat; ++r) {
      src.options.push_back("--time=" + csv_path);
      std::filesystem::remove(csv_path);
      const double t0 = process_cpu_ms();
      graphattn::detail::nvrtc_compile(src, nullptr);
      const double c = process_cpu_ms() - t0;
      src.options.pop_back();  // --time
      if (r == 0 || c < cpu) {
        cpu = c;
        std::ifstream f(csv_path);
        csv.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      }
      const double t = ptx_only_cpu_ms(src, &ptx_bytes);
      if (r == 0 || t < to_ptx) to_ptx = t;
    }
    total += cpu;
    total_ptx += to_ptx;
    std::printf("%-62s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %8.1f\n", spec.to_string().c_str(),
                cpu, to_ptx, cpu - to_ptx, phase_ms(csv, "CUDA C++ Frontend"),
                phase_ms(csv, "NVVM Optimizer"), phase_ms(csv, "PTX Translation"),
                ptx_bytes / 1024.0);
  }
  std::printf("%-62s %10.1f %10.1f %10.1f   (%zu kernels, one thread)\n", "total", total, total_ptx,
              total - total_ptx, specs.size());
  return 0;
}

int run() {
  using graphattn::DType;
  using graphattn::KvDType;
  using graphattn::KvLayout;
  const auto [nv_major, nv_minor] = graphattn::nvrtc_version();

  // Warm-up: the first NVRTC call in the process pays for loading and initialising NVRTC.
  const graphattn::AttentionSpec warm =
      cache_write(256, DType::kFloat16, KvDType::kAuto, KvLayout::kNHD, 80);
  double first_ms = 0;
  {
    ScratchDir dir;
    graphattn::KernelCache cache(options_for(dir.path()));
    const auto t0 = Clock::now();
    get_expect(cache, warm, graphattn::CacheOrigin::kCompiled);
    first_ms = ms_since(t0);
  }

  // Cold compiles of distinct specs, each in its own empty directory.
  std::vector<graphattn::AttentionSpec> specs;
  for (int head : {64, 128})
    for (DType dt : {DType::kFloat16, DType::kBFloat16})
      for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND})
        specs.push_back(cache_write(head, dt, KvDType::kAuto, layout, 90));
  specs.push_back(cache_write(128, DType::kBFloat16, KvDType::kFp8E4M3, KvLayout::kNHD, 80));
  specs.push_back(cache_write(128, DType::kBFloat16, KvDType::kFp8E5M2, KvLayout::kHND, 89));
  std::vector<double> cold_ms, nvrtc_ms;
  for (const auto& spec : specs) {
    ScratchDir dir;
    graphattn::KernelCache cache(options_for(dir.path()));
    const auto t0 = Clock::now();
    get_expect(cache, spec, graphattn::CacheOrigin::kCompiled);
    cold_ms.push_back(ms_since(t0));
    nvrtc_ms.push_back(cache.stats().compile_ms);
  }

  // Disk hits: a new KernelCache each time, over a directory that holds the kernel.
  ScratchDir populated;
  const graphattn::AttentionSpec hot =
      cache_write(128, DType::kBFloat16, KvDType::kAuto, KvLayout::kNHD, 90);
  {
    graphattn::KernelCache cache(options_for(populated.path()));
    get_expect(cache, hot, graphattn::CacheOrigin::kCompiled);
  }
  std::vector<double> disk_get_ms, disk_total_ms;
  for (int i = 0; i < kDiskHitRepeats; ++i) {
    const auto t0 = Clock::now();
    graphattn::KernelCache cache(options_for(populated.path()));
    const auto t1 = Clock::now();
    get_expect(cache, hot, graphattn::CacheOrigin::kDisk);
    disk_get_ms.push_back(ms_since(t1));
    disk_total_ms.push_back(ms_since(t0));
  }

  // Memory hits, timed in batches so that the clock's own cost is spread thin.
  graphattn::KernelCache cache(options_for(populated.path()));
  get_expect(cache, hot, graphattn::CacheOrigin::kDisk);
  get_expect(cache, hot, graphattn::CacheOrigin::kMemory);
  std::vector<double> memory_ns;
  for (int b = 0; b < kMemoryBatches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kMemoryBatchCalls; ++i) cache.get(hot);
    memory_ns.push_back(ms_since(t0) * 1e6 / kMemoryBatchCalls);
  }
  const graphattn::CacheStats st = cache.stats();
  if (st.memory_hits != 1 + static_cast<uint64_t>(kMemoryBatches) * kMemoryBatchCalls)
    throw graphattn::Error("memory hits were not all memory hits");

  // llama-3-8b's kernel set (cache write, decode, prefill for sm_90): each kernel
  // cold on its own, then the whole set cold (the precompile pool) and warm (disk hits).
  graphattn::AttentionLayerConfig llama = llama3_8b();
  llama.arch = 90;
  const auto llama_specs = graphattn::AttentionBackend(llama).required_specs();
  std::vector<double> kernel_ms;
  for (const auto& spec : llama_specs) {
    ScratchDir dir;
    graphattn::KernelCache c(options_for(dir.path()));
    const auto t0 = Clock::now();
    get_expect(c, spec, graphattn::CacheOrigin::kCompiled);
    kernel_ms.push_back(ms_since(t0));
  }
  ScratchDir set_dir;
  double set_cold_ms = 0, set_warm_ms = 0;
  for (int pass = 0; pass < 2; ++pass) {
    graphattn::KernelCache c(options_for(set_dir.path()));
    const auto t0 = Clock::now();
    for (const auto& r : c.precompile(llama_specs))
      if (!r.error.empty()) throw graphattn::Error(r.spec + ": " + r.error);
    (pass == 0 ? set_cold_ms : set_warm_ms) = ms_since(t0);
    if (pass == 1 && c.stats().disk_hits != llama_specs.size())
      throw graphattn::Error("the warm pass over the llama-3-8b set was not all disk hits");
  }

  // Remote hits: the set is put once, then fetched by new caches over empty directories.
  const char* remote_env = std::getenv("GRAPHATTN_REMOTE_CACHE");
  const std::string remote_url = remote_env ? remote_env : "";
  std::vector<double> remote_ms, remote_set_ms;
  std::string remote_where;
  if (!remote_url.empty()) {
    {
      ScratchDir dir;
      graphattn::KernelCache c(remote_options_for(dir.path(), remote_url));
      remote_where = c.remote();
      for (const auto& spec : llama_specs) c.get(spec);
      if (c.stats().remote_puts + c.stats().remote_hits != llama_specs.size())
        throw graphattn::Error("the llama-3-8b set could not be stored in " + c.remote());
    }
    for (int i = 0; i < kRemoteRepeats; ++i) {
      ScratchDir dir;
      graphattn::KernelCache c(remote_options_for(dir.path(), remote_url));
      const auto t0 = Clock::now();
      for (const auto& spec : llama_specs) {
        const auto t1 = Clock::now();
        get_expect(c, spec, graphattn::CacheOrigin::kRemote);
        remote_ms.push_back(ms_since(t1));
      }
      remote_set_ms.push_back(ms_since(t0));
    }
  }

  std::printf("graphattn-bench-jit: cache write kernel, NVRTC %d.%d, %u hardware threads\n",
              nv_major, nv_minor, std::thread::hardware_concurrency());
  std::printf("%-46s %14s %14s %8s\n", "measurement", "median", "max", "n");
  row("first compile (NVRTC start-up included)", fmt(first_ms, "ms"), "-", 1);
  row("cold compile: get() into an empty directory", fmt(median(cold_ms), "ms"),
      fmt(max_of(cold_ms), "ms"), cold_ms.size());
  row("  of which NVRTC", fmt(median(nvrtc_ms), "ms"), fmt(max_of(nvrtc_ms), "ms"),
      nvrtc_ms.size());
  row("warm disk hit: get() on a new KernelCache", fmt(median(disk_get_ms), "ms"),
      fmt(max_of(disk_get_ms), "ms"), disk_get_ms.size());
  row("  new KernelCache + get()", fmt(median(disk_total_ms), "ms"),
      fmt(max_of(disk_total_ms), "ms"), disk_total_ms.size());
  row("memory hit: get() (per call, batches of 1000)", fmt(median(memory_ns), "ns"),
      fmt(max_of(memory_ns), "ns"), memory_ns.size());
  std::printf("\nllama-3-8b kernel set (%zu kernels, sm_90):\n", llama_specs.size());
  row("cold compile per kernel", fmt(median(kernel_ms), "ms"), fmt(max_of(kernel_ms), "ms"),
      kernel_ms.size());
  for (size_t i = 0; i < llama_specs.size(); ++i)
    row("  " + llama_specs[i].to_string(), fmt(kernel_ms[i], "ms"), "-", 1);
  row("whole set cold (precompile, wall)", fmt(set_cold_ms, "ms"), "-", 1);
  row("whole set warm (new cache, disk hits, wall)", fmt(set_warm_ms, "ms"), "-", 1);
  if (remote_url.empty()) {
    std::printf("\nremote tier: not measured (set GRAPHATTN_REMOTE_CACHE=redis://HOST:PORT)\n");
  } else {
    std::printf("\nremote tier, %s (a new cache over an empty directory each time):\n",
                remote_where.c_str());
    row("remote hit per kernel of the set (get())", fmt(median(remote_ms), "ms"),
        fmt(max_of(remote_ms), "ms"), remote_ms.size());
    row("whole set from the remote tier (wall)", fmt(median(remote_set_ms), "ms"),
        fmt(max_of(remote_set_ms), "ms"), remote_set_ms.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::cout << graphattn::tools::version_text("graphattn-bench-jit") << "\n";
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--phases") {
    std::vector<std::string> names(argv + 2, argv + argc), extra;
    int repeat = 1;
    while (!names.empty() && (names[0] == "--repeat" || names[0] == "--nvrtc-option")) {
      if (names.size() < 2) {
        std::cerr << "graphattn-bench-jit: " << names[0] << " needs a value\n";
        return 2;
      }
      if (names[0] == "--nvrtc-option") {
        extra.push_back(names[1]);
      } else {
        char* end = nullptr;
        const long n = std::strtol(names[1].c_str(), &end, 10);
        if (names[1].empty() || *end != '\0' || n < 1 || n > 100) {
          std::cerr << "graphattn-bench-jit: --repeat '" << names[1]
                    << "': expected a count of 1 to 100\n";
          return 2;
        }
        repeat = static_cast<int>(n);
      }
      names.erase(names.begin(), names.begin() + 2);
    }
    try {
      return run_phases(names, repeat, extra);
    } catch (const std::exception& e) {
      std::cerr << "graphattn-bench-jit: " << e.what() << "\n";
      return 1;
    }
  }
  if (argc > 1) {
    std::cerr << "usage: " << argv[0]
              << " [--version | --phases [--repeat N] [--nvrtc-option OPT]... [SPEC...]]\n"
                 "  without arguments: measures NVRTC compiles, disk hits and memory hits of the "
                 "cache write kernel in temporary directories; --phases: one compile's CPU time, "
                 "its CPU split (to PTX, PTX to SASS) and NVRTC's phase times per kernel "
                 "(--repeat N: the least of N compiles each; --nvrtc-option OPT: OPT appended to "
                 "every kernel's NVRTC options, e.g. --Ofast-compile=min, which may change the "
                 "machine code)\n";
    return 2;
  }
  try {
    return run();
  } catch (const std::exception& e) {
    std::cerr << "graphattn-bench-jit: " << e.what() << "\n";
    return 1;
  }
}
