# SPDX-License-Identifier: Apache-2.0
"""Block-sparse attention parameters, named as vLLM's BlocksparseParams
(vllm.attention.backends.blocksparse_attn) for AttentionBackend(blocksparse_params=...).

Query position qp of a head sees key position kp <= qp iff, with qb = qp // block_size and
kb = kp // block_size, qb - kb < local_blocks or (kb + offset(head)) % vert_stride == 0, where
offset(head) = global head * head_sliding_step + 1 (a positive or zero step: the query head's
global index; a negative step: the KV head's, times -step). vert_stride 1 is dense attention.
"""

import ctypes
from dataclasses import dataclass, field
from typing import Optional, Tuple

from . import _lib, _names


def head_sliding_step(total_num_heads, total_num_kv_heads, vert_stride, homo_head=False,
                      homo_head_group=False):
    """vLLM's head_sliding_step: 0 with homo_head; -max(1, vert_stride // total_num_kv_heads)
    with homo_head_group; else max(1, vert_stride // total_num_heads)."""
    step = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_blocksparse_head_sliding_step(
        _names.int_arg("total_num_heads", total_num_heads),
        _names.int_arg("total_num_kv_heads", total_num_kv_heads),
        _names.int_arg("vert_stride", vert_stride),
        int(_names.bool_arg("homo_head", homo_head)),
        int(_names.bool_arg("homo_head_group", homo_head_group)), ctypes.byref(step)))
    return step.value


@dataclass
class BlocksparseParams:
    """vLLM's BlocksparseParams for one tensor-parallel rank. num_heads and num_kv_heads are
    per rank (as in vLLM); tp_rank and tp_size replace vLLM's reads of the distributed state.
    max_seqlen is kept for vLLM's signature (the kernels need no bound)."""
    max_seqlen: Optional[int]
    num_heads: int
    num_kv_heads: int
    block_size: int       # tokens per sparse block: a multiple of 16 and of the KV block size
    local_blocks: int     # >= 1
    vert_stride: int      # >= 1 (1: dense)
    homo_head: bool = False
    homo_head_group: bool = False
    tp_rank: int = 0
    tp_size: int = 1
    head_sliding_step: int = field(init=False)
    active_head_range: Tuple[int, int] = field(init=False)

    def __post_init__(self):
        tp_size = _names.int_arg("tp_size", self.tp_size, 1)
        tp_rank = _names.int_arg("tp_rank", self.tp_rank, 0)
        if tp_rank >= tp_size:
            raise ValueError("tp_rank %d is not supported with tp_size %d; supported: "
                             "0..tp_size-1" % (tp_rank, tp_size))
        heads = _names.int_arg("num_heads", self.num_heads, 1)
        kv_heads = _names.int_arg("num_kv_heads", self.num_kv_heads, 1)
        self.head_sliding_step = head_sliding_step(tp_size * heads, tp_size * kv_heads,
                                                   self.vert_stride, self.homo_head,
                                                   self.homo_head_group)
        self.active_head_range = (tp_rank * heads, (tp_rank + 1) * heads)


def apply(c, params, num_heads):
    """Sets the block-sparse fields of a LayerConfig from BlocksparseParams (None: dense)."""
    if params is None:
        return
    if not isinstance(params, BlocksparseParams):
        raise TypeError("blocksparse_params must be a graphattn.BlocksparseParams or None, got %s"
                        % type(params).__name__)
    if params.num_heads != num_heads:
        raise ValueError("blocksparse_params.num_heads %d differs from the layer's num_heads %d"
                         % (params.num_heads, num_heads))
    c.blocksparse_block_size = _names.int_arg("blocksparse block_size", params.block_size)
    c.blocksparse_local_blocks = _names.int_arg("local_blocks", params.local_blocks)
    c.blocksparse_vert_stride = _names.int_arg("vert_stride", params.vert_stride)
    c.blocksparse_head_sliding_step = params.head_sliding_step
    c.blocksparse_active_head_offset = params.active_head_range[0]
