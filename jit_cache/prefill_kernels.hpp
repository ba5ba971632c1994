// SPDX-License-Identifier: Apache-2.0
// Which prefill kernel family serves a spec. One function of the spec (and of one environment
// flag, read once), shared by the renderer (template file and NVRTC target) and the host launch
// code (tile configuration), so the two cannot drift.
#pragma once

#include "graphattn/spec.hpp"

namespace graphattn::detail {

enum class PrefillKernel {
  kNone,     // not a valid prefill spec
  kMmaSync,  // templates/prefill.cu: mma.sync m16n8k16, every prefill spec on every arch
  kWgmma,    // templates/prefill_sm90.cu: Hopper wgmma, built for sm_90a; arch 90, 16-bit KV,
             // head size a multiple of 64, flash layout (legacy caches go to kMmaSync); and
             // an e4m3 query over an fp8 cache with head size 128
};

PrefillKernel select_prefill_kernel(const AttentionSpec& spec);

// GRAPHATTN_PREFILL_MMA_SYNC=1: select_prefill_kernel gives kMmaSync for every prefill spec, sm_90
// included (to time and test templates/prefill.cu on a Hopper GPU). Read once per process.
bool prefill_mma_sync_forced();

}  // namespace graphattn::detail
