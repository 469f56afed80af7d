#!/usr/bin/env python3
"""Records TensorPlay's PyTorch-parity cases (`tests/data/parity.json`).

Each case names an op, its arguments (tensors with exact bit patterns, Rust-scalar operands,
plain ints/floats/strings) and what PyTorch 2.x on CPU returned: the dtype, shape and bit
pattern of every output, or that it raised. Gradient cases (`gcase`, marked "grad") hold the
gradients PyTorch's autograd gave some tensor arguments for a recorded upstream gradient.
`tests/parity/` replays every case through TensorPlay's public API (and autograd); it needs
neither PyTorch nor Python. Every op of docs/ops.md's tables needs a case here (a gradient case
too when it is differentiable): `tests/parity/coverage.rs` fails otherwise.

Regenerate (PyTorch installed outside the repository):

    PYTHONPATH=/path/to/torch-site python3 scripts/parity/record.py > tests/data/parity.json

The output is deterministic for a given PyTorch version (recorded in the file).
"""

import base64
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

import resize_cases

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


# ---- unary sweep on special values ---------------------------------------------------------------
UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "relu": torch.relu,
    "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "silu": F.silu, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "square": torch.square, "log2": torch.log2, "log10": torch.log10,
    "exp2": torch.exp2, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh, "trunc": torch.trunc, "frac": torch.frac,
    "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
    "logical_not": torch.logical_not, "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "mish": F.mish,
}
for name, fn in UNARY.items():
    for d in FLOATS:
        case(name, fn, [T(make(d, SPECIAL))])
for name in ["neg", "abs", "sign", "relu", "floor", "ceil", "round", "square", "trunc",
             "isnan", "isinf", "isfinite", "logical_not", "exp", "sqrt", "sigmoid", "bitwise_not"]:
    fn = UNARY.get(name, torch.bitwise_not)
    case(name, fn, [T(make("i32", INT_SPECIAL))])
    case(name, fn, [T(make("bool", [True, False]))])

# gelu: both forms, special values and the ranges the issue names (huge negative, x ≈ -2).
GELU_X = SPECIAL + [-1e10, -1e300, -40.0, -38.5, -10.0, -5.0, -2.0, -2.01, -1.99, -1.95, -2.05,
                    -2.2, -1.8, -3.0, -0.1, 0.1, 2.0, 6.0]
for d in FLOATS:
    for approx in ["none", "tanh"]:
        case("gelu", lambda x, approximate: F.gelu(x, approximate=approximate),
             [T(make(d, GELU_X))], {"approximate": P(approx)})
# f64 gelu-tanh sweep around -2 (the 4-ulp class).
case("gelu", lambda x, approximate: F.gelu(x, approximate=approximate),
     [T(make("f64", [-2.5 + i * 0.01 for i in range(101)]))], {"approximate": P("tanh")},
     tag="gelu_tanh_near_-2")
case("gelu", lambda x, approximate: F.gelu(x, approximate=approximate),
     [T(make("f64", [-2.5 + i * 0.01 for i in range(101)]))], {"approximate": P("none")})

# Activations with attributes.
for d in FLOATS:
    x = make(d, SPECIAL)
    case("leaky_relu", F.leaky_relu, [T(x), S(0.2)])
    case("softplus", F.softplus, [T(x), S(2.0), S(10.0)])
    case("elu", F.elu, [T(x)])
    case("hardtanh", F.hardtanh, [T(x), S(-0.5), S(2.0)])
    case("nan_to_num", torch.nan_to_num, [T(x)])
    case("nan_to_num", torch.nan_to_num, [T(x), P(1.5), P(1e4), P(-1e4)])
    case("logit", torch.logit, [T(make(d, [0.0, 0.25, 0.5, 1.0, -0.5, 2.0, NAN, 1e-3]))])

# ---- binary sweep: same dtype, all pairs of a small special-value grid ---------------------------
GRID = [0.0, -0.0, 1.0, -2.5, INF, -INF, NAN, 3.0, 65504.0]
IGRID = [0, 1, -1, 7, -7, 3, 2**31 - 1, -2**31]
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "remainder": torch.remainder,
    "atan2": torch.atan2, "hypot": torch.hypot, "copysign": torch.copysign, "fmod": torch.fmod,
    "fmax": torch.fmax, "fmin": torch.fmin, "floor_divide": torch.floor_divide,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
}
HALF_GRID_OPS = {"add", "sub", "mul", "div", "pow", "maximum", "remainder", "floor_divide"}
for name, fn in BINARY.items():
    for d in ["f32", "f64"] + (["f16", "bf16"] if name in HALF_GRID_OPS else []):
        n = len(GRID)
        a = make(d, [x for x in GRID for _ in GRID], [n, n])
        b = make(d, [y for _ in GRID for y in GRID], [n, n])
        case(name, fn, [T(a), T(b)])
    a = make("i32", [x for x in IGRID for _ in IGRID])
    b = make("i32", [y for _ in IGRID for y in IGRID])
    if name not in ("remainder", "fmod", "floor_divide", "pow"):
        case(name, fn, [T(a), T(b)])
for name in ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
             "bitwise_right_shift"]:
    fn = getattr(torch, name)
    a = make("i32", [x for x in IGRID for _ in IGRID])
    b = make("i32", [y % 40 for _ in IGRID for y in IGRID])
    case(name, fn, [T(a), T(b)])

# ---- type promotion: every dtype pair, dimensioned / 0-d / Rust-scalar operands ------------------
PROMO_OPS = {"add": torch.add, "div": torch.div, "eq": torch.eq, "maximum": torch.maximum}
for name, fn in PROMO_OPS.items():
    for da in ALL:
        for db in ALL:
            a = make(da, [1, 0, 1] if da == "bool" else [3, -2, 5])
            b0 = make(db, True if db == "bool" else 2)  # 0-d
            b1 = make(db, [True] if db == "bool" else [2])  # dimensioned, size 1
            case(name, fn, [T(a), T(b0)], tag="promote_0d")
            if name in ("add", "eq"):
                case(name, fn, [T(b0), T(a)], tag="promote_0d")
            if name == "add":
                case(name, fn, [T(a), T(b1)], tag="promote")
            if da <= db:
                case(name, fn, [T(make(da, True if da == "bool" else 3)), T(b0)],
                     tag="promote_0d_0d")
    if name == "maximum":
        continue  # torch.maximum takes no Python number
    for da in ALL:
        a = make(da, [1, 0, 1] if da == "bool" else [3, -2, 5])
        for s in [2.5, 2, True]:
            case(name, fn, [T(a), W(s)], tag="promote_scalar")
        case(name, fn, [T(make(da, True if da == "bool" else 3)), W(2.5)], tag="promote_scalar")
# where: condition plus every pair of branch kinds.
cond = make("bool", [True, False, True])
for da in ALL:
    for db in ALL:
        a = make(da, [1, 0, 1] if da == "bool" else [3, -2, 5])
        b0 = make(db, True if db == "bool" else 2)
        case("where", torch.where, [T(cond), T(a), T(b0)], tag="promote_0d")
        case("where", torch.where, [T(cond), T(a), T(make(db, [True] if db == "bool" else [2]))],
             tag="promote")
    for s in [2.5, 7, False]:
        x = make(da, [1, 0, 1] if da == "bool" else [3, -2, 5])
        case("where", torch.where, [T(cond), T(x), W(s)], tag="promote_scalar")
for s1, s2 in [(2.5, 1), (1, 2), (True, False), (2.5, 0.5), (True, 3)]:
    case("where_scalar", torch.where, [T(cond), W(s1), W(s2)])
# clamp_tensor with 0-d bounds.
for da in ["f16", "i32", "f32"]:
    x = make(da, [1, -5, 9])
    case("clamp_tensor", torch.clamp, [T(x), T(make("f64", -1.0)), T(make("f64", 4.0))],
         tag="promote_0d")
    case("clamp_tensor", torch.clamp, [T(x), T(make("i64", -1)), T(make("i64", 4))],
         tag="promote_0d")

# ---- half tensor times / divided by a Rust float scalar ------------------------------------------
HALF_X = [1.0, -1.0, 0.0, -0.0, INF, -INF, NAN, 65504.0, 6e-8, 3.0, 1e-4, 0.1, 2.0**-14, 1000.0]
for d in ["f16", "bf16"]:
    x = make(d, HALF_X)
    for s in [70000.0, 2.0**40, 1e-10, 2.0**-40, 0.1, 3.0, 1e300, -0.0, INF, NAN, 1e-310, 65520.0]:
        case("mul", torch.mul, [T(x), W(s)], tag="half_scalar")
        case("div", torch.div, [T(x), W(s)], tag="half_scalar")
        case("add", torch.add, [T(x), W(s)], tag="half_scalar")
        case("sub", torch.sub, [T(x), W(s)], tag="half_scalar")
    for s in [3, 70000, 2**40]:
        case("mul", torch.mul, [T(x), W(s)], tag="half_scalar")
        case("div", torch.div, [T(x), W(s)], tag="half_scalar")
