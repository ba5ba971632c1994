// SPDX-License-Identifier: Apache-2.0
#include "core/nvrtc_options.hpp"

#include <cstdlib>
#include <sstream>

#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn::detail {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// o is prefix followed by a decimal number in [lo, hi]: 1-5 digits, no sign, no leading zero.
bool number_after(const std::string& o, const char* prefix, int lo, int hi) {
  const std::string n = o.substr(std::string(prefix).size());
  if (n.empty() || n.size() > 5 || (n.size() > 1 && n[0] == '0')) return false;
  for (char c : n)
    if (c < '0' || c > '9') return false;
  const int v = std::atoi(n.c_str());
  return v >= lo && v <= hi;
}

bool allowed(const std::string& o) {
  for (const char* level : {"min", "mid", "max", "0"})
    if (o == std::string("--Ofast-compile=") + level) return true;
  for (const char* prefix : {"--ptxas-options=", "-Xptxas="})
    if (starts_with(o, prefix) && o.size() > std::string(prefix).size()) return true;
  // The decode kernel's block-timing experiment (templates/decode.cu, GA_DECODE_TIMING).
  if (o == "-DGA_DECODE_TIMING=1") return true;
  // The decode's early-trigger experiment (templates/decode.cu, GA_DECODE_EARLY_TRIGGER).
  if (o == "-DGA_DECODE_EARLY_TRIGGER=1") return true;
  // The decode's page-order experiment (templates/decode.cu, GA_DECODE_PAGE_SORT): N sorts
  // windows of at least N tiles, 0 (the default) compiles it out.
  if (starts_with(o, "-DGA_DECODE_PAGE_SORT="))
    return number_after(o, "-DGA_DECODE_PAGE_SORT=", 0, 32);
  // The decode's pulled cluster combine on sm_90 (templates/decode.cu, GA_DECODE_CLUSTER_PUSH).
  if (o == "-DGA_DECODE_CLUSTER_PUSH=0") return true;
  // The hardware float -> fp8 conversion (templates/common.cuh, GA_FP8_CVT_HW): 1 both formats
  // on sm_89+, 0 none (the default: e4m3 on sm_90).
  if (o == "-DGA_FP8_CVT_HW=0" || o == "-DGA_FP8_CVT_HW=1") return true;
  // The 16-bit sm_90 prefill consumers' schedule bits (templates/params.h, ga_prefill_sm90_sched)
  // and the sm_90 e4m3 and legacy-layout prefills' variants (templates/prefill_sm90.cu, PW_F8V,
  // PW_LV), for measurement; the e4m3 prefill's own schedule bits (ga_prefill_sm90_sched's
  // fp8_bits).
  if (starts_with(o, "-DGA_PREFILL_SM90_SCHED="))
    return number_after(o, "-DGA_PREFILL_SM90_SCHED=", 0, 4095);
  if (starts_with(o, "-DGA_PREFILL_SM90_FP8_SCHED="))
    return number_after(o, "-DGA_PREFILL_SM90_FP8_SCHED=", 0, 65535);
  if (starts_with(o, "-DGA_PREFILL_SM90_FP8_VAR="))
    return number_after(o, "-DGA_PREFILL_SM90_FP8_VAR=", 0, 2047);
  // The sm_90 e4m3 prefill's output and persistence (templates/prefill_sm90.cu, PW_PERSIST): 0
  // session 16's kernel, 1 the output stored from registers, 2 also persistent blocks, 3 (the
  // default) persistent with the output staged in its own buffer (runtime/prefill.cpp launches
  // one block per multiprocessor for 2 and 3: prefill_sm90_persist).
  if (starts_with(o, "-DGA_PREFILL_SM90_PERSIST="))
    return number_after(o, "-DGA_PREFILL_SM90_PERSIST=", 0, 3);
  if (starts_with(o, "-DGA_PREFILL_SM90_LEGACY_VAR="))
    return number_after(o, "-DGA_PREFILL_SM90_LEGACY_VAR=", 0, 255);
  // The 16-bit sm_90 prefill's block start and end bits (templates/params.h,
  // ga_prefill_sm90_bstart), for measurement.
  if (starts_with(o, "-DGA_PREFILL_SM90_BSTART="))
    return number_after(o, "-DGA_PREFILL_SM90_BSTART=", 0, 15);
  // The _dsp decode's seq_lens window beside its count (templates/decode.cu, GA_DSP_SEQ_WINDOW:
  // words of 32 rows, 0 = after the count as in session 13).
  if (starts_with(o, "-DGA_DSP_SEQ_WINDOW=")) return number_after(o, "-DGA_DSP_SEQ_WINDOW=", 0, 4);
  // The fp8 KV-head-pair decodes' epilogue, prologue and tile bits (templates/decode.cu,
  // GA_DECODE_FP8_PAIR: 1, 2, 4 epilogue and prologue, 8, 16, 32, 64, 128, 256 the e4m3 tile; 471
  // the default), for measurement.
  if (starts_with(o, "-DGA_DECODE_FP8_PAIR="))
    return number_after(o, "-DGA_DECODE_FP8_PAIR=", 0, 511);
  // The 16-bit KV-head-pair decodes' tile bits (templates/decode.cu, GA_DECODE_PAIR16: 1 two
  // accumulator chains, 2 and 4 V before the softmax; 0 session 15's tile; default 5 on sm_90),
  // for measurement.
  if (starts_with(o, "-DGA_DECODE_PAIR16=")) return number_after(o, "-DGA_DECODE_PAIR16=", 0, 7);
  if (starts_with(o, "--maxrregcount=")) return number_after(o, "--maxrregcount=", 1, 999);
  return false;
}

}  // namespace

