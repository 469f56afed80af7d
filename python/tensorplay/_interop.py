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
    """A CPU tensor with a copy of the numpy array ``a``'s data (the Rust runtime owns its
    memory, so unlike PyTorch this copies; ``Tensor.numpy()`` is the zero-copy direction)."""
    import numpy as np

    dt = _NP_TO_DTYPE.get(str(a.dtype))
    if dt is None:
        raise TypeError(f"can't convert np.ndarray of type {a.dtype}; supported: {sorted(_NP_TO_DTYPE)}")
    a = np.ascontiguousarray(a)
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
    """A CPU tensor from any object with ``__dlpack__`` (a PyTorch or numpy CPU tensor/array).
    The data is read through numpy's DLPack importer and copied: the Rust runtime owns tensor
    memory and cannot adopt a foreign buffer."""
    import numpy as np

    if isinstance(ext, _C.Tensor):
        return ext
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
