# SPDX-License-Identifier: Apache-2.0
"""AttentionBackend on a GPU with PyTorch tensors: decode, prefill and mixed batches against
SDPA in float64 (fresh random data, output poisoned with NaN first), the cache write against a
torch scatter, and a decode step captured with torch.cuda.graph, replayed with new lengths,
block tables and slot mappings and compared with eager runs; multi-token decode
(decode_query_len) and an encoder-only layer (attn_type)."""

import math

import pytest

from conftest import require_torch_gpu

torch = require_torch_gpu()

import graphattn  # noqa: E402
from gpu_batch import (TOLERANCE, Batch, capture, check_output, dense_reference,  # noqa: E402
                       relative_l2, replay_and_compare)

LAYERS = {
    # name: (AttentionBackend options, Batch options)
    "bf16": (dict(num_heads=16, num_kv_heads=4, head_size=128, block_size=16, dtype="bf16"),
             dict(dtype=torch.bfloat16)),
    "fp16": (dict(num_heads=16, num_kv_heads=4, head_size=128, block_size=16,
                  dtype=torch.float16), dict(dtype=torch.float16)),
    # HND strides, a sliding window and a soft cap, GQA group 2, head 64, block 32.
    "fp16-hnd-swa-cap": (dict(num_heads=8, num_kv_heads=4, head_size=64, block_size=32,
                              dtype="float16", layout="HND", window=48, soft_cap=20.0),
                         dict(dtype=torch.float16, layout="HND")),
}
MAX_MODEL_LEN = 2048


@pytest.fixture(scope="module")
def backends():
    made = {}

    def get(name):
        if name not in made:
            opts, _ = LAYERS[name]
            attn = graphattn.AttentionBackend(max_model_len=MAX_MODEL_LEN, max_num_seqs=32,
                                              **opts)
            attn.prepare()
            made[name] = attn
        return made[name]

    return get


def make(name, seed, query_lens, context_lens, **kw):
    opts, batch_opts = LAYERS[name]
    return Batch(query_lens=query_lens, context_lens=context_lens, seed=seed,
                 num_heads=opts["num_heads"], num_kv_heads=opts["num_kv_heads"],
                 head_size=opts["head_size"], block_size=opts["block_size"],
                 **dict(batch_opts, **kw))


def run_and_check(attn, batch, num_decodes, what, with_write=True):
    c = attn.config
    expected = batch.expected_cache() if with_write else batch.kv_cache.clone()
    workspace = attn.allocate_workspace(batch.query)
    attn.forward(batch.query, batch.key if with_write else None,
                 batch.value if with_write else None, batch.kv_cache, batch.output,
                 batch.metadata(graphattn, num_decodes), workspace)
    torch.cuda.synchronize()
    assert torch.equal(batch.kv_cache, expected), "%s: cache write differs" % what
    ref = batch.reference(expected, scale=c.scale, window=c.window, soft_cap=c.soft_cap)
    return check_output(batch, ref, what)


def lengths(seed, n, low, high):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high + 1, (n,), generator=g).tolist()


@pytest.mark.parametrize("name", list(LAYERS))
def test_decode(backends, seed, name):
    ctx = lengths(seed, 9, 0, 1500)
    ctx[0] = 1500  # one long request: split-KV
    b = make(name, seed, [1] * 9, ctx, padded=3)
    run_and_check(backends(name), b, b.num_reqs, "decode " + name)


@pytest.mark.parametrize("name", list(LAYERS))
def test_prefill(backends, seed, name):
    b = make(name, seed, [7, 64, 100, 1, 33], [0, 30, 200, 50, 300])
    run_and_check(backends(name), b, 0, "prefill " + name)


@pytest.mark.parametrize("name", list(LAYERS))
def test_mixed(backends, seed, name):
    ctx = lengths(seed, 6, 0, 700)
    b = make(name, seed, [1, 1, 1, 5, 17, 90], ctx)
    run_and_check(backends(name), b, 3, "mixed " + name)