for d in ["f32", "f64"]:
    x = make(d, HALF_X)
    for s in [0.1, 1e300, 1e-310, 1e40]:
        case("mul", torch.mul, [T(x), W(s)], tag="scalar")
        case("div", torch.div, [T(x), W(s)], tag="scalar")
        case("add", torch.add, [T(x), W(s)], tag="scalar")
for d in ["i32", "i64"]:
    x = make(d, [3, -7, 0])
    for s in [2**40, 2.5, -3]:
        case("mul", torch.mul, [T(x), W(s)], tag="scalar")
        case("add", torch.add, [T(x), W(s)], tag="scalar")

# ---- scalar conversions that overflow the tensor dtype -------------------------------------------
for d in ALL:
    for v in [70000.0, -1e39, 1e300, INF, NAN, 2**31, -2**31 - 1, 2**31 - 1, 1.5, 65520.0, True]:
        case("full", lambda shape, fill_value, dtype: torch.full(shape, fill_value, dtype=dtype),
             [P([3]), S(v), P(d)], tag="overflow")
        zeros = make(d, [0, 0] if d != "bool" else [False, False])
        case("fill_", lambda t, v: t.clone().fill_(v), [T(zeros), S(v)], tag="overflow")
for d in ["f16", "bf16", "f32", "i32", "i64"]:
    x = make(d, [1, -5, 9])
    for lo, hi in [(-1e5, 1.0), (-1.0, 1e5), (-1e39, 1e39), (-2**40, 4), (1, 2**40), (-1, 4),
                   (-INF, INF), (NAN, 1.0)]:
        case("clamp", torch.clamp, [T(x), S(lo), S(hi)], tag="overflow")
    for e in [1e5, 70000.0, 2**40, 2, 0.5, -1.0, 1e39, INF, 2**31]:
        case("pow", torch.pow, [T(x), W(e)], tag="overflow")

# ---- matmul: f16 accumulates in f32 in every shape -----------------------------------------------
def mm_vals(n, seed):
    return [((i * 7919 + seed * 104729) % 2001 - 1000) / 97.0 for i in range(n)]


for d in ["f16", "bf16", "f32", "f64"]:
    for sa, sb in [([16], [16]), ([3, 16], [16]), ([16], [16, 3]), ([3, 16], [16, 2]),
                   ([16], [2, 16, 3]), ([2, 3, 16], [16]), ([2, 3, 16], [2, 16, 2])]:
        na, nb = math.prod(sa), math.prod(sb)
        a, b = make(d, mm_vals(na, 1), sa), make(d, mm_vals(nb, 2), sb)
        case("matmul", torch.matmul, [T(a), T(b)], tag="matmul")
    # Large sums that overflow f16 partially: accumulation must be f32.
    a, b = make(d, [300.0] * 8, [8]), make(d, [300.0] * 16, [2, 8, 1])
    case("matmul", torch.matmul, [T(a), T(b)], tag="matmul")

# ---- arange -----------------------------------------------------------------------------------
for start, end, step, d in [(0, 5, 0.5, "i32"), (0, 1, 0.1, "i64"), (0.5, 5, 1, "i64"),
                            (-3, 3, 1.5, "i32"), (0, 1, 0.1, "f64"), (0, 3, 0.1, "f64"),
                            (1, 1.1, 0.001, "f64"), (-1, 1, 0.05, "f64"), (0, 1, 0.1, "f32"),
                            (0, 3, 0.3, "f32"), (0, 100, 7, "i32"), (10, 0, -0.5, "i64"),
                            (0, 1, 1 / 3, "f64"), (0.1, 0.7, 0.1, "f64"), (0, 4, 0.5, "f16"),
                            (-2.5, 2.5, 0.7, "i64")]:
    case("arange", lambda s, e, st, dtype: torch.arange(s, e, st, dtype=dtype),
         [P(float(start)), P(float(end)), P(float(step)), P(d)], tag="arange")

# ---- reductions on special values ----------------------------------------------------------------
for d in FLOATS:
    x = make(d, [1.0, -2.5, 3.0, 0.5, -0.0, 7.0], [2, 3])
    xn = make(d, [1.0, NAN, 3.0, INF, -INF, 2.0], [2, 3])
    xi = make(d, [1.0, INF, 3.0, -0.0, -0.0, 2.0], [2, 3])
    for t in [x, xn, xi]:
        case("sum", torch.sum, [T(t), P([1])])
        case("mean", torch.mean, [T(t), P([0])])
        case("prod", lambda t, d: torch.prod(t, d[0]), [T(t), P([1])])
        case("amax", torch.amax, [T(t), P([1])])
        case("amin", torch.amin, [T(t), P([0])])
        case("max", torch.max, [T(t)])
        case("min", torch.min, [T(t)])
        case("max_dim", torch.max, [T(t), P(1)])
        case("argmax", torch.argmax, [T(t), P(1)])
        case("argmin", torch.argmin, [T(t), P(0)])
        case("var", torch.var, [T(t), P([1])])
        case("std", torch.std, [T(t), P([1])], {"correction": S(0)})
        case("cumsum", torch.cumsum, [T(t), P(1)])
        case("softmax", torch.softmax, [T(t), P(1)])
        case("log_softmax", torch.log_softmax, [T(t), P(1)])
        case("sort", torch.sort, [T(t), P(1)])
for d in ["i32", "bool"]:
    t = make(d, [1, 0, 1, 1, 0, 1] if d == "bool" else [3, -7, 2**31 - 1, 5, 0, 2], [2, 3])
    case("sum", torch.sum, [T(t), P([1])])
    case("prod", lambda t, d: torch.prod(t, d[0]), [T(t), P([1])])
    case("cumsum", torch.cumsum, [T(t), P(1)])
    case("amax", torch.amax, [T(t), P([1])])

# ---- accuracy references (mpmath, 50 digits): where PyTorch's own formula cancels, TensorPlay
# is checked against the exact function instead (within 4 ulp); marked "ref" in the file ---------
def ref_case(op, x_vals, fn, kw):
    import mpmath
    mpmath.mp.dps = 50
    x = make("f64", x_vals)
    def exact(v):
        # Results under the smallest subnormal round to a zero of the input's sign.
        if v < -40:
            return -0.0
        return math.copysign(float(fn(mpmath.mpf(v))) or 0.0, v)

    want = torch.tensor([exact(v) for v in x.tolist()], dtype=torch.float64)
    c = {"op": op, "args": [T(x).js], "kw": {k: a.js for k, a in kw.items()},
         "out": [T(want).js["t"]], "ref": "mpmath"}
    CASES.append(c)


def gelu_tanh_exact(x):
    import mpmath
    u = mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x**3)
    return x / (1 + mpmath.exp(-2 * u))


def gelu_erf_exact(x):
    import mpmath
    return x / 2 * mpmath.erfc(-x / mpmath.sqrt(2))


NEAR_M2 = [-2.6 + i * 0.0137 for i in range(90)]
ref_case("gelu", NEAR_M2 + [-1e300, -1e200, -1.5e154, -1e10, -38.0, -30.0, -10.0, -5.0],
         gelu_tanh_exact, {"approximate": P("tanh")})
ref_case("gelu", NEAR_M2 + [-1e300, -1e200, -1.5e154, -1e10, -38.0, -30.0, -10.0, -5.0],
         gelu_erf_exact, {"approximate": P("none")})

# ---- casts between float dtypes and from ints/bool (defined everywhere; float -> int is not:
# its NaN/inf/out-of-range results are platform-dependent in PyTorch, see docs/ops.md) -----------
for d in FLOATS:
    for to in FLOATS + ["bool"]:
        if to != d:
            case("to_dtype", lambda t, dt: t.to(dt), [T(make(d, SPECIAL)), P(to)])
for d in ["i32", "i64", "bool"]:
    v = [0, 1, -1, 2**24 + 1, 65519, 65520, 2**31 - 1] if d != "bool" else [True, False]
    for to in FLOATS + INTS + ["bool"]:
        if to != d:
            case("to_dtype", lambda t, dt: t.to(dt), [T(make(d, v)), P(to)])
case("to_dtype", lambda t, dt: t.to(dt), [T(make("i64", [2**53 + 1, -2**63, 2**63 - 1, 2**40])),
                                          P("f32")])

