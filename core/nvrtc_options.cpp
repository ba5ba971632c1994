// SPDX-License-Identifier: Apache-2.0
#include "core/nvrtc_options.hpp"

#include <cstdlib>
#include <sstream>

#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn::detail {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool allowed(const std::string& o) {
  for (const char* level : {"min", "mid", "max", "0"})
    if (o == std::string("--Ofast-compile=") + level) return true;
  for (const char* prefix : {"--ptxas-options=", "-Xptxas="})
    if (starts_with(o, prefix) && o.size() > std::string(prefix).size()) return true;
  // The decode kernel's block-timing experiment (templates/decode.cu, GA_DECODE_TIMING).
  if (o == "-DGA_DECODE_TIMING=1") return true;
  // The 16-bit sm_90 prefill consumers' schedule bits (templates/params.h,
  // ga_prefill_sm90_sched), for measurement: 0-7.
  const std::string sched = "-DGA_PREFILL_SM90_SCHED=";
  if (o.size() == sched.size() + 1 && starts_with(o, sched.c_str()))
    return o.back() >= '0' && o.back() <= '7';
  // The sm_90 e4m3 prefill's measurement variants (templates/prefill_sm90.cu, PW_F8V): 0-511.
  const std::string fp8var = "-DGA_PREFILL_SM90_FP8_VAR=";
  if (starts_with(o, fp8var.c_str()) && o.size() > fp8var.size() && o.size() <= fp8var.size() + 3) {
    for (size_t i = fp8var.size(); i < o.size(); ++i)
      if (o[i] < '0' || o[i] > '9') return false;
    return std::atoi(o.c_str() + fp8var.size()) <= 511;
  }
  const std::string regs = "--maxrregcount=";
  if (starts_with(o, regs.c_str()) && o.size() > regs.size() && o.size() <= regs.size() + 3) {
    for (size_t i = regs.size(); i < o.size(); ++i)
      if (o[i] < '0' || o[i] > '9') return false;
    return std::atoi(o.c_str() + regs.size()) > 0;
  }
  return false;
}

}  // namespace

std::vector<std::string> parse_nvrtc_extra_options(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string o;
  while (in >> o) {
    if (!allowed(o))
      throw Error("GRAPHATTN_NVRTC_EXTRA_OPTIONS: '" + printable(o) +
                  "' is not supported; supported (separated by spaces): "
                  "--Ofast-compile=min|mid|max|0, --ptxas-options=V, -Xptxas=V, "
                  "--maxrregcount=N (N 1-999), -DGA_DECODE_TIMING=1, "
                  "-DGA_PREFILL_SM90_SCHED=N (N 0-7), -DGA_PREFILL_SM90_FP8_VAR=N (N 0-511)");
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

}  // namespace graphattn::detail
