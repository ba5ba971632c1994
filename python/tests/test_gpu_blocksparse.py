# SPDX-License-Identifier: Apache-2.0
"""Block-sparse attention (blocksparse_params) on a GPU with PyTorch tensors: decode and mixed
batches against a float64 reference that builds vLLM's block mask per head (fresh random data,
output poisoned with NaN first)."""

import pytest

from conftest import require_torch_gpu

torch = require_torch_gpu()

import graphattn  # noqa: E402
from gpu_batch import Batch, check_output  # noqa: E402


def sparse_reference(batch, cache, scale, p):
    """float64 attention with the causal mask and the block pattern of BlocksparseParams p."""
    H, KH, D = batch.num_heads, batch.num_kv_heads, batch.head_size
    group = H // KH
    out = torch.zeros(batch.num_tokens, H, D, dtype=torch.float64, device=batch.query.device)
    starts = batch.query_start_loc.tolist()
    cache = cache.double()
    first = p.active_head_range[0]
    step = p.head_sliding_step
    for r in range(batch.num_reqs):
        s, n = batch.seq_lens_host[r], batch.query_lens[r]
        if s == 0:
            continue
        blocks = batch.block_table[r, :-(-s // batch.block_size)].long()
        k = cache[0][blocks].reshape(-1, KH, D)[:s]
        v = cache[1][blocks].reshape(-1, KH, D)[:s]
        qpos = torch.arange(s - n, s, device=k.device)[:, None]
        kpos = torch.arange(s, device=k.device)[None, :]
        qb, kb = qpos // p.block_size, kpos // p.block_size
        for h in range(H):
            if step >= 0:
                shift = (first + h) * step + 1
            else:
                shift = (first // group + h // group) * -step + 1
            seen = (kpos <= qpos) & ((qb - kb < p.local_blocks) |
                                     ((kb + shift) % p.vert_stride == 0))
            q = batch.query[starts[r]:starts[r] + n, h].double()
            logits = (q @ k[:, h // group].T) * scale
            logits = logits.masked_fill(~seen, float("-inf"))
            out[starts[r]:starts[r] + n, h] = torch.softmax(logits, dim=-1) @ v[:, h // group]
    return out


@pytest.mark.parametrize("homo_head, homo_head_group, tp_rank", [
    (True, False, 0), (False, False, 0), (False, True, 0), (False, False, 1)])
def test_blocksparse_decode_and_mixed(seed, homo_head, homo_head_group, tp_rank):
    p = graphattn.BlocksparseParams(max_seqlen=4096, num_heads=16, num_kv_heads=4,
                                    block_size=64, local_blocks=2, vert_stride=4,
                                    homo_head=homo_head, homo_head_group=homo_head_group,
                                    tp_rank=tp_rank, tp_size=2)
    attn = graphattn.AttentionBackend(num_heads=16, num_kv_heads=4, head_size=128,
                                      block_size=16, dtype="bf16", max_model_len=4096,
                                      max_num_seqs=8, blocksparse_params=p)
    attn.prepare()
    assert attn.required_specs()[1].endswith("_bsp")
    for what, qlens, ctx, decodes in [
            ("decode", [1, 1, 1, 1], [4000, 63, 1500, 0], 4),
            ("mixed", [1, 1, 700, 33], [2999, 128, 0, 1800], 2)]:
        batch = Batch(query_lens=qlens, context_lens=ctx, seed=seed, num_heads=16,
                      num_kv_heads=4, head_size=128, block_size=16, dtype=torch.bfloat16)
        expected = batch.expected_cache()
        workspace = attn.allocate_workspace(batch.query)
        attn.forward(batch.query, batch.key, batch.value, batch.kv_cache, batch.output,
                     batch.metadata(graphattn, decodes), workspace)
        torch.cuda.synchronize()
        assert torch.equal(batch.kv_cache, expected)
        check_output(batch, sparse_reference(batch, expected, attn.config.scale, p), what)
