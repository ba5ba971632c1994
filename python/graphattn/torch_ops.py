# SPDX-License-Identifier: Apache-2.0
"""graphattn.ops as PyTorch custom ops (torch.library): ``torch.ops.graphattn.<name>``.

    import torch, graphattn.torch_ops            # registers the ops (imports torch)
    torch.ops.graphattn.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                                slot_mapping, "auto", None, None, 1.0, 1.0)

Each op has a fake (meta) implementation and declares the arguments it writes (outputs and
caches, written in place; ops with an ``out`` return nothing), so ``torch.compile(fullgraph=
True)``, ``torch.cuda.graph`` and ``torch.library.opcheck`` work over them. The functions of
graphattn.ops call these ops by themselves when given torch tensors (and no explicit stream)
once this module is imported: importing graphattn after torch registers them; so does importing
graphattn.torch_ops or graphattn.vllm. Without PyTorch, graphattn.ops keeps its ctypes path.

Scales (fp8 caches) that vLLM passes as tensors or floats are split into ``*_scale``
(``Tensor?``) and ``*_scale_value`` (``float``, used when the tensor is None); a tensor scale is
read on the host, as graphattn.ops does. For scales read on the device inside CUDA graphs use
graphattn.AttentionBackend(k_scale_device=...) (graphattn.vllm does).
"""

import sys
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import ops as _ops

NAMESPACE = "graphattn"
Scale = Union[None, float, Tensor]

__all__ = ["NAMESPACE", "OP_NAMES", "reshape_and_cache_flash", "reshape_and_cache",
           "forward_prefix", "calc_kv_scales", "encoder_attention", "multi_head_attention",
           "flash_attn_varlen_func", "swap_blocks", "copy_blocks", "paged_attention_v1",
           "paged_attention_v2", "forward_decode", "merge_attn_states",
           "flash_attn_with_kvcache"]


def _split_scale(x: Scale) -> Tuple[Optional[Tensor], float]:
    if isinstance(x, Tensor):
        return x, 1.0
    return None, 1.0 if x is None else float(x)


def _join_scale(t: Optional[Tensor], value: float) -> Scale:
    return value if t is None else t


def takes(x: Any) -> bool:
    """Whether a call whose first argument is x goes through the torch ops."""
    if isinstance(x, (list, tuple)):
        return len(x) > 0 and isinstance(x[0], Tensor)
    return isinstance(x, Tensor)


# ---- the custom ops (impl: graphattn.ops' ctypes path; fake: shapes only) ----------------------

@torch.library.custom_op("graphattn::reshape_and_cache_flash",
                         mutates_args=("key_cache", "value_cache"))
def _reshape_and_cache_flash(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                             slot_mapping: Tensor, kv_cache_dtype: str, k_scale: Optional[Tensor],
                             v_scale: Optional[Tensor], k_scale_value: float,
                             v_scale_value: float) -> None:
    _ops.reshape_and_cache_flash.eager(key, value, key_cache, value_cache, slot_mapping,
                                       kv_cache_dtype, _join_scale(k_scale, k_scale_value),
                                       _join_scale(v_scale, v_scale_value))


@_reshape_and_cache_flash.register_fake
def _(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale,
      k_scale_value, v_scale_value):
    return None


@torch.library.custom_op("graphattn::reshape_and_cache", mutates_args=("key_cache", "value_cache"))
def _reshape_and_cache(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                       slot_mapping: Tensor, kv_cache_dtype: str, k_scale: Optional[Tensor],
                       v_scale: Optional[Tensor], k_scale_value: float, v_scale_value: float,
                       interleaved_v: bool) -> None:
    _ops.reshape_and_cache.eager(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                                 _join_scale(k_scale, k_scale_value),
                                 _join_scale(v_scale, v_scale_value), interleaved_v)


@_reshape_and_cache.register_fake
def _(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale,
      k_scale_value, v_scale_value, interleaved_v):
    return None


