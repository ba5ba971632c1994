# SPDX-License-Identifier: Apache-2.0
"""graphattn.vllm against the real vLLM release (graphattn.vllm.VLLM_VERSION), on the CPU:
vLLM's plugin loader finds graphattn's entry point; vLLM's selector picks GraphattnBackend for
llama-3-8b and refuses it, with vLLM's message, where graphattn lacks a feature; the builder
builds graphattn's metadata from vLLM's CommonAttentionMetadata (CPU tensors); vLLM's own KV
cache allocator, given graphattn's spec and layouts, makes caches graphattn reads as NHD / HND.
Skipped where vLLM is not installed (scripts/python_vllm_tests.sh installs it)."""

import dataclasses
import json
import os
import sys
from typing import List

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed in this venv "
                           "(scripts/python_vllm_tests.sh runs these tests with it)")
import torch  # noqa: E402


import graphattn  # noqa: E402
import graphattn.vllm as gvllm  # noqa: E402
from graphattn import errors  # noqa: E402
from graphattn.vllm import backend as gb  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402
from vllm.v1.attention.backend import (AttentionCGSupport, AttentionType,  # noqa: E402
                                       CommonAttentionMetadata)
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,  # noqa: E402
                                        KVCacheGroupSpec, KVCacheTensor, compute_layout_strides)
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402

LLAMA3_8B = {  # meta-llama/Meta-Llama-3-8B's config.json (shapes; no weights are read)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "vocab_size": 128256, "torch_dtype": "bfloat16",
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
    "tie_word_embeddings": False}


def test_version_pin_is_the_installed_vllm():
    assert vllm.__version__.startswith(gvllm.VLLM_VERSION.rsplit(".", 1)[0] + ".")
    assert gvllm.check_version() == vllm.__version__


def test_version_mismatch_is_named_at_registration():
    with pytest.raises(gvllm.VersionMismatch) as e:
        gvllm.check_version("0.32.1")
    text = str(e.value)
    assert "0.32.1" in text and gvllm.VLLM_VERSION in text and "0.33.x" in text


def test_vllm_plugin_loader_finds_and_registers_graphattn():
    from importlib.metadata import entry_points

    import vllm.plugins

    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "graphattn"]
    assert eps and eps[0].value == "graphattn.vllm:register_plugin", eps
    vllm.plugins.plugins_loaded = False
    vllm.plugins.load_general_plugins()  # vLLM's loader runs graphattn's entry point
    member = AttentionBackendEnum["GRAPHATTN"]
    assert member.get_class() is gb.GraphattnBackend
    assert AttentionBackendEnum.CUSTOM.get_class() is gb.GraphattnBackend
    assert gb.GraphattnBackend.get_name() == "GRAPHATTN"
    assert hasattr(torch.ops.graphattn, "flash_attn_varlen_func")
    gvllm.register()  # idempotent


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama-3-8b")
    (d / "config.json").write_text(json.dumps(LLAMA3_8B))
    return str(d)


@pytest.fixture
def llama_config(llama_dir):
    """make(): a VllmConfig for llama-3-8b (config.json written here; no tokenizer, no weights)
    with attention backend GRAPHATTN, and set_current_vllm_config for it (device "cuda": the
    machine's platform does not name one without a GPU)."""
    from vllm.config import (AttentionConfig, DeviceConfig, ModelConfig, VllmConfig,
                             set_current_vllm_config)

    gvllm.register()

    def make(cache_dtype="auto"):
        from vllm.config import CacheConfig

        model = ModelConfig(model=llama_dir, skip_tokenizer_init=True, max_model_len=4096,
                            dtype="bfloat16")
        config = VllmConfig(model_config=model, device_config=DeviceConfig(device="cuda"),
                            cache_config=CacheConfig(cache_dtype=cache_dtype),
                            attention_config=AttentionConfig(backend="GRAPHATTN"))
        return config, set_current_vllm_config(config)

    return make


