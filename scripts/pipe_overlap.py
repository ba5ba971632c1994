#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Do Hopper's tensor cores (wgmma) and its special-function pipe (MUFU.EX2) run at the same time?

A GPU-only measurement (sm_90, CuPy compiles the kernel with NVRTC): one block of two warpgroups per
multiprocessor, for as many blocks as multiprocessors. Warpgroup 0 issues wgmma m64n128k32 (e4m3, or
m64n128k16 bf16 with --bf16) from shared memory back to back (operands zero, accumulators in
registers); warpgroup 1 issues ex2.approx on 16 independent registers a thread. Each mode is timed
alone and together:

  tensor   warpgroup 0's wgmma loop alone
  mufu     warpgroup 1's exponential loop alone
  both     the two loops at once, in their own warpgroups (as a softmax warpgroup beside a GEMM one)
  same     warpgroup 0 alone: each wgmma batch issued, then the same number of exponentials as
           `mufu` does for that batch in the same warps, then the wait (FlashAttention-3's overlap
           inside a warpgroup)

If the pipes overlap, `both` takes about the longer of `tensor` and `mufu`; if they exclude each
other, about their sum. The loop counts are set so that `tensor` and `mufu` take about as long
(--ratio scales the exponentials). Prints the median of --reps launches of each, in microseconds,
and the ratios.

