"""Issue 32: the behaviours of the newer ops, one case each, and half precision computed in f32
and rounded once.

Imported by record.py in order; importing one records its cases.
"""

# Names shared by every case file (dtypes, encoders, `case`).
from parity_core import *  # noqa: F401,F403
from elementwise_cases import HALF_X, UNARY

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