def _cuda_platform():
    """vLLM's CUDA platform reporting an sm_90 device (the selector's only device query; nothing
    else of a GPU is used). Its module loads vLLM's kernel library at import, which needs
    libcuda.so.1: without a driver an empty module stands in for that library (no vLLM kernel
    runs in these tests)."""
    import types

    try:
        import vllm._C_stable_libtorch  # noqa: F401
    except ImportError:
        sys.modules.setdefault("vllm._C_stable_libtorch",
                               types.ModuleType("vllm._C_stable_libtorch"))
    from vllm.platforms.cuda import CudaPlatform

    class H100Platform(CudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(9, 0)

    return H100Platform()


def _select(make, **kwargs):
    """vLLM's selector (get_attn_backend: the current config's backend, validated by the
    platform) on the CUDA platform."""
    import vllm.platforms
    from vllm.v1.attention import selector

    selector._cached_get_attn_backend.cache_clear()
    config, ctx = make()
    saved = vllm.platforms._current_platform
    vllm.platforms._current_platform = _cuda_platform()
    try:
        with ctx:
            args = dict(head_size=128, dtype=torch.bfloat16, kv_cache_dtype="auto")
            args.update(kwargs)
            return selector.get_attn_backend(**args)
    finally:
        vllm.platforms._current_platform = saved
        selector._cached_get_attn_backend.cache_clear()


def test_selector_returns_graphattn_for_llama3_8b(llama_config):
    assert _select(llama_config) is gb.GraphattnBackend
    assert _select(llama_config, kv_cache_dtype="fp8") is gb.GraphattnBackend
    assert _select(llama_config, kv_cache_dtype="fp8_e5m2") is gb.GraphattnBackend
    assert _select(llama_config, has_sink=True, has_sliding_window=True) is gb.GraphattnBackend
    assert _select(llama_config, attn_type=AttentionType.ENCODER_DECODER) is gb.GraphattnBackend


@pytest.mark.parametrize("kwargs, reason", [
    (dict(use_mla=True), "MLA not supported"),
    (dict(head_size=512), "head_size not supported"),
    (dict(head_size=100), "head_size not supported"),
    # vLLM's tests use 16 and 24; no released model does (docs/small-heads.md)
    (dict(head_size=16), "head_size not supported"),
    (dict(head_size=24), "head_size not supported"),
    (dict(dtype=torch.float32), "dtype not supported"),
    (dict(kv_cache_dtype="int8_per_token_head"), "kv_cache_dtype not supported"),
    (dict(use_sparse=True), "sparse not supported"),
    (dict(use_mm_prefix=True), "partial multimodal token full attention not supported"),
    (dict(use_per_head_quant_scales=True), "per-head quant scales not supported"),
])
def test_selector_refuses_with_vllms_message(llama_config, kwargs, reason):
    with pytest.raises(ValueError) as e:
        _select(llama_config, **kwargs)
    text = str(e.value)
    assert "Selected backend AttentionBackendEnum.GRAPHATTN is not valid" in text, text
    assert reason in text, text


def test_selector_refuses_old_gpus():
    assert gb.GraphattnBackend.validate_configuration(
        head_size=128, dtype=torch.float16, kv_cache_dtype="auto", block_size=16,
        use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
        use_per_head_quant_scales=False, device_capability=DeviceCapability(7, 5),
        attn_type=AttentionType.DECODER) == ["compute capability not supported"]


def test_backend_capabilities():
    B = gb.GraphattnBackend
    assert B.get_supported_kernel_block_sizes() == list(range(16, 257, 16))
    assert B.supports_head_size(32) and B.supports_head_size(256) and not B.supports_head_size(260)
    assert not any(B.supports_head_size(h) for h in (8, 16, 24))
    assert B.supports_block_size(16) and B.supports_block_size(512) and not B.supports_block_size(8)
    assert B.supports_kv_cache_dtype("fp8_e4m3") and B.supports_kv_cache_dtype("fp8_e5m2")
    assert not B.supports_kv_cache_dtype("nvfp4")
    for t in (AttentionType.DECODER, AttentionType.ENCODER, AttentionType.ENCODER_ONLY,
              AttentionType.ENCODER_DECODER):
        assert B.supports_attn_type(t)
    assert B.supports_sink() and B.supports_sliding_window() and not B.is_mla()
    assert not B.supports_non_causal() and not B.supports_dcp() and not B.supports_pcp()
    assert B.forward_includes_kv_cache_update
    assert B.supports_cascade_attention()  # vLLM's cascade (up to 0.11), run by the impl
    assert B.supports_combination(128, torch.bfloat16, "float16", 16, False, False, False,
                                  False, DeviceCapability(9, 0)) is not None


def _spec(layout, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, block_size=16):
    os.environ[gb.KV_LAYOUT_ENV] = layout
    try:
        return gb.GraphattnBackend.customize_spec(FullAttentionSpec(
            block_size=block_size, num_kv_heads=num_kv_heads, head_size=head_size, dtype=dtype))
    finally:
        del os.environ[gb.KV_LAYOUT_ENV]


def _impl(**kw):
    args = dict(num_heads=32, head_size=128, scale=128 ** -0.5, num_kv_heads=8,
                alibi_slopes=None, sliding_window=None, kv_cache_dtype="auto")
    args.update(kw)
    return gb.GraphattnImpl(**args)


@pytest.mark.parametrize("ga_layout", ["NHD", "HND"])
@pytest.mark.parametrize("vllm_layout", [KVCacheLayout.LBHNC, KVCacheLayout.BLHNC])
def test_kv_cache_that_vllm_allocates_is_graphattns_layout(ga_layout, vllm_layout):
    """vLLM's allocator (allocate_kv_cache), given graphattn's customized spec and one of its
    layouts, makes per-layer views that the impl turns into graphattn's 5-d cache: NHD or HND
    within a block, K and V planes that tile each page exactly, no copy."""
    from graphattn import ops
    from graphattn._dlpack import to_dl
    from vllm.v1.worker.utils import allocate_kv_cache

    assert vllm_layout in gb.GraphattnBackend.supported_kv_cache_layouts()
    spec = _spec(ga_layout, num_kv_heads=2, head_size=64, dtype=torch.float16)
    assert gb.spec_layout(spec) == ga_layout
    layers, num_blocks = ["l0", "l1", "l2"], 5
    layer_stride, block_stride = compute_layout_strides(spec, num_blocks, len(layers),
                                                        vllm_layout)[:2]
    size = spec.page_size_bytes * num_blocks * len(layers)
    config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[KVCacheTensor(
        size=size, layers=layers, layer_stride=layer_stride, block_stride=block_stride)],
        kv_cache_groups=[KVCacheGroupSpec(layers, spec)])
    caches = allocate_kv_cache(config, torch.device("cpu"), vllm_layout)
    page = 2 * 2 * 64  # elements per block and layer: K and V of 2 heads x 64
    for i, name in enumerate(layers):
        impl = _impl(num_heads=4, head_size=64, num_kv_heads=2)
        impl._layout = ga_layout
        paired = impl._paired_cache(caches[name])
        assert paired.shape == (2, num_blocks, 16, 2, 64)
        assert paired.data_ptr() == caches[name].data_ptr()
        key = to_dl(paired[0], "k")
        assert ops._layout_of(key) == (graphattn._names.NHD if ga_layout == "NHD"
                                       else graphattn._names.HND)
        # K then V plane in each block; every byte of the layer's pages written exactly once.
        paired.zero_()
        paired[0].fill_(1)
        paired[1].fill_(2)
        assert float(paired.sum()) == 3 * num_blocks * 16 * 2 * 64
        expected_block = page * 16 * (1 if vllm_layout == KVCacheLayout.LBHNC else len(layers))
        assert paired.stride(1) == expected_block
        assert paired.stride(0) == page * 16 // 2
    raw = caches[layers[0]]
    assert impl._paired_cache(raw) is impl._paired_cache(raw)  # cached view: no work per step


