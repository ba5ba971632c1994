#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times the peer for graphattn-bench: PyTorch's scaled_dot_product_attention (cuDNN) on
contiguous tensors, for the decode and prefill shapes given on the command line.

Usage: peer_sdpa.py OUT.json [--decode B:L[:HEAD_SIZE] ...] [--prefill B:L[:HEAD_SIZE] ...] [--heads 32 --kv-heads 8
       --head-size 128] [--reps 100]

Method (same as graphattn-bench): random bf16 data, CUDA events around each call, the L2 flushed
by writing a buffer twice its size before every repetition, median of --reps after warm-up.

fp8 (e4m3 q, K, V, head 128): PyTorch's SDPA where it takes fp8; where it does not
(PyTorch 2.11 does not), cuDNN's own fp8 attention (the sdpa_fp8 node) through cuDNN's Python
frontend (`import cudnn`, the nvidia-cudnn-frontend wheel) when it is installed, on the same
contiguous tensors and GQA, with its output checked against a float32 reference of the
dequantized inputs first (batch 0; the relative L2 error is reported beside the time). O is bf16
as graphattn's, or e4m3 where cuDNN takes no 16-bit O (Hopper, cuDNN 9.19); the row says which.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

# cuDNN's fp8 SDPA graph: the operands' uids (any distinct integers; named for the variant pack).
FP8_UIDS = dict(q=1, k=2, v=3, o=4, q_descale=5, k_descale=6, v_descale=7, s_descale=8, s_scale=9,
                o_scale=10, s_amax=11, o_amax=12)


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


def cudnn_frontend_fp8(q, k, v, reps, flush):
    """cuDNN's fp8 SDPA (causal; O in bf16, else e4m3) through its Python frontend on e4m3
    q [B,H,L,D] and K, V [B,KH,L,D] (views of [B,L,*,D] storage, as the frontend's own tests lay
    them out), unit descales. Returns (us, description, relative L2 error of batch 0 against
    float32 SDPA on the dequantized inputs). Raises ImportError without the frontend and
    RuntimeError (with cuDNN's reason) where it does not take the graph."""
    import cudnn  # the nvidia-cudnn-frontend wheel
    handle = cudnn.create_handle()
    try:
        return _cudnn_fp8_run(cudnn, handle, q, k, v, reps, flush)
    finally:
        cudnn.destroy_handle(handle)


