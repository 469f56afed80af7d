"""Issue 30: the ops a CNN needs (convolutions, pools, batch norm).

Imported by record.py in order; importing one records its cases.
"""

# Names shared by every case file (dtypes, encoders, `case`).
from parity_core import *  # noqa: F401,F403
from newer_op_cases import rnd

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
