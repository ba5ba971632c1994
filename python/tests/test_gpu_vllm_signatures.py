# SPDX-License-Identifier: Apache-2.0
"""vLLM 0.33's op signatures on a GPU: swap_blocks with block_size_in_bytes (bytes copied as
vLLM's kernel copies them), reshape_and_cache(..., interleaved_v=True) against the layout vLLM's
Triton writer documents, flash_attn_with_kvcache (k/v appended at cache_seqlens, then attention)
against float64, and paged_attention_v1 / v2 with float32 and block sizes 8/16/32 at vLLM's own
float32 bar (absolute error <= 1e-3) against float64."""

import math

import pytest

from conftest import require_torch_gpu

torch = require_torch_gpu()

from graphattn import ops  # noqa: E402
from gpu_batch import TOLERANCE, relative_l2  # noqa: E402


def test_swap_blocks_with_block_size_in_bytes(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    kv = torch.randn((2, 12, 16, 2, 64), generator=g, device="cuda").to(torch.bfloat16)
    before = kv.clone()
    block = 16 * 2 * 64 * 2
    host = torch.zeros((3, 16, 2, 64), dtype=torch.bfloat16).pin_memory()
    flat = torch.zeros(3 * block, dtype=torch.uint8).pin_memory()  # any dtype, any shape
    ops.swap_blocks(kv[0], host, block, torch.tensor([[7, 0], [2, 2]]))
    ops.swap_blocks(kv[1], flat, block, torch.tensor([[5, 1]]))
    torch.cuda.synchronize()
    assert torch.equal(host[0], before[0, 7].cpu())
    assert torch.equal(host[2], before[0, 2].cpu())
    assert not host[1].any()
    assert torch.equal(flat[block:2 * block].view(torch.bfloat16),
                       before[1, 5].cpu().flatten())
    # Back, in half blocks (block_size_in_bytes need not be a cache block): block 0 of host is
    # half blocks 0 and 1.
    ops.swap_blocks(host, kv[0], block // 2, [(0, 22), (1, 23)])
    torch.cuda.synchronize()
    want = before.clone()
    want[0, 11] = before[0, 7]
    assert torch.equal(kv, want)


CASES = [(torch.float16, "auto", 16), (torch.bfloat16, "auto", 8), (torch.float32, "auto", 8),
         (torch.float32, "auto", 32), (torch.bfloat16, "fp8", 32)]


@pytest.mark.parametrize("dtype,kv_cache_dtype,block", CASES)
def test_reshape_and_cache_interleaved_v(seed, dtype, kv_cache_dtype, block):
    g = torch.Generator(device="cuda").manual_seed(seed)
    T, KH, D, NB = 37, 2, 64, 10
    fp8 = kv_cache_dtype != "auto"
    cache_dtype = torch.float8_e4m3fn if fp8 else dtype
    x = 16 // (1 if fp8 else dtype.itemsize)  # the key cache's x and the interleave factor
    key = torch.randn((T, KH, D), generator=g, device="cuda").to(dtype)
    value = torch.randn((T, KH, D), generator=g, device="cuda").to(dtype)
    slots = torch.randperm(NB * block, generator=g, device="cuda")[:T].to(torch.int64)
    slots[::5] = -1
    for interleaved in (False, True):
        kc = torch.zeros((NB, KH, D // x, block, x), dtype=cache_dtype, device="cuda")
        vc = torch.zeros((NB, KH, D, block), dtype=cache_dtype, device="cuda")
        ops.reshape_and_cache(key, value, kc, vc, slots, kv_cache_dtype, 1.0, 1.0, interleaved)
        torch.cuda.synchronize()
        # vLLM's interleaved value layout [blocks, heads, block / x, head_size, x]
        vi = vc.view(NB, KH, block // x, D, x)
        for t, s in enumerate(slots.tolist()):
            if s < 0:
                continue
            blk, off = divmod(s, block)
            k_got = kc[blk, :, :, off, :].reshape(KH, D).float()
            v_got = vi[blk, :, off // x, :, off % x] if interleaved else vc[blk, :, :, off]
            v_got = v_got.float()
            k_want, v_want = key[t].float(), value[t].float()
            if fp8:  # the cache holds the fp8 rounding of the value
                k_want = k_want.to(torch.float8_e4m3fn).float()
                v_want = v_want.to(torch.float8_e4m3fn).float()
            assert torch.equal(k_got, k_want), (t, "key")
            assert torch.equal(v_got, v_want), (t, "value", interleaved)
        written = (slots >= 0).sum().item()
        assert vc.float().ne(0).sum().item() <= written * KH * D


def _logical(cache, table, b, n, page):
    """Rows 0..n-1 of sequence b from a [blocks, page, heads, d] cache and its block table."""
    pos = torch.arange(n, device=cache.device)
    blocks = table[b].long()[pos // page]
    return cache[blocks, pos % page]


def _attention64(q, k, v, causal):
    """float64 attention of q [sq, H, D] over k, v [sk, KH, D], bottom-right causal."""
    sq, H, D = q.shape
    sk, KH, _ = k.shape
    g = H // KH
    k = k.double().repeat_interleave(g, dim=1)
    v = v.double().repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(D)
    if causal:
        qpos = torch.arange(sq, device=q.device)[:, None] + sk - sq
        kpos = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(kpos > qpos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)


@pytest.mark.parametrize("seqlen_q,paged", [(1, True), (3, True), (1, False)])
def test_flash_attn_with_kvcache_appends_then_attends(seed, seqlen_q, paged):
    g = torch.Generator(device="cuda").manual_seed(seed)
    B, H, KH, D, page = 3, 8, 2, 128, 16
    dt = torch.bfloat16
    lens = [5, 40, 0]
    if paged:
        NB = 32
        kv = torch.randn((2, NB, page, KH, D), generator=g, device="cuda").to(dt)
        table = torch.randperm(NB, generator=g, device="cuda")[:B * 4].reshape(B, 4)
        table = table.to(torch.int32)
    else:  # [batch, seqlen_cache, heads, d]: one 64-token "block" per sequence
        page = 64
        kv = torch.randn((2, B, page, KH, D), generator=g, device="cuda").to(dt)
        table = torch.arange(B, dtype=torch.int32, device="cuda").reshape(B, 1)
    k_cache, v_cache = kv.unbind(0)
    before = kv.clone()
    q = torch.randn((B, seqlen_q, H, D), generator=g, device="cuda").to(dt)
    k = torch.randn((B, seqlen_q, KH, D), generator=g, device="cuda").to(dt)
    v = torch.randn((B, seqlen_q, KH, D), generator=g, device="cuda").to(dt)
    out = ops.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens=torch.tensor(lens, dtype=torch.int32,
                                                              device="cuda"),
        block_table=table if paged else None, causal=True)
    torch.cuda.synchronize()
    assert out.shape == q.shape
    for b in range(B):
        n = lens[b] + seqlen_q
        kb = _logical(k_cache, table, b, n, page)
        vb = _logical(v_cache, table, b, n, page)
        assert torch.equal(kb[lens[b]:], k[b]) and torch.equal(vb[lens[b]:], v[b])
        assert torch.equal(kb[:lens[b]], _logical(before[0], table, b, lens[b], page))
        want = _attention64(q[b], kb, vb, causal=True)
        err = relative_l2(out[b], want)
        assert err <= TOLERANCE[dt], (b, err)


@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_paged_attention_float32_at_vllms_tolerance(seed, block_size, version):
    """vLLM's test_paged_attention with float32: inputs uniform in +-1/sqrt(head_size), compared
    at atol 1e-3 (here against float64)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    num_seqs, H, KH, D, NB, x = 7, 8, 2, 128, 200, 4
    scale = 1.0 / math.sqrt(D)

    def uni(*shape):
        return torch.empty(shape, device="cuda").uniform_(-scale, scale, generator=g)

    q = uni(num_seqs, H, D)
    kc, vc = uni(NB, KH, D // x, block_size, x), uni(NB, KH, D, block_size)
    lens = torch.randint(1, 1000, (num_seqs,), generator=g, device="cuda").to(torch.int32)
    lens[0] = 1
    max_len = int(lens.max())
    max_blocks = (max_len + block_size - 1) // block_size
    bt = torch.randint(0, NB, (num_seqs, max_blocks), generator=g, device="cuda")
    bt = bt.to(torch.int32)
    out = torch.full_like(q, float("nan"))
    if version == "v1":
        ops.paged_attention_v1(out, q, kc, vc, KH, scale, bt, lens, block_size, max_len, None,
                               "auto", 1.0, 1.0)
    else:
        parts = (max_len + 511) // 512
        sums = torch.empty((num_seqs, H, parts), dtype=torch.float32, device="cuda")
        tmp = torch.empty((num_seqs, H, parts, D), dtype=torch.float32, device="cuda")
        ops.paged_attention_v2(out, sums, sums.clone(), tmp, q, kc, vc, KH, scale, bt, lens,
                               block_size, max_len, None, "auto", 1.0, 1.0)
    torch.cuda.synchronize()
    # [blocks, block, heads, d] views of the legacy caches for the reference
    keys = kc.permute(0, 3, 1, 2, 4).reshape(NB, block_size, KH, D)
    values = vc.permute(0, 3, 1, 2)
    worst = 0.0
    for i in range(num_seqs):
        n = int(lens[i])
        want = _attention64(q[i:i + 1], _logical(keys, bt, i, n, block_size),
                            _logical(values, bt, i, n, block_size), causal=False)
        worst = max(worst, (out[i:i + 1].double() - want).abs().max().item())
    assert worst <= 1e-3, worst