# ---- issue 32: behaviours of the newer ops (each one a case) -------------------------------------
def rnd(shape, dtype, seed, scale=1.0):
    """Deterministic normal values (drawn in f64, converted once)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(DT[dtype])


def linear(x, w, b):
    return F.linear(x, w, b)


def rms_norm(x, shape, w, eps):
    return F.rms_norm(x, shape, w, eps)


def nll(x, t, ii, r):
    return F.nll_loss(x, t, ignore_index=ii, reduction=r)


def xent(x, t, ii, ls, r):
    return F.cross_entropy(x, t, ignore_index=ii, label_smoothing=ls, reduction=r)


def layer_norm(x, shape, w, b, eps):
    return F.layer_norm(x, shape, w, b, eps)


def sdpa(q, k, v, attn_mask, is_causal, scale):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                          scale=scale)


# scaled_dot_product_attention: a fully masked row gives 0 (bool and additive masks).
for d in ["f32", "f64"]:
    q, k, v = rnd([1, 3, 4], d, 1), rnd([1, 3, 4], d, 2), rnd([1, 3, 4], d, 3)
    m = make("bool", [True, True, False, False, False, False, True, False, True], [3, 3])
    case("scaled_dot_product_attention", sdpa, [T(q), T(k), T(v), T(m), P(False), P(None)])
    fm = make(d, [0.0, -INF, 0.5, -INF, -INF, -INF, 0.0, 0.0, 0.0], [3, 3])
    case("scaled_dot_product_attention", sdpa, [T(q), T(k), T(v), T(fm), P(False), P(None)])
# logit with eps > 0.5: PyTorch's `x < eps ? eps : (x > 1 - eps ? 1 - eps : x)`.
for d in FLOATS:
    x = make(d, [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0, NAN, -1.0, 2.0, 0.45, 0.55])
    for eps in [0.8, 0.6, 0.25]:
        case("logit", torch.logit, [T(x), P(eps)])
# norm: p = NaN; half sums of squares accumulate in f32.
def vnorm(x, p, dims, keepdim):
    return torch.linalg.vector_norm(x, p, dims if dims else None, keepdim)


for d in FLOATS:
    x = make(d, [3.0, -4.0, 0.0, 12.0, -0.5, 2.0], [2, 3])
    case("norm", vnorm, [T(x), P(NAN), P([]), P(False)])
    case("norm", vnorm, [T(x), P(NAN), P([1]), P(False)])
for d in ["f16", "bf16"]:
    big = make(d, [774.6 + 3 * i for i in range(1000)], [1000])
    for p in [2.0, 3.0, 1.0, INF, 0.5]:
        case("norm", vnorm, [T(big), P(p), P([]), P(False)])
    x = rnd([4, 24], d, 11, 100.0)
    for p in [2.0, 3.0, -1.5]:
        case("norm", vnorm, [T(x), P(p), P([1]), P(True)])
# asinh/acosh of huge f64 values; atanh near -1 and 1 in f64.
HUGE = [1e300, -1e300, 1.7976931348623157e308, -1.7976931348623157e308, 1e200, 1.5e154,
        1e155, 1e17, 3.0, -0.0, 0.0, 1.0, INF, -INF, NAN]
for name in ["asinh", "acosh"]:
    case(name, UNARY[name], [T(make("f64", HUGE))])
    case(name, UNARY[name], [T(make("f32", [3e38, -3e38, 1e30, 2.0, 1e19]))])
NEAR1 = [-1 + 2.0**-k for k in range(1, 53)] + [1 - 2.0**-k for k in range(1, 54)]
NEAR1 += [-0.9999999, -1 + 1e-10, 0.99999999, -0.75, 0.6, 1e-300, -1e-17]
case("atanh", torch.atanh, [T(make("f64", NEAR1))])
case("atanh", torch.atanh, [T(make("f32", NEAR1))])
# logsumexp over an empty dim: -inf.
for d in ["f32", "f64", "f16"]:
    e = make(d, [], [2, 0])
    case("logsumexp", torch.logsumexp, [T(e), P([1]), P(False)])
    case("logsumexp", torch.logsumexp, [T(e), P([0]), P(False)])
    case("logsumexp", torch.logsumexp, [T(make(d, [], [0])), P([0]), P(True)])
# lerp: PyTorch's two forms (weight < 0.5: from the start, else from the end), extreme values,
# signed zeros.
LERP_S = [0.0, -0.0, 1.0, -1.0, 1e308, -1e308, 3.0, 1e-310, 2.5, -7.25, INF, 65504.0]
LERP_E = [-0.0, 0.0, 1e308, 1.0, -1e308, 1e308, 3.0, -1e-310, -2.5, 100.5, INF, -65504.0]
LERP_W = [0.0, 0.25, 0.49, 0.5, 0.75, 1.0, -0.0, -0.3, 1.7, 0.1, 0.9, NAN, -1.0, 2.0, 0.3]
for d in FLOATS:
    n = len(LERP_W)
    s = make(d, [a for a in LERP_S for _ in range(n)], [len(LERP_S), n])
    e = make(d, [b for b in LERP_E for _ in range(n)], [len(LERP_E), n])
    w = make(d, LERP_W * len(LERP_S), [len(LERP_S), n])
    case("lerp", torch.lerp, [T(s), T(e), T(w)])
    a, b = rnd([37], d, 21, 10.0), rnd([37], d, 22, 10.0)
    case("lerp", torch.lerp, [T(a), T(b), T(rnd([37], d, 23))])
    for wv in [0.3, 0.7, 0.5, -0.0, 1.0, 2.5]:
        case("lerp", torch.lerp, [T(a), T(b), W(wv)])
        case("lerp", torch.lerp, [T(s), T(e), W(wv)])
# Errors where PyTorch raises.
iN = make("i64", [1, 2, 3, 4, 5, 6], [2, 3])
tgt = make("i64", [0, 2])
case("nll_loss", nll, [T(iN), T(tgt), P(-100), P("mean")])
case("cross_entropy", xent, [T(iN), T(tgt), P(-100), P(0.0), P("mean")])
case("mse_loss", lambda a, b, r: F.mse_loss(a, b, reduction=r), [T(iN), T(iN), P("mean")])
case("mse_loss", lambda a, b, r: F.mse_loss(a, b, reduction=r),
     [T(make("i32", [1, 2])), T(make("i32", [3, 4])), P("sum")])
for d in ["bool", "f32", "i64"]:
    case("linspace", lambda a, b, n, dtype: torch.linspace(a, b, n, dtype=dtype),
         [P(0.0), P(1.0), P(5), P(d)])
for d in ["bool", "f32", "i32"]:
    t = make(d, [1, 0, 1, 1] if d == "bool" else [3, 1, 4, 1])
    case("topk", lambda x, k, dim, largest: torch.topk(x, k, dim, largest), [T(t), P(2), P(0),
                                                                            P(True)])
zd = make("f32", 3.0)
for idx in [[0, 0], [0], [1]]:
    case("index_select", torch.index_select, [T(zd), P(0), T(make("i64", idx))])
case("index_select", torch.index_select, [T(zd), P(0), T(make("i64", 0))])
case("roll", torch.roll, [T(zd), P([1]), P([0])])
case("roll", torch.roll, [T(zd), P([1]), P([])])
x23 = make("f32", [1, 2, 3, 4, 5, 6], [2, 3])
for m in [[True, False, True], [True, False], [False, True]]:
    case("index", lambda x, m: x[m], [T(x23), T(make("bool", m))])
case("index", lambda x, m: x[m], [T(x23), T(make("bool", [True, False, True, False, True, True],
                                                  [2, 3]))])
# hardtanh with min_val > max_val: PyTorch's functional form raises.
for d in ["f32", "f16"]:
    case("hardtanh", F.hardtanh, [T(make(d, [0.0, 3.0, -3.0, NAN])), S(2.0), S(-1.0)])
    case("hardtanh", F.hardtanh, [T(make(d, [0.0, 3.0, -3.0, NAN])), S(1.0), S(1.0)])
# floor_divide of a half tensor by a Rust float: the scalar stays in f32.
for d in ["f16", "bf16"]:
    x = make(d, [1.0, 3.0, 65504.0, 100.0, -7.0, 0.0, -0.0, INF, NAN, 0.3])
    for sv in [70000.0, 0.1, 1e-10, 3.0, -0.7, 1e300, 2.0**-30]:
        case("floor_divide", torch.floor_divide, [T(x), W(sv)])
# layer_norm of a constant row: +0.0 (with and without weight and bias, negative weight).
for d in FLOATS:
    c = make(d, [0.1] * 4 + [-3.3] * 4 + [1e3] * 4 + [0.0] * 4, [4, 4])
    wneg = make(d, [-1.0, 2.0, -0.5, 1.0])
    for w, b in [(None, None), (wneg, None), (wneg, make(d, [0.0, -0.0, 1.0, 0.0])), (None,
                 make(d, [-0.0] * 4))]:
        case("layer_norm", layer_norm, [T(c), P([4]), T(w) if w is not None else P(None),
                                        T(b) if b is not None else P(None), P(1e-5)])
# f16/bf16 times or divided by a 0-d f32/f64 tensor: PyTorch keeps that operand's value in f32
# when it is the second operand.
for d in ["f16", "bf16"]:
    x = make(d, HALF_X)
    for sd in ["f32", "f64"]:
        for sv in [0.1, 70000.0, 2.0**40, 1e-10, 3.0, 1e300]:
            z = make(sd, sv)
            for name, fn in [("mul", torch.mul), ("div", torch.div), ("add", torch.add)]:
                case(name, fn, [T(x), T(z)])
                case(name, fn, [T(z), T(x)])
        case("floor_divide", torch.floor_divide, [T(x), T(make(sd, 0.1))])
# where with Rust-scalar branches against half and integer tensors.
cond = make("bool", [True, False, True])
for d in ["f16", "bf16", "i32", "f32"]:
    t = make(d, [1, 2, 3])
    for sv in [0.1, 70000.0, 1e39, 3, True, -0.0]:
        case("where", torch.where, [T(cond), T(t), W(sv)])
        case("where", torch.where, [T(cond), W(sv), T(t)])

# ---- issue 32: half precision computed in f32 and rounded once ----------------------------------
for d in ["f16", "bf16", "f32"]:
    for xs, ws in [([5, 48], [7, 48]), ([2, 3, 40], [6, 40]), ([40], [3, 40])]:
        x, w, b = rnd(xs, d, 31, 2.0), rnd(ws, d, 32, 0.5), rnd([ws[0]], d, 33)
        case("linear", linear, [T(x), T(w), T(b)])
        case("linear", linear, [T(x), T(w), P(None)])
    x = rnd([3, 5, 32], d, 41, 3.0)
    x = x + rnd([3, 5, 1], d, 42, 50.0)
    w, b = rnd([32], d, 43), rnd([32], d, 44)
    case("layer_norm", layer_norm, [T(x), P([32]), T(w), T(b), P(1e-5)])
    case("layer_norm", layer_norm, [T(x), P([5, 32]), P(None), P(None), P(1e-5)])
    case("rms_norm", rms_norm, [T(x), P([32]), T(w), P(None)])
    case("rms_norm", rms_norm, [T(x), P([32]), P(None), P(1e-6)])
    q, k, v = rnd([2, 2, 6, 16], d, 51), rnd([2, 2, 7, 16], d, 52), rnd([2, 2, 7, 12], d, 53)
    bm = rnd([6, 7], d, 54).to(torch.float64) > -0.8
    case("scaled_dot_product_attention", sdpa, [T(q), T(k), T(v), P(None), P(False), P(None)])
    case("scaled_dot_product_attention", sdpa, [T(q), T(k), T(v), T(bm), P(False), P(None)])
    case("scaled_dot_product_attention", sdpa, [T(q), T(k), T(v), T(rnd([6, 7], d, 55)),
                                                P(False), P(0.3)])
    qs = rnd([2, 6, 16], d, 56, 3.0)
    case("scaled_dot_product_attention", sdpa, [T(qs), T(qs), T(qs), P(None), P(True), P(None)])
    x = rnd([4, 50], d, 61, 4.0)
    case("logsumexp", torch.logsumexp, [T(x), P([1]), P(False)])
    case("logsumexp", torch.logsumexp, [T(x), P([0, 1]), P(True)])
    case("cumsum", torch.cumsum, [T(rnd([3, 200], d, 62, 5.0)), P(1)])
    logits, t = rnd([6, 10], d, 63, 3.0), make("i64", [1, 0, 9, -100, 4, 4])
    case("cross_entropy", xent, [T(logits), T(t), P(-100), P(0.0), P("mean")])
    case("cross_entropy", xent, [T(logits), T(t), P(-100), P(0.1), P("none")])
    case("cross_entropy", xent, [T(logits), T(t), P(-100), P(0.0), P("sum")])
    case("nll_loss", nll, [T(logits), T(t), P(-100), P("mean")])
    case("nll_loss", nll, [T(logits), T(t), P(-100), P("none")])
    case("mse_loss", lambda a, b, r: F.mse_loss(a, b, reduction=r),
         [T(logits), T(rnd([6, 10], d, 64, 3.0)), P("mean")])

# ---- issue 30: the ops a CNN needs ---------------------------------------------------------------
def conv2d(x, w, b, stride, padding, dilation, groups):
    return F.conv2d(x, w, b, stride, padding, dilation, groups)


def conv1d(x, w, b, stride, padding, dilation, groups):
    return F.conv1d(x, w, b, stride, padding, dilation, groups)


def conv2d_grad(x, w, b, stride, padding, dilation, groups, go):
    """The gradients of input, weight and bias for the output gradient `go`."""
    x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
    y = F.conv2d(x, w, b, stride, padding, dilation, groups)
    return torch.autograd.grad([y], [x, w, b], [go])


CONV2D = [  # input, weight, bias?, stride, padding, dilation, groups
    ([2, 3, 5, 6], [4, 3, 3, 3], True, [1, 1], [1, 1], [1, 1], 1),
    ([1, 4, 9, 8], [6, 2, 3, 2], False, [2, 1], [0, 1], [1, 2], 2),
    ([2, 3, 6, 7], [4, 3, 4, 2], True, [1, 1], "same", [1, 2], 1),
    ([6, 5, 4], [6, 1, 3, 3], True, [1, 1], "valid", [1, 1], 6),
]
for d in FLOATS:
    for i, (xs, ws, bias, st, pad, dil, g) in enumerate(CONV2D):
        x, w = rnd(xs, d, 700 + i), rnd(ws, d, 710 + i, 0.5)
        b = T(rnd([ws[0]], d, 720 + i)) if bias else P(None)
        case("conv2d", conv2d, [T(x), T(w), b, P(st), P(pad), P(dil), P(g)])
    x, w, b = rnd([2, 4, 11], d, 730), rnd([6, 2, 3], d, 731), rnd([6], d, 732)
    case("conv1d", conv1d, [T(x), T(w), T(b), P(2), P(1), P(2), P(2)])
    case("conv1d", conv1d, [T(x), T(rnd([4, 4, 4], d, 733)), P(None), P(1), P("same"), P(1), P(1)])
for d in ["f32", "f64"]:
    for i, (xs, ws, _, st, pad, dil, g) in enumerate(CONV2D[1:3]):
        x, w, b = rnd(xs, d, 740 + i), rnd(ws, d, 750 + i, 0.5), rnd([ws[0]], d, 760 + i)
        go = rnd(list(conv2d(x, w, b, st, pad, dil, g).shape), d, 770 + i)
        case("conv2d_grad", conv2d_grad, [T(x), T(w), T(b), P(st), P(pad), P(dil), P(g), T(go)])
# Errors: channels not divisible by groups, a kernel larger than the padded input, "same" with
# a stride.
x, w = rnd([1, 4, 5, 5], "f32", 780), rnd([6, 2, 3, 3], "f32", 781)
case("conv2d", conv2d, [T(x), T(w), P(None), P([1, 1]), P([0, 0]), P([1, 1]), P(3)])
case("conv2d", conv2d, [T(x), T(rnd([2, 4, 7, 7], "f32", 782)), P(None), P([1, 1]), P([0, 0]),
                        P([1, 1]), P(1)])
case("conv2d", conv2d, [T(x), T(w), P(None), P([2, 2]), P("same"), P([1, 1]), P(2)])

# Pooling: windows with stride, padding, dilation, ceil_mode; NaN in a window.
def max_pool2d(x, k, s, p, d, ceil):
    return F.max_pool2d(x, k, s, p, d, ceil, return_indices=True)


def avg_pool2d(x, k, s, p, ceil, include_pad, div):
    return F.avg_pool2d(x, k, s, p, ceil, include_pad, div)


POOLS = [([2, 2], [], [0, 0], [1, 1], False), ([3, 2], [2, 1], [1, 1], [1, 1], True),
         ([3, 3], [2, 3], [1, 0], [2, 1], True)]
for d in FLOATS:
    x = rnd([2, 3, 7, 8], d, 800)
    for i, (k, st, pad, dil, ceil) in enumerate(POOLS):
        case("max_pool2d", max_pool2d, [T(x), P(k), P(st), P(pad), P(dil), P(ceil)])
        for inc, div in [(True, None), (False, None), (True, 5)]:
            case("avg_pool2d", avg_pool2d, [T(x), P(k), P(st), P(pad), P(ceil), P(inc), P(div)])
    for out in [[1, 1], [3, 5], [4, 3]]:
        case("adaptive_avg_pool2d", F.adaptive_avg_pool2d, [T(x), P(out)])
    nan = make(d, [1.0, NAN, 3.0, 0.0, -INF, -INF, 2.0, 5.0], [1, 2, 4])
    case("max_pool2d", max_pool2d, [T(nan), P([2, 2]), P([]), P([0, 0]), P([1, 1]), P(False)])
case("max_pool2d", max_pool2d, [T(rnd([1, 2, 5, 5], "f32", 801)), P([2, 2]), P([]), P([2, 2]),
                                P([1, 1]), P(False)])


# batch_norm (training: the output and the updated running statistics; eval), group_norm.
def batch_norm(x, rm, rv, w, b, training, momentum, eps):
    rm, rv = (t.clone() if t is not None else None for t in (rm, rv))
    y = F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
    return (y, rm, rv) if rm is not None else y


for d in FLOATS:
    sd = "f32" if d in ("f16", "bf16") else d  # half inputs: f32 statistics and parameters
    x = rnd([4, 3, 5, 2], d, 810, 2.0) + rnd([1, 3, 1, 1], d, 811, 3.0)
    rm, rv = rnd([3], sd, 812), rnd([3], sd, 813).abs() + 0.5
    w, b = rnd([3], sd, 814), rnd([3], sd, 815)
    case("batch_norm", batch_norm, [T(x), T(rm), T(rv), T(w), T(b), P(True), P(0.1), P(1e-5)])
    case("batch_norm", batch_norm, [T(x), T(rm), T(rv), T(w), T(b), P(False), P(0.1), P(1e-5)])
    case("batch_norm", batch_norm, [T(x), P(None), P(None), P(None), P(None), P(True), P(0.1),
                                    P(1e-5)])
    x3 = rnd([2, 6, 5], d, 816, 2.0)
    case("group_norm", F.group_norm, [T(x3), P(3), T(rnd([6], d, 817)), T(rnd([6], d, 818)),
                                      P(1e-5)])
    case("group_norm", F.group_norm, [T(x), P(1), P(None), P(None), P(1e-5)])


# ---- issue 32 item 3: a forward case for every op docs/ops.md lists ------------------------------
# (tests/parity.rs fails when an op of the tables has none; sample a few shapes and dtypes.)
for d in FLOATS:
    case("sinc", torch.sinc, [T(make(d, SPECIAL + [0.25, -1.5, 2.0, 1e-20]))])
for d in ["f32", "f16", "i32"]:
    t = make(d, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], [3, 4])
    case("min_dim", torch.min, [T(t), P(1)])
    case("min_dim", lambda x, dim, k: torch.min(x, dim, k), [T(t), P(0), P(True)])
case("min_dim", torch.min, [T(make("f64", [1.0, NAN, -INF, 2.0, -0.0, 0.0], [2, 3])), P(1)])


def cat(ts, dim):
    return torch.cat(ts, dim)


def stack(ts, dim):
    return torch.stack(ts, dim)


def TL(ts):
    """A tensor-list argument."""
    return Arg({"ts": [T(t).js["t"] for t in ts]}, ts)


for d in ["f32", "bf16", "i64", "bool"]:
    a = make(d, [1, 0, 1, 1, 0, 1] if d == "bool" else [1, 2, 3, 4, 5, 6], [2, 3])
    b = make(d, [0, 1, 1] if d == "bool" else [7, 8, 9], [1, 3])
    case("cat", cat, [TL([a, b]), P(0)])
    case("cat", cat, [TL([a, a]), P(-1)])
    case("stack", stack, [TL([a, a]), P(1)])
    case("cat", cat, [TL([a, b]), P(1)])  # shape error
case("cat", cat, [TL([make("f32", [1, 2]), make("i32", [3]), make("f16", [4.5])]), P(0)])
case("stack", stack, [TL([make("f16", [1, 2]), make("f64", [3, 4])]), P(0)])
case("cat", cat, [TL([make("f32", [1, 2, 3, 4], [2, 2]), make("f32", [], [0])]), P(0)])

for d in ["f32", "f64", "f16", "i32", "bool"]:
    vals = [1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0] if d == "bool" else [
        1.5, -2.0, NAN, 4.0, -0.0, INF, 7.0, 8.0, 9.0, -1.0, 0.5, 3.0]
    if d in INTS:
        vals = [int(v) if v == v and abs(v) != INF else 5 for v in vals]
    x = make(d, vals, [3, 4])
    idx = make("i64", [2, 0, 1, 2, 0, 0, 2, 1], [2, 4])
    src = make(d, [1, 0, 1, 0, 1, 1, 0, 0] if d == "bool" else [10, 20, 30, 40, 50, 60, 70, 80],
               [2, 4])
    case("gather", torch.gather, [T(x), P(0), T(idx)])
    case("gather", torch.gather, [T(x), P(1), T(make("i64", [3, 0, 0, 1, 2, 3], [3, 2]))])
    case("scatter", torch.scatter, [T(x), P(0), T(idx), T(src)])
    case("flip", torch.flip, [T(x), P([0, 1])])
    case("flip", torch.flip, [T(x), P([-1])])
    case("nonzero", torch.nonzero, [T(x)])
    if d != "bool":
        case("scatter_add", torch.scatter_add, [T(x), P(0), T(idx), T(src)])
    for red in ["sum", "prod", "mean", "amax", "amin"]:
        if d == "bool" and red == "mean":
            continue
        for inc in [True, False]:
            case("scatter_reduce",
                 lambda x, dim, i, s, r, include_self: torch.scatter_reduce(
                     x, dim, i, s, r, include_self=include_self),
                 [T(x), P(0), T(idx), T(src), P(red)], {"include_self": P(inc)})
x = make("f32", [1, 2, 3, 4], [2, 2])
case("gather", torch.gather, [T(x), P(0), T(make("i64", [2, 0], [1, 2]))])  # out of range
case("gather", torch.gather, [T(x), P(0), T(make("i32", [1, 0], [1, 2]))])  # index dtype
case("scatter_reduce", lambda x, dim, i, s, r, include_self: torch.scatter_reduce(
    x, dim, i, s, r, include_self=include_self),
    [T(x), P(0), T(make("i64", [1, 0], [1, 2])), T(x), P("max")], {"include_self": P(True)})
case("flip", torch.flip, [T(x), P([0, 0])])
case("nonzero", torch.nonzero, [T(make("f32", 0.0))])
case("nonzero", torch.nonzero, [T(make("f32", [], [0, 3]))])

for d in FLOATS + ["i32", "bool"]:
    vals = [1, 0, 1, 1, 1, 0] if d == "bool" else [1.5, -2.0, 3.0, 0.0, 4.0, 0.5]
    if d in INTS:
        vals = [3, -2, 7, 0, 2**20, 5]
    x = make(d, vals, [2, 3])
    case("cumprod", torch.cumprod, [T(x), P(1)])
    case("cumprod", torch.cumprod, [T(x), P(0)])
    if d in FLOATS:
        case("cumsum", torch.cumsum, [T(x), P(0)])
for d in ["f32", "f64"]:
    x = make(d, [2.0, INF, 0.0, NAN, -3.0, 1e30, 1e30, 1e-30, -0.0, 5.0], [2, 5])
    case("cumprod", torch.cumprod, [T(x), P(1)])
case("cumprod", lambda x, dim, dtype: torch.cumprod(x, dim, dtype=dtype),
     [T(make("i32", [3, 4, 5])), P(0)], {"dtype": P("f64")})

for d in ["f32", "i64", "bool"]:
    x = make(d, [1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0] if d == "bool" else list(range(24)),
             [3, 4] if d == "bool" else [2, 3, 4])
    if d == "bool":
        case("diagonal", torch.diagonal, [T(x), P(1), P(0), P(1)])
        continue
    for off, d1, d2 in [(0, 0, 1), (1, 1, 2), (-1, 2, 1), (5, 0, 2), (0, 0, 0)]:
        case("diagonal", torch.diagonal, [T(x), P(off), P(d1), P(d2)])


def mpwi(x, k, s, p, d, ceil):
    return torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, ceil)


for d in ["f32", "bf16"]:
    case("max_pool2d_with_indices", mpwi, [T(rnd([1, 2, 5, 6], d, 990)), P([2, 3]), P([2, 2]),
                                           P([1, 1]), P([1, 1]), P(True)])

# Composite methods.
for d in ["f32", "f16", "i32", "bool"]:
    vals = [1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0] if d == "bool" else [
        1, -2, 3, 0, 5, 6, 7, 8, 9, -10, 11, 12]
    x = make(d, vals, [3, 4])
    ii = make("i64", [2, 0, 2])
    case("index_select", torch.index_select, [T(x), P(0), T(ii)])
    case("index_select", torch.index_select, [T(x), P(1), T(make("i32", [3, 1]))])
    m = make("bool", [True, False, False, True], [4])
    fill = True if d == "bool" else -0.5
    case("masked_fill", lambda x, m, v: x.masked_fill(m, v), [T(x), T(m), S(fill)])
    case("masked_fill", lambda x, m, v: x.masked_fill(m, v), [T(x), T(make("bool", [True] * 4,
                                                                            [1, 4])), S(NAN)])
    for k in [0, 1, -1, 5]:
        case("tril", torch.tril, [T(x), P(k)])
        case("triu", torch.triu, [T(x), P(k)])
    case("unflatten", torch.unflatten, [T(x), P(1), P([2, -1])])
    case("split", lambda x, s, dim: torch.split(x, s, dim), [T(x), P(3), P(1)])
    case("split_with_sizes", lambda x, s, dim: torch.split(x, s, dim), [T(x), P([1, 2]), P(0)])
    case("split_with_sizes", lambda x, s, dim: torch.split(x, s, dim), [T(x), P([1, 1]), P(0)])
    case("chunk", torch.chunk, [T(x), P(3), P(1)])
    case("chunk", torch.chunk, [T(x), P(2), P(0)])
    case("movedim", torch.movedim, [T(x.reshape(1, 3, 4)), P([0, 2]), P([2, 0])])
    case("repeat", lambda x, r: x.repeat(r), [T(x), P([2, 1, 2])])
    case("tile", torch.tile, [T(x), P([2])])
    case("any", lambda x, dims, k: torch.any(x, dims, keepdim=k), [T(x), P([1]), P(False)])
    case("all", lambda x, dims, k: torch.all(x, dims, keepdim=k), [T(x), P([0]), P(True)])
    case("count_nonzero", torch.count_nonzero, [T(x), P([1])])
    case("masked_select", torch.masked_select, [T(x), T(m)])
    case("argwhere", torch.argwhere, [T(x)])
    case("take", torch.take, [T(x), T(make("i64", [11, 0, 5, 5], [2, 2]))])
    case("sum_dtype", lambda x, dims, k, dt: torch.sum(x, dims, k, dtype=dt),
         [T(x), P([1]), P(False), P("f64")])
    case("sum_dtype", lambda x, dims, k, dt: torch.sum(x, dims, k, dtype=dt),
         [T(x), P([0]), P(True), P("i32")])
    if d != "bool" and d not in INTS:
        case("mean_dtype", lambda x, dims, k, dt: torch.mean(x, dims, k, dtype=dt),
             [T(x), P([1]), P(False), P("f64")])
    case("mean_dtype", lambda x, dims, k, dt: torch.mean(x, dims, k, dtype=dt),
         [T(x), P([1]), P(False), P("f32")])
    case("nansum", lambda x, dims, k: torch.nansum(x, dims, k), [T(x), P([1]), P(False)])
    case("nansum_dtype", lambda x, dims, k, dt: torch.nansum(x, dims, k, dtype=dt),
         [T(x), P([0]), P(True), P("f64")])
xn = make("f32", [NAN, 1.0, -0.0, NAN, INF, -INF, 2.5, NAN, 0.0], [3, 3])
case("nansum", lambda x, dims, k: torch.nansum(x, dims, k), [T(xn), P([1]), P(False)])
case("nansum", lambda x, dims, k: torch.nansum(x, dims, k), [T(xn), P([]), P(False)])
case("any", lambda x, dims, k: torch.any(x, dims, keepdim=k), [T(xn), P([1]), P(False)])
case("all", lambda x, dims, k: torch.all(x, dims, keepdim=k), [T(xn), P([1]), P(False)])
case("count_nonzero", torch.count_nonzero, [T(xn), P([0, 1])])
case("masked_fill", lambda x, m, v: x.masked_fill(m, v),
     [T(make("f16", [1, 2, 3])), T(make("bool", [True, False, True])), S(1e5)])
case("take", torch.take, [T(xn), T(make("i64", [9]))])
for n, m, d in [(3, 3, "f32"), (2, 4, "i64"), (4, 1, "bool"), (0, 2, "f16")]:
    case("eye", lambda n, m, dtype: torch.eye(n, m, dtype=dtype), [P(n), P(m), P(d)])
for a, b, n, d in [(0.0, 1.0, 7, "f32"), (-5.0, 5.0, 4, "i32"), (1.0, 0.0, 11, "f64"),
                   (0.0, 1.0, 1, "f16"), (3.0, 3.0, 0, "f32"), (-1.0, 1e10, 6, "bf16")]:
    case("linspace", lambda a, b, n, dtype: torch.linspace(a, b, n, dtype=dtype),
         [P(a), P(b), P(n), P(d)])
for a, b, n in [(-3.3, 7.1, 33), (0.1, 0.7, 100), (2.5, -7.25, 64)]:
    for d in ["f32", "f64"]:
        case("linspace", lambda a, b, n, dtype: torch.linspace(a, b, n, dtype=dtype),
             [P(a), P(b), P(n), P(d)])
for d in ["f32", "f16", "i64"]:
    x = make(d, list(range(12)), [3, 4])
    case("roll", torch.roll, [T(x), P([1, -5]), P([0, 1])])
    case("roll", torch.roll, [T(x), P([2]), P([])])
    case("norm", vnorm, [T(x), P(2.0), P([1]), P(False)])  # i64: an error in both
x = rnd([3, 7], "f32", 991, 4.0)
for p in [0.0, 1.0, INF, -INF, 2.5, -1.0]:
    for d in ["f32", "f64"]:
        case("norm", vnorm, [T(x.to(DT[d])), P(p), P([1]), P(False)])


def index_put(x, idx, v, acc):
    return torch.index_put(x, (idx,), v, acc)


for d in ["f32", "f64", "i32"]:
    x = make(d, list(range(12)), [4, 3])
    i = make("i64", [3, 0, 3, -1])
    v = make(d, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120], [4, 3])
    for acc in [False, True]:
        case("index_put", index_put, [T(x), T(i), T(v), P(acc)])
    case("index_put", index_put, [T(x), T(make("i64", [1, 2])), T(make(d, [7, 8, 9])), P(True)])
    case("index", lambda x, i: x[i], [T(x), T(make("i64", [0, -1, 2, 2], [2, 2]))])
case("index_put", index_put, [T(make("f32", [1, 2, 3])), T(make("i64", [5])),
                              T(make("f32", [0.0])), P(False)])

# nn functions.
for d in FLOATS:
    w = rnd([6, 4], d, 992)
    ids = make("i64", [0, 5, 2, 2, 2, 1], [2, 3])
    case("embedding", F.embedding, [T(ids), T(w)])
    case("embedding_padded", lambda i, w, p: F.embedding(i, w, padding_idx=p),
         [T(ids), T(w), P(2)])
    case("embedding_padded", lambda i, w, p: F.embedding(i, w, padding_idx=p),
         [T(ids), T(w), P(-1)])
case("embedding", F.embedding, [T(make("i64", [6])), T(rnd([6, 4], "f32", 992))])
case("embedding", F.embedding, [T(make("i32", [0, 3])), T(rnd([6, 4], "f32", 992))])


def nllw(x, t, w, ii, r):
    return F.nll_loss(x, t, weight=w, ignore_index=ii, reduction=r)


def xentw(x, t, w, ii, ls, r):
    return F.cross_entropy(x, t, weight=w, ignore_index=ii, label_smoothing=ls, reduction=r)


for d in FLOATS:
    logits, t = rnd([5, 4], d, 993, 2.0), make("i64", [1, 0, 3, -100, 3])
    wt = rnd([4], d, 994).abs() + 0.25
    for r in ["mean", "sum", "none"]:
        case("nll_loss_weighted", nllw, [T(logits), T(t), T(wt), P(-100), P(r)])
        case("cross_entropy_weighted", xentw, [T(logits), T(t), T(wt), P(-100), P(0.0), P(r)])
    case("cross_entropy_weighted", xentw, [T(logits), T(t), T(wt), P(-100), P(0.2), P("mean")])
    case("nll_loss_weighted", nllw, [T(logits), T(t), T(rnd([3], d, 995)), P(-100), P("mean")])


# ---- issue 32 item 4: gradients ------------------------------------------------------------------
# A gradient case runs the op with the tensor arguments at the positions `wrt` as leaves (a tensor
# list at such a position: each of its tensors), draws an upstream gradient for every output that
# has a gradient ("up"; null for the others) and records the gradients of the leaves ("out";
# unused leaves get zeros). tests/parity.rs replays it through TensorPlay's autograd.
GSEED = [5000]


def gcase(op, fn, args, wrt, kw=None):
    kw = kw or {}
    args = list(args)
    leaves = []
    for i in wrt:
        py = args[i].py
        if isinstance(py, list):
            ls = [t.detach().clone().requires_grad_() for t in py]
            leaves += ls
            args[i] = Arg(args[i].js, ls)
        else:
            leaf = py.detach().clone().requires_grad_()
            leaves.append(leaf)
            args[i] = Arg(args[i].js, leaf)
    try:
        out = fn(*[a.py for a in args], **{k: a.py for k, a in kw.items()})
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        used, ups, up_js = [], [], []
        for o in outs:
            if o.requires_grad:
                GSEED[0] += 1
                g = rnd(list(o.shape), NAME[o.dtype], GSEED[0])
                used.append(o)
                ups.append(g)
                up_js.append(T(g).js["t"])
            else:
                up_js.append(None)
        grads = torch.autograd.grad(used, leaves, ups, allow_unused=True, materialize_grads=True)
    except (RuntimeError, NotImplementedError) as e:
        print(f"gradient case skipped: {op}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
        return
    c = {"op": op, "args": [a.js for a in args], "grad": wrt, "up": up_js,
         "out": [T(g).js["t"] for g in grads]}
    if kw:
        c["kw"] = {k: a.js for k, a in kw.items()}
    CASES.append(c)


def gx(shape, d, seed, kind="any"):
    """Inputs inside an op's differentiable domain."""
    x = rnd(shape, "f64", seed, 2.0)
    if kind == "pos":
        x = x.abs() + 0.1
    elif kind == "gt1":
        x = x.abs() + 1.1
    elif kind == "unit":
        x = torch.tanh(x) * 0.9
    elif kind == "prob":
        x = torch.sigmoid(x) * 0.9 + 0.05
    elif kind == "gtm1":
        x = x.abs() - 0.9
    return x.to(DT[d])


