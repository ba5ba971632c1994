# SPDX-License-Identifier: Apache-2.0
"""vLLM's paged_attention_v1 / v2 over its legacy PagedAttention caches, and its
PagedAttention.forward_decode (re-exported by graphattn.ops).

graphattn runs its split-KV decode kernel specialized for the legacy layout for both versions
(the same result); v2's exp_sums, max_logits and tmp_out are checked for shape and not used:
graphattn keeps its own split workspace per device, allocated (zero-filled) by the first call
that needs it, so calls must not run concurrently on different streams of one device. Make one
eager call of a configuration before capturing it in a CUDA graph (it compiles or loads the
kernel and sizes the workspace); a captured call allocates nothing.
"""

import ctypes
import sys

from . import _device, _lib, _names
from ._dlpack import ref_of, to_dl
from .backend import head_array

PARTITION_SIZE = 512  # vLLM's _PARTITION_SIZE (v2's temporaries hold one entry per 512 tokens)


def num_partitions(max_seq_len):
    """v2's max_num_partitions: ceil(max_seq_len / 512)."""
    n = _names.int_arg("max_seq_len", max_seq_len, minimum=0)
    return (n + PARTITION_SIZE - 1) // PARTITION_SIZE


def use_paged_attention_v1(max_seq_len, num_seqs, num_heads):
    """vLLM's rule (PagedAttention.forward_decode): v1 when max_seq_len <= 8192 and (one
    partition of 512 tokens, or num_seqs * num_heads > 512)."""
    result = ctypes.c_int()
    _lib.check(_lib.lib.graphattn_use_paged_attention_v1(
        _names.int_arg("max_seq_len", max_seq_len), _names.int_arg("num_seqs", num_seqs),
        _names.int_arg("num_heads", num_heads), ctypes.byref(result)))
    return bool(result.value)


def _call_args(query, key_cache, value_cache, num_kv_heads, scale, block_tables, seq_lens,
               block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale, v_scale, tp_rank,
               blocksparse_local_blocks, blocksparse_vert_stride, blocksparse_block_size,
               blocksparse_head_sliding_step, s, keep):
    """The C arguments after out (and v2's temporaries), in vLLM's order; DLArgs go to keep."""
    q = to_dl(query, "query", s)
    kc = to_dl(key_cache, "key_cache", s)
    vc = to_dl(value_cache, "value_cache", s)
    bt = to_dl(block_tables, "block_tables", s)
    sl = to_dl(seq_lens, "seq_lens", s)
    if q.ndim != 3:
        raise ValueError("query must be 3-d [num_seqs, num_heads, head_size], got shape %s"
                         % (q.shape,))
    models = {"float16": _names.FLOAT16, "bfloat16": _names.BFLOAT16, "float32": _names.FLOAT32}
    if q.dtype_name not in models:
        raise ValueError("query dtype %s is not supported; supported: float16, bfloat16, float32"
                         % q.dtype_name)
    model = models[q.dtype_name]
    kv_dtype = _names.parse_kv_dtype(kv_cache_dtype, model)
    slopes = head_array(alibi_slopes, "alibi_slopes", q.shape[1])
    from .ops import _fp8_scales  # (ops re-exports this module)
    k_s, v_s = _fp8_scales(kv_dtype, k_scale, v_scale, ("k_scale", "v_scale"))
    keep.extend([q, kc, vc, bt, sl, slopes])
    return (q.ref, kc.ref, vc.ref, _names.int_arg("num_kv_heads", num_kv_heads),
            _names.float_arg("scale", scale), bt.ref, sl.ref,
            _names.int_arg("block_size", block_size), _names.int_arg("max_seq_len", max_seq_len),
            ref_of(slopes), kv_dtype, k_s, v_s, None, None,
            _names.int_arg("tp_rank", tp_rank),
            _names.int_arg("blocksparse_local_blocks", blocksparse_local_blocks),
            _names.int_arg("blocksparse_vert_stride", blocksparse_vert_stride),
            _names.int_arg("blocksparse_block_size", blocksparse_block_size),
            _names.int_arg("blocksparse_head_sliding_step", blocksparse_head_sliding_step),
            s, None)


def paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads, scale, block_tables,
                       seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale,
                       v_scale, tp_rank=0, blocksparse_local_blocks=0,
                       blocksparse_vert_stride=0, blocksparse_block_size=64,
                       blocksparse_head_sliding_step=0, *, stream=None):
    """vLLM's paged_attention_v1 (vllm._custom_ops): writes out.

    out, query:   [num_seqs, num_heads, head_size] float16/bfloat16/float32 (float32: fp32 math,
                  caches of float32, kv_cache_dtype "auto", no block-sparse pattern)
    key_cache:    [num_blocks, num_kv_heads, head_size / x, block_size, x], x read from its
                  shape: 16 bytes of elements, 8 or 16; value_cache [num_blocks, num_kv_heads, head_size, block_size];
                  compact (split_kv_cache of one [2, num_blocks, ...] tensor); uint8 for fp8
    block_tables: int32 [num_seqs, max_num_blocks_per_seq]; seq_lens: int32 [num_seqs]
    block_size:   8 (16-bit and float32 caches), or 16..256, a multiple of 16
    alibi_slopes: float32 [num_heads] CUDA array or None
    kv_cache_dtype: "auto", "fp8", "fp8_e4m3", "fp8_e5m2"; k_scale / v_scale floats or
                  one-element tensors (read on the host for fp8 caches; pass floats inside a
                  graph capture)
    blocksparse_*: vert_stride <= 1 is dense; larger runs graphattn's block-sparse decode
                  (this rank's heads start at tp_rank * num_heads)
    stream:       graphattn only: None = the tensors' current stream
    """
    s = _device.stream_handle(stream, (query, key_cache))
    keep = [to_dl(out, "out", s)]
    args = _call_args(query, key_cache, value_cache, num_kv_heads, scale, block_tables, seq_lens,
                      block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale, v_scale,
                      tp_rank, blocksparse_local_blocks, blocksparse_vert_stride,
                      blocksparse_block_size, blocksparse_head_sliding_step, s, keep)
    _lib.check(_lib.lib.graphattn_paged_attention_v1(keep[0].ref, *args))


def paged_attention_v2(out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache,
                       num_kv_heads, scale, block_tables, seq_lens, block_size, max_seq_len,
                       alibi_slopes, kv_cache_dtype, k_scale, v_scale, tp_rank=0,
                       blocksparse_local_blocks=0, blocksparse_vert_stride=0,
                       blocksparse_block_size=64, blocksparse_head_sliding_step=0, *,
                       stream=None):
    """vLLM's paged_attention_v2: the same attention as paged_attention_v1 (same kernel).
    exp_sums, max_logits (float32 [num_seqs, num_heads, max_num_partitions]) and tmp_out
    ([num_seqs, num_heads, max_num_partitions, head_size], out's dtype) are checked, not used."""
    s = _device.stream_handle(stream, (query, key_cache))
    keep = [to_dl(out, "out", s), to_dl(exp_sums, "exp_sums", s),
            to_dl(max_logits, "max_logits", s), to_dl(tmp_out, "tmp_out", s)]
    args = _call_args(query, key_cache, value_cache, num_kv_heads, scale, block_tables, seq_lens,
                      block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale, v_scale,
                      tp_rank, blocksparse_local_blocks, blocksparse_vert_stride,
                      blocksparse_block_size, blocksparse_head_sliding_step, s, keep)
    _lib.check(_lib.lib.graphattn_paged_attention_v2(*(a.ref for a in keep[:4]), *args))


def _empty(like, shape, float32):
    """An uninitialized array on like's device: float32, or like's dtype."""
    fw = _device._framework(like)
    if fw == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=torch.float32 if float32 else like.dtype,
                           device=like.device)
    if fw == "cupy":
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(shape, dtype=cupy.float32 if float32 else like.dtype)
    raise TypeError("forward_decode needs a PyTorch or CuPy query to allocate its output like; "
                    "got %s.%s" % (type(like).__module__, type(like).__name__))


def forward_decode(query, key_cache, value_cache, block_tables, seq_lens, max_seq_len,
                   kv_cache_dtype, num_kv_heads, scale, alibi_slopes, k_scale, v_scale,
                   tp_rank=0, blocksparse_local_blocks=0, blocksparse_vert_stride=0,
                   blocksparse_block_size=64, blocksparse_head_sliding_step=0, *, stream=None):
    """vLLM's PagedAttention.forward_decode: allocates the output like query, picks v1 or v2
    by use_paged_attention_v1 (allocating v2's temporaries as vLLM does) and returns the
    output. block_size is value_cache's last dimension."""
    output = _device.empty_like(query)
    num_seqs, num_heads, head_size = query.shape
    block_size = value_cache.shape[3]
    rest = (num_kv_heads, scale, block_tables, seq_lens, block_size, max_seq_len, alibi_slopes,
            kv_cache_dtype, k_scale, v_scale, tp_rank, blocksparse_local_blocks,
            blocksparse_vert_stride, blocksparse_block_size, blocksparse_head_sliding_step)
    if use_paged_attention_v1(max_seq_len, num_seqs, num_heads):
        paged_attention_v1(output, query, key_cache, value_cache, *rest, stream=stream)
        return output
    parts = num_partitions(max_seq_len)
    exp_sums = _empty(query, (num_seqs, num_heads, parts), True)
    max_logits = _empty(query, (num_seqs, num_heads, parts), True)
    tmp_out = _empty(query, (num_seqs, num_heads, parts, head_size), False)
    paged_attention_v2(output, exp_sums, max_logits, tmp_out, query, key_cache, value_cache,
                       *rest, stream=stream)
    return output
