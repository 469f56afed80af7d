"""Issue 32 item 4: gradient cases (`gcase`): what PyTorch's autograd gives some tensor arguments
for a recorded upstream gradient.

Imported by record.py in order; importing one records its cases.
"""

# Names shared by every case file (dtypes, encoders, `case`).
from parity_core import *  # noqa: F401,F403
from cnn_cases import avg_pool2d, batch_norm, conv1d, conv2d, max_pool2d
from coverage_cases import TL, cat, index_put, mpwi, nllw, stack, xentw
from elementwise_cases import BINARY, UNARY
from newer_op_cases import layer_norm, linear, nll, rms_norm, rnd, sdpa, vnorm, xent

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