GSHAPES = [[3, 4], [5]]
GRAD_UNARY = {
    "neg": "any", "abs": "any", "sign": "any", "relu": "any", "exp": "any", "log": "pos",
    "log1p": "gtm1", "expm1": "any", "sqrt": "pos", "rsqrt": "pos", "reciprocal": "pos",
    "sin": "any", "cos": "any", "tanh": "any", "sigmoid": "any", "silu": "any", "erf": "any",
    "floor": "any", "ceil": "any", "round": "any", "square": "any", "log2": "pos",
    "log10": "pos", "exp2": "any", "tan": "unit", "asin": "unit", "acos": "unit", "atan": "any",
    "sinh": "any", "cosh": "any", "asinh": "any", "acosh": "gt1", "atanh": "unit",
    "sinc": "any", "trunc": "any", "frac": "any", "hardsigmoid": "any", "hardswish": "any",
    "mish": "any",
}
UNARY["sinc"] = torch.sinc
for name, kind in GRAD_UNARY.items():
    for d in FLOATS:
        for i, s in enumerate(GSHAPES):
            if d in ("f16", "bf16") and i > 0:
                continue
            gcase(name, UNARY[name], [T(gx(s, d, 6000 + i, kind))], [0])
# Zeros and the kinks where PyTorch picks a one-sided derivative.
KINKS = [0.0, -0.0, 1.0, -1.0, -3.0, 3.0, 0.5, -2.5]
for name in ["abs", "relu", "hardsigmoid", "hardswish", "sqrt", "sign", "square"]:
    for d in ["f32", "f64"]:
        gcase(name, UNARY[name], [T(make(d, KINKS))], [0])
