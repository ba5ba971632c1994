# SPDX-License-Identifier: Apache-2.0
"""graphattn.ops as torch.library custom ops (graphattn.torch_ops).

On the CPU: every op is registered with its schema (mutated arguments marked), traces with fake
tensors (make_fx) and under torch.compile(fullgraph=True) through graphattn.ops' own functions
into exactly one call of torch.ops.graphattn.<op> (its fake implementation runs, no kernel),
and torch.library.opcheck's schema / fake-tensor / AOT-dispatch checks pass over meta tensors.
The real implementation refuses host tensors with graphattn's message (the ctypes path runs).
On a GPU (CUDA tensors, real kernels): opcheck of every op with all its checks, and
torch.compile(fullgraph=True) + a CUDA graph capture of the flash decode path.
Skipped without PyTorch (the plain python test venv); scripts/python_vllm_tests.sh runs them
with the torch that vLLM pins.
"""

import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed in this venv "
                            "(scripts/python_vllm_tests.sh runs these tests with it)")

import graphattn  # noqa: E402
from graphattn import ops, torch_ops  # noqa: E402

T, R, H, KH, D, NB, BS = 7, 2, 4, 2, 64, 8, 16  # tokens, requests, heads, kv heads, head, blocks
SEQ_LENS = [20, 33]
QUERY_LENS = [3, 4]
X = 8  # legacy key cache: 16 bytes of 16-bit elements