@torch.library.custom_op("graphattn::forward_prefix", mutates_args=("out",))
def _forward_prefix(query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                    kv_cache_dtype: str, key_cache: Tensor, value_cache: Tensor,
                    block_tables: Tensor, query_start_loc: Tensor, seq_lens: Tensor,
                    max_query_len: int, alibi_slopes: Optional[Tensor], sliding_window: int,
                    k_scale: Optional[Tensor], v_scale: Optional[Tensor], k_scale_value: float,
                    v_scale_value: float, scale: Optional[float], logits_soft_cap: Optional[float],
                    sinks: Optional[Tensor], causal: bool, out: Tensor) -> None:
    _ops.forward_prefix.eager(query, key, value, kv_cache_dtype, key_cache, value_cache,
                              block_tables, query_start_loc, seq_lens, max_query_len,
                              alibi_slopes, sliding_window, _join_scale(k_scale, k_scale_value),
                              _join_scale(v_scale, v_scale_value), scale=scale,
                              logits_soft_cap=logits_soft_cap, sinks=sinks, causal=causal,
                              out=out)


@_forward_prefix.register_fake
def _(query, key, value, kv_cache_dtype, key_cache, value_cache, block_tables, query_start_loc,
      seq_lens, max_query_len, alibi_slopes, sliding_window, k_scale, v_scale, k_scale_value,
      v_scale_value, scale, logits_soft_cap, sinks, causal, out):
    return None


@torch.library.custom_op("graphattn::calc_kv_scales", mutates_args=("k_scale", "v_scale"))
def _calc_kv_scales(key: Tensor, value: Tensor, k_scale: Tensor, v_scale: Tensor,
                    k_divisor: float, v_divisor: float) -> None:
    _ops.calc_kv_scales.eager(key, value, k_scale, v_scale, k_divisor, v_divisor)


@_calc_kv_scales.register_fake
def _(key, value, k_scale, v_scale, k_divisor, v_divisor):
    return None


@torch.library.custom_op("graphattn::encoder_attention", mutates_args=("output",))
def _encoder_attention(query: Tensor, key: Tensor, value: Tensor, output: Tensor,
                       query_start_loc: Tensor, max_query_len: int, scale: Optional[float],
                       alibi_slopes: Optional[Tensor], sinks: Optional[Tensor]) -> None:
    _ops.encoder_attention.eager(query, key, value, output, query_start_loc, max_query_len,
                                 scale, alibi_slopes, sinks)


@_encoder_attention.register_fake
def _(query, key, value, output, query_start_loc, max_query_len, scale, alibi_slopes, sinks):
    return None


@torch.library.custom_op("graphattn::multi_head_attention", mutates_args=("out",))
def _multi_head_attention(q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                          scale: Optional[float]) -> None:
    _ops.multi_head_attention.eager(q, k, v, out, scale)


@_multi_head_attention.register_fake
def _(q, k, v, out, scale):
    return None


@torch.library.custom_op("graphattn::flash_attn_varlen_func",
                         mutates_args=("out", "softmax_lse"))
def _flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, max_seqlen_q: int,
                            cu_seqlens_q: Tensor, max_seqlen_k: int, seqused_k: Tensor,
                            block_table: Tensor, out: Tensor, softmax_scale: Optional[float],
                            causal: bool, window_left: int, window_right: int, softcap: float,
                            alibi_slopes: Optional[Tensor], k_descale: Optional[Tensor],
                            v_descale: Optional[Tensor], k_descale_value: float,
                            v_descale_value: float, s_aux: Optional[Tensor],
                            num_decodes: Optional[int], kv_cache_dtype: Optional[str],
                            softmax_lse: Optional[Tensor], q_descale: Optional[Tensor],
                            q_descale_value: float) -> None:
    _ops.flash_attn_varlen_func.eager(
        q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k=seqused_k,
        softmax_scale=softmax_scale, causal=causal, window_size=(window_left, window_right),
        softcap=softcap, alibi_slopes=alibi_slopes, block_table=block_table, out=out,
        k_descale=_join_scale(k_descale, k_descale_value),
        v_descale=_join_scale(v_descale, v_descale_value), s_aux=s_aux, num_decodes=num_decodes,
        kv_cache_dtype=kv_cache_dtype, return_softmax_lse=softmax_lse is not None,
        softmax_lse=softmax_lse, q_descale=_join_scale(q_descale, q_descale_value))


