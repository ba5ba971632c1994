# SPDX-License-Identifier: Apache-2.0
"""AttentionBackend configuration: names, types, the library's checks. CPU only (arch=90 needs
no GPU until prepare())."""

import math

import pytest

import graphattn

BASE = dict(num_heads=32, num_kv_heads=8, head_size=128, max_model_len=4096, max_num_seqs=16,
            arch=90)


def backend(**overrides):
    return graphattn.AttentionBackend(**dict(BASE, **overrides))


def test_defaults_and_resolved_config():
    b = backend()
    c = b.config
    assert (c.num_heads, c.num_kv_heads, c.head_size, c.block_size) == (32, 8, 128, 16)
    assert (c.dtype, c.kv_cache_dtype, c.layout) == ("bfloat16", "auto", "NHD")
    assert (c.window, c.soft_cap, c.k_scale, c.v_scale) == (0, 0.0, 1.0, 1.0)
    assert (c.max_model_len, c.max_num_seqs, c.arch) == (4096, 16, 90)
    assert c.overlap_previous_kernel is False
    assert math.isclose(c.scale, 1 / math.sqrt(128), rel_tol=1e-6)  # None -> 1/sqrt(head)
    assert b.required_specs() == [
        "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
        "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
        "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
        # the mixed graphs' decodes, splits chosen on the device (mixed decode divisor 0, the
        # default), and the one that plans two blocks an SM for long decodes (_dsp_long,
        # GRAPHATTN_MIXED_DSP_LONG_TILES 8, the default)
        "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dsp",
        "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_dsp_long"]
    assert "sm_90" in repr(b)


def test_every_option_reaches_the_library():
    b = backend(num_heads=16, num_kv_heads=16, head_size=64, block_size=32, dtype="fp16",
                kv_cache_dtype="fp8_e5m2", layout="hnd", window=128, soft_cap=30.0, scale=0.5,
                k_scale=2.0, v_scale=4.0, max_model_len=1000, max_num_seqs=3, arch=89,
                overlap_previous_kernel=True)
    c = b.config
    assert (c.num_heads, c.num_kv_heads, c.head_size, c.block_size) == (16, 16, 64, 32)
    assert (c.dtype, c.kv_cache_dtype, c.layout) == ("float16", "fp8_e5m2", "HND")
    assert (c.window, c.soft_cap, c.scale, c.k_scale, c.v_scale) == (128, 30.0, 0.5, 2.0, 4.0)
    assert (c.max_model_len, c.max_num_seqs, c.arch, c.overlap_previous_kernel) == (
        1000, 3, 89, True)
    assert b.required_specs()[1] == "decode_h64_b32_fp16_kve5m2_g1_swa1_cap1_hnd_sm89"


def test_checked_mode_selects_checked_kernels():
    b = backend(check_bounds=True)
    assert b.config.check_bounds is True
    assert all("_chk" in spec for spec in b.required_specs())  # (then _dsp on the fourth)
    assert backend().config.check_bounds is False
    with pytest.raises(graphattn.GraphattnError, match="not in checked mode"):
        backend().take_bounds_violation()
    with pytest.raises(graphattn.GraphattnError, match="call prepare"):
        b.take_bounds_violation()
    assert not graphattn.BoundsViolation("none", -1, 0, 0, "")


def test_alibi_and_sinks_need_per_head_float32_device_arrays():
    import numpy as np
    c = backend().config
    assert (c.alibi, c.sinks) == (False, False)
    for name in ("alibi_slopes", "sinks"):
        with pytest.raises(ValueError, match=name + " must be in CUDA device memory"):
            backend(**{name: np.zeros(32, np.float32)})


@pytest.mark.parametrize("name,expected", [
    ("float16", "float16"), ("fp16", "float16"), ("half", "float16"), ("torch.float16", "float16"),
    ("torch.half", "float16"), ("bfloat16", "bfloat16"), ("bf16", "bfloat16"),
    ("torch.bfloat16", "bfloat16"), ("BF16", "bfloat16")])
