"""DLPack: the ctypes layout of DLTensor and the conversion of array objects to it.

The layout is DLPack 0.6's, which later versions keep for the legacy "dltensor" capsule (the
one ``__dlpack__`` returns when no ``max_version`` is asked for). Nothing here copies data:
a converted tensor points at the producer's memory, and the producer's capsule (or tensor) is
kept alive by the returned :class:`DLArg` for as long as the caller holds it.

The general path is ``x.__dlpack__(stream=...)``; PyTorch tensors take a faster path that
fills the DLTensor from ``data_ptr()``, ``shape``, ``stride()`` and ``dtype`` (no capsule, no
stream hand-shake: the work runs on a stream the caller's tensors are already ordered on).
"""

import ctypes

# DLDeviceType
CPU = 1
CUDA = 2
CUDA_HOST = 3
CUDA_MANAGED = 13
DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                9: "vpi", 10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed",
                14: "oneapi", 15: "webgpu", 16: "hexagon"}
CUDA_DEVICES = (CUDA, CUDA_MANAGED)

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


class DLArg:
    """One converted tensor: ``ref`` (a ctypes pointer to its DLTensor) to pass to the C ABI,
    and whatever must stay alive while the library uses it (the capsule, the shape arrays)."""

    __slots__ = ("tensor", "ref", "keep", "source")

    def __init__(self, tensor, keep, source):
        self.tensor = tensor              # the DLTensor (a ctypes structure)
        self.ref = ctypes.pointer(tensor)
        self.keep = keep                  # capsule / arrays / producer object
        self.source = source              # the object it came from

    # Convenience views of the DLTensor for Python-side checks.
    @property
    def ndim(self):
        return self.tensor.ndim

    @property
    def shape(self):
        t = self.tensor
        return tuple(t.shape[i] for i in range(t.ndim))

    @property
    def strides(self):
        """Strides in elements (compact row-major ones when the producer gave NULL)."""
        t = self.tensor
        if t.strides:
            return tuple(t.strides[i] for i in range(t.ndim))
        return compact_strides(self.shape)

    @property
    def dtype(self):
        d = self.tensor.dtype
        return (d.code, d.bits, d.lanes)

    @property
    def dtype_name(self):
        d = self.tensor.dtype
        return dtype_name(d.code, d.bits, d.lanes)

    @property
    def itemsize(self):
        d = self.tensor.dtype
        return d.bits * d.lanes // 8

    @property
    def device(self):
        d = self.tensor.device
        return (d.device_type, d.device_id)

    @property
    def address(self):
        """The first element's address (data + byte_offset)."""
        return (self.tensor.data or 0) + self.tensor.byte_offset

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


def make_dltensor(address, device, dtype, shape, strides, keep=(), source=None):
    """A DLTensor over `address` (device = (type, id), dtype = (code, bits, lanes), shape and
    strides in elements) that owns its shape and stride arrays."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    t = DLTensor()
    t.data = address
    t.device.device_type, t.device.device_id = device
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    return DLArg(t, (shape_arr, strides_arr, keep), source)


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
    if dtype is None or dev.type not in ("cuda", "cpu"):
        return None  # let the general path (and the library) name what is wrong
    device = (CUDA, dev.index or 0) if dev.type == "cuda" else (CPU, 0)
    return make_dltensor(x.data_ptr(), device, dtype, tuple(x.shape), x.stride(), keep=x,
                         source=x)


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
    managed = ctypes.cast(_capsule_pointer(capsule, b"dltensor"),
                          ctypes.POINTER(DLManagedTensor))
    # Not renamed to "used_dltensor": the capsule keeps ownership, and its destructor calls
    # the deleter once the DLArg (which holds it) is gone.
    return DLArg(managed.contents.dl_tensor, (capsule, managed), x)


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
    """The DLTensor* of a DLArg, or NULL for None."""
    return None if arg is None else arg.ref
