// SPDX-License-Identifier: Apache-2.0
// Cache write (vLLM's reshape_and_cache_flash, and reshape_and_cache for the legacy
// PagedAttention layout): token t's key and value go to slot slot_mapping[t] = block *
// BLOCK_SIZE + offset of the paged cache; a negative slot (padding) writes nothing. One thread
// block per token; each thread moves one 16-byte vector of the key and of the value (8 fp16 or
// bf16 elements, 4 fp32: spec dtype fp32, IS_BF16 == 2). Legacy value caches are
// [block, head, d, offset], or with "_iv" vLLM's interleaved [block, head, offset / kx, d,
// offset % kx].

// The key and value element type: 16-bit storage (fp16 / bf16), or fp32 bits.
template <bool F32>
struct GaCacheWriteElem {
  typedef ga_u16 type;
};
template <>
struct GaCacheWriteElem<true> {
  typedef unsigned type;
};
constexpr bool CW_F32 = IS_BF16 == 2;
typedef GaCacheWriteElem<CW_F32>::type cw_elem;
__device__ __forceinline__ float ga_cw_to_float(cw_elem e) {
  if constexpr (CW_F32) {
    return __uint_as_float(e);
  } else {
    return ga_to_float(e);
  }
}

extern "C" __global__ void __launch_bounds__(256)
    graphattn_cache_write(const __grid_constant__ CacheWriteParams p) {
  ga_grid_dependency_sync();
  const int token = blockIdx.x;
  const long long slot = p.slot_mapping[token];
#ifdef GA_CHECK_BOUNDS
  if (slot >= p.num_slots && threadIdx.x == 0) ga_report_bounds(p.bounds, 2, -1, token, slot);
#endif
  if (slot < 0 || slot >= p.num_slots) return;
  const long long block = slot / BLOCK_SIZE;
  const long long offset = slot % BLOCK_SIZE;
  constexpr int VEC = 16 / sizeof(cw_elem);
  constexpr int VECS_PER_HEAD = HEAD_SIZE / VEC;
  const int total = p.num_kv_heads * VECS_PER_HEAD;
  const cw_elem* key = static_cast<const cw_elem*>(p.key) + token * p.key_token_stride;
  const cw_elem* value = static_cast<const cw_elem*>(p.value) + token * p.value_token_stride;
  const long long base = block * p.cache_block_stride + offset * p.cache_token_stride;
  const float k_scale = ga_kv_scale(p.scales.k_scale_ptr, p.k_scale);
  const float v_scale = ga_kv_scale(p.scales.v_scale_ptr, p.v_scale);
  // Legacy key cache: chunks of x elements, x a power of two and a multiple of VEC (the host
  // checks both), read from the cache's shape.
  const long long x = p.legacy_x;
  const int x_shift = KV_LAYOUT == 2 ? __ffs(p.legacy_x) - 1 : 0;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int head = i / VECS_PER_HEAD;
    const int d = (i - head * VECS_PER_HEAD) * VEC;
    const uint4 k = *reinterpret_cast<const uint4*>(key + head * p.key_head_stride + d);
    const uint4 v = *reinterpret_cast<const uint4*>(value + head * p.value_head_stride + d);
    // Destinations, in cache elements. Flash layout: the row at the slot, head dim contiguous.
    // Legacy (KV_LAYOUT 2, compact caches): key [block, head, d / x, offset, d % x], so the VEC
    // elements stay contiguous; value [block, head, d, offset], one element every BLOCK_SIZE.
    const long long legacy_head =
        (block * p.num_kv_heads + head) * static_cast<long long>(HEAD_SIZE) * BLOCK_SIZE;
    const long long kdst = KV_LAYOUT == 2 ? legacy_head + (d >> x_shift) * (BLOCK_SIZE * x) +
                                                offset * x + (d & (x - 1))
                                          : base + head * p.cache_head_stride + d;
#ifdef GA_INTERLEAVED_V
    // vLLM's interleaved V (spec "_iv"): [block, head, offset / kx, d, offset % kx] with kx = 16
    // bytes of cache elements, so element j of the vector lands V_STEP = kx further on.
    constexpr int KX = 16 / (KV_FP8 != 0 ? 1 : static_cast<int>(sizeof(cw_elem)));
    constexpr int V_STEP = KX;
    const long long vdst = legacy_head + (offset / KX) * (static_cast<long long>(HEAD_SIZE) * KX) +
                           static_cast<long long>(d) * KX + offset % KX;
#else
    constexpr int V_STEP = BLOCK_SIZE;
    const long long vdst =
        KV_LAYOUT == 2 ? legacy_head + static_cast<long long>(d) * BLOCK_SIZE + offset : kdst;
#endif
    if (KV_FP8 == 0) {
      *reinterpret_cast<uint4*>(static_cast<cw_elem*>(p.key_cache) + kdst) = k;
      if (KV_LAYOUT == 2) {
        const cw_elem* vh = reinterpret_cast<const cw_elem*>(&v);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          static_cast<cw_elem*>(p.value_cache)[vdst + j * V_STEP] = vh[j];
      } else {
        *reinterpret_cast<uint4*>(static_cast<cw_elem*>(p.value_cache) + vdst) = v;
      }
    } else {
      const cw_elem* kh = reinterpret_cast<const cw_elem*>(&k);
      const cw_elem* vh = reinterpret_cast<const cw_elem*>(&v);
      __align__(8) ga_u8 kq[VEC];
      __align__(8) ga_u8 vq[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        kq[j] = ga_f32_to_kv_fp8(ga_cw_to_float(kh[j]) / k_scale);
        vq[j] = ga_f32_to_kv_fp8(ga_cw_to_float(vh[j]) / v_scale);
      }
      ga_u8* kc = static_cast<ga_u8*>(p.key_cache) + kdst;
      if constexpr (VEC == 8) {
        *reinterpret_cast<uint2*>(kc) = *reinterpret_cast<const uint2*>(kq);
      } else {
        *reinterpret_cast<unsigned*>(kc) = *reinterpret_cast<const unsigned*>(kq);
      }
      if (KV_LAYOUT == 2) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) static_cast<ga_u8*>(p.value_cache)[vdst + j * V_STEP] = vq[j];
      } else if constexpr (VEC == 8) {
        *reinterpret_cast<uint2*>(static_cast<ga_u8*>(p.value_cache) + vdst) =
            *reinterpret_cast<const uint2*>(vq);
      } else {
        *reinterpret_cast<unsigned*>(static_cast<ga_u8*>(p.value_cache) + vdst) =
            *reinterpret_cast<const unsigned*>(vq);
      }
    }
  }
}
