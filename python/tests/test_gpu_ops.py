# SPDX-License-Identifier: Apache-2.0
"""graphattn.ops on a GPU, called the way vLLM v1's FlashAttention backend calls
reshape_and_cache_flash and flash_attn_varlen_func: against a torch scatter (bit-exact) and SDPA
in float64, eager and captured with torch.cuda.graph; encoder_attention and multi_head_attention
(no KV cache) against non-causal attention per sequence in float64."""

import math

import pytest

from conftest import require_torch_gpu

torch = require_torch_gpu()

import graphattn  # noqa: E402
from graphattn import ops  # noqa: E402
from gpu_batch import (TOLERANCE, Batch, capture, check_output, dense_reference,  # noqa: E402
                       relative_l2, replay_and_compare)

BF16 = dict(num_heads=16, num_kv_heads=4, head_size=128, block_size=16, dtype=torch.bfloat16)


def lengths(seed, n, low, high):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high + 1, (n,), generator=g).tolist()


def scales():
    """vLLM's layer._k_scale / _v_scale: 1-element float32 device tensors."""
    return (torch.ones(1, dtype=torch.float32, device="cuda"),
            torch.ones(1, dtype=torch.float32, device="cuda"))


def write(b, kv_cache_dtype="auto", k_scale=None, v_scale=None):
    ks, vs = scales()
    key_cache, value_cache = b.kv_cache.unbind(0)
    ops.reshape_and_cache_flash(b.key, b.value, key_cache, value_cache, b.slot_mapping,
                                kv_cache_dtype, ks if k_scale is None else k_scale,
                                vs if v_scale is None else v_scale)


def attend(b, max_seqlen_q, max_seqlen_k=None, **kw):
    key_cache, value_cache = b.kv_cache.unbind(0)
    ks, vs = scales()
    descale_shape = (b.num_reqs, b.num_kv_heads)
    return ops.flash_attn_varlen_func(
        q=b.query, k=key_cache, v=value_cache, out=b.output,
        cu_seqlens_q=b.query_start_loc, max_seqlen_q=max_seqlen_q,
        seqused_k=b.seq_lens, max_seqlen_k=max_seqlen_k or b.max_seq_len,
        softmax_scale=kw.pop("softmax_scale", None), causal=kw.pop("causal", True),
        window_size=kw.pop("window_size", (-1, -1)), block_table=b.block_table,
        softcap=kw.pop("softcap", 0.0), scheduler_metadata=None, fa_version=3,
        q_descale=ks.expand(descale_shape), k_descale=ks.expand(descale_shape),
        v_descale=vs.expand(descale_shape), num_splits=0, **kw)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_reshape_and_cache_flash_is_a_scatter(seed, dtype, layout):
    b = Batch(query_lens=[1, 7, 30], context_lens=[20, 0, 100], seed=seed, num_heads=8,
              num_kv_heads=4, head_size=128, block_size=16, dtype=dtype, layout=layout,
              padded=2)
    expected = b.expected_cache()
    # vLLM passes padded key/value rows and an unpadded slot mapping: rows past it are ignored.
    b.key = torch.cat([b.key, torch.randn_like(b.key[:5])])
    b.value = torch.cat([b.value, torch.randn_like(b.value[:5])])
    write(b)
    torch.cuda.synchronize()
    assert torch.equal(b.kv_cache, expected)


def test_reshape_and_cache_flash_fp8(seed):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this PyTorch has no float8_e4m3fn")
    b = Batch(query_lens=[3, 4], context_lens=[5, 0], seed=seed, num_heads=8, num_kv_heads=4,
              head_size=64, block_size=16, dtype=torch.bfloat16, kv_dtype=torch.float8_e4m3fn)
    k_scale = torch.full((1,), 0.5, device="cuda")
    write(b, "fp8", k_scale=k_scale, v_scale=0.25)
    torch.cuda.synchronize()
    blocks, offs = b.slot_mapping // 16, b.slot_mapping % 16
    stored = b.kv_cache.float()
    assert torch.allclose(stored[0][blocks, offs] * 0.5, b.key.float(), rtol=0.13, atol=0.01)
    assert torch.allclose(stored[1][blocks, offs] * 0.25, b.value.float(), rtol=0.13,
                          atol=0.01)
    # uint8 storage works the same when the op is told the format.
    raw = b.kv_cache.view(torch.uint8)
    before = raw.clone()
    ops.reshape_and_cache_flash(b.key, b.value, raw[0], raw[1], b.slot_mapping, "fp8_e4m3",
                                0.5, 0.25)
    torch.cuda.synchronize()
    assert torch.equal(raw, before)  # the same bytes again


