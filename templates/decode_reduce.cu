// Combines split-KV decode partials: for request r and query head h with n > 1 splits,
//   out = sum_s 2^(lse_s - LSE) * o_s,   LSE = log2(sum_s 2^lse_s),
// where o_s is split s's normalized output and lse_s the log2 of its softmax denominator (the
// scores are in the log2 domain). One thread block per (head, request); each thread owns 4
// consecutive dimensions. Requests with one split were written by the decode kernel itself, and
// padded rows (seq_len 0) hold zeros already: their blocks exit at once.
// Depends only on HEAD_SIZE and IS_BF16 (the spec's other fields are canonical).

extern "C" __global__ void __launch_bounds__(ga_decode_reduce_threads(HEAD_SIZE))
    graphattn_decode_reduce(const __grid_constant__ DecodeReduceParams p) {
  ga_grid_dependency_sync();
  const int head = blockIdx.x;
  const int req = blockIdx.y;
  const int n = p.num_splits[req];
  if (n <= 1) return;
  const long long row0 = (static_cast<long long>(req) * p.num_heads + head) * p.max_splits;
  const float* lse = p.partial_lse + row0;
  float mx = lse[0];
  for (int s = 1; s < n; ++s) mx = fmaxf(mx, lse[s]);
  float total = 0.0f;
  for (int s = 0; s < n; ++s) total += exp2f(lse[s] - mx);
  const float inv_total = 1.0f / total;

  const int d = threadIdx.x * 4;
  if (d >= HEAD_SIZE) return;
  const float* part = p.partial_out + row0 * HEAD_SIZE + d;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  int s = 0;
  // Four splits per step keeps several loads in flight.
  for (; s + 4 <= n; s += 4) {
    float4 x[4];
    float w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[k] = *reinterpret_cast<const float4*>(part + (s + k) * HEAD_SIZE);
      w[k] = exp2f(lse[s + k] - mx);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      acc.x += w[k] * x[k].x;
      acc.y += w[k] * x[k].y;
      acc.z += w[k] * x[k].z;
      acc.w += w[k] * x[k].w;
    }
  }
  for (; s < n; ++s) {
    const float4 x = *reinterpret_cast<const float4*>(part + s * HEAD_SIZE);
    const float w = exp2f(lse[s] - mx);
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  }
  const unsigned lo = ga_from_float(acc.x * inv_total) |
                      (static_cast<unsigned>(ga_from_float(acc.y * inv_total)) << 16);
  const unsigned hi = ga_from_float(acc.z * inv_total) |
                      (static_cast<unsigned>(ga_from_float(acc.w * inv_total)) << 16);
  ga_u16* out = static_cast<ga_u16*>(p.output) + req * p.output_token_stride +
                head * p.output_head_stride + d;
  *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
}
