# SPDX-License-Identifier: Apache-2.0
"""Smoke tests with CuPy and JAX arrays (DLPack capsules instead of PyTorch's fast path), each
skipped when its framework does not import. PyTorch makes the data and the reference."""

import os

import pytest

from conftest import require_torch_gpu

torch = require_torch_gpu()

import graphattn  # noqa: E402
from gpu_batch import Batch, check_output  # noqa: E402

LAYER = dict(num_heads=8, num_kv_heads=2, head_size=64, block_size=16)


def backend(dtype):
    attn = graphattn.AttentionBackend(dtype=dtype, max_model_len=1024, max_num_seqs=8, **LAYER)
    return attn.prepare()


def test_cupy_arrays(seed):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    attn = backend("float16")  # CuPy has no bfloat16
    b = Batch(query_lens=[1, 1, 6], context_lens=[100, 3, 40], seed=seed, dtype=torch.float16,
              **LAYER)
    expected = b.expected_cache()
    torch.cuda.synchronize()
    # Zero-copy CuPy views of the batch (CuPy imports them through DLPack too).
    c = {name: cupy.from_dlpack(getattr(b, name).detach())
         for name in ("query", "key", "value", "kv_cache", "query_start_loc", "seq_lens",
                      "block_table", "slot_mapping")}
    out = cupy.full(c["query"].shape, cupy.nan, dtype=cupy.float16)
    meta = graphattn.AttentionMetadata(c["query_start_loc"], c["seq_lens"], c["block_table"],
                                       c["slot_mapping"], num_reqs=3, num_actual_tokens=8,
                                       max_query_len=6, max_seq_len=b.max_seq_len,
                                       num_decodes=2)
    workspace = attn.allocate_workspace(c["query"])
    assert isinstance(workspace, cupy.ndarray) and int(workspace.sum()) == 0
    attn.forward(c["query"], c["key"], c["value"], c["kv_cache"], out, meta, workspace)
    cupy.cuda.get_current_stream().synchronize()
    assert torch.equal(b.kv_cache, expected)
    b.output = torch.from_dlpack(out)
    check_output(b, b.reference(expected), "CuPy arrays")


def test_jax_arrays(seed):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to torch
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    import jax.numpy as jnp

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    attn = backend("bfloat16")
    b = Batch(query_lens=[1, 1, 1, 9], context_lens=[500, 17, 80, 33], seed=seed,
              dtype=torch.bfloat16, **LAYER)
    # JAX arrays are immutable: they carry the inputs (no cache write); PyTorch owns the output
    # and the workspace. The values are copied into JAX through the host.
    def to_jax(t):
        if t.dtype == torch.bfloat16:
            return jnp.asarray(t.float().cpu().numpy(), dtype=jnp.bfloat16)
        return jnp.asarray(t.cpu().numpy())

    j = {name: to_jax(getattr(b, name)) for name in ("query", "kv_cache", "query_start_loc",
                                                       "seq_lens", "block_table")}
    meta = graphattn.AttentionMetadata(j["query_start_loc"], j["seq_lens"], j["block_table"],
                                       None, num_reqs=4, num_actual_tokens=12,
                                       max_query_len=9, max_seq_len=b.max_seq_len,
                                       num_decodes=3)
    attn.forward(j["query"], None, None, j["kv_cache"], b.output, meta,
                 attn.allocate_workspace(b.output))
    torch.cuda.synchronize()
    check_output(b, b.reference(b.kv_cache), "JAX arrays")