@_flash_attn_varlen_func.register_fake
def _(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k, block_table, out,
      softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, k_descale,
      v_descale, k_descale_value, v_descale_value, s_aux, num_decodes, kv_cache_dtype,
      softmax_lse, q_descale, q_descale_value):
    return None


@torch.library.custom_op("graphattn::swap_blocks", mutates_args=("dst",))
def _swap_blocks(src: Tensor, dst: Tensor, block_size_in_bytes: int,
                 block_mapping: Tensor) -> None:
    # block_size_in_bytes 0: the older form, blocks along src's and dst's first dimension.
    if block_size_in_bytes == 0:
        _ops.swap_blocks.eager(src, dst, block_mapping)
    else:
        _ops.swap_blocks.eager(src, dst, block_size_in_bytes, block_mapping)


@_swap_blocks.register_fake
def _(src, dst, block_size_in_bytes, block_mapping):
    return None


@torch.library.custom_op("graphattn::flash_attn_with_kvcache",
                         mutates_args=("k_cache", "v_cache", "out"))
def _flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor],
                             v: Optional[Tensor], cache_seqlens: Tensor,
                             cache_batch_idx: Optional[Tensor], block_table: Optional[Tensor],
                             softmax_scale: Optional[float], causal: bool, window_left: int,
                             window_right: int, softcap: float, alibi_slopes: Optional[Tensor],
                             k_descale: Optional[Tensor], v_descale: Optional[Tensor],
                             k_descale_value: float, v_descale_value: float,
                             s_aux: Optional[Tensor], out: Tensor) -> None:
    _ops.flash_attn_with_kvcache.eager(
        q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
        block_table=block_table, softmax_scale=softmax_scale, causal=causal,
        window_size=(window_left, window_right), softcap=softcap, alibi_slopes=alibi_slopes,
        out=out, k_descale=_join_scale(k_descale, k_descale_value),
        v_descale=_join_scale(v_descale, v_descale_value), s_aux=s_aux)


@_flash_attn_with_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
      causal, window_left, window_right, softcap, alibi_slopes, k_descale, v_descale,
      k_descale_value, v_descale_value, s_aux, out):
    return None


@torch.library.custom_op("graphattn::copy_blocks", mutates_args=("key_caches", "value_caches"))
def _copy_blocks(key_caches: List[Tensor], value_caches: List[Tensor],
                 block_mapping: Tensor) -> None:
    _ops.copy_blocks.eager(key_caches, value_caches, block_mapping)


@_copy_blocks.register_fake
def _(key_caches, value_caches, block_mapping):
    return None


@torch.library.custom_op("graphattn::paged_attention_v1", mutates_args=("out",))
def _paged_attention_v1(out: Tensor, query: Tensor, key_cache: Tensor, value_cache: Tensor,
                        num_kv_heads: int, scale: float, block_tables: Tensor, seq_lens: Tensor,
                        block_size: int, max_seq_len: int, alibi_slopes: Optional[Tensor],
                        kv_cache_dtype: str, k_scale: Optional[Tensor], v_scale: Optional[Tensor],
                        k_scale_value: float, v_scale_value: float, tp_rank: int,
                        blocksparse_local_blocks: int, blocksparse_vert_stride: int,
                        blocksparse_block_size: int, blocksparse_head_sliding_step: int) -> None:
    _ops.paged_attention_v1.eager(out, query, key_cache, value_cache, num_kv_heads, scale,
                                  block_tables, seq_lens, block_size, max_seq_len, alibi_slopes,
                                  kv_cache_dtype, _join_scale(k_scale, k_scale_value),
                                  _join_scale(v_scale, v_scale_value), tp_rank,
                                  blocksparse_local_blocks, blocksparse_vert_stride,
                                  blocksparse_block_size, blocksparse_head_sliding_step)


@_paged_attention_v1.register_fake
def _(out, query, key_cache, value_cache, num_kv_heads, scale, block_tables, seq_lens,
      block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale, v_scale, k_scale_value,
      v_scale_value, tp_rank, blocksparse_local_blocks, blocksparse_vert_stride,
      blocksparse_block_size, blocksparse_head_sliding_step):
    return None


