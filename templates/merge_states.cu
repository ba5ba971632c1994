// SPDX-License-Identifier: Apache-2.0
// merge_attn_states: MergeStatesParams in params.h has the formula and the infinite-LSE rules.
// Spec dtype (IS_BF16: 0 fp16, 1 bf16, 2 fp32) is the element type of the three outputs; the
// arithmetic is fp32 with expf / logf (no approximate intrinsics), one rounding at the store.

constexpr bool MS_F32 = IS_BF16 == 2;
constexpr int MS_BYTES = MS_F32 ? 4 : 2;  // bytes of one element
constexpr int MS_VEC = 16 / MS_BYTES;     // elements per 16-byte vector

__device__ __forceinline__ bool ga_ms_isinf(float v) {
  return (__float_as_uint(v) & 0x7fffffffu) == 0x7f800000u;
}

__device__ __forceinline__ float ga_ms_lse(const float* lse, long long head_stride,
                                           long long token_stride, int head, long long token) {
  const float v = lse[head * head_stride + token * token_stride];
  return ga_ms_isinf(v) ? __int_as_float(0xff800000) : v;
}

__device__ __forceinline__ void ga_ms_unpack(const uint4& u, float (&f)[MS_VEC]) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (MS_F32) {
      f[i] = __uint_as_float(w[i]);
    } else {
      f[2 * i] = ga_to_float(static_cast<ga_u16>(w[i] & 0xffffu));
      f[2 * i + 1] = ga_to_float(static_cast<ga_u16>(w[i] >> 16));
    }
  }
}

__device__ __forceinline__ uint4 ga_ms_pack(const float (&f)[MS_VEC]) {
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (MS_F32) {
      w[i] = __float_as_uint(f[i]);
    } else {
      w[i] = ga_pack2(f[2 * i], f[2 * i + 1]);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

extern "C" __global__ void __launch_bounds__(GA_MERGE_THREADS)
    graphattn_merge_states(const __grid_constant__ MergeStatesParams p) {
  ga_grid_dependency_sync();
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
       i < p.num_vectors; i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = i / p.vectors_per_head;  // token * num_heads + head
    const int vec = static_cast<int>(i - row * p.vectors_per_head);
    const long long token = row / p.num_heads;
    const int head = static_cast<int>(row - token * p.num_heads);
    const int d = vec * MS_VEC;
    const float p_lse =
        ga_ms_lse(p.prefix_lse, p.prefix_lse_head_stride, p.prefix_lse_token_stride, head, token);
    const float s_lse =
        ga_ms_lse(p.suffix_lse, p.suffix_lse_head_stride, p.suffix_lse_token_stride, head, token);
    const float m = fmaxf(p_lse, s_lse);
    const uint4 po = *reinterpret_cast<const uint4*>(
        static_cast<const char*>(p.prefix_output) +
        (token * p.prefix_token_stride + head * p.prefix_head_stride + d) * MS_BYTES);
    uint4* out = reinterpret_cast<uint4*>(
        static_cast<char*>(p.output) +
        (token * p.output_token_stride + head * p.output_head_stride + d) * MS_BYTES);
    float* out_lse =
        p.output_lse != nullptr && vec == 0
            ? p.output_lse + head * p.output_lse_head_stride + token * p.output_lse_token_stride
            : nullptr;
    if (ga_ms_isinf(m)) {  // both sides empty
      *out = po;
      if (out_lse) *out_lse = m;
      continue;
    }
    const uint4 so = *reinterpret_cast<const uint4*>(
        static_cast<const char*>(p.suffix_output) +
        (token * p.suffix_token_stride + head * p.suffix_head_stride + d) * MS_BYTES);
    const float p_se = expf(p_lse - m);
    const float s_se = expf(s_lse - m);
    const float sum = p_se + s_se;
    const float p_w = p_se / sum;
    const float s_w = s_se / sum;
    float a[MS_VEC], b[MS_VEC];
    ga_ms_unpack(po, a);
    ga_ms_unpack(so, b);
#pragma unroll
    for (int j = 0; j < MS_VEC; ++j) a[j] = a[j] * p_w + b[j] * s_w;
    *out = ga_ms_pack(a);
    if (out_lse) *out_lse = logf(sum) + m;
  }
}
