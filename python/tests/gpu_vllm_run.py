# SPDX-License-Identifier: Apache-2.0
"""vLLM itself generating tokens with graphattn's attention backend, against vLLM's own
TRITON_ATTN backend, on one GPU (run by the coordinator; not collected by pytest).

    python python/tests/gpu_vllm_run.py [--prompts 8] [--tokens 64] [--json OUT]

A small llama (config.json written here, dummy weights re-drawn from one seed, no tokenizer,
prompt token ids) runs through vLLM's offline ``LLM`` with CUDA graphs on (enforce_eager=False:
vLLM captures its graphs, graphattn's builder reports ALWAYS) and vLLM's native PyTorch layers
(custom_ops=["none"]), once per backend, each in its own process (the parent only compares),
with two sets of weights (redraw_weights): a decisive model, whose greedy tokens must match
token for token with top-2 logprobs within LOGPROB_TOL, and a random one, whose tokens may part
only at a near-tie of the top two (the logprobs before that within LOGPROB_TOL). Both backends'
decode throughput on the random model is printed (decode tokens / (a whole generate() - a
generate() of one token)). Exit status 0 only when all of that holds.

The vLLM it imports is whatever is on sys.path: an installed one, or the folder that
scripts/vllm_gpu_bundle.sh assembles for machines without a package registry (see there).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MODEL = {  # a small llama: 4 layers, 16 query / 4 KV heads of 128 (GQA 4), vocab 32000
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 5632, "num_attention_heads": 16, "num_hidden_layers": 4,
    "num_key_value_heads": 4, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "vocab_size": 32000, "torch_dtype": "bfloat16",
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "tie_word_embeddings": False}
SEED = 1234
# Two backends agree when their top-2 logprobs differ by at most LOGPROB_TOL at every step they
# took with the same history (bf16 logits near 15 are rounded to 1/16 to 1/8), and their greedy
# tokens may part only where one of them has its top two within TIE_NATS (a few bf16 steps of a
# logprob: a tie that the last bit of any correct kernel decides).
LOGPROB_TOL = 0.5
TIE_NATS = 0.0625


def prompts(n):
    """n prompts of mixed lengths (5 to several hundred tokens), fixed token ids."""
    import random

    rng = random.Random(SEED)
    lengths = [5, 17, 64, 130, 33, 301, 9, 512, 77, 250, 3, 1000]
    return [[rng.randrange(3, MODEL["vocab_size"]) for _ in range(lengths[i % len(lengths)])]
            for i in range(n)]


def redraw_weights(model, kind="random"):
    """Weights from one seed, in place (captured graphs keep working). vLLM's dummy weights are
    uniform in +-1e-3, which makes every logit a near-tie. Two models:

    random: normal, std 0.02, norms 1: a realistic spread, but Gaussian logits rounded to bf16
        tie their top two at a few percent of the steps (measured: the top-2 logprob gap is 0.0
        or one bf16 step at most divergences), so two correct kernels part ways at such a tie;
    decisive: the same, with embeddings of std 1 and an lm_head whose row perm[k] is 0.01 x
        embedding row k: the residual stream carries the input token's embedding, so the next
        token is perm[last token] by a margin of about 14 nats, and the second-best logprob
        (about -14, moved by everything attention and the MLPs add) is what the backends must
        agree on."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(SEED)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, p in sorted(params.items()):
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_((torch.randn(p.shape, generator=g) * 0.02).to(p.dtype))
        if kind == "decisive":
            emb = params["model.embed_tokens.weight"]
            head = params["lm_head.weight"]
            emb.copy_(torch.randn(emb.shape, generator=g).to(emb.dtype))
            perm = torch.randperm(emb.shape[0], generator=g).to(head.device)
            head[perm] = emb * 0.01
    return True


def redraw_random(model):
    return redraw_weights(model, "random")


def redraw_decisive(model):
    return redraw_weights(model, "decisive")


