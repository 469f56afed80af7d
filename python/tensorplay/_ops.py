"""Builtin ops as ``tensorplay.<op>`` functions and ``Tensor`` methods, generated from the op table
(``_C._op_table()``: every op's schema) rather than bound one by one. Every call goes through
``_C._call``, which binds the arguments to the schema (PyTorch's parameter names work as
keywords) and runs the op through the Rust dispatcher."""

import builtins

from . import _C

_call = _C._call

# PyTorch names whose op-table entry has another name or a different calling shape.
_RENAMED = {"to_dtype": None, "slice": None, "slice_backward": None, "diagonal_backward": None,
            "max_dim": None, "min_dim": None, "clamp_tensor": None}


def _parse(schema):
    """``(params, first_is_self)``: parameter names in order (keyword-only ones included)."""
    inner = schema[schema.index("(") + 1: schema.rindex(") ->")]
    names, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            names.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        names.append(cur)
    params = []
    for p in names:
        p = p.strip()
        if p == "*":
            continue
        decl = p.split("=")[0].strip()
        params.append((decl.rsplit(" ", 1)[-1], decl.rsplit(" ", 1)[0]))
    return params


def _make(qualname, schema):
    params = _parse(schema)
    list_second = len(params) > 1 and params[1][1].replace("?", "").endswith("[]") and "Tensor" not in params[1][1]

    def op(*args, **kwargs):
        # ``x.view(2, 3)`` / ``x.permute(1, 0)``: varargs for an int-list second parameter.
        if list_second and len(args) > 2 and all(isinstance(a, builtins.int) for a in args[1:]):
            args = (args[0], list(args[1:]))
        return _call(qualname, args, kwargs or None)

    name = qualname.split("::")[1].split(".")[0]
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"``{schema}`` (runs through the dispatcher)."
    return op, (params[0][0] == "self" if params else False)


def _binary(qualname, reverse=False):
    if reverse:
        def f(self, other):
            return _call(qualname, (other, self))
    else:
        def f(self, other):
            return _call(qualname, (self, other))
    return f


def _inplace(name):
    """``x += y``: the in-place op when the table has one, else compute and ``copy_`` back."""
    qual = f"tp::{name}_"

    def f(self, other):
        try:
            _C._schema(qual)
        except LookupError:
            _call("tp::copy_", (self, _call(f"tp::{name}", (self, other))))
            return self
        _call(qual, (self, other))
        return self

    return f


def _max_min(name):
    def f(self, dim=None, keepdim=False):
        if isinstance(dim, _C.Tensor):
            return _call("tp::maximum" if name == "max" else "tp::minimum", (self, dim))
        if dim is None:
            return _call(f"tp::{name}", (self,))
        return _call(f"tp::{name}_dim", (self, dim, keepdim))

    f.__name__ = name
    f.__doc__ = f"``{name}()`` over all elements, ``{name}(dim)`` → (values, indices), ``{name}(other)`` elementwise."
    return f


def _extra(ns):
    """PyTorch spellings that are not op-table names."""
    ns["max"] = _max_min("max")
    ns["min"] = _max_min("min")

    def clamp(self, min=None, max=None):
        if isinstance(min, _C.Tensor) or isinstance(max, _C.Tensor):
            return _call("tp::clamp_tensor", (self, min, max))
        return _call("tp::clamp", (self, min, max))

    ns["clamp"] = clamp

    def narrow(self, dim, start, length):
        return _call("tp::slice", (self, dim, start, start + length, 1))

    ns["narrow"] = narrow

    def matmul(self, other):
        return _call("tp::matmul", (self, other))

    ns["mm"] = ns["bmm"] = matmul
    ns["true_divide"] = ns.get("div")
    ns["subtract"] = ns.get("sub")
    ns["multiply"] = ns.get("mul")


