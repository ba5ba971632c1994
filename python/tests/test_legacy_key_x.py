# SPDX-License-Identifier: Apache-2.0
"""The legacy key cache's x through the Python face (ops -> C ABI -> C++), on the host: vLLM
reads x from the key cache's last dim (its tests build fp8 caches with x = 8); graphattn's
paged_attention_v1 / v2, forward_prefix and reshape_and_cache take 16 bytes of elements, 8 and
16, and refuse any other x naming it, before any device use (no GPU needed)."""

import pytest

import graphattn
from graphattn import _dlpack, ops

from conftest import fake_cuda

BF16 = (_dlpack.BFLOAT, 16, 1)
E4M3 = (_dlpack.FLOAT8_E4M3FN, 8, 1)
I32 = (_dlpack.INT, 32, 1)
I64 = (_dlpack.INT, 64, 1)


def _caches(x, dtype=BF16):
    key_cache = fake_cuda((10, 2, 128 // x, 16, x), dtype, address=1 << 35)
    value_cache = fake_cuda((10, 2, 128, 16), dtype, address=1 << 36)
    return key_cache, value_cache


def _decode(x, fp8=False):
    q = fake_cuda((3, 8, 128), BF16)
    kc, vc = _caches(x, E4M3 if fp8 else BF16)
    ops.paged_attention_v1(q, q, kc, vc, 2, 0.1, fake_cuda((3, 4), I32, address=1 << 37),
                           fake_cuda((3,), I32, address=1 << 38), 16, 64, None,
                           "fp8" if fp8 else "auto", 1.0, 1.0)


def _prefix(x, fp8=False):
    q = fake_cuda((4, 8, 128), BF16)
    kc, vc = _caches(x, E4M3 if fp8 else BF16)
    ops.forward_prefix(q, None, None, "fp8" if fp8 else "auto", kc, vc,
                       fake_cuda((1, 4), I32, address=1 << 37),
                       fake_cuda((2,), I32, address=1 << 38), fake_cuda((1,), I32, address=1 << 39),
                       4, None, 0, 1.0, 1.0, out=q)


def _write(x):
    key = fake_cuda((4, 2, 128), BF16)
    kc, vc = _caches(x)
    ops.reshape_and_cache(key, key, kc, vc, fake_cuda((4,), I64, address=1 << 37), "auto", 1.0,
                          1.0)


@pytest.mark.parametrize("call", [_decode, _prefix, _write])
@pytest.mark.parametrize("x", [4, 32])
def test_other_x_is_refused_naming_it(call, x):
    with pytest.raises(graphattn.GraphattnError,
                       match=r"has x = %d \(its last dim\), which is not supported; supported: "
                             r"8, 16" % x):
        call(x)


@pytest.mark.parametrize("call, x, fp8", [(_decode, 8, False), (_decode, 16, False),
                                          (_decode, 8, True), (_prefix, 8, False),
                                          (_prefix, 16, False), (_prefix, 8, True),
                                          (_write, 8, False), (_write, 16, False)])
def test_x_8_and_16_pass_every_check(call, x, fp8):
    # Every argument check passes; what stops the call is the device (none here), never the key
    # cache's shape. On a GPU the call would launch on the fake addresses and fault, so it runs
    # on machines without one; tests/gpu/test_legacy_*.cpp run x = 8 and 16 on the device.
    if graphattn.gpu_available():
        pytest.skip("a GPU is present: the call would launch on fake addresses")
    with pytest.raises(graphattn.GraphattnError) as e:
        call(x, fp8) if fp8 else call(x)
    text = str(e.value)
    assert "x =" not in text and "key_cache" not in text and "not supported" not in text, text
