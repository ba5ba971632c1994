# SPDX-License-Identifier: Apache-2.0
"""vLLM-compatible ops: the names, argument order and semantics of vLLM's
``_custom_ops.reshape_and_cache_flash`` and ``vllm_flash_attn.flash_attn_varlen_func`` (the
paged form vLLM v1's FlashAttention backend calls), so an engine can swap them in; and the
attention of layers without a KV cache: ``encoder_attention`` (vLLM's ENCODER_ONLY layers) and
``multi_head_attention`` (its MultiHeadAttention, for vision encoders); and vLLM's block copies
of paged caches, ``swap_blocks`` and ``copy_blocks``; ``reshape_and_cache`` writes vLLM's legacy
PagedAttention caches, which ``forward_prefix`` (vLLM's PagedAttention.forward_prefix) and
``paged_attention_v1`` / ``v2`` and ``forward_decode`` (vLLM's PagedAttention decode) read.

    from graphattn import ops
    ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, "auto",
                                k_scale, v_scale)
    ops.flash_attn_varlen_func(q, key_cache, value_cache, max_seqlen_q, cu_seqlens_q,
                               max_seqlen_k, seqused_k=seq_lens, causal=True,
                               block_table=block_table, out=out)

Neither synchronizes with the host (except to read a device-tensor scale of an fp8 cache; see
below). flash_attn_varlen_func keeps one prepared backend and one zero-filled workspace per
(device, configuration) in a module cache: the first call of a configuration compiles or loads
its kernels and allocates the workspace, so make one eager call before capturing it in a CUDA
graph (vLLM's warmup run does); the captured call then compiles and allocates nothing.

Scales: k_scale/v_scale and k_descale/v_descale may be floats or device tensors of equal
values (vLLM passes 1-element tensors, or ones expanded to [num_reqs, num_kv_heads]). With an
"auto" cache they are ignored. With an fp8 cache a tensor is read on the host once per call
(one small synchronizing copy), which is refused while the PyTorch stream is capturing a CUDA
graph: pass floats there. q_descale: with a 16-bit query ignored; with an fp8 (e4m3) query,
flash_attn_varlen_func reads q_descale, k_descale and v_descale that are tensors on the device
(one element or [num_reqs, num_kv_heads], FA3's shape; no host copy, so a captured graph follows
new values), floats as per-tensor descales.
"""

import ctypes
import functools
import math
import numbers
import sys
import threading
from typing import Any, Optional, Sequence, Union

from . import _device, _lib, _names, errors
from ._dlpack import (BFLOAT, CUDA_DEVICES, FLOAT, FLOAT8_E4M3FN, FLOAT8_E5M2, UINT, DLArg,
                      make_dltensor, ref_of, reshaped, to_dl, to_dl_optional)
from .backend import AttentionBackend, AttentionMetadata, head_array
from . import _paged_attention
from ._paged_attention import use_paged_attention_v1  # noqa: F401 (re-exported)

__all__ = ["reshape_and_cache_flash", "flash_attn_varlen_func", "clear_cache", "calc_kv_scales",
           "encoder_attention", "multi_head_attention", "swap_blocks", "copy_blocks",
           "reshape_and_cache", "forward_prefix", "paged_attention_v1", "paged_attention_v2",
           "use_paged_attention_v1", "forward_decode"]


Array = Any  # a DLPack array: torch.Tensor, cupy.ndarray, jax.Array, ...
Scale = Union[None, float, Any]  # a float or a one-element array
Stream = Any  # None, an int CUstream, torch.cuda.Stream or cupy.cuda.Stream

_torch_ops = None  # graphattn.torch_ops once it registered torch.ops.graphattn.*


def _use_torch_ops(module):
    """Called by graphattn.torch_ops when it has registered the ops."""
    global _torch_ops
    _torch_ops = module


