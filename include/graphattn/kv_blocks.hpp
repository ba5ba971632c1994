// SPDX-License-Identifier: Apache-2.0
// Whole-block copies of paged KV caches (vLLM's swap_blocks and copy_blocks): swapping a
// preempted request's blocks out to host memory and back, and copy-on-write of shared blocks
// across every layer. They copy bytes, whatever the cache holds, so they serve the flash layout
// (NHD or HND pages) and separate key or value caches alike.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "graphattn/export.h"
#include "graphattn/jit.hpp"
#include "graphattn/tensor.hpp"

namespace graphattn {

// One entry of a block mapping: block `src` of the source cache goes to block `dst`.
struct BlockPair {
  int64_t src = 0;
  int64_t dst = 0;
};

// Half `which` (0: keys, 1: values) of a flash-layout KV cache [2, num_blocks, ...]: the
// [num_blocks, ...] view that swap_blocks and copy_blocks take. Throws graphattn::Error for a
// view whose first dim is not 2, or a `which` other than 0 and 1.
GRAPHATTN_API TensorView kv_cache_half(const TensorView& kv_cache, int which);

// vLLM's swap_blocks: for each pair in order, block pair.dst of `dst` := block pair.src of `src`.
//   src, dst: [num_blocks, ...] caches of one dtype and one block layout (the sizes and strides
//             of dims 1..), each block one compact region of memory (its dims in any stride
//             order, e.g. NHD or HND pages); either may live in host memory (pinned memory keeps
//             the copy asynchronous; pageable memory makes it synchronous, and cannot be captured).
//             The two may have different block counts.
//   mapping:  pairs with src in [0, src blocks) and dst in [0, dst blocks)
// One cuMemcpyAsync per pair on `stream`; allocates nothing and compiles nothing. Every argument
// is checked before the first copy (graphattn::Error naming the bad pair or view).
GRAPHATTN_API void swap_blocks(const TensorView& src, const TensorView& dst,
                               const std::vector<BlockPair>& mapping, CUstream stream);

// vLLM's copy_blocks (copy-on-write): in every cache of `caches` (device memory; e.g. every
// layer's key and value halves), for each pair in order, block pair.dst := block pair.src.
//   caches:  [num_blocks, ...] views as swap_blocks takes them; they may differ in shape and
//            dtype (layers of several KV cache groups)
//   mapping: pairs in range of every cache; a pair with src == dst copies nothing
// Device-to-device copies on `stream` (capturable); checks everything first.
GRAPHATTN_API void copy_blocks(const std::vector<TensorView>& caches,
                               const std::vector<BlockPair>& mapping, CUstream stream);

// vLLM's copy_blocks as vLLM calls it, with the mapping in device memory (a name of its own: an
// overload would make copy_blocks(caches, {}, stream) ambiguous): one kernel (spec
// block_copy_..._smXX) reads the pairs on the device and copies every pair's block in every
// cache, all caches in one launch (GA_BLOCK_COPY_MAX_CACHES = 256 a launch; more take one launch
// per 256). No host sync, no allocation and nothing written by the host: the caches' addresses
// ride in the launch's parameters, so each captured graph keeps its own cache list and replays
// read the mapping's current contents. Capturable once the kernel is loaded (the first call,
// eager, compiles and loads it through `cache`).
//   caches:        as the host-mapping overload takes them
//   block_mapping: int64 [num_pairs, 2] (src, dst) in device memory, any strides (8-byte
//                  aligned); its contents are not checked on the host: a pair with a block
//                  outside a cache's [0, num_blocks), e.g. a -1 row padding a captured mapping,
//                  or with src == dst copies nothing in that cache
// The pairs run in parallel, as in vLLM's kernel: no block may be the destination of two pairs,
// or the destination of one and the source of another.
GRAPHATTN_API void copy_blocks_device(const std::vector<TensorView>& caches,
                                      const TensorView& block_mapping, CUstream stream,
                                      KernelCache& cache = default_kernel_cache());

}  // namespace graphattn
