// SPDX-License-Identifier: Apache-2.0
// graphattn-bench --block-timing N: per-block records of a decode row's launch (the decode
// kernel's experiment build, GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_DECODE_TIMING=1; see
// templates/decode.cu and tools/block_timing.hpp), N graph replays, each after the L2 flush.
#include <cctype>
#include <cstdio>
#include <functional>
#include <vector>

#include "graphattn/graphattn.hpp"
#include "runtime/module_cache.hpp"
#include "templates/params.h"
#include "tools/bench_parts.hpp"
#include "tools/block_timing.hpp"

namespace graphattn::bench {

namespace {

// The raw records, rows x kTimingWords little-endian uint64, to PREFIX<label><tag>.u64 (nothing
// without a prefix); returns the file's name.
std::string save_records(const std::vector<uint64_t>& rows, const std::string& out_prefix,
                         const std::string& label, const std::string& tag) {
  if (out_prefix.empty()) return std::string();
  std::string file = out_prefix;
  for (char c : label) file += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  file += tag + ".u64";
  FILE* f = std::fopen(file.c_str(), "wb");
  const bool ok = f && std::fwrite(rows.data(), 8, rows.size(), f) == rows.size();
  if (f) std::fclose(f);
  if (!ok) throw Error("--block-timing-out: cannot write " + file);
  return file;
}

// The decode module's record array (the experiment build's ga_decode_timing).
CUdeviceptr timing_records(CUmodule module, size_t& bytes) {
  CUdeviceptr rec = 0;
  if (detail::driver().cuModuleGetGlobal(&rec, &bytes, module, "ga_decode_timing") != CUDA_SUCCESS)
    throw Error(
        "--block-timing: the decode kernel has no ga_decode_timing array; run with "
        "GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_DECODE_TIMING=1 (the experiment build)");
  return rec;
}

// The records up to the last row any block wrote.
std::vector<uint64_t> used_rows(const std::vector<uint64_t>& words) {
  size_t rows = words.size() / kTimingWords;
  while (rows > 0) {
    bool any = false;
    for (int w = 0; w < kTimingWords && !any; ++w) any = words[(rows - 1) * kTimingWords + w];
    if (any) break;
    --rows;
  }
  return std::vector<uint64_t>(words.begin(), words.begin() + rows * kTimingWords);
}

// Run i of `launch` after clearing the records [rec, rec + bytes) and flushing L2 (seed i): its
// event time in us, and the records.
std::vector<uint64_t> timed_records(const Device& dev, CUdeviceptr rec, size_t bytes, int i,
                                    const std::function<void()>& launch, double& us) {
  const auto& d = detail::driver();
  EventTimer timer;
  GA_CU_CHECK(d.cuMemsetD8Async(rec, 0, bytes, dev.stream));
  flush_l2_now(dev, i);
  us = timer.time_us(dev.stream, launch);
  GA_CU_CHECK(d.cuStreamSynchronize(dev.stream));
  std::vector<uint64_t> words(bytes / 8);
  GA_CU_CHECK(d.cuMemcpyDtoH(words.data(), rec, bytes));
  return words;
}

// Replay i of graph e (timed_records): its event time in us, and the records up to the last row
// written.
std::vector<uint64_t> replay_records(const Device& dev, CUgraphExec e, CUdeviceptr rec,
                                     size_t bytes, int i, double& us) {
  return used_rows(timed_records(
      dev, rec, bytes, i, [&] { GA_CU_CHECK(detail::driver().cuGraphLaunch(e, dev.stream)); }, us));
}

}  // namespace

void decode_chain_block_records(const Device& dev, CUmodule decode_module,
                                const std::function<void()>& run, int reps,
                                const std::string& out_prefix, const std::string& label) {
  size_t bytes = 0;
  const CUdeviceptr rec = timing_records(decode_module, bytes);
  const CUgraphExec e = capture(dev, run);
  for (int i = 0; i < reps; ++i) {
    double us = 0;
    const std::vector<uint64_t> used = replay_records(dev, e, rec, bytes, i, us);
    const std::string file =
        save_records(used, out_prefix, label, "-chain-r" + std::to_string(i + 1));
    std::printf("  -- chain block records, replay %d of %d, event %.3f us, %zu rows%s%s\n", i + 1,
                reps, us, used.size() / kTimingWords, file.empty() ? "" : ", raw ", file.c_str());
  }
  detail::driver().cuGraphExecDestroy(e);
}

void decode_block_timing(const Device& dev, const AttentionBackend& attn,
                         const std::function<void()>& run, int reps, double rd_us,
                         const std::string& out_prefix, const std::string& label, CUdeviceptr rd_in,
                         size_t rd_bytes) {
  const auto& d = detail::driver();
  // The decode kernel forward() launches: the backend's second spec (after the cache write;
  // the mixed graphs' _dsp and _dsp_long kernels follow it and are not launched here).
  const std::vector<AttentionSpec> specs = attn.required_specs();
  const AttentionSpec* decode =
      specs.size() > 1 && specs[1].kind == KernelKind::kDecode ? &specs[1] : nullptr;
  if (!decode) throw Error("--block-timing: this row's backend has no decode kernel");
  const detail::LoadedKernel& k = detail::load_kernel(*decode, default_kernel_cache());
  size_t bytes = 0;
  const CUdeviceptr rec = timing_records(k.module, bytes);
  const CUgraphExec e = capture(dev, run);
  for (int i = 0; i < reps; ++i) {
    // The launch's blocks: rows up to the last one written.
    double us = 0;
    const std::vector<uint64_t> used = replay_records(dev, e, rec, bytes, i, us);
    const TimingSummary sum = summarize_block_timing(used, GA_DECODE_WARPS, us, rd_us);
    const std::string file = save_records(used, out_prefix, label, "-r" + std::to_string(i + 1));
    std::printf("  -- block timing, replay %d of %d (%s), event %.3f us, rd %.3f us%s%s:\n%s",
                i + 1, reps, decode->to_string().c_str(), us, rd_us, file.empty() ? "" : ", raw ",
                file.c_str(), sum.text.c_str());
  }
  d.cuGraphExecDestroy(e);
  // The same-flush read of the row's bytes (rd), its blocks timed the same way.
  DeviceBuffer rd_rec(static_cast<size_t>(read_only_blocks(dev)) * kTimingWords * 8);
  for (int i = 0; i < reps; ++i) {
    double us = 0;
    const std::vector<uint64_t> rd_words = timed_records(
        dev, rd_rec.ptr(), rd_rec.bytes(), i,
        [&] { launch_read_only_timed(dev, rd_in, rd_bytes, dev.flush_sink->ptr(), rd_rec.ptr()); },
        us);
    const std::string file =
        save_records(rd_words, out_prefix, label, "-rd-r" + std::to_string(i + 1));
    const TimingSummary sum = summarize_block_timing(rd_words, 1, us, rd_us);
    std::printf(
        "  -- read_only blocks over the same bytes (timed variant, eager), run %d of %d, event "
        "%.3f us, rd %.3f us%s%s:\n%s",
        i + 1, reps, us, rd_us, file.empty() ? "" : ", raw ", file.c_str(), sum.text.c_str());
  }
}

}  // namespace graphattn::bench