for d in FLOATS:
    for i, s in enumerate(GSHAPES):
        x = gx(s, d, 6100 + i)
        for approx in ["none", "tanh"]:
            gcase("gelu", lambda x, approximate: F.gelu(x, approximate=approximate), [T(x)], [0],
                  {"approximate": P(approx)})
        gcase("leaky_relu", F.leaky_relu, [T(x), S(0.2)], [0])
        gcase("softplus", F.softplus, [T(x), S(2.0), S(1.0)], [0])
        gcase("elu", F.elu, [T(x)], [0])
        gcase("hardtanh", F.hardtanh, [T(x), S(-0.5), S(1.0)], [0])
        gcase("nan_to_num", torch.nan_to_num, [T(x)], [0])
        gcase("logit", torch.logit, [T(gx(s, d, 6110 + i, "prob"))], [0])
        gcase("logit", torch.logit, [T(gx(s, d, 6120 + i, "prob")), P(0.2)], [0])
        gcase("clamp", torch.clamp, [T(x), S(-0.5), S(1.0)], [0])
        gcase("softmax", torch.softmax, [T(x), P(0)], [0])
        gcase("log_softmax", torch.log_softmax, [T(x), P(-1)], [0])
        gcase("cumsum", torch.cumsum, [T(x), P(0)], [0])
        gcase("logsumexp", torch.logsumexp, [T(x), P([0]), P(False)], [0])
        for p in [2.0, 1.0, INF, 3.0]:
            gcase("norm", vnorm, [T(x), P(p), P([0]), P(False)], [0])