def _torch_op(fn):
    """fn's ctypes path as ``fn.eager``; the public function calls torch.ops.graphattn.<name>
    instead when the ops are registered, the first argument is a torch tensor (or a list of
    them) and no explicit stream is given, so torch.compile traces one custom op."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        t = _torch_ops
        if t is not None and kwargs.get("stream") is None and args and t.takes(args[0]):
            return getattr(t, name)(*args, **kwargs)
        return fn(*args, **kwargs)

    call.eager = fn
    return call


def _model_dtype(arg, name):
    """graphattn_dtype_t of a 16-bit float DLArg, or ValueError naming its dtype."""
    code, bits, lanes = arg.dtype
    if bits == 16 and lanes == 1 and code == FLOAT:
        return _names.FLOAT16
    if bits == 16 and lanes == 1 and code == BFLOAT:
        return _names.BFLOAT16
    raise ValueError("%s dtype %s is not supported; supported: float16, bfloat16"
                     % (name, arg.dtype_name))


def _cache_kv_dtype(cache, model_dtype, kv_cache_dtype):
    """graphattn_kv_dtype_t of a KV cache DLArg: its float8 type, the model's type (auto), or
    for uint8 storage the kv_cache_dtype name given."""
    code, bits, _ = cache.dtype
    if kv_cache_dtype is not None:
        return _names.parse_kv_dtype(kv_cache_dtype, model_dtype)
    if bits == 8 and code == FLOAT8_E4M3FN:
        return _names.KV_FP8_E4M3
    if bits == 8 and code == FLOAT8_E5M2:
        return _names.KV_FP8_E5M2
    if bits == 8 and code == UINT:
        raise ValueError("key_cache is uint8: say how to read it with kv_cache_dtype= "
                         "('fp8', 'fp8_e4m3' or 'fp8_e5m2'), or pass float8 views")
    return _names.KV_AUTO  # the library checks that it is the model's dtype


def paired_kv_cache(key_cache, value_cache):
    """One 5-d [2, num_blocks, block_size, num_kv_heads, head_size] DLArg over vLLM's two
    cache halves (kv_cache.unbind(0)): same dtype, device, shape and strides, value_cache a
    whole number of elements after key_cache."""
    kc, vc = key_cache, value_cache
    if kc.ndim != 4 or vc.ndim != 4:
        raise ValueError("key_cache and value_cache must be 4-d [num_blocks, block_size, "
                         "num_kv_heads, head_size], got shapes %s and %s" % (kc.shape, vc.shape))
    if kc.dtype != vc.dtype or kc.device != vc.device:
        raise ValueError("key_cache (%s on %s) and value_cache (%s on %s) must have one dtype "
                         "and device" % (kc.dtype_name, kc.device, vc.dtype_name, vc.device))
    if kc.shape != vc.shape or kc.strides != vc.strides:
        raise ValueError("key_cache (shape %s, strides %s) and value_cache (shape %s, strides "
                         "%s) must have the same shape and strides"
                         % (kc.shape, kc.strides, vc.shape, vc.strides))
    delta = vc.address - kc.address
    if delta % kc.itemsize:
        raise ValueError("value_cache starts %d bytes after key_cache, not a whole number of "
                         "%s elements: they must be two halves of one allocation"
                         % (delta, kc.dtype_name))
    return reshaped(kc, (2,) + kc.shape, (delta // kc.itemsize,) + kc.strides)


def _is_tensor(x):
    return x is not None and not isinstance(x, (int, float))


def _fp8_query_scales(q_descale, k_descale, v_descale):
    """An e4m3 query's descales: (config items, descale tensors for the backend). A float or
    None is a per-tensor value (q_scale, k_scale, v_scale); a tensor stays on the device."""
    items = {"q_scale": 1.0 if q_descale is None or _is_tensor(q_descale) else
             _names.float_arg("q_descale", q_descale)}
    for name, x in (("k_scale", k_descale), ("v_scale", v_descale)):
        items[name] = 1.0 if x is None or _is_tensor(x) else _names.float_arg(name, x)
    tensors = tuple(x if _is_tensor(x) else None for x in (q_descale, k_descale, v_descale))
    return items, tensors


def _fp8_scales(kv_dtype, k_scale, v_scale, names):
    if kv_dtype == _names.KV_AUTO:
        return 1.0, 1.0
    k = 1.0 if k_scale is None else _device.host_scalar(k_scale, names[0])
    v = 1.0 if v_scale is None else _device.host_scalar(v_scale, names[1])
    return k, v


@_torch_op
def reshape_and_cache_flash(key: Array, value: Array, key_cache: Array, value_cache: Array,
                            slot_mapping: Array, kv_cache_dtype: str, k_scale: Scale,
                            v_scale: Scale, *, stream: Stream = None) -> None:
    """Writes the new tokens' keys and values into the paged cache (vLLM's op).

    key, value:   [num_tokens, num_kv_heads, head_size] float16/bfloat16/float32; rows past
                  slot_mapping's length (padding) are ignored
    key_cache, value_cache: [num_blocks, block_size, num_kv_heads, head_size] each (the two
                  halves of one [2, ...] allocation; NHD or HND strides)
    slot_mapping: int64 [num_actual_tokens] block * block_size + offset, -1 = skip
    kv_cache_dtype: "auto", "fp8", "fp8_e4m3", "fp8_e5m2"; fp8 caches store value / scale
    stream:       graphattn only: None = the tensors' current stream (see module docs)
    """
    s = _device.stream_handle(stream, (key, key_cache))
    k = to_dl(key, "key", s)
    v = to_dl(value, "value", s)
    slots = to_dl(slot_mapping, "slot_mapping", s)
    cache = paired_kv_cache(to_dl(key_cache, "key_cache", s),
                            to_dl(value_cache, "value_cache", s))
    kv_dtype = _write_kv_dtype(k, kv_cache_dtype)
    k_s, v_s = _fp8_scales(kv_dtype, k_scale, v_scale, ("k_scale", "v_scale"))
    if slots.ndim == 1 and k.ndim == 3 and v.ndim == 3:
        rows = slots.shape[0]  # vLLM: the slot mapping's length is the token count
        if k.shape[0] > rows:
            k = reshaped(k, (rows,) + k.shape[1:], k.strides)
        if v.shape[0] > rows:
            v = reshaped(v, (rows,) + v.shape[1:], v.strides)
    _lib.check(_lib.lib.graphattn_write_kv_cache(k.ref, v.ref, cache.ref, slots.ref, kv_dtype,
                                                 k_s, v_s, s, None))


@_torch_op
def reshape_and_cache(key: Array, value: Array, key_cache: Array, value_cache: Array,
                      slot_mapping: Array, kv_cache_dtype: str, k_scale: Scale, v_scale: Scale,
                      interleaved_v: bool = False, *, stream: Stream = None) -> None:
    """vLLM's reshape_and_cache: the new tokens' keys and values into its legacy PagedAttention
    caches (PagedAttention.write_to_paged_cache).

    key, value:   [num_tokens, num_kv_heads, head_size] float16/bfloat16/float32
    key_cache:    [num_blocks, num_kv_heads, head_size / x, block_size, x], x read from its
                  shape: 8, 16 or 16 bytes of elements (4 for float32); value_cache: [num_blocks,
                  num_kv_heads, head_size, block_size]; both compact
    slot_mapping: int64 [num_tokens] block * block_size + offset, -1 = skip
    kv_cache_dtype: "auto", "fp8", "fp8_e4m3", "fp8_e5m2"; fp8 caches store value / scale
    interleaved_v: vLLM 0.33's argument: True stores value_cache (same shape) as [num_blocks,
                  num_kv_heads, block_size / kx, head_size, kx], kx = 16 bytes of cache
                  elements (block_size a multiple of kx), vLLM's ROCm fused-writer layout
    forward_prefix and paged_attention_v1 / v2 read these caches (not interleaved).
    """
    if not isinstance(interleaved_v, (bool, int)) or isinstance(interleaved_v, float):
        raise ValueError("interleaved_v=%r is not supported; allowed: True or False"
                         % (interleaved_v,))
    s = _device.stream_handle(stream, (key, key_cache))
    k = to_dl(key, "key", s)
    v = to_dl(value, "value", s)
    slots = to_dl(slot_mapping, "slot_mapping", s)
    kc = to_dl(key_cache, "key_cache", s)
    vc = to_dl(value_cache, "value_cache", s)
    kv_dtype = _write_kv_dtype(k, kv_cache_dtype)
    k_s, v_s = _fp8_scales(kv_dtype, k_scale, v_scale, ("k_scale", "v_scale"))
    _lib.check(_lib.lib.graphattn_reshape_and_cache(k.ref, v.ref, kc.ref, vc.ref, slots.ref,
                                                    kv_dtype, k_s, v_s, int(bool(interleaved_v)),
                                                    s, None))


@_torch_op
def forward_prefix(query: Array, key: Optional[Array], value: Optional[Array],
                   kv_cache_dtype: str, key_cache: Array, value_cache: Array, block_tables: Array,
                   query_start_loc: Array, seq_lens: Array, max_query_len: int,
                   alibi_slopes: Optional[Array], sliding_window: Optional[int], k_scale: Scale,
                   v_scale: Scale, *, scale: Optional[float] = None,
                   logits_soft_cap: Optional[float] = None, sinks: Optional[Array] = None,
                   causal: bool = True, out: Optional[Array] = None,
                   stream: Stream = None) -> Array:
    """vLLM's PagedAttention.forward_prefix (chunked prefill, prefix caching) over its legacy
    caches: the q_len new tokens of request r sit at positions seq_lens[r] - q_len ..
    seq_lens[r] - 1 and attend causally to the cached prefix and to themselves.

    Every key and value, the new tokens' included, is read from key_cache / value_cache: write
    the new tokens there first with reshape_and_cache, as vLLM does before forward_prefix. key
    and value are checked (or None) but not read. With a 16-bit cache that is the same data;
    with an fp8 cache the new tokens take part quantized like the prefix
    (fp8(key / k_scale) * k_scale), where vLLM's Triton kernel uses them unquantized.

    query:        [num_tokens, num_heads, head_size] float16/bfloat16
    key, value:   [num_tokens, num_kv_heads, head_size] the query's dtype, or None
    kv_cache_dtype: "auto", "fp8", "fp8_e4m3", "fp8_e5m2"
    key_cache, value_cache: legacy caches as reshape_and_cache's, block_size a multiple of 16
                  (vLLM's 8 is not supported)
    block_tables: int32 [num_reqs, max_blocks_per_seq]
    query_start_loc: int32 [num_reqs + 1]; seq_lens: int32 [num_reqs] prefix + new tokens
    max_query_len: >= every request's query length
    alibi_slopes: float32 CUDA array of num_heads values, or None
    sliding_window: None (or 0): no window; else position p sees keys k with p - k < window
    k_scale, v_scale: fp8 caches: floats or 1-element tensors (read on the host); else ignored
    graphattn only: scale (None: 1/sqrt(head_size)), logits_soft_cap, sinks (float32 [num_heads]),
    causal=False (every new token sees all seq_len keys), out (else a new empty_like(query)),
    stream (None: the tensors' current stream).
    Returns the output [num_tokens, num_heads, head_size].
    """
    if out is None:
        if not hasattr(query, "new_empty"):
            raise ValueError("out is required for a query of type %s (without it graphattn "
                             "allocates through torch's Tensor.new_empty)" % type(query).__name__)
        out = query.new_empty(query.shape)
    s = _device.stream_handle(stream, (query, key_cache))
    q = to_dl(query, "query", s)
    k = None if key is None else to_dl(key, "key", s)
    v = None if value is None else to_dl(value, "value", s)
    kc = to_dl(key_cache, "key_cache", s)
    vc = to_dl(value_cache, "value_cache", s)
    bt = to_dl(block_tables, "block_tables", s)
    qsl = to_dl(query_start_loc, "query_start_loc", s)
    lens = to_dl(seq_lens, "seq_lens", s)
    o = to_dl(out, "out", s)
    _, heads, head_size = _dense_shape(q, "query", ("num_tokens", "num_heads", "head_size"))
    kv_dtype = _names.parse_kv_dtype(kv_cache_dtype, _model_dtype(q, "query"))
    k_s, v_s = _fp8_scales(kv_dtype, k_scale, v_scale, ("k_scale", "v_scale"))
    slopes = head_array(alibi_slopes, "alibi_slopes", heads)
    sink = head_array(sinks, "sinks", heads)
    window = 0 if sliding_window is None else _names.int_arg("sliding_window", sliding_window)
    cap = 0.0 if logits_soft_cap is None else _names.float_arg("logits_soft_cap",
                                                                logits_soft_cap)
    _lib.check(_lib.lib.graphattn_forward_prefix(
        q.ref, ref_of(k), ref_of(v), kv_dtype, kc.ref, vc.ref, bt.ref, qsl.ref, lens.ref,
        _names.int_arg("max_query_len", max_query_len), ref_of(slopes), window, k_s, v_s,
        None, None, _softmax_scale(scale, head_size), cap, ref_of(sink), 1 if causal else 0, o.ref, s,
        None))
    return out


# ---- fp8 scales in device memory

K_SCALE_DIVISOR = 200.0  # vLLM's K_SCALE_CONSTANT
V_SCALE_DIVISOR = 100.0  # vLLM's V_SCALE_CONSTANT


@_torch_op
def calc_kv_scales(key: Array, value: Array, k_scale: Array, v_scale: Array,
                   k_divisor: float = K_SCALE_DIVISOR, v_divisor: float = V_SCALE_DIVISOR, *,
                   stream: Stream = None) -> None:
    """vLLM's Attention.calc_kv_scales on the device, without a host sync: writes
    max(amax(|key|) / k_divisor, 1e-12) into k_scale and likewise for the values.

    key, value:       [num_tokens, num_kv_heads, head_size] float16/bfloat16 (exactly these
                      rows are read: slice off padding first)
    k_scale, v_scale: one-element float32 CUDA tensors, overwritten (e.g. the ones given to
                      AttentionBackend(k_scale_device=, v_scale_device=))
    k_divisor, v_divisor: vLLM's constants by default (200, 100: headroom for later batches
                      when scales are computed once); 448 (e4m3) or 57344 (e5m2) give amax / fp8
                      max
    stream:           None = the tensors' current stream (see module docs)
    Capturable in a CUDA graph after one eager call (which compiles or loads the kernel).
    """
    s = _device.stream_handle(stream, (key, k_scale))
    k = to_dl(key, "key", s)
    v = to_dl(value, "value", s)
    ks = to_dl(k_scale, "k_scale", s)
    vs = to_dl(v_scale, "v_scale", s)
    _lib.check(_lib.lib.graphattn_calc_kv_scales(
        k.ref, v.ref, ks.ref, vs.ref, _names.float_arg("k_divisor", k_divisor),
        _names.float_arg("v_divisor", v_divisor), s, None))


# ---- attention without a KV cache ------------------------------------------------------------

def _dense_shape(arg, name, form):
    """arg's shape, which must have as many dimensions as `form` names (the heads and the head
    size are needed here for the default scale and the per-head arrays)."""
    if arg.ndim != len(form):
        raise ValueError("%s must be %d-d [%s], got shape %s"
                         % (name, len(form), ", ".join(form), arg.shape))
    return arg.shape


def _softmax_scale(scale, head_size):
    return 1.0 / math.sqrt(head_size) if scale is None else _names.float_arg("scale", scale)


@_torch_op
def encoder_attention(query: Array, key: Array, value: Array, output: Array,
                      query_start_loc: Array, max_query_len: int, scale: Optional[float] = None,
                      alibi_slopes: Optional[Array] = None, sinks: Optional[Array] = None, *,
                      stream: Stream = None) -> Array:
    """Encoder-only attention (vLLM's ENCODER_ONLY layers): bidirectional self-attention of
    variable-length sequences over dense keys and values, with no KV cache.

    query, output:   [num_tokens, num_heads, head_size] float16/bfloat16, head dim contiguous;
                     rows past query_start_loc[-1] are not written
    key, value:      [num_tokens, num_kv_heads, head_size] the same dtype, equal strides
                     (num_heads a multiple of num_kv_heads); sequence r's keys are its own
                     tokens, rows query_start_loc[r]..query_start_loc[r + 1]
    query_start_loc: int32 [num_seqs + 1] token offsets of the sequences (device)
    max_query_len:   >= every sequence's length
    scale:           softmax scale, None = 1/sqrt(head_size)
    alibi_slopes, sinks: float32 CUDA arrays of num_heads values, or None (ALiBi: key position
                     - query position)
    stream:          None = the tensors' current stream (see module docs)
    Compiles or loads its kernel on first use (make one eager call before capturing it in a CUDA
    graph); allocates nothing. Returns output.
    """
    s = _device.stream_handle(stream, (query, output))
    q = to_dl(query, "query", s)
    k = to_dl(key, "key", s)
    v = to_dl(value, "value", s)
    out = to_dl(output, "output", s)
    qsl = to_dl(query_start_loc, "query_start_loc", s)
    _, heads, head_size = _dense_shape(q, "query", ("num_tokens", "num_heads", "head_size"))
    slopes = head_array(alibi_slopes, "alibi_slopes", heads)
    sink = head_array(sinks, "sinks", heads)
    _lib.check(_lib.lib.graphattn_encoder_attention(
        q.ref, k.ref, v.ref, out.ref, qsl.ref, _names.int_arg("max_query_len", max_query_len),
        _softmax_scale(scale, head_size), ref_of(slopes), ref_of(sink), s, None))
    return output


@_torch_op
def multi_head_attention(q: Array, k: Array, v: Array, out: Array, scale: Optional[float] = None,
                         *, stream: Stream = None) -> Array:
    """vLLM's MultiHeadAttention (vision encoders): dense, non-causal attention of a uniform
    batch, no KV cache. Query i of batch row b sees all kv_len keys of row b.

    q, out:  [batch, q_len, num_heads, head_size] float16/bfloat16
    k, v:    [batch, kv_len, num_kv_heads, head_size] the same dtype, equal strides (num_heads a
             multiple of num_kv_heads)
    Each must be viewable as [batch * len, heads, head_size] (contiguous tensors, or slices of a
    packed qkv tensor), head dim contiguous.
    scale:   softmax scale, None = 1/sqrt(head_size)
    stream:  None = the tensors' current stream (see module docs)
    Compiles or loads its kernel on first use; allocates nothing. Returns out.
    """
    s = _device.stream_handle(stream, (q, out))
    qa = to_dl(q, "q", s)
    ka = to_dl(k, "k", s)
    va = to_dl(v, "v", s)
    oa = to_dl(out, "out", s)
    head_size = _dense_shape(qa, "q", ("batch", "q_len", "num_heads", "head_size"))[3]
    _lib.check(_lib.lib.graphattn_multi_head_attention(
        qa.ref, ka.ref, va.ref, oa.ref, _softmax_scale(scale, head_size), s, None))
    return out


# ---- flash_attn_varlen_func ------------------------------------------------------------------

class _Prepared:
    __slots__ = ("backend", "workspace", "max_num_seqs")

    def __init__(self, backend, workspace, max_num_seqs):
        self.backend = backend
        self.workspace = to_dl(workspace, "workspace")  # converted once; keeps it alive
        self.max_num_seqs = max_num_seqs


_prepared = {}  # (device, configuration) -> _Prepared
_retired = []   # entries replaced by larger ones: graphs captured earlier still use them
_lock = threading.Lock()


def clear_cache() -> None:
    """Drops every prepared backend and workspace of flash_attn_varlen_func (they are made
    again on the next call). CUDA graphs that captured a call must be gone first: they hold
    the workspace's address."""
    with _lock:
        _prepared.clear()
        del _retired[:]


def _workspace_seqs(num_reqs):
    n = 256
    while n < num_reqs:
        n *= 2
    return n


class _on_device:
    """Makes the framework's device of `x` current while a backend is created (arch 0 reads
    the current device)."""

    def __init__(self, x, device_id):
        self.ctx = None
        if _device._framework(x) == "torch":
            self.ctx = sys.modules["torch"].cuda.device(x.device)
        elif _device._framework(x) == "cupy":
            self.ctx = sys.modules["cupy"].cuda.Device(device_id)
        else:
            _lib.check(_lib.lib.graphattn_ensure_context(device_id))

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _get_prepared(key, config, num_reqs, like, device_id):
    device_type = key[0][0]
    if device_type not in CUDA_DEVICES:
        # Before a backend is made and its workspace allocated next to q: host tensors would
        # fail there with a message about allocation, not about where q lives.
        raise errors.GraphattnError(
            "q is on device type %d; graphattn needs CUDA device memory (kDLCUDA or "
            "kDLCUDAManaged)" % device_type)
    need = _workspace_seqs(num_reqs)
    entry = _prepared.get(key)
    if entry is not None and entry.max_num_seqs >= need:
        return entry
    with _lock:
        entry = _prepared.get(key)
        if entry is not None and entry.max_num_seqs >= need:
            return entry
        if _device.is_capturing([like]):
            raise errors.GraphattnError(
                "flash_attn_varlen_func: this configuration%s was not prepared before CUDA "
                "graph capture; make one eager call with at least %d requests first (it "
                "compiles or loads the kernels and allocates the workspace)"
                % ("" if entry is None else " with %d requests (prepared for %d)"
                   % (num_reqs, entry.max_num_seqs), num_reqs))
        with _on_device(like, device_id):
            backend = AttentionBackend(max_num_seqs=need, **config)
            backend.prepare()
            workspace = backend.allocate_workspace(like)
        if key in _prepared:
            _retired.append(_prepared[key])
        entry = _Prepared(backend, workspace, need)
        _prepared[key] = entry
        return entry


def _window_of(window_size):
    """graphattn's window (tokens seen, 0 = all) from flash-attn's (left, right)."""
    if window_size is None:
        return 0
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError("window_size %r is not supported; allowed: None, (-1, -1) or "
                         "(left, 0) / (left, -1) with left >= 0" % (window_size,)) from None
    if right not in (-1, 0) or left < -1:
        raise ValueError("window_size %r is not supported; allowed: None, (-1, -1) or (left, 0) "
                         "/ (left, -1) with left >= 0 (causal attention sees nothing to the "
                         "right)" % (tuple(window_size),))
    return 0 if left < 0 else left + 1


def _layout_of(cache):
    """NHD or HND from a [num_blocks, block_size, num_kv_heads, head_size] half's strides (the
    library's rule: NHD when both match)."""
    _, bs, nh, hs = cache.shape
    st = cache.strides
    if st[3] == 1 and st[2] == hs and st[1] == nh * hs:
        return _names.NHD
    if st[3] == 1 and st[1] == hs and st[2] == bs * hs:
        return _names.HND
    return _names.NHD  # neither: the library names the strides it got


def _refuse(name, value, why):
    raise ValueError("%s=%r is not supported: %s" % (name, value, why))


@_torch_op
def flash_attn_varlen_func(q: Array, k: Array, v: Array, max_seqlen_q: int, cu_seqlens_q: Array,
                           max_seqlen_k: int, cu_seqlens_k: Optional[Array] = None,
                           seqused_k: Optional[Array] = None, q_v: Optional[Array] = None,
                           dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                           causal: bool = False, window_size: Optional[Sequence[int]] = None,
                           softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
                           deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: Optional[Array] = None,
                           return_softmax_lse: bool = False, out: Optional[Array] = None,
                           scheduler_metadata: Any = None, q_descale: Any = None,
                           k_descale: Scale = None, v_descale: Scale = None,
                           num_splits: int = 0, fa_version: int = 2,
                           s_aux: Optional[Array] = None, cp_world_size: int = 1,
                           cp_rank: int = 0, cp_tot_seqused_k: Any = None, *,
                           num_decodes: Optional[int] = None,
                           kv_cache_dtype: Optional[str] = None,
                           softmax_lse: Optional[Array] = None,
                           stream: Stream = None) -> Any:
    """Paged attention over vLLM's KV cache, as vllm_flash_attn.flash_attn_varlen_func.

    q:             [num_tokens, num_heads, head_size] float16/bfloat16, or float8_e4m3fn
                   (vLLM's quantized query; an fp8 cache and out= in the model's dtype)
    k, v:          the key and value cache halves, [num_blocks, block_size, num_kv_heads,
                   head_size] each (NHD or HND strides), the model's dtype or fp8
    max_seqlen_q:  the longest query; 1 means every request is a decode
    cu_seqlens_q:  int32 [num_reqs + 1] query offsets (device)
    max_seqlen_k:  the longest sequence (<= block_table width * block_size)
    seqused_k:     int32 [num_reqs] sequence lengths (context + new tokens), 0 = padding
    block_table:   int32 [num_reqs, max_blocks_per_seq]
    softmax_scale: None = 1/sqrt(head_size)
    causal:        True: query token i of a request sits at position seq_len - n + i and sees
                   the keys up to it (decoder prefills); False: every query sees all the
                   request's keys (encoder attention; no window then); decodes ignore it
    window_size:   (left, 0) as vLLM passes (sliding_window - 1, 0); None/(-1, -1) = none
    softcap:       logits soft cap, 0 = none
    out:           [num_tokens, num_heads, head_size] like q (None: allocated like q)
    q_descale, k_descale, v_descale: fp8 descales (see the module docs); q_descale is read
                   for an fp8 q only
    num_splits, scheduler_metadata, fa_version, deterministic: accepted and ignored
    num_decodes:   graphattn only: how many leading requests are single-token decodes (run
                   by the split-KV decode kernel) when max_seqlen_q > 1; default 0 (the
                   prefill kernel handles query length 1 correctly)
    kv_cache_dtype: graphattn only: "fp8_e4m3"/"fp8_e5m2" for uint8 cache storage
    return_softmax_lse: also return each query row's softmax log-sum-exp per head (natural log,
                   the sink's term included; -inf for a row that saw no key), float32
                   [num_heads, num_tokens] as FlashAttention returns it: (out, softmax_lse)
    softmax_lse:   graphattn only, with return_softmax_lse: the float32 [num_heads, >= num_tokens]
                   array (rows contiguous) to write it into (None: allocated like q)
    stream:        graphattn only: None = the tensors' current stream
    alibi_slopes and s_aux (attention sinks) are float32 CUDA arrays of num_heads values.
    Returns out, or (out, softmax_lse) with return_softmax_lse. Unsupported features (q_v,
    dropout, return_attn_probs, cu_seqlens_k without a block table, context parallelism) raise
    ValueError.
    """
    if block_table is None:
        _refuse("block_table", None, "graphattn runs paged attention; pass the block table "
                "(non-paged varlen attention with cu_seqlens_k is not implemented)")
    if cu_seqlens_k is not None:
        _refuse("cu_seqlens_k", "<tensor>", "paged attention takes sequence lengths as "
                "seqused_k")
    if seqused_k is None:
        _refuse("seqused_k", None, "pass the sequence lengths (int32 [num_reqs])")
    if q_v is not None:
        _refuse("q_v", "<tensor>", "only MLA uses it; graphattn does not")
    if dropout_p:
        _refuse("dropout_p", dropout_p, "inference only: 0.0")
    if return_attn_probs:
        _refuse("return_attn_probs", True, "graphattn returns the output and (with "
                "return_softmax_lse) the softmax LSE, not the probabilities")
    want_lse = _names.bool_arg("return_softmax_lse", return_softmax_lse)
    if softmax_lse is not None and not want_lse:
        _refuse("softmax_lse", "<tensor>", "it is written only with return_softmax_lse=True")
    if cp_world_size != 1:
        _refuse("cp_world_size", cp_world_size, "context parallelism is not supported: 1")
    max_q = _names.int_arg("max_seqlen_q", max_seqlen_q, 0)
    max_k = _names.int_arg("max_seqlen_k", max_seqlen_k, 0)
    window = _window_of(window_size)
    # causal=False with prefills: every query sees all of its request's keys (vLLM's encoder
    # attention over the paged cache), through an "encoder" backend's non-causal prefill. A
    # decode-only batch is the same either way.
    non_causal = not causal and max_q > 1
    if non_causal and window:
        _refuse("window_size", tuple(window_size), "non-causal attention (causal=False) takes no "
                "sliding window")
    soft_cap = _names.float_arg("softcap", softcap, 0.0)
    scale = None if softmax_scale is None else _names.float_arg("softmax_scale", softmax_scale)

    s = _device.stream_handle(stream, (q,))
    q_arg = to_dl(q, "q", s)
    if q_arg.ndim != 3:
        raise ValueError("q must be 3-d [num_tokens, num_heads, head_size], got shape %s"
                         % (q_arg.shape,))
    key_half = to_dl(k, "k", s)
    cache = paired_kv_cache(key_half, to_dl(v, "v", s))
    qsl = to_dl(cu_seqlens_q, "cu_seqlens_q", s)
    seq_lens = to_dl(seqused_k, "seqused_k", s)
    table = to_dl(block_table, "block_table", s)
    if qsl.ndim != 1 or qsl.shape[0] < 1:
        raise ValueError("cu_seqlens_q must be 1-d [num_reqs + 1], got shape %s" % (qsl.shape,))
    if table.ndim != 2:
        raise ValueError("block_table must be 2-d [num_reqs, max_blocks_per_seq], got shape %s"
                         % (table.shape,))
    num_reqs = qsl.shape[0] - 1
    if max_q == 1:
        decodes = num_reqs if num_decodes is None else _names.int_arg("num_decodes",
                                                                     num_decodes, 0)
    else:
        decodes = 0 if num_decodes is None else _names.int_arg("num_decodes", num_decodes, 0)
    if decodes > num_reqs:
        raise ValueError("num_decodes %d is out of range; allowed: 0..num_reqs (%d)"
                         % (decodes, num_reqs))

    q_fp8 = q_arg.dtype == (FLOAT8_E4M3FN, 8, 1)
    if q_fp8 and out is None:
        _refuse("out", None, "an fp8 query needs out= in the model's dtype (float16/bfloat16)")
    dtype = _model_dtype(to_dl(out, "out", s) if q_fp8 else q_arg, "out" if q_fp8 else "q")
    half = cache.shape[1:]  # num_blocks, block_size, num_kv_heads, head_size
    kv_dtype = _cache_kv_dtype(cache, dtype, kv_cache_dtype)
    descales = (None, None, None)
    if q_fp8:
        q_items, descales = _fp8_query_scales(q_descale, k_descale, v_descale)
        k_s, v_s = q_items["k_scale"], q_items["v_scale"]
    else:
        k_s, v_s = _fp8_scales(kv_dtype, k_descale, v_descale, ("k_descale", "v_descale"))
    block_size = half[1]
    config = dict(num_heads=q_arg.shape[1], num_kv_heads=half[2], head_size=q_arg.shape[2],
                  block_size=block_size, dtype=_names.DTYPE_NAMES[dtype],
                  kv_cache_dtype=_names.KV_DTYPE_NAMES[kv_dtype],
                  layout=_names.LAYOUT_NAMES[_layout_of(key_half)],
                  window=window, soft_cap=soft_cap, scale=scale, k_scale=k_s, v_scale=v_s,
                  max_model_len=max(table.shape[1] * block_size, 1),
                  attn_type="encoder" if non_causal else "decoder", softmax_lse=want_lse)
    if q_fp8:
        config.update(q_dtype="fp8_e4m3", q_scale=q_items["q_scale"])
    # Per-head arrays: a backend reads them on every call, so it is keyed by their addresses and
    # keeps them alive.
    alibi = head_array(alibi_slopes, "alibi_slopes", q_arg.shape[1])
    sinks = head_array(s_aux, "s_aux", q_arg.shape[1])
    descale_args = [to_dl_optional(x, n, s) for x, n in
                    zip(descales, ("q_descale", "k_descale", "v_descale"))]
    key = (q_arg.device,) + tuple(sorted(config.items())) + tuple(
        0 if a is None else a.address for a in (alibi, sinks)) + tuple(
        None if a is None else (a.address, tuple(a.strides))
        for a in descale_args)
    entry = _get_prepared(key, dict(config, alibi_slopes=alibi, sinks=sinks,
                                    q_descale=descales[0], k_descale=descales[1],
                                    v_descale=descales[2]), num_reqs, q, q_arg.device[1])

    if out is None:
        out = _device.empty_like(q)
    if want_lse and softmax_lse is None:
        softmax_lse = _device.empty_float32(q, (q_arg.shape[1], q_arg.shape[0]))
    md = AttentionMetadata(query_start_loc=qsl, seq_lens=seq_lens, block_table=table,
                           slot_mapping=None, num_reqs=num_reqs,
                           num_actual_tokens=q_arg.shape[0],
                           max_query_len=max_q if decodes < num_reqs else 1,
                           max_seq_len=max_k, num_decodes=decodes)
    entry.backend.forward(q_arg, None, None, cache, to_dl(out, "out", s), md, entry.workspace,
                          stream=s, softmax_lse=softmax_lse)
    return (out, softmax_lse) if want_lse else out


# ---- flash_attn_with_kvcache (vLLM's FlashAttention wrapper, decode with appended K/V) ---------

def _kvcache_refusals(rotary_cos, rotary_sin, cache_leftpad, return_softmax_lse, k, v,
                      cache_seqlens):
    """flash_attn_with_kvcache's arguments graphattn does not take, as ValueErrors."""
    if rotary_cos is not None or rotary_sin is not None:
        _refuse("rotary_cos" if rotary_cos is not None else "rotary_sin", "<tensor>",
                "graphattn applies no rotary embedding; rotate q and k before the call")
    if cache_leftpad is not None:
        _refuse("cache_leftpad", "<tensor>", "left-padded caches are not supported")
    if return_softmax_lse:
        _refuse("return_softmax_lse", True, "flash_attn_with_kvcache returns the output only")
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (or both None), got k %s and v %s"
                         % ("None" if k is None else "a tensor", "None" if v is None else
                            "a tensor"))
    if cache_seqlens is None:
        _refuse("cache_seqlens", None, "pass the cached lengths (an int or int32 [batch])")


