"""Parity cases of `pad` and `interpolate` (issue 30), recorded by `record.py`.

Kept apart from `record.py` (which is long enough); `record` is called at its end, so the
gradient seeds of the cases recorded before stay what they were.
"""

import torch
import torch.nn.functional as F

FLOATS = ["f32", "f64", "f16", "bf16"]


def _errors_as_runtime(fn):
    """PyTorch raises NotImplementedError for some unsupported combinations; the cases only
    record that it raised."""

    def call(*args):
        try:
            return fn(*args)
        except NotImplementedError as e:
            raise RuntimeError(str(e)) from None

    return call


@_errors_as_runtime
def pad(x, p, mode, value):
    return F.pad(x, p, mode=mode, value=value)


@_errors_as_runtime
def interpolate(x, size, scale, mode, align_corners, recompute):
    return F.interpolate(x, size=size, scale_factor=scale, mode=mode,
                         align_corners=align_corners, recompute_scale_factor=recompute)


PADS = [
    ([1, 1], "constant", 0.0), ([2, -1, 0, 3], "constant", -1.5), ([1, 2, 1, 0, 2, 1], "constant", 2.0),
    ([2, 1], "reflect", None), ([1, 2, 2, 1], "reflect", None), ([-1, 2, 1, -1], "reflect", None),
    ([3, 1], "replicate", None), ([2, 0, 1, 3], "replicate", None),
    ([1, 3], "circular", None), ([2, 1, 3, 2], "circular", None),
]

# (input shape, size, scale_factor, mode, align_corners, recompute_scale_factor)
RESIZES = [
    ([2, 3, 5], [9], None, "nearest", None, None),
    ([2, 3, 5], [3], None, "nearest", None, None),
    ([2, 3, 5], None, [2.0], "nearest", None, None),
    ([1, 2, 4, 5], None, [1.7, 0.6], "nearest", None, None),
    ([1, 2, 4, 5], [7, 3], None, "nearest-exact", None, None),
    ([1, 2, 3, 2, 3], [4, 3, 5], None, "nearest", None, None),
    ([2, 3, 5], [8], None, "linear", False, None),
    ([2, 3, 5], [8], None, "linear", True, None),
    ([2, 3, 5], None, [0.7], "linear", None, None),
    ([2, 3, 5], None, [0.7], "linear", None, True),
    ([1, 2, 4, 5], [7, 3], None, "bilinear", False, None),
    ([1, 2, 4, 5], [7, 3], None, "bilinear", True, None),
    ([1, 2, 4, 5], None, [2.5, 1.5], "bilinear", None, None),
    ([1, 2, 3, 2, 3], [4, 3, 5], None, "trilinear", False, None),
    ([1, 2, 6, 7], [3, 2], None, "area", None, None),
    ([2, 3, 7], [3], None, "area", None, None),
]


def record(case, gcase, T, P, rnd, gx):
    for d in FLOATS:
        # Batched inputs: one more dim than the padded ones (non-constant modes need that).
        xs = {2: rnd([2, 3, 5], d, 9100), 4: rnd([2, 3, 4, 5], d, 9101),
              6: rnd([2, 3, 2, 4, 5], d, 9102)}
        for p, mode, value in PADS:
            case("pad", pad, [T(xs[len(p)]), P(p), P(mode), P(value)])
        case("pad", pad, [T(xs[2][0]), P([2, 1]), P("reflect"), P(None)])  # unbatched
        for i, (shape, size, scale, mode, corners, rec) in enumerate(RESIZES):
            xi = rnd(shape, d, 9110 + i)
            case("interpolate", interpolate,
                 [T(xi), P(size), P(scale), P(mode), P(corners), P(rec)])
    # Integer and bool tensors pad (every mode) and resize by nearest modes.
    xi = rnd([1, 2, 4, 5], "f64", 9130, 10.0).round().to(torch.int64)
    case("pad", pad, [T(xi), P([1, 2, 0, 1]), P("constant"), P(7.0)])
    case("pad", pad, [T(xi), P([2, 1]), P("reflect"), P(None)])
    case("interpolate", interpolate, [T(xi.float()), P([3, 7]), P(None), P("nearest"), P(None),
                                      P(None)])
    # Errors: odd pad length, a reflect pad as large as the dim, a non-constant pad of a 1-D
    # input, circular wrapping more than once, a crop past the size; interpolate with both or
    # neither of size and scale_factor, align_corners with nearest, a rank that does not match
    # the mode, an empty output.
    x = rnd([1, 3, 4], "f32", 9140)
    case("pad", pad, [T(x), P([1, 2, 3]), P("constant"), P(0.0)])
    case("pad", pad, [T(x), P([4, 0]), P("reflect"), P(None)])
    case("pad", pad, [T(rnd([4], "f32", 9141)), P([1, 1]), P("reflect"), P(None)])
    case("pad", pad, [T(x), P([5, 0]), P("circular"), P(None)])
    case("pad", pad, [T(x), P([-3, -2]), P("constant"), P(0.0)])
    case("interpolate", interpolate, [T(x), P([3]), P([2.0]), P("nearest"), P(None), P(None)])
    case("interpolate", interpolate, [T(x), P(None), P(None), P("nearest"), P(None), P(None)])
    case("interpolate", interpolate, [T(x), P([8]), P(None), P("nearest"), P(False), P(None)])
    case("interpolate", interpolate, [T(x), P([8, 8]), P(None), P("bilinear"), P(None), P(None)])
    case("interpolate", interpolate, [T(x), P(None), P([0.1]), P("linear"), P(None), P(None)])
    # Gradients.
    for d in ["f32", "f64"]:
        x4 = gx([2, 3, 4, 5], d, 9150)
        for p, mode in [([2, -1, 1, 3], "constant"), ([2, 1, 1, 2], "reflect"),
                        ([3, 1, 0, 2], "replicate"), ([1, 3, 2, 2], "circular")]:
            gcase("pad", pad, [T(x4), P(p), P(mode), P(0.5 if mode == "constant" else None)], [0])
        for size, scale, mode, corners in [([7, 3], None, "nearest", None),
                                           (None, [1.7, 0.6], "bilinear", False),
                                           ([7, 9], None, "bilinear", True),
                                           ([3, 2], None, "area", None)]:
            gcase("interpolate", interpolate,
                  [T(x4), P(size), P(scale), P(mode), P(corners), P(None)], [0])
