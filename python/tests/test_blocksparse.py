# SPDX-License-Identifier: Apache-2.0
"""Block-sparse attention parameters (vLLM's BlocksparseParams names) and their checks. CPU only
(arch=90 needs no GPU until prepare())."""

import pytest

import graphattn

BASE = dict(num_heads=32, num_kv_heads=8, head_size=128, max_model_len=4096, max_num_seqs=16,
            arch=90)


def params(**kw):
    opts = dict(max_seqlen=4096, num_heads=32, num_kv_heads=8, block_size=64, local_blocks=4,
                vert_stride=8)
    opts.update(kw)
    return graphattn.BlocksparseParams(**opts)


def test_head_sliding_step_follows_vllm():
    hs = graphattn.blocksparse.head_sliding_step
    assert hs(32, 8, 8) == 1
    assert hs(4, 4, 16) == 4
    assert hs(32, 8, 8, homo_head=True) == 0
    assert hs(32, 8, 8, homo_head_group=True) == -1
    assert hs(8, 2, 16, homo_head_group=True) == -8
    with pytest.raises(graphattn.GraphattnError, match="vert_stride 0"):
        hs(8, 2, 0)


def test_params_derive_step_and_head_range():
    p = params()
    assert p.head_sliding_step == 1 and p.active_head_range == (0, 32)
    p = params(tp_rank=1, tp_size=2, vert_stride=128)
    assert p.head_sliding_step == 2  # 128 // 64 total heads
    assert p.active_head_range == (32, 64)
    assert params(homo_head=True).head_sliding_step == 0
    assert params(homo_head_group=True, tp_size=2, vert_stride=64).head_sliding_step == -4
    with pytest.raises(ValueError, match="tp_rank 2"):
        params(tp_rank=2, tp_size=2)


def test_backend_takes_the_pattern():
    b = graphattn.AttentionBackend(**BASE, blocksparse_params=params(tp_rank=1, tp_size=2))
    assert b.config.blocksparse == (64, 4, 8, 1, 32)
    specs = b.required_specs()
    assert not specs[0].endswith("_bsp")  # the cache write has no pattern
    assert specs[1].endswith("_bsp") and specs[2].endswith("_bsp")
    dense = graphattn.AttentionBackend(**BASE, blocksparse_params=params(vert_stride=1))
    assert not any(s.endswith("_bsp") for s in dense.required_specs())
    assert graphattn.AttentionBackend(**BASE).config.blocksparse == (0, 0, 0, 0, 0)


@pytest.mark.parametrize("kw, message", [
    (dict(block_size=40), "block_size 40"),
    (dict(local_blocks=0), "local_blocks 0"),
])
def test_bad_patterns_name_the_value(kw, message):
    with pytest.raises(graphattn.GraphattnError, match=message):
        graphattn.AttentionBackend(**BASE, blocksparse_params=params(**kw))


def test_pattern_must_match_the_layer():
    with pytest.raises(ValueError, match="num_heads 16"):
        graphattn.AttentionBackend(**BASE, blocksparse_params=params(num_heads=16))
    with pytest.raises(TypeError, match="BlocksparseParams"):
        graphattn.AttentionBackend(**BASE, blocksparse_params=dict(block_size=64))
    with pytest.raises(graphattn.GraphattnError, match="attn_type encoder"):
        graphattn.AttentionBackend(**BASE, attn_type="encoder", blocksparse_params=params())