def _cudnn_fp8_run(cudnn, handle, q, k, v, reps, flush):
    B, H, L, D = q.shape
    u = FP8_UIDS
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT

    def build(causal_kwargs, o_type):
        g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32,
                          handle=handle)
        t = {n: g.tensor(uid=u[n], dim=x.shape, stride=x.stride(), data_type=e4m3)
             for n, x in (("q", q), ("k", k), ("v", v))}
        s = {n: g.tensor(uid=u[n], dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=f32)
             for n in ("q_descale", "k_descale", "v_descale", "s_descale", "s_scale", "o_scale")}
        o, _, s_amax, o_amax = g.sdpa_fp8(
            q=t["q"], k=t["k"], v=t["v"], descale_q=s["q_descale"], descale_k=s["k_descale"],
            descale_v=s["v_descale"], descale_s=s["s_descale"], scale_s=s["s_scale"],
            scale_o=s["o_scale"], generate_stats=False, attn_scale=D ** -0.5, **causal_kwargs)
        o.set_uid(u["o"]).set_output(True).set_dim((B, H, L, D)).set_stride(
            (L * H * D, D, H * D, 1)).set_data_type(o_type)
        for a, n in ((s_amax, "s_amax"), (o_amax, "o_amax")):
            a.set_uid(u[n]).set_output(True).set_dim((1, 1, 1, 1)).set_stride(
                (1, 1, 1, 1)).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        return g

    # Causal as the frontend spells it: the mask flag, else (newer frontends) a right bound of 0
    # on the top-left diagonal. O in bf16 as graphattn's row writes it; cuDNN 9.19 takes a 16-bit
    # O only on Blackwell, so elsewhere O in e4m3 (unit scale: |O| <= max |V| < 448 here), which
    # writes half the output bytes (16 MiB less at 4 x 4096, about 4 us of the prefill's time at
    # the copy bandwidth, in the peer's favour).
    errors, graph, how = [], None, ""
    for o_name, o_type, o_torch in (("bf16", cudnn.data_type.BFLOAT16, torch.bfloat16),
                                    ("e4m3", e4m3, torch.float8_e4m3fn)):
        for how, kw in (("use_causal_mask", dict(use_causal_mask=True)),
                        ("right_bound=0",
                         dict(use_causal_mask=False, right_bound=0,
                              diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT))):
            try:
                graph = build(kw, o_type)
                break
            except Exception as e:  # cuDNN's exception types differ between frontend versions
                why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                errors.append(f"O {o_name}, {how}: {why}")
        if graph is not None:
            break
    if graph is None:
        raise RuntimeError("cuDNN's frontend built no fp8 SDPA graph (" + "; ".join(errors) + ")")
    dev = q.device
    one = lambda x: torch.tensor([x], dtype=torch.float32, device=dev)
    out = torch.empty(B, L, H, D, dtype=o_torch, device=dev).transpose(1, 2)
    out.view(torch.uint8).fill_(0xFF)  # poisoned first: NaN in e4m3 and in bf16
    pack = {u["q"]: q, u["k"]: k, u["v"]: v, u["o"]: out, u["q_descale"]: one(1.0),
            u["k_descale"]: one(1.0), u["v_descale"]: one(1.0), u["s_scale"]: one(64.0),
            u["s_descale"]: one(1.0 / 64.0), u["o_scale"]: one(1.0), u["s_amax"]: one(0.0),
            u["o_amax"]: one(0.0)}
    workspace = torch.empty(max(1, graph.get_workspace_size()), dtype=torch.uint8, device=dev)
    fn = lambda: graph.execute(pack, workspace, handle=handle)
    fn()
    torch.cuda.synchronize()
    # Check batch 0 against float32 SDPA (math) of the dequantized inputs.
    qf, kf, vf = (x[:1].float() for x in (q, k, v))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True, enable_gqa=True)
    err = ((out[:1].float() - ref).norm() / ref.norm()).item()
    del qf, kf, vf, ref
    torch.cuda.empty_cache()
    # No time for a wrong output: e4m3 rounding of P and O gives ~4e-2 (measured 3.9e-2 on an H200).
    if not err <= 0.1:  # NaN too (the poisoned output left unwritten)
        raise RuntimeError(f"cuDNN's fp8 output failed its check: relative L2 {err:.3e} against "
                           "fp32 (bound 0.1)")
    us = timed(fn, reps, flush)
    desc = (f"cudnn_frontend_sdpa_fp8 (frontend {getattr(cudnn, '__version__', '?')}, cuDNN "
            f"{cudnn.backend_version_string()}, causal by {how}, O in {o_name})")
    return us, desc, err


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
    # fp8: e4m3 q, K, V through SDPA (cuDNN's fp8 attention) where this PyTorch exposes it, else
    # through cuDNN's own frontend where it is installed; what each answered otherwise. Head 128
    # only, as graphattn's fp8 prefill row. [B, L, heads, D] storage seen as [B, heads, L, D].
    results["prefill_fp8"] = []
    for shape in a.prefill:
        B, L, D = prefill_shape(shape)
        if D != 128:
            continue
        e4m3 = lambda h: (torch.randn(B, L, h, D, device=dev) * 0.5).to(
            torch.float8_e4m3fn).transpose(1, 2)
        q, k, v = e4m3(H), e4m3(KH), e4m3(KH)
        flops = 4.0 * B * H * D * L * L / 2
        reps = max(10, a.reps // 5)
        errors, row = [], None
        try:
            with backend_context("CUDNN_ATTENTION"):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                            enable_gqa=True)
                fn()
                torch.cuda.synchronize()
                us = timed(fn, reps, flush)
            row = {"us": us, "backend": "pytorch sdpa cudnn_attention"}
        except (RuntimeError, ValueError, TypeError) as e:
            errors.append(f"PyTorch SDPA (cudnn_attention): {str(e).splitlines()[0][:160]}")
        if row is None:
            try:
                us, desc, err = cudnn_frontend_fp8(q, k, v, reps, flush)
                row = {"us": us, "backend": desc, "rel_l2_vs_fp32": err}
            except ImportError:
                errors.append("cuDNN's Python frontend (nvidia-cudnn-frontend) is not installed")
            except Exception as e:  # report cuDNN's answer, whatever its type
                errors.append(f"cuDNN frontend: {str(e).splitlines()[0][:240] if str(e) else type(e).__name__}")
        if row is not None:
            row.update({"batch": B, "tokens": L, "tflops": flops / row["us"] / 1e6})
            if errors:
                row["not_taken"] = "; ".join(errors)
            results["prefill_fp8"].append(row)
        else:
            results["prefill_fp8"].append({"batch": B, "tokens": L, "error": "; ".join(errors)})
        del q, k, v
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    for r in results["decode"]:
        print(f"sdpa decode {r['batch']}x{r['context']} h{r['head_size']}: {r['us']:.1f} us ({r['backend']})")
    for r in results["prefill"]:
        print(f"sdpa prefill {r['batch']}x{r['tokens']} h{r['head_size']}: {r['us']:.1f} us, {r['tflops']:.0f} TFLOP/s ({r['backend']})")
    for r in results["prefill_fp8"]:
        print(f"fp8 peer prefill {r['batch']}x{r['tokens']}: "
              + (f"{r['us']:.1f} us, {r['tflops']:.0f} TFLOP/s ({r['backend']}"
                 + (f", rel L2 {r['rel_l2_vs_fp32']:.2e} against fp32" if "rel_l2_vs_fp32" in r else "")
                 + (f"; not taken: {r['not_taken']}" if "not_taken" in r else "") + ")"
                 if "us" in r else f"not run: {r['error']}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
