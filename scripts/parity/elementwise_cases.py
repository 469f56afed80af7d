"""Sweeps of the elementwise ops on special values (unary, binary, type promotion, half
tensors with Rust scalars, scalar conversions), matmul, arange, reductions, the mpmath
accuracy references and casts.

Imported by record.py in order; importing one records its cases.
"""

# Names shared by every case file (dtypes, encoders, `case`).
from parity_core import *  # noqa: F401,F403

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