@_torch_op
def flash_attn_with_kvcache(q: Array, k_cache: Array, v_cache: Array, k: Optional[Array] = None,
                            v: Optional[Array] = None, rotary_cos: Optional[Array] = None,
                            rotary_sin: Optional[Array] = None, cache_seqlens: Any = None,
                            cache_batch_idx: Optional[Array] = None,
                            cache_leftpad: Optional[Array] = None,
                            block_table: Optional[Array] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            window_size: Optional[Sequence[int]] = (-1, -1),
                            softcap: float = 0.0, rotary_interleaved: bool = True,
                            alibi_slopes: Optional[Array] = None, num_splits: int = 0,
                            return_softmax_lse: bool = False, *, out: Optional[Array] = None,
                            fa_version: int = 2, scheduler_metadata: Any = None,
                            q_descale: Any = None, k_descale: Scale = None,
                            v_descale: Scale = None, s_aux: Optional[Array] = None,
                            stream: Stream = None) -> Array:
    """vllm_flash_attn.flash_attn_with_kvcache (the wrapper of vLLM's FlashAttention fork that
    vLLM's V0 FlashAttention backend imported; vLLM 0.33's vllm_flash_attn keeps only
    flash_attn_varlen_func): with
    k and v, writes them into the cache at positions cache_seqlens[b] .. + seqlen_new - 1 of
    each sequence, then attends over cache_seqlens[b] + seqlen_new keys. PyTorch tensors only.

    q:              [batch, seqlen_q, num_heads, head_size] float16/bfloat16
    k_cache, v_cache: with block_table, the paged cache halves [num_blocks, block_size,
                    num_kv_heads, head_size] (NHD or HND strides, two halves of one allocation,
                    block_size a multiple of 16); without, [batch_cache, seqlen_cache,
                    num_kv_heads, head_size] halves (one "block" per sequence, seqlen_cache a
                    multiple of 16), sequence b at row cache_batch_idx[b] (default b)
    k, v:           [batch, seqlen_new, num_kv_heads, head_size] or None (nothing appended)
    cache_seqlens:  int or int32 [batch]: the tokens in the cache before k/v (not updated)
    block_table:    int32 [batch, max_blocks_per_seq]; must hold the appended positions
    causal:         bottom-right aligned (query i at position seqlen_k - seqlen_q + i);
                    seqlen_q == 1 sees every key either way
    window_size, softcap, softmax_scale, alibi_slopes, s_aux, k_descale, v_descale, out: as
                    flash_attn_varlen_func; num_splits, fa_version, scheduler_metadata,
                    q_descale: accepted and ignored
    Refused (ValueError): rotary_cos/rotary_sin, cache_leftpad, return_softmax_lse, cache_batch_idx
    with a block table. Returns out ([batch, seqlen_q, num_heads, head_size]).
    """
    _kvcache_refusals(rotary_cos, rotary_sin, cache_leftpad, return_softmax_lse, k, v,
                      cache_seqlens)
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(q, torch.Tensor):
        raise ValueError("flash_attn_with_kvcache takes PyTorch tensors (its positions and slots "
                         "are computed with torch on q's device); got q of type %s"
                         % type(q).__name__)
    if q.dim() != 4:
        raise ValueError("q must be 4-d [batch, seqlen_q, num_heads, head_size], got shape %s"
                         % (tuple(q.shape),))
    if k_cache.dim() != 4:
        raise ValueError("k_cache must be 4-d ([num_blocks, block_size, num_kv_heads, head_size] "
                         "with block_table, [batch_cache, seqlen_cache, num_kv_heads, head_size] "
                         "without), got shape %s" % (tuple(k_cache.shape),))
    batch, seqlen_q = q.shape[0], q.shape[1]
    device = q.device
    page = k_cache.shape[1]
    if block_table is None:
        rows = (torch.arange(batch, dtype=torch.int32, device=device) if cache_batch_idx is None
                else cache_batch_idx.to(device=device, dtype=torch.int32))
        table = rows.reshape(batch, 1)
    else:
        if cache_batch_idx is not None:
            _refuse("cache_batch_idx", "<tensor>", "a paged cache (block_table) names its blocks "
                    "per sequence already")
        table = block_table
    if isinstance(cache_seqlens, numbers.Integral):
        lens = torch.full((batch,), int(cache_seqlens), dtype=torch.int32, device=device)
    else:
        lens = cache_seqlens.to(dtype=torch.int32)
    seqlen_new = 0
    if k is not None:
        if k.dim() != 4 or v.dim() != 4 or k.shape[0] != batch or v.shape[:2] != k.shape[:2]:
            raise ValueError("k and v must be [batch %d, seqlen_new, num_kv_heads, head_size], "
                             "got shapes %s and %s" % (batch, tuple(k.shape), tuple(v.shape)))
        seqlen_new = k.shape[1]
        pos = lens.to(torch.int64).reshape(batch, 1) + torch.arange(seqlen_new, device=device)
        blocks = torch.gather(table.to(torch.int64), 1, torch.div(pos, page,
                                                                   rounding_mode="floor"))
        slots = (blocks * page + pos % page).reshape(-1)
        kv_dtype = str(k_cache.dtype).replace("torch.", "")
        kv_cache_dtype = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}.get(kv_dtype,
                                                                                     "auto")
        reshape_and_cache_flash.eager(k.reshape(batch * seqlen_new, *k.shape[2:]),
                                      v.reshape(batch * seqlen_new, *v.shape[2:]), k_cache,
                                      v_cache, slots, kv_cache_dtype, k_descale, v_descale,
                                      stream=stream)
    seq_lens = lens + seqlen_new
    cu_q = torch.arange(0, (batch + 1) * seqlen_q, seqlen_q, dtype=torch.int32, device=device)
    if out is None:
        out = torch.empty_like(q)
    flash_attn_varlen_func.eager(
        q.reshape(batch * seqlen_q, *q.shape[2:]), k_cache, v_cache, seqlen_q, cu_q,
        max(table.shape[1] * page, 1), seqused_k=seq_lens, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        block_table=table, out=out.view(batch * seqlen_q, *out.shape[2:]),
        k_descale=k_descale, v_descale=v_descale, s_aux=s_aux, stream=stream)
    return out


