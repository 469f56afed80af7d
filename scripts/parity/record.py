#!/usr/bin/env python3
"""Records TensorPlay's PyTorch-parity cases (`tests/data/parity.json`).

Each case names an op, its arguments (tensors with exact bit patterns, Rust-scalar operands,
plain ints/floats/strings) and what PyTorch 2.x on CPU returned: the dtype, shape and bit
pattern of every output, or that it raised. `tests/parity.rs` replays every case through
TensorPlay's public API; it needs neither PyTorch nor Python.

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
    """A plain argument: int, float, bool, string, int list, dtype name, None."""
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

json.dump({"torch": torch.__version__, "tensors": POOL, "cases": CASES}, sys.stdout, separators=(",", ":"))
sys.stdout.write("\n")