# ``+ - * /`` and their reflected forms are native slots of ``Tensor`` (``python/src/operators.rs``:
# no Python frame per ``x + y``); the other operators are attached here.
_DUNDERS = {
    "__floordiv__": ("tp::floor_divide", False), "__rfloordiv__": ("tp::floor_divide", True),
    "__mod__": ("tp::remainder", False), "__rmod__": ("tp::remainder", True),
    "__pow__": ("tp::pow", False), "__rpow__": ("tp::pow", True),
    "__matmul__": ("tp::matmul", False), "__rmatmul__": ("tp::matmul", True),
    "__and__": ("tp::bitwise_and", False), "__rand__": ("tp::bitwise_and", True),
    "__or__": ("tp::bitwise_or", False), "__ror__": ("tp::bitwise_or", True),
    "__xor__": ("tp::bitwise_xor", False), "__rxor__": ("tp::bitwise_xor", True),
    "__lshift__": ("tp::bitwise_left_shift", False), "__rshift__": ("tp::bitwise_right_shift", False),
    "__eq__": ("tp::eq", False), "__ne__": ("tp::ne", False),
    "__lt__": ("tp::lt", False), "__le__": ("tp::le", False),
    "__gt__": ("tp::gt", False), "__ge__": ("tp::ge", False),
}

_INPLACE = {"__iadd__": "add", "__isub__": "sub", "__imul__": "mul", "__itruediv__": "div",
            "__ipow__": "pow", "__imod__": "remainder", "__iand__": "bitwise_and",
            "__ior__": "bitwise_or", "__ixor__": "bitwise_xor", "__ifloordiv__": "floor_divide"}


def _numpy(self, force=False):
    """A numpy array sharing this CPU tensor's memory (no copy)."""
    import numpy as np

    t = self.detach().cpu() if force else self
    return np.asarray(t)


def _array(self, dtype=None, copy=None):
    import numpy as np

    a = np.asarray(self.detach().cpu() if not self.requires_grad else self.detach())
    return a.astype(dtype) if dtype is not None else a


def _new(kind):
    factory = getattr(_C, kind)

    def f(self, *size, dtype=None, device=None, requires_grad=False):
        return factory(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    f.__name__ = f"new_{kind}"
    f.__doc__ = f"``{kind}(*size)`` with this tensor's dtype and device (fake inside a fake kernel)."
    return f


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """``full(size, fill_value)`` with this tensor's dtype and device."""
    return _C.full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)


def install(ns):
    """Adds every builtin op to the module namespace ``ns`` and to ``Tensor``."""
    methods = {}
    for qualname, schema in _C._op_table():
        if not qualname.startswith("tp::"):
            continue
        fn, is_method = _make(qualname, schema)
        name = fn.__name__
        if name in _RENAMED:
            continue
        ns.setdefault(name, fn)
        if is_method:
            methods[name] = fn
    ops = dict(methods)
    _extra(ops)
    for name, fn in ops.items():
        if fn is None:
            continue
        override = name in ("max", "min", "clamp")
        if override:
            ns[name] = fn
        else:
            ns.setdefault(name, fn)
        if override or not hasattr(_C.Tensor, name):
            setattr(_C.Tensor, name, fn)
    for dunder, (qual, rev) in _DUNDERS.items():
        setattr(_C.Tensor, dunder, _binary(qual, rev))
    for dunder, name in _INPLACE.items():
        setattr(_C.Tensor, dunder, _inplace(name))
    setattr(_C.Tensor, "__neg__", lambda self: _call("tp::neg", (self,)))
    setattr(_C.Tensor, "__abs__", lambda self: _call("tp::abs", (self,)))
    setattr(_C.Tensor, "__invert__", lambda self: _call("tp::bitwise_not", (self,)))
    setattr(_C.Tensor, "__pos__", lambda self: self)
    setattr(_C.Tensor, "__hash__", object.__hash__)
    setattr(_C.Tensor, "__iter__", lambda self: (self[i] for i in range(len(self))))
    setattr(_C.Tensor, "numpy", _numpy)
    for kind in ("empty", "zeros", "ones"):
        setattr(_C.Tensor, f"new_{kind}", _new(kind))
    setattr(_C.Tensor, "new_full", _new_full)
    setattr(_C.Tensor, "__array__", _array)
