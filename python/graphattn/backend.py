# SPDX-License-Identifier: Apache-2.0
"""The attention backend of one layer configuration, and one step's batch metadata.

    attn = graphattn.AttentionBackend(num_heads=32, num_kv_heads=8, head_size=128,
                                      max_model_len=8192, max_num_seqs=256)
    attn.prepare()                                  # compiles / loads every kernel
    workspace = attn.allocate_workspace(query)      # once, zero-filled
    attn.forward(query, key, value, kv_cache, output, metadata, workspace)

After prepare(), forward() compiles, loads, allocates and synchronizes nothing, so it can be
captured in a CUDA graph (torch.cuda.graph) and replayed with new metadata contents.
"""

import ctypes
import dataclasses
from typing import Any, NamedTuple, Optional, Tuple

from . import _device, _lib, _names
from . import blocksparse as _blocksparse
from ._dlpack import CUDA_DEVICES, FLOAT, ref_of, to_dl, to_dl_optional
from .cache import KernelCache, default_cache


@dataclasses.dataclass(frozen=True)
class LayerConfig:
    """A backend's configuration as the library resolved it (scale and arch filled in)."""
    num_heads: int
    num_kv_heads: int
    head_size: int
    block_size: int
    dtype: str              # "float16" or "bfloat16"
    kv_cache_dtype: str     # "auto", "fp8_e4m3" or "fp8_e5m2"
    layout: str             # "NHD" or "HND"
    window: int
    soft_cap: float
    scale: float
    k_scale: float
    v_scale: float
    max_model_len: int
    max_num_seqs: int
    arch: int
    overlap_previous_kernel: bool
    check_bounds: bool
    alibi: bool             # per-head ALiBi slopes were given
    sinks: bool             # per-head sink logits were given
    # fp8 scales in device memory: addresses of the float32 scalars, None for none
    k_scale_device: Optional[int] = None
    v_scale_device: Optional[int] = None
    attn_type: str = "decoder"  # "decoder", "encoder", "encoder_only" or "encoder_decoder"
    decode_query_len: int = 1   # the most query tokens of a decode request (multi-token: > 1)
    # block-sparse pattern: (block_size, local_blocks, vert_stride, head_sliding_step,
    # active_head_offset); block_size 0: dense
    blocksparse: Tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    softmax_lse: bool = False   # forward() also writes the softmax LSE (forward(softmax_lse=))


class BoundsViolation(NamedTuple):
    """What checked mode recorded (AttentionBackend.take_bounds_violation())."""
    kind: str       # "none", "block_id" or "slot"
    request: int    # block ids: the request (block_table row); slots: the decode request, or
                    # -1 when the cache write kernel met it
    position: int   # block ids: the key position in the request; slots: the batch token
    value: int      # the block id or slot
    message: str    # "" for "none"

    def __bool__(self):
        return self.kind != "none"