def test_spec_refuses_unequal_head_sizes():
    with pytest.raises(ValueError, match="equal key and value head sizes"):
        gb.GraphattnBackend.customize_spec(FullAttentionSpec(
            block_size=16, num_kv_heads=8, head_size=128, head_size_v=64, dtype=torch.bfloat16))


def test_impl_maps_every_feature_to_graphattn():
    sinks = torch.zeros(32)
    impl = _impl(alibi_slopes=[0.5] * 32, sliding_window=4096, logits_soft_cap=30.0,
                 kv_cache_dtype="fp8", sinks=sinks, kv_sharing_target_layer_name="l0")
    config = impl.layer_config(block_size=32, layout="HND", dtype=torch.bfloat16,
                               max_model_len=8192, max_num_seqs=256, decode_query_len=3)
    assert config == dict(num_heads=32, num_kv_heads=8, head_size=128, block_size=32,
                          dtype="bfloat16", kv_cache_dtype="fp8_e4m3", layout="HND",
                          window=4096, soft_cap=30.0, scale=128 ** -0.5, max_model_len=8192,
                          max_num_seqs=256, attn_type="decoder", decode_query_len=3)
    assert impl.kv_sharing_target_layer_name == "l0" and impl.sinks is sinks
    cross = _impl(attn_type=AttentionType.ENCODER_DECODER, kv_cache_dtype="fp8_e5m2")
    c = cross.layer_config(block_size=16, layout="NHD", dtype=torch.float16, max_model_len=448,
                           max_num_seqs=8, decode_query_len=1)
    assert c["attn_type"] == "encoder_decoder" and c["kv_cache_dtype"] == "fp8_e5m2"
    for t in (AttentionType.ENCODER, AttentionType.ENCODER_ONLY):  # vLLM keeps no cache
        with pytest.raises(NotImplementedError, match="sliding window"):
            _impl(attn_type=t, sliding_window=128)
        assert _impl(attn_type=t).layer_config(
            block_size=16, layout="NHD", dtype=torch.float16, max_model_len=512,
            max_num_seqs=8, decode_query_len=1)["attn_type"] == "encoder_only"
    # The configuration is one graphattn accepts (checked by the library, no GPU needed).
    ga = graphattn.AttentionBackend(arch=90, **config)
    assert ga.config.window == 4096 and ga.config.layout == "HND"
    with pytest.raises(NotImplementedError, match="chunk_lookback"):
        _impl(chunk_lookback=3)
    with pytest.raises(NotImplementedError, match="int8_per_token_head"):
        _impl(kv_cache_dtype="int8_per_token_head")


