# SPDX-License-Identifier: Apache-2.0
"""Loads libgraphattn.so and declares the C ABI (include/graphattn/graphattn.h) for ctypes.

The library is looked up in this order:
  1. $GRAPHATTN_LIBRARY (the path of a libgraphattn.so);
  2. the copy installed inside this package (graphattn/libgraphattn.so).
Its NVRTC dependency (libnvrtc.so.13) is found by the dynamic loader (in a wheel, the library's
RPATH points at NVIDIA's nvidia-cuda-nvrtc wheel); when that fails, it is loaded from
$GRAPHATTN_CUDA_HOME, $CUDA_HOME, /usr/local/cuda or NVIDIA's pip wheels first.
"""

import ctypes
import glob
import os
import sys

from . import errors

ABI_VERSION = 2  # GRAPHATTN_ABI_VERSION this binding was written for
LIBRARY_FILE = "libgraphattn.so"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

c_int_p = ctypes.POINTER(ctypes.c_int)
c_size_t_p = ctypes.POINTER(ctypes.c_size_t)
DLTensor_p = ctypes.c_void_p  # a const DLTensor*, passed as an address (DLArg.ref)
# paged_attention_v1 / v2 after their tensors: num_kv_heads, scale, block_tables, seq_lens,
# block_size, max_seq_len, alibi_slopes, kv_dtype, k_scale, v_scale, k_scale_device,
# v_scale_device, tp_rank, the four block-sparse ints, stream, cache.
_PAGED_ATTENTION_REST = [ctypes.c_int, ctypes.c_float, DLTensor_p, DLTensor_p, ctypes.c_int,
                         ctypes.c_int, DLTensor_p, ctypes.c_int, ctypes.c_float,
                         ctypes.c_float, DLTensor_p, DLTensor_p] + [ctypes.c_int] * 5 + \
    [ctypes.c_void_p] * 2


# ---- Structs ---------------------------------------------------------------------------------

class LayerConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_heads", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int),
        ("head_size", ctypes.c_int),
        ("block_size", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("kv_dtype", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("window", ctypes.c_int),
        ("soft_cap", ctypes.c_float),
        ("scale", ctypes.c_float),
        ("k_scale", ctypes.c_float),
        ("v_scale", ctypes.c_float),
        ("max_model_len", ctypes.c_int),
        ("max_num_seqs", ctypes.c_int),
        ("arch", ctypes.c_int),
        ("overlap_previous_kernel", ctypes.c_int),
        ("check_bounds", ctypes.c_int),
        # ALiBi and attention sinks: [num_heads] fp32 device arrays, NULL = none
        ("alibi_slopes", ctypes.c_void_p),
        ("sinks", ctypes.c_void_p),
        # attention type (GRAPHATTN_ATTN_*): 0 decoder
        ("attn_type", ctypes.c_int),
        # fp8 scales in device memory
        ("k_scale_device", ctypes.c_void_p),
        ("v_scale_device", ctypes.c_void_p),
        # multi-token decode: the most query tokens of a decode request (1..16)
        ("decode_query_len", ctypes.c_int),
        # block-sparse attention (all 0: dense)
        ("blocksparse_block_size", ctypes.c_int),
        ("blocksparse_local_blocks", ctypes.c_int),
        ("blocksparse_vert_stride", ctypes.c_int),
        ("blocksparse_head_sliding_step", ctypes.c_int),
        ("blocksparse_active_head_offset", ctypes.c_int),
        ("softmax_lse", ctypes.c_int),
        # fp8 queries: q_dtype (KV_AUTO or KV_FP8_E4M3), q_scale, device descales and their
        # (request, KV head) element strides
        ("q_dtype", ctypes.c_int),
        ("q_scale", ctypes.c_float),
        ("q_descale", ctypes.c_void_p),
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("descale_req_stride", ctypes.c_int),
        ("descale_head_stride", ctypes.c_int),
    ]


class CacheOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dir", ctypes.c_char_p),
        ("use_disk", ctypes.c_int),
        ("max_bytes", ctypes.c_uint64),
        ("lock_timeout_ms", ctypes.c_int),
        ("dump_source", ctypes.c_int),
        ("shared_dir", ctypes.c_int),
    ]


class CacheStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("memory_hits", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("misses", ctypes.c_uint64),
        ("compiles", ctypes.c_uint64),
        ("compile_failures", ctypes.c_uint64),
        ("repairs", ctypes.c_uint64),
        ("evictions", ctypes.c_uint64),
        ("compile_ms", ctypes.c_double),
        ("write_failures", ctypes.c_uint64),
    ]