@dataclasses.dataclass
class AttentionMetadata:
    """One step's batch (vLLM v1 semantics): requests ordered decodes first (one query token
    each, or 1..decode_query_len with a multi-token backend), then prefills. Tensors live on
    the device; counts are host ints.

    query_start_loc: int32 [>= num_reqs + 1] token offsets, non-decreasing, [0] = 0
    seq_lens:        int32 [>= num_reqs] context + new tokens; 0 marks a padded request
    block_table:     int32 [>= num_reqs, max_blocks_per_seq] physical block ids
    slot_mapping:    int64 [>= num_actual_tokens] cache slot of each new token, -1 = padding
                     (may be None when forward() gets no key/value)
    An encoder-only layer reads neither seq_lens, block_table nor slot_mapping: None will do.
    num_decode_tokens defaults to num_decodes (pass the decodes' token count when they hold
    more than one each); max_query_len is over the prefills (1 when there are none).
    device_split=True: the kernels split the batch into decodes and prefills on the device,
    so one CUDA graph per token count serves any mix (vLLM's full graphs, support ALWAYS):
    num_reqs then counts request slots (padded ones hold no token: query_start_loc repeats
    its last offset, seq_lens 0), decodes come first, and num_decodes, num_decode_tokens and
    max_query_len are not read.
    """
    query_start_loc: Any
    seq_lens: Any
    block_table: Any
    slot_mapping: Any
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    num_decodes: int = 0
    num_decode_tokens: Optional[int] = None
    device_split: bool = False

    def _struct(self, stream):
        """The graphattn_metadata_t and the converted tensors it points to (keep both)."""
        md = _lib.Metadata()
        _lib.lib.graphattn_metadata_init(ctypes.byref(md))
        # seq_lens and block_table may be None for an encoder-only layer (the library refuses
        # None for the others, naming the field).
        args = (to_dl(self.query_start_loc, "metadata.query_start_loc", stream),
                to_dl_optional(self.seq_lens, "metadata.seq_lens", stream),
                to_dl_optional(self.block_table, "metadata.block_table", stream),
                to_dl_optional(self.slot_mapping, "metadata.slot_mapping", stream))
        md.query_start_loc, md.seq_lens, md.block_table, md.slot_mapping = (
            ref_of(a) for a in args)
        md.num_reqs = _names.int_arg("metadata.num_reqs", self.num_reqs, 0)
        md.num_decodes = _names.int_arg("metadata.num_decodes", self.num_decodes, 0)
        ndt = self.num_decodes if self.num_decode_tokens is None else self.num_decode_tokens
        md.num_decode_tokens = _names.int_arg("metadata.num_decode_tokens", ndt, 0)
        md.num_actual_tokens = _names.int_arg("metadata.num_actual_tokens",
                                              self.num_actual_tokens, 0)
        md.max_query_len = _names.int_arg("metadata.max_query_len", self.max_query_len, 0)
        md.max_seq_len = _names.int_arg("metadata.max_seq_len", self.max_seq_len, 0)
        md.device_split = 1 if self.device_split else 0
        return md, args


def head_array(x, name, num_heads):
    """The DLArg of a per-head array (ALiBi slopes, sink logits): float32, [num_heads],
    contiguous, in CUDA memory; None for None. Its ``address`` goes into the layer config, and
    the DLArg must stay alive as long as the backend that reads it."""
    if x is None:
        return None
    arg = to_dl(x, name)
    if arg.device[0] not in CUDA_DEVICES:
        raise ValueError("%s must be in CUDA device memory (the kernels read it on every "
                         "forward)" % name)
    if arg.dtype_name != "float32" or arg.shape != (num_heads,) or not arg.is_compact():
        raise ValueError("%s must be a contiguous float32 array of num_heads (%d) values, got %s "
                         "%s" % (name, num_heads, arg.dtype_name, arg.shape))
    return arg


# fp8 scales in device memory

def device_scalar(x, name):
    """(address, keep-alive) of a one-element float32 CUDA tensor; (None, None) for None."""
    if x is None:
        return None, None
    a = to_dl(x, name)
    if a.dtype != (FLOAT, 32, 1) or a.numel() != 1 or a.device[0] not in CUDA_DEVICES:
        raise ValueError("%s (%s, shape %s) is not supported; supported: a one-element float32 "
                         "CUDA tensor" % (name, a.dtype_name, tuple(a.shape)))
    return a.address, a


