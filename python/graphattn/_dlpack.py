# SPDX-License-Identifier: Apache-2.0
"""DLPack: the ctypes layout of DLTensor and the conversion of array objects to it.

The layout is DLPack 0.6's, which later versions keep for the legacy "dltensor" capsule (the
one ``__dlpack__`` returns when no ``max_version`` is asked for). Nothing here copies data:
a converted tensor points at the producer's memory, and the producer's capsule (or tensor) is
kept alive by the returned :class:`DLArg` for as long as the caller holds it.

The general path is ``x.__dlpack__(stream=...)``; PyTorch tensors take a faster path that
fills the DLTensor from ``data_ptr()``, ``shape``, ``stride()`` and ``dtype`` (no capsule, no
stream hand-shake: by default the work runs on torch's current stream, which the tensors'
producers are already ordered on; a caller who names another stream orders that stream).
"""

import ctypes

# DLDeviceType
CPU = 1
CUDA = 2
CUDA_HOST = 3
CUDA_MANAGED = 13
CUDA_DEVICES = (CUDA, CUDA_MANAGED)
MAX_OWNED_DIMS = 8  # DLTensors built here (graphattn takes up to 6 dimensions)

# DLDataTypeCode
INT = 0
UINT = 1
FLOAT = 2
BFLOAT = 4
BOOL = 6
FLOAT8_E4M3FN = 10
FLOAT8_E5M2 = 12

