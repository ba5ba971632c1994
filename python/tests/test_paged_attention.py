# SPDX-License-Identifier: Apache-2.0
"""vLLM's paged_attention_v1 / v2 and forward_decode over the legacy caches, without a GPU: the
v1-vs-v2 rule, and argument checks that fail before any launch (fake CUDA tensors that are never
read)."""

import pytest

import graphattn
from conftest import fake_cuda
from graphattn import _dlpack, ops

I32 = (_dlpack.INT, 32, 1)
F32 = (_dlpack.FLOAT, 32, 1)
U8 = (_dlpack.UINT, 8, 1)


def test_v1_or_v2_is_vllms_rule():
    assert ops.use_paged_attention_v1(512, 1, 8)  # one partition
    assert not ops.use_paged_attention_v1(4096, 8, 32)  # 256 rows of 8 partitions
    assert ops.use_paged_attention_v1(4096, 64, 32)  # 2048 rows > 512
    assert not ops.use_paged_attention_v1(8193, 64, 32)  # past 8192: v2
    assert not ops.use_paged_attention_v1(1024, 16, 32)  # exactly 512 rows: v2
    with pytest.raises(graphattn.GraphattnError, match="max_seq_len -1 must be >= 0"):
        ops.use_paged_attention_v1(-1, 1, 1)


def call_args(**change):
    """vLLM's v1 arguments after out, for 3 sequences of 8 heads over 2 KV heads of 128 in
    fp16 legacy caches of 10 blocks of 16."""
    args = dict(query=fake_cuda((3, 8, 128)), key_cache=fake_cuda((10, 2, 16, 16, 8)),
                value_cache=fake_cuda((10, 2, 128, 16)), num_kv_heads=2, scale=0.1,
                block_tables=fake_cuda((3, 5), I32), seq_lens=fake_cuda((3,), I32),
                block_size=16, max_seq_len=1000, alibi_slopes=None, kv_cache_dtype="auto",
                k_scale=1.0, v_scale=1.0)
    args.update(change)
    return args


def v1(**change):
    ops.paged_attention_v1(fake_cuda((3, 8, 128)), **call_args(**change))


def v2(exp_sums=None, tmp_out=None, **change):
    sums = exp_sums or fake_cuda((3, 8, 2), F32)
    ops.paged_attention_v2(fake_cuda((3, 8, 128)), sums, sums, tmp_out or fake_cuda((3, 8, 2, 128)),
                           **call_args(**change))


@pytest.mark.parametrize("call", [v1, v2])
def test_checks_before_any_launch(call):
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp4' is not supported"):
        call(kv_cache_dtype="fp4")
    with pytest.raises(graphattn.GraphattnError, match="num_kv_heads 4 differs from the caches' 2"):
        call(num_kv_heads=4)
    with pytest.raises(graphattn.GraphattnError, match="local_blocks 0 is not supported"):
        call(blocksparse_vert_stride=8)
    with pytest.raises(graphattn.GraphattnError, match="block_size 32 differs"):
        call(block_size=32)
    with pytest.raises(ValueError, match="alibi_slopes must be a contiguous float32 array of "
                                         "num_heads \\(8\\) values"):
        call(alibi_slopes=fake_cuda((7,), F32))
    # uint8 caches read as the fp8 name says; "auto" cannot read them.
    fp8 = dict(key_cache=fake_cuda((10, 2, 8, 16, 16), U8),
               value_cache=fake_cuda((10, 2, 128, 16), U8))
    with pytest.raises(graphattn.GraphattnError, match="key_cache has dtype uint8 but the KV cache "
                                                       "dtype is auto"):
        call(**fp8)
    with pytest.raises(graphattn.GraphattnError, match="fp8 KV cache needs positive k_scale"):
        call(kv_cache_dtype="fp8", k_scale=-1.0, **fp8)


def test_v2_checks_its_temporaries():
    with pytest.raises(graphattn.GraphattnError, match="exp_sums fp32\\[3, 8, 1\\]"):
        v2(exp_sums=fake_cuda((3, 8, 1), F32))
    with pytest.raises(graphattn.GraphattnError, match="tmp_out fp32\\[3, 8, 2, 128\\]"):
        v2(tmp_out=fake_cuda((3, 8, 2, 128), F32))


def test_forward_decode_needs_a_framework_to_allocate():
    args = call_args()
    args.pop("block_size")
    with pytest.raises(TypeError, match="out=None needs a PyTorch or CuPy query"):
        ops.forward_decode(**args)
