"""Grad mode and autocast as context managers (and decorators), over the Rust thread-local state."""

import functools

from . import _C


class _Mode:
    """A context manager that is also a decorator."""

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args):
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_Mode):
    """Ops inside record no autograd history."""

    def __init__(self):
        self._args = ()
        self._guards = []

    def __enter__(self):
        g = _C._GradMode(False)
        g.__enter__()
        self._guards.append(g)
        return self

    def __exit__(self, *exc):
        self._guards.pop().__exit__(*exc)
        return False


class enable_grad(no_grad):
    """Ops inside record autograd history (inside a ``no_grad`` region too)."""

    def __enter__(self):
        g = _C._GradMode(True)
        g.__enter__()
        self._guards.append(g)
        return self


class set_grad_enabled(_Mode):
    """``set_grad_enabled(mode)``: a context manager setting grad mode to ``mode``."""

    def __init__(self, mode):
        self._args = (mode,)
        self._guard = _C._GradMode(bool(mode))
        self._guard.__enter__()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._guard.__exit__(*exc)
        return False


class autocast(_Mode):
    """``autocast(device_type, dtype=None, enabled=True)``: ops with an autocast policy (and
    custom ops with ``register_autocast``) run in ``dtype`` (default: bfloat16 on the CPU,
    float16 on CUDA)."""

    def __init__(self, device_type, dtype=None, enabled=True):
        if dtype is None:
            dtype = _C.bfloat16 if device_type == "cpu" else _C.float16
        self._args = (device_type, dtype, enabled)
        self._guards = []

    def __enter__(self):
        g = _C._Autocast(*self._args)
        g.__enter__()
        self._guards.append(g)
        return self

    def __exit__(self, *exc):
        self._guards.pop().__exit__(*exc)
        return False
