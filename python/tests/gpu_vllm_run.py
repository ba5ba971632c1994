# SPDX-License-Identifier: Apache-2.0
"""vLLM itself generating tokens with graphattn's attention backend, against vLLM's own
TRITON_ATTN backend, on one GPU (run by the coordinator; not collected by pytest).

    python python/tests/gpu_vllm_run.py [--prompts 8] [--tokens 64] [--json OUT]

A small llama (config.json written here, dummy weights re-drawn from one seed, no tokenizer,
prompt token ids) runs through vLLM's offline ``LLM`` with CUDA graphs on (enforce_eager=False:
vLLM captures its graphs, graphattn's builder reports ALWAYS) and vLLM's native PyTorch layers
(custom_ops=["none"]), once per backend, each in its own process (the parent only compares).
Greedy outputs must match token for token; both backends' decode throughput is printed
(generated tokens / wall time of a generate() of single-token steps after the prefill).
Exit status 0 only when every prompt matches.

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


def prompts(n):
    """n prompts of mixed lengths (5 to several hundred tokens), fixed token ids."""
    import random

    rng = random.Random(SEED)
    lengths = [5, 17, 64, 130, 33, 301, 9, 512, 77, 250, 3, 1000]
    return [[rng.randrange(3, MODEL["vocab_size"]) for _ in range(lengths[i % len(lengths)])]
            for i in range(n)]


def redraw_weights(model):
    """Weights from one seed (normal, std 0.02; norms 1): vLLM's dummy weights are uniform in
    +-1e-3, which makes near-ties of the logits and so argmax flips between two correct
    kernels; these give a realistic logit spread. In place: captured graphs keep working."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_((torch.randn(p.shape, generator=g) * 0.02).to(p.dtype))
    return True


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
    llm.apply_model(redraw_weights)
    ps = prompts(args.prompts)
    greedy = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True,
                            detokenize=False, logprobs=2)
    inputs = [{"prompt_token_ids": p} for p in ps]
    llm.generate(inputs, greedy, use_tqdm=False)  # warm (compiles nothing new later)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(inputs, greedy, use_tqdm=False)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    # Decode throughput: prefill alone (max_tokens=1) subtracted from the whole generate().
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, detokenize=False)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    llm.generate(inputs, one, use_tqdm=False)
    torch.cuda.synchronize()
    prefill = time.perf_counter() - t1
    tokens, gaps = [], []
    for o in outs:
        c = o.outputs[0]
        tokens.append(list(c.token_ids))
        step_gaps = []
        for lp in c.logprobs or []:
            vals = sorted((v.logprob for v in lp.values()), reverse=True)
            step_gaps.append(vals[0] - vals[1] if len(vals) > 1 else None)
        gaps.append(step_gaps)
    decode_tokens = sum(len(t) - 1 for t in tokens)
    info.update(tokens=tokens, top2_gaps=gaps, generate_s=total, prefill_s=prefill,
                decode_tokens=decode_tokens,
                decode_tokens_per_s=decode_tokens / max(total - prefill, 1e-9),
                cudagraph_mode=str(llm.llm_engine.vllm_config.compilation_config.cudagraph_mode))
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
    mismatches = 0
    for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])):
        if x != y:
            mismatches += 1
            first = next(j for j in range(min(len(x), len(y))) if x[j] != y[j])
            print("prompt %d: first difference at generated token %d (graphattn %d, triton %d; "
                  "top-2 logprob gap there: graphattn %s, triton %s)"
                  % (i, first, x[first], y[first], a["top2_gaps"][i][first],
                     b["top2_gaps"][i][first]))
    lens = [len(t) for t in prompts(args.prompts)]
    print("vLLM %s, torch %s, %s, cudagraph_mode %s" % (a["vllm"], a["torch"], a["device"],
                                                        a["cudagraph_mode"]))
    print("stood in for vLLM's compiled modules: %s" % (a["stood_in"] or "none"))
    print("prompts: %d, lengths %s, %d greedy tokens each" % (len(lens), lens, args.tokens))
    print("token-for-token equal: %d of %d prompts" % (len(lens) - mismatches, len(lens)))
    for name, r in (("GRAPHATTN", a), ("TRITON_ATTN", b)):
        print("%-12s decode %.1f tokens/s (%d decode tokens; generate %.3f s, prefill %.3f s)"
              % (name, r["decode_tokens_per_s"], r["decode_tokens"], r["generate_s"],
                 r["prefill_s"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