Usage: python3 scripts/pipe_overlap.py [--bf16] [--rs] [--iters 4000] [--ratio 1.0] [--reps 7]
"""
import argparse
import statistics
import sys

KERNEL = r"""
// exp_iters rounds of ex2.approx on 16 independent registers, each result less 1.5 (bounded)
__device__ __forceinline__ void exp_rounds(float (&x)[16], int exp_iters) {
  for (int e = 0; e < exp_iters; ++e) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float y;
      asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x[j]));
      x[j] = y - 1.5f;
    }
  }
}
extern "C" __global__ void __launch_bounds__(256, 1)
pipe_overlap(int mode, int iters, int exp_iters, float* out) {
  __shared__ __align__(1024) unsigned char smem[16384];
  for (int i = threadIdx.x; i < 16384 / 4; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = 0u;
  __syncthreads();
  const int wg = threadIdx.x / 128;
  // mode 0 tensor alone, 1 mufu alone, 2 both (own warpgroups), 3 same (warpgroup 0 does both)
  const bool do_tensor = wg == 0 && mode != 1;
  const bool do_mufu = (wg == 1 && (mode == 1 || mode == 2)) || (wg == 0 && mode == 3);
  float acc = 0.f;
  if (do_tensor) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const unsigned b = a + 8192;
    // K-major operands without swizzle: leading offset 128 bytes, stride 256 bytes (in range of
    // the 8 KiB each; the values are zero, only the timing matters).
    auto desc = [](unsigned addr) {
      return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
             (static_cast<unsigned long long>(128 >> 4) << 16) |
             (static_cast<unsigned long long>(256 >> 4) << 32);
    };
    const unsigned long long da = desc(a), db = desc(b);
    const unsigned ra0 = 0u, ra1 = 0u, ra2 = 0u, ra3 = 0u;  // A from registers (--rs)
    (void)ra0, (void)ra1, (void)ra2, (void)ra3;
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.f;
    float x[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) x[j] = 0.001f * (threadIdx.x + j);
    for (int it = 0; it < iters; ++it) {
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        asm volatile(WGMMA_ASM
                     : WGMMA_OUTS
                     : WGMMA_INS);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      if (mode == 3) exp_rounds(x, exp_iters);
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += d[i];
#pragma unroll
    for (int j = 0; j < 16; ++j) acc += x[j];
  } else if (do_mufu) {
    float x[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) x[j] = 0.001f * (threadIdx.x + j);
    for (int it = 0; it < iters; ++it) exp_rounds(x, exp_iters);
#pragma unroll
    for (int j = 0; j < 16; ++j) acc += x[j];
  }
  if (acc == 12345.f) out[blockIdx.x * blockDim.x + threadIdx.x] = acc;  // keeps the loops alive
}
"""


def kernel_source(bf16, rs):
    """The kernel with its wgmma: bf16 (k16) or e4m3 (k32); A from shared memory, or from
    registers with rs (as P V takes P)."""
    shape = "m64n128k16.f32.bf16.bf16" if bf16 else "m64n128k32.f32.e4m3.e4m3"
    regs = ", ".join(f"%{i}" for i in range(64))
    if rs:  # A: 4 registers a thread; after scale-d: imm-scale-a/b (, imm-trans-b for bf16)
        tail = "1, 1, 0" if bf16 else "1, 1"
        operands, pred, ins = "{%64, %65, %66, %67}, %68", 69, \
            '"r"(ra0), "r"(ra1), "r"(ra2), "r"(ra3), "l"(db), "r"(1)'
    else:  # after scale-d: imm-scale-a/b (, imm-trans-a/b for bf16)
        tail = "1, 1, 0, 0" if bf16 else "1, 1"
        operands, pred, ins = "%64, %65", 66, '"l"(da), "l"(db), "r"(1)'
    asm = (f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pred}, 0;\\n"'
           f'"wgmma.mma_async.sync.aligned.{shape} {{{regs}}}, {operands}, p, {tail};\\n}}\\n"')
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(64))
    return KERNEL.replace("WGMMA_ASM", asm).replace("WGMMA_OUTS", outs).replace("WGMMA_INS", ins)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bf16", action="store_true", help="bf16 wgmma (k16) instead of e4m3 (k32)")
    ap.add_argument("--rs", action="store_true", help="A from registers (as P V), not shared memory")
    ap.add_argument("--iters", type=int, default=4000)
    ap.add_argument("--ratio", type=float, default=1.0,
                    help="exponential work relative to the calibrated equal-time amount")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    import cupy as cp
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    if props["major"] != 9:
        print(f"pipe_overlap: needs sm_90 (wgmma); this GPU is sm_{props['major']}{props['minor']}",
              file=sys.stderr)
        return 1
    sms = props["multiProcessorCount"]
    mod = cp.RawModule(code=kernel_source(a.bf16, a.rs), options=("--gpu-architecture=sm_90a", "-std=c++17"))
    fn = mod.get_function("pipe_overlap")
    out = cp.zeros(sms * 256, dtype=cp.float32)

    def timed(mode, exp_iters):
        args = (cp.int32(mode), cp.int32(a.iters), cp.int32(exp_iters), out)
        fn((sms,), (256,), args)  # warm-up
        cp.cuda.runtime.deviceSynchronize()
        times = []
        for _ in range(a.reps):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            fn((sms,), (256,), args)
            e.record()
            e.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, e) * 1000.0)
        return statistics.median(times)

    t_tensor = timed(0, 0)
    # Calibrate: exponential rounds per wgmma batch so that `mufu` alone takes `tensor`'s time.
    t_one = timed(1, 1)
    exp_iters = max(1, round(a.ratio * t_tensor / t_one))
    t_mufu = timed(1, exp_iters)
    t_both = timed(2, exp_iters)
    t_same = timed(3, exp_iters)
    kind = ("bf16 m64n128k16" if a.bf16 else "e4m3 m64n128k32") + (", A from registers" if a.rs
                                                                     else ", A from shared memory")
    print(f"device: {props['name'].decode()}, {sms} SMs; wgmma {kind}, 4 a batch, {a.iters} batches; "
          f"{exp_iters} x 16 ex2.approx a thread a batch in the MUFU loop; median of {a.reps}")
    print(f"tensor alone  {t_tensor:10.1f} us")
    print(f"mufu alone    {t_mufu:10.1f} us")
    print(f"both (own warpgroups)  {t_both:10.1f} us  = {t_both / max(t_tensor, t_mufu):.2f} x the "
          f"longer, {t_both / (t_tensor + t_mufu):.2f} x the sum")
    print(f"same warpgroup         {t_same:10.1f} us  = {t_same / max(t_tensor, t_mufu):.2f} x the "
          f"longer, {t_same / (t_tensor + t_mufu):.2f} x the sum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