def test_forward_without_cache_write(backends, seed):
    b = make("bf16", seed, [1, 1, 12], [40, 900, 25])
    run_and_check(backends("bf16"), b, 2, "no write", with_write=False)


def test_prefill_needs_no_workspace(backends, seed):
    attn = backends("bf16")
    b = make("bf16", seed, [5, 9], [10, 0])
    expected = b.expected_cache()
    attn.forward(b.query, b.key, b.value, b.kv_cache, b.output, b.metadata(graphattn, 0), None)
    torch.cuda.synchronize()
    check_output(b, b.reference(expected), "prefill without workspace")


def test_library_errors_name_the_problem(backends, seed):
    attn = backends("bf16")
    b = make("bf16", seed, [1, 1], [5, 6])
    ws = attn.allocate_workspace(b.query)
    with pytest.raises(graphattn.GraphattnError, match="query .* must have 16 heads"):
        attn.forward(b.query[:, :8], None, None, b.kv_cache, b.output,
                     b.metadata(graphattn, 2), ws)
    with pytest.raises(graphattn.GraphattnError, match="workspace of 0 bytes is smaller"):
        attn.forward(b.query, None, None, b.kv_cache, b.output, b.metadata(graphattn, 2), None)
    with pytest.raises(graphattn.GraphattnError, match="call prepare"):
        fresh = graphattn.AttentionBackend(max_model_len=MAX_MODEL_LEN, max_num_seqs=4,
                                           **LAYERS["bf16"][0])
        fresh.forward(b.query, None, None, b.kv_cache, b.output, b.metadata(graphattn, 2), ws)
    assert torch.isnan(b.output).all()  # a failed call launched nothing


def test_explicit_stream(backends, seed):
    attn = backends("bf16")
    b = make("bf16", seed, [1, 1, 1], [100, 7, 1999])
    expected = b.expected_cache()
    ws = attn.allocate_workspace(b.query)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    attn.forward(b.query, b.key, b.value, b.kv_cache, b.output, b.metadata(graphattn, 3), ws,
                 stream=side)
    side.synchronize()
    check_output(b, b.reference(expected), "explicit stream")


def test_fp8_cache_decode(seed):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this PyTorch has no float8_e4m3fn")
    opts = dict(num_heads=16, num_kv_heads=4, head_size=128, block_size=16, dtype="bf16")
    attn = graphattn.AttentionBackend(kv_cache_dtype="fp8", k_scale=0.5, v_scale=0.25,
                                      max_model_len=MAX_MODEL_LEN, max_num_seqs=8, **opts)
    attn.prepare()
    b = Batch(query_lens=[1] * 5, context_lens=lengths(seed, 5, 1, 1200), seed=seed,
              num_heads=16, num_kv_heads=4, head_size=128, block_size=16, dtype=torch.bfloat16,
              kv_dtype=torch.float8_e4m3fn)
    attn.forward(b.query, b.key, b.value, b.kv_cache, b.output, b.metadata(graphattn, 5),
                 attn.allocate_workspace(b.query))
    torch.cuda.synchronize()
    # The new tokens were stored as value / scale in e4m3 (rounding may differ from torch's
    # conversion by one step): compare dequantized.
    keep = b.slot_mapping >= 0
    blocks, offs = b.slot_mapping[keep] // 16, b.slot_mapping[keep] % 16
    stored_k = b.kv_cache.float()[0][blocks, offs] * 0.5
    assert torch.allclose(stored_k, b.key[keep].float(), rtol=0.13, atol=0.01)
    ref = b.reference(b.kv_cache, k_scale=0.5, v_scale=0.25)
    check_output(b, ref, "fp8 e4m3 decode")


# ---- CUDA graph: capture once, replay with new batch contents --------------------------------

