// SPDX-License-Identifier: Apache-2.0
// graphattn-warmup, run as the real binary: the compile phase on a machine without a GPU, its
// cache hits on a second run, and its usage errors.
#include <doctest/doctest.h>

#include <cstdio>
#include <thread>

#include "graphattn/runtime.hpp"
#include "tests/tool_runner.hpp"

#ifndef GRAPHATTN_WARMUP_TOOL
#error "GRAPHATTN_WARMUP_TOOL must name the graphattn-warmup binary (see tests/tests.cmake)"
#endif

using namespace graphattn::test;

namespace {

int count(const std::string& text, const std::string& word) {
  int n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// The compile phase's summary, "[compile] N kernels: C compiled, H cache hits, F failed".
struct CompileSummary {
  int kernels = -1, compiled = -1, hits = -1, failed = -1;
};

CompileSummary compile_summary(const std::string& out) {
  CompileSummary c;
  const size_t line = out.find(" kernels: ");
  const size_t at = line == std::string::npos ? line : out.rfind("[compile] ", line);
  if (at != std::string::npos)
    std::sscanf(out.c_str() + at, "[compile] %d kernels: %d compiled, %d cache hits, %d failed",
                &c.kernels, &c.compiled, &c.hits, &c.failed);
  return c;
}

}  // namespace

TEST_CASE("warmup tool: compiles a model's kernels, then hits the cache; no GPU skips the rest") {
  if (graphattn::gpu_available()) {
    MESSAGE("skipped here: a GPU is present (the GPU suite runs graphattn-warmup in full)");
    return;
  }
  TempDir dir;
  const auto first = run_program(GRAPHATTN_WARMUP_TOOL, {"--model", "gemma-2-9b", "--arch", "90"},
                                 {"GRAPHATTN_CACHE_DIR=" + dir.path()});
  INFO(first.out << first.err);
  CHECK(first.code == 0);
  CHECK(first.out.find("[compile] gemma-2-9b: ") != std::string::npos);
  // gemma-2 alternates a sliding window: both decode variants and the shared cache write.
  CHECK(first.out.find("decode_h256_b16_bf16_kvauto_g2_swa1_cap1_nhd_sm90") != std::string::npos);
  CHECK(first.out.find("decode_h256_b16_bf16_kvauto_g2_swa0_cap1_nhd_sm90") != std::string::npos);
  CHECK(first.out.find("0 cache hits, 0 failed") != std::string::npos);
  CHECK(first.out.find("[capture] skipped: no GPU found") != std::string::npos);
  CHECK(first.out.find("[decode] skipped: no GPU found") != std::string::npos);
  const auto second = run_program(GRAPHATTN_WARMUP_TOOL, {"--model", "gemma-2-9b", "--arch", "90"},
                                  {"GRAPHATTN_CACHE_DIR=" + dir.path()});
  CHECK(second.code == 0);
  CHECK(count(second.out, " hit ") == count(first.out, " compiled "));
  CHECK(second.out.find(" 0 compiled,") != std::string::npos);
}

TEST_CASE("warmup tool: models and usage errors") {
  const auto list = run_program(GRAPHATTN_WARMUP_TOOL, {"--list-models"});
  CHECK(list.code == 0);
  for (const char* m : {"llama-3-8b", "qwen2.5-7b", "mistral-7b", "gemma-2-9b"})
    CHECK(list.out.find(m) != std::string::npos);
  const auto unknown = run_program(GRAPHATTN_WARMUP_TOOL, {"--model", "gpt-9", "--arch", "90"});
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("unknown model 'gpt-9'; built-in models: llama-3-8b") !=
        std::string::npos);
  const auto bad = run_program(GRAPHATTN_WARMUP_TOOL, {"--dtype", "fp32"});
  CHECK(bad.code == 2);
  const auto bad_device = run_program(GRAPHATTN_WARMUP_TOOL, {"--device", "-1", "--arch", "90"});
  CHECK(bad_device.code == 2);
  CHECK(bad_device.err.find("--device -1 is not allowed; use a CUDA device ordinal") !=
        std::string::npos);
  if (graphattn::gpu_available()) {
    const int n = graphattn::device_count();
    const auto missing = run_program(GRAPHATTN_WARMUP_TOOL, {"--device", std::to_string(n)});
    CHECK(missing.code == 2);
    CHECK(missing.err.find("is out of range; this machine has " + std::to_string(n)) !=
          std::string::npos);
  }
  const auto bad_block = run_program(GRAPHATTN_WARMUP_TOOL, {"--block-size", "24", "--arch", "90"});
  CHECK(bad_block.code == 2);
  CHECK(bad_block.err.find("--block-size 24 is not supported") != std::string::npos);
  const auto bad_spec = run_program(GRAPHATTN_WARMUP_TOOL, {"--spec-tokens", "16", "--arch", "90"});
  CHECK(bad_spec.code == 2);
  CHECK(bad_spec.err.find("--spec-tokens 16 is not allowed; use 0..15") != std::string::npos);
  const auto bad_sizes = run_program(
      GRAPHATTN_WARMUP_TOOL, {"--spec-tokens", "3", "--capture-sizes", "8", "6", "--arch", "90"});
  CHECK(bad_sizes.code == 2);
  CHECK(bad_sizes.err.find("--capture-sizes 6 is not allowed with --spec-tokens 3; sizes are "
                           "multiples of 4") != std::string::npos);
}

