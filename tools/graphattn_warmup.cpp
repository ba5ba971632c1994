// graphattn-warmup: the engine start-up job for a built-in model. Phase 1 compiles every kernel
// the model needs into the kernel cache (ahead of time, in parallel).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "graphattn/graphattn.hpp"
#include "tools/models.hpp"

using namespace graphattn;

namespace {

std::vector<AttentionSpec> model_specs(const tools::ModelConfig& m, int block_size, DType dtype,
                                       KvDType kv_dtype, int arch) {
  AttentionSpec s;
  s.kind = KernelKind::kCacheWrite;
  s.head_size = m.head_size;
  s.block_size = block_size;
  s.dtype = dtype;
  s.kv_dtype = kv_dtype;
  s.arch = arch;
  return {s};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"graphattn-warmup: compile a model's kernels (warmup capture passes follow)"};
  std::string model = "llama-3-8b", dtype_name = "bf16", kv_name = "auto", cache_dir;
  int block_size = 16, arch = 0;
  unsigned threads = 0;
  bool list_models = false;
  app.add_option("--model", model, "built-in model configuration")->capture_default_str();
  app.add_option("--block-size", block_size, "KV cache block size")->capture_default_str();
  app.add_option("--dtype", dtype_name, "fp16 or bf16")->capture_default_str();
  app.add_option("--kv-cache-dtype", kv_name, "auto, e4m3 or e5m2")->capture_default_str();
  app.add_option("--arch", arch, "target arch, e.g. 90 (default: the GPU's, else 90)");
  app.add_option("--cache-dir", cache_dir, "kernel cache directory");
  app.add_option("--threads", threads, "compile threads (default: cores)");
  app.add_flag("--list-models", list_models, "print the built-in models and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    if (list_models) {
      for (const auto& m : tools::builtin_models())
        std::printf("%-12s layers %2d  heads %2d/%d  head %3d  window %d%s  soft cap %g\n",
                    m.name.c_str(), m.num_layers, m.num_heads, m.num_kv_heads, m.head_size,
                    m.window, m.window_alternates ? " (alternating)" : "", m.soft_cap);
      return 0;
    }
    const tools::ModelConfig& m = tools::find_model(model);
    const DType dtype = AttentionSpec::parse("decode_h128_b16_" + dtype_name +
                                             "_kvauto_g1_swa0_cap0_nhd_sm90").dtype;
    const KvDType kv = AttentionSpec::parse("decode_h128_b16_bf16_kv" + kv_name +
                                            "_g1_swa0_cap0_nhd_sm90").kv_dtype;
    std::string why;
    const bool gpu = gpu_available(&why);
    if (arch == 0) {
      if (gpu) {
        ensure_context(0);
        arch = current_device_arch();
      } else {
        arch = 90;
      }
    }
    CacheOptions opts;
    opts.dir = cache_dir;
    KernelCache cache(opts);
    const auto specs = model_specs(m, block_size, dtype, kv, arch);
    std::printf("[compile] %s: %zu kernels for sm_%d into %s\n", m.name.c_str(), specs.size(),
                arch, cache.dir().empty() ? "(memory only)" : cache.dir().c_str());
    const auto t0 = std::chrono::steady_clock::now();
    const auto results = cache.precompile(specs, threads);
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    int failed = 0, hits = 0;
    for (const auto& r : results) {
      if (!r.error.empty()) {
        ++failed;
        std::printf("  %-52s FAILED\n%s\n", r.spec.c_str(), r.error.c_str());
        continue;
      }
      hits += r.origin != CacheOrigin::kCompiled;
      std::printf("  %-52s %-8s %8.1f ms\n", r.spec.c_str(), to_string(r.origin), r.ms);
    }
    std::printf("[compile] %zu kernels, %d cache hits, %d failed, %.1f ms wall\n", results.size(),
                hits, failed, wall);
    if (failed) return 1;
    if (!gpu) {
      std::printf("[capture] skipped: no GPU found (%s)\n[decode] skipped: no GPU found\n",
                  why.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graphattn-warmup: %s\n", e.what());
    return 1;
  }
}
