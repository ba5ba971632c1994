// SPDX-License-Identifier: Apache-2.0
// GRAPHATTN_NVRTC_EXTRA_OPTIONS: NVRTC options appended to every kernel's own (render_kernel),
// to measure what an option does to a kernel's compile time and speed on a real GPU. They change
// the machine code, so they enter the kernel's options and with them its cache key: a kernel
// compiled with them is never served where the default options are asked for, and back.
// Whitespace separates the options; allowed are --Ofast-compile=min|mid|max|0,
// --ptxas-options=V / -Xptxas=V (V passed to ptxas, e.g. -O1), --maxrregcount=N (N > 0) and
// -DGA_DECODE_TIMING=1 (the decode kernel's per-block timing experiment, templates/decode.cu;
// graphattn-bench --block-timing reads what it records), -DGA_FP8_CVT_HW=0|1 (the hardware float ->
// fp8 conversion off / on for both formats, templates/common.cuh).
// Anything else throws graphattn::Error naming the option and what is allowed.
#pragma once

#include <string>
#include <vector>

namespace graphattn::detail {

std::vector<std::string> parse_nvrtc_extra_options(const std::string& text);

// The variable's options, parsed once per process (unset or empty: none).
const std::vector<std::string>& nvrtc_extra_options();
// GRAPHATTN_NVRTC_EXTRA_OPTIONS' -DGA_PREFILL_SM90_PERSIST=N (3, the kernels' default, when
// absent): 2 and 3 mean the sm_90 e4m3 prefill kernels are compiled persistent, and their
// launches take one block per multiprocessor; 3 adds the kernel's output buffer to its shared
// memory.
int prefill_sm90_persist();

}  // namespace graphattn::detail