_DTYPE_NAMES = {(INT, 8): "int8", (INT, 16): "int16", (INT, 32): "int32", (INT, 64): "int64",
                (UINT, 8): "uint8", (UINT, 16): "uint16", (UINT, 32): "uint32",
                (UINT, 64): "uint64", (FLOAT, 16): "float16", (FLOAT, 32): "float32",
                (FLOAT, 64): "float64", (BFLOAT, 16): "bfloat16", (BOOL, 8): "bool",
                (5, 64): "complex64", (5, 128): "complex128",
                (FLOAT8_E4M3FN, 8): "float8_e4m3fn", (FLOAT8_E5M2, 8): "float8_e5m2"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # NULL: compact row-major
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dtype_name(code, bits, lanes=1):
    name = _DTYPE_NAMES.get((code, bits), "dtype(code=%d, bits=%d)" % (code, bits))
    return name if lanes == 1 else "%sx%d" % (name, lanes)


class _OwnedDLTensor(ctypes.Structure):
    """A DLTensor (its fields flattened, shape and strides as addresses) followed by the arrays
    they point to: one object, built by one constructor call (the fast path's cost)."""
    _fields_ = [
        ("data", ctypes.c_void_p), ("device_type", ctypes.c_int), ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
        ("shape_buf", ctypes.c_int64 * MAX_OWNED_DIMS),
        ("strides_buf", ctypes.c_int64 * MAX_OWNED_DIMS),
    ]


_SHAPE_AT = _OwnedDLTensor.shape_buf.offset
_STRIDES_AT = _OwnedDLTensor.strides_buf.offset


class DLArg:
    """One converted tensor: ``ref``, the address of its DLTensor (what the C ABI takes), and
    whatever must stay alive while the library uses it (the capsule, or the owned struct and
    the producer's object)."""

    __slots__ = ("ref", "keep", "source", "shape", "strides", "dtype", "device", "address")

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def dtype_name(self):
        return dtype_name(*self.dtype)

    @property
    def itemsize(self):
        return self.dtype[1] * self.dtype[2] // 8

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_compact(self):
        return self.strides == compact_strides(self.shape) or self.numel() == 0


def compact_strides(shape):
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return tuple(strides)


def make_dltensor(address, device, dtype, shape, strides, keep=None, source=None):
    """A DLArg over `address` (device = (type, id), dtype = (code, bits, lanes), shape and
    strides in elements, at most MAX_OWNED_DIMS of them) that owns its DLTensor."""
    ndim = len(shape)
    t = _OwnedDLTensor(address, device[0], device[1], ndim, dtype[0], dtype[1], dtype[2], None,
                       None, 0, shape, strides)
    base = ctypes.addressof(t)
    t.shape = base + _SHAPE_AT
    t.strides = base + _STRIDES_AT
    arg = DLArg()
    arg.ref, arg.keep, arg.source = base, (t, keep), source
    arg.shape, arg.strides, arg.dtype, arg.device = tuple(shape), tuple(strides), dtype, device
    arg.address = address or 0
    return arg


def reshaped(arg, shape, strides):
    """A new DLArg over the same memory as `arg` with another shape and strides (elements)."""
    return make_dltensor(arg.address, arg.device, arg.dtype, shape, strides, keep=arg,
                         source=arg.source)


# ---- PyTorch fast path -----------------------------------------------------------------------

_TORCH_DTYPES = None  # torch.dtype -> (code, bits, lanes), built on the first torch tensor


def _torch_dtypes(torch):
    table = {}
    for name, code, bits in (("float16", FLOAT, 16), ("bfloat16", BFLOAT, 16),
                             ("float32", FLOAT, 32), ("float64", FLOAT, 64),
                             ("int8", INT, 8), ("int16", INT, 16), ("int32", INT, 32),
                             ("int64", INT, 64), ("uint8", UINT, 8), ("bool", BOOL, 8),
                             ("float8_e4m3fn", FLOAT8_E4M3FN, 8),
                             ("float8_e5m2", FLOAT8_E5M2, 8)):
        dt = getattr(torch, name, None)
        if dt is not None:
            table[dt] = (code, bits, 1)
    return table


def is_torch_tensor(x):
    """True for torch.Tensor (and subclasses) without importing torch."""
    for cls in type(x).__mro__:
        if cls.__name__ == "Tensor" and cls.__module__ == "torch":
            return True
    return False


def _from_torch(x):
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch  # already imported by the caller, who passed a torch tensor

        _TORCH_DTYPES = _torch_dtypes(torch)
    dtype = _TORCH_DTYPES.get(x.dtype)
    dev = x.device
    if dtype is None or x.dim() > MAX_OWNED_DIMS or dev.type not in ("cuda", "cpu"):
        return None  # let the general path (and the library) name what is wrong
    device = (CUDA, dev.index or 0) if dev.type == "cuda" else (CPU, 0)
    return make_dltensor(x.data_ptr(), device, dtype, x.shape, x.stride(), keep=x, source=x)


# ---- General path ----------------------------------------------------------------------------

def dlpack_stream(stream_handle):
    """The ``stream`` argument of ``__dlpack__`` for a CUDA stream handle: the array API's
    1 for the legacy default stream (handle 0), the handle itself otherwise (2 is the
    per-thread default stream in both conventions)."""
    return 1 if not stream_handle else int(stream_handle)


def _from_capsule(x, name, stream_handle):
    dev_fn = getattr(x, "__dlpack_device__", None)
    if dev_fn is None:
        raise TypeError("%s: expected an array with __dlpack__ and __dlpack_device__ (a "
                        "PyTorch, CuPy or JAX array, or a NumPy array for host data), got %s"
                        % (name, _type_name(x)))
    device_type, _ = dev_fn()
    if int(device_type) in CUDA_DEVICES:
        capsule = x.__dlpack__(stream=dlpack_stream(stream_handle))
    else:
        capsule = x.__dlpack__()  # a host array takes no stream
    if not _capsule_valid(capsule, b"dltensor"):
        raise TypeError("%s: __dlpack__ of %s returned no 'dltensor' capsule (a used or "
                        "versioned one?)" % (name, _type_name(x)))
    ref = _capsule_pointer(capsule, b"dltensor")  # DLManagedTensor*, its dl_tensor first
    t = DLTensor.from_address(ref)
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim)) if ndim > 0 else ()
    arg = DLArg()
    # Not renamed to "used_dltensor": the capsule keeps ownership, and its destructor calls
    # the deleter once the DLArg (which holds it) is gone.
    arg.ref, arg.keep, arg.source = ref, capsule, x
    arg.shape = shape
    arg.strides = tuple(t.strides[i] for i in range(ndim)) if t.strides else \
        compact_strides(shape)
    arg.dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    arg.device = (t.device.device_type, t.device.device_id)
    arg.address = (t.data or 0) + t.byte_offset
    return arg


def _type_name(x):
    t = type(x)
    return "%s.%s" % (t.__module__, t.__qualname__) if t.__module__ != "builtins" else \
        t.__qualname__


def to_dl(x, name, stream_handle=0):
    """Converts an array object to a DLArg. `name` is the argument's name for error messages;
    `stream_handle` the CUstream the library will launch on (0: the legacy default stream),
    handed to ``__dlpack__`` so that the producer orders its pending work before it."""
    if isinstance(x, DLArg):
        return x
    if is_torch_tensor(x):
        arg = _from_torch(x)
        if arg is not None:
            return arg
    if not hasattr(x, "__dlpack__"):
        raise TypeError("%s: expected an array with __dlpack__ (a PyTorch, CuPy or JAX array, "
                        "or a NumPy array for host data), got %s" % (name, _type_name(x)))
    return _from_capsule(x, name, stream_handle)


def to_dl_optional(x, name, stream_handle=0):
    return None if x is None else to_dl(x, name, stream_handle)


def ref_of(arg):
    """The DLTensor* (an address) of a DLArg, or NULL for None."""
    return None if arg is None else arg.ref
