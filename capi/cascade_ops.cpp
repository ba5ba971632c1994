// SPDX-License-Identifier: Apache-2.0
// The C ABI of merge_attn_states and the device-mapped copy_blocks (graphattn.h): NULL and
// device checks of the DLTensors here, everything else in the C++ API.
#include <string>
#include <vector>

#include "capi.hpp"
#include "graphattn/graphattn.h"
#include "graphattn/kv_blocks.hpp"
#include "graphattn/merge_states.hpp"

using graphattn::TensorView;
using graphattn::capi::guard;
using graphattn::capi::Null;
using graphattn::capi::view_of;

extern "C" {

graphattn_status_t graphattn_merge_attn_states(
    const DLTensor* output, const DLTensor* prefix_output, const DLTensor* prefix_lse,
    const DLTensor* suffix_output, const DLTensor* suffix_lse, const DLTensor* output_lse,
    void* stream, graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView o = view_of(output, "output");
    const TensorView po = view_of(prefix_output, "prefix_output");
    const TensorView pl = view_of(prefix_lse, "prefix_lse");
    const TensorView so = view_of(suffix_output, "suffix_output");
    const TensorView sl = view_of(suffix_lse, "suffix_lse");
    const TensorView ol = view_of(output_lse, "output_lse", Null::kEmpty);
    graphattn::merge_attn_states(o, po, pl, so, sl, ol, static_cast<CUstream>(stream),
                                 graphattn::capi::cache_of(cache));
  });
}

graphattn_status_t graphattn_copy_blocks_device(const DLTensor* const* caches, size_t num_caches,
                                                const DLTensor* block_mapping, void* stream,
                                                graphattn_cache_t cache) noexcept {
  return guard([&] {
    if (num_caches > 0 && !caches) graphattn::capi::invalid("caches is NULL");
    std::vector<TensorView> views;
    for (size_t i = 0; i < num_caches; ++i)
      views.push_back(graphattn::capi::block_cache_of(
          caches[i], ("caches[" + std::to_string(i) + "]").c_str(), false));
    const TensorView mapping = view_of(block_mapping, "block_mapping");
    graphattn::copy_blocks_device(views, mapping, static_cast<CUstream>(stream),
                                  graphattn::capi::cache_of(cache));
  });
}

}  // extern "C"
