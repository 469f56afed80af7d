"""``tensorplay.library``: define custom operators once and use them everywhere — eagerly, under
autograd, autocast, vmap and ``tensorplay.compile``. The signatures are the API page's
(positional-only markers, keyword names, defaults); the work is done by the Rust runtime, where
each Python kernel, fake kernel, backward formula and vmap rule is registered and from where it is
called."""

import contextlib
import warnings

from . import _C
from ._schema import infer_schema

__all__ = [
    "custom_op", "triton_op", "wrap_triton", "CustomOpDef", "define", "impl", "impl_abstract",
    "register_kernel", "register_fake", "register_autograd", "register_autocast", "register_vmap",
    "get_kernel", "get_ctx", "infer_schema", "opcheck", "Library",
]

_DEFAULT_TEST_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _lib(lib):
    if lib is None:
        return None
    if isinstance(lib, Library):
        return lib._lib
    raise TypeError(f"lib must be a tensorplay.library.Library, got {type(lib).__name__}")


def _device_list(device_types):
    """``None``/``[]`` → the device-agnostic slot; a string or an iterable of strings."""
    if device_types is None:
        return []
    if isinstance(device_types, str):
        return [device_types]
    if isinstance(device_types, _C.device):
        return [device_types.type]
    try:
        return [d.type if isinstance(d, _C.device) else d for d in device_types]
    except TypeError:
        raise TypeError(f"device_types must be a string or a sequence of strings, got {type(device_types).__name__}") from None


def _opname(op):
    if isinstance(op, CustomOpDef):
        return op._qualname
    if isinstance(op, str):
        return op.split("(")[0].strip()
    raise TypeError(f"op must be a qualified name string or a CustomOpDef, got {type(op).__name__}")


class FunctionCtx:
    """The ``ctx`` of ``setup_context``/``backward``: ``save_for_backward(*tensors)``,
    ``saved_tensors``, ``needs_input_grad`` (one flag per parameter), and any attributes you set."""

    # Class-level defaults rather than an ``__init__``: one object is made per recorded call.
    saved_tensors = ()
    needs_input_grad = ()

    def save_for_backward(self, *tensors):
        """Keeps tensors for backward (``None`` entries are dropped)."""
        self.saved_tensors = tuple(t for t in tensors if t is not None)


class VmapInfo:
    """What a vmap rule is told: ``batch_size`` and ``randomness``."""

    def __init__(self, batch_size, randomness):
        self.batch_size = batch_size
        self.randomness = randomness


def _decorate(register, func):
    """``register(func)`` now, or a decorator doing it when ``func`` is None."""
    if func is None:
        def inner(f):
            register(f)
            return f

        return inner
    register(func)
    return func


class CustomOpDef(_C._CustomOpCall):
    """A custom operator: call it like a function; register more on it. Calling it is the native
    base class's ``__call__`` (arguments bound to the schema in Rust, no Python frame)."""

    def __init__(self, qualname, init_fn, schema):
        self._qualname = qualname
        self._name = qualname
        self._init_fn = init_fn
        self._schema = schema
        self.__name__ = qualname.split("::")[-1]
        self.__doc__ = getattr(init_fn, "__doc__", None)

    @property
    def name(self):
        """The qualified name ``ns::op``."""
        return self._qualname

    @property
    def schema(self):
        """The schema string the op was defined with (given or inferred)."""
        return self._schema

    def __repr__(self):
        return f"<CustomOpDef({self._schema})>"

    def register_kernel(self, device_types, fn=None, /):
        """Kernel for ``device_types`` (``"cpu"``, ``"cuda"``, a list, or None / a ``Composite…`` key
        for every device)."""
        return _decorate(lambda f: _C._register_kernel(self._qualname, _device_list(device_types), f), fn)

    def register_fake(self, fn=None, /):
        """The fake (shape) kernel: computes output metadata without reading data."""
        return _decorate(lambda f: _C._register_fake(self._qualname, f, None, True), fn)

    def register_autograd(self, backward, /, *, setup_context=None):
        """``backward(ctx, *grads)`` returns one gradient per input; ``setup_context(ctx, inputs,
        output)`` saves what it needs."""
        _C._register_autograd(self._qualname, backward, setup_context, FunctionCtx, None)

    def register_autocast(self, device_type, cast_inputs):
        """Inside ``autocast(device_type)``, floating inputs are cast to ``cast_inputs``."""
        _C._register_autocast(self._qualname, device_type, cast_inputs, None)

    def register_vmap(self, func=None, /):
        """``func(info, in_dims, *args) -> (outputs, out_dims)``: the batching rule under vmap."""
        return _decorate(lambda f: _C._register_vmap(self._qualname, f, VmapInfo, None), func)

    @contextlib.contextmanager
    def set_kernel_enabled(self, device_type, enabled=True):
        """Within the ``with`` block, the ``device_type`` kernel is (dis)abled (a disabled kernel
        falls back to the default one)."""
        state = _C._set_kernel_enabled(self._qualname, device_type, enabled)
        if state.warning:
            warnings.warn(state.warning, stacklevel=3)
        try:
            yield
        finally:
            state.restore()