def test_impl_forward_without_prepared_kernels_says_why():
    impl = _impl()
    out = torch.zeros(2, 32, 128)
    md = object.__new__(gb.GraphattnMetadata)
    with pytest.raises(RuntimeError, match="not prepared"):
        impl.forward(None, out, out, out, out, md, out)
    assert impl.forward(None, out, None, None, out, None, out.fill_(1)) is out
    assert float(out.abs().sum()) == 0  # vLLM's profiling run: no metadata, zeros


def _common(query_lens, seq_lens, num_reqs_padded=None, tokens_padded=None):
    """vLLM's CommonAttentionMetadata on CPU tensors (padded like vLLM's runner: repeated
    offsets and zero lengths for padding requests, -1 slots for padding tokens)."""
    n = len(query_lens)
    reqs = num_reqs_padded or n
    qsl = [0]
    for q in query_lens:
        qsl.append(qsl[-1] + q)
    qsl += [qsl[-1]] * (reqs - n)
    tokens = tokens_padded or qsl[-1]
    slots = list(range(qsl[-1])) + [-1] * (tokens - qsl[-1])
    q = torch.tensor(qsl, dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=q, query_start_loc_cpu=q.clone(),
        seq_lens=torch.tensor(list(seq_lens) + [0] * (reqs - n), dtype=torch.int32),
        num_reqs=reqs, num_actual_tokens=tokens, max_query_len=max(query_lens),
        max_seq_len=max(seq_lens), block_table_tensor=torch.zeros(reqs, 8, dtype=torch.int32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64))


@pytest.fixture
def builder(llama_config):
    config, ctx = llama_config()
    with ctx:
        spec = _spec("NHD")
        b = gb.GraphattnMetadataBuilder(spec, ["model.layers.0.self_attn.attn"], config,
                                        torch.device("cpu"))
    assert b.prepared_layers == []  # no layers were built here: nothing to compile
    return b


def test_builder_from_vllms_common_metadata(builder):
    assert builder.reorder_batch_threshold == 1 and builder.layout == "NHD"
    assert builder.block_size == 16 and builder.max_model_len == 4096
    cm = _common([1, 1, 5, 3], [30, 17, 5, 40])
    md = builder.build(0, cm)
    ga = md.graphattn
    assert (ga.num_reqs, ga.num_decodes, ga.num_decode_tokens) == (4, 2, 2)
    assert (ga.num_actual_tokens, ga.max_query_len, ga.max_seq_len) == (10, 5, 40)
    assert not ga.device_split
    assert ga.query_start_loc is cm.query_start_loc and ga.block_table is cm.block_table_tensor
    assert ga.slot_mapping is cm.slot_mapping and ga.seq_lens is cm.seq_lens
    decode = builder.build(0, _common([1] * 3, [9, 8, 7]))
    assert (decode.graphattn.num_decodes, decode.graphattn.max_query_len) == (3, 1)
    # A padded eager batch: graphattn gets the real token count.
    padded = builder.build(0, _common([1, 4], [9, 8], tokens_padded=8))
    assert padded.graphattn.num_actual_tokens == 5 and padded.num_actual_tokens == 5
    with pytest.raises(errors.GraphattnError, match="request"):
        builder.build(0, _common([4, 1], [9, 8]))  # a decode after a prefill