def device_descales(q_descale, k_descale, v_descale, num_kv_heads):
    """((q, k, v addresses or None), (request stride, KV head stride)) of an fp8 query's device
    descales: float32 CUDA arrays of one element or [num_reqs, num_kv_heads] (FA3's shape,
    expanded views too), all with the same strides."""
    addresses, strides = [], None
    for name, x in (("q_descale", q_descale), ("k_descale", k_descale),
                    ("v_descale", v_descale)):
        if x is None:
            addresses.append(None)
            continue
        a = to_dl(x, name)
        if a.dtype != (FLOAT, 32, 1) or a.device[0] not in CUDA_DEVICES:
            raise ValueError("%s (%s) is not supported; supported: a float32 CUDA tensor"
                             % (name, a.dtype_name))
        if a.numel() == 1:
            st = (0, 0)
        elif a.ndim == 2 and a.shape[1] == num_kv_heads:
            st = tuple(int(v) for v in a.strides[:2])
        else:
            raise ValueError("%s of shape %s is not supported; supported: one element or "
                             "[num_reqs, num_kv_heads (%d)]" % (name, tuple(a.shape),
                                                                num_kv_heads))
        if strides is not None and st != strides:
            raise ValueError("%s has strides %s, another descale %s; supported: one layout "
                             "for q_descale, k_descale and v_descale" % (name, st, strides))
        strides = st
        addresses.append(a.address)
    return tuple(addresses), strides or (0, 0)


def _layer_config(num_heads, num_kv_heads, head_size, block_size, dtype, kv_cache_dtype, layout,
                  window, soft_cap, scale, k_scale, v_scale, max_model_len, max_num_seqs, arch,
                  overlap_previous_kernel, check_bounds, alibi=None, sinks=None,
                  k_scale_device=None, v_scale_device=None, attn_type="decoder",
                  decode_query_len=1, blocksparse_params=None, softmax_lse=False,
                  q_dtype="auto", q_scale=1.0, q_descale=None, k_descale=None, v_descale=None):
    c = _lib.LayerConfig()
    _lib.lib.graphattn_layer_config_init(ctypes.byref(c))
    c.num_heads = _names.int_arg("num_heads", num_heads)
    c.num_kv_heads = _names.int_arg("num_kv_heads", num_kv_heads)
    c.head_size = _names.int_arg("head_size", head_size)
    c.block_size = _names.int_arg("block_size", block_size)
    c.dtype = _names.parse_dtype(dtype)
    c.kv_dtype = _names.parse_kv_dtype(kv_cache_dtype, c.dtype)
    c.layout = _names.parse_layout(layout)
    c.window = _names.int_arg("window", window)
    c.soft_cap = _names.float_arg("soft_cap", soft_cap)
    c.scale = 0.0 if scale is None else _names.float_arg("scale", scale)
    c.k_scale = _names.float_arg("k_scale", k_scale)
    c.v_scale = _names.float_arg("v_scale", v_scale)
    c.max_model_len = _names.int_arg("max_model_len", max_model_len)
    c.max_num_seqs = _names.int_arg("max_num_seqs", max_num_seqs)
    c.arch = _names.int_arg("arch", arch, 0)
    c.overlap_previous_kernel = int(_names.bool_arg("overlap_previous_kernel",
                                                    overlap_previous_kernel))
    c.check_bounds = int(_names.bool_arg("check_bounds", check_bounds))
    c.alibi_slopes = None if alibi is None else alibi.address
    c.sinks = None if sinks is None else sinks.address
    c.k_scale_device = k_scale_device
    c.v_scale_device = v_scale_device
    c.attn_type = _names.parse_attn_type(attn_type)
    c.decode_query_len = _names.int_arg("decode_query_len", decode_query_len)  # range: library
    _blocksparse.apply(c, blocksparse_params, c.num_heads)
    c.softmax_lse = int(_names.bool_arg("softmax_lse", softmax_lse))
    c.q_dtype = _names.parse_q_dtype(q_dtype)
    c.q_scale = _names.float_arg("q_scale", q_scale)
    (c.q_descale, c.k_descale, c.v_descale), (c.descale_req_stride, c.descale_head_stride) = \
        device_descales(q_descale, k_descale, v_descale, c.num_kv_heads)
    return c


