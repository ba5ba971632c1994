// Cache write (vLLM's reshape_and_cache_flash, and reshape_and_cache for the legacy
// PagedAttention layout): token t's key and value go to slot slot_mapping[t] = block *
// BLOCK_SIZE + offset of the paged cache; a negative slot (padding) writes nothing. One thread
// block per token; each thread moves 8 elements (16 bytes read).

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
  constexpr int VEC = 8;
  constexpr int VECS_PER_HEAD = HEAD_SIZE / VEC;
  const int total = p.num_kv_heads * VECS_PER_HEAD;
  const ga_u16* key = static_cast<const ga_u16*>(p.key) + token * p.key_token_stride;
  const ga_u16* value = static_cast<const ga_u16*>(p.value) + token * p.value_token_stride;
  const long long base = block * p.cache_block_stride + offset * p.cache_token_stride;
  const float k_scale = ga_kv_scale(p.scales.k_scale_ptr, p.k_scale);
  const float v_scale = ga_kv_scale(p.scales.v_scale_ptr, p.v_scale);
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int head = i / VECS_PER_HEAD;
    const int d = (i - head * VECS_PER_HEAD) * VEC;
    const uint4 k = *reinterpret_cast<const uint4*>(key + head * p.key_head_stride + d);
    const uint4 v = *reinterpret_cast<const uint4*>(value + head * p.value_head_stride + d);
    // Destinations, in elements. Flash layout: the row at the slot, head dim contiguous. Legacy
    // (KV_LAYOUT 2, compact caches): key [block, head, d / X, offset, d % X] with X = 16 bytes
    // of elements, so the 8 elements stay contiguous (d is a multiple of 8, X of 8); value
    // [block, head, d, offset], one element every BLOCK_SIZE.
    constexpr int X = KV_FP8 == 0 ? 8 : 16;
    const long long legacy_head =
        (block * p.num_kv_heads + head) * static_cast<long long>(HEAD_SIZE) * BLOCK_SIZE;
    const long long kdst = KV_LAYOUT == 2
                               ? legacy_head + (d / X) * (BLOCK_SIZE * X) + offset * X + d % X
                               : base + head * p.cache_head_stride + d;
    const long long vdst =
        KV_LAYOUT == 2 ? legacy_head + static_cast<long long>(d) * BLOCK_SIZE + offset : kdst;
    if (KV_FP8 == 0) {
      *reinterpret_cast<uint4*>(static_cast<ga_u16*>(p.key_cache) + kdst) = k;
      if (KV_LAYOUT == 2) {
        const ga_u16* vh = reinterpret_cast<const ga_u16*>(&v);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          static_cast<ga_u16*>(p.value_cache)[vdst + j * BLOCK_SIZE] = vh[j];
      } else {
        *reinterpret_cast<uint4*>(static_cast<ga_u16*>(p.value_cache) + vdst) = v;
      }
    } else {
      const ga_u16* kh = reinterpret_cast<const ga_u16*>(&k);
      const ga_u16* vh = reinterpret_cast<const ga_u16*>(&v);
      __align__(8) ga_u8 kq[VEC];
      __align__(8) ga_u8 vq[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        kq[j] = ga_f32_to_kv_fp8(ga_to_float(kh[j]) / k_scale);
        vq[j] = ga_f32_to_kv_fp8(ga_to_float(vh[j]) / v_scale);
      }
      *reinterpret_cast<uint2*>(static_cast<ga_u8*>(p.key_cache) + kdst) =
          *reinterpret_cast<const uint2*>(kq);
      if (KV_LAYOUT == 2) {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          static_cast<ga_u8*>(p.value_cache)[vdst + j * BLOCK_SIZE] = vq[j];
      } else {
        *reinterpret_cast<uint2*>(static_cast<ga_u8*>(p.value_cache) + vdst) =
            *reinterpret_cast<const uint2*>(vq);
      }
    }
  }
}
