"""The shared part of the PyTorch-parity recorder (record.py): dtypes, bit encodings, the
tensor pool, argument wrappers (T, W, S, P) and `case`, which runs an op in PyTorch and records
the outcome into CASES."""

import base64
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F


torch.set_num_threads(1)

DT = {
    "f32": torch.float32,
    "f64": torch.float64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i32": torch.int32,
    "i64": torch.int64,
    "bool": torch.bool,
}
NAME = {v: k for k, v in DT.items()}
# Integer views of each dtype, for bit patterns.
VIEW = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.int32: torch.int32,
    torch.int64: torch.int64,
    torch.bool: torch.uint8,
}
FLOATS = ["f32", "f64", "f16", "bf16"]
INTS = ["i32", "i64"]
ALL = FLOATS + INTS + ["bool"]

INF = math.inf
NAN = math.nan
# Special values for float sweeps: signed zeros, infinities, NaN, huge/tiny, half limits.
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.7, 1e-3, 100.0, -100.0, 1e30, 1e-40, INF, -INF,
           NAN, 65504.0, -2.0, 20.0, -30.0, 1e-8]
INT_SPECIAL = [0, 1, -1, 7, -7, 2**31 - 1, -2**31, 100]


def bits_of(t):
    """The elements of `t` as base64 of their bit patterns, each element little-endian."""
    t = t.detach().contiguous().reshape(-1)
    return base64.b64encode(t.view(VIEW[t.dtype]).numpy().tobytes()).decode()


def enc_tensor(t):
    return {"d": NAME[t.dtype], "s": list(t.shape), "x": bits_of(t)}


def make(dtype, values, shape=None):
    """A tensor of `dtype` from Python values (floats go through f64, as a user would write)."""
    d = DT[dtype]
    if d.is_floating_point:
        t = torch.tensor(values, dtype=torch.float64).to(d)
    elif d == torch.bool:
        t = torch.tensor(values, dtype=torch.bool)
    elif isinstance(values, list):
        t = torch.tensor([int(v) for v in values], dtype=torch.int64).to(d)
    else:
        t = torch.tensor(int(values), dtype=torch.int64).to(d)
    if shape is not None:
        t = t.reshape(shape)
    return t


class Arg:
    """One argument: `js` is its JSON form, `py` what PyTorch gets."""

    def __init__(self, js, py):
        self.js, self.py = js, py


POOL = []
POOL_INDEX = {}


def T(t):
    """A tensor argument; its bits live once in the file's `tensors` pool."""
    e = enc_tensor(t)
    key = (e["d"], tuple(e["s"]), e["x"])
    if key not in POOL_INDEX:
        POOL_INDEX[key] = len(POOL)
        POOL.append(e)
    return Arg({"t": POOL_INDEX[key]}, t)


def scalar_js(v):
    if isinstance(v, bool):
        return {"b": v}
    if isinstance(v, int):
        return {"i": str(v)}
    return {"f": struct.pack(">d", v).hex()}


def W(v):
    """A Rust scalar in a Tensor slot (PyTorch: a Python number operand)."""
    return Arg({"w": scalar_js(v)}, v)


def S(v):
    """A Rust scalar in a Scalar slot (clamp bounds, fill values)."""
    return Arg({"s": scalar_js(v)}, v)


def P(v):
    """A plain argument: int, float, bool, string, int or float list, dtype name, None."""
    if v is None:
        return Arg({"none": True}, None)
    if isinstance(v, bool):
        return Arg({"bool": v}, v)
    if isinstance(v, int):
        return Arg({"int": v}, v)
    if isinstance(v, float):
        return Arg({"float": struct.pack(">d", v).hex()}, v)
    if isinstance(v, str) and v in DT:
        return Arg({"dtype": v}, DT[v])
    if isinstance(v, str):
        return Arg({"str": v}, v)
    if isinstance(v, list) and any(isinstance(x, float) for x in v):
        return Arg({"floats": [struct.pack(">d", x).hex() for x in v]}, v)
    if isinstance(v, list):
        return Arg({"ints": v}, v)
    raise TypeError(v)


CASES = []


def case(op, fn, args, kw=None, tag=None):
    """Runs `fn(*args, **kw)` in PyTorch and records the outcome."""
    kw = kw or {}
    try:
        out = fn(*[a.py for a in args], **{k: a.py for k, a in kw.items()})
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        expect = {"out": [T(o).js["t"] for o in outs]}
    except (RuntimeError, ValueError, TypeError, OverflowError, IndexError) as e:
        expect = {"error": str(e).splitlines()[0][:60]}
    c = {"op": op, "args": [a.js for a in args]}
    if kw:
        c["kw"] = {k: a.js for k, a in kw.items()}
    del tag  # groups the calls above for the reader; not stored (keeps the file small)
    c.update(expect)
    CASES.append(c)