# Modules of vLLM's llama path (offline LLM, in-process engine, V1 model runner, both attention
# backends): --probe-imports imports them to list what a machine lacks.
PROBE_MODULES = [
    "vllm", "vllm.entrypoints.llm", "vllm.engine.arg_utils", "vllm.v1.engine.llm_engine",
    "vllm.v1.engine.core", "vllm.v1.engine.core_client", "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.gpu_worker", "vllm.v1.worker.gpu_model_runner",
    "vllm.model_executor.models.llama", "vllm.model_executor.model_loader.dummy_loader",
    "vllm.v1.attention.backends.triton_attn", "vllm.v1.sample.sampler",
    "vllm.compilation.backends", "vllm.v1.structured_output", "graphattn.vllm.backend"]

STOOD_IN = []
_C_LIB = None


def install_stand_ins():
    """vLLM's compiled extensions are not carried to a machine without a package registry (its
    _C_stable_libtorch alone is 79 MB, 56 MB as xz; flash-attn 450 MB): vllm.platforms.cuda
    imports _C_stable_libtorch unconditionally, and vllm.vllm_flash_attn raises ImportError
    without its .so files, which the attention layer module imports. Where the real module
    fails to import, an empty _C_stable_libtorch and a vllm_flash_attn made of its own Python
    interface (flash_attn_interface, whose FA2/FA3_AVAILABLE say False) stand in, so vLLM's
    Python runs; a vLLM op that needed the missing kernels would fail where it is called (the
    llama path with custom_ops=["none"], TRITON_ATTN and GRAPHATTN calls none). Recorded in
    STOOD_IN and printed."""
    import importlib
    import importlib.util
    import types

    try:
        importlib.import_module("vllm._C_stable_libtorch")
    except ImportError as e:
        sys.modules["vllm._C_stable_libtorch"] = types.ModuleType("vllm._C_stable_libtorch")
        STOOD_IN.append("vllm._C_stable_libtorch (%s)" % e)
        # vLLM's Python names torch.ops._C.* ops at import (e.g. the fusion passes'
        # ROTARY_OP, w8a8_utils' CUTLASS_FP8_SUPPORTED): each op of the library is defined
        # with its own schema (scripts/vllm_gpu_bundle.sh reads them out of the .so), and any
        # call raises; the capability queries (-> bool) answer False, which is true here.
        define_missing_c_ops(os.environ.get("GRAPHATTN_VLLM_C_SCHEMAS"))
    try:
        importlib.import_module("vllm.vllm_flash_attn")
    except ImportError as e:
        spec = importlib.util.find_spec("vllm.vllm_flash_attn")
        mod = types.ModuleType("vllm.vllm_flash_attn")
        mod.__path__ = list(spec.submodule_search_locations)
        mod.__spec__ = spec
        sys.modules["vllm.vllm_flash_attn"] = mod
        iface = importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface")
        for name in dir(iface):
            if not name.startswith("__"):
                setattr(mod, name, getattr(iface, name))
        STOOD_IN.append("vllm.vllm_flash_attn (%s)" % e)


def define_missing_c_ops(schema_file):
    """Defines torch.ops._C.<op> for every schema line of schema_file (vLLM's kernel library's
    own schemas); calls raise, except bool queries, which return False."""
    import re

    import torch

    global _C_LIB
    if not schema_file:
        raise SystemExit("vLLM's kernel library is missing and GRAPHATTN_VLLM_C_SCHEMAS names no "
                         "schema file (scripts/vllm_gpu_bundle.sh writes vllm_C_schemas.txt)")
    _C_LIB = torch.library.Library("_C", "FRAGMENT")
    count = 0
    with open(schema_file) as f:
        for line in f:
            schema = " ".join(line.split())
            m = re.match(r"([a-z_0-9]+)(\.[a-z_0-9]+)?\(", schema)
            if not m:
                continue
            name = m.group(1) + (m.group(2) or "")
            if m.group(2) is None and hasattr(torch.ops._C, name):
                continue
            try:
                _C_LIB.define(schema)
            except RuntimeError:
                continue
            if schema.endswith("-> bool"):
                impl = lambda *a, **k: False  # noqa: E731
            else:
                def impl(*a, _name=name, **k):
                    raise RuntimeError("vLLM's compiled op _C.%s is not on this machine (the "
                                       "bundle carries vLLM's Python files only)" % _name)
            _C_LIB.impl(name, impl, "CompositeExplicitAutograd")
            count += 1
    STOOD_IN.append("%d torch.ops._C ops defined from vLLM's schemas (calls raise; bool "
                    "capability queries answer False)" % count)


