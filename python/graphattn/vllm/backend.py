# SPDX-License-Identifier: Apache-2.0
"""GraphattnBackend, GraphattnImpl and GraphattnMetadataBuilder: vLLM 0.33's v1 attention
interfaces over graphattn.AttentionBackend.

KV cache: vLLM 0.33 allocates each layer's cache as a logical ``[B, H, N, C]`` page view whose
physical order is the resolved ``KVCacheLayout``. graphattn reads a key half and a value half
of ``[num_blocks, block_size, num_kv_heads, head_size]`` each, NHD or HND within a block, so
``customize_spec`` publishes the page as two planes (K, then V) and
``supported_kv_cache_layouts`` keeps each block's ``[H, N, C]`` together (LBHNC, BLHNC):

  NHD (default):  num_head_slots 2, content num_kv_heads * head_size: [B, 2, N, H*D]
  HND:            num_head_slots 2 * num_kv_heads, content head_size:  [B, 2*H, N, D]

(``GRAPHATTN_VLLM_KV_LAYOUT=HND`` picks HND). The impl views that page as graphattn's
``[2, num_blocks, block_size, num_kv_heads, head_size]`` without a copy.

Kernels are compiled (or loaded from graphattn's cache) and workspaces allocated when the
metadata builder is created, after the model is loaded and before vLLM captures CUDA graphs;
``forward`` only launches (no allocation, no host sync, no compile). fp8 caches read vLLM's
``layer._k_scale`` / ``_v_scale`` on the device in every kernel.

fp8 queries (vLLM's query quantization): the impl reports ``supports_quant_query_input`` for
layers with an e4m3 cache (``fp8``, ``fp8_e4m3``) over the paged cache (decoder and
cross-attention layers); vLLM's ``Attention`` then quantizes each query with ``QuantFP8``
(static, per tensor: query / ``layer._q_scale``, clamped to e4m3) before ``forward``, and keeps
the output in the model's dtype. The builder prepares such a layer's kernels with
``q_dtype="fp8_e4m3"`` (spec ``_qe4m3``) and ``layer._q_scale`` as the device descale, so
decodes, prefills and captured graphs read the current scales on every launch (no recapture).
``GRAPHATTN_VLLM_QUANT_QUERY=0`` keeps 16-bit queries.

Cascade attention (vLLM's FlashAttention backend up to 0.11; vLLM 0.33 removed it from its model
runner, which always passes common_prefix_len 0): ``GraphattnMetadataBuilder.
use_cascade_attention`` answers with vLLM's rule and graphattn's measured floor
(graphattn.metadata.use_cascade_attention), and
``build(common_prefix_len > 0, ...)`` makes cascade metadata, which the impl runs eagerly as
vLLM's cascade_attention did: the cache write, the shared prefix attended once by every query
(non-causal, with its softmax LSE), each request's suffix (causal, LSE), merge_attn_states.
"""

import contextlib
import dataclasses
import os
import threading
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import torch

from vllm.config import VllmConfig, get_current_vllm_config_or_none
from vllm.platforms.interface import DeviceCapability
from vllm.utils.torch_utils import get_dtype_size
from vllm.v1.attention.backend import (AttentionBackend, AttentionCGSupport, AttentionImpl,
                                       AttentionMetadataBuilder, AttentionType,
                                       CommonAttentionMetadata)
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheSpec

try:  # vLLM 0.33: per-layer page views in a resolved KVCacheLayout
    from vllm.v1.kv_cache_layout import KVCacheLayout
except ImportError:  # vLLM 0.26: the backend's get_kv_cache_shape / stride order
    KVCacheLayout = None

import graphattn
from graphattn import metadata as _ga_metadata

from . import backend_name

HEAD_SIZES = list(range(32, 257, 8))
KERNEL_BLOCK_SIZES = list(range(16, 257, 16))
MAX_DECODE_QUERY_LEN = 16
KV_LAYOUT_ENV = "GRAPHATTN_VLLM_KV_LAYOUT"
QUANT_QUERY_ENV = "GRAPHATTN_VLLM_QUANT_QUERY"