def test_decode_step_in_cuda_graph(backends, seed):
    name, size = "bf16", 8                     # the captured batch size
    attn = backends(name)
    opts = LAYERS[name][0]
    width = MAX_MODEL_LEN // opts["block_size"]
    num_blocks = 8 * width // 4                # room for 8 requests of a quarter max length
    shape = dict(num_blocks=num_blocks, max_blocks_per_seq=width)

    def batch(step, n):
        return make(name, seed + step, [1] * n, lengths(seed + step, n, 0, MAX_MODEL_LEN // 4 - 1),
                    padded=size - n, **shape)

    buf = batch(0, 6)                          # the persistent buffers the graph reads
    workspace = attn.allocate_workspace(buf.query)
    meta = buf.metadata(graphattn, size, max_seq_len=MAX_MODEL_LEN)

    def step():
        attn.forward(buf.query, buf.key, buf.value, buf.kv_cache, buf.output, meta, workspace)

    graph = capture(step)
    for i, n in enumerate([6, 8, 3, 1]):       # new lengths, tables, slots and data each time
        replay_and_compare(graph, step, buf, batch(10 + i, n),
                           "replay %d (%d of %d)" % (i, n, size))


def test_checked_mode_reports_a_bad_block_id(seed):
    opts, _ = LAYERS["bf16"]
    attn = graphattn.AttentionBackend(max_model_len=MAX_MODEL_LEN, max_num_seqs=8,
                                      check_bounds=True, **opts)
    attn.prepare()
    assert attn.required_specs()[1].endswith("_chk")
    b = make("bf16", seed, [1, 1], [40, 70])
    num_blocks = b.kv_cache.shape[1]
    b.block_table[1, 2] = num_blocks + 5  # positions 32..47 of request 1
    ws = attn.allocate_workspace(b.query)
    attn.forward(b.query, None, None, b.kv_cache, b.output, b.metadata(graphattn, 2), ws)
    v = attn.take_bounds_violation()
    assert v and (v.kind, v.request, v.value) == ("block_id", 1, num_blocks + 5), v
    assert 32 <= v.position < 48 and str(num_blocks + 5) in v.message, v
    torch.cuda.synchronize()  # the context survived
    assert not attn.take_bounds_violation()  # read and cleared
    b.block_table[1, 2] = 0
    attn.forward(b.query, None, None, b.kv_cache, b.output, b.metadata(graphattn, 2), ws)
    assert not attn.take_bounds_violation()


# ---- attention types and multi-token decode

def test_multi_token_decode(seed):
    """Speculative decoding: decode_query_len=4 runs the decodes through the multi-token kernel
    (_mt); each decode request holds 1..4 tokens, causal among themselves after its context."""
    opts, _ = LAYERS["bf16"]
    attn = graphattn.AttentionBackend(max_model_len=MAX_MODEL_LEN, max_num_seqs=16,
                                      decode_query_len=4, **opts)
    attn.prepare()
    assert attn.config.decode_query_len == 4
    assert attn.required_specs()[1].endswith("_mt")
    # Decodes only (one long request: split-KV), two padded decodes (seq_len 0) at the end.
    ctx = lengths(seed, 6, 0, 1500)
    ctx[1] = MAX_MODEL_LEN - 4
    b = make("bf16", seed, [4, 4, 1, 3, 4, 2], ctx, padded=2)
    run_and_check(attn, b, b.num_reqs, "multi-token decodes")
    # Decodes, then prefills (the prefill kernel, causal as ever).
    b = make("bf16", seed + 1, [4, 2, 4, 40, 3, 120], lengths(seed + 1, 6, 0, 700))
    run_and_check(attn, b, 3, "multi-token decodes and prefills")
    # More decode tokens than num_decodes * decode_query_len: refused, naming the counts.
    b = make("bf16", seed + 2, [5, 5], [10, 20])
    with pytest.raises(graphattn.GraphattnError,
                       match=r"num_decode_tokens 10 must be in \[2, num_decodes \* "
                             r"decode_query_len 8\]"):
        attn.forward(b.query, None, None, b.kv_cache, b.output, b.metadata(graphattn, 2),
                     attn.allocate_workspace(b.query))


def test_encoder_only_layer(seed):
    """attn_type="encoder_only": no KV cache; each request's queries see its own keys."""
    H, KH, D = 16, 4, 128
    attn = graphattn.AttentionBackend(num_heads=H, num_kv_heads=KH, head_size=D,
                                      max_model_len=MAX_MODEL_LEN, max_num_seqs=8,
                                      attn_type="encoder_only")
    attn.prepare()
    assert attn.required_specs() == [
        "prefill_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm%d_nc_dense" % attn.config.arch]
    g = torch.Generator(device="cuda").manual_seed(seed)
    lens = lengths(seed, 5, 1, 300)
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    T = starts[-1]
    q, k, v = (torch.randn(T, h, D, generator=g, device="cuda").to(torch.bfloat16)
               for h in (H, KH, KH))
    out = torch.full_like(q, float("nan"))
    # No cache, sequence lengths, block table or slots for an encoder-only layer.
    md = graphattn.AttentionMetadata(
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device="cuda"),
        seq_lens=None, block_table=None, slot_mapping=None, num_reqs=len(lens),
        num_actual_tokens=T, max_query_len=max(lens), max_seq_len=max(lens))
    attn.forward(q, k, v, None, out, md, None)
    torch.cuda.synchronize()
    err = relative_l2(out, dense_reference(q, k, v, starts, starts, 1.0 / math.sqrt(D)))
    assert err <= TOLERANCE[torch.bfloat16], "encoder-only forward: relative L2 error %.3g" % err


