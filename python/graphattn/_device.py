# SPDX-License-Identifier: Apache-2.0
"""Streams, scratch allocation and host reads, done through the caller's array framework.

graphattn itself never allocates device memory; where the package needs some (a workspace for
graphattn.ops), it asks the framework of the caller's tensors (PyTorch or CuPy), found by the
type's module name so that neither is imported unless the caller uses it.
"""

import sys

from ._dlpack import is_torch_tensor


def _framework(x):
    if is_torch_tensor(x):
        return "torch"
    module = type(x).__module__ or ""
    return module.split(".", 1)[0]


def stream_handle(stream, tensors):
    """The CUstream (an int, 0 = the legacy default stream) to launch on.

    stream: None, an int CUstream handle, a torch.cuda.Stream (``cuda_stream``) or a
    cupy.cuda.Stream (``ptr``). None means the current stream of the tensors' framework:
    torch.cuda.current_stream() for PyTorch tensors, cupy.cuda.get_current_stream() for CuPy
    arrays, else the legacy default stream.
    """
    if stream is None:
        for t in tensors:
            if t is None:
                continue
            fw = _framework(t)
            if fw == "torch":
                if not t.is_cuda:
                    continue  # host memory: the library refuses it, no stream to ask for
                return sys.modules["torch"].cuda.current_stream(t.device).cuda_stream
            if fw == "cupy":
                return sys.modules["cupy"].cuda.get_current_stream().ptr
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int CUstream handle, a torch.cuda.Stream or a "
                        "cupy.cuda.Stream, got %r" % (stream,))
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError("stream %d is not a CUstream handle; allowed: 0 (the legacy default "
                             "stream) or a handle" % stream)
        return stream
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    raise TypeError("stream must be None, an int CUstream handle, a torch.cuda.Stream or a "
                    "cupy.cuda.Stream, got %r" % (stream,))


def is_capturing(tensors):
    """Whether the current PyTorch stream is capturing a CUDA graph (False when no tensor is a
    torch tensor: other frameworks are not asked)."""
    for t in tensors:
        if t is not None and is_torch_tensor(t) and t.is_cuda:
            return bool(sys.modules["torch"].cuda.is_current_stream_capturing())
    return False


def zeros_bytes(like, nbytes):
    """A zero-filled uint8 device array of nbytes on the device of `like`, allocated by like's
    framework (PyTorch or CuPy)."""
    fw = _framework(like)
    if fw == "torch":
        torch = sys.modules["torch"]
        return torch.zeros(max(nbytes, 1), dtype=torch.uint8, device=like.device)
    if fw == "cupy":
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.zeros(max(nbytes, 1), dtype=cupy.uint8)
    raise TypeError("graphattn cannot allocate device memory next to a %s.%s; pass PyTorch or "
                    "CuPy tensors, or allocate the workspace yourself (zero-filled, "
                    "workspace_bytes() bytes)" % (type(like).__module__, type(like).__name__))


def empty_like(x):
    """An uninitialized array shaped like x, from x's framework (PyTorch or CuPy)."""
    fw = _framework(x)
    if fw == "torch":
        return sys.modules["torch"].empty_like(x)
    if fw == "cupy":
        return sys.modules["cupy"].empty_like(x)
    raise TypeError("out=None needs a PyTorch or CuPy query to allocate the output like; got "
                    "%s.%s: pass out=" % (type(x).__module__, type(x).__name__))


def empty_float32(like, shape):
    """An uninitialized float32 array of `shape` on like's device, from like's framework."""
    fw = _framework(like)
    if fw == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=torch.float32, device=like.device)
    if fw == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=cupy.float32)
    raise TypeError("return_softmax_lse needs a PyTorch or CuPy query to allocate the LSE like; "
                    "got %s.%s: pass softmax_lse=" % (type(like).__module__, type(like).__name__))


def host_values(x, name):
    """The values of a number or a (small) array on the host, as a list of floats. A PyTorch
    tensor is refused while its stream captures a graph (reading it would synchronize)."""
    if isinstance(x, bool):
        raise TypeError("%s must be a number or a 1-element tensor, got %r" % (name, x))
    if isinstance(x, (int, float)):
        return [float(x)]
    if is_torch_tensor(x):
        if is_capturing([x]):
            raise ValueError(
                "%s is a device tensor and the current stream is capturing a CUDA graph: an "
                "fp8 KV cache needs the scale on the host, and reading it would synchronize; "
                "pass a float (it becomes a kernel argument of the captured graph)" % name)
        return [float(v) for v in x.detach().reshape(-1).float().cpu().tolist()]
    tolist = getattr(x, "tolist", None)
    if tolist is None:
        raise TypeError("%s must be a number or a tensor, got %s.%s"
                        % (name, type(x).__module__, type(x).__name__))
    values = tolist()
    flat = []

    def walk(v):
        if isinstance(v, (list, tuple)):
            for e in v:
                walk(e)
        else:
            flat.append(float(v))

    walk(values)
    return flat


def host_scalar(x, name):
    """One float from a number or a tensor whose elements are all equal (vLLM passes a
    1-element scale, or one expanded to [num_reqs, num_kv_heads])."""
    values = host_values(x, name)
    if not values:
        raise ValueError("%s is empty; allowed: a number or a tensor of equal values" % name)
    if any(v != values[0] for v in values):
        raise ValueError("%s holds different values (%s, ...); graphattn supports one scale per "
                         "layer" % (name, ", ".join(repr(v) for v in values[:4])))
    return values[0]