for d in ["f32", "f64"]:
    gcase("nan_to_num", torch.nan_to_num, [T(make(d, [1.0, NAN, INF, -INF, -2.0]))], [0])
    gcase("hardtanh", F.hardtanh, [T(make(d, [-0.5, 1.0, 0.3, -2.0, 2.0]))], [0])
    gcase("clamp", torch.clamp, [T(make(d, [-0.5, 1.0, 0.3, -2.0, 2.0])), S(-0.5), S(1.0)], [0])
    gcase("norm", vnorm, [T(make(d, [0.0, 0.0, 0.0])), P(2.0), P([]), P(False)], [0])
    gcase("cumprod", torch.cumprod, [T(make(d, [2.0, 0.0, 3.0, -1.5, 0.0, 4.0], [2, 3])), P(1)],
          [0])
    kx = make(d, [-0.5, 1.0, 0.3, -2.0, 2.0, 0.7])
    klo = make(d, [-0.5, -0.5, -0.5, -0.5, -0.5, 0.7])
    khi = make(d, [1.0, 1.0, 1.0, 1.0, 1.0, 0.7])
    gcase("clamp_tensor", torch.clamp, [T(kx), T(klo), T(khi)], [0, 1, 2])

# Binary ops: same shapes and a broadcast operand.
GRAD_BINARY = {
    "add": "any", "sub": "any", "mul": "any", "div": "pos", "pow": "pos", "maximum": "any",
    "minimum": "any", "remainder": "pos", "atan2": "any", "hypot": "any", "copysign": "any",
    "fmod": "pos", "fmax": "any", "fmin": "any",
}
for name, kind in GRAD_BINARY.items():
    for d in FLOATS:
        for i, (sa, sb) in enumerate([([3, 4], [3, 4]), ([3, 4], [4])]):
            if d in ("f16", "bf16") and i > 0:
                continue
            a = gx(sa, d, 6200 + i, "pos" if name == "pow" else "any")
            b = gx(sb, d, 6210 + i, kind)
            gcase(name, BINARY[name], [T(a), T(b)], [0, 1])
    for d in ["f32", "f64"]:  # ties, and NaN where the rules say where the gradient goes
        a = make(d, [1.0, 2.0, NAN, -0.0, 3.0, NAN])
        b = make(d, [1.0, -2.0, 1.0, 0.0, NAN, NAN])
        if name in ("maximum", "minimum", "fmax", "fmin"):
            gcase(name, BINARY[name], [T(a), T(b)], [0, 1])