@torch.library.custom_op("graphattn::paged_attention_v2", mutates_args=("out",))
def _paged_attention_v2(out: Tensor, exp_sums: Tensor, max_logits: Tensor, tmp_out: Tensor,
                        query: Tensor, key_cache: Tensor, value_cache: Tensor, num_kv_heads: int,
                        scale: float, block_tables: Tensor, seq_lens: Tensor, block_size: int,
                        max_seq_len: int, alibi_slopes: Optional[Tensor], kv_cache_dtype: str,
                        k_scale: Optional[Tensor], v_scale: Optional[Tensor],
                        k_scale_value: float, v_scale_value: float, tp_rank: int,
                        blocksparse_local_blocks: int, blocksparse_vert_stride: int,
                        blocksparse_block_size: int, blocksparse_head_sliding_step: int) -> None:
    # exp_sums, max_logits and tmp_out are checked, never written (graphattn keeps its own
    # split workspace), so they are not declared mutated.
    _ops.paged_attention_v2.eager(out, exp_sums, max_logits, tmp_out, query, key_cache,
                                  value_cache, num_kv_heads, scale, block_tables, seq_lens,
                                  block_size, max_seq_len, alibi_slopes, kv_cache_dtype,
                                  _join_scale(k_scale, k_scale_value),
                                  _join_scale(v_scale, v_scale_value), tp_rank,
                                  blocksparse_local_blocks, blocksparse_vert_stride,
                                  blocksparse_block_size, blocksparse_head_sliding_step)


@_paged_attention_v2.register_fake
def _(out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache, num_kv_heads, scale,
      block_tables, seq_lens, block_size, max_seq_len, alibi_slopes, kv_cache_dtype, k_scale,
      v_scale, k_scale_value, v_scale_value, tp_rank, blocksparse_local_blocks,
      blocksparse_vert_stride, blocksparse_block_size, blocksparse_head_sliding_step):
    return None


@torch.library.custom_op("graphattn::forward_decode", mutates_args=())
def _forward_decode(query: Tensor, key_cache: Tensor, value_cache: Tensor, block_tables: Tensor,
                    seq_lens: Tensor, max_seq_len: int, kv_cache_dtype: str, num_kv_heads: int,
                    scale: float, alibi_slopes: Optional[Tensor], k_scale: Optional[Tensor],
                    v_scale: Optional[Tensor], k_scale_value: float, v_scale_value: float,
                    tp_rank: int, blocksparse_local_blocks: int, blocksparse_vert_stride: int,
                    blocksparse_block_size: int, blocksparse_head_sliding_step: int) -> Tensor:
    return _ops.forward_decode.eager(query, key_cache, value_cache, block_tables, seq_lens,
                                     max_seq_len, kv_cache_dtype, num_kv_heads, scale,
                                     alibi_slopes, _join_scale(k_scale, k_scale_value),
                                     _join_scale(v_scale, v_scale_value), tp_rank,
                                     blocksparse_local_blocks, blocksparse_vert_stride,
                                     blocksparse_block_size, blocksparse_head_sliding_step)


@_forward_decode.register_fake
def _(query, key_cache, value_cache, block_tables, seq_lens, max_seq_len, kv_cache_dtype,
      num_kv_heads, scale, alibi_slopes, k_scale, v_scale, k_scale_value, v_scale_value, tp_rank,
      blocksparse_local_blocks, blocksparse_vert_stride, blocksparse_block_size,
      blocksparse_head_sliding_step):
    return torch.empty_like(query)


@torch.library.custom_op("graphattn::merge_attn_states", mutates_args=("output", "output_lse"))
def _merge_attn_states(output: Tensor, prefix_output: Tensor, prefix_lse: Tensor,
                       suffix_output: Tensor, suffix_lse: Tensor,
                       output_lse: Optional[Tensor]) -> None:
    _ops.merge_attn_states.eager(output, prefix_output, prefix_lse, suffix_output, suffix_lse,
                                 output_lse)


@_merge_attn_states.register_fake
def _(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse):
    return None


OP_NAMES = ("reshape_and_cache_flash", "reshape_and_cache", "forward_prefix", "calc_kv_scales",
            "encoder_attention", "multi_head_attention", "flash_attn_varlen_func", "swap_blocks",
            "copy_blocks", "paged_attention_v1", "paged_attention_v2", "forward_decode",
            "merge_attn_states", "flash_attn_with_kvcache")