def test_builder_cascade_metadata_and_rule(builder):
    # vLLM's use_cascade_attention rule, as its FlashAttention builder answered it.
    assert builder.use_cascade_attention(8192, [1] * 64, 32, 8, False, False, False, 132)
    assert not builder.use_cascade_attention(128, [1] * 64, 32, 8, False, False, False, 132)
    assert not builder.use_cascade_attention(8192, [1] * 64, 32, 8, False, False, True, 132)
    assert not builder.use_cascade_attention(8192, [1] * 64, 32, 8, False, False, False, 132,
                                             dcp_world_size=2)
    md = builder.build(0, _common([1, 1, 5], [300, 290, 280]))
    assert not md.use_cascade and md.suffix_kv_lens is None
    md = builder.build(256, _common([1, 1, 5], [300, 290, 280]))
    assert md.use_cascade and md.common_prefix_len == 256
    assert md.cu_prefix_query_lens.tolist() == [0, 7]
    assert md.prefix_kv_lens.tolist() == [256]
    assert md.suffix_kv_lens.tolist() == [44, 34, 24]
    with pytest.raises(ValueError, match="multiple of the block size 16"):
        builder.build(100, _common([1, 1, 5], [300, 290, 280]))


def test_impl_runs_vllms_cascade_sequence(builder, monkeypatch):
    """A cascade step is vLLM's cascade_attention over graphattn.ops: the cache write, the
    prefix (every query, non-causal, block-table row 0's prefix blocks), the suffixes (causal,
    the rows past the prefix blocks, seq_lens - prefix), both with their LSE, then the merge."""
    calls = []

    def varlen(q, k, v, **kw):
        calls.append(("varlen", kw))
        return torch.zeros_like(q), torch.zeros(q.shape[1], q.shape[0])

    monkeypatch.setattr(graphattn.ops, "reshape_and_cache_flash",
                        lambda *a, **kw: calls.append(("write", a)))
    monkeypatch.setattr(graphattn.ops, "flash_attn_varlen_func", varlen)
    monkeypatch.setattr(graphattn.ops, "merge_attn_states",
                        lambda *a, **kw: calls.append(("merge", a)))
    impl = _impl()
    impl._entry = object()  # prepared (the cascade path launches through graphattn.ops)
    md = builder.build(32, _common([1, 1, 5], [300, 290, 280]))
    q = torch.zeros(7, 32, 128)
    key = value = torch.zeros(7, 8, 128)
    out = torch.zeros(9, 32, 128)
    kv_cache = torch.zeros(10, 2, 16, 8 * 128)  # vLLM 0.33's NHD page view
    assert impl.forward(None, q, key, value, kv_cache, md, out) is out
    assert [c[0] for c in calls] == ["write", "varlen", "varlen", "merge"]
    prefix, suffix = calls[1][1], calls[2][1]
    assert prefix["causal"] is False and prefix["return_softmax_lse"] is True
    assert prefix["cu_seqlens_q"] is md.cu_prefix_query_lens and prefix["max_seqlen_q"] == 7
    assert prefix["seqused_k"] is md.prefix_kv_lens and prefix["max_seqlen_k"] == 32
    assert tuple(prefix["block_table"].shape) == (1, 2)
    assert suffix["causal"] is True and suffix["return_softmax_lse"] is True
    assert suffix["seqused_k"] is md.suffix_kv_lens and suffix["num_decodes"] == 2
    assert tuple(suffix["block_table"].shape) == (3, 6) and suffix["max_seqlen_q"] == 5
    assert calls[3][1][0].shape[0] == 7  # the merge writes the step's rows of output
    # Layers that vLLM's cascade does not cover refuse it in the builder and the impl.
    windowed = _impl(sliding_window=128)
    windowed._entry = object()
    with pytest.raises(NotImplementedError, match="cascade attention is for decoder layers"):
        windowed.forward(None, q, key, value, kv_cache, md, out)