__all__ += ["flash_attn_with_kvcache"]


# ---- block copies (vLLM's swap_blocks and copy_blocks)

def _block_mapping(block_mapping):
    """(ctypes int64 array, num_pairs) of a host [num_pairs, 2] mapping of (src, dst) blocks."""
    dev = getattr(block_mapping, "__dlpack_device__", None)
    if dev is not None and int(dev()[0]) in CUDA_DEVICES:
        raise ValueError("block_mapping must be on the host (a list of pairs, a NumPy array or a "
                         "CPU tensor); got a device array: copy it with .cpu() (a synchronizing "
                         "copy graphattn does not make behind your back)")
    if hasattr(block_mapping, "tolist"):
        block_mapping = block_mapping.tolist()
    flat = []
    for i, pair in enumerate(block_mapping):
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise ValueError("block_mapping[%d] is %r; each entry is a (src, dst) pair of block "
                             "numbers" % (i, pair))
        flat += [_names.int_arg("block_mapping[%d][%d]" % (i, j), v, -2**63, 2**63 - 1)
                 for j, v in enumerate(pair)]
    return (ctypes.c_int64 * max(len(flat), 1))(*flat), len(flat) // 2


_NO_MAPPING = object()


def _byte_blocks(arg, name, block_size_in_bytes):
    """A uint8 [num_blocks, block_size_in_bytes] view of a compact array made of consecutive
    blocks of block_size_in_bytes bytes (vLLM 0.33's swap_blocks reads its tensors so)."""
    if not arg.is_compact():
        raise ValueError("swap_blocks: %s (shape %s, strides %s) must be compact: with "
                         "block_size_in_bytes it is read as consecutive blocks of that size"
                         % (name, arg.shape, arg.strides))
    size = arg.numel() * arg.itemsize
    if size % block_size_in_bytes:
        raise ValueError("swap_blocks: %s holds %d bytes, not a whole number of blocks of "
                         "block_size_in_bytes %d" % (name, size, block_size_in_bytes))
    n = size // block_size_in_bytes
    return make_dltensor(arg.address, arg.device, (UINT, 8, 1), (n, block_size_in_bytes),
                         (block_size_in_bytes, 1), keep=arg, source=arg.source)


