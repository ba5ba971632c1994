# SPDX-License-Identifier: Apache-2.0
"""DLPack conversion and the checks that run before any GPU work, with NumPy arrays (host
memory): the C ABI converts every tensor before anything else, so a backend created for sm_90
and never prepared reports them. CPU only (the PyTorch comparison runs where torch is
installed)."""

import ctypes
import gc

import pytest

import graphattn
from conftest import fake_cuda
from graphattn import _device, _dlpack, ops

np = pytest.importorskip("numpy", reason="the DLPack tests use NumPy arrays")


def test_struct_layout_is_dlpack_0_6():
    T = _dlpack.DLTensor
    assert ctypes.sizeof(_dlpack.DLDevice) == 8 and ctypes.sizeof(_dlpack.DLDataType) == 4
    assert [(name, getattr(T, name).offset) for name, _ in T._fields_] == [
        ("data", 0), ("device", 8), ("ndim", 16), ("dtype", 20), ("shape", 24),
        ("strides", 32), ("byte_offset", 40)]
    assert ctypes.sizeof(T) == 48
    assert _dlpack.DLManagedTensor.manager_ctx.offset == 48
    assert ctypes.sizeof(_dlpack.DLManagedTensor) == 64


def test_numpy_array_through_the_capsule():
    base = np.arange(2 * 3 * 4, dtype=np.float16).reshape(2, 3, 4)
    view = base.transpose(1, 0, 2)[1:]  # [2, 2, 4], non-compact, offset
    arg = _dlpack.to_dl(view, "x")
    assert arg.shape == (2, 2, 4)
    assert arg.strides == tuple(s // 2 for s in view.strides) == (4, 12, 1)
    assert arg.dtype == (_dlpack.FLOAT, 16, 1) and arg.dtype_name == "float16"
    assert arg.device == (_dlpack.CPU, 0)
    assert arg.address == view.__array_interface__["data"][0]
    assert not arg.is_compact() and arg.numel() == 16
    assert _dlpack.to_dl(arg, "x") is arg  # already converted
    compact = _dlpack.to_dl(np.zeros((3, 5), np.int32), "y")
    assert compact.is_compact() and compact.itemsize == 4


def test_capsule_keeps_the_memory_alive():
    x = np.full(1000, 7.0, dtype=np.float32)
    arg = _dlpack.to_dl(x, "x")
    del x
    gc.collect()
    assert ctypes.cast(arg.address, ctypes.POINTER(ctypes.c_float))[999] == 7.0


def test_reshaped_view():
    x = np.zeros((4, 6), np.float16)
    arg = _dlpack.reshaped(_dlpack.to_dl(x, "x"), (2, 4, 6), (0, 6, 1))
    assert arg.shape == (2, 4, 6) and arg.strides == (0, 6, 1) and arg.address == \
        x.__array_interface__["data"][0]


@pytest.fixture(scope="module")
def unprepared():
    """A backend for sm_90 that was never prepared, and a batch of host arrays."""
    b = graphattn.AttentionBackend(num_heads=32, num_kv_heads=8, head_size=128,
                                   max_model_len=4096, max_num_seqs=16, arch=90)
    i32 = np.zeros(5, np.int32)
    meta = graphattn.AttentionMetadata(
        query_start_loc=i32, seq_lens=i32[:4], block_table=np.zeros((4, 8), np.int32),
        slot_mapping=np.zeros(4, np.int64), num_reqs=4, num_actual_tokens=4, max_query_len=1,
        max_seq_len=10, num_decodes=4)
    kv = np.zeros((2, 8, 16, 8, 128), np.float16)
    return b, meta, kv


def forward_error(unprepared, query, **kw):
    b, meta, kv = unprepared
    with pytest.raises(graphattn.GraphattnError) as info:
        b.forward(query, kw.get("key"), kw.get("value"), kw.get("kv_cache", kv),
                  kw.get("output", np.zeros((4, 32, 128), np.float16)), meta, None)
    return info.value


def test_float64_is_a_dtype_error(unprepared):
    e = forward_error(unprepared, np.zeros((4, 32, 128), np.float64))
    assert "query has dtype float64" in e.message and "supported: float16, bfloat16" in e.message
    assert e.status_name == "GRAPHATTN_ERROR_INVALID_ARGUMENT"


def test_seven_dims_is_an_ndim_error(unprepared):
    e = forward_error(unprepared, np.zeros((1,) * 7, np.float16))
    assert "query has ndim 7; supported: 0..6" in e.message


def test_host_memory_is_refused(unprepared):
    e = forward_error(unprepared, np.zeros((4, 32, 128), np.float16))
    assert "query is on device type 1 (CPU); graphattn needs CUDA device memory" in e.message


def test_every_tensor_is_converted_and_named(unprepared):
    b, _, _ = unprepared
    i32, i64, f64 = (_dlpack.INT, 32, 1), (_dlpack.INT, 64, 1), (_dlpack.FLOAT, 64, 1)
    q, kv = fake_cuda((4, 32, 128)), fake_cuda((2, 8, 16, 8, 128))
    meta = graphattn.AttentionMetadata(
        query_start_loc=fake_cuda((5,), i32), seq_lens=fake_cuda((4,), i32),
        block_table=fake_cuda((4, 8), i32), slot_mapping=fake_cuda((4,), i64), num_reqs=4,
        num_actual_tokens=4, max_query_len=1, max_seq_len=10, num_decodes=4)
    with pytest.raises(graphattn.GraphattnError, match="kv_cache has dtype float64"):
        b.forward(q, None, None, fake_cuda((2, 8, 16, 8, 128), f64), q, meta, None)
    with pytest.raises(graphattn.GraphattnError, match="output has dtype float64"):
        b.forward(q, None, None, kv, fake_cuda((4, 32, 128), f64), meta, None)
    with pytest.raises(graphattn.GraphattnError, match="key has ndim 7"):
        b.forward(q, fake_cuda((1,) * 7), q, kv, q, meta, None)
    bad_meta = graphattn.AttentionMetadata(**dict(vars(meta), seq_lens=np.zeros(4, np.int32)))
    with pytest.raises(graphattn.GraphattnError, match="seq_lens is on device type 1 \\(CPU\\)"):
        b.forward(q, None, None, kv, q, bad_meta, None)
    # Everything converts: the backend itself refuses, since it was never prepared.
    with pytest.raises(graphattn.GraphattnError, match="call prepare\\(\\) before the first forward"):
        b.forward(q, None, None, kv, q, meta, fake_cuda((1024,), (_dlpack.UINT, 8, 1)))


def test_non_dlpack_objects_are_type_errors(unprepared):
    b, meta, kv = unprepared
    with pytest.raises(TypeError, match=r"query: expected an array with __dlpack__ .* got object"):
        b.forward(object(), None, None, kv, kv, meta, None)
    with pytest.raises(TypeError, match=r"query: expected an array .* got list"):
        b.forward([[1.0]], None, None, kv, kv, meta, None)
    with pytest.raises(TypeError, match="metadata must be a graphattn.AttentionMetadata"):
        b.forward(kv, None, None, kv, kv, {"num_reqs": 1}, None)
    with pytest.raises(ValueError, match="key and value must both be tensors or both be None"):
        b.forward(kv, kv, None, kv, kv, meta, None)
    with pytest.raises(ValueError, match=r"workspace \(float16\) needs CUDA device memory"):
        b.forward(kv, None, None, kv, kv, meta, np.zeros(16, np.float16))
    with pytest.raises(TypeError, match="metadata.num_reqs must be an int"):
        bad = graphattn.AttentionMetadata(meta.query_start_loc, meta.seq_lens,
                                          meta.block_table, None, num_reqs="4",
                                          num_actual_tokens=4, max_query_len=1, max_seq_len=1)
        b.forward(np.zeros((4, 32, 128), np.float16), None, None, kv,
                  np.zeros((4, 32, 128), np.float16), bad, None)


# ---- graphattn.ops: the Python-side checks ---------------------------------------------------

def cache_halves(layout="NHD", dtype=np.float16):
    kv = np.zeros((2, 6, 16, 4, 64), dtype)
    if layout == "HND":
        kv = np.zeros((2, 6, 4, 16, 64), dtype).transpose(0, 1, 3, 2, 4)
    return kv, kv[0], kv[1]


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_paired_kv_cache_over_the_two_halves(layout):
    kv, k, v = cache_halves(layout)
    pair = ops.paired_kv_cache(_dlpack.to_dl(k, "k"), _dlpack.to_dl(v, "v"))
    assert pair.shape == kv.shape
    assert pair.strides == tuple(s // 2 for s in kv.strides)
    assert pair.address == kv.__array_interface__["data"][0]
    assert ops._layout_of(_dlpack.to_dl(k, "k")) == (0 if layout == "NHD" else 1)


def test_paired_kv_cache_refusals():
    kv, k, v = cache_halves()
    as_dl = _dlpack.to_dl
    raw = np.zeros(kv.nbytes + 2, np.uint8)
    halves = raw[:kv.nbytes].view(np.float16).reshape(kv.shape)
    shifted = raw[1:1 + kv.nbytes].view(np.float16).reshape(kv.shape)[1]  # one byte further
    with pytest.raises(ValueError, match=r"value_cache starts %d bytes after key_cache, not a "
                                         r"whole number of float16 elements" % (k.nbytes + 1)):
        ops.paired_kv_cache(as_dl(halves[0], "k"), as_dl(shifted, "v"))
    with pytest.raises(ValueError, match="must have the same shape and strides"):
        ops.paired_kv_cache(as_dl(k, "k"), as_dl(v[:3], "v"))
    with pytest.raises(ValueError, match="must have one dtype and device"):
        ops.paired_kv_cache(as_dl(k, "k"), as_dl(v.astype(np.float32), "v"))
    with pytest.raises(ValueError, match=r"must be 4-d \[num_blocks, block_size, num_kv_heads, "
                                         r"head_size\], got shapes \(2, 6, 16, 4, 64\)"):
        ops.paired_kv_cache(as_dl(kv, "k"), as_dl(kv, "v"))


def test_reshape_and_cache_flash_reaches_the_library():
    kv, k, v = cache_halves()
    key = np.zeros((5, 4, 64), np.float16)  # padded: 5 rows, 3 slots
    slots = np.array([0, 17, -1], np.int64)
    with pytest.raises(graphattn.GraphattnError, match="needs CUDA device memory"):
        ops.reshape_and_cache_flash(key, key, k, v, slots, "auto", 1.0, 1.0)
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp4' is not supported"):
        ops.reshape_and_cache_flash(key, key, k, v, slots, "fp4", 1.0, 1.0)
    # float32 keys pass the face (vLLM's float32 caches); these host arrays stop at the library.
    with pytest.raises(graphattn.GraphattnError, match="needs CUDA device memory"):
        ops.reshape_and_cache_flash(key.astype(np.float32), key, k, v, slots, "auto", 1.0, 1.0)
    with pytest.raises(ValueError, match=r"key dtype int32 is not supported; supported: float16, "
                                         r"bfloat16, float32"):
        ops.reshape_and_cache_flash(key.astype(np.int32), key, k, v, slots, "auto", 1.0, 1.0)
    with pytest.raises(ValueError, match=r"k_scale holds different values"):
        ops.reshape_and_cache_flash(key, key, k, v, slots, "fp8",
                                    np.array([1.0, 2.0], np.float32), 1.0)


def test_reshape_and_cache_legacy_reaches_the_library():
    key = np.zeros((3, 4, 64), np.float16)
    key_cache = np.zeros((6, 4, 8, 16, 8), np.float16)  # x = 8
    value_cache = np.zeros((6, 4, 64, 16), np.float16)
    slots = np.array([0, 17, -1], np.int64)
    with pytest.raises(graphattn.GraphattnError, match="key is on device type 1"):
        ops.reshape_and_cache(key, key, key_cache, value_cache, slots, "auto", 1.0, 1.0)
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp4' is not supported"):
        ops.reshape_and_cache(key, key, key_cache, value_cache, slots, "fp4", 1.0, 1.0)


def test_forward_prefix_reaches_the_library():
    q = np.zeros((3, 8, 64), np.float16)
    key = np.zeros((3, 4, 64), np.float16)
    key_cache = np.zeros((6, 4, 8, 16, 8), np.float16)  # x = 8
    value_cache = np.zeros((6, 4, 64, 16), np.float16)
    table = np.zeros((1, 2), np.int32)
    qsl = np.array([0, 3], np.int32)
    lens = np.array([20], np.int32)

    def call(kv_cache_dtype="auto", alibi=None, out=q, window=None):
        return ops.forward_prefix(q, key, key, kv_cache_dtype, key_cache, value_cache, table, qsl,
                                  lens, 3, alibi, window, 1.0, 1.0, out=out)
    with pytest.raises(graphattn.GraphattnError, match="query is on device type 1"):
        call()
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp4' is not supported"):
        call("fp4")
    with pytest.raises(ValueError, match="alibi_slopes must be in CUDA device memory"):
        call(alibi=np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="out is required for a query of type ndarray"):
        call(out=None)
    with pytest.raises(TypeError, match="sliding_window must be an int"):
        call(window=1.5)


def varlen(**kw):
    kv, k, v = cache_halves()
    args = dict(q=np.zeros((3, 8, 64), np.float16), k=k, v=v, max_seqlen_q=1,
                cu_seqlens_q=np.arange(4, dtype=np.int32), max_seqlen_k=32,
                seqused_k=np.full(3, 5, np.int32), block_table=np.zeros((3, 2), np.int32),
                causal=True, out=np.zeros((3, 8, 64), np.float16))
    args.update(kw)
    return ops.flash_attn_varlen_func(**args)


@pytest.mark.parametrize("kw,message", [
    (dict(alibi_slopes=np.zeros(8, np.float32)), "alibi_slopes must be in CUDA device memory"),
    (dict(softmax_lse=np.zeros((8, 3), np.float32)),
     "softmax_lse=.* is not supported: it is written only with return_softmax_lse=True"),
    (dict(return_attn_probs=True), "return_attn_probs=True is not supported"),
    (dict(block_table=None), "block_table=None is not supported: graphattn runs paged"),
    (dict(cu_seqlens_k=np.arange(4, dtype=np.int32)), "cu_seqlens_k=.*seqused_k"),
    (dict(seqused_k=None), "seqused_k=None is not supported"),
    (dict(s_aux=np.zeros(8, np.float32)), "s_aux must be in CUDA device memory"),
    (dict(dropout_p=0.1), "dropout_p=0.1 is not supported"),
    (dict(max_seqlen_q=4, causal=False, window_size=(8, 0)),
     r"window_size=\(8, 0\) is not supported: non-causal attention \(causal=False\) takes "
     "no sliding window"),
    (dict(window_size=(8, 8)), r"window_size \(8, 8\) is not supported"),
    (dict(window_size=(-5, 0)), r"window_size \(-5, 0\) is not supported"),
    (dict(cp_world_size=2), "cp_world_size=2 is not supported"),
    (dict(num_decodes=4), "num_decodes 4 is out of range; allowed: 0..num_reqs \\(3\\)"),
    (dict(q=np.zeros((3, 8), np.float16)), r"q must be 3-d \[num_tokens, num_heads, "),
    (dict(q=np.zeros((3, 8, 64), np.float32)), "q dtype float32 is not supported"),
    (dict(softcap=-1.0), r"softcap -1.0 is out of range"),
])
def test_flash_attn_varlen_func_refusals(kw, message):
    with pytest.raises(ValueError, match=message):
        varlen(**kw)


def test_flash_attn_varlen_func_reaches_the_library():
    # Every argument check passes; host tensors are refused before a backend is made, with or
    # without a GPU on the machine.
    with pytest.raises(graphattn.GraphattnError, match="q is on device type 1; graphattn needs "
                       "CUDA device memory"):
        varlen(window_size=(127, 0), softcap=30.0, softmax_scale=0.1)


def test_flash_attn_varlen_func_derives_the_configuration(monkeypatch):
    # Everything up to the backend call, observed through a stand-in for the prepared entry.
    seen = {}

    class Backend:
        def forward(self, *args, **kw):
            seen["args"], seen["kw"] = args, kw

    class Entry:
        backend, workspace, max_num_seqs = Backend(), None, 256

    def get_prepared(key, config, num_reqs, like, device_id):
        seen.update(key=key, config=config, num_reqs=num_reqs)
        return Entry

    monkeypatch.setattr(ops, "_get_prepared", get_prepared)
    kv = np.zeros((2, 6, 2, 32, 64), np.float16).transpose(0, 1, 3, 2, 4)  # HND, block 32
    q, out = np.zeros((52, 8, 64), np.float16), np.zeros((52, 8, 64), np.float16)
    qsl, lens = np.array([0, 1, 2, 52], np.int32), np.array([300, 11, 170], np.int32)
    table = np.zeros((3, 10), np.int32)
    r = ops.flash_attn_varlen_func(q, kv[0], kv[1], 50, qsl, 300, seqused_k=lens,
                                   block_table=table, causal=True, window_size=(63, 0),
                                   softcap=15.0, softmax_scale=0.1, out=out, num_decodes=2,
                                   k_descale=np.ones((3, 2), np.float32), fa_version=3)
    assert r is out
    assert seen["config"] == dict(num_heads=8, num_kv_heads=2, head_size=64, block_size=32,
                                  dtype="float16", kv_cache_dtype="auto", layout="HND",
                                  window=64, soft_cap=15.0, scale=0.1, k_scale=1.0,
                                  v_scale=1.0, max_model_len=320, attn_type="decoder",
                                  softmax_lse=False, alibi_slopes=None, sinks=None,
                                  q_descale=None, k_descale=None, v_descale=None)
    assert seen["num_reqs"] == 3 and seen["key"][0] == (_dlpack.CPU, 0)
    q_arg, key, value, cache, out_arg, meta, workspace = seen["args"]
    assert key is None and value is None and workspace is None
    assert seen["kw"] == {"stream": 0, "softmax_lse": None}

    # return_softmax_lse: a backend of the LSE kernels, the given array written, (out, lse).
    lse = np.zeros((8, 52), np.float32)
    r = ops.flash_attn_varlen_func(q, kv[0], kv[1], 50, qsl, 300, seqused_k=lens,
                                   block_table=table, causal=True, out=out,
                                   return_softmax_lse=True, softmax_lse=lse)
    assert r[0] is out and r[1] is lse
    assert seen["config"]["softmax_lse"] is True and seen["kw"]["softmax_lse"] is lse
    assert ("softmax_lse", True) in seen["key"]  # prepared apart from the plain backend
    assert cache.shape == kv.shape and cache.strides == tuple(s // 2 for s in kv.strides)
    assert (meta.num_reqs, meta.num_decodes, meta.num_actual_tokens, meta.max_query_len,
            meta.max_seq_len, meta.slot_mapping) == (3, 2, 52, 50, 300, None)

    # max_seqlen_q == 1: every request is a decode.
    ops.flash_attn_varlen_func(q[:3], kv[0], kv[1], 1, np.arange(4, dtype=np.int32),
                               300, seqused_k=lens, block_table=table, out=out[:3])
    meta = seen["args"][5]
    assert (meta.num_reqs, meta.num_decodes, meta.max_query_len) == (3, 3, 1)
    assert seen["config"]["window"] == 0 and seen["config"]["scale"] is None
    assert seen["config"]["attn_type"] == "decoder"

    # causal=False: prefills through an encoder backend (non-causal prefill); a decode-only
    # batch keeps the decoder one (the same attention).
    ops.flash_attn_varlen_func(q, kv[0], kv[1], 50, qsl, 300, seqused_k=lens, block_table=table,
                               causal=False, out=out)
    assert seen["config"]["attn_type"] == "encoder"
    ops.flash_attn_varlen_func(q[:3], kv[0], kv[1], 1, np.arange(4, dtype=np.int32), 300,
                               seqused_k=lens, block_table=table, causal=False, out=out[:3])
    assert seen["config"]["attn_type"] == "decoder"

    # fp8 through uint8 storage needs the format; float8 codes and descales are read.
    raw = np.zeros((2, 6, 16, 2, 64), np.uint8)
    with pytest.raises(ValueError, match="key_cache is uint8: say how to read it"):
        ops.flash_attn_varlen_func(q[:3], raw[0], raw[1], 1, np.arange(4, dtype=np.int32), 300,
                                   seqused_k=lens, block_table=table, out=out[:3])
    ops.flash_attn_varlen_func(q[:3], raw[0], raw[1], 1, np.arange(4, dtype=np.int32), 300,
                               seqused_k=lens, block_table=table, out=out[:3],
                               kv_cache_dtype="fp8", k_descale=np.full((3, 2), 0.5),
                               v_descale=0.25)
    assert (seen["config"]["kv_cache_dtype"], seen["config"]["k_scale"],
            seen["config"]["v_scale"]) == ("fp8_e4m3", 0.5, 0.25)


def test_window_conversion():
    assert ops._window_of(None) == 0
    assert ops._window_of((-1, -1)) == 0
    assert ops._window_of([127, 0]) == 128  # vLLM passes (sliding_window - 1, 0)
    assert ops._window_of((0, -1)) == 1


def test_stream_handles():
    assert _device.stream_handle(None, [np.zeros(1)]) == 0
    assert _device.stream_handle(1234, []) == 1234

    class TorchLike:
        cuda_stream = 77

    class CupyLike:
        ptr = 88

    assert _device.stream_handle(TorchLike(), []) == 77
    assert _device.stream_handle(CupyLike(), []) == 88
    with pytest.raises(TypeError, match="stream must be None, an int CUstream handle"):
        _device.stream_handle("default", [])
    with pytest.raises(ValueError, match="stream -1 is not a CUstream handle"):
        _device.stream_handle(-1, [])
    assert _dlpack.dlpack_stream(0) == 1 and _dlpack.dlpack_stream(2) == 2
    assert _dlpack.dlpack_stream(0x55aa) == 0x55aa


def test_host_scalar():
    assert _device.host_scalar(0.5, "k_scale") == 0.5
    assert _device.host_scalar(np.full((3, 2), 0.25, np.float32), "k_scale") == 0.25
    with pytest.raises(ValueError, match=r"k_scale holds different values \(1.0, 2.0"):
        _device.host_scalar(np.array([1.0, 2.0]), "k_scale")
    with pytest.raises(TypeError, match="k_scale must be a number or a 1-element tensor"):
        _device.host_scalar(True, "k_scale")
    with pytest.raises(ValueError, match="k_scale is empty"):
        _device.host_scalar(np.zeros(0), "k_scale")


def test_allocation_needs_torch_or_cupy():
    with pytest.raises(TypeError, match="cannot allocate device memory next to a "
                                        "numpy.ndarray"):
        _device.zeros_bytes(np.zeros(1), 16)
    with pytest.raises(TypeError, match="out=None needs a PyTorch or CuPy query"):
        _device.empty_like(np.zeros(1))


# ---- PyTorch's fast path against its DLPack capsule ------------------------------------------

def test_torch_fast_path_matches_the_capsule():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    base = torch.arange(4 * 6 * 8, dtype=torch.float32).reshape(4, 6, 8)
    cases = [base.to(torch.bfloat16), base.to(torch.float16).transpose(0, 1)[2:],
             base.to(torch.int32)[:, 1], base.to(torch.int64), base[1:, ::2]]
    if hasattr(torch, "float8_e4m3fn"):
        fp8 = base.to(torch.float8_e4m3fn)
        fast = _dlpack.to_dl(fp8, "x")
        assert fast.dtype == (_dlpack.FLOAT8_E4M3FN, 8, 1)
    for t in cases:
        fast = _dlpack.to_dl(t, "x")
        slow = _dlpack._from_capsule(t, "x", 0)
        assert fast.keep is not None and slow.keep is not None
        assert (fast.shape, fast.strides, fast.dtype, fast.device, fast.address) == (
            slow.shape, slow.strides, slow.dtype, slow.device, slow.address)
    assert _dlpack.is_torch_tensor(torch.nn.Parameter(base))
    assert not _dlpack.is_torch_tensor(np.zeros(1))