def test_builder_capture_uses_the_device_split(builder):
    support = builder.get_cudagraph_support(builder.vllm_config, builder.kv_cache_spec)
    assert support == AttentionCGSupport.ALWAYS
    cm = _common([1, 1, 1], [5, 6, 7], num_reqs_padded=4, tokens_padded=4)
    md = builder.build_for_cudagraph_capture(cm)
    ga = md.graphattn
    assert ga.device_split and ga.num_reqs == 4 and ga.num_actual_tokens == 4
    assert ga.max_seq_len == builder.max_model_len and md.num_actual_tokens == 4
    table = torch.ones(4, 8, dtype=torch.int32)
    updated = builder.update_block_table(md, table, cm.slot_mapping)
    assert updated.graphattn.block_table is table and md.graphattn.block_table is not table


def test_builder_decode_threshold_follows_speculative_tokens(builder):
    from vllm.config import SpeculativeConfig

    config = builder.vllm_config
    spec = dataclasses.replace(_spec("NHD"))
    try:
        config.speculative_config = object.__new__(SpeculativeConfig)
        config.speculative_config.num_speculative_tokens = 3
        config.speculative_config.parallel_drafting = False
        b = gb.GraphattnMetadataBuilder(spec, [], config, torch.device("cpu"))
    finally:
        config.speculative_config = None
    assert b.reorder_batch_threshold == 4 and b.decode_query_len == 4
    md = b.build(0, _common([4, 2, 7], [20, 21, 30]))
    assert (md.graphattn.num_decodes, md.graphattn.num_decode_tokens) == (2, 6)


# fp8 queries: vLLM's Attention layer quantizes the query (QuantFP8, static per tensor, with
# layer._q_scale) when the impl reports supports_quant_query_input and the cache is fp8.

LAYER = "model.layers.0.self_attn.attn"


def _attention(make, cache_dtype):
    """vLLM's own Attention layer for llama-3-8b's shapes over graphattn (as the model builds
    it: bf16 default dtype, the config's cache dtype), and its VllmConfig."""
    from vllm.model_executor.layers.attention import Attention

    config, ctx = make(cache_dtype)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with ctx:
            layer = Attention(32, 128, 128 ** -0.5, num_kv_heads=8,
                              cache_config=config.cache_config, prefix=LAYER,
                              attn_backend=gb.GraphattnBackend)
    finally:
        torch.set_default_dtype(saved)
    return config, layer


@pytest.mark.parametrize("kv_cache_dtype, attn_type, expected", [
    ("fp8", AttentionType.DECODER, True),
    ("fp8_e4m3", AttentionType.DECODER, True),
    ("fp8", AttentionType.ENCODER_DECODER, True),
    ("fp8_e5m2", AttentionType.DECODER, False),  # vLLM quantizes queries to e4m3 only
    ("auto", AttentionType.DECODER, False),
    ("bfloat16", AttentionType.DECODER, False),
    ("fp8", AttentionType.ENCODER_ONLY, False),  # graphattn's dense kernel: 16-bit queries
    ("fp8", AttentionType.ENCODER, False),
])
def test_impl_reports_quant_query_input(kv_cache_dtype, attn_type, expected):
    assert _impl(kv_cache_dtype=kv_cache_dtype,
                 attn_type=attn_type).supports_quant_query_input is expected


def test_quant_query_switch(monkeypatch):
    monkeypatch.setenv(gb.QUANT_QUERY_ENV, "0")
    assert not _impl(kv_cache_dtype="fp8").supports_quant_query_input
    monkeypatch.setenv(gb.QUANT_QUERY_ENV, "yes")
    with pytest.raises(ValueError, match="GRAPHATTN_VLLM_QUANT_QUERY='yes' is not supported; "
                       "allowed: 0, 1"):
        _impl(kv_cache_dtype="fp8")


@pytest.mark.parametrize("cache_dtype, quantizes", [("fp8", True), ("fp8_e4m3", True),
                                                    ("fp8_e5m2", False), ("auto", False)])