def test_decode_prefill_mixed(seed):
    ctx = lengths(seed, 4, 0, 1800)
    decode = Batch(query_lens=[1] * 4, context_lens=ctx, seed=seed, padded=2, **BF16)
    write(decode)
    attend(decode, max_seqlen_q=1)
    torch.cuda.synchronize()
    check_output(decode, decode.reference(decode.kv_cache), "ops decode")

    prefill = Batch(query_lens=[9, 1, 70], context_lens=[0, 33, 250], seed=seed + 1, **BF16)
    write(prefill)
    out = attend(prefill, max_seqlen_q=70)
    assert out is prefill.output
    torch.cuda.synchronize()
    check_output(prefill, prefill.reference(prefill.kv_cache), "ops prefill")

    for num_decodes in (None, 2):  # all through the prefill kernel, or the decodes split off
        mixed = Batch(query_lens=[1, 1, 40, 3], context_lens=lengths(seed + 2, 4, 0, 900),
                      seed=seed + 2, **BF16)
        write(mixed)
        kw = {} if num_decodes is None else dict(num_decodes=num_decodes)
        attend(mixed, max_seqlen_q=40, **kw)
        torch.cuda.synchronize()
        check_output(mixed, mixed.reference(mixed.kv_cache), "ops mixed %s" % num_decodes)


def test_non_causal_prefill_over_the_paged_cache(seed):
    """causal=False: vLLM's encoder attention over the cache; each query sees all its keys."""
    b = Batch(query_lens=[1, 1, 40, 17], context_lens=[300, 12, 0, 90], seed=seed, **BF16)
    write(b)
    attend(b, max_seqlen_q=40, causal=False, num_decodes=2)
    torch.cuda.synchronize()
    check_output(b, b.reference(b.kv_cache, causal=False), "ops non-causal prefill")


def test_window_softcap_scale_hnd_fp16(seed):
    b = Batch(query_lens=[1, 1, 50], context_lens=[300, 10, 120], seed=seed, num_heads=8,
              num_kv_heads=2, head_size=64, block_size=32, dtype=torch.float16, layout="HND")
    write(b)
    out = attend(b, max_seqlen_q=50, window_size=(63, 0), softcap=15.0, softmax_scale=0.1,
                 num_decodes=2)
    torch.cuda.synchronize()
    check_output(b, b.reference(b.kv_cache, scale=0.1, window=64, soft_cap=15.0),
                 "window/softcap/HND")
    assert out is b.output


def test_alibi_and_sinks(seed):
    # vLLM passes ALiBi slopes as alibi_slopes and gpt-oss's sinks as s_aux (float32, per head).
    g = torch.Generator(device="cuda").manual_seed(seed)
    slopes = torch.rand(16, generator=g, device="cuda") * 0.05
    sinks = torch.randn(16, generator=g, device="cuda") * 2
    b = Batch(query_lens=[1, 1, 60, 5], context_lens=[700, 3, 90, 0], seed=seed, **BF16)
    write(b)
    attend(b, max_seqlen_q=60, num_decodes=2, alibi_slopes=slopes, s_aux=sinks)
    torch.cuda.synchronize()
    check_output(b, b.reference(b.kv_cache, alibi_slopes=slopes, sinks=sinks), "alibi + sinks")
    # New contents in the same arrays take effect on the next call.
    sinks.mul_(-1)
    attend(b, max_seqlen_q=60, num_decodes=2, alibi_slopes=slopes, s_aux=sinks)
    torch.cuda.synchronize()
    check_output(b, b.reference(b.kv_cache, alibi_slopes=slopes, sinks=sinks), "sinks changed")
    with pytest.raises(ValueError, match=r"s_aux must be a contiguous float32 array of num_heads"):
        attend(b, max_seqlen_q=60, s_aux=sinks[:8])


def test_out_none_allocates_like_q(seed):
    b = Batch(query_lens=[1, 1], context_lens=[3, 64], seed=seed, **BF16)
    write(b)
    b.output = None
    out = attend(b, max_seqlen_q=1)
    torch.cuda.synchronize()
    assert out.shape == b.query.shape and out.dtype == b.query.dtype
    b.output = out
    check_output(b, b.reference(b.kv_cache), "out=None")


def test_fp8_scales_refused_inside_capture(seed):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this PyTorch has no float8_e4m3fn")
    b = Batch(query_lens=[1], context_lens=[5], seed=seed, num_heads=8, num_kv_heads=4,
              head_size=64, block_size=16, dtype=torch.bfloat16, kv_dtype=torch.float8_e4m3fn)
    k_scale, v_scale = scales()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="k_scale is a device tensor and the current stream is "
                                         "capturing a CUDA graph"):
        with torch.cuda.graph(graph):
            write(b, "fp8", k_scale=k_scale, v_scale=v_scale)


