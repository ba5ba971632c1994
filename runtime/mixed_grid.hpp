// SPDX-License-Identifier: Apache-2.0
// The decode grid of a batch split on the device (AttentionMetadata::device_split: a CUDA graph
// captured for any mix of decodes and prefills), runtime/attention.cpp.
#pragma once

#include "graphattn/spec.hpp"
#include "runtime/decode.hpp"

namespace graphattn::detail {

// The launch covers `slots` request slots; how many hold a decode is known only on the device.
// divisor 0: the grid of the _dsp kernel, which chooses the splits on the device (device_sms,
// grid_y and split_requests set; the divisor-4 grid where that one would pass 65535 blocks).
// divisor >= 1: the split policy's grid (decode_grid) for every slot, or for ceil(slots /
// divisor) decodes where that one has more splits (divisor 1 or one slot: every slot's grid as
// decode_grid gives it; else at the depth of a decode beside a prefill,
// decode_grid_beside_prefill). Arguments otherwise as decode_grid's.
DecodeGrid mixed_decode_grid(int slots, int divisor, int num_kv_heads, int columns,
                             int max_model_len, int window, int head_size, KvDType kv_dtype,
                             const DecodeDevice& dev);

}  // namespace graphattn::detail