@_torch_op
def swap_blocks(src: Array, dst: Array, block_size_in_bytes: Any, block_mapping: Any = _NO_MAPPING,
                *, stream: Stream = None) -> None:
    """vLLM's swap_blocks: for each (s, d) in block_mapping, in order, block d of dst := block s
    of src. Both of vLLM's signatures:

    swap_blocks(src, dst, block_size_in_bytes, block_mapping)   vLLM 0.33
        src, dst:  compact arrays, each consecutive blocks of block_size_in_bytes bytes (any
                   dtypes, any shapes)
    swap_blocks(src, dst, block_mapping)                        older vLLM releases
        src, dst:  [num_blocks, ...] caches of one dtype and block shape (for a flash KV cache,
                   its key or value half, kv_cache[0] / kv_cache[1])
    An int third argument with no fourth is refused (the mapping is missing); a mapping third
    argument with a fourth too is refused (block_size_in_bytes must be an int).
    Either array may be on the host (pinned memory keeps the copy asynchronous).
    block_mapping: host [num_pairs, 2] integers (vLLM passes a CPU int64 tensor)
    stream:        None = the tensors' current stream
    """
    block_size_in_bytes, block_mapping = _swap_args(block_size_in_bytes, block_mapping)
    s = _device.stream_handle(stream, (src, dst))
    a = to_dl(src, "src", s)
    b = to_dl(dst, "dst", s)
    if block_size_in_bytes is not None:
        a = _byte_blocks(a, "src", block_size_in_bytes)
        b = _byte_blocks(b, "dst", block_size_in_bytes)
    pairs, n = _block_mapping(block_mapping)
    _lib.check(_lib.lib.graphattn_swap_blocks(a.ref, b.ref, pairs, n, s))