TEST_CASE("warmup tool: --spec-tokens compiles the multi-token decode kernel") {
  if (graphattn::gpu_available()) {
    MESSAGE("skipped here: a GPU is present (the GPU suite runs graphattn-warmup in full)");
    return;
  }
  TempDir dir;
  const auto r = run_program(GRAPHATTN_WARMUP_TOOL, {"--spec-tokens", "3", "--arch", "90"},
                             {"GRAPHATTN_CACHE_DIR=" + dir.path()});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_mt ") != std::string::npos);
  CHECK(r.out.find("3 kernels: 3 compiled") != std::string::npos);
}

TEST_CASE("warmup tool: one process per GPU on one fresh cache compiles each kernel once in all") {
  // Engine workers, one process per device, start together on one cache directory: the per-key
  // lock lets one of them compile each kernel and the other finds it on disk. Without a GPU
  // both run the compile phase; with one GPU both share it; with several each has its own.
  const int gpus = graphattn::device_count();
  TempDir dir;
  ToolRun runs[2];
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i)
    workers.emplace_back([&, i] {
      runs[i] = run_program(
          GRAPHATTN_WARMUP_TOOL,
          {"--model", "llama-3-8b", "--device", std::to_string(gpus ? i % gpus : i), "--threads",
           "1", "--steps", "0", "--max-num-seqs", "8", "--kv-cache-gib", "1"},
          {"GRAPHATTN_CACHE_DIR=" + dir.path()});
    });
  for (auto& w : workers) w.join();
  CompileSummary sum[2];
  for (int i = 0; i < 2; ++i) {
    INFO("process " << i << ":\n" << runs[i].out << runs[i].err);
    CHECK(runs[i].code == 0);
    sum[i] = compile_summary(runs[i].out);
    // llama-3-8b: cache write, decode, prefill, the mixed graphs' _dsp and _dsp_long decodes
    CHECK(sum[i].kernels == 5);
    CHECK(sum[i].failed == 0);
  }
  MESSAGE("compiled " << sum[0].compiled << " + " << sum[1].compiled << ", hits " << sum[0].hits
                      << " + " << sum[1].hits << " (" << gpus << " GPUs)");
  CHECK(sum[0].compiled + sum[1].compiled == 5);
  CHECK(sum[0].hits + sum[1].hits == 5);
}
