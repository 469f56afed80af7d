"""``infer_schema``: a schema string from a Python function's signature and annotations."""

import inspect
import typing
from collections.abc import Sequence

from . import _C

_BASE = {int: "SymInt", float: "float", bool: "bool", str: "str"}


def _type_text(ann, where):
    """The schema type of an annotation (unannotated parameters are tensors)."""
    if ann is inspect.Parameter.empty or ann is _C.Tensor:
        return "Tensor"
    if ann in _BASE:
        return _BASE[ann]
    if ann is _C.dtype:
        return "ScalarType"
    if ann is _C.device:
        return "Device"
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Union or (origin is not None and getattr(origin, "__name__", "") == "UnionType"):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return _type_text(rest[0], where) + "?"
    if origin in (list, tuple, Sequence, typing.Sequence) or (origin is not None and issubclass_safe(origin, Sequence)):
        inner = [a for a in args if a is not Ellipsis]
        if len(inner) == 1 or (origin is tuple and inner and all(a == inner[0] for a in inner)):
            elem = _type_text(inner[0], where)
            if elem.endswith("?") and elem != "Tensor?":
                raise ValueError(f"infer_schema: {where}: unsupported list element type {inner[0]!r}")
            return elem + "[]"
    raise ValueError(
        f"infer_schema: {where} has an unsupported type annotation {ann!r}; supported: Tensor, int, "
        "float, bool, str, dtype, device, Optional[...] of those and Sequence/list of them"
    )


def issubclass_safe(a, b):
    try:
        return issubclass(a, b)
    except TypeError:
        return False


def _default_text(v):
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_default_text(x) for x in v) + "]"
    raise ValueError(f"infer_schema: unsupported default value {v!r}")


def _return_text(ann):
    if ann is inspect.Signature.empty:
        return "Tensor"
    if ann is None or ann is type(None):
        return "()"
    origin = typing.get_origin(ann)
    if origin is tuple:
        return "(" + ", ".join(_type_text(a, "the return") for a in typing.get_args(ann)) + ")"
    return _type_text(ann, "the return")


def infer_schema(prototype_function, /, *, mutates_args, op_name=None, tags=()):
    """The schema of ``prototype_function``: ``"ns::op(Tensor x, SymInt n, Tensor(a!) out) -> Tensor"``
    with ``op_name``, else from ``(`` on. Unannotated parameters are tensors; ``*args`` and
    ``**kwargs`` are skipped; each mutated parameter gets an alias annotation ``(a!)``, ``(b!)``, …
    ``mutates_args="unknown"`` marks every tensor parameter."""
    sig = inspect.signature(prototype_function)
    try:
        hints = typing.get_type_hints(prototype_function)
    except Exception:  # noqa: BLE001 - unresolvable string annotations fall back to the raw ones
        hints = {}
    if isinstance(mutates_args, str) and mutates_args != "unknown":
        raise ValueError(f'mutates_args must be a sequence of names or "unknown", got {mutates_args!r}')
    names = [p.name for p in sig.parameters.values()
             if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if not isinstance(mutates_args, str):
        for m in mutates_args:
            if m not in names:
                raise ValueError(f"infer_schema: mutates_args names `{m}`, which is not a parameter of {prototype_function.__name__}")
    parts, kw_started, letter = [], False, 0
    for p in sig.parameters.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.kind == inspect.Parameter.KEYWORD_ONLY and not kw_started:
            parts.append("*")
            kw_started = True
        ty = _type_text(hints.get(p.name, p.annotation), f"parameter `{p.name}`")
        mutated = mutates_args == "unknown" and ty.startswith("Tensor") or (
            not isinstance(mutates_args, str) and p.name in mutates_args)
        if mutated:
            if not ty.startswith("Tensor"):
                raise ValueError(f"infer_schema: mutates_args names `{p.name}`, which is not a tensor ({ty})")
            ty = f"Tensor({chr(ord('a') + letter)}!)" + ty[len("Tensor"):]
            letter += 1
        text = f"{ty} {p.name}"
        if p.default is not inspect.Parameter.empty:
            text += "=" + _default_text(p.default)
        parts.append(text)
    ret = _return_text(hints.get("return", sig.return_annotation))
    body = f"({', '.join(parts)}) -> {ret}"
    return f"{op_name}{body}" if op_name else body