def _swap_args(block_size_in_bytes, block_mapping):
    """(block_size_in_bytes or None for the older form, block_mapping) of swap_blocks' third
    and fourth arguments; ValueError when they fit neither form."""
    if block_mapping is _NO_MAPPING:
        if isinstance(block_size_in_bytes, numbers.Integral):
            raise ValueError("swap_blocks(src, dst, %r): block_mapping is missing; vLLM 0.33's "
                             "form is swap_blocks(src, dst, block_size_in_bytes, block_mapping), "
                             "the older one swap_blocks(src, dst, block_mapping)"
                             % (block_size_in_bytes,))
        block_size_in_bytes, block_mapping = None, block_size_in_bytes
    elif (not isinstance(block_size_in_bytes, numbers.Integral) or
          isinstance(block_size_in_bytes, bool) or block_size_in_bytes <= 0):
        raise ValueError("swap_blocks: block_size_in_bytes=%r is not supported; allowed: an int "
                         ">= 1 (swap_blocks(src, dst, block_size_in_bytes, block_mapping))"
                         % (block_size_in_bytes,))
    return (None if block_size_in_bytes is None else int(block_size_in_bytes)), block_mapping


def _cache_names(key_caches, value_caches):
    """copy_blocks' argument names of its caches, in the order the C ABI takes them."""
    return (["key_caches[%d]" % i for i in range(len(key_caches))] +
            ["value_caches[%d]" % i for i in range(len(value_caches))])


