# SPDX-License-Identifier: Apache-2.0
"""vLLM's fp8 query path through graphattn's vLLM backend on a GPU: vLLM's own Attention layer
(e4m3 KV cache, graphattn's backend) quantizes the query with its QuantFP8 and layer._q_scale,
the metadata builder prepares the layer's e4m3-query kernels, and GraphattnImpl.forward runs a
mixed batch (decodes and prefills, host split) eagerly and from a captured CUDA graph (device
split) replayed with new scales, each against float64 attention over the dequantized inputs
(the query as vLLM quantized it, the cache as graphattn wrote it).

Tolerance: the inputs are exactly the dequantized fp8 values the reference sees, so the error
is the kernels' own rounding (P to fp16 or bf16 for P V, bf16 output: 2^-9 relative per
element) as in tests/gpu/test_fp8_query.cpp, whose derivation gives 4e-3 relative L2 for bf16
outputs. Skipped without vLLM or a GPU; on the GPU machine (vLLM carried as
scripts/vllm_gpu_bundle.sh assembles it):
    scripts/vllm_gpu_run.sh OUT_DIR .vllm-carry --pytest test_gpu_vllm_fp8_query.py"""

import dataclasses
import json

import pytest

from conftest import require_torch_gpu

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (the GPU run carries it)")
torch = require_torch_gpu()

from graphattn.vllm import backend as gb  # noqa: E402
from gpu_batch import attention_float64, capture, relative_l2  # noqa: E402

LAYER = "model.layers.0.self_attn.attn"
H, KH, D, BLOCK, NUM_BLOCKS, MAX_MODEL_LEN = 16, 4, 128, 16, 80, 1024
TOLERANCE = 4e-3  # bf16 output (tests/gpu/test_fp8_query.cpp's q8_tolerance)


def prefill_tolerance():
    """The prefill rows' tolerance: on sm_90 the e4m3-query prefill runs on the wgmma kernel,
    which rounds P to e4m3 (tests/gpu/test_fp8_query.cpp derives 5e-2, q8_prefill_tolerance);
    elsewhere P stays in 16 bits."""
    return 5e-2 if torch.cuda.get_device_capability() == (9, 0) else TOLERANCE


def check_rows(out, ref, decodes, what):
    """Relative L2 of the decode rows (the first `decodes`) and of the prefill rows, each
    against its tolerance."""
    dec = relative_l2(out[:decodes], ref[:decodes])
    pre = relative_l2(out[decodes:], ref[decodes:])
    print("%s: relative L2 decode rows %.3g, prefill rows %.3g" % (what, dec, pre))
    assert dec <= TOLERANCE
    assert pre <= prefill_tolerance()
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H * D,
         "intermediate_size": 5632, "num_attention_heads": H, "num_hidden_layers": 1,
         "num_key_value_heads": KH, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "vocab_size": 32000, "torch_dtype": "bfloat16",
         "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
         "tie_word_embeddings": False}


@pytest.fixture
def vllm_layer(tmp_path):
    """(VllmConfig, vLLM's Attention layer over graphattn with an fp8 cache, on the GPU)."""
    from vllm.config import (CacheConfig, CompilationConfig, DeviceConfig, ModelConfig,
                             VllmConfig, set_current_vllm_config)
    from vllm.model_executor.layers.attention import Attention

    import graphattn.vllm as gvllm

    (tmp_path / "config.json").write_text(json.dumps(MODEL))
    gvllm.register()
    config = VllmConfig(
        model_config=ModelConfig(model=str(tmp_path), skip_tokenizer_init=True,
                                 max_model_len=MAX_MODEL_LEN, dtype="bfloat16"),
        device_config=DeviceConfig(device="cuda"), cache_config=CacheConfig(cache_dtype="fp8"),
        # vLLM's native PyTorch ops (QuantFP8.forward_native), as gpu_vllm_run.py runs vLLM
        compilation_config=CompilationConfig(custom_ops=["none"]))
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with set_current_vllm_config(config):
            layer = Attention(H, D, D ** -0.5, num_kv_heads=KH, cache_config=config.cache_config,
                              prefix=LAYER, attn_backend=gb.GraphattnBackend)
    finally:
        torch.set_default_dtype(saved)
    return config, layer.to("cuda")


