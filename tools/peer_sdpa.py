#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times the peer for graphattn-bench: PyTorch's scaled_dot_product_attention (cuDNN) on
contiguous tensors, for the decode and prefill shapes given on the command line.

Usage: peer_sdpa.py OUT.json [--decode B:L[:HEAD_SIZE] ...] [--prefill B:L[:HEAD_SIZE] ...] [--heads 32 --kv-heads 8
       --head-size 128] [--reps 100]

Method (same as graphattn-bench): random bf16 data, CUDA events around each call, the L2 flushed
by writing a buffer twice its size before every repetition, median of --reps after warm-up.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F


def timed(fn, reps, flush):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)  # microseconds
    return statistics.median(times)


def backend_context(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, name))


def run_sdpa(q, k, v, causal, reps, flush):
    """cuDNN when PyTorch offers it for the shape, else whatever SDPA picks (reported)."""
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
        try:
            with backend_context(backend):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                fn()
                torch.cuda.synchronize()
                return backend.lower(), timed(fn, reps, flush)
        except (RuntimeError, ValueError):
            continue
    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return "default", timed(fn, reps, flush)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--decode", nargs="*", default=[])
    ap.add_argument("--prefill", nargs="*", default=[])
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-size", type=int, default=128)
    ap.add_argument("--reps", type=int, default=100)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    flush = torch.empty(2 * l2 // 4 + 1, dtype=torch.float32, device=dev)
    results = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "decode": [], "prefill": []}
    H, KH, D = a.heads, a.kv_heads, a.head_size
    for shape in a.decode:
        parts = list(map(int, shape.split(":")))
        B, L = parts[0], parts[1]
        D = parts[2] if len(parts) > 2 else a.head_size
        q = torch.randn(B, H, 1, D, dtype=torch.bfloat16, device=dev)
        k = torch.randn(B, KH, L, D, dtype=torch.bfloat16, device=dev)
        v = torch.randn(B, KH, L, D, dtype=torch.bfloat16, device=dev)
        backend, us = run_sdpa(q, k, v, False, a.reps, flush)
        results["decode"].append({"batch": B, "context": L, "us": us, "backend": backend,
                                  "head_size": D})
        del q, k, v
        torch.cuda.empty_cache()
    def prefill_shape(shape):
        parts = list(map(int, shape.split(":")))
        return parts[0], parts[1], parts[2] if len(parts) > 2 else a.head_size

    for shape in a.prefill:
        B, L, D = prefill_shape(shape)
        q = torch.randn(B, H, L, D, dtype=torch.bfloat16, device=dev)
        k = torch.randn(B, KH, L, D, dtype=torch.bfloat16, device=dev)
        v = torch.randn(B, KH, L, D, dtype=torch.bfloat16, device=dev)
        backend, us = run_sdpa(q, k, v, True, max(10, a.reps // 5), flush)
        flops = 4.0 * B * H * D * L * L / 2  # causal: half the score matrix
        results["prefill"].append({"batch": B, "tokens": L, "us": us, "backend": backend,
                                   "tflops": flops / us / 1e6, "head_size": D})
        del q, k, v
        torch.cuda.empty_cache()
    # fp8: e4m3 q, K, V through SDPA (cuDNN's fp8 attention) where this PyTorch exposes it; what
    # it answered otherwise. Head 128 only, as graphattn's fp8 prefill row.
    results["prefill_fp8"] = []
    for shape in a.prefill:
        B, L, D = prefill_shape(shape)
        if D != 128:
            continue
        q = (torch.randn(B, H, L, D, device=dev) * 0.5).to(torch.float8_e4m3fn)
        k = (torch.randn(B, KH, L, D, device=dev) * 0.5).to(torch.float8_e4m3fn)
        v = (torch.randn(B, KH, L, D, device=dev) * 0.5).to(torch.float8_e4m3fn)
        errors = []
        for backend in ("CUDNN_ATTENTION",):
            try:
                with backend_context(backend):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)
                    fn()
                    torch.cuda.synchronize()
                    us = timed(fn, max(10, a.reps // 5), flush)
                flops = 4.0 * B * H * D * L * L / 2
                results["prefill_fp8"].append({"batch": B, "tokens": L, "us": us,
                                               "backend": backend.lower(),
                                               "tflops": flops / us / 1e6})
                break
            except (RuntimeError, ValueError, TypeError) as e:
                errors.append(f"{backend.lower()}: {str(e).splitlines()[0][:160]}")
        else:
            results["prefill_fp8"].append({"batch": B, "tokens": L,
                                           "error": "; ".join(errors)})
        del q, k, v
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    for r in results["decode"]:
        print(f"sdpa decode {r['batch']}x{r['context']} h{r['head_size']}: {r['us']:.1f} us ({r['backend']})")
    for r in results["prefill"]:
        print(f"sdpa prefill {r['batch']}x{r['tokens']} h{r['head_size']}: {r['us']:.1f} us, {r['tflops']:.0f} TFLOP/s ({r['backend']})")
    for r in results["prefill_fp8"]:
        print(f"sdpa fp8 prefill {r['batch']}x{r['tokens']}: "
              + (f"{r['us']:.1f} us ({r['backend']})" if "us" in r else f"not run: {r['error']}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
