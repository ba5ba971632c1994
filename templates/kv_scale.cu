// SPDX-License-Identifier: Apache-2.0
// calc_kv_scales (vLLM's Attention.calc_kv_scales, on the device): the largest |key| and |value|
// of a batch's new tokens, divided by the caller's divisors, raised into two fp32 device
// scalars with an atomic max (KvScaleParams in params.h says why that is exact). Only rows
// [0, num_tokens) are read: padded rows past them never count.
//
// |x| of an fp16 or bf16 value is its bits without the sign, and such bit patterns order as the
// values do (NaN above infinity), so the reduction runs on 16-bit integers and converts once.

extern "C" __global__ void __launch_bounds__(GA_KV_SCALE_THREADS)
    graphattn_kv_scale(const __grid_constant__ KvScaleParams p) {
  ga_grid_dependency_sync();
  const bool values = blockIdx.y != 0;
  const ga_u16* src = static_cast<const ga_u16*>(values ? p.value : p.key);
  const long long token_stride = values ? p.value_token_stride : p.key_token_stride;
  const long long head_stride = values ? p.value_head_stride : p.key_head_stride;
  constexpr int VEC = 8;  // elements per 16-byte load
  constexpr int VECS_PER_HEAD = HEAD_SIZE / VEC;
  const long long vecs_per_token = static_cast<long long>(p.num_kv_heads) * VECS_PER_HEAD;
  const long long total = vecs_per_token * p.num_tokens;
  unsigned amax = 0;  // |x| bits, in the low 16 bits
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long token = i / vecs_per_token;
    const int rest = static_cast<int>(i - token * vecs_per_token);
    const int head = rest / VECS_PER_HEAD;
    const int d = (rest - head * VECS_PER_HEAD) * VEC;
    const uint4 x =
        *reinterpret_cast<const uint4*>(src + token * token_stride + head * head_stride + d);
    const unsigned w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      amax = max(amax, w[j] & 0x7fffu);
      amax = max(amax, (w[j] >> 16) & 0x7fffu);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  __shared__ unsigned warp_max[GA_KV_SCALE_THREADS / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) warp_max[warp] = amax;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) amax = max(amax, warp_max[w]);
  const float scale = ga_to_float(static_cast<ga_u16>(amax)) / (values ? p.v_divisor : p.k_divisor);
  atomicMax(reinterpret_cast<unsigned*>(values ? p.v_scale_out : p.k_scale_out),
            __float_as_uint(scale));
}