def _builder(config):
    from vllm.config import set_current_vllm_config
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=KH, head_size=D, dtype=torch.bfloat16)
    if any(f.name == "num_head_slots" for f in dataclasses.fields(spec)):  # vLLM 0.33
        spec = gb.GraphattnBackend.customize_spec(spec)
    with set_current_vllm_config(config):
        return gb.GraphattnMetadataBuilder(spec, [LAYER], config, torch.device("cuda"))


def _common(query_lens, seq_lens, table, tokens):
    """vLLM's CommonAttentionMetadata (CUDA tensors), padded to `tokens` with -1 slots."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    qsl = [0]
    for q in query_lens:
        qsl.append(qsl[-1] + q)
    slots = []
    for r, (q, s) in enumerate(zip(query_lens, seq_lens)):
        slots += [int(table[r, p // BLOCK]) * BLOCK + p % BLOCK for p in range(s - q, s)]
    slots += [-1] * (tokens - len(slots))
    q = torch.tensor(qsl, dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=q.to("cuda"), query_start_loc_cpu=q,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device="cuda"),
        num_reqs=len(query_lens), num_actual_tokens=tokens, max_query_len=max(query_lens),
        max_seq_len=max(seq_lens), block_table_tensor=table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device="cuda"))


def _rows(half, slots):
    """float64 rows [len(slots), KH, D] of a cache half [blocks, BLOCK, KH, D] (e4m3) at the
    given slots (fp8 tensors take no indexing: widened first)."""
    return half.to(torch.float64).reshape(-1, KH, D)[slots.reshape(-1).long()]


def _reference(q8, layer, paired, table, query_lens, seq_lens):
    """float64 causal attention of the dequantized e4m3 query over the dequantized cache."""
    q_scale, k_scale, v_scale = (float(x) for x in (layer._q_scale, layer._k_scale,
                                                    layer._v_scale))
    out = torch.zeros(sum(query_lens), H, D, dtype=torch.float64, device="cuda")
    start = 0
    for r, (n, s) in enumerate(zip(query_lens, seq_lens)):
        blocks = table[r, :(s + BLOCK - 1) // BLOCK].long()
        k, v = (_rows(half, blocks[:, None] * BLOCK + torch.arange(BLOCK, device="cuda"))[:s]
                * scale for half, scale in ((paired[0], k_scale), (paired[1], v_scale)))
        k, v = (x.repeat_interleave(H // KH, dim=1).transpose(0, 1) for x in (k, v))
        q = q8[start:start + n].double().transpose(0, 1) * q_scale
        qpos = torch.arange(s - n, s, device="cuda")[:, None]
        kpos = torch.arange(s, device="cuda")[None, :]
        o = attention_float64(q, k, v, D ** -0.5, qpos, kpos, allowed=kpos <= qpos)
        out[start:start + n] = o.transpose(0, 1)
        start += n
    return out


def test_fp8_query_through_vllms_layer_and_graphattns_impl(vllm_layer, seed):
    config, layer = vllm_layer
    impl = layer.impl
    assert impl.supports_quant_query_input and layer.query_quant is not None
    g = torch.Generator(device="cuda").manual_seed(seed)
    layer._q_scale.fill_(0.02)
    layer._k_scale.fill_(0.03)
    layer._v_scale.fill_(0.025)
    builder = _builder(config)
    assert builder.prepared_layers == [LAYER]
    specs = impl._entry.backend.required_specs()
    assert specs[1].endswith("_qe4m3") and specs[2].endswith("_qe4m3"), specs

    # 3 decodes, then 2 prefills (one over a cached prefix): vLLM's order.
    query_lens, seq_lens = [1, 1, 1, 20, 45], [37, 200, 64, 50, 45]
    T, padded = sum(query_lens), sum(query_lens) + 3
    # vLLM's block table: a row of max_model_len / block_size entries per request.
    table = torch.zeros(5, MAX_MODEL_LEN // BLOCK, dtype=torch.int32, device="cuda")
    table[:, :13] = torch.randperm(NUM_BLOCKS, generator=g, device="cuda")[:5 * 13].view(5, 13)
    # vLLM's fp8 page view [blocks, 2, block, KH * D] (uint8): earlier context already cached
    # (random e4m3 values); forward() writes the step's keys and values.
    kv_cache = (torch.randn(NUM_BLOCKS, 2, BLOCK, KH * D, generator=g, device="cuda") * 4) \
        .to(torch.float8_e4m3fn).view(torch.uint8)
    paired = impl._paired_cache(kv_cache)

    def inputs(scale):
        # The query as vLLM's Attention.forward hands it over: QuantFP8 with layer._q_scale.
        layer._q_scale.fill_(scale)
        q = (torch.randn(padded, H * D, generator=g, device="cuda") * 0.1).to(torch.bfloat16)
        with _current(config):
            q8 = layer.query_quant(q, layer._q_scale)[0].view(padded, H, D)
        key = (torch.randn(padded, KH, D, generator=g, device="cuda") * 0.1).to(torch.bfloat16)
        value = (torch.randn(padded, KH, D, generator=g, device="cuda") * 0.1).to(torch.bfloat16)
        return q8, key, value

    # Eager, the batch split on the host.
    q8, key, value = inputs(0.002)
    assert q8.dtype == torch.float8_e4m3fn
    out = torch.full((padded, H, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    md = builder.build(0, _common(query_lens, seq_lens, table, padded))
    assert (md.graphattn.num_decodes, md.graphattn.num_actual_tokens) == (3, T)
    impl.forward(layer, q8, key, value, kv_cache, md, out)
    torch.cuda.synchronize()
    written = _rows(paired[0], md.slot_mapping[:T]) * 0.03
    assert relative_l2(written, key[:T]) <= 2.0 ** -4  # the cache write rounds to e4m3
    check_rows(out[:T], _reference(q8, layer, paired, table, query_lens, seq_lens), 3,
               "eager (host split)")

    # A captured graph (the builder's capture metadata: the batch split on the device) replayed
    # with new inputs and new scales in place: the kernels read _q_scale, _k_scale and
    # _v_scale on the device, so nothing is captured again.
    buf_q, buf_k, buf_v = (x.clone() for x in (q8, key, value))
    buf_out = torch.zeros_like(out)
    cm = _common(query_lens, seq_lens, table, padded)
    graph_md = builder.build_for_cudagraph_capture(cm)
    assert graph_md.graphattn.device_split
    graph = capture(lambda: impl.forward(layer, buf_q, buf_k, buf_v, kv_cache, graph_md,
                                         buf_out))
    for q_scale, k_scale, v_scale in ((0.004, 0.03, 0.025), (0.001, 0.05, 0.04)):
        layer._k_scale.fill_(k_scale)
        layer._v_scale.fill_(v_scale)
        new_q8, new_k, new_v = inputs(q_scale)
        for dst, src in ((buf_q, new_q8), (buf_k, new_k), (buf_v, new_v)):
            dst.copy_(src)
        buf_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        written = _rows(paired[1], cm.slot_mapping[:T]) * v_scale
        assert relative_l2(written, new_v[:T]) <= 2.0 ** -4
        check_rows(buf_out[:T], _reference(buf_q, layer, paired, table, query_lens, seq_lens),
                   3, "graph replay, q_scale %g k_scale %g v_scale %g" % (q_scale, k_scale,
                                                                          v_scale))


def _current(config):
    from vllm.config import set_current_vllm_config

    return set_current_vllm_config(config)
