# SPDX-License-Identifier: Apache-2.0
"""vLLM's op signatures in graphattn.ops (README "vLLM op signatures"): the parameter lists of
vLLM 0.33's swap_blocks and reshape_and_cache and of vllm_flash_attn's flash_attn_with_kvcache,
both swap_blocks forms told apart, and the refusals of what graphattn does not take, all before
any device use (CPU only; the GPU side is test_gpu_vllm_signatures.py)."""

import inspect

import numpy as np
import pytest

import graphattn
from graphattn import ops


def params(fn):
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def test_signatures_follow_vllm():
    # vLLM 0.33's vllm/_custom_ops.py
    assert params(ops.swap_blocks) == ["src", "dst", "block_size_in_bytes", "block_mapping"]
    assert params(ops.reshape_and_cache) == ["key", "value", "key_cache", "value_cache",
                                             "slot_mapping", "kv_cache_dtype", "k_scale",
                                             "v_scale", "interleaved_v"]
    assert inspect.signature(ops.reshape_and_cache).parameters["interleaved_v"].default is False
    # vllm_flash_attn/flash_attn_interface.py's flash_attn_with_kvcache (vLLM's V0 backend's)
    assert params(ops.flash_attn_with_kvcache) == [
        "q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
        "cache_batch_idx", "cache_leftpad", "block_table", "softmax_scale", "causal",
        "window_size", "softcap", "rotary_interleaved", "alibi_slopes", "num_splits",
        "return_softmax_lse"]
    kw = inspect.signature(ops.flash_attn_with_kvcache).parameters
    for name in ("out", "fa_version", "scheduler_metadata", "q_descale", "k_descale",
                 "v_descale", "s_aux"):
        assert kw[name].kind == inspect.Parameter.KEYWORD_ONLY, name
    assert "flash_attn_with_kvcache" in ops.__all__


def _caches():
    return np.zeros((4, 16, 2, 64), np.float16), np.zeros((6, 16, 2, 64), np.float16)


def test_swap_blocks_tells_the_two_forms_apart():
    src, dst = _caches()
    block = 16 * 2 * 64 * 2  # bytes of one block
    with pytest.raises(ValueError, match=r"swap_blocks\(src, dst, 4096\): block_mapping is "
                                         r"missing; vLLM 0.33's form is swap_blocks\(src, dst, "
                                         r"block_size_in_bytes, block_mapping\)"):
        ops.swap_blocks(src, dst, 4096)
    for bad in ([[0, 1]], 0, -8, True, 2.0):
        with pytest.raises(ValueError, match=r"block_size_in_bytes=.* is not supported; "
                                             r"allowed: an int >= 1"):
            ops.swap_blocks(src, dst, bad, [[0, 1]])
    # Both forms check every pair against the blocks they see before any copy: the byte form
    # counts blocks of block_size_in_bytes (here half blocks: 8 of src, 12 of dst).
    with pytest.raises(graphattn.GraphattnError, match=r"pair 1 \(4 -> 2\) is out of range"):
        ops.swap_blocks(src, dst, [[0, 1], [4, 2]])
    with pytest.raises(graphattn.GraphattnError, match=r"pair 1 \(8 -> 2\) is out of range"):
        ops.swap_blocks(src, dst, block // 2, [[7, 11], [8, 2]])
    with pytest.raises(ValueError, match=r"src holds 16384 bytes, not a whole number of blocks "
                                         r"of block_size_in_bytes 3000"):
        ops.swap_blocks(src, dst, 3000, [[0, 1]])
    with pytest.raises(ValueError, match=r"src \(shape \(4, 16, 2, 32\), .*must be compact"):
        ops.swap_blocks(src[..., ::2], dst, block, [[0, 1]])


def test_reshape_and_cache_interleaved_v_is_checked():
    key = np.zeros((3, 2, 64), np.float16)
    kc = np.zeros((4, 2, 8, 16, 8), np.float16)
    vc = np.zeros((4, 2, 64, 16), np.float16)
    slots = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match=r"interleaved_v='yes' is not supported; allowed: True "
                                         r"or False"):
        ops.reshape_and_cache(key, key, kc, vc, slots, "auto", 1.0, 1.0, "yes")
    # Accepted as vLLM passes it (9 positional arguments); host caches are refused by the
    # library, naming where they are.
    with pytest.raises(graphattn.GraphattnError, match="CUDA|device|host"):
        ops.reshape_and_cache(key, key, kc, vc, slots, "auto", 1.0, 1.0, True)


@pytest.mark.parametrize("kw,message", [
    (dict(rotary_cos=np.zeros(4)), "rotary_cos=.* is not supported: graphattn applies no rotary"),
    (dict(cache_leftpad=np.zeros(2)), "cache_leftpad=.* left-padded caches are not supported"),
    (dict(return_softmax_lse=True), "return_softmax_lse=True is not supported"),
    (dict(k=np.zeros(4)), "k and v must be given together"),
    (dict(cache_seqlens=None), "cache_seqlens=None is not supported: pass the cached lengths"),
    (dict(), "flash_attn_with_kvcache takes PyTorch tensors"),
])
def test_flash_attn_with_kvcache_refusals(kw, message):
    args = dict(cache_seqlens=3)
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        ops.flash_attn_with_kvcache(np.zeros((2, 1, 4, 64), np.float16),
                                    np.zeros((4, 16, 2, 64), np.float16),
                                    np.zeros((4, 16, 2, 64), np.float16), **args)


def test_paged_attention_dtypes_named():
    q = np.zeros((2, 4, 64), np.float64)
    kc = np.zeros((4, 2, 16, 16, 4), np.float32)
    with pytest.raises(ValueError, match="query dtype float64 is not supported; supported: "
                                         "float16, bfloat16, float32"):
        ops.paged_attention_v1(q, q, kc, kc, 2, 0.1, np.zeros((2, 1), np.int32),
                               np.ones(2, np.int32), 16, 16, None, "auto", 1.0, 1.0)