class PrecompileResult(ctypes.Structure):
    _fields_ = [
        ("origin", ctypes.c_int),
        ("ms", ctypes.c_double),
        ("ok", ctypes.c_int),
        ("error", ctypes.c_char * 512),
    ]


class CacheEntry(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_char * 33),
        ("spec", ctypes.c_char * 128),
        ("arch", ctypes.c_int),
        ("ok", ctypes.c_int),
        ("status", ctypes.c_char * 32),
        ("file_bytes", ctypes.c_uint64),
        ("last_used_ms", ctypes.c_int64),
        ("compiled_at_ms", ctypes.c_int64),
    ]


class BoundsViolation(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("request", ctypes.c_int),
        ("position", ctypes.c_int),
        ("value", ctypes.c_int64),
        ("message", ctypes.c_char * 256),
    ]


class Metadata(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("query_start_loc", DLTensor_p),
        ("seq_lens", DLTensor_p),
        ("block_table", DLTensor_p),
        ("slot_mapping", DLTensor_p),
        ("num_reqs", ctypes.c_int),
        ("num_decodes", ctypes.c_int),
        ("num_decode_tokens", ctypes.c_int),
        ("num_actual_tokens", ctypes.c_int),
        ("max_query_len", ctypes.c_int),
        ("max_seq_len", ctypes.c_int),
        ("device_split", ctypes.c_int),
    ]


class DecodePrefillSplit(ctypes.Structure):
    _fields_ = [
        ("num_decodes", ctypes.c_int),
        ("num_prefills", ctypes.c_int),
        ("num_decode_tokens", ctypes.c_int),
        ("num_prefill_tokens", ctypes.c_int),
    ]


# ---- Loading ---------------------------------------------------------------------------------