def test_vllm_attention_quantizes_queries_for_graphattn(llama_config, cache_dtype, quantizes):
    """vLLM's Attention layer builds its query quantizer for graphattn exactly when the cache is
    e4m3: static, per tensor, with the layer's _q_scale; its output is e4m3 that dequantizes to
    the query within e4m3's precision."""
    from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
    from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape

    config, layer = _attention(llama_config, cache_dtype)
    assert isinstance(layer.impl, gb.GraphattnImpl)
    assert layer.impl.quantized_query(layer) is quantizes
    if not quantizes:
        assert layer.query_quant is None
        return
    assert isinstance(layer.query_quant, QuantFP8)
    assert layer.query_quant.static and layer.query_quant.group_shape == GroupShape.PER_TENSOR
    layer._q_scale.fill_(0.25)
    query = torch.randn(5, 32 * 128, dtype=torch.bfloat16,
                        generator=torch.Generator().manual_seed(0))
    with _current(config):
        q8, _ = layer.query_quant(query, layer._q_scale)
    assert q8.dtype == torch.float8_e4m3fn and q8.shape == query.shape
    back = q8.float() * 0.25  # query = stored * _q_scale, graphattn's q_scale convention
    assert float(((back - query.float()).abs() / query.float().abs().clamp(min=0.25)).max()) \
        <= 2.0 ** -4  # e4m3: 3 mantissa bits, round to nearest


class _RecordedBackend:
    """graphattn.AttentionBackend as the impl builds it, recorded: the real library validates
    the same configuration for sm_90 (no GPU needed) and names its kernels; prepare() and
    forward() record instead of launching (they need a GPU)."""

    made: List[dict] = []

    def __init__(self, **kw):
        self.kw = kw
        self.made.append(kw)
        plain = {k: v for k, v in kw.items() if k not in ("alibi_slopes", "sinks",
                                                           "k_scale_device", "v_scale_device",
                                                           "q_descale")}
        self.specs = _REAL_BACKEND(arch=90, **plain).required_specs()
        self.calls = []

    def prepare(self):
        pass

    def workspace_bytes(self):
        return 256

    def forward(self, *args, **kwargs):
        self.calls.append(args)


_REAL_BACKEND = graphattn.AttentionBackend


@pytest.fixture
def recorded(monkeypatch):
    monkeypatch.setattr(graphattn, "AttentionBackend", _RecordedBackend)
    monkeypatch.setattr(gb, "_prepared", {})
    _RecordedBackend.made = []
    return _RecordedBackend


def _current(config):
    from vllm.config import set_current_vllm_config

    return set_current_vllm_config(config)


def _layer_builder(config):
    """The metadata builder of the layer's group (it prepares the layer's kernels)."""
    with _current(config):
        return gb.GraphattnMetadataBuilder(_spec("NHD"), [LAYER], config, torch.device("cpu"))


def test_builder_prepares_e4m3_query_kernels_with_the_layers_scales(llama_config, recorded):
    config, layer = _attention(llama_config, "fp8")
    builder = _layer_builder(config)
    assert builder.prepared_layers == [LAYER]
    (kw,) = recorded.made
    assert kw["q_dtype"] == "fp8_e4m3" and kw["kv_cache_dtype"] == "fp8_e4m3"
    assert kw["dtype"] == "bfloat16"  # the output stays in the model's dtype
    # The kernels read vLLM's scales on the device at every launch (graphs follow new values).
    assert kw["q_descale"] is layer._q_scale
    assert kw["k_scale_device"] is layer._k_scale and kw["v_scale_device"] is layer._v_scale
    entry = layer.impl._entry.backend
    decode, prefill = entry.specs[1], entry.specs[2]
    assert decode.startswith("decode_") and decode.endswith("_qe4m3"), entry.specs
    assert prefill.startswith("prefill_") and prefill.endswith("_qe4m3"), entry.specs

    # forward(): the e4m3 query as vLLM hands it over, the step's rows, the bf16 output.
    md = builder.build(0, _common([1, 1, 5], [30, 17, 5], tokens_padded=8))
    with _current(config):
        q8 = layer.query_quant(torch.randn(8, 32 * 128, dtype=torch.bfloat16),
                               layer._q_scale)[0].view(-1, 32, 128)
    key = value = torch.randn(8, 8, 128, dtype=torch.bfloat16)
    out = torch.empty(8, 32, 128, dtype=torch.bfloat16)
    kv_cache = torch.zeros(10, 2, 16, 8 * 128, dtype=torch.uint8)  # vLLM's fp8 NHD page view
    assert layer.impl.forward(layer, q8, key, value, kv_cache, md, out) is out
    (call,) = entry.calls
    query, k, v, paired, output, ga_md, workspace = call
    assert query.dtype == torch.float8_e4m3fn and query.shape == (7, 32, 128)
    assert query.data_ptr() == q8.data_ptr()
    assert k.shape == (7, 8, 128) and v.dtype == torch.bfloat16
    assert paired.dtype == torch.float8_e4m3fn and paired.shape == (2, 10, 16, 8, 128)
    assert output.dtype == torch.bfloat16 and output.shape == (7, 32, 128)
    assert ga_md is md.graphattn and workspace is layer.impl._entry.workspace
    # The same layer given a 16-bit query (nothing quantized it) says why.
    with pytest.raises(ValueError, match="prepared for float8_e4m3fn queries"):
        layer.impl.forward(layer, torch.zeros(8, 32, 128, dtype=torch.bfloat16), key, value,
                           kv_cache, md, out)