std::vector<std::string> parse_nvrtc_extra_options(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string o;
  while (in >> o) {
    if (!allowed(o))
      throw Error(
          "GRAPHATTN_NVRTC_EXTRA_OPTIONS: '" + printable(o) +
          "' is not supported; supported (separated by spaces): "
          "--Ofast-compile=min|mid|max|0, --ptxas-options=V, -Xptxas=V, "
          "--maxrregcount=N (N 1-999), -DGA_DECODE_TIMING=1, -DGA_DECODE_EARLY_TRIGGER=1, "
          "-DGA_DSP_SEQ_WINDOW=N (N 0-4), -DGA_DECODE_PAGE_SORT=N (N 0-32), "
          "-DGA_DECODE_CLUSTER_PUSH=0, -DGA_FP8_CVT_HW=0|1, -DGA_PREFILL_SM90_SCHED=N (N 0-4095), "
          "-DGA_PREFILL_SM90_FP8_SCHED=N (N 0-65535), -DGA_PREFILL_SM90_FP8_VAR=N (N 0-2047), "
          "-DGA_PREFILL_SM90_PERSIST=N (N 0-3), -DGA_PREFILL_SM90_LEGACY_VAR=N (N 0-255), "
          "-DGA_PREFILL_SM90_BSTART=N (N 0-15), "
          "-DGA_DECODE_FP8_PAIR=N (N 0-511), "
          "-DGA_DECODE_PAIR16=N (N 0-7)");
    out.push_back(o);
  }
  return out;
}

const std::vector<std::string>& nvrtc_extra_options() {
  static const std::vector<std::string> options = [] {
    const char* v = std::getenv("GRAPHATTN_NVRTC_EXTRA_OPTIONS");
    return parse_nvrtc_extra_options(v ? v : "");
  }();
  return options;
}

int prefill_sm90_persist() {
  static constexpr char kPersist[] = "-DGA_PREFILL_SM90_PERSIST=";
  static const int value = [] {
    int v = 3;  // templates/prefill_sm90.cu's default
    for (const std::string& o : nvrtc_extra_options())
      if (starts_with(o, kPersist)) v = std::stoi(o.substr(sizeof(kPersist) - 1));
    return v;
  }();
  return value;
}

}  // namespace graphattn::detail
