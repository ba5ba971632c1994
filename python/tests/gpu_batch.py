# SPDX-License-Identifier: Apache-2.0
"""Batches and references for the GPU tests (imported by them; needs PyTorch and a GPU).

A Batch is one step as vLLM v1 lays it out: requests ordered decodes first, a paged KV cache
[2, num_blocks, block_size, num_kv_heads, head_size] (NHD, or HND by strides) filled with random
data, shuffled physical blocks, the new tokens' keys and values with their slots, and query /
output rows. `expected_cache()` is the cache after a correct write (a torch scatter), and
`reference()` the attention of every query row computed from that cache in float64 by
torch.nn.functional.scaled_dot_product_attention on the gathered keys and values (with the
logits soft cap, ALiBi and sinks, which SDPA lacks, written out: `attention_float64`).
`dense_reference()` is the same for attention without a KV cache (encoder-only attention,
MultiHeadAttention): every query of a sequence sees all of that sequence's keys.
"""

import math

import torch
import torch.nn.functional as F


class Batch:
    def __init__(self, *, query_lens, context_lens, num_heads, num_kv_heads, head_size,
                 block_size, dtype, seed, layout="NHD", padded=0, num_blocks=None,
                 max_blocks_per_seq=None, device="cuda", kv_dtype=None):
        assert len(query_lens) == len(context_lens)
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.host_gen = torch.Generator().manual_seed(seed)
        self.num_heads, self.num_kv_heads, self.head_size = num_heads, num_kv_heads, head_size
        self.block_size, self.dtype, self.layout = block_size, dtype, layout
        self.query_lens = list(query_lens) + [1] * padded   # padding: one token each, ...
        self.seq_lens_host = [c + q for c, q in zip(context_lens, query_lens)] + [0] * padded
        self.num_real = len(query_lens)                     # ... sequence length 0, slot -1
        self.num_reqs = len(self.query_lens)
        self.num_tokens = sum(self.query_lens)
        self.num_real_tokens = sum(query_lens)
        need = [-(-s // block_size) for s in self.seq_lens_host]
        width = max_blocks_per_seq or max(max(need), 1)
        total = num_blocks or sum(need) + 3
        assert width >= max(need) and total >= sum(need)

        # Shuffled physical blocks; block-table entries past a request's length point at other
        # (valid) blocks, so reading past seq_len would show up as a wrong result.
        perm = torch.randperm(total, generator=self.host_gen).tolist()
        table = torch.randint(0, total, (self.num_reqs, width), generator=self.host_gen,
                              dtype=torch.int32)
        at = 0
        for r, n in enumerate(need):
            table[r, :n] = torch.tensor(perm[at:at + n], dtype=torch.int32)
            at += n
        slots, starts = [], [0]
        for r in range(self.num_reqs):
            starts.append(starts[-1] + self.query_lens[r])
            s, n = self.seq_lens_host[r], self.query_lens[r]
            if s == 0:
                slots += [-1] * n
                continue
            for p in range(s - n, s):
                slots.append(int(table[r, p // block_size]) * block_size + p % block_size)

        def randn(*shape):
            return torch.randn(*shape, generator=self.gen, device=device, dtype=torch.float32)

        self.block_table = table.to(device)
        self.slot_mapping = torch.tensor(slots, dtype=torch.int64, device=device)
        self.query_start_loc = torch.tensor(starts, dtype=torch.int32, device=device)
        self.seq_lens = torch.tensor(self.seq_lens_host, dtype=torch.int32, device=device)
        self.query = randn(self.num_tokens, num_heads, head_size).to(dtype)
        self.key = randn(self.num_tokens, num_kv_heads, head_size).to(dtype)
        self.value = randn(self.num_tokens, num_kv_heads, head_size).to(dtype)
        shape = [2, total, block_size, num_kv_heads, head_size]
        if layout == "HND":
            storage = randn(2, total, num_kv_heads, block_size, head_size)
            cache = storage.transpose(2, 3)
        else:
            cache = randn(*shape)
        self.kv_dtype = kv_dtype
        if kv_dtype is None:
            self.kv_cache = cache.to(dtype) if layout == "NHD" else \
                storage.to(dtype).transpose(2, 3)
        else:  # fp8: random values in a range the format holds
            stored = (storage if layout == "HND" else cache).mul(4).to(kv_dtype)
            self.kv_cache = stored.transpose(2, 3) if layout == "HND" else stored
        assert list(self.kv_cache.shape) == shape
        self.output = torch.full_like(self.query, float("nan"))
        self.max_seq_len = max(self.seq_lens_host)
        self.max_query_len = max([q for q, s in zip(self.query_lens, self.seq_lens_host)
                                  if s > 0] or [1])

    # -- what the engine's buffers hold -----------------------------------------------------

    def metadata(self, graphattn, num_decodes, max_seq_len=None):
        """The first num_decodes requests are decodes (one token each, or up to a multi-token
        backend's decode_query_len: num_decode_tokens counts them)."""
        prefills = [q for q in self.query_lens[num_decodes:]]
        return graphattn.AttentionMetadata(
            query_start_loc=self.query_start_loc, seq_lens=self.seq_lens,
            block_table=self.block_table, slot_mapping=self.slot_mapping,
            num_reqs=self.num_reqs, num_actual_tokens=self.num_tokens,
            max_query_len=max(prefills) if prefills else 1,
            max_seq_len=self.max_seq_len if max_seq_len is None else max_seq_len,
            num_decodes=num_decodes, num_decode_tokens=sum(self.query_lens[:num_decodes]))

    def copy_into(self, other):
        """Copies this batch's contents into `other`'s tensors (same shapes): a graph captured
        over `other`'s buffers then replays this batch."""
        for name in ("block_table", "slot_mapping", "query_start_loc", "seq_lens", "query",
                     "key", "value", "kv_cache"):
            dst, src = getattr(other, name), getattr(self, name)
            assert dst.shape == src.shape, name
            dst.copy_(src)
        other.output.fill_(float("nan"))
        for name in ("query_lens", "seq_lens_host", "num_real", "num_reqs", "num_tokens",
                     "num_real_tokens", "max_seq_len", "max_query_len"):
            setattr(other, name, getattr(self, name))

    # -- what a correct implementation produces ---------------------------------------------

    def expected_cache(self, k_scale=1.0, v_scale=1.0):
        """The KV cache after writing key/value at slot_mapping (-1 skipped)."""
        expected = self.kv_cache.clone()
        slots = self.slot_mapping
        keep = slots >= 0
        blocks, offsets = slots[keep] // self.block_size, slots[keep] % self.block_size
        k, v = self.key[keep], self.value[keep]
        if self.kv_dtype is not None:
            k = (k.float() / k_scale).to(self.kv_dtype)
            v = (v.float() / v_scale).to(self.kv_dtype)
        expected[0][blocks, offsets] = k
        expected[1][blocks, offsets] = v
        return expected

    def reference(self, cache, scale=None, window=0, soft_cap=0.0, k_scale=1.0, v_scale=1.0,
                  alibi_slopes=None, sinks=None, causal=True):
        """float64 attention of every query row over `cache`; padded requests give zeros.
        alibi_slopes / sinks: [num_heads] tensors (ALiBi bias after the cap; a sink logit per
        head in the softmax denominator). causal=False: every query sees all its request's
        keys (no window)."""
        scale = 1.0 / math.sqrt(self.head_size) if scale is None else scale
        group = self.num_heads // self.num_kv_heads
        out = torch.zeros(self.num_tokens, self.num_heads, self.head_size,
                          dtype=torch.float64, device=self.query.device)
        starts = self.query_start_loc.tolist()
        cache = cache.double()  # (fp8 too: indexing float8 tensors is not supported everywhere)
        for r in range(self.num_reqs):
            s, n = self.seq_lens_host[r], self.query_lens[r]
            if s == 0:
                continue
            blocks = self.block_table[r, :-(-s // self.block_size)].long()
            k = cache[0][blocks].reshape(-1, self.num_kv_heads, self.head_size)[:s]
            v = cache[1][blocks].reshape(-1, self.num_kv_heads, self.head_size)[:s]
            k, v = k * k_scale, v * v_scale
            k = k.repeat_interleave(group, dim=1).transpose(0, 1)   # [H, s, D]
            v = v.repeat_interleave(group, dim=1).transpose(0, 1)
            q = self.query[starts[r]:starts[r] + n].double().transpose(0, 1)  # [H, n, D]
            qpos = torch.arange(s - n, s, device=q.device)[:, None]
            kpos = torch.arange(s, device=q.device)[None, :]
            allowed = kpos <= qpos if causal else None
            if window:
                allowed &= (qpos - kpos) < window
            o = attention_float64(q, k, v, scale, qpos, kpos, allowed, soft_cap, alibi_slopes,
                                  sinks)
            out[starts[r]:starts[r] + n] = o.transpose(0, 1)
        return out


def attention_float64(q, k, v, scale, qpos, kpos, allowed=None, soft_cap=0.0,
                      alibi_slopes=None, sinks=None):
    """Attention of q [H, n, D] over k, v [H, s, D] (float64, KV heads already repeated per
    group). qpos [n, 1] and kpos [1, s] are the positions; allowed [n, s] the keys each query
    sees (None: all). Scores are scaled, capped (soft_cap), then biased by ALiBi's
    slope[h] * (key position - query position); sinks add one logit per head to the softmax
    denominator, holding no value."""
    if not soft_cap and alibi_slopes is None and sinks is None:
        mask = None if allowed is None else allowed[None, None]
        return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask,
                                              scale=scale)[0]
    logits = (q @ k.transpose(1, 2)) * scale
    if soft_cap:
        logits = soft_cap * torch.tanh(logits / soft_cap)
    if alibi_slopes is not None:
        logits = logits + alibi_slopes.double()[:, None, None] * (kpos - qpos)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    if sinks is None:
        return torch.softmax(logits, dim=-1) @ v
    column = sinks.double()[:, None, None].expand(-1, q.shape[1], 1)
    logits = torch.cat([logits, column], dim=-1)
    return torch.softmax(logits, dim=-1)[..., :-1] @ v


def dense_reference(q, k, v, q_starts, kv_starts, scale, alibi_slopes=None, sinks=None):
    """float64 non-causal attention without a KV cache: the query rows
    q_starts[r]:q_starts[r + 1] of q [tokens, H, D] see all the rows
    kv_starts[r]:kv_starts[r + 1] of k, v [tokens, KH, D]; ALiBi positions count from each
    sequence's start. Returns [q_starts[-1], H, D]."""
    group = q.shape[1] // k.shape[1]
    out = torch.zeros(q_starts[-1], q.shape[1], q.shape[2], dtype=torch.float64,
                      device=q.device)
    for r in range(len(q_starts) - 1):
        rows = slice(q_starts[r], q_starts[r + 1])
        qs = q[rows].double().transpose(0, 1)  # [H, n, D]
        ks, vs = (x[kv_starts[r]:kv_starts[r + 1]].double().repeat_interleave(group, dim=1)
                  .transpose(0, 1) for x in (k, v))  # [H, s, D]
        qpos = torch.arange(qs.shape[1], device=q.device)[:, None]
        kpos = torch.arange(ks.shape[1], device=q.device)[None, :]
        out[rows] = attention_float64(qs, ks, vs, scale, qpos, kpos, alibi_slopes=alibi_slopes,
                                      sinks=sinks).transpose(0, 1)
    return out


def relative_l2(actual, expected):
    actual, expected = actual.double(), expected.double()
    assert torch.isfinite(actual).all(), "non-finite output (poisoned rows left unwritten?)"
    return (torch.linalg.vector_norm(actual - expected) /
            torch.linalg.vector_norm(expected).clamp_min(1e-30)).item()


TOLERANCE = {torch.bfloat16: 5e-3, torch.float16: 1e-3}


def check_output(batch, reference, what):
    """The real rows match the reference within the dtype's tolerance; padded rows are 0."""
    real = batch.num_real_tokens
    err = relative_l2(batch.output[:real], reference[:real])
    tol = TOLERANCE[batch.dtype]
    assert err <= tol, "%s: relative L2 error %.3g > %.g" % (what, err, tol)
    pad = batch.output[real:]
    assert torch.equal(pad, torch.zeros_like(pad)), "%s: padded rows are not zero" % what
    return err


def capture(step):
    """A CUDA graph of step(), captured after one eager run on a side stream (what
    torch.cuda.graph asks for: it prepares everything the capture must not do)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def replay_and_compare(graph, step, buf, new, what):
    """Copies batch `new` into the captured buffers `buf`, replays, checks the cache write
    (bit-exact) and the output (against the reference), then runs step() eagerly on the same
    inputs and requires the same output bit for bit."""
    new.copy_into(buf)
    expected = buf.expected_cache()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(buf.kv_cache, expected), "%s: cache write differs" % what
    check_output(buf, buf.reference(expected), what)
    replayed = buf.output.clone()
    buf.output.fill_(float("nan"))
    step()  # eager: rewrites the same slots with the same values
    torch.cuda.synchronize()
    assert torch.equal(buf.output, replayed), "%s: replay differs from eager" % what