for d in FLOATS:
    s, e, w = gx([3, 4], d, 6300), gx([3, 4], d, 6301), gx([3, 4], d, 6302, "prob")
    gcase("lerp", torch.lerp, [T(s), T(e), T(w)], [0, 1, 2])
    gcase("lerp", torch.lerp, [T(s), T(e), W(0.3)], [0, 1])
    c = make("bool", [True, False, True, True], [4])
    gcase("where", torch.where, [T(c), T(s), T(gx([4], d, 6303))], [1, 2])
    lo, hi = gx([4], d, 6304) - 0.5, gx([3, 1], d, 6305).abs()
    gcase("clamp_tensor", torch.clamp, [T(s), T(lo), T(hi)], [0, 1, 2])
    gcase("mul", torch.mul, [T(s), W(2.5)], [0])

# Reductions.
for d in FLOATS:
    for i, s in enumerate([[3, 4], [2, 3, 2]]):
        x = gx(s, d, 6400 + i)
        gcase("sum", torch.sum, [T(x), P([1])], [0])
        gcase("mean", torch.mean, [T(x), P([0, 1])], [0])
        gcase("prod", lambda t, dm: torch.prod(t, dm[0]), [T(x), P([1])], [0])
        gcase("amax", torch.amax, [T(x), P([1])], [0])
        gcase("amin", torch.amin, [T(x), P([0])], [0])
        gcase("max", torch.max, [T(x)], [0])
        gcase("min", torch.min, [T(x)], [0])
        gcase("max_dim", torch.max, [T(x), P(1)], [0])
        gcase("min_dim", torch.min, [T(x), P(0)], [0])
        gcase("var", torch.var, [T(x), P([1])], [0])
        gcase("std", torch.std, [T(x), P([1])], [0])
        gcase("sort", torch.sort, [T(x), P(0)], [0])
        gcase("cumprod", torch.cumprod, [T(x), P(1)], [0])
for d in ["f32", "f64"]:
    t = make(d, [1.0, 3.0, 3.0, -1.0, 0.0, 3.0, 2.0, 0.0, 0.0], [3, 3])  # ties and zeros
    for name, fn, a in [("amax", torch.amax, [P([1])]), ("max", torch.max, []),
                        ("min_dim", torch.min, [P(1)]), ("prod", lambda t, dm: torch.prod(
                            t, dm[0]), [P([1])]), ("prod", lambda t, dm: torch.prod(t, dm[0]),
                                                   [P([0])])]:
        gcase(name, fn, [T(t)] + a, [0])

# matmul and linear.
for d in FLOATS:
    for sa, sb in [([3, 4], [4, 2]), ([4], [4, 2]), ([2, 3, 4], [4, 5]), ([2, 3, 4], [2, 4, 2]),
                   ([4], [4])]:
        gcase("matmul", torch.matmul, [T(gx(sa, d, 6500)), T(gx(sb, d, 6501))], [0, 1])
    x, w, b = gx([2, 3, 6], d, 6502), gx([5, 6], d, 6503), gx([5], d, 6504)
    gcase("linear", linear, [T(x), T(w), T(b)], [0, 1, 2])
    gcase("linear", linear, [T(gx([6], d, 6505)), T(w), P(None)], [0, 1])