def probe_imports():
    """Imports PROBE_MODULES (with vLLM's CUDA platform when there is no GPU); prints
    'MISSING <module>' and exits 3 at the first module this machine lacks, else 'OK'."""
    import importlib

    try:
        install_stand_ins()
        import torch

        if not torch.cuda.is_available():  # a CPU machine: an sm_90 CUDA platform
            import vllm.platforms
            from vllm.platforms.cuda import CudaPlatform
            from vllm.platforms.interface import DeviceCapability

            class H100(CudaPlatform):
                @classmethod
                def get_device_capability(cls, device_id=0):
                    return DeviceCapability(9, 0)

            vllm.platforms._current_platform = H100()
        for name in PROBE_MODULES:
            importlib.import_module(name)
    except ModuleNotFoundError as e:
        import traceback
        traceback.print_exc(limit=-3)
        print("MISSING", e.name)
        return 3
    print("STOOD_IN", STOOD_IN)
    print("OK")
    return 0


def generate(llm, inputs, max_tokens):
    """Greedy tokens of inputs, the top-2 logprobs of every step, and the decode throughput:
    decode tokens / (a whole generate() - a generate() of one token, the prefill)."""
    import torch
    from vllm import SamplingParams

    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                            detokenize=False, logprobs=2)
    llm.generate(inputs, greedy, use_tqdm=False)  # warm (compiles nothing new later)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(inputs, greedy, use_tqdm=False)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, detokenize=False)
    t1 = time.perf_counter()
    llm.generate(inputs, one, use_tqdm=False)
    torch.cuda.synchronize()
    prefill = time.perf_counter() - t1
    tokens, top2 = [], []
    for o in outs:
        c = o.outputs[0]
        tokens.append(list(c.token_ids))
        top2.append([sorted((v.logprob for v in lp.values()), reverse=True)[:2]
                     for lp in c.logprobs or []])
    decode_tokens = sum(len(t) - 1 for t in tokens)
    return dict(tokens=tokens, top2=top2, generate_s=total, prefill_s=prefill,
                decode_tokens=decode_tokens,
                decode_tokens_per_s=decode_tokens / max(total - prefill, 1e-9))