def test_dtype_names(name, expected):
    assert backend(dtype=name).config.dtype == expected


@pytest.mark.parametrize("name,expected", [
    ("auto", "auto"), ("fp8", "fp8_e4m3"), ("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "fp8_e5m2"),
    ("bfloat16", "auto")])  # the model's own dtype is "auto"
def test_kv_cache_dtype_names(name, expected):
    assert backend(kv_cache_dtype=name).config.kv_cache_dtype == expected


def test_name_errors_name_the_value_and_the_choices():
    with pytest.raises(ValueError, match=r"dtype 'float32' is not supported; supported: "
                                         r"float16 \(fp16, half\), bfloat16"):
        backend(dtype="float32")
    with pytest.raises(ValueError, match=r"kv_cache_dtype 'int8' is not supported; supported: "
                                         r"auto .*fp8 \(= fp8_e4m3\), fp8_e4m3, fp8_e5m2"):
        backend(kv_cache_dtype="int8")
    with pytest.raises(ValueError, match=r"kv_cache_dtype 'float16' .*auto \(the model's dtype "
                                         r"bfloat16\)"):
        backend(kv_cache_dtype="float16")
    with pytest.raises(ValueError, match=r"layout 'NDH' is not supported; supported: 'NHD'"):
        backend(layout="NDH")


def test_type_errors_name_the_argument():
    with pytest.raises(TypeError, match=r"num_heads must be an int, got '32' \(str\)"):
        backend(num_heads="32")
    with pytest.raises(TypeError, match=r"head_size must be an int, got 128.0 \(float\)"):
        backend(head_size=128.0)
    with pytest.raises(TypeError, match=r"max_num_seqs must be an int, got True"):
        backend(max_num_seqs=True)
    with pytest.raises(TypeError, match=r"soft_cap must be a number"):
        backend(soft_cap="30")
    with pytest.raises(ValueError, match=r"scale nan is not allowed"):
        backend(scale=float("nan"))
    with pytest.raises(ValueError, match=r"arch -1 is out of range; allowed: >= 0"):
        backend(arch=-1)
    with pytest.raises(TypeError):  # keyword-only: no positional configuration
        graphattn.AttentionBackend(32, 8, 128)


@pytest.mark.parametrize("overrides,message", [
    (dict(head_size=100), "head size 100 is not supported; supported: 32, 40, ..., 256"),
    (dict(num_heads=30), "num_heads 30 and num_kv_heads 8 are not supported"),
    (dict(block_size=24), "block size 24 is not supported; supported: 16, 32, ..., 256"),
    (dict(window=-1), "window -1 is not supported"),
    (dict(soft_cap=-1.0), "soft_cap -1.0"),
    (dict(max_model_len=0), "max_model_len 0 is not supported; supported: >= 1"),
    (dict(max_num_seqs=70000), "max_num_seqs 70000 is not supported; supported: 1..65535"),
    (dict(kv_cache_dtype="fp8", k_scale=0.0), "for an fp8 KV cache; supported: finite > 0"),
])
def test_library_rejects_bad_configurations(overrides, message):
    with pytest.raises(graphattn.GraphattnError) as info:
        backend(**overrides)
    assert message in info.value.message
    assert info.value.status_name.startswith("GRAPHATTN_ERROR")
    assert not isinstance(info.value, graphattn.CompileError)


def test_arch_zero_needs_a_gpu():
    if graphattn.gpu_available():
        pytest.skip("a GPU is present: arch 0 resolves to it")
    with pytest.raises(graphattn.GraphattnError, match="libcuda|driver|device"):
        backend(arch=0)


def test_prepare_and_workspace_need_a_gpu(tmp_path):
    b = backend()
    with pytest.raises(graphattn.GraphattnError, match="prepare"):
        b.workspace_bytes()  # valid after prepare() only
    with pytest.raises(TypeError, match="cache must be a graphattn.cache.KernelCache"):
        b.prepare(cache=str(tmp_path))
    if graphattn.gpu_available():
        pytest.skip("a GPU is present: prepare() would succeed")
    with pytest.raises(graphattn.GraphattnError, match="libcuda|driver"):
        b.prepare(graphattn.KernelCache(dir=str(tmp_path / "cache")))


def test_error_classes():
    e = graphattn.CompileError("log")
    assert isinstance(e, graphattn.GraphattnError) and isinstance(e, RuntimeError)
    assert e.status_name == "GRAPHATTN_ERROR_COMPILE"
    assert str(graphattn.GraphattnError("x", 2)) == "x (GRAPHATTN_ERROR_INVALID_ARGUMENT)"


# ---- fp8 scales in device memory

def test_device_scales_default_to_none_and_take_only_cuda_scalars():
    c = backend(kv_cache_dtype="fp8_e4m3").config
    assert (c.k_scale_device, c.v_scale_device) == (None, None)
    np = pytest.importorskip("numpy")
    host = np.ones(1, dtype=np.float32)  # host memory: refused before the library sees it
    with pytest.raises(ValueError, match="k_scale_device .* supported: a one-element float32 "
                                         "CUDA tensor"):
        backend(kv_cache_dtype="fp8_e4m3", k_scale_device=host)
    with pytest.raises(ValueError, match="v_scale_device"):
        backend(kv_cache_dtype="fp8_e4m3", v_scale_device=np.ones(2, dtype=np.float32))


def test_calc_kv_scales_checks_its_arguments():
    from graphattn import ops
    assert (ops.K_SCALE_DIVISOR, ops.V_SCALE_DIVISOR) == (200.0, 100.0)
    np = pytest.importorskip("numpy")
    key = np.zeros((4, 2, 128), dtype=np.float16)
    scale = np.zeros(1, dtype=np.float32)
    with pytest.raises(Exception, match="key"):  # host arrays: the library names the tensor
        ops.calc_kv_scales(key, key, scale, scale)
    with pytest.raises(ValueError, match="k_divisor"):
        ops.calc_kv_scales(key, key, scale, scale, k_divisor=float("inf"))


# ---- attention types and multi-token decode

SPECS = ("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90",
         "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90",
         "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90")


@pytest.mark.parametrize("name,expected,suffixes", [
    ("decoder", "decoder", ("", "", "")),
    ("encoder", "encoder", ("", "", "_nc")),
    ("ENCODER_DECODER", "encoder_decoder", ("", "", "_nc")),
    (" encoder_only ", "encoder_only", None),  # its one kernel, below
])
def test_attn_type_reaches_the_library(name, expected, suffixes):
    b = backend(attn_type=name)
    assert b.config.attn_type == expected
    assert b.config.decode_query_len == 1
    if suffixes is None:  # no cache, no decodes: the dense non-causal prefill alone
        assert b.required_specs() == ["prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90_nc_dense"]
    else:
        # and the mixed graphs' decodes with device-chosen splits (divisor 0, the default), one
        # planning two blocks an SM for long decodes (_dsp_long, the default)
        assert b.required_specs() == [s + x for s, x in zip(SPECS, suffixes)] + [
            SPECS[1] + suffixes[1] + "_dsp", SPECS[1] + suffixes[1] + "_dsp_long"]


@pytest.mark.parametrize("n", [2, 4, 16])
def test_decode_query_len_selects_the_multi_token_decode(n):
    b = backend(decode_query_len=n)
    assert (b.config.decode_query_len, b.config.attn_type) == (n, "decoder")
    assert b.required_specs() == [SPECS[0], SPECS[1] + "_mt", SPECS[2]]
    # Cross attention with speculative decodes: a multi-token decode, a non-causal prefill.
    b = backend(attn_type="encoder_decoder", decode_query_len=n)
    assert (b.config.decode_query_len, b.config.attn_type) == (n, "encoder_decoder")
    assert b.required_specs() == [SPECS[0], SPECS[1] + "_mt", SPECS[2] + "_nc"]


def test_attn_type_and_decode_query_len_defaults():
    b = backend()
    assert (b.config.attn_type, b.config.decode_query_len) == ("decoder", 1)
    assert b.required_specs() == list(SPECS) + [SPECS[1] + "_dsp", SPECS[1] + "_dsp_long"]
    # The ctypes struct is the C struct: graphattn_layer_config_init writes its sizeof, which
    # the last field (decode_query_len, after v_scale_device) reaches.
    import ctypes
    from graphattn import _lib
    c = _lib.LayerConfig()
    _lib.lib.graphattn_layer_config_init(ctypes.byref(c))
    assert c.struct_size == ctypes.sizeof(_lib.LayerConfig)
    fields = [name for name, _ in _lib.LayerConfig._fields_]
    at = fields.index("k_scale_device")
    assert fields[at:at + 9] == [
        "k_scale_device", "v_scale_device", "decode_query_len", "blocksparse_block_size",
        "blocksparse_local_blocks", "blocksparse_vert_stride", "blocksparse_head_sliding_step",
        "blocksparse_active_head_offset", "softmax_lse"]
    assert (c.attn_type, c.decode_query_len) == (0, 1)
    # LayerConfig's new fields come last, with defaults: positional construction still works.
    import dataclasses
    names = [f.name for f in dataclasses.fields(graphattn.LayerConfig)]
    assert names[-4:] == ["attn_type", "decode_query_len", "blocksparse", "softmax_lse"]
    old = graphattn.LayerConfig(*dataclasses.astuple(b.config)[:-4])
    assert (old.attn_type, old.decode_query_len) == ("decoder", 1)
    assert old == b.config


def test_bad_attn_types_and_decode_query_lens_name_the_value():
    allowed = r"supported: 'decoder', 'encoder', 'encoder_only', 'encoder_decoder'"
    with pytest.raises(ValueError, match=r"attn_type 'causal' is not supported; " + allowed):
        backend(attn_type="causal")
    with pytest.raises(ValueError, match=r"attn_type 0 is not supported; " + allowed):
        backend(attn_type=0)  # the names, not the C enum's values
    with pytest.raises(ValueError, match=r"attn_type None is not supported"):
        backend(attn_type=None)
    with pytest.raises(TypeError, match=r"decode_query_len must be an int, got '4' \(str\)"):
        backend(decode_query_len="4")
    with pytest.raises(TypeError, match=r"decode_query_len must be an int, got 4.0 \(float\)"):
        backend(decode_query_len=4.0)
    # The range is the library's (one place): it names the value and 1..16.
    for n in (0, 17, -1):
        with pytest.raises(graphattn.GraphattnError) as info:
            backend(decode_query_len=n)
        assert ("decode_query_len %d is not supported; supported: 1..16" % n
                in info.value.message)
    # Non-causal types take no window.
    with pytest.raises(graphattn.GraphattnError,
                       match="window 64 is not supported for attn_type encoder "):
        backend(attn_type="encoder", window=64)


def test_dense_attention_ops_check_their_arguments():
    from conftest import fake_cuda
    from graphattn import _dlpack, ops
    assert {"encoder_attention", "multi_head_attention"} <= set(ops.__all__)
    np = pytest.importorskip("numpy")
    q, kv = np.zeros((6, 8, 64), np.float16), np.zeros((6, 2, 64), np.float16)
    qsl = np.array([0, 2, 6], np.int32)
    # Host arrays: the library names the first tensor that is not in CUDA memory.
    with pytest.raises(graphattn.GraphattnError, match=r"query is on device type 1 \(CPU\); "
                                                       r"graphattn needs CUDA device memory"):
        ops.encoder_attention(q, kv, kv, q, qsl, 4)
    cq, ckv = fake_cuda((6, 8, 64)), fake_cuda((6, 2, 64))
    with pytest.raises(graphattn.GraphattnError, match=r"value is on device type 1 \(CPU\)"):
        ops.encoder_attention(cq, ckv, kv, cq, qsl, 4)
    with pytest.raises(graphattn.GraphattnError, match=r"query_start_loc is on device type 1"):
        ops.encoder_attention(cq, ckv, ckv, cq, qsl, 4)
    q4, kv4 = np.zeros((2, 3, 8, 64), np.float16), np.zeros((2, 5, 2, 64), np.float16)
    with pytest.raises(graphattn.GraphattnError, match=r"q is on device type 1 \(CPU\)"):
        ops.multi_head_attention(q4, kv4, kv4, q4)
    cq4 = fake_cuda((2, 3, 8, 64))
    with pytest.raises(graphattn.GraphattnError, match=r"out is on device type 1 \(CPU\)"):
        ops.multi_head_attention(cq4, fake_cuda((2, 5, 2, 64)), fake_cuda((2, 5, 2, 64)), q4)
    # The default scale needs the head size, so the query's rank is checked here.
    with pytest.raises(ValueError, match=r"query must be 3-d \[num_tokens, num_heads, "
                                         r"head_size\], got shape \(6, 512\)"):
        ops.encoder_attention(fake_cuda((6, 512)), ckv, ckv, cq, qsl, 4)
    with pytest.raises(ValueError, match=r"q must be 4-d \[batch, q_len, num_heads, "
                                         r"head_size\], got shape \(6, 8, 64\)"):
        ops.multi_head_attention(cq, ckv, ckv, cq)
    with pytest.raises(ValueError, match=r"scale nan is not allowed"):
        ops.encoder_attention(cq, ckv, ckv, cq, qsl, 4, scale=float("nan"))
    with pytest.raises(TypeError, match=r"max_query_len must be an int"):
        ops.encoder_attention(cq, ckv, ckv, cq, qsl, 4.0)
    # Per-head arrays: float32 CUDA arrays of num_heads (8) values.
    with pytest.raises(ValueError, match=r"sinks must be a contiguous float32 array of "
                                         r"num_heads \(8\) values"):
        ops.encoder_attention(cq, ckv, ckv, cq, qsl, 4,
                              sinks=fake_cuda((4,), (_dlpack.FLOAT, 32, 1)))
    with pytest.raises(ValueError, match=r"alibi_slopes must be in CUDA device memory"):
        ops.encoder_attention(cq, ckv, ckv, cq, qsl, 4, alibi_slopes=np.zeros(8, np.float32))
    # Well-formed (fake) CUDA tensors reach the C++ checks, which run before any device use:
    # each argument arrives in its place.
    i32 = (_dlpack.INT, 32, 1)
    cqsl = fake_cuda((3,), i32)
    with pytest.raises(graphattn.GraphattnError, match=r"max_query_len -1 must be >= 0"):
        ops.encoder_attention(cq, ckv, ckv, cq, cqsl, -1)
    with pytest.raises(graphattn.GraphattnError, match=r"scale -0.500000 must be finite and > 0"):
        ops.encoder_attention(cq, ckv, ckv, cq, cqsl, 4, scale=-0.5)
    with pytest.raises(graphattn.GraphattnError, match=r"scale -0.500000 must be finite and > 0"):
        ops.multi_head_attention(cq4, fake_cuda((2, 5, 2, 64)), fake_cuda((2, 5, 2, 64)), cq4,
                                 scale=-0.5)
    with pytest.raises(graphattn.GraphattnError, match=r"must agree in batch"):
        ops.multi_head_attention(cq4, fake_cuda((3, 5, 2, 64)), fake_cuda((3, 5, 2, 64)), cq4)
    if graphattn.gpu_available():
        return  # past the checks the kernel would run on the fake addresses
    # Past every check, the kernel needs the device.
    with pytest.raises(graphattn.GraphattnError, match=r"libcuda|driver|no GPU"):
        ops.encoder_attention(cq, ckv, ckv, cq, cqsl, 4)
    with pytest.raises(graphattn.GraphattnError, match=r"libcuda|driver|no GPU"):
        ops.multi_head_attention(cq4, fake_cuda((2, 5, 2, 64)), fake_cuda((2, 5, 2, 64)), cq4)


# ---- block copies

def test_swap_and_copy_blocks_check_their_arguments():
    from graphattn import ops
    np = pytest.importorskip("numpy")
    src = np.zeros((4, 16, 2, 64), dtype=np.float16)
    dst = np.zeros((2, 16, 2, 64), dtype=np.float16)
    # Host caches are allowed for swap_blocks: the library checks the pairs before any copy.
    with pytest.raises(graphattn.GraphattnError,
                       match=r"swap_blocks: block mapping pair 1 \(3 -> 2\) is out of range; "
                             r"allowed: source blocks 0..3, destination blocks 0..1"):
        ops.swap_blocks(src, dst, np.array([[0, 1], [3, 2]], dtype=np.int64))
    with pytest.raises(graphattn.GraphattnError, match="one dtype and one block layout"):
        ops.swap_blocks(src, np.zeros((2, 16, 2, 32), dtype=np.float16), [(0, 0)])
    with pytest.raises(ValueError, match=r"block_mapping\[1\] is \[3\]; each entry is a "
                                         r"\(src, dst\) pair"):
        ops.swap_blocks(src, dst, [[0, 1], [3]])
    with pytest.raises(TypeError, match=r"block_mapping\[0\]\[1\] must be an int"):
        ops.swap_blocks(src, dst, [[0, 1.5]])

    class DeviceMapping:
        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(ValueError, match="block_mapping must be on the host"):
        ops.swap_blocks(src, dst, DeviceMapping())
    # copy_blocks works in device memory only, and names the cache.
    with pytest.raises(ValueError, match=r"value_caches\[0\] must be in CUDA device memory"):
        ops.copy_blocks([], [src], [(0, 1)])


def test_mixed_branches_setter_and_getter(monkeypatch):
    # The mode a backend starts with: GRAPHATTN_MIXED_BRANCHES, else prefill-first.
    monkeypatch.delenv("GRAPHATTN_MIXED_BRANCHES", raising=False)
    b = backend()
    assert b.mixed_branches == "prefill-first"
    # From the library's enumerator (graphattn_mixed_branches_name), in its order.
    assert graphattn.AttentionBackend.MIXED_BRANCHES == (
        "off", "serial-prefill-first", "decode-first", "prefill-first", "decode-first-high",
        "prefill-first-high")
    for mode in graphattn.AttentionBackend.MIXED_BRANCHES:
        assert b.set_mixed_branches(mode) is b
        assert b.mixed_branches == mode
    monkeypatch.setenv("GRAPHATTN_MIXED_BRANCHES", "decode-first-high")
    assert backend().mixed_branches == "decode-first-high"
    b.set_mixed_branches("off")
    for bad in ("prefill_first", "", "default", "OFF"):
        with pytest.raises(ValueError, match="'%s' is not a mode; allowed: off, " % bad):
            b.set_mixed_branches(bad)
        assert b.mixed_branches == "off"  # kept
    with pytest.raises(TypeError, match="must be a str"):
        b.set_mixed_branches(None)
    # The library's own check (behind Python's), through the C ABI.
    with pytest.raises(graphattn.GraphattnError,
                       match='mixed branches mode "serial" is not a mode; allowed: off, '
                             'serial-prefill-first, decode-first, prefill-first, '
                             'decode-first-high, prefill-first-high'):
        graphattn._lib.check(graphattn._lib.lib.graphattn_backend_set_mixed_branches(
            b._handle, b"serial"))
    assert b.mixed_branches == "off"
