"""numpy and DLPack interop, and the ``*_like`` factories."""

from . import _C

_NP_TO_DTYPE = {
    "float32": _C.float32,
    "float64": _C.float64,
    "float16": _C.float16,
    "int32": _C.int32,
    "int64": _C.int64,
    "bool": _C.bool,
}


def from_numpy(a):
    """A CPU tensor over the numpy array ``a``'s memory, without a copy (as PyTorch's): writes
    through either are seen by the other, and the tensor keeps ``a``'s memory alive after ``a``
    itself is gone. Strided arrays are shared too, when their strides are multiples of the
    element size (any numpy view: slices, transposes, negative steps).

    The data is copied instead when it cannot be shared: a read-only array (``a.flags.writeable``
    false: the runtime has no read-only tensors, so a write could not be refused), an array
    whose address or strides are not aligned to its element size, a non-native byte order, or
    an empty array. Supported dtypes: float32/64, float16, int32/64 and bool."""
    import numpy as np

    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray (got {type(a).__name__})")
    dt = _NP_TO_DTYPE.get(a.dtype.name)
    if dt is None:
        raise TypeError(f"can't convert np.ndarray of type {a.dtype}; supported: {sorted(_NP_TO_DTYPE)}")
    shared = _C._from_array_interface(a)
    if shared is not None:
        return shared
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
    return _C._from_bytes(a.tobytes(), list(a.shape), dt)


def _like(factory):
    kind = factory.__name__

    def make(t, *, dtype=None, device=None, requires_grad=False):
        if kind in ("empty", "zeros", "ones") and dtype is None and device is None:
            # The runtime's own: a fake input (inside a fake kernel) gives a fake result.
            out = _C._like(kind, t)
            return out.requires_grad_() if requires_grad else out
        return factory(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)

    make.__name__ = factory.__name__ + "_like"
    make.__doc__ = f"``{factory.__name__}`` with the shape, dtype and device of ``t``."
    return make


zeros_like = _like(_C.zeros)
ones_like = _like(_C.ones)
empty_like = _like(_C.empty)
randn_like = _like(_C.randn)
rand_like = _like(_C.rand)


def full_like(t, fill_value, *, dtype=None, device=None, requires_grad=False):
    """``full`` with the shape, dtype and device of ``t``."""
    return _C.full(list(t.shape), fill_value, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def from_dlpack(ext):
    """A CPU tensor sharing the memory of any object with ``__dlpack__`` (a PyTorch CPU tensor,
    a numpy array, ...), without a copy: writes through either are seen by the other, and the
    producer's memory stays alive until the last view of the tensor goes (then its DLPack
    deleter runs). The capsule is imported by numpy's DLPack importer (``numpy.from_dlpack``,
    numpy >= 1.22), whose array is then shared as by ``from_numpy``; read-only exports are
    copied. Device tensors (CUDA) and dtypes numpy lacks (bfloat16) are refused."""
    import numpy as np

    if isinstance(ext, _C.Tensor):
        return ext
    if hasattr(ext, "__dlpack_device__"):
        kind, _ = ext.__dlpack_device__()
        if int(kind) not in (1, 3):  # kDLCPU, kDLCUDAHost
            raise RuntimeError(f"from_dlpack: only CPU tensors can be imported (DLPack device type {int(kind)})")
    return from_numpy(np.from_dlpack(ext))


def _dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """DLPack export of a CPU tensor without a copy: the capsule is numpy's over a zero-copy
    array view, which keeps this tensor alive until the consumer releases it."""
    import numpy as np

    if stream is not None:
        raise BufferError("__dlpack__: stream must be None for a CPU tensor")
    a = np.asarray(self)
    kwargs = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if copy is not None:
        kwargs["copy"] = copy
    try:
        return a.__dlpack__(**kwargs)
    except TypeError:
        return a.__dlpack__()


def _dlpack_device(self):
    """``(device_type, index)``: DLPack's kDLCPU (1) or kDLCUDA (2)."""
    d = self.device
    return (2, d.index) if d.type == "cuda" else (1, 0)


_C.Tensor.__dlpack__ = _dlpack
_C.Tensor.__dlpack_device__ = _dlpack_device