# Joins, indexing and shape composites.
for d in FLOATS:
    a, b = gx([2, 3], d, 6600), gx([1, 3], d, 6601)
    gcase("cat", cat, [TL([a, b]), P(0)], [0])
    gcase("stack", stack, [TL([a, a * 2]), P(2)], [0])
    x = gx([3, 4], d, 6602)
    idx = make("i64", [2, 0, 1, 2, 0, 0, 2, 1], [2, 4])
    src = gx([2, 4], d, 6603)
    gcase("gather", torch.gather, [T(x), P(0), T(idx)], [0])
    gcase("scatter", torch.scatter, [T(x), P(0), T(idx), T(src)], [0, 3])
    gcase("scatter_add", torch.scatter_add, [T(x), P(0), T(idx), T(src)], [0, 3])
    for red in ["sum", "prod", "mean", "amax", "amin"]:
        for inc in [True, False]:
            gcase("scatter_reduce",
                  lambda x, dim, i, s, r, include_self: torch.scatter_reduce(
                      x, dim, i, s, r, include_self=include_self),
                  [T(x), P(0), T(idx), T(src), P(red)], [0, 3], {"include_self": P(inc)})
    gcase("flip", torch.flip, [T(x), P([0, 1])], [0])
    gcase("diagonal", torch.diagonal, [T(gx([2, 3, 4], d, 6604)), P(1), P(1), P(2)], [0])
    gcase("index_select", torch.index_select, [T(x), P(0), T(make("i64", [2, 0, 2]))], [0])
    m = make("bool", [True, False, False, True], [4])
    gcase("masked_fill", lambda x, m, v: x.masked_fill(m, v), [T(x), T(m), S(-0.5)], [0])
    gcase("tril", torch.tril, [T(x), P(1)], [0])
    gcase("triu", torch.triu, [T(x), P(-1)], [0])
    gcase("unflatten", torch.unflatten, [T(x), P(1), P([2, -1])], [0])
    gcase("split", lambda x, s, dim: torch.split(x, s, dim), [T(x), P(3), P(1)], [0])
    gcase("split_with_sizes", lambda x, s, dim: torch.split(x, s, dim), [T(x), P([1, 2]), P(0)],
          [0])
    gcase("chunk", torch.chunk, [T(x), P(2), P(0)], [0])
    gcase("movedim", torch.movedim, [T(x.reshape(1, 3, 4)), P([0, 2]), P([2, 0])], [0])
    gcase("repeat", lambda x, r: x.repeat(r), [T(x), P([2, 1, 2])], [0])
    gcase("tile", torch.tile, [T(x), P([2])], [0])
    gcase("roll", torch.roll, [T(x), P([1, -5]), P([0, 1])], [0])
    gcase("masked_select", torch.masked_select, [T(x), T(m)], [0])
    gcase("take", torch.take, [T(x), T(make("i64", [11, 0, 5, 5], [2, 2]))], [0])
    gcase("index", lambda x, i: x[i], [T(x), T(make("i64", [0, -1, 2, 2], [2, 2]))], [0])
    gcase("index", lambda x, m: x[m], [T(x), T(make("bool", [True, False, True]))], [0])
    gcase("index_put", index_put, [T(x), T(make("i64", [2, 0, 2])), T(gx([3, 4], d, 6605)),
                                   P(True)], [0, 2])
    gcase("index_put", index_put, [T(x), T(make("i64", [2, 0])), T(gx([4], d, 6606)), P(False)],
          [0, 2])
    gcase("sum_dtype", lambda x, dims, k, dt: torch.sum(x, dims, k, dtype=dt),
          [T(x), P([1]), P(False), P("f64")], [0])
    gcase("mean_dtype", lambda x, dims, k, dt: torch.mean(x, dims, k, dtype=dt),
          [T(x), P([0]), P(True), P("f32")], [0])
    xn = x.clone()
    xn[1, 2] = NAN
    gcase("nansum", lambda x, dims, k: torch.nansum(x, dims, k), [T(xn), P([1]), P(False)], [0])
    gcase("nansum_dtype", lambda x, dims, k, dt: torch.nansum(x, dims, k, dtype=dt),
          [T(xn), P([0]), P(False), P("f64")], [0])

# nn functions.
for d in FLOATS:
    sd = "f32" if d in ("f16", "bf16") else d
    ids = make("i64", [0, 5, 2, 2, 2, 1], [2, 3])
    w = gx([6, 4], d, 6700)
    gcase("embedding", F.embedding, [T(ids), T(w)], [1])
    gcase("embedding_padded", lambda i, w, p: F.embedding(i, w, padding_idx=p),
          [T(ids), T(w), P(2)], [1])
    x = gx([2, 3, 8], d, 6701) + 3.0
    gcase("layer_norm", layer_norm, [T(x), P([8]), T(gx([8], d, 6702)), T(gx([8], d, 6703)),
                                     P(1e-5)], [0, 2, 3])
    gcase("layer_norm", layer_norm, [T(x), P([3, 8]), P(None), P(None), P(1e-5)], [0])
    gcase("rms_norm", rms_norm, [T(x), P([8]), T(gx([8], d, 6704)), P(None)], [0, 2])
    logits, t = gx([5, 4], d, 6705), make("i64", [1, 0, 3, -100, 3])
    wt = gx([4], d, 6706, "pos")
    for r in ["mean", "sum", "none"]:
        gcase("mse_loss", lambda a, b, r: F.mse_loss(a, b, reduction=r),
              [T(logits), T(gx([5, 4], d, 6707)), P(r)], [0, 1])
        gcase("nll_loss", nll, [T(logits), T(t), P(-100), P(r)], [0])
        gcase("cross_entropy", xent, [T(logits), T(t), P(-100), P(0.1), P(r)], [0])
        gcase("nll_loss_weighted", nllw, [T(logits), T(t), T(wt), P(-100), P(r)], [0])
        gcase("cross_entropy_weighted", xentw, [T(logits), T(t), T(wt), P(-100), P(0.0), P(r)],
              [0])
    q, k, v = gx([2, 5, 8], d, 6710), gx([2, 6, 8], d, 6711), gx([2, 6, 4], d, 6712)
    bm = gx([5, 6], "f64", 6713) > -1.0
    gcase("scaled_dot_product_attention", sdpa, [T(q), T(k), T(v), P(None), P(False), P(None)],
          [0, 1, 2])
    gcase("scaled_dot_product_attention", sdpa, [T(q), T(k), T(v), T(bm), P(False), P(0.5)],
          [0, 1, 2])
    gcase("scaled_dot_product_attention", sdpa, [T(q), T(q), T(q), P(None), P(True), P(None)],
          [0, 1, 2])
    x4 = gx([2, 3, 6, 5], d, 6720)
    gcase("conv2d", conv2d, [T(x4), T(gx([4, 3, 3, 2], d, 6721)), T(gx([4], d, 6722)), P([2, 1]),
                             P([1, 0]), P([1, 2]), P(1)], [0, 1, 2])
    gcase("conv1d", conv1d, [T(gx([2, 4, 9], d, 6723)), T(gx([6, 2, 3], d, 6724)),
                             T(gx([6], d, 6725)), P(2), P(1), P(1), P(2)], [0, 1, 2])
    gcase("max_pool2d", max_pool2d, [T(x4), P([2, 2]), P([]), P([1, 0]), P([1, 1]), P(True)],
          [0])
    gcase("max_pool2d_with_indices", mpwi, [T(x4), P([3, 2]), P([2, 1]), P([1, 1]), P([1, 1]),
                                            P(False)], [0])
    gcase("avg_pool2d", avg_pool2d, [T(x4), P([3, 2]), P([2, 1]), P([1, 1]), P(True), P(False),
                                     P(None)], [0])
    gcase("adaptive_avg_pool2d", F.adaptive_avg_pool2d, [T(x4), P([4, 3])], [0])
    xb = gx([4, 3, 2, 2], d, 6730) * 2.0 + 1.0
    rm, rv = gx([3], sd, 6731), gx([3], sd, 6732, "pos") + 0.5
    bw, bb = gx([3], sd, 6733), gx([3], sd, 6734)
    gcase("batch_norm", batch_norm, [T(xb), T(rm), T(rv), T(bw), T(bb), P(True), P(0.1),
                                     P(1e-5)], [0, 3, 4])
    gcase("batch_norm", batch_norm, [T(xb), T(rm), T(rv), T(bw), T(bb), P(False), P(0.1),
                                     P(1e-5)], [0, 3, 4])
    gcase("group_norm", F.group_norm, [T(gx([2, 6, 5], d, 6735)), P(3), T(gx([6], d, 6736)),
                                       T(gx([6], d, 6737)), P(1e-5)], [0, 2, 3])

resize_cases.record(case, gcase, T, P, rnd, gx)

json.dump({"torch": torch.__version__, "tensors": POOL, "cases": CASES}, sys.stdout, separators=(",", ":"))
sys.stdout.write("\n")
