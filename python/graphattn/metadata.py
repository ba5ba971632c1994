# SPDX-License-Identifier: Apache-2.0
"""Host-side metadata helpers with the semantics of vLLM v1's FlashAttentionMetadataBuilder.

    graphattn.metadata.cudagraph_support                  # AttentionCGSupport
    graphattn.metadata.can_run_in_cudagraph([0, 1, 2, 3])  # True: a uniform single-token decode
    graphattn.metadata.split_decodes_and_prefills([0, 1, 2, 7])
    graphattn.metadata.default_capture_sizes(256)          # [1, 2, 4, 8, ..., 512]
    graphattn.metadata.padded_capture_size(sizes, 13)      # 16

query_start_loc arguments are host sequences of ints: lists, tuples, NumPy arrays or CPU
tensors (``tolist()`` is used); device tensors are refused, since reading them would
synchronize.
"""

import ctypes
import enum
from typing import NamedTuple

from . import _lib, errors
from ._dlpack import CPU, CUDA_HOST
from ._names import int_arg


class AttentionCGSupport(enum.IntEnum):
    """How much of a batch may run inside a CUDA graph (vLLM's AttentionCGSupport)."""
    NEVER = 0
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    UNIFORM_BATCH = 2
    ALWAYS = 3


# What the flash metadata builder supports inside CUDA graphs: full graphs cover uniform
# single-token decode batches (split-KV decode is graph-safe for every context length); with
# speculative decoding, uniform batches (cudagraph_support_for(decode_query_len)).
cudagraph_support = AttentionCGSupport(_lib.lib.graphattn_cudagraph_support())


class DecodePrefillSplit(NamedTuple):
    """vLLM's (num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens)."""
    num_decodes: int
    num_prefills: int
    num_decode_tokens: int
    num_prefill_tokens: int


def _host_ints(values, name):
    dev = getattr(values, "__dlpack_device__", None)
    if dev is not None and int(dev()[0]) not in (CPU, CUDA_HOST):
        raise ValueError("%s must be on the host (a list, a NumPy array or a CPU tensor); got "
                         "a device array, which would need a synchronizing copy" % name)
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError("%s must be a sequence of ints, got %r" % (name, values))
    out = [int_arg("%s[%d]" % (name, i), v, -2**31, 2**31 - 1) for i, v in enumerate(values)]
    return out


def _query_start_loc(query_start_loc):
    q = _host_ints(query_start_loc, "query_start_loc")
    if not q:
        raise ValueError("query_start_loc is empty; it needs num_reqs + 1 offsets starting at 0")
    return (ctypes.c_int32 * len(q))(*q), len(q) - 1


def cudagraph_support_for(decode_query_len, mixed_graphs=False):
    """The builder's support level for layers with this decode query length (1 + the
    speculative tokens a step verifies, 1..16): UNIFORM_BATCH above 1, else
    cudagraph_support; ALWAYS with mixed_graphs (graphs of any batch, launched with
    AttentionMetadata(device_split=True))."""
    q = int_arg("decode_query_len", decode_query_len)
    out = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_cudagraph_support_for(q, ctypes.byref(out)))
    return AttentionCGSupport.ALWAYS if mixed_graphs else AttentionCGSupport(out.value)


def can_run_in_cudagraph(query_start_loc, decode_query_len=1, mixed_graphs=False):
    """Whether a batch (query_start_loc: [num_reqs + 1] host offsets) can replay a full graph:
    a uniform decode batch, every request decode_query_len tokens (1: single-token decodes;
    speculative decoding: 1 + the draft tokens). With mixed_graphs any batch whose decodes
    (up to decode_query_len tokens) come first."""
    if mixed_graphs:
        try:
            split_decodes_and_prefills(query_start_loc, decode_query_len)
        except errors.GraphattnError:
            return False
        return True
    arr, num_reqs = _query_start_loc(query_start_loc)
    q = int_arg("decode_query_len", decode_query_len)
    result = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_can_run_uniform_decode(arr, num_reqs, q,
                                                         ctypes.byref(result)))
    return bool(result.value)


def use_cascade_attention(common_prefix_len, query_lens, num_query_heads, num_kv_heads,
                          use_alibi, use_sliding_window, num_sms):
    """graphattn's rule for cascade attention: vLLM's (its FlashAttention builder's
    use_cascade_attention, vLLM 0.6 to 0.11), and for single-token GQA decode batches also at
    least 64 requests and 65536 shared tokens in all (C++ use_cascade_attention, measured on
    an H100 and an H200): whether a batch whose requests share common_prefix_len tokens and
    have these scheduled query lengths (host ints) should run it on num_sms multiprocessors."""
    lens = _host_ints(query_lens, "query_lens")
    arr = (ctypes.c_int32 * max(len(lens), 1))(*lens)
    out = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_use_cascade_attention(
        int_arg("common_prefix_len", common_prefix_len), arr, len(lens),
        int_arg("num_query_heads", num_query_heads), int_arg("num_kv_heads", num_kv_heads),
        int(bool(use_alibi)), int(bool(use_sliding_window)), int_arg("num_sms", num_sms),
        ctypes.byref(out)))
    return bool(out.value)


def split_decodes_and_prefills(query_start_loc, decode_threshold=1):
    """vLLM's split of a batch ordered decodes first (query length <= decode_threshold).
    A decode after a prefill raises GraphattnError naming the request."""
    arr, num_reqs = _query_start_loc(query_start_loc)
    threshold = int_arg("decode_threshold", decode_threshold, 1)
    s = _lib.DecodePrefillSplit()
    _lib.check(_lib.lib.graphattn_split_decodes_and_prefills(arr, num_reqs, threshold,
                                                             ctypes.byref(s)))
    return DecodePrefillSplit(s.num_decodes, s.num_prefills, s.num_decode_tokens,
                              s.num_prefill_tokens)


def default_capture_sizes(max_num_seqs, decode_query_len=1):
    """vLLM's default CUDA graph sizes in tokens: [1, 2, 4] + range(8, 256, 8) +
    range(256, max + 1, 16), max = min(2 * max_num_seqs * decode_query_len, 512); with
    decode_query_len > 1 (speculative decoding) every size rounded up to a multiple of it,
    duplicates and sizes above max dropped."""
    n = int_arg("max_num_seqs", max_num_seqs, 1)
    q = int_arg("decode_query_len", decode_query_len)
    count = ctypes.c_size_t(0)
    capacity = 64
    for _ in range(3):
        sizes = (ctypes.c_int * capacity)()
        status = _lib.lib.graphattn_uniform_decode_capture_sizes(n, q, sizes, capacity,
                                                                 ctypes.byref(count))
        if status == errors.ERROR_BUFFER_TOO_SMALL and count.value > capacity:
            capacity = count.value
            continue
        _lib.check(status)
        return list(sizes[:count.value])
    _lib.check(status)


def padded_capture_size(sizes, num_tokens):
    """The smallest of `sizes` >= num_tokens (the graph a batch of num_tokens replays,
    padded), or None when num_tokens is above them all (the batch runs eagerly)."""
    ordered = sorted(_host_ints(sizes, "sizes"))
    n = int_arg("num_tokens", num_tokens, 0)
    arr = (ctypes.c_int * max(len(ordered), 1))(*ordered)
    padded = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_padded_capture_size(arr, len(ordered), n,
                                                      ctypes.byref(padded)))
    return padded.value or None