def _cache_refs(key_caches, value_caches, stream):
    """(DLArgs, a C array of their DLTensor addresses) of every key then value cache; keep the
    DLArgs alive while the addresses are in use."""
    caches = list(key_caches) + list(value_caches)
    args = [to_dl(c, name, stream)
            for c, name in zip(caches, _cache_names(key_caches, value_caches))]
    return args, (ctypes.c_void_p * max(len(args), 1))(*[a.ref for a in args])


@_torch_op
def copy_blocks(key_caches: Sequence[Array], value_caches: Sequence[Array], block_mapping: Any, *,
                stream: Stream = None) -> None:
    """vLLM's copy_blocks (copy-on-write): in every key and value cache (device memory, one per
    layer), for each (s, d) in block_mapping, in order, cache[d] = cache[s]. block_mapping is a
    host [num_pairs, 2] array, or a CUDA int64 tensor as vLLM passes it (then one kernel reads
    it on the device: _copy_blocks_device below). Capturable in a CUDA graph."""
    if _on_cuda(block_mapping):
        return _copy_blocks_device(key_caches, value_caches, block_mapping, stream)
    caches = list(key_caches) + list(value_caches)
    s = _device.stream_handle(stream, caches)
    args, refs = _cache_refs(key_caches, value_caches, s)
    for name, a in zip(_cache_names(key_caches, value_caches), args):
        if a.device[0] not in CUDA_DEVICES:
            raise ValueError("%s must be in CUDA device memory (copy_blocks copies device to "
                             "device)" % name)
    pairs, n = _block_mapping(block_mapping)
    _lib.check(_lib.lib.graphattn_copy_blocks(refs, len(args), pairs, n, s))