def _inputs(device, dtype=torch.bfloat16, fill=True):
    """Consistent arguments for every op (a 2-request batch over an 8-block cache)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape, dt=dtype):
        x = torch.randn(*shape, generator=g, dtype=torch.float32) if fill else torch.zeros(*shape)
        return x.to(dt).to(device)

    i32 = dict(dtype=torch.int32, device=device)
    qsl = torch.tensor([0, QUERY_LENS[0], sum(QUERY_LENS)], **i32)
    kv = rand(2, NB, BS, KH, D)
    legacy_k = rand(NB, KH, D // X, BS, X)
    legacy_v = rand(NB, KH, D, BS)
    return dict(
        q=rand(T, H, D), k=rand(T, KH, D), v=rand(T, KH, D), out=torch.zeros(T, H, D,
                                                                              dtype=dtype,
                                                                              device=device),
        kv=kv, legacy_k=legacy_k, legacy_v=legacy_v,
        slots=torch.arange(T, dtype=torch.int64, device=device) + 5,
        qsl=qsl, seq_lens=torch.tensor(SEQ_LENS, **i32),
        decode_qsl=torch.tensor([0, 1, 2], **i32),
        block_table=torch.arange(R * 4, **i32).reshape(R, 4),
        dq=rand(R, H, D), dout=torch.zeros(R, H, D, dtype=dtype, device=device),
        k_scale=torch.ones(1, dtype=torch.float32, device=device),
        v_scale=torch.ones(1, dtype=torch.float32, device=device),
        mha_q=rand(2, 5, H, D), mha_k=rand(2, 5, KH, D), mha_v=rand(2, 5, KH, D),
        mha_out=torch.zeros(2, 5, H, D, dtype=dtype, device=device),
        mapping=torch.tensor([[0, 3], [1, 4]], dtype=torch.int64),
        dst=rand(NB, BS, KH, D),
        exp_sums=torch.zeros(R, H, 1, dtype=torch.float32, device=device),
        max_logits=torch.zeros(R, H, 1, dtype=torch.float32, device=device),
        tmp_out=torch.zeros(R, H, 1, D, dtype=dtype, device=device),
        lse_a=rand(H, T, dt=torch.float32), lse_b=rand(H, T, dt=torch.float32),
        lse_out=torch.zeros(H, T, dtype=torch.float32, device=device),
        kvc_q=rand(R, 1, H, D), kvc_k=rand(R, 1, KH, D), kvc_v=rand(R, 1, KH, D),
        kvc_out=torch.zeros(R, 1, H, D, dtype=dtype, device=device),
        cache_lens=torch.tensor([n - 1 for n in SEQ_LENS], **i32))


def _calls(a):
    """(name, graphattn.ops call, torch.ops.graphattn args) for every op."""
    scale = D ** -0.5
    legacy = (a["legacy_k"], a["legacy_v"])
    return [
        ("reshape_and_cache_flash",
         lambda: ops.reshape_and_cache_flash(a["k"], a["v"], a["kv"][0], a["kv"][1], a["slots"],
                                             "auto", 1.0, 1.0),
         (a["k"], a["v"], a["kv"][0], a["kv"][1], a["slots"], "auto", None, None, 1.0, 1.0)),
        ("reshape_and_cache",
         lambda: ops.reshape_and_cache(a["k"], a["v"], *legacy, a["slots"], "auto", 1.0, 1.0),
         (a["k"], a["v"], *legacy, a["slots"], "auto", None, None, 1.0, 1.0, False)),
        ("forward_prefix",
         lambda: ops.forward_prefix(a["q"], a["k"], a["v"], "auto", *legacy, a["block_table"],
                                    a["qsl"], a["seq_lens"], max(QUERY_LENS), None, None,
                                    1.0, 1.0, out=a["out"]),
         (a["q"], a["k"], a["v"], "auto", *legacy, a["block_table"], a["qsl"], a["seq_lens"],
          max(QUERY_LENS), None, 0, None, None, 1.0, 1.0, None, None, None, True, a["out"])),
        ("calc_kv_scales",
         lambda: ops.calc_kv_scales(a["k"], a["v"], a["k_scale"], a["v_scale"]),
         (a["k"], a["v"], a["k_scale"], a["v_scale"], 200.0, 100.0)),
        ("encoder_attention",
         lambda: ops.encoder_attention(a["q"], a["k"], a["v"], a["out"], a["qsl"],
                                       max(QUERY_LENS)),
         (a["q"], a["k"], a["v"], a["out"], a["qsl"], max(QUERY_LENS), None, None, None)),
        ("multi_head_attention",
         lambda: ops.multi_head_attention(a["mha_q"], a["mha_k"], a["mha_v"], a["mha_out"]),
         (a["mha_q"], a["mha_k"], a["mha_v"], a["mha_out"], None)),
        ("flash_attn_varlen_func",
         lambda: ops.flash_attn_varlen_func(a["dq"], a["kv"][0], a["kv"][1], 1, a["decode_qsl"],
                                            max(SEQ_LENS), seqused_k=a["seq_lens"], causal=True,
                                            block_table=a["block_table"], out=a["dout"]),
         (a["dq"], a["kv"][0], a["kv"][1], 1, a["decode_qsl"], max(SEQ_LENS), a["seq_lens"],
          a["block_table"], a["dout"], None, True, -1, -1, 0.0, None, None, None, 1.0, 1.0,
          None, None, None, None, None, 1.0)),
        ("swap_blocks",
         lambda: ops.swap_blocks(a["kv"][0], a["dst"], a["mapping"]),
         (a["kv"][0], a["dst"], 0, a["mapping"])),
        ("flash_attn_with_kvcache",
         lambda: ops.flash_attn_with_kvcache(a["kvc_q"], a["kv"][0], a["kv"][1], a["kvc_k"],
                                             a["kvc_v"], cache_seqlens=a["cache_lens"],
                                             block_table=a["block_table"], causal=True,
                                             out=a["kvc_out"]),
         (a["kvc_q"], a["kv"][0], a["kv"][1], a["kvc_k"], a["kvc_v"], a["cache_lens"], None,
          a["block_table"], None, True, -1, -1, 0.0, None, None, None, 1.0, 1.0, None,
          a["kvc_out"])),
        ("copy_blocks",
         lambda: ops.copy_blocks([a["kv"][0]], [a["kv"][1]], a["mapping"]),
         ([a["kv"][0]], [a["kv"][1]], a["mapping"])),
        ("paged_attention_v1",
         lambda: ops.paged_attention_v1(a["dout"], a["dq"], *legacy, KH, scale, a["block_table"],
                                        a["seq_lens"], BS, max(SEQ_LENS), None, "auto", 1.0,
                                        1.0),
         (a["dout"], a["dq"], *legacy, KH, scale, a["block_table"], a["seq_lens"], BS,
          max(SEQ_LENS), None, "auto", None, None, 1.0, 1.0, 0, 0, 0, 64, 0)),
        ("paged_attention_v2",
         lambda: ops.paged_attention_v2(a["dout"], a["exp_sums"], a["max_logits"], a["tmp_out"],
                                        a["dq"], *legacy, KH, scale, a["block_table"],
                                        a["seq_lens"], BS, max(SEQ_LENS), None, "auto", 1.0,
                                        1.0),
         (a["dout"], a["exp_sums"], a["max_logits"], a["tmp_out"], a["dq"], *legacy, KH, scale,
          a["block_table"], a["seq_lens"], BS, max(SEQ_LENS), None, "auto", None, None, 1.0,
          1.0, 0, 0, 0, 64, 0)),
        ("forward_decode",
         lambda: ops.forward_decode(a["dq"], *legacy, a["block_table"], a["seq_lens"],
                                    max(SEQ_LENS), "auto", KH, scale, None, 1.0, 1.0),
         (a["dq"], *legacy, a["block_table"], a["seq_lens"], max(SEQ_LENS), "auto", KH, scale,
          None, None, None, 1.0, 1.0, 0, 0, 0, 64, 0)),
        ("merge_attn_states",
         lambda: ops.merge_attn_states(a["out"], a["q"], a["lse_a"], a["q"], a["lse_b"],
                                       a["lse_out"]),
         (a["out"], a["q"], a["lse_a"], a["q"], a["lse_b"], a["lse_out"])),
    ]


NAMES = [c[0] for c in _calls(_inputs("meta", fill=False))]
MUTATED = {"reshape_and_cache_flash": {"key_cache", "value_cache"},
           "reshape_and_cache": {"key_cache", "value_cache"}, "forward_prefix": {"out"},
           "calc_kv_scales": {"k_scale", "v_scale"}, "encoder_attention": {"output"},
           "multi_head_attention": {"out"}, "flash_attn_varlen_func": {"out", "softmax_lse"},
           "swap_blocks": {"dst"}, "copy_blocks": {"key_caches", "value_caches"},
           "paged_attention_v1": {"out"}, "paged_attention_v2": {"out"}, "forward_decode": set(),
           "merge_attn_states": {"output", "output_lse"},
           "flash_attn_with_kvcache": {"k_cache", "v_cache", "out"}}


def test_every_op_is_registered_with_its_mutations():
    assert sorted(NAMES) == sorted(torch_ops.OP_NAMES)
    public = set(ops.__all__) - {"clear_cache", "use_paged_attention_v1"}
    assert public == set(torch_ops.OP_NAMES), "an op of graphattn.ops has no torch op"
    for name in NAMES:
        schema = getattr(torch.ops.graphattn, name).default._schema
        mutated = {a.name for a in schema.arguments if a.alias_info is not None
                   and a.alias_info.is_write}
        assert mutated == MUTATED[name], (name, str(schema))


@pytest.mark.parametrize("name", NAMES)
def test_fake_trace_is_one_custom_op(name):
    """make_fx with fake tensors over graphattn.ops' own function: one graphattn op, and for
    mutating ops the functionalized graph still writes back (copy_ of the mutated inputs)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    a = _inputs("cpu", fill=False)
    call = {c[0]: c for c in _calls(a)}[name]
    leaves = [v for v in a.values() if isinstance(v, torch.Tensor)]

    def fn(*tensors):
        b = dict(zip([k for k, v in a.items() if isinstance(v, torch.Tensor)], tensors))
        out = {c[0]: c for c in _calls(b)}[name][1]()
        return out

    gm = make_fx(fn, tracing_mode="fake")(*leaves)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count("graphattn.%s.default" % name) == 1, (name, targets)


