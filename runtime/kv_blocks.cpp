// SPDX-License-Identifier: Apache-2.0
// swap_blocks and copy_blocks: whole blocks of paged caches copied by the driver's memcpy, one
// copy per (cache, pair), after every view and pair has been checked.
#include "graphattn/kv_blocks.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/require.hpp"
#include "core/text.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "runtime/module_cache.hpp"
#include "templates/params.h"

namespace graphattn {
namespace {

using detail::str;

// A checked [num_blocks, ...] cache: where block 0 starts, the distance between blocks and the
// bytes of one block.
struct BlockCache {
  const char* data = nullptr;
  int64_t num_blocks = 0;
  int64_t block_stride_bytes = 0;
  int64_t block_bytes = 0;
};

BlockCache check_block_cache(const TensorView& t, const std::string& name) {
  GA_REQUIRE(t.data != nullptr, name + " is null");
  GA_REQUIRE(t.ndim >= 2 && t.ndim <= kMaxDims,
             name + " " + t.describe() +
                 " is not supported; supported: [num_blocks, ...] with at least one dim per block");
  GA_REQUIRE(t.shape[0] >= 1, name + " " + t.describe() + " holds no block");
  // The block's dims, by increasing stride, must tile one compact region.
  std::vector<int> order;
  for (int d = 1; d < t.ndim; ++d) order.push_back(d);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  int64_t expect = 1;
  for (int d : order) {
    GA_REQUIRE(t.shape[d] >= 1, name + " " + t.describe() + " has an empty dim " + str(d));
    GA_REQUIRE(t.shape[d] == 1 || t.strides[d] == expect,
               name + " " + t.describe() +
                   " is not supported: each block must be one compact region (its dims after "
                   "the first, in some order, contiguous)");
    expect *= t.shape[d];
  }
  GA_REQUIRE(t.strides[0] >= expect,
             name + " " + t.describe() + " has blocks " + str(t.strides[0]) +
                 " elements apart, closer than a block's " + str(expect) + " elements");
  const int64_t elem = scalar_bytes(t.dtype);
  return {static_cast<const char*>(t.data), t.shape[0], t.strides[0] * elem, expect * elem};
}

// The same element type, block shape and order in memory (the dims after the first): bytes
// copied from one block must mean the same in the other.
void require_same_blocks(const TensorView& a, const TensorView& b, const std::string& a_name,
                         const std::string& b_name) {
  bool same = a.dtype == b.dtype && a.ndim == b.ndim;
  for (int d = 1; same && d < a.ndim; ++d)
    same = a.shape[d] == b.shape[d] && (a.shape[d] == 1 || a.strides[d] == b.strides[d]);
  GA_REQUIRE(same, a_name + " " + a.describe() + " and " + b_name + " " + b.describe() +
                       " must have one dtype and one block layout (the dims after the first, "
                       "their sizes and strides)");
}

void require_pairs(const std::vector<BlockPair>& mapping, int64_t src_blocks, int64_t dst_blocks,
                   const std::string& where) {
  for (size_t i = 0; i < mapping.size(); ++i) {
    const BlockPair& p = mapping[i];
    GA_REQUIRE(p.src >= 0 && p.src < src_blocks && p.dst >= 0 && p.dst < dst_blocks,
               where + ": block mapping pair " + str(static_cast<int64_t>(i)) + " (" + str(p.src) +
                   " -> " + str(p.dst) + ") is out of range; allowed: source blocks 0.." +
                   str(src_blocks - 1) + ", destination blocks 0.." + str(dst_blocks - 1));
  }
}

CUdeviceptr address(const BlockCache& c, int64_t block) {
  return reinterpret_cast<CUdeviceptr>(c.data + block * c.block_stride_bytes);
}

}  // namespace

TensorView kv_cache_half(const TensorView& kv_cache, int which) {
  GA_REQUIRE(kv_cache.ndim >= 2 && kv_cache.shape[0] == 2,
             "kv_cache " + kv_cache.describe() + " is not a [2, num_blocks, ...] KV cache");
  GA_REQUIRE(which == 0 || which == 1,
             "kv_cache_half: which " + str(which) + " is not allowed; 0 (keys) or 1 (values)");
  TensorView out;
  out.dtype = kv_cache.dtype;
  out.ndim = kv_cache.ndim - 1;
  out.data = static_cast<char*>(kv_cache.data) +
             which * kv_cache.strides[0] * scalar_bytes(kv_cache.dtype);
  for (int d = 1; d < kv_cache.ndim; ++d) {
    out.shape[d - 1] = kv_cache.shape[d];
    out.strides[d - 1] = kv_cache.strides[d];
  }
  return out;
}

void swap_blocks(const TensorView& src, const TensorView& dst,
                 const std::vector<BlockPair>& mapping, CUstream stream) {
  const BlockCache s = check_block_cache(src, "swap_blocks: src");
  const BlockCache d = check_block_cache(dst, "swap_blocks: dst");
  require_same_blocks(src, dst, "swap_blocks: src", "dst");
  require_pairs(mapping, s.num_blocks, d.num_blocks, "swap_blocks");
  const auto& drv = detail::driver();
  for (const BlockPair& p : mapping)
    GA_CU_CHECK(drv.cuMemcpyAsync(address(d, p.dst), address(s, p.src),
                                  static_cast<size_t>(s.block_bytes), stream));
}

void copy_blocks(const std::vector<TensorView>& caches, const std::vector<BlockPair>& mapping,
                 CUstream stream) {
  std::vector<BlockCache> checked;
  for (size_t i = 0; i < caches.size(); ++i) {
    const std::string name = "copy_blocks: caches[" + std::to_string(i) + "]";
    checked.push_back(check_block_cache(caches[i], name));
    require_pairs(mapping, checked.back().num_blocks, checked.back().num_blocks, name);
  }
  const auto& drv = detail::driver();
  for (const BlockCache& c : checked)
    for (const BlockPair& p : mapping)
      if (p.src != p.dst)
        GA_CU_CHECK(drv.cuMemcpyDtoDAsync(address(c, p.dst), address(c, p.src),
                                          static_cast<size_t>(c.block_bytes), stream));
}

void copy_blocks_device(const std::vector<TensorView>& caches, const TensorView& block_mapping,
                        CUstream stream, KernelCache& cache) {
  detail::require_rank(block_mapping, 2, "copy_blocks: block_mapping", "[num_pairs, 2]");
  GA_REQUIRE(block_mapping.dtype == ScalarType::kInt64 && block_mapping.shape[1] == 2 &&
                 block_mapping.shape[0] <= INT_MAX,
             "copy_blocks: block_mapping " + block_mapping.describe() +
                 " is not supported; supported: int64 [num_pairs, 2] (src, dst), num_pairs < 2^31");
  GA_REQUIRE(reinterpret_cast<uintptr_t>(block_mapping.data) % alignof(int64_t) == 0,
             "copy_blocks: block_mapping " + block_mapping.describe() + " is not 8-byte aligned");
  std::vector<BlockCache> checked;
  for (size_t i = 0; i < caches.size(); ++i)
    checked.push_back(check_block_cache(caches[i], "copy_blocks: caches[" + str(i) + "]"));
  AttentionLayerConfig c;
  c.arch = current_device_arch();
  const AttentionSpec spec = spec_for(c, KernelKind::kBlockCopy);
  spec.validate();
  const detail::LoadedKernel& k = detail::load_kernel(spec, cache, stream);
  const int64_t pairs = block_mapping.shape[0];
  if (pairs == 0) return;
  BlockCopyParams p{};
  p.mapping = static_cast<const long long*>(block_mapping.data);
  p.mapping_row_stride = block_mapping.strides[0];
  p.mapping_column_stride = block_mapping.strides[1];
  for (size_t first = 0; first < checked.size(); first += GA_BLOCK_COPY_MAX_CACHES) {
    const size_t n = std::min<size_t>(GA_BLOCK_COPY_MAX_CACHES, checked.size() - first);
    for (size_t i = 0; i < n; ++i) {
      const BlockCache& b = checked[first + i];
      p.caches[i] = {const_cast<char*>(b.data), b.block_stride_bytes, b.block_bytes, b.num_blocks};
    }
    p.num_caches = static_cast<int>(n);
    detail::LaunchShape s;
    s.grid_x = static_cast<unsigned>(pairs);
    s.grid_y = static_cast<unsigned>(n);
    s.block_x = GA_BLOCK_COPY_THREADS;
    detail::launch(k, s, stream, p);
  }
}

}  // namespace graphattn
