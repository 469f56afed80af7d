"""Parity cases of `conv_transpose2d` (issue 30), recorded by `record.py`.

`record` is called at the end of `record.py`, after the other families, so the cases and
gradient seeds recorded before stay what they were (`append_new.py` appends these).
"""

import torch.nn.functional as F

FLOATS = ["f32", "f64", "f16", "bf16"]


def conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation):
    return F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)


# input, weight [C_in, C_out / groups, kH, kW], bias?, stride, padding, output_padding, groups,
# dilation
CASES = [
    ([2, 3, 4, 5], [3, 4, 3, 3], True, [1, 1], [0, 0], [0, 0], 1, [1, 1]),
    ([1, 4, 5, 4], [4, 3, 3, 2], False, [2, 3], [1, 0], [1, 2], 2, [1, 1]),
    ([2, 2, 3, 4], [2, 2, 2, 3], True, [2, 1], [0, 1], [0, 0], 1, [2, 2]),
    # output_padding 1 with stride 1 is allowed by the dilation 2.
    ([1, 4, 4, 3], [4, 1, 3, 3], True, [1, 2], [2, 1], [1, 1], 4, [2, 1]),
    ([4, 5, 3], [4, 2, 2, 2], True, [2, 2], [1, 1], [1, 0], 2, [1, 1]),  # unbatched
]


def record(case, gcase, T, P, rnd, gx):
    for d in FLOATS:
        for i, (xs, ws, bias, st, pad, opad, g, dil) in enumerate(CASES):
            x, w = rnd(xs, d, 9300 + i), rnd(ws, d, 9310 + i, 0.5)
            b = T(rnd([ws[1] * g], d, 9320 + i)) if bias else P(None)
            case("conv_transpose2d", conv_transpose2d,
                 [T(x), T(w), b, P(st), P(pad), P(opad), P(g), P(dil)])
    # Errors: output_padding not smaller than the stride or the dilation, channels not
    # divisible by groups, a weight whose rows are not the input channels, a padding that
    # leaves no output.
    x, w = rnd([1, 4, 3, 3], "f32", 9330), rnd([4, 2, 3, 3], "f32", 9331)
    for st, pad, opad, g, ww in [([2, 2], [0, 0], [2, 2], 1, w), ([1, 1], [0, 0], [0, 0], 3, w),
                                 ([1, 1], [0, 0], [0, 0], 1, rnd([3, 2, 3, 3], "f32", 9332)),
                                 ([1, 1], [4, 4], [0, 0], 1, w)]:
        case("conv_transpose2d", conv_transpose2d,
             [T(x), T(ww), P(None), P(st), P(pad), P(opad), P(g), P([1, 1])])
    # Gradients of input, weight and bias.
    for d in ["f32", "f64"]:
        for i, (xs, ws, _, st, pad, opad, g, dil) in enumerate(CASES[:4]):
            x, w, b = gx(xs, d, 9340 + i), gx(ws, d, 9350 + i), gx([ws[1] * g], d, 9360 + i)
            gcase("conv_transpose2d", conv_transpose2d,
                  [T(x), T(w), T(b), P(st), P(pad), P(opad), P(g), P(dil)], [0, 1, 2])
