"""Issue 32 item 3: a forward case for every op docs/ops.md lists.

Imported by record.py in order; importing one records its cases.
"""

# Names shared by every case file (dtypes, encoders, `case`).
from parity_core import *  # noqa: F401,F403
from newer_op_cases import rnd, vnorm

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