@pytest.mark.parametrize("name", NAMES)
def test_compile_fullgraph_over_meta_tensors(name):
    """torch.compile(fullgraph=True) traces graphattn.ops' function without a graph break; on
    meta tensors the op's fake implementation runs (no library call)."""
    a = _inputs("meta", fill=False)
    call = {c[0]: c for c in _calls(a)}[name]
    torch._dynamo.reset()
    compiled = torch.compile(call[1], fullgraph=True, backend="aot_eager")
    result = compiled()
    if name == "forward_decode":
        assert result.shape == a["dq"].shape and result.device.type == "meta"


@pytest.mark.parametrize("name", NAMES)
def test_opcheck_on_meta_tensors(name):
    """opcheck's schema, fake-tensor and AOT-dispatch checks against the fake implementation
    (the real kernels need a GPU: test_opcheck_on_gpu runs them)."""
    a = _inputs("meta", fill=False)
    args = {c[0]: c for c in _calls(a)}[name][2]
    torch.library.opcheck(getattr(torch.ops.graphattn, name).default, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("name", [n for n in NAMES if n != "swap_blocks"])
def test_real_op_refuses_host_tensors(name):
    """The registered implementation is graphattn's ctypes path: host tensors are refused with
    the library's message, not silently accepted."""
    a = _inputs("cpu")
    call = {c[0]: c for c in _calls(a)}[name]
    with pytest.raises((ValueError, graphattn.GraphattnError)) as e:
        call[1]()
    assert any(w in str(e.value) for w in ("CUDA", "device", "host")), str(e.value)


# ---- GPU --------------------------------------------------------------------------------------

def _gpu():
    from conftest import require_torch_gpu
    return require_torch_gpu()


@pytest.mark.parametrize("name", NAMES)
def test_opcheck_on_gpu(name):
    _gpu()
    a = _inputs("cuda")
    args = {c[0]: c for c in _calls(a)}[name][2]
    op = getattr(torch.ops.graphattn, name).default
    # Prepare (compile / load) once, then every check of opcheck.
    op(*args)
    torch.library.opcheck(op, args)


def test_compiled_decode_in_a_cuda_graph_matches_eager():
    _gpu()
    a = _inputs("cuda")
    ops.reshape_and_cache_flash(a["k"], a["v"], a["kv"][0], a["kv"][1], a["slots"], "auto",
                                1.0, 1.0)

    def step(q, out):
        return ops.flash_attn_varlen_func(q, a["kv"][0], a["kv"][1], 1, a["decode_qsl"],
                                          max(SEQ_LENS), seqused_k=a["seq_lens"], causal=True,
                                          block_table=a["block_table"], out=out)

    eager = step(a["dq"], torch.zeros_like(a["dout"])).clone()
    compiled = torch.compile(step, fullgraph=True)
    out = torch.zeros_like(a["dout"])
    compiled(a["dq"], out)  # warm: compiles the graph and prepares the kernels
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    out.zero_()
    with torch.cuda.graph(graph):
        compiled(a["dq"], out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_importing_graphattn_after_torch_registers_the_ops():
    """`import torch, graphattn` is enough: graphattn.ops then calls the torch ops."""
    import subprocess
    import sys

    code = ("import torch, graphattn; from graphattn import ops; "
            "assert ops._torch_ops is not None; "
            "assert torch.ops.graphattn.flash_attn_varlen_func.default")
    subprocess.run([sys.executable, "-c", code], check=True)