# ---- graphattn.ops' signatures onto the ops (what graphattn.ops calls with torch tensors) ------

def reshape_and_cache_flash(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                            slot_mapping: Tensor, kv_cache_dtype: str, k_scale: Scale,
                            v_scale: Scale, *, stream: None = None) -> None:
    ks, kf = _split_scale(k_scale)
    vs, vf = _split_scale(v_scale)
    torch.ops.graphattn.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                                                kv_cache_dtype, ks, vs, kf, vf)


def reshape_and_cache(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                      slot_mapping: Tensor, kv_cache_dtype: str, k_scale: Scale, v_scale: Scale,
                      interleaved_v: bool = False, *, stream: None = None) -> None:
    ks, kf = _split_scale(k_scale)
    vs, vf = _split_scale(v_scale)
    torch.ops.graphattn.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping,
                                          kv_cache_dtype, ks, vs, kf, vf, bool(interleaved_v))


def forward_prefix(query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                   kv_cache_dtype: str, key_cache: Tensor, value_cache: Tensor,
                   block_tables: Tensor, query_start_loc: Tensor, seq_lens: Tensor,
                   max_query_len: int, alibi_slopes: Optional[Tensor],
                   sliding_window: Optional[int], k_scale: Scale, v_scale: Scale, *,
                   scale: Optional[float] = None, logits_soft_cap: Optional[float] = None,
                   sinks: Optional[Tensor] = None, causal: bool = True,
                   out: Optional[Tensor] = None, stream: None = None) -> Tensor:
    if out is None:
        out = torch.empty_like(query)
    ks, kf = _split_scale(k_scale)
    vs, vf = _split_scale(v_scale)
    torch.ops.graphattn.forward_prefix(
        query, key, value, kv_cache_dtype, key_cache, value_cache, block_tables, query_start_loc,
        seq_lens, max_query_len, alibi_slopes, 0 if sliding_window is None else sliding_window,
        ks, vs, kf, vf, scale, logits_soft_cap, sinks, causal, out)
    return out


def calc_kv_scales(key: Tensor, value: Tensor, k_scale: Tensor, v_scale: Tensor,
                   k_divisor: float = _ops.K_SCALE_DIVISOR,
                   v_divisor: float = _ops.V_SCALE_DIVISOR, *, stream: None = None) -> None:
    torch.ops.graphattn.calc_kv_scales(key, value, k_scale, v_scale, float(k_divisor),
                                       float(v_divisor))


def encoder_attention(query: Tensor, key: Tensor, value: Tensor, output: Tensor,
                      query_start_loc: Tensor, max_query_len: int,
                      scale: Optional[float] = None, alibi_slopes: Optional[Tensor] = None,
                      sinks: Optional[Tensor] = None, *, stream: None = None) -> Tensor:
    torch.ops.graphattn.encoder_attention(query, key, value, output, query_start_loc,
                                          max_query_len, scale, alibi_slopes, sinks)
    return output


def multi_head_attention(q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                         scale: Optional[float] = None, *, stream: None = None) -> Tensor:
    torch.ops.graphattn.multi_head_attention(q, k, v, out, scale)
    return out


def _window_pair(window_size: Optional[Sequence[int]]) -> Tuple[int, int]:
    if window_size is None:
        return -1, -1
    left, right = window_size
    return int(left), int(right)


