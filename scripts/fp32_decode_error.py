#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Why the float32 legacy decode (templates/decode_f32.cu) multiplies in fp32, not tf32: the
decode attention of one query token emulated on the host with NumPy, once in plain float32 and
once with tf32 tensor-core inputs (Q and K rounded to 10 mantissa bits for the scores, P and V
for the output; products accumulated in float32), each against float64. Rounding: 'rna' is
cvt.rna.tf32.f32 (to nearest, ties away), 'trunc' what an MMA does with raw fp32 bits (the low
13 bits dropped). Inputs as vLLM's kernel tests draw them (uniform in +-1/sqrt(head_size)) and
N(0, 1); vLLM compares float32 at an absolute tolerance of 1e-3.

    python3 scripts/fp32_decode_error.py [--seed N]      (needs NumPy; CPU only)
"""
import argparse

import numpy as np


def tf32(x, mode):
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    if mode == "rna":
        bits = bits + np.uint32(1 << 12)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def decode(q, k, v, scale, mode):
    """q [H, D], k/v [S, H, D] float32 -> out [H, D] in float32 (mode None) or with tf32 MMA
    inputs."""
    if mode is not None:
        q, k = tf32(q, mode), tf32(k, mode)
    s = np.einsum("hd,shd->hs", q, k, dtype=np.float32) * np.float32(scale)
    p = np.exp(s - s.max(axis=1, keepdims=True), dtype=np.float32)
    denom = p.sum(axis=1, keepdims=True, dtype=np.float32)
    if mode is not None:
        p, v = tf32(p, mode), tf32(v, mode)
    return np.einsum("hs,shd->hd", p, v, dtype=np.float32) / denom


def reference(q, k, v, scale):
    s = np.einsum("hd,shd->hs", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return np.einsum("hs,shd->hd", p, v.astype(np.float64)) / p.sum(axis=1, keepdims=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print("max |error| and relative L2 against float64, 8 sequences of 1..4096 tokens, 8 heads")
    print("%-8s %-7s %-6s %12s %12s" % ("inputs", "head", "math", "max abs", "rel L2"))
    for dist in ("vllm", "normal"):
        for head in (64, 128, 256):
            scale = 1.0 / np.sqrt(head)
            lens = rng.integers(1, 4097, size=8)
            lens[0] = 4096
            errs = {m: [0.0, 0.0, 0.0] for m in ("fp32", "tf32 rna", "tf32 trunc")}
            for n in lens:
                if dist == "vllm":
                    q = rng.uniform(-scale, scale, (8, head)).astype(np.float32)
                    k = rng.uniform(-scale, scale, (n, 8, head)).astype(np.float32)
                    v = rng.uniform(-scale, scale, (n, 8, head)).astype(np.float32)
                else:
                    q = rng.standard_normal((8, head)).astype(np.float32)
                    k = rng.standard_normal((n, 8, head)).astype(np.float32)
                    v = rng.standard_normal((n, 8, head)).astype(np.float32)
                want = reference(q, k, v, scale)
                for name, mode in (("fp32", None), ("tf32 rna", "rna"), ("tf32 trunc", "trunc")):
                    d = decode(q, k, v, scale, mode).astype(np.float64) - want
                    e = errs[name]
                    e[0] = max(e[0], float(np.abs(d).max()))
                    e[1] += float((d * d).sum())
                    e[2] += float((want * want).sum())
            for name, (mx, num, den) in errs.items():
                print("%-8s %-7d %-10s %12.3e %12.3e" % (dist, head, name, mx, np.sqrt(num / den)))


if __name__ == "__main__":
    main()