def test_unprepared_configuration_refused_inside_capture(seed):
    # head size 96 is used nowhere else in this module: its first call would compile.
    b = Batch(query_lens=[1, 1], context_lens=[3, 4], seed=seed, num_heads=4, num_kv_heads=4,
              head_size=96, block_size=16, dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(graphattn.GraphattnError, match="not prepared before CUDA graph capture"):
        with torch.cuda.graph(graph):
            attend(b, max_seqlen_q=1)


def test_vllm_decode_step_in_cuda_graph(seed):
    """What vLLM's full decode graph does per layer: cache write, then attention, over
    persistent buffers; capture once after an eager warm-up, then replay new batches."""
    size, max_model_len = 16, 1024
    width = max_model_len // BF16["block_size"]
    shape = dict(num_blocks=size * width // 2, max_blocks_per_seq=width)

    def batch(step, n):
        return Batch(query_lens=[1] * n, context_lens=lengths(seed + step, n, 0,
                                                              max_model_len // 2 - 1),
                     seed=seed + step, padded=size - n, **shape, **BF16)

    buf = batch(0, 11)

    def step():
        write(buf)
        attend(buf, max_seqlen_q=1, max_seqlen_k=max_model_len)

    graph = capture(step)          # its eager run prepares the backend and the workspace
    for i, n in enumerate([11, 16, 2]):
        replay_and_compare(graph, step, buf, batch(20 + i, n),
                           "ops replay %d (%d of %d)" % (i, n, size))

    # A larger eager batch of the same configuration grows the module's workspace; the graph
    # captured with the smaller one must keep working (its workspace stays alive).
    big = Batch(query_lens=[1] * 300, context_lens=lengths(seed + 30, 300, 0, 40),
                seed=seed + 30, max_blocks_per_seq=width, **BF16)
    write(big)
    attend(big, max_seqlen_q=1, max_seqlen_k=max_model_len)
    torch.cuda.synchronize()
    check_output(big, big.reference(big.kv_cache), "300 decodes")
    replay_and_compare(graph, step, buf, batch(40, 9), "replay after the workspace grew")


# ---- fp8 scales in device memory

def test_calc_kv_scales_and_device_scales(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    rows = torch.full((48, 4, 128), 1e4, dtype=torch.bfloat16, device="cuda")  # 8 padded rows
    rows[:40] = torch.randn(40, 4, 128, device="cuda", generator=g).to(torch.bfloat16)
    key = rows[:40]
    value = key * 3
    ks = torch.full((1,), float("nan"), device="cuda")
    vs = torch.full((1,), float("nan"), device="cuda")
    def amax_over(x, divisor):  # float32 on the host: IEEE division, as the kernel's
        return (x.abs().max().float().cpu() / torch.tensor(divisor)).item()

    ops.calc_kv_scales(key, value, ks, vs)
    assert ks.item() == amax_over(key, 200.0) and vs.item() == amax_over(value, 100.0)
    ops.calc_kv_scales(key, value, ks, vs, k_divisor=448.0, v_divisor=448.0)
    assert ks.item() == amax_over(key, 448.0)
    ops.calc_kv_scales(torch.zeros_like(key), value, ks, vs)
    assert ks.item() == pytest.approx(1e-12, rel=1e-6)  # never zero
    b = graphattn.AttentionBackend(num_heads=16, num_kv_heads=4, head_size=128,
                                   kv_cache_dtype="fp8_e4m3", max_model_len=1024,
                                   max_num_seqs=4, k_scale_device=ks, v_scale_device=vs)
    assert (b.config.k_scale_device, b.config.v_scale_device) == (ks.data_ptr(), vs.data_ptr())


# ---- attention without a KV cache

@pytest.mark.parametrize("dtype,modifiers", [(torch.bfloat16, False), (torch.float16, True)])
def test_encoder_attention(seed, dtype, modifiers):
    H, KH, D = 16, 4, 128
    g = torch.Generator(device="cuda").manual_seed(seed)
    # Lengths on both sides of the kernel's row and key tiles, in a seeded order.
    tiles = [1, 17, 64, 65, 130, 257]
    order = torch.randperm(len(tiles), generator=torch.Generator().manual_seed(seed)).tolist()
    lens = [tiles[i] for i in order]
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    T = starts[-1]
    # q, k and v are slices of one packed [T, H + 2 KH, D] tensor (vLLM's qkv projection).
    packed = torch.randn(T, H + 2 * KH, D, generator=g, device="cuda").to(dtype)
    q, k, v = packed[:, :H], packed[:, H:H + KH], packed[:, H + KH:]
    out = torch.full((T + 3, H, D), float("nan"), dtype=dtype, device="cuda")  # 3 spare rows
    qsl = torch.tensor(starts, dtype=torch.int32, device="cuda")
    kw, scale = {}, 1.0 / math.sqrt(D)  # the default
    if modifiers:
        scale = 0.07
        kw = dict(scale=scale, alibi_slopes=torch.rand(H, generator=g, device="cuda") * 0.05,
                  sinks=torch.randn(H, generator=g, device="cuda") * 2)
    assert ops.encoder_attention(q, k, v, out, qsl, max(lens), **kw) is out
    torch.cuda.synchronize()
    ref = dense_reference(q, k, v, starts, starts, scale, kw.get("alibi_slopes"), kw.get("sinks"))
    err = relative_l2(out[:T], ref)
    assert err <= TOLERANCE[dtype], "encoder_attention: relative L2 error %.3g" % err
    assert torch.isnan(out[T:]).all(), "rows past query_start_loc[-1] were written"


@pytest.mark.parametrize("dtype,batch,q_len,kv_len,heads,kv_heads,head_size", [
    (torch.bfloat16, 3, 130, 77, 16, 4, 64),
    (torch.bfloat16, 2, 1, 257, 8, 2, 128),
    (torch.float16, 4, 65, 65, 8, 8, 128),
])
def test_multi_head_attention(seed, dtype, batch, q_len, kv_len, heads, kv_heads, head_size):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(length, h):
        return torch.randn(batch, length, h, head_size, generator=g, device="cuda").to(dtype)

    q, k, v = randn(q_len, heads), randn(kv_len, kv_heads), randn(kv_len, kv_heads)
    # Each batch row is a sequence: its q_len queries see its kv_len keys.
    q_starts = [b * q_len for b in range(batch + 1)]
    kv_starts = [b * kv_len for b in range(batch + 1)]
    for scale in (None, 0.02):  # None: 1/sqrt(head_size)
        out = torch.full_like(q, float("nan"))
        assert ops.multi_head_attention(q, k, v, out, scale) is out
        torch.cuda.synchronize()
        ref = dense_reference(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), q_starts,
                              kv_starts, 1.0 / math.sqrt(head_size) if scale is None else scale)
        err = relative_l2(out.flatten(0, 1), ref)
        assert err <= TOLERANCE[dtype], ("multi_head_attention(scale=%s): relative L2 error %.3g"
                                         % (scale, err))


# ---- block copies

@pytest.mark.parametrize("hnd", [False, True])
def test_swap_blocks_out_and_back(seed, hnd):
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (2, 12, 16, 2, 64)
    kv = torch.randn(shape, generator=g, device="cuda").to(torch.bfloat16)
    if hnd:  # HND pages: the same blocks, heads outside tokens
        kv = kv.transpose(2, 3).contiguous().transpose(2, 3)
    before = kv.clone()
    # The host cache holds blocks in the same layout (bytes are copied as they are).
    host = torch.zeros((2, 3, 2, 16, 64), dtype=torch.bfloat16).pin_memory().transpose(2, 3) \
        if hnd else torch.zeros((2, 3) + shape[2:], dtype=torch.bfloat16).pin_memory()
    for which in (0, 1):
        ops.swap_blocks(kv[which], host[which], torch.tensor([[7, 0], [2, 2]]))
    torch.cuda.synchronize()
    for which in (0, 1):
        assert torch.equal(host[which, 0], before[which, 7].cpu())
        assert torch.equal(host[which, 2], before[which, 2].cpu())
        assert not host[which, 1].any()
        ops.swap_blocks(host[which], kv[which], [(0, 11), (2, 4)])
    torch.cuda.synchronize()
    want = before.clone()
    want[:, 11] = before[:, 7]
    want[:, 4] = before[:, 2]
    assert torch.equal(kv, want)


def test_copy_blocks_every_layer_and_in_a_graph(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    layers = [torch.randn((2, 10, 16, 2, 64), generator=g, device="cuda").to(torch.bfloat16)
              for _ in range(3)]
    mapping = torch.tensor([[3, 8], [5, 9], [6, 6]])

    def expected(before):
        want = before.clone()
        want[:, 8] = before[:, 3]
        want[:, 9] = before[:, 5]
        return want

    wants = [expected(kv) for kv in layers]
    ops.copy_blocks([kv[0] for kv in layers], [kv[1] for kv in layers], mapping)
    torch.cuda.synchronize()
    for kv, want in zip(layers, wants):
        assert torch.equal(kv, want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.copy_blocks([kv[0] for kv in layers], [kv[1] for kv in layers], mapping)
    for kv in layers:
        kv.copy_(torch.randn(kv.shape, generator=g, device="cuda").to(torch.bfloat16))
    wants = [expected(kv) for kv in layers]
    graph.replay()
    torch.cuda.synchronize()
    for kv, want in zip(layers, wants):
        assert torch.equal(kv, want)


# ---- vLLM's legacy PagedAttention caches

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reshape_and_cache_legacy_layout_is_a_scatter(seed, dtype):
    g = torch.Generator(device="cuda").manual_seed(seed)
    T, KH, D, B, NB = 20, 4, 128, 16, 9
    x = 8  # 16 bytes of 16-bit elements
    key, value = (torch.randn(T, KH, D, generator=g, device="cuda").to(dtype) for _ in range(2))
    slots = torch.randperm((NB - 1) * B, generator=g, device="cuda")[:T]
    slots[::5] = -1  # padding
    key_cache = torch.randn(NB, KH, D // x, B, x, generator=g, device="cuda").to(dtype)
    value_cache = torch.randn(NB, KH, D, B, generator=g, device="cuda").to(dtype)
    want_k, want_v = key_cache.clone(), value_cache.clone()
    for t in range(T):
        s = int(slots[t])
        if s < 0:
            continue
        blk, off = divmod(s, B)
        want_k[blk, :, :, off, :] = key[t].reshape(KH, D // x, x)
        want_v[blk, :, :, off] = value[t]
    ops.reshape_and_cache(key, value, key_cache, value_cache, slots, "auto", 1.0, 1.0)
    torch.cuda.synchronize()
    assert torch.equal(key_cache, want_k)
    assert torch.equal(value_cache, want_v)


def legacy_slots(table_row, count, block_size):
    """(blocks, offsets) of a request's positions 0..count - 1 through its block-table row."""
    pos = torch.arange(count, device="cuda")
    return table_row[pos // block_size].long(), pos % block_size


def legacy_gather(key_cache, value_cache, cache_type, table_row, seq_len):
    """float64 keys and values [seq_len, KH, D] of one request, gathered from the legacy caches
    (key [blocks, KH, D / x, B, x], value [blocks, KH, D, B]; fp8 ones as uint8 storage of
    cache_type) as stored."""
    blk, off = legacy_slots(table_row, seq_len, value_cache.shape[3])
    k = key_cache[blk, :, :, off, :]  # [s, KH, D / x, x]
    v = value_cache[blk, :, :, off]  # [s, KH, D]
    k = k.reshape(seq_len, k.shape[1], -1)
    return k.view(cache_type).double(), v.view(cache_type).double()


@pytest.mark.parametrize("dtype,kv_cache_dtype,window,alibi,B", [
    (torch.bfloat16, "auto", None, False, 16), (torch.float16, "auto", 100, True, 48),
    (torch.float16, "fp8", None, False, 32), (torch.bfloat16, "fp8_e5m2", 64, True, 128)])
def test_forward_prefix_matches_float64_over_legacy_gather(seed, dtype, kv_cache_dtype, window,
                                                           alibi, B):
    """vLLM's order: reshape_and_cache writes the new tokens into the legacy caches (the prefix
    is there already), then forward_prefix; against float64 causal attention over the caches'
    own contents, gathered in the legacy layout."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    gh = torch.Generator().manual_seed(seed)
    H, KH, D = 16, 4, 128
    fp8 = kv_cache_dtype != "auto"
    cache_type = {"auto": dtype, "fp8": torch.float8_e4m3fn,
                  "fp8_e5m2": torch.float8_e5m2}[kv_cache_dtype]
    x = 16 if fp8 else 8
    k_scale, v_scale = (0.05, 0.03) if fp8 else (1.0, 1.0)
    prefixes = torch.randint(0, 700, (3,), generator=gh).tolist() + [0]
    chunks = torch.randint(1, 300, (4,), generator=gh).tolist()
    seq_lens = [p + c for p, c in zip(prefixes, chunks)]
    blocks = [(s + B - 1) // B for s in seq_lens]
    NB = sum(blocks) + 2
    perm = torch.randperm(NB, generator=gh).tolist()
    table = torch.full((4, max(blocks)), 0, dtype=torch.int32)
    at = 0
    for r, n in enumerate(blocks):
        table[r, :n] = torch.tensor(perm[at:at + n], dtype=torch.int32)
        at += n
    table = table.cuda()
    # NaN everywhere first (vLLM's fp8 caches are uint8: 0xff is NaN in both fp8 types), then
    # the prefixes, scattered.
    if fp8:
        key_cache = torch.full((NB, KH, D // x, B, x), 0xff, dtype=torch.uint8, device="cuda")
        value_cache = torch.full((NB, KH, D, B), 0xff, dtype=torch.uint8, device="cuda")
    else:
        key_cache = torch.full((NB, KH, D // x, B, x), float("nan"), dtype=dtype, device="cuda")
        value_cache = torch.full((NB, KH, D, B), float("nan"), dtype=dtype, device="cuda")
    for r, p in enumerate(prefixes):  # (fp8 through the uint8 storage: no float8 index_put)
        blk, off = legacy_slots(table[r], p, B)
        k = torch.randn(p, KH, D, generator=g, device="cuda") / k_scale
        v = torch.randn(p, KH, D, generator=g, device="cuda") / v_scale
        key_cache[blk, :, :, off, :] = (k.reshape(p, KH, D // x, x).to(cache_type)
                                        .view(key_cache.dtype))
        value_cache[blk, :, :, off] = v.to(cache_type).view(value_cache.dtype)
    T = sum(chunks)
    query = torch.randn(T, H, D, generator=g, device="cuda").to(dtype)
    key, value = (torch.randn(T, KH, D, generator=g, device="cuda").to(dtype) for _ in range(2))
    qsl = [0]
    slots = []
    for r, (p, c) in enumerate(zip(prefixes, chunks)):
        qsl.append(qsl[-1] + c)
        slots += [int(table[r, pos // B]) * B + pos % B for pos in range(p, p + c)]
    ops.reshape_and_cache(key, value, key_cache, value_cache,
                          torch.tensor(slots, dtype=torch.int64, device="cuda"), kv_cache_dtype,
                          k_scale, v_scale)
    slopes = (torch.rand(H, generator=g, device="cuda") * 0.06 + 0.001) if alibi else None
    out = ops.forward_prefix(query, key, value, kv_cache_dtype, key_cache, value_cache, table,
                             torch.tensor(qsl, dtype=torch.int32, device="cuda"),
                             torch.tensor(seq_lens, dtype=torch.int32, device="cuda"),
                             max(chunks), slopes, window, k_scale, v_scale)
    torch.cuda.synchronize()
    assert out.shape == query.shape and out.dtype == dtype

    want = torch.zeros(T, H, D, dtype=torch.float64, device="cuda")
    scale = 1.0 / math.sqrt(D)
    for r in range(4):
        s, n = seq_lens[r], chunks[r]
        k, v = legacy_gather(key_cache, value_cache, cache_type, table[r], s)
        k, v = k * k_scale, v * v_scale
        k, v = (t.repeat_interleave(H // KH, dim=1).transpose(0, 1) for t in (k, v))  # [H, s, D]
        q = query[qsl[r]:qsl[r + 1]].double().transpose(0, 1)  # [H, n, D]
        scores = q @ k.transpose(1, 2) * scale  # [H, n, s]
        qpos = torch.arange(s - n, s, device="cuda").view(n, 1)
        kpos = torch.arange(s, device="cuda").view(1, s)
        if slopes is not None:
            scores = scores + slopes.double().view(H, 1, 1) * (kpos - qpos)
        visible = kpos <= qpos
        if window is not None:
            visible = visible & (qpos - kpos < window)
        scores = scores.masked_fill(~visible, float("-inf"))
        want[qsl[r]:qsl[r + 1]] = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1)
    err = relative_l2(out, want)
    assert err <= TOLERANCE[dtype], "relative L2 error %.3g" % err
# ---- vLLM's paged_attention_v1 / v2 over the legacy caches


def legacy_caches(num_blocks, block_size, num_kv_heads, head_size, dtype, kv_cache_dtype):
    """NaN-filled legacy caches as vLLM makes them (get_kv_cache_shape, split_kv_cache): uint8
    for fp8."""
    fp8 = kv_cache_dtype != "auto"
    kv = torch.empty((2, num_blocks, block_size * num_kv_heads * head_size),
                     dtype=torch.uint8 if fp8 else dtype, device="cuda")
    if fp8:
        kv.fill_(0xff)  # NaN in e4m3 and e5m2
    else:
        kv.fill_(float("nan"))
    x = 16 // kv.element_size()
    key_cache = kv[0].view(num_blocks, num_kv_heads, head_size // x, block_size, x)
    value_cache = kv[1].view(num_blocks, num_kv_heads, head_size, block_size)
    return key_cache, value_cache


def legacy_values(cache, kv_cache_dtype, scale):
    """A legacy cache's values as float64 (fp8 dequantized with its scale)."""
    if kv_cache_dtype == "auto":
        return cache.double()
    fp8 = torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else torch.float8_e4m3fn
    return cache.view(fp8).double() * scale


def legacy_reference(query, key_cache, value_cache, block_tables, seq_lens, scale, alibi,
                     kv_cache_dtype, k_scale, v_scale):
    """Decode attention in float64 from a torch gather of the legacy layout."""
    nb, kh, _, bs, x = key_cache.shape
    d = value_cache.shape[2]
    keys = legacy_values(key_cache, kv_cache_dtype, k_scale)  # [nb, kh, d / x, bs, x]
    keys = keys.permute(0, 3, 1, 2, 4).reshape(nb * bs, kh, d)  # slot-major rows
    values = legacy_values(value_cache, kv_cache_dtype, v_scale).permute(0, 3, 1, 2)
    values = values.reshape(nb * bs, kh, d)
    out = torch.zeros(query.shape, dtype=torch.float64, device="cuda")
    group = query.shape[1] // kh
    for r, s in enumerate(seq_lens.tolist()):
        if s <= 0:
            continue
        pos = torch.arange(s, device="cuda")
        slots = block_tables[r, pos // bs].long() * bs + pos % bs
        k = keys[slots].repeat_interleave(group, dim=1)  # [s, h, d]
        v = values[slots].repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,shd->hs", query[r].double(), k) * scale
        if alibi is not None:
            scores = scores + alibi.double()[:, None] * (pos - (s - 1))[None, :].double()
        out[r] = torch.einsum("hs,shd->hd", torch.softmax(scores, dim=-1), v)
    return out


def legacy_batch(seed, seq_lens, num_heads, num_kv_heads, head_size, block_size, dtype,
                 kv_cache_dtype, k_scale=1.0, v_scale=1.0):
    """Legacy caches holding every position of each sequence, written by reshape_and_cache into
    shuffled blocks; the query, block tables and seq_lens of a decode step."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    blocks = [(s + block_size - 1) // block_size for s in seq_lens]
    num_blocks = sum(blocks) + 2
    key_cache, value_cache = legacy_caches(num_blocks, block_size, num_kv_heads, head_size, dtype,
                                           kv_cache_dtype)
    perm = torch.randperm(num_blocks, generator=g, device="cuda").int()
    width = max(max(blocks), 1)
    block_tables = torch.full((len(seq_lens), width), 0x3fffffff, dtype=torch.int32,
                              device="cuda")
    used = 0
    for r, n in enumerate(blocks):
        block_tables[r, :n] = perm[used:used + n]
        used += n
    slots = torch.cat([block_tables[r, torch.arange(s, device="cuda") // block_size].long() *
                       block_size + torch.arange(s, device="cuda") % block_size
                       for r, s in enumerate(seq_lens)])
    key, value = (torch.randn(slots.numel(), num_kv_heads, head_size, generator=g,
                              device="cuda").to(dtype) for _ in range(2))
    ops.reshape_and_cache(key, value, key_cache, value_cache, slots, kv_cache_dtype, k_scale,
                          v_scale)
    query = torch.randn(len(seq_lens), num_heads, head_size, generator=g, device="cuda").to(dtype)
    seq = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
    return query, key_cache, value_cache, block_tables, seq


@pytest.mark.parametrize("version", ["v1", "v2", "forward_decode"])
@pytest.mark.parametrize("dtype,kv_cache_dtype,head_size,block_size,group,alibi", [
    (torch.bfloat16, "auto", 128, 16, 4, False),
    (torch.float16, "auto", 80, 32, 1, True),
    (torch.bfloat16, "fp8", 256, 16, 8, True),
    (torch.float16, "fp8_e5m2", 64, 32, 4, False),
])
def test_paged_attention_legacy_matches_a_float64_gather(seed, version, dtype, kv_cache_dtype,
                                                         head_size, block_size, group, alibi):
    seq_lens = [1, 0, 17, block_size, 600] + lengths(seed, 3, 2, 3000)
    kh = 2
    h = kh * group
    k_scale, v_scale = (0.05, 0.04) if kv_cache_dtype != "auto" else (1.0, 1.0)
    query, key_cache, value_cache, block_tables, seq = legacy_batch(
        seed, seq_lens, h, kh, head_size, block_size, dtype, kv_cache_dtype, k_scale, v_scale)
    slopes = (torch.rand(h, device="cuda") * 0.05).float() if alibi else None
    scale = 1.0 / math.sqrt(head_size)
    max_seq_len = max(seq_lens)
    ks = torch.full((1,), k_scale, dtype=torch.float32, device="cuda")  # vLLM passes tensors
    vs = torch.full((1,), v_scale, dtype=torch.float32, device="cuda")
    if version == "forward_decode":
        out = ops.forward_decode(query, key_cache, value_cache, block_tables, seq, max_seq_len,
                                 kv_cache_dtype, kh, scale, slopes, ks, vs)
    else:
        out = torch.full_like(query, float("nan"))
        args = (query, key_cache, value_cache, kh, scale, block_tables, seq, block_size,
                max_seq_len, slopes, kv_cache_dtype, ks, vs)
        if version == "v1":
            ops.paged_attention_v1(out, *args)
        else:
            parts = (max_seq_len + 511) // 512
            exp_sums = torch.full((len(seq_lens), h, parts), float("nan"), device="cuda")
            tmp_out = torch.full((len(seq_lens), h, parts, head_size), float("nan"),
                                 dtype=dtype, device="cuda")
            ops.paged_attention_v2(out, exp_sums, exp_sums.clone(), tmp_out, *args)
    want = legacy_reference(query, key_cache, value_cache, block_tables, seq, scale, slopes,
                            kv_cache_dtype, k_scale, v_scale)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    assert torch.all(out[1] == 0)  # seq_len 0
    assert relative_l2(out.double(), want) <= TOLERANCE[dtype]


def test_paged_attention_v2_past_8192_tokens(seed):
    seq_lens = [9000, 1, 12345]
    query, key_cache, value_cache, block_tables, seq = legacy_batch(
        seed, seq_lens, 8, 1, 128, 16, torch.bfloat16, "auto")
    assert not ops.use_paged_attention_v1(max(seq_lens), 3, 8)
    out = ops.forward_decode(query, key_cache, value_cache, block_tables, seq, max(seq_lens),
                             "auto", 1, 0.088, None, 1.0, 1.0)
    want = legacy_reference(query, key_cache, value_cache, block_tables, seq, 0.088, None,
                            "auto", 1.0, 1.0)
    torch.cuda.synchronize()
    assert relative_l2(out.double(), want) <= TOLERANCE[torch.bfloat16]


def test_paged_attention_v1_captured_replays_new_seq_lens(seed):
    seq_lens = [3000, 3000, 3000, 3000]  # every replay reads within these positions
    query, key_cache, value_cache, block_tables, seq = legacy_batch(
        seed, seq_lens, 16, 4, 128, 16, torch.float16, "auto")
    out = torch.empty_like(query)

    def run():
        ops.paged_attention_v1(out, query, key_cache, value_cache, 4, 0.09, block_tables, seq,
                               16, 3000, None, "auto", 1.0, 1.0)

    run()  # eager first: loads the kernel and sizes the stream's workspace
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for lens in ([1, 0, 3000, 1025], [300, 17, 16, 2999]):
        seq.copy_(torch.tensor(lens, dtype=torch.int32))
        run()
        torch.cuda.synchronize()
        eager = out.clone()
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = legacy_reference(query, key_cache, value_cache, block_tables, seq, 0.09, None,
                                "auto", 1.0, 1.0)
        assert relative_l2(out.double(), want) <= TOLERANCE[torch.float16]
        assert relative_l2(out.double(), eager.double()) <= TOLERANCE[torch.float16]


def reference_lse(b, cache, causal=True, soft_cap=0.0, scale=None):
    """float64 softmax log-sum-exp [num_heads, num_tokens] of every query row (-inf for
    padded requests' rows), FlashAttention's softmax_lse."""
    scale = 1.0 / math.sqrt(b.head_size) if scale is None else scale
    group = b.num_heads // b.num_kv_heads
    lse = torch.full((b.num_heads, b.num_tokens), float("-inf"), dtype=torch.float64,
                     device=b.query.device)
    starts = b.query_start_loc.tolist()
    cache = cache.double()
    for r in range(b.num_reqs):
        s, n = b.seq_lens_host[r], b.query_lens[r]
        if s == 0:
            continue
        blocks = b.block_table[r, :-(-s // b.block_size)].long()
        k = cache[0][blocks].reshape(-1, b.num_kv_heads, b.head_size)[:s]
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [H, s, D]
        q = b.query[starts[r]:starts[r] + n].double().transpose(0, 1)  # [H, n, D]
        logits = (q @ k.transpose(1, 2)) * scale
        if soft_cap:
            logits = soft_cap * torch.tanh(logits / soft_cap)
        if causal:
            qpos = torch.arange(s - n, s, device=q.device)[:, None]
            kpos = torch.arange(s, device=q.device)[None, :]
            logits = logits.masked_fill(~(kpos <= qpos)[None], float("-inf"))
        lse[:, starts[r]:starts[r] + n] = torch.logsumexp(logits, dim=-1)
    return lse


def check_lse(got, want, what):
    assert got.dtype == torch.float32 and tuple(got.shape) == tuple(want.shape), what
    got = got.double()
    inf = torch.isinf(want)
    assert torch.equal(torch.isinf(got), inf), "%s: -inf where there is no key, only there" % what
    diff = (got[~inf] - want[~inf]).abs()
    bound = 2e-2 + 1e-3 * want[~inf].abs()
    assert bool((diff <= bound).all()), "%s: LSE off by up to %.3g" % (what, diff.max().item())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_return_softmax_lse_decode_and_prefill(seed, dtype):
    """flash_attn_varlen_func(return_softmax_lse=True): (out, lse), FlashAttention's
    [num_heads, total_q] float32 natural-log layout, from the decode kernel (split or not) and
    the prefill kernel, against float64."""
    kw = dict(BF16, dtype=dtype)
    b = Batch(query_lens=[1, 1, 1, 60, 7], context_lens=[5000, 3, 700, 90, 0], seed=seed,
              padded=1, **kw)
    write(b)
    out, lse = attend(b, max_seqlen_q=60, num_decodes=3, softcap=20.0,
                      return_softmax_lse=True)
    torch.cuda.synchronize()
    assert out is b.output
    check_output(b, b.reference(b.kv_cache, soft_cap=20.0), "lse batch output")
    check_lse(lse, reference_lse(b, b.kv_cache, soft_cap=20.0), "decode + prefill LSE")
    # A decode-only batch (the split-KV decode alone) and a non-causal prefill.
    d = Batch(query_lens=[1] * 6, context_lens=lengths(seed, 6, 0, 9000), seed=seed + 1, **kw)
    write(d)
    _, lse = attend(d, max_seqlen_q=1, return_softmax_lse=True)
    torch.cuda.synchronize()
    check_lse(lse, reference_lse(d, d.kv_cache), "decode LSE")
    e = Batch(query_lens=[30, 4], context_lens=[50, 200], seed=seed + 2, **kw)
    write(e)
    _, lse = attend(e, max_seqlen_q=30, causal=False, return_softmax_lse=True)
    torch.cuda.synchronize()
    check_lse(lse, reference_lse(e, e.kv_cache, causal=False), "non-causal prefill LSE")


def test_cascade_with_ops_equals_plain_attention(seed):
    """vLLM's cascade_attention over graphattn.ops: the shared prefix (every query,
    non-causal) and each suffix (causal), both with return_softmax_lse, merged by
    merge_attn_states, against float64 attention over the whole sequences."""
    prefix = 512
    pb = prefix // 16
    b = Batch(query_lens=[1] * 10 + [9, 33], context_lens=[prefix + c for c in
                                                           lengths(seed, 12, 0, 400)],
              seed=seed, **BF16)
    b.block_table[:, :pb] = b.block_table[0, :pb]  # every request shares row 0's prefix blocks
    write(b)
    key_cache, value_cache = b.kv_cache.unbind(0)
    n = b.num_tokens
    cu_prefix = torch.tensor([0, n], dtype=torch.int32, device="cuda")
    prefix_lens = torch.tensor([prefix], dtype=torch.int32, device="cuda")
    prefix_out, prefix_lse = ops.flash_attn_varlen_func(
        b.query, key_cache, value_cache, n, cu_prefix, prefix, seqused_k=prefix_lens,
        causal=False, block_table=b.block_table[:1, :pb], return_softmax_lse=True)
    suffix_out, suffix_lse = ops.flash_attn_varlen_func(
        b.query, key_cache, value_cache, 33, b.query_start_loc, b.max_seq_len - prefix,
        seqused_k=b.seq_lens - prefix, causal=True, block_table=b.block_table[:, pb:],
        return_softmax_lse=True, num_decodes=10)
    ops.merge_attn_states(b.output, prefix_out, prefix_lse, suffix_out, suffix_lse)
    torch.cuda.synchronize()
    check_output(b, b.reference(b.kv_cache), "cascade over ops")