def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, max_seqlen_q: int,
                           cu_seqlens_q: Tensor, max_seqlen_k: int,
                           cu_seqlens_k: Optional[Tensor] = None,
                           seqused_k: Optional[Tensor] = None, q_v: Optional[Tensor] = None,
                           dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                           causal: bool = False, window_size: Optional[Sequence[int]] = None,
                           softcap: float = 0.0, alibi_slopes: Optional[Tensor] = None,
                           deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: Optional[Tensor] = None,
                           return_softmax_lse: bool = False, out: Optional[Tensor] = None,
                           scheduler_metadata: Any = None, q_descale: Any = None,
                           k_descale: Scale = None, v_descale: Scale = None,
                           num_splits: int = 0, fa_version: int = 2,
                           s_aux: Optional[Tensor] = None, cp_world_size: int = 1,
                           cp_rank: int = 0, cp_tot_seqused_k: Any = None, *,
                           num_decodes: Optional[int] = None,
                           kv_cache_dtype: Optional[str] = None,
                           softmax_lse: Optional[Tensor] = None, stream: None = None) -> Any:
    if (block_table is None or cu_seqlens_k is not None or seqused_k is None or q_v is not None
            or dropout_p or return_attn_probs or cp_world_size != 1
            or (softmax_lse is not None and not return_softmax_lse)):
        # Refused by graphattn.ops with the reason (never reaches a kernel).
        return _ops.flash_attn_varlen_func.eager(
            q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k, seqused_k, q_v,
            dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
            deterministic, return_attn_probs, block_table, return_softmax_lse, out,
            cp_world_size=cp_world_size, softmax_lse=softmax_lse)
    if out is None:
        if q.dtype == torch.float8_e4m3fn:  # refused by graphattn.ops, naming out=
            return _ops.flash_attn_varlen_func.eager(
                q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k=seqused_k,
                block_table=block_table)
        out = torch.empty_like(q)
    if return_softmax_lse and softmax_lse is None:
        softmax_lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    left, right = _window_pair(window_size)
    ks, kf = _split_scale(k_descale)
    vs, vf = _split_scale(v_descale)
    # (a 16-bit q ignores q_descale, as FA3 does; the op carries it for an fp8 q)
    qs, qf = _split_scale(q_descale if q.dtype == torch.float8_e4m3fn else None)
    torch.ops.graphattn.flash_attn_varlen_func(
        q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k, block_table, out,
        softmax_scale, causal, left, right, float(softcap), alibi_slopes, ks, vs, kf, vf, s_aux,
        num_decodes, kv_cache_dtype, softmax_lse if return_softmax_lse else None, qs, qf)
    return (out, softmax_lse) if return_softmax_lse else out


def _mapping_tensor(block_mapping: Any) -> Tensor:
    if isinstance(block_mapping, Tensor):
        return block_mapping
    return torch.tensor(block_mapping, dtype=torch.int64).reshape(-1, 2)


def swap_blocks(src: Tensor, dst: Tensor, block_size_in_bytes: Any,
                block_mapping: Any = _ops._NO_MAPPING, *, stream: None = None) -> None:
    size, mapping = _ops._swap_args(block_size_in_bytes, block_mapping)
    torch.ops.graphattn.swap_blocks(src, dst, 0 if size is None else size,
                                    _mapping_tensor(mapping))


def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor,
                            k: Optional[Tensor] = None, v: Optional[Tensor] = None,
                            rotary_cos: Optional[Tensor] = None,
                            rotary_sin: Optional[Tensor] = None, cache_seqlens: Any = None,
                            cache_batch_idx: Optional[Tensor] = None,
                            cache_leftpad: Optional[Tensor] = None,
                            block_table: Optional[Tensor] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            window_size: Optional[Sequence[int]] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True,
                            alibi_slopes: Optional[Tensor] = None, num_splits: int = 0,
                            return_softmax_lse: bool = False, *, out: Optional[Tensor] = None,
                            fa_version: int = 2, scheduler_metadata: Any = None,
                            q_descale: Any = None, k_descale: Scale = None,
                            v_descale: Scale = None, s_aux: Optional[Tensor] = None,
                            stream: None = None) -> Tensor:
    _ops._kvcache_refusals(rotary_cos, rotary_sin, cache_leftpad, return_softmax_lse, k, v,
                           cache_seqlens)
    if not isinstance(cache_seqlens, Tensor):
        cache_seqlens = torch.full((q.shape[0],), int(cache_seqlens), dtype=torch.int32,
                                   device=q.device)
    left, right = (-1, -1) if window_size is None else (int(w) for w in window_size)
    if out is None:
        out = torch.empty_like(q)
    ks, kf = _split_scale(k_descale)
    vs, vf = _split_scale(v_descale)
    torch.ops.graphattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
        causal, left, right, float(softcap), alibi_slopes, ks, vs, kf, vf, s_aux, out)
    return out