def _define_custom(name, fn, mutates_args, device_types, schema, triton):
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if schema is None:
        schema = infer_schema(fn, mutates_args=mutates_args)
        mutated = mutates_args
    else:
        mutated = mutates_args
    if isinstance(mutated, str):
        if mutated != "unknown":
            raise ValueError(f'mutates_args must be a sequence of names or "unknown", got {mutated!r}')
        mutated = [p.strip().rsplit(" ", 1)[-1].split("=")[0]
                   for p in schema[schema.index("(") + 1:schema.rindex(") ->")].split(",")
                   if p.strip().startswith("Tensor(")]
    devices = None if device_types is None else _device_list(device_types)
    full = _C._custom_op(name, fn, schema, list(mutated), devices or None, triton, None)
    return CustomOpDef(name.split("(")[0], fn, full)


def custom_op(name, fn=None, /, *, mutates_args=(), device_types=None, schema=None):
    """Defines the operator ``name`` ("ns::op") whose kernel is ``fn``; as a decorator when ``fn``
    is omitted. Returns a callable ``CustomOpDef``."""
    def inner(f):
        return _define_custom(name, f, mutates_args, device_types, schema, triton=False)

    return inner if fn is None else inner(fn)


def triton_op(name, fn=None, /, *, mutates_args=(), device_types=None, schema=None):
    """``custom_op`` for operators whose kernels launch grid kernels through ``wrap_triton``;
    under ``tensorplay.compile`` the whole op is one opaque node."""
    def inner(f):
        return _define_custom(name, f, mutates_args, device_types, schema, triton=True)

    return inner if fn is None else inner(fn)


class TritonKernelWrapper:
    """A grid-indexable launcher marked for use inside a ``triton_op``: ``k[grid](*args)``."""

    def __init__(self, kernel):
        if not hasattr(kernel, "__getitem__"):
            raise TypeError(f"wrap_triton: expected a @triton.jit function or a grid-indexable launcher, got {type(kernel).__name__}")
        self.kernel = kernel

    def __getitem__(self, grid):
        return self.kernel[grid]

    def run(self, *args, grid, **kwargs):
        """``run(*args, grid=...)``: launches over ``grid``."""
        return self.kernel[grid](*args, **kwargs)


def wrap_triton(kernel):
    """Marks a Triton kernel (or any grid-indexable launcher) as launchable inside a
    ``triton_op``; idempotent on wrappers."""
    if isinstance(kernel, TritonKernelWrapper):
        return kernel
    return TritonKernelWrapper(kernel)


def define(qualname, schema=None, *, lib=None, tags=()):
    """Creates the operator if absent (kernels come later through ``impl`` or
    ``Library.impl``); ``qualname`` may be a full ``"ns::op(Tensor x) -> Tensor"`` schema."""
    _C._define(qualname, schema, _lib(lib))


def impl(qualname, types, func=None, /, *, lib=None):
    """Registers ``func`` as the kernel of ``qualname`` for ``types`` (``"CPU"``/``"CUDA"`` or a
    ``Composite…`` key for the device-agnostic slot); a decorator when ``func`` is omitted."""
    t = [types] if isinstance(types, str) else list(types)
    return _decorate(lambda f: _C._impl(_opname(qualname), t, f, _lib(lib)), func)


def impl_abstract(qualname, func=None, /, *, lib=None):
    """Deprecated spelling of ``register_fake``."""
    return register_fake(qualname, func, lib=lib)


def register_kernel(op, device_types=None, func=None, /, *, lib=None):
    """Kernel of ``op`` for ``device_types``: ``"cpu"``/``"cuda"``; None, empty, ``"default"`` or
    any ``Composite…`` key (``"CompositeExplicitAutograd"``, …) is the device-agnostic slot."""
    return _decorate(lambda f: _C._register_kernel(_opname(op), _device_list(device_types), f, _lib(lib)), func)


def register_fake(op, func=None, /, *, lib=None, allow_override=True):
    """The fake (shape) kernel of ``op``."""
    return _decorate(lambda f: _C._register_fake(_opname(op), f, _lib(lib), allow_override), func)


def register_autograd(op, backward, /, *, setup_context=None, lib=None):
    """Autograd formula of ``op``: ``backward(ctx, *grads)``, optional ``setup_context(ctx,
    inputs, output)``."""
    _C._register_autograd(_opname(op), backward, setup_context, FunctionCtx, _lib(lib))


