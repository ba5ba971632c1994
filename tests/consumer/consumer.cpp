// SPDX-License-Identifier: Apache-2.0
// A program outside graphattn's build that uses its C++ API on the CPU, through the installed
// package (find_package), add_subdirectory, or the shared library. Needs NVRTC, no GPU.
// Exit status 0 when every check passes; otherwise it names the failed check.
#include <stdlib.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <graphattn/graphattn.hpp>
#include <string>

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

namespace {

using namespace graphattn;

// vLLM's reshape_and_cache_flash for head size 128, bf16, on sm_90.
const char* const kSpec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";

int check_spec_and_config() {
  const AttentionSpec spec = AttentionSpec::parse(kSpec);
  spec.validate();
  CHECK(spec.kind == KernelKind::kCacheWrite && spec.head_size == 128 && spec.arch == 90);
  CHECK(spec.to_string() == kSpec);

  // graphattn::Error is caught by its type: its typeinfo is the library's.
  std::string message;
  try {
    AttentionSpec::parse("decode_h100_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("100") != std::string::npos);

  AttentionLayerConfig config;  // llama-3-8b's attention
  config.num_heads = 32;
  config.num_kv_heads = 8;
  config.head_size = 128;
  config.max_model_len = 8192;
  config.max_num_seqs = 256;
  config.arch = 90;
  CHECK(attention_config_problem(config).empty());
  CHECK(select_decode_kernel(config) != DecodeKernel::kNone);
  config.num_kv_heads = 7;  // 32 query heads cannot share 7 KV heads
  CHECK(!attention_config_problem(config).empty());
  CHECK(select_decode_kernel(config) == DecodeKernel::kNone);
  return 0;
}

// Compiles one kernel with NVRTC into a fresh cache directory, then finds it in memory and, from
// a second cache on the same directory, on disk.
int check_kernel_cache(const std::string& dir) {
  const AttentionSpec spec = AttentionSpec::parse(kSpec);
  CacheOptions options;
  options.dir = dir;
  CacheOrigin origin = CacheOrigin::kMemory;
  {
    KernelCache cache(options);
    CHECK(cache.disk_enabled() && cache.dir() == dir);
    const auto kernel = cache.get(spec, &origin);
    CHECK(origin == CacheOrigin::kCompiled);
    CHECK(kernel->spec == spec && !kernel->cubin.empty() && !kernel->entry.empty());
    CHECK(cache.get(spec, &origin) == kernel && origin == CacheOrigin::kMemory);
    const CacheStats stats = cache.stats();
    CHECK(stats.misses == 1 && stats.compiles == 1 && stats.memory_hits == 1);
    CHECK(stats.disk_hits == 0 && stats.compile_failures == 0 && stats.compile_ms > 0);
  }
  KernelCache reopened(options);
  reopened.get(spec, &origin);
  CHECK(origin == CacheOrigin::kDisk);
  const CacheStats stats = reopened.stats();
  CHECK(stats.disk_hits == 1 && stats.compiles == 0 && stats.misses == 0);
  return 0;
}

}  // namespace

int main() {
  std::string dir = (std::filesystem::temp_directory_path() / "graphattn-consumer-XXXXXX").string();
  if (!mkdtemp(dir.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  int failed = 1;
  try {
    failed = check_spec_and_config() || check_kernel_cache(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::printf("consumer (C++): %s\n", failed ? "FAILED" : "ok");
  return failed;
}
