# SPDX-License-Identifier: Apache-2.0
"""Host cost of handing a PyTorch tensor to the C ABI: the fast path (a DLTensor filled from
data_ptr(), shape, stride() and dtype) against the general path (``__dlpack__`` capsule), and
of one whole graphattn.ops.flash_attn_varlen_func decode call (host time, no sync).

    PYTHONPATH=python GRAPHATTN_LIBRARY=build/libgraphattn.so python3 \
        python/benchmarks/dlpack_overhead.py [cpu|cuda]
"""

import sys
import timeit

import torch

import graphattn
from graphattn import _dlpack, _device, ops


def per_call_us(fn, n=20000):
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def main(device):
    cuda = device == "cuda"
    stream = torch.cuda.current_stream().cuda_stream if cuda else 0
    for shape, dtype in (((64, 32, 128), torch.bfloat16), ((65,), torch.int32),
                         ((2, 1024, 16, 8, 128), torch.bfloat16)):
        t = torch.zeros(shape, dtype=dtype, device=device)
        fast = per_call_us(lambda: _dlpack.to_dl(t, "x", stream))
        capsule = per_call_us(lambda: _dlpack._from_capsule(t, "x", stream))
        print("%-22s fast path %5.2f us   __dlpack__ capsule %5.2f us" % (shape, fast, capsule))
    print("stream lookup (torch.cuda.current_stream) %.2f us"
          % per_call_us(lambda: _device.stream_handle(None, (t,))))
    if not cuda:
        return
    b, h, kvh, d, bs, width = 64, 32, 8, 128, 16, 128
    kv = torch.zeros(2, b * width, bs, kvh, d, dtype=torch.bfloat16, device=device)
    q, out = (torch.zeros(b, h, d, dtype=torch.bfloat16, device=device) for _ in range(2))
    qsl = torch.arange(b + 1, dtype=torch.int32, device=device)
    lens = torch.full((b,), 100, dtype=torch.int32, device=device)
    table = torch.arange(b * width, dtype=torch.int32, device=device).reshape(b, width)
    k_cache, v_cache = kv.unbind(0)

    def call():
        ops.flash_attn_varlen_func(q, k_cache, v_cache, 1, qsl, width * bs, seqused_k=lens,
                                   block_table=table, causal=True, out=out)

    call()
    torch.cuda.synchronize()
    print("ops.flash_attn_varlen_func, batch %d decode: %.1f us host time per call"
          % (b, per_call_us(call, n=2000)))
    torch.cuda.synchronize()


if __name__ == "__main__":
    print("graphattn %s, torch %s" % (graphattn.__version__, torch.__version__))
    main(sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu"))