def register_autocast(op, device_type, cast_inputs, /, *, lib=None):
    """Inside ``autocast(device_type)``, ``op``'s floating inputs are cast to ``cast_inputs``."""
    _C._register_autocast(_opname(op), device_type, cast_inputs, _lib(lib))


def register_vmap(op, func=None, /, *, lib=None):
    """Batching rule of ``op``: ``func(info, in_dims, *args) -> (outputs, out_dims)``."""
    return _decorate(lambda f: _C._register_vmap(_opname(op), f, VmapInfo, _lib(lib)), func)


def get_kernel(op, dispatch_key):
    """The kernel ``op`` would run for ``dispatch_key`` (``"cpu"``/``"cuda"``/``"default"`` or a
    composite spelling); ``LookupError`` when nothing usable is registered."""
    return _C._get_kernel(_opname(op), dispatch_key)


class DynamicSize(int):
    """A size known only when the op runs (PyTorch's unbacked ``SymInt``), from
    ``get_ctx().new_dynamic_size()``. TensorPlay's shapes are concrete, so it is an ``int``
    holding the hint fake shapes use (``min`` raised to 2, capped at ``max``), with the size's
    identity and range alongside."""

    def __new__(cls, id, min, max, hint):  # noqa: A002
        self = super().__new__(cls, hint)
        self.id, self.min, self.max = id, min, max
        return self

    def __repr__(self):
        return f"u{self.id}"


class FakeImplCtx:
    """What a fake kernel may ask for beyond its inputs (``get_ctx()``)."""

    def __init__(self, native):
        self._native = native

    @property
    def op(self):
        """The qualified name of the op whose fake kernel is running."""
        return self._native.op

    def new_dynamic_size(self, *, min=0, max=None):  # noqa: A002
        """A fresh data-dependent size in ``[min, max]`` (``max=None``: unbounded), for output
        dims that depend on input data (``nonzero``-like ops). ``ValueError`` when
        ``max < min``."""
        return DynamicSize(*self._native.new_dynamic_size(int(min), None if max is None else int(max)))


def get_ctx():
    """The context of the running fake kernel (call it inside a ``register_fake`` function);
    ``LookupError`` outside one.

    >>> import tensorplay as tp
    >>> @tp.library.custom_op("doc_getctx::nonzero", mutates_args=())
    ... def nonzero(x: tp.Tensor) -> tp.Tensor:
    ...     idx = [i for i, v in enumerate(x.tolist()) if v != 0]
    ...     return tp.tensor(idx, dtype=tp.int64).reshape(len(idx), 1)
    >>> @nonzero.register_fake
    ... def _(x):
    ...     n = tp.library.get_ctx().new_dynamic_size(min=0, max=x.numel())
    ...     return tp.empty(n, 1, dtype=tp.int64)
    >>> nonzero(tp.tensor([0.0, 1.0, 2.0])).shape
    (2, 1)
    """
    return FakeImplCtx(_C._get_ctx())


def opcheck(op, args, kwargs=None, *, test_utils=_DEFAULT_TEST_UTILS, raise_exception=True, atol=None, rtol=None):
    """Runs the selected checks on ``op(*args, **kwargs)``; returns the failures keyed by test
    name (empty: all passed), or raises on the first report when ``raise_exception``."""
    tests = [test_utils] if isinstance(test_utils, str) else list(test_utils)
    return _C._opcheck(_opname(op), tuple(args), kwargs, tests, raise_exception, atol, rtol)


class Library:
    """``Library(namespace, kind)``: ``"DEF"`` defines ops (one per namespace), ``"IMPL"`` adds
    kernels, ``"FRAGMENT"`` extends a namespace. Registrations made through it go away with it."""

    def __init__(self, namespace, kind="DEF"):
        self._lib = _C.Library(namespace, kind)
        self.ns = namespace
        self.kind = kind

    def define(self, schema, *, alias_analysis="", tags=()):
        """Defines an operator from a schema like ``"add(Tensor a, Tensor b) -> Tensor"``."""
        self._lib.define(schema, alias_analysis, [str(t) for t in (tags if isinstance(tags, (list, tuple)) else [tags])])

    def fallback(self, kind):
        """Always raises: the dispatcher has no per-key fallthrough table."""
        self._lib.fallback(kind)

    def impl(self, op_name, fn=None, *, device_type="CompositeExplicitAutograd", dispatch_key="", allow_override=True):
        """Kernel of ``op_name`` for ``device_type`` (or ``dispatch_key`` when non-empty); a
        decorator when ``fn`` is omitted."""
        name = op_name._qualname if isinstance(op_name, CustomOpDef) else op_name
        return _decorate(lambda f: self._lib._impl(name, f, device_type, dispatch_key, allow_override), fn)

    def _destroy(self):
        self._lib._destroy()
