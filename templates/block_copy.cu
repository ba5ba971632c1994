// SPDX-License-Identifier: Apache-2.0
// copy_blocks with a device block mapping: BlockCopyParams in params.h. Block (pair, cache)
// copies one KV block of one cache in 16-byte vectors where the cache's addresses allow it,
// else in bytes.

extern "C" __global__ void __launch_bounds__(GA_BLOCK_COPY_THREADS)
    graphattn_block_copy(const __grid_constant__ BlockCopyParams p) {
  ga_grid_dependency_sync();
  const GaBlockCopyCache& c = p.caches[blockIdx.y];
  const long long* pair = p.mapping + blockIdx.x * p.mapping_row_stride;
  const long long src = pair[0];
  const long long dst = pair[p.mapping_column_stride];
  if (src == dst || src < 0 || dst < 0 || src >= c.num_blocks || dst >= c.num_blocks) return;
  const char* from = c.data + src * c.block_stride;
  char* to = c.data + dst * c.block_stride;
  const bool vectors =
      ((reinterpret_cast<unsigned long long>(c.data) | c.block_stride | c.block_bytes) & 15) == 0;
  if (vectors) {
    const long long n = c.block_bytes / 16;
    for (long long i = threadIdx.x; i < n; i += blockDim.x)
      reinterpret_cast<uint4*>(to)[i] = reinterpret_cast<const uint4*>(from)[i];
  } else {
    for (long long i = threadIdx.x; i < c.block_bytes; i += blockDim.x) to[i] = from[i];
  }
}