# ---- merge_attn_states, copy_blocks with a device mapping, float32 cache writes (issue 29)

def _on_cuda(x):
    """Whether x is an array in CUDA device memory (a DLArg's device, or __dlpack_device__)."""
    if isinstance(x, DLArg):
        return x.device[0] in CUDA_DEVICES
    dev = getattr(x, "__dlpack_device__", None)
    return dev is not None and int(dev()[0]) in CUDA_DEVICES


def _write_kv_dtype(key, kv_cache_dtype):
    """graphattn_kv_dtype_t of a cache write's kv_cache_dtype for keys of key's dtype (float16,
    bfloat16 or float32: vLLM's reshape_and_cache[_flash] take all three)."""
    code, bits, lanes = key.dtype
    if not (code == FLOAT and bits == 32 and lanes == 1):
        try:
            model = _model_dtype(key, "key")
        except ValueError:
            raise ValueError("key dtype %s is not supported; supported: float16, bfloat16, "
                             "float32" % key.dtype_name) from None
        return _names.parse_kv_dtype(kv_cache_dtype, model)
    if str(kv_cache_dtype).strip().lower() in ("float32", "fp32", "float", "torch.float32"):
        return _names.KV_AUTO
    try:
        return _names.parse_kv_dtype(kv_cache_dtype, _names.FLOAT16)
    except ValueError:
        raise ValueError("kv_cache_dtype %r is not supported; supported: auto (the keys' "
                         "float32), fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2"
                         % (kv_cache_dtype,)) from None


def _copy_blocks_device(key_caches, value_caches, block_mapping, stream):
    """copy_blocks with a CUDA int64 [num_pairs, 2] block_mapping: one kernel reads the pairs on
    the device and copies them in every cache (one launch for up to 256 caches), with no host
    sync; a replayed graph reads the mapping's current contents. A pair naming a block outside a
    cache (e.g. a -1 row padding a captured mapping) or src == dst copies nothing; the pairs run
    in parallel (as in vLLM's kernel), so no block may be written twice, or written and read."""
    caches = list(key_caches) + list(value_caches)
    s = _device.stream_handle(stream, caches + [block_mapping])
    args, refs = _cache_refs(key_caches, value_caches, s)
    mapping = to_dl(block_mapping, "block_mapping", s)
    _lib.check(_lib.lib.graphattn_copy_blocks_device(refs, len(args), mapping.ref, s, None))


@_torch_op
def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse,
                      output_lse=None, *, stream=None):
    """vLLM's merge_attn_states: output = the attention over two disjoint key sets from their
    partial results, weighted by their log-sum-exps (natural log); output_lse, when given,
    receives the merged LSE.

    output, prefix_output, suffix_output: [num_tokens, num_heads, head_size] of one dtype,
                  float16, bfloat16 or float32 (head_size a multiple of 8, of 4 for float32)
    prefix_lse, suffix_lse, output_lse: float32 [num_heads, num_tokens], any strides
    An infinite LSE (an empty key set: +inf from FlashAttention 2, -inf from 3) gives that side
    weight 0; both infinite: output = prefix_output, output_lse = -inf. One kernel, no host
    sync: capturable after one eager call (which compiles or loads it).
    """
    s = _device.stream_handle(stream, (output, prefix_output))
    o = to_dl(output, "output", s)
    po = to_dl(prefix_output, "prefix_output", s)
    pl = to_dl(prefix_lse, "prefix_lse", s)
    so = to_dl(suffix_output, "suffix_output", s)
    sl = to_dl(suffix_lse, "suffix_lse", s)
    ol = to_dl_optional(output_lse, "output_lse", s)
    _lib.check(_lib.lib.graphattn_merge_attn_states(o.ref, po.ref, pl.ref, so.ref, sl.ref,
                                                    ref_of(ol), s, None))


__all__ += ["merge_attn_states"]


paged_attention_v1 = _torch_op(_paged_attention.paged_attention_v1)
paged_attention_v2 = _torch_op(_paged_attention.paged_attention_v2)
forward_decode = _torch_op(_paged_attention.forward_decode)

if "torch" in sys.modules:  # torch is already loaded: register its ops (cheap)
    from . import torch_ops  # noqa: E402,F401
