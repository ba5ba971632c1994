# SPDX-License-Identifier: Apache-2.0
"""graphattn: paged attention for LLM inference engines, kernels compiled at run time with NVRTC
and launched inside CUDA graphs (vLLM v1 attention-backend semantics).

A pure-Python binding over libgraphattn's C ABI (ctypes): one library build serves every
CPython 3.9+. Tensors come in through DLPack (PyTorch, CuPy, JAX) without copies; PyTorch is
never imported unless the caller passes torch tensors, and then work runs on
torch.cuda.current_stream() unless a stream is given.

    import graphattn
    attn = graphattn.AttentionBackend(num_heads=32, num_kv_heads=8, head_size=128,
                                      max_model_len=8192, max_num_seqs=256)
    attn.prepare()
    workspace = attn.allocate_workspace(query)
    attn.forward(query, key, value, kv_cache, output, metadata, workspace)

Modules: graphattn.cache (KernelCache), graphattn.metadata (capture sizes, decode/prefill
split), graphattn.ops (vLLM's reshape_and_cache_flash and flash_attn_varlen_func; calc_kv_scales;
encoder_attention and multi_head_attention, without a KV cache),
graphattn.warmup (``python -m graphattn.warmup``).

The library is loaded at import from $GRAPHATTN_LIBRARY, else from the package's own copy.
"""

from . import _lib
from . import _log  # the library's warnings go to logging.getLogger("graphattn")
from .errors import CompileError, GraphattnError
from .backend import AttentionBackend, AttentionMetadata, BoundsViolation, LayerConfig
from .blocksparse import BlocksparseParams
from . import blocksparse, cache, metadata, ops
from .cache import KernelCache, default_cache

__version__ = _lib.version
library_path = _lib.path
ABI_VERSION = _lib.ABI_VERSION


def gpu_available():
    """Whether the CUDA driver loads and a device exists (never raises for want of a GPU)."""
    import ctypes

    flag = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_gpu_available(ctypes.byref(flag)))
    return bool(flag.value)


def device_count():
    """CUDA devices this process can use; 0 without a driver or a GPU (never raises for that)."""
    import ctypes

    count = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_device_count(ctypes.byref(count)))
    return count.value


def use_device(device):
    """Makes `device`'s primary context current on this thread, whatever context was current
    (one thread per device when a process drives several GPUs). An out-of-range device raises
    GraphattnError naming it and the count."""
    _lib.check(_lib.lib.graphattn_use_device(int(device)))


def current_device_arch():
    """The current CUDA context's compute capability * 10 (e.g. 90); needs a GPU."""
    import ctypes

    arch = ctypes.c_int(0)
    _lib.check(_lib.lib.graphattn_current_device_arch(ctypes.byref(arch)))
    return arch.value


__all__ = ["AttentionBackend", "AttentionMetadata", "BoundsViolation", "LayerConfig", "GraphattnError",
           "CompileError", "KernelCache", "default_cache", "gpu_available",
           "device_count", "use_device", "current_device_arch", "cache", "metadata", "ops", "library_path", "ABI_VERSION",
           "__version__"]