class AttentionBackend(_lib.OwnedHandle):
    """The attention of one layer configuration (or of every layer that shares it): cache
    write, split-KV decode for the decodes, prefill for the rest.

    Args (keyword only):
        num_heads, num_kv_heads, head_size: query heads, KV heads (num_heads a multiple of
            it), head size (32..256, multiple of 8).
        block_size: tokens per KV page (16..256, multiple of 16).
        dtype: of query, key, value and output: "float16"/"fp16"/"half", "bfloat16"/"bf16"
            or a torch dtype.
        kv_cache_dtype: vLLM's names: "auto" (the model's dtype), "fp8" (= "fp8_e4m3"),
            "fp8_e4m3", "fp8_e5m2".
        layout: "NHD" ([2, num_blocks, block_size, num_kv_heads, head_size]) or "HND".
        window: sliding window in tokens, 0 = none. soft_cap: logits soft cap, 0 = none.
        scale: softmax scale, None = 1/sqrt(head_size).
        k_scale, v_scale: fp8 caches hold value / scale (ignored for "auto").
        k_scale_device, v_scale_device: fp8 scales in device memory: one-element float32 CUDA
            tensors that every kernel reads when it runs, instead of k_scale / v_scale (None:
            those), so they may change between steps and graph replays without a recapture
            (ops.calc_kv_scales writes them). The backend keeps them alive; ignored for "auto".
        max_model_len: the longest sequence a request reaches.
        max_num_seqs: the most requests in one batch (sizes the workspace).
        arch: target compute capability * 10 (e.g. 90); 0 = the current device (needs a GPU;
            makes device 0's primary context current when none is).
        overlap_previous_kernel: sm_90+: a decode-only forward may start reading metadata and
            KV before the previous kernel on the stream ends; set it only where that kernel
            writes none of them.
        check_bounds: kernels that compare every block id and slot with the cache's size,
            skip an access out of range and record the first (take_bounds_violation()); for
            debugging an engine's block tables (also GRAPHATTN_CHECK_BOUNDS=1). Off: the fast
            kernels, with no check.
        alibi_slopes: ALiBi, a float32 CUDA array of num_heads slopes: head h adds
            slope[h] * (key position - query position) to its scores. None: no ALiBi.
        sinks: attention sinks (gpt-oss), a float32 CUDA array of num_heads logits: head h's
            softmax denominator gains exp(sinks[h]). None: none.
            Both are read by every forward (and graph replay): the backend keeps a reference,
            and new contents written into the same arrays take effect on the next step.
        attn_type: vLLM's AttentionType:
            "decoder": causal over the paged cache (the default);
            "encoder": bidirectional over the paged cache;
            "encoder_only": bidirectional, no KV cache: forward() attends each request's
                queries to its own rows of key and value, needs no workspace and reads
                neither kv_cache nor metadata.seq_lens, block_table and slot_mapping (pass
                None for them);
            "encoder_decoder": cross attention over the cache that the encoder's keys and
                values filled (metadata.seq_lens: the encoder lengths; key/value None
                writes nothing).
            Non-decoder types take no window; their prefill kernels are the non-causal ones
            (spec "_nc"; encoder_only's only kernel is "_nc_dense").
        decode_query_len: the most query tokens of a decode request: 1 (the default), or
            1 + the draft tokens a speculative-decoding step verifies, up to 16. Above 1 the
            decode kernel is the multi-token one (spec "_mt"): each of the first num_decodes
            requests holds 1..decode_query_len tokens, causal among themselves, and
            metadata.num_decode_tokens may reach num_decodes * decode_query_len.
        blocksparse_params: block-sparse attention (vLLM's BlocksparseFlashAttention), a
            graphattn.BlocksparseParams (vLLM's names and derived head_sliding_step,
            active_head_range); None: dense. Decoder layers only; decode and prefill both
            follow the pattern, and decodes read only the KV blocks some head sees.
        softmax_lse: the decode and prefill kernels also write each query row's softmax
            log-sum-exp (natural log) per head: forward() then takes softmax_lse, a float32
            [num_heads, num_tokens] array (FlashAttention's return_softmax_lse layout; what
            merge_attn_states and cascade attention combine by). Not for encoder_only.
        q_dtype: "auto" (queries in dtype) or "fp8_e4m3" (torch.float8_e4m3fn): e4m3 queries
            (vLLM's query_quant), q = stored * q_scale; the output stays in dtype. Needs an fp8
            kv_cache_dtype; decodes and prefills (vLLM's FA3 fp8 path).
        q_descale, k_descale, v_descale: with q_dtype "fp8_e4m3", FA3's descales in device
            memory: float32 CUDA tensors of one element or [num_reqs, num_kv_heads] (one
            layout for all), read by every decode (and graph replay) instead of q_scale,
            k_scale, v_scale; None: those. The backend keeps them alive.
    """

    _DESTROY = "graphattn_backend_destroy"

    def __init__(self, *, num_heads, num_kv_heads, head_size, block_size=16,
                 dtype="bfloat16", kv_cache_dtype="auto", layout="NHD", window=0,
                 soft_cap=0.0, scale=None, k_scale=1.0, v_scale=1.0, max_model_len,
                 max_num_seqs, arch=0, overlap_previous_kernel=False, check_bounds=False,
                 alibi_slopes=None, sinks=None, k_scale_device=None, v_scale_device=None,
                 attn_type="decoder", decode_query_len=1, blocksparse_params=None,
                 softmax_lse=False, q_dtype="auto", q_scale=1.0, q_descale=None, k_descale=None,
                 v_descale=None):
        heads = _names.int_arg("num_heads", num_heads)
        self._descales = (q_descale, k_descale, v_descale)  # the decode reads them every step
        self._head_arrays = (head_array(alibi_slopes, "alibi_slopes", heads),
                             head_array(sinks, "sinks", heads))  # alive as long as self
        k_dev, k_keep = device_scalar(k_scale_device, "k_scale_device")
        v_dev, v_keep = device_scalar(v_scale_device, "v_scale_device")
        self._scale_tensors = (k_keep, v_keep)  # the kernels read them on every step
        c = _layer_config(num_heads, num_kv_heads, head_size, block_size, dtype,
                          kv_cache_dtype, layout, window, soft_cap, scale, k_scale, v_scale,
                          max_model_len, max_num_seqs, arch, overlap_previous_kernel,
                          check_bounds, *self._head_arrays, k_dev, v_dev,
                          attn_type=attn_type, decode_query_len=decode_query_len,
                          blocksparse_params=blocksparse_params, softmax_lse=softmax_lse,
                          q_dtype=q_dtype, q_scale=q_scale, q_descale=q_descale,
                          k_descale=k_descale, v_descale=v_descale)
        _lib.check(_lib.lib.graphattn_layer_config_check(ctypes.byref(c)))
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib.graphattn_backend_create(ctypes.byref(c), ctypes.byref(handle)))
        self._handle, self._owned = handle, True
        self._cache = None          # the cache prepare() used: it must outlive the backend
        self._config = None

    @property
    def config(self):
        """The LayerConfig with scale and arch resolved."""
        if self._config is None:
            c = _lib.LayerConfig()
            _lib.lib.graphattn_layer_config_init(ctypes.byref(c))
            _lib.check(_lib.lib.graphattn_backend_config(self._handle, ctypes.byref(c)))
            self._config = LayerConfig(
                c.num_heads, c.num_kv_heads, c.head_size, c.block_size,
                _names.DTYPE_NAMES[c.dtype], _names.KV_DTYPE_NAMES[c.kv_dtype],
                _names.LAYOUT_NAMES[c.layout], c.window, c.soft_cap, c.scale, c.k_scale,
                c.v_scale, c.max_model_len, c.max_num_seqs, c.arch,
                bool(c.overlap_previous_kernel), bool(c.check_bounds), bool(c.alibi_slopes),
                bool(c.sinks), c.k_scale_device, c.v_scale_device,
                _names.ATTN_TYPE_NAMES[c.attn_type], c.decode_query_len,
                (c.blocksparse_block_size, c.blocksparse_local_blocks,
                 c.blocksparse_vert_stride, c.blocksparse_head_sliding_step,
                 c.blocksparse_active_head_offset), bool(c.softmax_lse))
        return self._config

    def required_specs(self):
        """The canonical spec strings of the kernels it needs (cache write, decode, prefill;
        an encoder_only layer: its prefill alone)."""
        specs = []
        count = ctypes.c_int(0)
        index = 0
        while True:
            specs.append(_lib.read_string(_lib.lib.graphattn_backend_spec, self._handle, index,
                                          after=(ctypes.byref(count),)))
            index += 1
            if index >= count.value:
                return specs

    def prepare(self, cache=None):
        """Compiles (through `cache`, a KernelCache; None: the default cache) and loads every
        kernel in the current CUDA context. Call it before any capture."""
        if cache is None:
            cache = default_cache()
        if not isinstance(cache, KernelCache):
            raise TypeError("cache must be a graphattn.cache.KernelCache or None, got %r"
                            % (cache,))
        _lib.check(_lib.lib.graphattn_backend_prepare(self._handle, cache.handle))
        self._cache = cache
        return self

    def workspace_bytes(self):
        """Bytes of device scratch forward() needs (after prepare()). Zero-fill it once before
        its first forward; every forward leaves it fit for the next."""
        n = ctypes.c_size_t(0)
        _lib.check(_lib.lib.graphattn_backend_workspace_bytes(self._handle, ctypes.byref(n)))
        return n.value

    # The mode names, from the library (graphattn_mixed_branches_name): "off",
    # "serial-prefill-first", "decode-first", "prefill-first", "decode-first-high",
    # "prefill-first-high".
    MIXED_BRANCHES = tuple(_names.MIXED_BRANCHES_NAMES.values())

    @property
    def mixed_branches(self):
        """How forward() launches a batch with both decodes and prefills, by the names of
        GRAPHATTN_MIXED_BRANCHES (which sets the mode a backend starts with): "off" (one
        stream: cache write, decode, prefill), "serial-prefill-first", "decode-first",
        "prefill-first" (the default: the prefill on a stream of the backend's own, joined
        before forward() returns; two graph branches under capture), "decode-first-high",
        "prefill-first-high"."""
        return _lib.read_string(_lib.lib.graphattn_backend_mixed_branches, self._handle)

    def set_mixed_branches(self, mode):
        """Sets mixed_branches to `mode`, one of MIXED_BRANCHES; anything else raises
        ValueError naming it and the allowed names (the mode stays). Not while forward() runs
        on another thread."""
        if not isinstance(mode, str):
            raise TypeError("mixed branches mode must be a str, one of %s; got %r"
                            % (", ".join(self.MIXED_BRANCHES), mode))
        if mode not in self.MIXED_BRANCHES:
            raise ValueError("mixed branches mode %r is not a mode; allowed: %s"
                             % (mode, ", ".join(self.MIXED_BRANCHES)))
        _lib.check(_lib.lib.graphattn_backend_set_mixed_branches(self._handle,
                                                                 mode.encode("utf-8")))
        return self

    def take_bounds_violation(self):
        """Checked mode (check_bounds=True) only: the first block id or slot out of the cache's
        range that a kernel of this backend met since the last call (a falsy BoundsViolation
        when none), and clears the record. Synchronizes the device: call it outside captures,
        e.g. after a step."""
        v = _lib.BoundsViolation()
        _lib.check(_lib.lib.graphattn_backend_take_bounds_violation(self._handle,
                                                                   ctypes.byref(v)))
        kind = {0: "none", 1: "block_id", 2: "slot"}[v.kind]
        return BoundsViolation(kind, v.request, v.position, v.value,
                               v.message.decode("utf-8", "replace"))

    def allocate_workspace(self, like):
        """A zero-filled uint8 array of workspace_bytes() on the device of `like`, allocated by
        like's framework (a PyTorch tensor or a CuPy array)."""
        return _device.zeros_bytes(like, self.workspace_bytes())

    def forward(self, query, key, value, kv_cache, output, metadata, workspace, stream=None,
                softmax_lse=None):
        """One step: writes key/value to their slots (skipped when both are None), then
        attention for every request into output.

        query, output: [num_tokens, num_heads, head_size] of the layer's dtype
        key, value:    [num_tokens, num_kv_heads, head_size] or None
        kv_cache:      [2, num_blocks, block_size, num_kv_heads, head_size] (NHD, or HND by
                       strides), the layer's dtype or fp8 (uint8 or float8); None for an
                       encoder-only layer
        metadata:      an AttentionMetadata
        workspace:     a device array of at least workspace_bytes() bytes (allocate_workspace),
                       zero-filled before its first use; None only for batches without
                       decodes (prefill needs no workspace)
        stream:        None (PyTorch tensors: torch.cuda.current_stream(); CuPy: its current
                       stream; otherwise the legacy default stream), an int CUstream, a
                       torch.cuda.Stream or a cupy.cuda.Stream
        Any array with __dlpack__ works (PyTorch, CuPy, JAX); nothing is copied. Arrays that
        go through __dlpack__ are handed the stream, so their producer orders its pending work
        before it; PyTorch tensors are not (their fast path has no capsule): with an explicit
        stream other than the current one, order it after their producers yourself
        (stream.wait_stream(torch.cuda.current_stream())), as for any torch work on a side
        stream.
        softmax_lse:   a backend made with softmax_lse=True writes each query row's LSE per head
                       here: float32 [num_heads, >= num_tokens], rows contiguous (required
                       then; None otherwise)
        """
        if not isinstance(metadata, AttentionMetadata):
            raise TypeError("metadata must be a graphattn.AttentionMetadata, got %r"
                            % (type(metadata).__name__,))
        if (key is None) != (value is None):
            raise ValueError("key and value must both be tensors or both be None (no cache "
                             "write); got key=%s, value=%s" % (
                                 "None" if key is None else "tensor",
                                 "None" if value is None else "tensor"))
        s = _device.stream_handle(stream, (query, output, kv_cache))
        q = to_dl(query, "query", s)
        k = to_dl_optional(key, "key", s)
        v = to_dl_optional(value, "value", s)
        kv = to_dl_optional(kv_cache, "kv_cache", s)  # None: an encoder-only layer (no cache)
        out = to_dl(output, "output", s)
        md, md_args = metadata._struct(s)
        ws_ptr, ws_bytes, ws_arg = workspace_pointer(workspace, s)
        lse = to_dl_optional(softmax_lse, "softmax_lse", s)
        status = _lib.lib.graphattn_backend_forward_lse(
            self._handle, q.ref, ref_of(k), ref_of(v), ref_of(kv), out.ref, ctypes.byref(md),
            ws_ptr, ws_bytes, s, ref_of(lse))
        _lib.check(status)
        return output

    def __repr__(self):
        c = self.config
        return ("AttentionBackend(heads %d/%d, head %d, block %d, %s, kv %s, %s, sm_%d)"
                % (c.num_heads, c.num_kv_heads, c.head_size, c.block_size, c.dtype,
                   c.kv_cache_dtype, c.layout, c.arch))


def workspace_pointer(workspace, stream):
    """(address, bytes, keep-alive) of a workspace array (CUDA memory, compact); None gives
    (NULL, 0), which the library accepts for batches without decodes."""
    if workspace is None:
        return None, 0, None
    w = to_dl(workspace, "workspace", stream)
    if w.device[0] not in CUDA_DEVICES:
        raise ValueError("workspace (%s) needs CUDA device memory" % w.dtype_name)
    if not w.is_compact():
        raise ValueError("workspace must be a contiguous array, got shape %s strides %s"
                         % (w.shape, w.strides))
    return w.address, w.numel() * w.itemsize, w