def test_builder_keeps_16_bit_queries_without_the_quantizer(llama_config, recorded, monkeypatch):
    # An e5m2 cache (vLLM builds no quantizer) and the switch: 16-bit query kernels.
    config, layer = _attention(llama_config, "fp8_e5m2")
    _layer_builder(config)
    assert "q_dtype" not in recorded.made[-1] and recorded.made[-1]["q_descale"] is None
    with pytest.raises(ValueError, match="prepared for 16-bit queries"):
        layer.impl.forward(layer, torch.zeros(2, 32, 128, dtype=torch.float8_e4m3fn), None,
                           None, torch.zeros(1), object.__new__(gb.GraphattnMetadata),
                           torch.zeros(2, 32, 128, dtype=torch.bfloat16))
    monkeypatch.setenv(gb.QUANT_QUERY_ENV, "0")
    config, layer = _attention(llama_config, "fp8")
    assert layer.query_quant is None
    _layer_builder(config)
    assert "q_dtype" not in recorded.made[-1]


def test_builder_refuses_per_head_query_scales(llama_config, recorded):
    config, layer = _attention(llama_config, "fp8")
    layer._q_scale = torch.ones(8)  # one per KV head (vLLM's attn_head strategy)
    with pytest.raises(ValueError, match=r"per-head query scales \(layer._q_scale of shape "
                       r"\(8,\)\) are not supported; supported: one per-tensor scale"):
        _layer_builder(config)
    with pytest.raises(ValueError, match="fp8 queries need an fp8_e4m3 KV cache"):
        _impl(kv_cache_dtype="fp8_e5m2").layer_config(
            block_size=16, layout="NHD", dtype=torch.bfloat16, max_model_len=512,
            max_num_seqs=8, decode_query_len=1, fp8_query=True)


def test_cascade_passes_the_e4m3_query_and_its_descale(llama_config, builder, monkeypatch):
    calls = []

    def varlen(q, k, v, **kw):
        calls.append(kw)
        return kw["out"], torch.zeros(q.shape[1], q.shape[0])

    monkeypatch.setattr(graphattn.ops, "reshape_and_cache_flash", lambda *a, **kw: None)
    monkeypatch.setattr(graphattn.ops, "flash_attn_varlen_func", varlen)
    monkeypatch.setattr(graphattn.ops, "merge_attn_states", lambda *a, **kw: None)
    config, layer = _attention(llama_config, "fp8")
    impl = layer.impl
    impl._entry, impl._fp8_query = object(), True  # prepared for e4m3 queries
    md = builder.build(32, _common([1, 1, 5], [300, 290, 280]))
    q8 = torch.zeros(7, 32, 128, dtype=torch.float8_e4m3fn)
    key = value = torch.zeros(7, 8, 128, dtype=torch.bfloat16)
    out = torch.zeros(7, 32, 128, dtype=torch.bfloat16)
    impl.forward(layer, q8, key, value, torch.zeros(10, 2, 16, 8 * 128, dtype=torch.uint8), md,
                 out)
    assert len(calls) == 2
    for kw in calls:
        assert kw["q_descale"] is layer._q_scale and kw["k_descale"] is layer._k_scale
        assert kw["out"].dtype == torch.bfloat16 and kw["out"].shape == (7, 32, 128)