def child(args):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model's function
    install_stand_ins()
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    info = {"backend": args.backend, "vllm": vllm.__version__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0), "stood_in": STOOD_IN}
    if args.backend == "GRAPHATTN":
        import graphattn
        import graphattn.vllm
        import importlib

        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        # vLLM's loader: graphattn's entry point (by module: vllm's lazy __getattr__ does not
        # expose the submodule as an attribute).
        importlib.import_module("vllm.plugins").load_general_plugins()
        name = graphattn.vllm.backend_name()  # GRAPHATTN; CUSTOM on vLLM 0.26
        if not AttentionBackendEnum[name].get_path().startswith("graphattn."):
            raise SystemExit("vLLM's plugin loader did not register graphattn as %s (is "
                             "graphattn's dist-info with its entry point on sys.path?)" % name)
        info["graphattn"] = graphattn.__version__
        info["backend_name"] = name
    # No fusion pass: their replacements are vLLM's compiled ops, which a machine without vLLM's
    # kernel library lacks (and this llama has no quantization to fuse).
    from vllm.config.compilation import PassConfig
    off = ("fuse_norm_quant", "fuse_act_quant", "fuse_attn_quant", "enable_sp",
           "fuse_gemm_comms", "fuse_allreduce_rms", "enable_qk_norm_rope_fusion",
           "fuse_rope_kvcache", "fuse_qk_norm_rope_kvcache", "fuse_act_padding")
    fields = getattr(PassConfig, "__dataclass_fields__", {})
    passes = {k: False for k in off if k in fields}
    llm = LLM(model=args.model_dir, skip_tokenizer_init=True, load_format="dummy",
              dtype="bfloat16", max_model_len=2048, enforce_eager=False,
              attention_backend=info.get("backend_name", args.backend),
              gpu_memory_utilization=0.5, seed=SEED,
              max_num_seqs=16,
              compilation_config={"custom_ops": ["none"], "pass_config": passes})
    info["cudagraph_mode"] = str(llm.llm_engine.vllm_config.compilation_config.cudagraph_mode)
    inputs = [{"prompt_token_ids": p} for p in prompts(args.prompts)]
    for kind, redraw in (("random", redraw_random), ("decisive", redraw_decisive)):
        llm.apply_model(redraw)
        llm.reset_prefix_cache()  # the other model's KV blocks must not be reused
        info[kind] = generate(llm, inputs, args.tokens)
    with open(args.json, "w") as f:
        json.dump(info, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--json", help="write both runs' results here")
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--probe-imports", action="store_true",
                   help="import vLLM's llama path and list the missing modules")
    args = p.parse_args()
    if args.probe_imports:
        return probe_imports()
    if args.backend:
        return child(args)
    work = tempfile.mkdtemp(prefix="graphattn-vllm-run-")
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(MODEL, f)
    results = {}
    for backend in ("GRAPHATTN", "TRITON_ATTN"):
        out = os.path.join(work, backend + ".json")
        cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend, "--model-dir",
               work, "--json", out, "--prompts", str(args.prompts), "--tokens",
               str(args.tokens)]
        print("== %s: %s" % (backend, " ".join(cmd)), flush=True)
        rc = subprocess.call(cmd)
        if rc != 0 or not os.path.exists(out):
            print("FAILED: the %s run exited with %d" % (backend, rc))
            return 1
        with open(out) as f:
            results[backend] = json.load(f)
    a, b = results["GRAPHATTN"], results["TRITON_ATTN"]
    lens = [len(t) for t in prompts(args.prompts)]
    print("vLLM %s, torch %s, %s, cudagraph_mode %s" % (a["vllm"], a["torch"], a["device"],
                                                        a["cudagraph_mode"]))
    print("stood in for vLLM's compiled modules: %s" % (a["stood_in"] or "none"))
    print("prompts: %d, lengths %s, %d greedy tokens each" % (len(lens), lens, args.tokens))
    ok = True
    for kind in ("decisive", "random"):
        x, y = a[kind], b[kind]
        equal, ties, worst = 0, 0, 0.0
        for i, (tx, ty) in enumerate(zip(x["tokens"], y["tokens"])):
            same = next((j for j in range(min(len(tx), len(ty))) if tx[j] != ty[j]), len(tx))
            # The logprobs of the steps both took with the same history.
            for j in range(min(same + 1, len(tx))):
                for u, v in zip(x["top2"][i][j], y["top2"][i][j]):
                    worst = max(worst, abs(u - v))
            if same == len(tx) and tx == ty:
                equal += 1
                continue
            gx = x["top2"][i][same][0] - x["top2"][i][same][1]
            gy = y["top2"][i][same][0] - y["top2"][i][same][1]
            tie = min(gx, gy) <= TIE_NATS
            ties += tie
            print("  %s prompt %d: first difference at generated token %d (graphattn %d, triton "
                  "%d; top-2 logprob gap there: graphattn %.4f, triton %.4f: %s)"
                  % (kind, i, same, tx[same], ty[same], gx, gy,
                     "a near-tie" if tie else "NOT a near-tie"))
        gaps = sorted(t[0] - t[1] for steps in x["top2"] for t in steps if len(t) == 2)
        print("%-8s model: median top-2 logprob gap %.3f (graphattn)" % (kind, gaps[len(gaps) // 2]))
        print("%-8s model: token-for-token equal %d of %d prompts; %d part at a near-tie (top-2 "
              "gap <= %.4f); largest top-2 logprob difference before parting %.4f (bound %.2f)"
              % (kind, equal, len(lens), ties, TIE_NATS, worst, LOGPROB_TOL))
        if kind == "decisive":
            ok &= equal == len(lens) and worst <= LOGPROB_TOL
        else:
            ok &= equal + ties == len(lens) and worst <= LOGPROB_TOL
    for name, r in (("GRAPHATTN", a["random"]), ("TRITON_ATTN", b["random"])):
        print("%-12s decode %.1f tokens/s (%d decode tokens; generate %.3f s, prefill %.3f s)"
              % (name, r["decode_tokens_per_s"], r["decode_tokens"], r["generate_s"],
                 r["prefill_s"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
