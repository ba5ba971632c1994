#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One launch of the bench's prefill peer for Nsight Compute: PyTorch's
scaled_dot_product_attention with the cuDNN backend forced, on the shape of graphattn-bench's
prefill row (tools/peer_sdpa.py: bf16, [B, 32, L, D] queries, [B, 8, L, D] keys and values,
enable_gqa, causal). Warm-up calls first, then one call inside the NVTX range "prof", e.g.

  ncu --nvtx --nvtx-include "prof/" --launch-count 1 --clock-control none --set full \
      -o cudnn python3 scripts/profile_peer_sdpa.py

Usage: profile_peer_sdpa.py [--batch 4] [--len 4096] [--head-size 128] [--heads 32] [--kv-heads 8]
Exits 1 (saying why) when PyTorch offers no cuDNN attention for the shape.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--len", type=int, default=4096)
    ap.add_argument("--head-size", type=int, default=128)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    B, H, KH, L, D = a.batch, a.heads, a.kv_heads, a.len, a.head_size
    q = torch.randn(B, H, L, D, dtype=torch.bfloat16, device=dev)
    k = torch.randn(B, KH, L, D, dtype=torch.bfloat16, device=dev)
    v = torch.randn(B, KH, L, D, dtype=torch.bfloat16, device=dev)
    print(f"device {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}", flush=True)
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(a.warmup):
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("prof")
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
    except (RuntimeError, ValueError) as e:
        print(f"profile_peer_sdpa: no cuDNN attention for this shape: {e}", file=sys.stderr)
        return 1
    print(f"cuDNN SDPA: {B} x {L} causal, {H}/{KH} heads, head {D}: profiled call done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
