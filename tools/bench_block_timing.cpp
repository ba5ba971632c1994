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

void decode_block_timing(const Device& dev, const AttentionBackend& attn,
                         const std::function<void()>& run, int reps, double rd_us,
                         const std::string& out_prefix, const std::string& label, CUdeviceptr rd_in,
                         size_t rd_bytes) {
  const auto& d = detail::driver();
  const std::vector<AttentionSpec> specs = attn.required_specs();
  const AttentionSpec* decode = nullptr;
  for (const AttentionSpec& s : specs)
    if (s.kind == KernelKind::kDecode) decode = &s;
  if (!decode) throw Error("--block-timing: this row's backend has no decode kernel");
  const detail::LoadedKernel& k = detail::load_kernel(*decode, default_kernel_cache());
  CUdeviceptr rec = 0;
  size_t bytes = 0;
  if (d.cuModuleGetGlobal(&rec, &bytes, k.module, "ga_decode_timing") != CUDA_SUCCESS)
    throw Error("--block-timing: decode kernel " + decode->to_string() +
                " has no ga_decode_timing array; run with "
                "GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_DECODE_TIMING=1 (the experiment build)");
  std::vector<uint64_t> words(bytes / 8);
  // The raw records, rows x kTimingWords little-endian uint64, to PREFIX<label><tag>.u64.
  auto save = [&](const std::vector<uint64_t>& rows, const std::string& tag) {
    if (out_prefix.empty()) return std::string();
    std::string file = out_prefix;
    for (char c : label) file += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    file += tag + ".u64";
    FILE* f = std::fopen(file.c_str(), "wb");
    const bool ok = f && std::fwrite(rows.data(), 8, rows.size(), f) == rows.size();
    if (f) std::fclose(f);
    if (!ok) throw Error("--block-timing-out: cannot write " + file);
    return file;
  };
  const CUgraphExec e = capture(dev, run);
  EventTimer timer;
  for (int i = 0; i < reps; ++i) {
    GA_CU_CHECK(d.cuMemsetD8Async(rec, 0, bytes, dev.stream));
    flush_l2_now(dev, i);
    const double us =
        timer.time_us(dev.stream, [&] { GA_CU_CHECK(d.cuGraphLaunch(e, dev.stream)); });
    GA_CU_CHECK(d.cuStreamSynchronize(dev.stream));
    GA_CU_CHECK(d.cuMemcpyDtoH(words.data(), rec, bytes));
    // The launch's blocks: rows up to the last one written.
    size_t rows = words.size() / kTimingWords;
    while (rows > 0) {
      bool any = false;
      for (int w = 0; w < kTimingWords && !any; ++w) any = words[(rows - 1) * kTimingWords + w];
      if (any) break;
      --rows;
    }
    std::vector<uint64_t> used(words.begin(), words.begin() + rows * kTimingWords);
    const TimingSummary sum = summarize_block_timing(used, GA_DECODE_WARPS, us, rd_us);
    const std::string file = save(used, "-r" + std::to_string(i + 1));
    std::printf("  -- block timing, replay %d of %d (%s), event %.3f us, rd %.3f us%s%s:\n%s",
                i + 1, reps, decode->to_string().c_str(), us, rd_us, file.empty() ? "" : ", raw ",
                file.c_str(), sum.text.c_str());
  }
  d.cuGraphExecDestroy(e);
  // The same-flush read of the row's bytes (rd), its blocks timed the same way.
  DeviceBuffer rd_rec(static_cast<size_t>(read_only_blocks(dev)) * kTimingWords * 8);
  std::vector<uint64_t> rd_words(rd_rec.bytes() / 8);
  for (int i = 0; i < reps; ++i) {
    GA_CU_CHECK(d.cuMemsetD8Async(rd_rec.ptr(), 0, rd_rec.bytes(), dev.stream));
    flush_l2_now(dev, i);
    const double us = timer.time_us(dev.stream, [&] {
      launch_read_only_timed(dev, rd_in, rd_bytes, dev.flush_sink->ptr(), rd_rec.ptr());
    });
    GA_CU_CHECK(d.cuStreamSynchronize(dev.stream));
    GA_CU_CHECK(d.cuMemcpyDtoH(rd_words.data(), rd_rec.ptr(), rd_rec.bytes()));
    const std::string file = save(rd_words, "-rd-r" + std::to_string(i + 1));
    const TimingSummary sum = summarize_block_timing(rd_words, 1, us, rd_us);
    std::printf(
        "  -- read_only blocks over the same bytes (timed variant, eager), run %d of %d, event "
        "%.3f us, rd %.3f us%s%s:\n%s",
        i + 1, reps, us, rd_us, file.empty() ? "" : ", raw ", file.c_str(), sum.text.c_str());
  }
}

}  // namespace graphattn::bench
