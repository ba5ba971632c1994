# SPDX-License-Identifier: Apache-2.0
"""Capture one decode step of one attention layer in a CUDA graph with PyTorch, replay it with
new sequence lengths, block tables and slot mappings, and check it against SDPA.

    PYTHONPATH=python GRAPHATTN_LIBRARY=build/libgraphattn.so python3 python/examples/cuda_graph_decode.py

(python/tests/test_gpu_examples.py runs this file; README.md shows the marked part of it.)
"""

import math

import torch

import graphattn

# One layer of llama-3-8b's attention, bf16, paged KV cache in vLLM's flash layout.
H, KVH, D, BS = 32, 8, 128, 16             # query heads, KV heads, head size, block size
MAX_LEN, BATCH, NUM_BLOCKS = 4096, 8, 2048  # max_model_len, graph batch size, cache pages
dev = torch.device("cuda")
worst = 0.0


def new_batch(lengths):
    """Writes a step into the captured buffers: requests with these context lengths (+1 new
    token each), padded to BATCH (padded ones get seq_len 0 and slot -1, vLLM's padding, and
    zeros as output), on shuffled cache pages, with fresh queries, keys and values."""
    pages = torch.randperm(NUM_BLOCKS, device=dev, dtype=torch.int32)
    seq_lens.zero_()
    slot_mapping.fill_(-1)
    taken = 0
    for i, n in enumerate(lengths):
        used = (n + 1 + BS - 1) // BS
        block_table[i, :used] = pages[taken:taken + used]
        taken += used
        seq_lens[i] = n + 1
        slot_mapping[i] = block_table[i, n // BS].long() * BS + n % BS
    for t in (query, key, value):
        t.copy_(torch.randn_like(t))


def reference(i):
    """SDPA over request i's cache pages, gathered, in float32."""
    n = int(seq_lens[i])
    pages = block_table[i, :(n + BS - 1) // BS].long()
    k = kv_cache[0][pages].reshape(-1, KVH, D)[:n].float().repeat_interleave(H // KVH, 1)
    v = kv_cache[1][pages].reshape(-1, KVH, D)[:n].float().repeat_interleave(H // KVH, 1)
    q = query[i].float()[:, None]                                    # [H, 1, D]
    o = torch.nn.functional.scaled_dot_product_attention(q, k.transpose(0, 1), v.transpose(0, 1))
    return o[:, 0]


def check(lengths):
    """The replayed step wrote each new key to its slot and matches SDPA; padding got zeros."""
    global worst
    torch.cuda.synchronize()
    for i, n in enumerate(lengths):
        page = int(block_table[i, n // BS])
        assert torch.equal(kv_cache[0, page, n % BS], key[i])
        ref = reference(i)
        err = torch.linalg.vector_norm(output[i].float() - ref) / torch.linalg.vector_norm(ref)
        worst = max(worst, err.item())
    assert torch.count_nonzero(output[len(lengths):]) == 0


# [readme]
attn = graphattn.AttentionBackend(num_heads=H, num_kv_heads=KVH, head_size=D, block_size=BS,
                                  dtype=torch.bfloat16, max_model_len=MAX_LEN,
                                  max_num_seqs=BATCH)
attn.prepare()                                        # compile / load kernels before capture
kv_cache = torch.randn(2, NUM_BLOCKS, BS, KVH, D, device=dev, dtype=torch.bfloat16)

# Persistent buffers: the graph holds their addresses; each step changes their contents.
query = torch.empty(BATCH, H, D, device=dev, dtype=torch.bfloat16)
key = torch.empty(BATCH, KVH, D, device=dev, dtype=torch.bfloat16)
value = torch.empty_like(key)
output = torch.empty_like(query)
query_start_loc = torch.arange(BATCH + 1, device=dev, dtype=torch.int32)  # one token each
seq_lens = torch.zeros(BATCH, device=dev, dtype=torch.int32)
block_table = torch.zeros(BATCH, MAX_LEN // BS, device=dev, dtype=torch.int32)
slot_mapping = torch.full((BATCH,), -1, device=dev, dtype=torch.int64)
workspace = attn.allocate_workspace(query)             # zero-filled once
metadata = graphattn.AttentionMetadata(
    query_start_loc, seq_lens, block_table, slot_mapping, num_reqs=BATCH, num_decodes=BATCH,
    num_actual_tokens=BATCH, max_query_len=1, max_seq_len=MAX_LEN)


def decode_step():
    attn.forward(query, key, value, kv_cache, output, metadata, workspace)


new_batch([100] * BATCH)
side = torch.cuda.Stream()                             # warm up eagerly, then capture
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    decode_step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    decode_step()

for lengths in ([3000, 17, 512, 1, 4000], [64] * BATCH, [2048, 999]):
    new_batch(lengths)   # new seq_lens, block tables, slot mappings, q/k/v: same buffers
    graph.replay()
    check(lengths)       # against SDPA on the gathered cache
# [/readme]
print("replayed 3 batches; worst relative L2 error vs SDPA %.2e" % worst)
assert worst < 5e-3 and math.isfinite(worst)