def _nvrtc_candidates():
    names = ("libnvrtc.so.13", "libnvrtc.so")
    roots = [os.environ.get("GRAPHATTN_CUDA_HOME"), os.environ.get("CUDA_HOME"),
             os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in roots:
        if root:
            for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
                for name in names:
                    yield os.path.join(root, sub, name)
    # NVIDIA's pip wheels (nvidia-cuda-nvrtc), e.g. next to a PyTorch install.
    for entry in sys.path:
        for pattern in ("nvidia/cuda_nvrtc/lib/libnvrtc.so.1*", "nvidia/cu13/lib/libnvrtc.so.1*"):
            yield from sorted(glob.glob(os.path.join(entry, pattern)))


def _preload_nvrtc():
    """Loads libnvrtc globally from a known place, so that libgraphattn's dependency on its
    soname resolves to it. Returns the path loaded, or None."""
    for path in _nvrtc_candidates():
        if os.path.exists(path):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return path
            except OSError:
                continue
    return None


def library_path():
    """The libgraphattn.so this package loads (see the module docstring for the order)."""
    env = os.environ.get("GRAPHATTN_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise ImportError("graphattn: GRAPHATTN_LIBRARY=%s is not a file; set it to the path "
                              "of libgraphattn.so or unset it to use the package's copy" % env)
        return os.path.abspath(env)
    bundled = os.path.join(PACKAGE_DIR, LIBRARY_FILE)
    if os.path.isfile(bundled):
        return bundled
    raise ImportError(
        "graphattn: libgraphattn.so not found: set GRAPHATTN_LIBRARY to its path (e.g. "
        "build/libgraphattn.so) or install the package with pip, which builds it (or takes it "
        "from GRAPHATTN_BUILD_DIR); looked in %s" % PACKAGE_DIR)


nvrtc_preloaded = None  # the libnvrtc path loaded by hand, when the loader found none


def _load(path):
    global nvrtc_preloaded
    try:
        return ctypes.CDLL(path)
    except OSError as first:
        if "nvrtc" in str(first):
            nvrtc_preloaded = _preload_nvrtc()
        if nvrtc_preloaded is None:
            raise ImportError("graphattn: cannot load %s: %s" % (path, first)) from first
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            raise ImportError("graphattn: cannot load %s: %s" % (path, e)) from e


def prototypes():
    """Every C ABI function: name -> (restype, argtypes). python/tests/test_faces.py checks it
    against graphattn.h's prototypes, so a function added or changed there fails until it is
    declared here alike."""
    i, vp, sz = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    P = ctypes.POINTER
    return {
        "graphattn_abi_version": (i, []),
        "graphattn_version": (ctypes.c_char_p, []),
        "graphattn_last_error": (ctypes.c_char_p, []),
        "graphattn_status_string": (ctypes.c_char_p, [i]),
        # the names of the enums' values (_names reads its tables from them)
        "graphattn_dtype_name": (ctypes.c_char_p, [i]),
        "graphattn_kv_dtype_name": (ctypes.c_char_p, [i]),
        "graphattn_kv_layout_name": (ctypes.c_char_p, [i]),
        "graphattn_attn_type_name": (ctypes.c_char_p, [i]),
        "graphattn_mixed_branches_name": (ctypes.c_char_p, [i]),
        "graphattn_set_log_handler": (None, [vp, vp]),
        "graphattn_log_level": (i, []),
        "graphattn_gpu_available": (i, [c_int_p]),
        "graphattn_ensure_context": (i, [i]),
        "graphattn_device_count": (i, [c_int_p]),
        "graphattn_use_device": (i, [i]),
        "graphattn_current_device_arch": (i, [c_int_p]),
        "graphattn_layer_config_init": (None, [P(LayerConfig)]),
        "graphattn_layer_config_check": (i, [P(LayerConfig)]),
        "graphattn_blocksparse_head_sliding_step": (i, [i, i, i, i, i, c_int_p]),
        "graphattn_cache_options_init": (None, [P(CacheOptions)]),
        "graphattn_cache_create": (i, [P(CacheOptions), P(vp)]),
        "graphattn_cache_default": (i, [P(vp)]),
        "graphattn_cache_destroy": (None, [vp]),
        "graphattn_cache_stats": (i, [vp, P(CacheStats)]),
        "graphattn_cache_dir": (i, [vp, ctypes.c_char_p, sz, c_size_t_p]),
        "graphattn_cache_precompile": (i, [vp, P(ctypes.c_char_p), sz, ctypes.c_uint,
                                           P(PrecompileResult)]),
        "graphattn_cache_list": (i, [vp, P(CacheEntry), sz, c_size_t_p]),
        "graphattn_backend_create": (i, [P(LayerConfig), P(vp)]),
        "graphattn_backend_destroy": (None, [vp]),
        "graphattn_backend_config": (i, [vp, P(LayerConfig)]),
        "graphattn_backend_spec": (i, [vp, i, ctypes.c_char_p, sz, c_size_t_p, c_int_p]),
        "graphattn_backend_prepare": (i, [vp, vp]),
        "graphattn_backend_workspace_bytes": (i, [vp, c_size_t_p]),
        "graphattn_backend_set_mixed_branches": (i, [vp, ctypes.c_char_p]),
        "graphattn_backend_mixed_branches": (i, [vp, ctypes.c_char_p, sz, c_size_t_p]),
        "graphattn_backend_take_bounds_violation": (i, [vp, P(BoundsViolation)]),
        "graphattn_metadata_init": (None, [P(Metadata)]),
        "graphattn_backend_forward": (i, [vp, DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p,
                                          DLTensor_p, P(Metadata), vp, sz, vp]),
        "graphattn_backend_forward_lse": (i, [vp, DLTensor_p, DLTensor_p, DLTensor_p,
                                              DLTensor_p, DLTensor_p, P(Metadata), vp, sz, vp,
                                              DLTensor_p]),
        "graphattn_write_kv_cache": (i, [DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p, i,
                                         ctypes.c_float, ctypes.c_float, vp, vp]),
        # attention types: dense (no KV cache) attention
        "graphattn_encoder_attention": (i, [DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p,
                                            DLTensor_p, i, ctypes.c_float, DLTensor_p,
                                            DLTensor_p, vp, vp]),
        "graphattn_multi_head_attention": (i, [DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p,
                                               ctypes.c_float, vp, vp]),
        # fp8 scales in device memory
        "graphattn_calc_kv_scales": (i, [DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p,
                                         ctypes.c_float, ctypes.c_float, vp, vp]),
        "graphattn_write_to_paged_cache": (i, [DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p,
                                               DLTensor_p, i, ctypes.c_float, ctypes.c_float, vp,
                                               vp]),
        "graphattn_reshape_and_cache": (i, [DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p,
                                            DLTensor_p, i, ctypes.c_float, ctypes.c_float, i, vp,
                                            vp]),
        "graphattn_forward_prefix": (i, [DLTensor_p, DLTensor_p, DLTensor_p, i, DLTensor_p,
                                         DLTensor_p, DLTensor_p, DLTensor_p, DLTensor_p, i,
                                         DLTensor_p, i, ctypes.c_float, ctypes.c_float,
                                         DLTensor_p, DLTensor_p, ctypes.c_float, ctypes.c_float,
                                         DLTensor_p, i, DLTensor_p, vp, vp]),
        # vLLM's paged_attention_v1 / v2 over the legacy caches
        "graphattn_paged_attention_v1": (i, [DLTensor_p] * 4 + _PAGED_ATTENTION_REST),
        "graphattn_paged_attention_v2": (i, [DLTensor_p] * 7 + _PAGED_ATTENTION_REST),
        "graphattn_use_paged_attention_v1": (i, [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                                 c_int_p]),
        # block copies
        "graphattn_swap_blocks": (i, [DLTensor_p, DLTensor_p, P(ctypes.c_int64), sz, vp]),
        "graphattn_copy_blocks": (i, [P(ctypes.c_void_p), sz, P(ctypes.c_int64), sz, vp]),
        # merge_attn_states and the device-mapped copy_blocks (capi/cascade_ops.cpp)
        "graphattn_merge_attn_states": (i, [DLTensor_p] * 6 + [vp, vp]),
        "graphattn_copy_blocks_device": (i, [P(vp), sz, DLTensor_p, vp, vp]),
        "graphattn_cudagraph_support": (i, []),
        "graphattn_can_run_in_cudagraph": (i, [P(ctypes.c_int32), i, c_int_p]),
        "graphattn_cudagraph_support_for": (i, [i, c_int_p]),
        "graphattn_can_run_uniform_decode": (i, [P(ctypes.c_int32), i, i, c_int_p]),
        "graphattn_split_decodes_and_prefills": (i, [P(ctypes.c_int32), i, i,
                                                     P(DecodePrefillSplit)]),
        "graphattn_use_cascade_attention": (i, [i, P(ctypes.c_int32), i, i, i, i, i, i,
                                                c_int_p]),
        "graphattn_default_capture_sizes": (i, [i, c_int_p, sz, c_size_t_p]),
        "graphattn_uniform_decode_capture_sizes": (i, [i, i, c_int_p, sz, c_size_t_p]),
        "graphattn_padded_capture_size": (i, [c_int_p, sz, i, c_int_p]),
    }


def _declare(lib, path):
    missing = []
    for name, (restype, argtypes) in prototypes().items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError("graphattn: %s lacks the C ABI functions %s (a library built without "
                          "capi/, or an older one?)" % (path, ", ".join(missing)))


path = library_path()
lib = _load(path)
_declare(lib, path)


_abi = lib.graphattn_abi_version()
if _abi != ABI_VERSION:
    raise ImportError("graphattn: %s has C ABI version %d; this package speaks version %d "
                      "(rebuild the library and the package from one source tree)"
                      % (path, _abi, ABI_VERSION))
version = lib.graphattn_version().decode()


def last_error():
    return lib.graphattn_last_error().decode("utf-8", "replace")


class OwnedHandle:
    """Base of the classes that hold a C handle in ``_handle`` (a ctypes.c_void_p) and, when
    ``_owned``, release it with the C function named by ``_DESTROY`` once collected. At
    interpreter shutdown this module's globals may be gone already: then nothing is called."""
    _DESTROY = None
    _handle = None
    _owned = False

    def __del__(self):
        handle = self._handle
        if handle and self._owned and lib:
            getattr(lib, self._DESTROY)(handle)
            self._handle = None

    @property
    def handle(self):
        """The C handle (a ctypes.c_void_p), e.g. a graphattn_backend_t."""
        return self._handle


def check(status):
    """Raises the GraphattnError for a non-OK status, with this thread's last-error text."""
    if status != errors.OK:
        raise errors.error_for_status(status, last_error())


def read_string(fn, *args, after=()):
    """Calls a C ABI function that writes a NUL-terminated string into (buf, capacity,
    needed), placed after `args` and before `after`, growing the buffer once when it was too
    small."""
    capacity = 256
    for _ in range(2):
        buf = ctypes.create_string_buffer(capacity)
        needed = ctypes.c_size_t(0)
        status = fn(*args, buf, capacity, ctypes.byref(needed), *after)
        if status == errors.ERROR_BUFFER_TOO_SMALL and needed.value > capacity:
            capacity = needed.value
            continue
        check(status)
        return buf.value.decode("utf-8", "replace")
    check(status)
    return buf.value.decode("utf-8", "replace")