def copy_blocks(key_caches: Sequence[Tensor], value_caches: Sequence[Tensor],
                block_mapping: Any, *, stream: None = None) -> None:
    torch.ops.graphattn.copy_blocks(list(key_caches), list(value_caches),
                                    _mapping_tensor(block_mapping))


def paged_attention_v1(out: Tensor, query: Tensor, key_cache: Tensor, value_cache: Tensor,
                       num_kv_heads: int, scale: float, block_tables: Tensor, seq_lens: Tensor,
                       block_size: int, max_seq_len: int, alibi_slopes: Optional[Tensor],
                       kv_cache_dtype: str, k_scale: Scale, v_scale: Scale, tp_rank: int = 0,
                       blocksparse_local_blocks: int = 0, blocksparse_vert_stride: int = 0,
                       blocksparse_block_size: int = 64,
                       blocksparse_head_sliding_step: int = 0, *, stream: None = None) -> None:
    ks, kf = _split_scale(k_scale)
    vs, vf = _split_scale(v_scale)
    torch.ops.graphattn.paged_attention_v1(
        out, query, key_cache, value_cache, num_kv_heads, float(scale), block_tables, seq_lens,
        block_size, max_seq_len, alibi_slopes, kv_cache_dtype, ks, vs, kf, vf, tp_rank,
        blocksparse_local_blocks, blocksparse_vert_stride, blocksparse_block_size,
        blocksparse_head_sliding_step)


def paged_attention_v2(out: Tensor, exp_sums: Tensor, max_logits: Tensor, tmp_out: Tensor,
                       query: Tensor, key_cache: Tensor, value_cache: Tensor, num_kv_heads: int,
                       scale: float, block_tables: Tensor, seq_lens: Tensor, block_size: int,
                       max_seq_len: int, alibi_slopes: Optional[Tensor], kv_cache_dtype: str,
                       k_scale: Scale, v_scale: Scale, tp_rank: int = 0,
                       blocksparse_local_blocks: int = 0, blocksparse_vert_stride: int = 0,
                       blocksparse_block_size: int = 64,
                       blocksparse_head_sliding_step: int = 0, *, stream: None = None) -> None:
    ks, kf = _split_scale(k_scale)
    vs, vf = _split_scale(v_scale)
    torch.ops.graphattn.paged_attention_v2(
        out, exp_sums, max_logits, tmp_out, query, key_cache, value_cache, num_kv_heads,
        float(scale), block_tables, seq_lens, block_size, max_seq_len, alibi_slopes,
        kv_cache_dtype, ks, vs, kf, vf, tp_rank, blocksparse_local_blocks,
        blocksparse_vert_stride, blocksparse_block_size, blocksparse_head_sliding_step)


def forward_decode(query: Tensor, key_cache: Tensor, value_cache: Tensor, block_tables: Tensor,
                   seq_lens: Tensor, max_seq_len: int, kv_cache_dtype: str, num_kv_heads: int,
                   scale: float, alibi_slopes: Optional[Tensor], k_scale: Scale, v_scale: Scale,
                   tp_rank: int = 0, blocksparse_local_blocks: int = 0,
                   blocksparse_vert_stride: int = 0, blocksparse_block_size: int = 64,
                   blocksparse_head_sliding_step: int = 0, *, stream: None = None) -> Tensor:
    ks, kf = _split_scale(k_scale)
    vs, vf = _split_scale(v_scale)
    return torch.ops.graphattn.forward_decode(
        query, key_cache, value_cache, block_tables, seq_lens, max_seq_len, kv_cache_dtype,
        num_kv_heads, float(scale), alibi_slopes, ks, vs, kf, vf, tp_rank,
        blocksparse_local_blocks, blocksparse_vert_stride, blocksparse_block_size,
        blocksparse_head_sliding_step)


def merge_attn_states(output: Tensor, prefix_output: Tensor, prefix_lse: Tensor,
                      suffix_output: Tensor, suffix_lse: Tensor,
                      output_lse: Optional[Tensor] = None, *, stream: None = None) -> None:
    torch.ops.graphattn.merge_attn_states(output, prefix_output, prefix_lse, suffix_output,
                                          suffix_lse, output_lse)


_ops._use_torch_ops(sys.modules[__name__])