# vLLM's cache dtype names -> graphattn's (16-bit names must be the model's dtype).
_KV_DTYPES = {"auto": "auto", "float16": "auto", "bfloat16": "auto", "fp8": "fp8_e4m3",
              "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_FP8_TORCH = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
# vLLM keeps no KV cache for ENCODER layers either (get_kv_cache_spec: None): both run
# graphattn's dense non-causal attention over the step's own keys and values.
_ATTN_TYPES = {AttentionType.DECODER: "decoder", AttentionType.ENCODER: "encoder_only",
               AttentionType.ENCODER_ONLY: "encoder_only",
               AttentionType.ENCODER_DECODER: "encoder_decoder"}


def quant_query_enabled() -> bool:
    """$GRAPHATTN_VLLM_QUANT_QUERY: 1 (the default: fp8 queries where supported) or 0."""
    value = os.environ.get(QUANT_QUERY_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError("%s=%r is not supported; allowed: 0, 1" % (QUANT_QUERY_ENV, value))
    return value == "1"


def quant_query_supported(kv_cache_dtype: str, attn_type: str) -> bool:
    """Whether graphattn takes vLLM's quantized (e4m3) queries for a layer: an e4m3 KV cache
    (vLLM quantizes queries to e4m3 only then; an e5m2 cache keeps 16-bit queries) read through
    the paged cache (decoder and cross-attention layers: graphattn's dense encoder kernel takes
    16-bit queries only), and GRAPHATTN_VLLM_QUANT_QUERY not 0. Every arch graphattn runs on
    (sm_80+): fp8 QK^T MMAs on sm_89+, exact widening to fp16 before."""
    return (_KV_DTYPES.get(kv_cache_dtype) == "fp8_e4m3"
            and _ATTN_TYPES.get(attn_type) in ("decoder", "encoder_decoder")
            and quant_query_enabled())


def kv_layout() -> str:
    """The page layout graphattn asks vLLM for: $GRAPHATTN_VLLM_KV_LAYOUT, NHD or HND."""
    value = os.environ.get(KV_LAYOUT_ENV, "NHD").upper()
    if value not in ("NHD", "HND"):
        raise ValueError("%s=%r is not supported; allowed: NHD, HND"
                         % (KV_LAYOUT_ENV, os.environ.get(KV_LAYOUT_ENV)))
    return value


def spec_layout(spec: AttentionSpec) -> str:
    """NHD or HND from a spec customized by GraphattnBackend.customize_spec (with one KV head
    both are the same memory: NHD)."""
    if spec.num_head_slots == 2:
        return "NHD"
    if spec.num_head_slots == 2 * spec.num_kv_heads:
        return "HND"
    raise ValueError("KV cache spec %r was not customized by GraphattnBackend (num_head_slots "
                     "%r; expected 2 or 2 * num_kv_heads)" % (spec, spec.num_head_slots))


class GraphattnBackend(AttentionBackend):
    """graphattn's kernels behind vLLM's attention backend interface."""

    supported_dtypes: ClassVar[List[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[List[str]] = list(_KV_DTYPES)
    # forward() writes the new keys and values (with the device scales) and attends in one call.
    forward_includes_kv_cache_update: bool = True

    @staticmethod
    def get_name() -> str:
        return backend_name()

    @staticmethod
    def get_impl_cls() -> type:
        return GraphattnImpl

    @staticmethod
    def get_builder_cls() -> type:
        return GraphattnMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Optional[KVCacheSpec] = None) -> list:
        return list(KERNEL_BLOCK_SIZES)

    @classmethod
    def get_supported_head_sizes(cls) -> List[int]:
        return list(HEAD_SIZES)

    @classmethod
    def supports_sink(cls) -> bool:
        return True

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_cascade_attention(cls) -> bool:
        """Cascade attention runs (eagerly) for decoder layers without a sliding window, ALiBi
        or sinks, as in vLLM's FlashAttention backend; the builder's use_cascade_attention
        applies vLLM's rule with graphattn's measured floor."""
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type in _ATTN_TYPES

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability >= DeviceCapability(8, 0)

    @classmethod
    def supports_combination(cls, head_size: int, dtype: torch.dtype, kv_cache_dtype: Any,
                             block_size: Optional[int], use_mla: bool, has_sink: bool,
                             use_sparse: bool, use_mm_prefix: bool,
                             device_capability: DeviceCapability) -> Optional[str]:
        if kv_cache_dtype in ("float16", "bfloat16") and kv_cache_dtype != str(dtype).split(".")[-1]:
            return ("graphattn: a 16-bit KV cache has the model's dtype (%s), not %s"
                    % (dtype, kv_cache_dtype))
        if block_size is not None and block_size > KERNEL_BLOCK_SIZES[-1] and block_size % 16:
            return "graphattn: block sizes are multiples of 16"
        return None

    @classmethod
    def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:
        if (getattr(spec, "state_content_bytes", None) is not None
                or getattr(spec, "num_head_slots", None) is not None):
            return spec  # packed by someone else: validate_kv_cache_spec refuses it below
        if spec.head_size_v != spec.head_size:
            raise ValueError("graphattn needs equal key and value head sizes, got %d and %d"
                             % (spec.head_size, spec.head_size_v))
        elem = get_dtype_size(spec.dtype)
        if kv_layout() == "NHD":
            return dataclasses.replace(spec, num_head_slots=2,
                                       state_content_bytes=spec.num_kv_heads * spec.head_size
                                       * elem)
        return dataclasses.replace(spec, num_head_slots=2 * spec.num_kv_heads,
                                   state_content_bytes=spec.head_size * elem)

    @classmethod
    def supported_kv_cache_layouts(cls) -> Tuple[Any, ...]:
        # Each block's [H, N, C] must be one run (K plane, then V plane); the layer may sit
        # inside or outside the block (block strides are free).
        return (KVCacheLayout.LBHNC, KVCacheLayout.BLHNC)

    # vLLM 0.26 (the release pinned to PyTorch 2.11) asks the backend for the cache's shape:
    # [num_blocks, 2, block_size, num_kv_heads, head_size], HND by its stride order. vLLM 0.33
    # does not call these.

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                           cache_dtype_str: str = "auto") -> Tuple[int, ...]:
        if block_size % 16 != 0:
            raise ValueError("graphattn block sizes are multiples of 16, got %d" % block_size)
        return (num_blocks, 2, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension: bool = False) -> Tuple[int, ...]:
        order = (0, 1, 2, 3, 4) if kv_layout() == "NHD" else (0, 1, 3, 2, 4)
        if include_num_layers_dimension:
            return (0,) + tuple(i + 1 for i in order)
        return order


@dataclasses.dataclass
class GraphattnMetadata:
    """One step's metadata for every layer of a KV cache group: vLLM's fields that its other
    components read, and graphattn's AttentionMetadata."""
    num_actual_tokens: int
    max_query_len: int
    query_start_loc: torch.Tensor
    max_seq_len: int
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    num_decodes: int
    num_decode_tokens: int
    graphattn: graphattn.AttentionMetadata
    causal: Any = True
    # Cascade attention (build() with common_prefix_len > 0): vLLM's fields of the same names.
    use_cascade: bool = False
    common_prefix_len: int = 0
    cu_prefix_query_lens: Optional[torch.Tensor] = None  # int32 [2] = [0, num_actual_tokens]
    prefix_kv_lens: Optional[torch.Tensor] = None        # int32 [1] = [common_prefix_len]
    suffix_kv_lens: Optional[torch.Tensor] = None        # int32 [num_reqs] = seq_lens - prefix


class _Prepared:
    """A prepared graphattn backend and its zero-filled workspace, shared by the layers of one
    configuration on one device."""

    def __init__(self, backend: graphattn.AttentionBackend, workspace: Optional[torch.Tensor]):
        self.backend = backend
        self.workspace = workspace


_prepared: Dict[tuple, _Prepared] = {}
_lock = threading.Lock()


class GraphattnImpl(AttentionImpl):
    """One attention layer: its configuration in graphattn's terms; the kernels come from the
    builder (prepare())."""

    def __init__(self, num_heads: int, head_size: int, scale: float,
                 num_kv_heads: Optional[int] = None, alibi_slopes: Optional[List[float]] = None,
                 sliding_window: Optional[int] = None, kv_cache_dtype: str = "auto",
                 logits_soft_cap: Optional[float] = None,
                 attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: Optional[str] = None,
                 sinks: Optional[torch.Tensor] = None, **unsupported: Any) -> None:
        if unsupported:
            raise NotImplementedError("graphattn does not support the attention arguments %s"
                                      % sorted(unsupported))
        if attn_type not in _ATTN_TYPES:
            raise NotImplementedError("attention type %r is not supported by graphattn; "
                                      "supported: %s" % (attn_type, sorted(_ATTN_TYPES)))
        if sliding_window is not None and attn_type != AttentionType.DECODER:
            raise NotImplementedError("graphattn: a sliding window (%d) on %s attention is not "
                                      "supported (non-causal kernels take no window)"
                                      % (sliding_window, attn_type))
        if kv_cache_dtype not in _KV_DTYPES:
            raise NotImplementedError("kv_cache_dtype %r is not supported by graphattn; "
                                      "supported: %s" % (kv_cache_dtype, sorted(_KV_DTYPES)))
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.alibi_slopes = None if alibi_slopes is None else [float(s) for s in alibi_slopes]
        self.sliding_window = sliding_window
        self.kv_cache_dtype = kv_cache_dtype
        self.logits_soft_cap = float(logits_soft_cap or 0.0)
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sinks = sinks
        # vLLM's cascade_attention takes neither ALiBi nor a window (nor sinks, which the merge
        # would count twice).
        self.supports_cascade = (attn_type == AttentionType.DECODER and sliding_window is None
                                 and alibi_slopes is None and sinks is None)
        if sinks is not None and tuple(sinks.shape) != (num_heads,):
            raise ValueError("sinks must have num_heads (%d) values, got shape %s"
                             % (num_heads, tuple(sinks.shape)))
        # vLLM's Attention layer reads this right after building the impl: when true (and its
        # cache is fp8) it quantizes every query to e4m3 with layer._q_scale before forward().
        self.supports_quant_query_input = quant_query_supported(kv_cache_dtype, attn_type)
        self._entry: Optional[_Prepared] = None
        self._kv_view: Optional[Tuple[int, torch.Tensor]] = None
        self._layout = "NHD"
        self._fp8_query = False  # prepared for e4m3 queries

    def quantized_query(self, layer: Any) -> bool:
        """Whether vLLM hands this layer's forward() e4m3 queries: this impl accepts them and
        the layer built its query quantizer (Attention.query_quant)."""
        return (self.supports_quant_query_input
                and getattr(layer, "query_quant", None) is not None)

    # -- called by the builder, once the KV cache spec and the device are known

    def layer_config(self, *, block_size: int, layout: str, dtype: torch.dtype,
                     max_model_len: int, max_num_seqs: int,
                     decode_query_len: int, fp8_query: bool = False) -> Dict[str, Any]:
        """graphattn.AttentionBackend's arguments for this layer; fp8_query: vLLM quantizes
        its queries (quantized_query), so the kernels take e4m3 queries (q_dtype
        fp8_e4m3)."""
        if fp8_query and not self.supports_quant_query_input:
            raise ValueError("graphattn: fp8 queries need an fp8_e4m3 KV cache on a decoder or "
                             "cross-attention layer (this layer: kv_cache_dtype %r, %s)"
                             % (self.kv_cache_dtype, self.attn_type))
        window = 0 if self.sliding_window is None else int(self.sliding_window)
        extra = dict(q_dtype="fp8_e4m3") if fp8_query else {}
        return dict(num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                    head_size=self.head_size, block_size=block_size,
                    dtype=str(dtype).split(".")[-1],
                    kv_cache_dtype=_KV_DTYPES[self.kv_cache_dtype], layout=layout,
                    window=window,
                    soft_cap=self.logits_soft_cap, scale=self.scale,
                    max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                    attn_type=_ATTN_TYPES[self.attn_type],
                    decode_query_len=decode_query_len, **extra)

    def prepare(self, layer: Any, config: Dict[str, Any], device: torch.device) -> None:
        """Compiles or loads this layer's kernels (shared with every layer of the same
        configuration) and allocates their workspace. Call before any CUDA graph capture."""
        fp8 = config["kv_cache_dtype"] != "auto"
        alibi = (None if self.alibi_slopes is None
                 else torch.tensor(self.alibi_slopes, dtype=torch.float32, device=device))
        k_dev = layer._k_scale if fp8 else None
        v_dev = layer._v_scale if fp8 else None
        q_dev = None
        if config.get("q_dtype", "auto") != "auto":
            # vLLM's static per-tensor query scale (query = stored * _q_scale): the kernels read
            # it on the device at every launch, as they read _k_scale and _v_scale.
            q_dev = layer._q_scale
            if q_dev.numel() != 1:
                raise ValueError("graphattn: per-head query scales (layer._q_scale of shape %s) "
                                 "are not supported; supported: one per-tensor scale"
                                 % (tuple(q_dev.shape),))
        key = (str(device), tuple(sorted(config.items())), tuple(self.alibi_slopes or ()),
               0 if self.sinks is None else self.sinks.data_ptr(),
               0 if k_dev is None else k_dev.data_ptr(), 0 if v_dev is None else v_dev.data_ptr(),
               0 if q_dev is None else q_dev.data_ptr())
        with _lock:
            entry = _prepared.get(key)
            if entry is None:
                # (graphattn runs on CUDA devices; another device fails in AttentionBackend.)
                on_device = (torch.cuda.device(device) if device.type == "cuda"
                             else contextlib.nullcontext())
                with on_device:
                    backend = graphattn.AttentionBackend(
                        alibi_slopes=alibi, sinks=self.sinks, k_scale_device=k_dev,
                        v_scale_device=v_dev, q_descale=q_dev, **config)
                    backend.prepare()
                    workspace = None
                    if config["attn_type"] != "encoder_only":
                        workspace = torch.zeros(max(backend.workspace_bytes(), 1),
                                                dtype=torch.uint8, device=device)
                entry = _Prepared(backend, workspace)
                _prepared[key] = entry
        self._entry = entry
        self._layout = config["layout"]
        self._fp8_query = q_dev is not None
        self._kv_view = None

    # -- per step

    def _paired_cache(self, kv_cache: torch.Tensor) -> torch.Tensor:
        """graphattn's [2, num_blocks, block_size, num_kv_heads, head_size] view of vLLM's page
        view (cached per cache tensor: no work in the steady state)."""
        view = self._kv_view
        if view is not None and view[0] == kv_cache.data_ptr():
            return view[1]
        c = kv_cache
        if self.kv_cache_dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
            c = c.view(_FP8_TORCH[_KV_DTYPES[self.kv_cache_dtype]])
        if c.dim() == 5:  # vLLM 0.26: get_kv_cache_shape's [B, 2, N, H, D] (HND by strides)
            paired = c.transpose(0, 1)
        elif self._layout == "NHD":  # [B, 2, N, H*D] -> [2, B, N, H, D]
            paired = c.unflatten(-1, (self.num_kv_heads, self.head_size)).transpose(0, 1)
        else:  # [B, 2H, N, D] -> [B, 2, H, N, D] -> [2, B, N, H, D]
            paired = c.unflatten(1, (2, self.num_kv_heads)).permute(1, 0, 3, 2, 4)
        self._kv_view = (kv_cache.data_ptr(), paired)
        return paired

    def forward(self, layer: Any, query: torch.Tensor, key: Optional[torch.Tensor],
                value: Optional[torch.Tensor], kv_cache: torch.Tensor,
                attn_metadata: Optional[GraphattnMetadata], output: torch.Tensor,
                output_scale: Optional[torch.Tensor] = None,
                output_block_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("graphattn does not fuse output quantization")
        if attn_metadata is None:  # vLLM's profiling run
            return output.fill_(0)
        entry = self._entry
        if entry is None:
            raise RuntimeError("graphattn: this layer's kernels were not prepared (its metadata "
                               "builder prepares them); was the layer built outside vLLM's "
                               "model runner?")
        if (query.dtype == torch.float8_e4m3fn) != self._fp8_query:
            raise ValueError("graphattn: query dtype %s, but this layer's kernels were prepared "
                             "for %s queries (the layer %s a query quantizer: "
                             "Attention.query_quant)"
                             % (query.dtype, "float8_e4m3fn" if self._fp8_query else "16-bit",
                                "has" if self._fp8_query else "has no"))
        n = attn_metadata.num_actual_tokens
        if attn_metadata.use_cascade:
            self._cascade(layer, query, key, value, kv_cache, attn_metadata, output)
            return output
        dense = _ATTN_TYPES[self.attn_type] == "encoder_only"
        write = (self.kv_sharing_target_layer_name is None and key is not None
                 and value is not None and not dense)
        k = key[:n] if write else None
        v = value[:n] if write else None
        if dense:
            k, v, paired = key[:n], value[:n], None
        else:
            paired = self._paired_cache(kv_cache)
        entry.backend.forward(query[:n], k, v, paired, output[:n], attn_metadata.graphattn,
                              entry.workspace)
        return output


    def _cascade(self, layer: Any, query: torch.Tensor, key: Optional[torch.Tensor],
                 value: Optional[torch.Tensor], kv_cache: torch.Tensor, md: GraphattnMetadata,
                 output: torch.Tensor) -> None:
        """vLLM's cascade_attention over graphattn's ops (eager)."""
        if not self.supports_cascade:
            raise NotImplementedError("graphattn: cascade attention is for decoder layers "
                                      "without a sliding window, ALiBi or sinks")
        from graphattn import ops

        n = md.num_actual_tokens
        paired = self._paired_cache(kv_cache)
        k_cache, v_cache = paired[0], paired[1]
        kv_dtype = _KV_DTYPES[self.kv_cache_dtype]
        fp8 = kv_dtype != "auto"
        k_scale = layer._k_scale if fp8 else 1.0
        v_scale = layer._v_scale if fp8 else 1.0
        if (self.kv_sharing_target_layer_name is None and key is not None
                and value is not None):
            ops.reshape_and_cache_flash(key[:n], value[:n], k_cache, v_cache,
                                        md.slot_mapping[:n], kv_dtype, k_scale, v_scale)
        q = query[:n]
        prefix_blocks = md.common_prefix_len // k_cache.shape[1]
        common = dict(softmax_scale=self.scale, softcap=self.logits_soft_cap,
                      return_softmax_lse=True, k_descale=k_scale, v_descale=v_scale,
                      kv_cache_dtype=kv_dtype if fp8 else None)
        fp8_query = q.dtype == torch.float8_e4m3fn
        if fp8_query:  # vLLM quantized the query with layer._q_scale
            common["q_descale"] = layer._q_scale
        prefix_out, prefix_lse = ops.flash_attn_varlen_func(
            q, k_cache, v_cache, max_seqlen_q=n, cu_seqlens_q=md.cu_prefix_query_lens,
            max_seqlen_k=md.common_prefix_len, seqused_k=md.prefix_kv_lens, causal=False,
            block_table=md.block_table[:1, :prefix_blocks],
            out=torch.empty_like(output[:n]) if fp8_query else None, **common)
        suffix_out, suffix_lse = ops.flash_attn_varlen_func(
            q, k_cache, v_cache, max_seqlen_q=md.max_query_len,
            cu_seqlens_q=md.query_start_loc, max_seqlen_k=max(
                md.max_seq_len - md.common_prefix_len, 1),
            seqused_k=md.suffix_kv_lens, causal=True,
            block_table=md.block_table[:, prefix_blocks:],
            # single-token decodes run the split-KV decode kernel; multi-token ones (speculative
            # decoding) go with the prefills, which handle them as short causal chunks
            num_decodes=md.num_decodes if md.num_decode_tokens == md.num_decodes else 0,
            out=torch.empty_like(output[:n]) if fp8_query else None, **common)
        ops.merge_attn_states(output[:n], prefix_out, prefix_lse, suffix_out, suffix_lse)


class GraphattnMetadataBuilder(AttentionMetadataBuilder[GraphattnMetadata]):
    """Builds GraphattnMetadata from vLLM's CommonAttentionMetadata, and prepares the kernels
    of its group's layers when created."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.ALWAYS
    reorder_batch_threshold: Optional[int] = 1
    supports_update_block_table: bool = True

    @classmethod
    def get_cudagraph_support(cls, vllm_config: VllmConfig,
                              kv_cache_spec: KVCacheSpec) -> AttentionCGSupport:
        # Full graphs of any batch: captured with the device split (AttentionMetadata(
        # device_split=True)), which serves uniform decodes (also 1 + spec tokens) and mixes.
        return AttentionCGSupport(
            int(_ga_metadata.cudagraph_support_for(1, mixed_graphs=True)))

    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: List[str],
                 vllm_config: VllmConfig, device: torch.device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)
        self.decode_query_len = int(self.reorder_batch_threshold or 1)
        if self.decode_query_len > MAX_DECODE_QUERY_LEN:
            raise ValueError("graphattn decodes up to %d query tokens per request (1 + speculative "
                             "tokens), got %d" % (MAX_DECODE_QUERY_LEN, self.decode_query_len))
        self.block_size = kv_cache_spec.block_size
        self.layout = (spec_layout(kv_cache_spec)
                       if getattr(kv_cache_spec, "num_head_slots", None) else kv_layout())
        sched = vllm_config.scheduler_config
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.max_num_seqs = max(int(sched.max_num_seqs),
                                int(vllm_config.compilation_config.max_cudagraph_capture_size
                                    or 0))
        self.dtype = vllm_config.model_config.dtype
        self.device = device
        self.cascade_layers = True  # every prepared layer can run cascade attention
        self.prepared_layers = self._prepare_layers(layer_names, vllm_config, device)

    def _prepare_layers(self, layer_names: List[str], vllm_config: VllmConfig,
                        device: torch.device) -> List[str]:
        from vllm.model_executor.layers.attention import Attention

        layers = getattr(vllm_config.compilation_config, "static_forward_context", {})
        names = []
        for name in layer_names:
            layer = layers.get(name)
            impl = getattr(layer, "impl", None)
            if not isinstance(layer, Attention) or not isinstance(impl, GraphattnImpl):
                continue
            config = impl.layer_config(block_size=self.block_size, layout=self.layout,
                                       dtype=self.dtype, max_model_len=self.max_model_len,
                                       max_num_seqs=self.max_num_seqs,
                                       decode_query_len=self.decode_query_len,
                                       fp8_query=impl.quantized_query(layer))
            impl.prepare(layer, config, device)
            self.cascade_layers = self.cascade_layers and impl.supports_cascade
            names.append(name)
        return names

    def use_cascade_attention(self, common_prefix_len: int, query_lens: Any,
                              num_query_heads: int, num_kv_heads: int, use_alibi: bool,
                              use_sliding_window: bool, use_local_attention: bool,
                              num_sms: int, dcp_world_size: int = 1, **_: Any) -> bool:
        """vLLM's FlashAttentionMetadataBuilder.use_cascade_attention (its rule with
        graphattn's measured floor, graphattn.metadata.use_cascade_attention); no for layers
        that cannot run it, chunked local attention or decode context parallelism."""
        if not self.cascade_layers or use_local_attention or dcp_world_size > 1:
            return False
        return _ga_metadata.use_cascade_attention(common_prefix_len, query_lens,
                                                  num_query_heads, num_kv_heads, use_alibi,
                                                  use_sliding_window, num_sms)

    def _metadata(self, cm: CommonAttentionMetadata, device_split: bool) -> GraphattnMetadata:
        num_reqs = cm.num_reqs
        if device_split:
            # Graph capture: the kernels split the batch on the device, so one graph serves
            # whatever batch of this token count replays it; the host values are its bounds.
            tokens = cm.num_actual_tokens
            decodes = decode_tokens = 0
            max_q, max_seq = max(int(cm.max_query_len), 1), self.max_model_len
        else:
            qsl = cm.query_start_loc_cpu[:num_reqs + 1]
            split = _ga_metadata.split_decodes_and_prefills(qsl, self.decode_query_len)
            decodes, decode_tokens = split.num_decodes, split.num_decode_tokens
            tokens = int(qsl[-1]) if num_reqs else 0
            max_q = int(cm.max_query_len) if split.num_prefills else 1
            max_seq = int(cm.max_seq_len)
        md = graphattn.AttentionMetadata(
            query_start_loc=cm.query_start_loc, seq_lens=cm.seq_lens,
            block_table=cm.block_table_tensor, slot_mapping=cm.slot_mapping, num_reqs=num_reqs,
            num_actual_tokens=tokens, max_query_len=max_q, max_seq_len=max_seq,
            num_decodes=decodes, num_decode_tokens=decode_tokens, device_split=device_split)
        return GraphattnMetadata(
            num_actual_tokens=tokens if not device_split else cm.num_actual_tokens,
            max_query_len=int(cm.max_query_len), query_start_loc=cm.query_start_loc,
            max_seq_len=int(cm.max_seq_len), seq_lens=cm.seq_lens,
            block_table=cm.block_table_tensor, slot_mapping=cm.slot_mapping,
            num_decodes=decodes, num_decode_tokens=decode_tokens, graphattn=md,
            causal=cm.causal)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> GraphattnMetadata:
        # Causality is each layer's attention type (encoder layers are non-causal); a
        # per-request causal tensor has no graphattn counterpart.
        if isinstance(common_attn_metadata.causal, torch.Tensor):
            raise NotImplementedError("graphattn: per-request causal masks are not supported")
        md = self._metadata(common_attn_metadata, device_split=False)
        if common_prefix_len > 0:
            md = self._cascade_metadata(md, int(common_prefix_len), common_attn_metadata)
        return md

    def _cascade_metadata(self, md: GraphattnMetadata, prefix: int,
                          cm: CommonAttentionMetadata) -> GraphattnMetadata:
        """vLLM's cascade fields (its builder's use_cascade branch)."""
        if not self.cascade_layers:
            raise NotImplementedError("graphattn: cascade attention (common_prefix_len %d) for "
                                      "layers with a sliding window, ALiBi, sinks or a "
                                      "non-decoder type" % prefix)
        if prefix % self.block_size:
            raise ValueError("common_prefix_len %d must be a multiple of the block size %d"
                             % (prefix, self.block_size))
        n = cm.num_reqs
        dev = md.seq_lens.device
        return dataclasses.replace(
            md, use_cascade=True, common_prefix_len=prefix,
            cu_prefix_query_lens=torch.tensor([0, md.num_actual_tokens], dtype=torch.int32,
                                              device=dev),
            prefix_kv_lens=torch.tensor([prefix], dtype=torch.int32, device=dev),
            suffix_kv_lens=(md.seq_lens[:n] - prefix).to(torch.int32))

    def build_for_cudagraph_capture(
            self, common_attn_metadata: CommonAttentionMetadata) -> GraphattnMetadata:
        return self._metadata(common_attn_metadata, device_split=True)

    def update_block_table(self, metadata: GraphattnMetadata, blk_table: torch.Tensor,
                           slot_mapping: torch.Tensor) -> GraphattnMetadata:
        md = dataclasses.replace(metadata.graphattn, block_table=blk_table,
                                 slot_mapping=slot_mapping)
        return dataclasses.replace(metadata, block_table=blk_table, slot_mapping=slot_mapping,
                                   graphattn=md)