@pytest.mark.parametrize("name", list(LAYERS))
def test_mixed_batch_split_on_the_device(backends, seed, name):
    # device_split: the kernels find the decodes and prefills from query_start_loc; the
    # metadata holds request slots (two padded ones: no token, seq_len 0) and no split counts.
    attn = backends(name)
    # Fixed cache and block-table shapes: a second batch is copied into this one's buffers.
    width = MAX_MODEL_LEN // LAYERS[name][0]["block_size"]
    shapes = dict(num_blocks=6 * width + 3, max_blocks_per_seq=width)
    b = make(name, seed, [1, 1, 1, 5, 17, 90], lengths(seed, 6, 0, 700), **shapes)
    expected = b.expected_cache()
    pad = 2
    qsl = torch.cat([b.query_start_loc, b.query_start_loc[-1:].repeat(pad)])
    seq_lens = torch.cat([b.seq_lens, torch.zeros(pad, dtype=torch.int32, device="cuda")])
    table = torch.cat([b.block_table, torch.zeros_like(b.block_table[:pad])])
    metadata = graphattn.AttentionMetadata(
        query_start_loc=qsl, seq_lens=seq_lens, block_table=table, slot_mapping=b.slot_mapping,
        num_reqs=b.num_reqs + pad, num_actual_tokens=b.num_tokens, max_query_len=0,
        max_seq_len=MAX_MODEL_LEN, device_split=True)
    workspace = attn.allocate_workspace(b.query)
    attn.forward(b.query, b.key, b.value, b.kv_cache, b.output, metadata, workspace)
    torch.cuda.synchronize()
    assert torch.equal(b.kv_cache, expected), "device split: cache write differs"
    c = attn.config
    ref = b.reference(expected, scale=c.scale, window=c.window, soft_cap=c.soft_cap)
    check_output(b, ref, "mixed batch split on the device " + name)
    # The same forward captured once, then replayed for another mix of the same token count.
    other = make(name, seed + 1, [1, 40, 20, 20, 20, 14], lengths(seed + 1, 6, 0, 700),
                 **shapes)
    expected_other = other.expected_cache()

    def step():
        attn.forward(b.query, b.key, b.value, b.kv_cache, b.output, metadata, workspace)

    graph = capture(step)
    other.copy_into(b)
    qsl.copy_(torch.cat([b.query_start_loc, b.query_start_loc[-1:].repeat(pad)]))
    seq_lens[:b.num_reqs].copy_(b.seq_lens)
    table[:b.num_reqs].copy_(b.block_table)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(b.kv_cache, expected_other), "replayed device split: cache write differs"
    check_output(b, b.reference(expected_other, scale=c.scale, window=c.window,
                                soft_cap=c.soft_cap),
                 "replayed mixed graph, another mix, " + name)
