# SPDX-License-Identifier: Apache-2.0
"""merge_attn_states, copy_blocks with a device block mapping and float32 cache writes, on the
host: every refusal comes before any device use (no GPU needed)."""

import pytest

import graphattn
from graphattn import _dlpack, ops

from conftest import fake_cuda

F32 = (_dlpack.FLOAT, 32, 1)
BF16 = (_dlpack.BFLOAT, 16, 1)
I64 = (_dlpack.INT, 64, 1)
I32 = (_dlpack.INT, 32, 1)


def test_merge_attn_states_checks_its_arguments():
    out = fake_cuda((5, 4, 128), BF16)
    lse = fake_cuda((4, 5), F32, address=1 << 33)
    with pytest.raises(graphattn.GraphattnError,
                       match=r"merge_attn_states: prefix_lse fp32\[5, 4\] strides \[4, 1\] is not "
                             r"supported; supported: fp32\[4, 5\]"):
        ops.merge_attn_states(out, out, fake_cuda((5, 4), F32), out, lse)
    with pytest.raises(graphattn.GraphattnError, match=r"head size 12 is not supported for bf16"):
        o12 = fake_cuda((5, 4, 12), BF16)
        ops.merge_attn_states(o12, o12, lse, o12, lse)
    with pytest.raises(graphattn.GraphattnError, match=r"output_lse must be 2-d"):
        ops.merge_attn_states(out, out, lse, out, lse, fake_cuda((20,), F32))
    np = pytest.importorskip("numpy")
    with pytest.raises(graphattn.GraphattnError, match=r"output is on device type 1 \(CPU\)"):
        ops.merge_attn_states(np.zeros((5, 4, 128), np.float32), out, lse, out, lse)


def test_copy_blocks_takes_a_device_mapping():
    cache = fake_cuda((10, 16, 2, 64), BF16)
    with pytest.raises(graphattn.GraphattnError,
                       match=r"copy_blocks: block_mapping int32\[3, 2\] strides \[2, 1\] is not "
                             r"supported; supported: int64 \[num_pairs, 2\]"):
        ops.copy_blocks([cache], [cache], fake_cuda((3, 2), I32, address=1 << 34))
    with pytest.raises(graphattn.GraphattnError, match=r"block_mapping must be 2-d"):
        ops.copy_blocks([cache], [cache], fake_cuda((6,), I64, address=1 << 34))
    # A host mapping still takes the host path (pairs checked on the host).
    with pytest.raises(graphattn.GraphattnError, match=r"pair 0 \(0 -> 10\) is out of range"):
        ops.copy_blocks([cache], [], [(0, 10)])


def test_float32_cache_writes_pass_the_face():
    key = fake_cuda((4, 2, 128), F32)
    slots = fake_cuda((4,), I64, address=1 << 34)
    kc = fake_cuda((10, 2, 32, 8, 4), F32, address=1 << 35)
    vc = fake_cuda((10, 2, 128, 8), F32, address=1 << 36)
    with pytest.raises(ValueError, match=r"kv_cache_dtype 'int8' is not supported; supported: "
                                         r"auto \(the keys' float32\)"):
        ops.reshape_and_cache(key, key, kc, vc, slots, "int8", 1.0, 1.0)
    with pytest.raises(ValueError, match=r"key dtype int32 is not supported; supported: "
                                         r"float16, bfloat16, float32"):
        ops.reshape_and_cache(fake_cuda((4, 2, 128), I32), key, kc, vc, slots, "auto", 1.0, 1.0)
    bad_x = fake_cuda((10, 2, 64, 8, 2), F32, address=1 << 35)
    with pytest.raises(graphattn.GraphattnError, match=r"has x = 2 \(its last dim\)"):
        ops.reshape_and_cache(key, key, bad_x, vc, slots, "auto", 1.0, 1.0)
