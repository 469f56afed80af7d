"""``tensorplay.nn.functional.pad`` and ``interpolate``: PyTorch's signatures, hand-computed
values and gradients, bad arguments raising clear errors, and agreement with PyTorch when
``torch`` is importable (those tests skip otherwise)."""

import inspect

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F


def _arange(*shape, requires_grad=False):
    n = int(np.prod(shape))
    return tp.tensor(np.arange(n, dtype=np.float32).reshape(shape).tolist(),
                     requires_grad=requires_grad)


def _close(t, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(t.tolist(), dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name, params", [
    ("pad", "(input, pad, mode='constant', value=None)"),
    ("interpolate", "(input, size=None, scale_factor=None, mode='nearest', align_corners=None, "
                    "recompute_scale_factor=None, antialias=False)"),
])
def test_signatures_are_pytorchs(name, params):
    assert str(inspect.signature(getattr(F, name))) == params


def test_pad_modes_by_hand():
    x = tp.tensor([[[1.0, 2.0, 3.0]]])
    _close(F.pad(x, (2, 1), mode="reflect"), [[[3, 2, 1, 2, 3, 2]]])
    _close(F.pad(x, (2, 1), mode="replicate"), [[[1, 1, 1, 2, 3, 3]]])
    _close(F.pad(x, (2, 1), mode="circular"), [[[2, 3, 1, 2, 3, 1]]])
    _close(F.pad(x, (1, -1), value=9.0), [[[9, 1, 2]]])
    _close(F.pad(x, [0, 0, 1, 0]), [[[0, 0, 0], [1, 2, 3]]])


def test_pad_gradient_sums_the_copies():
    x = tp.tensor([[[1.0, 2.0, 3.0]]], requires_grad=True)
    F.pad(x, (2, 1), mode="replicate").sum().backward()
    _close(x.grad, [[[3, 1, 2]]])


def test_interpolate_by_hand():
    x = tp.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    _close(F.interpolate(x, scale_factor=2), [[[[0, 0, 1, 1], [0, 0, 1, 1],
                                                 [2, 2, 3, 3], [2, 2, 3, 3]]]])
    y = F.interpolate(x, size=(3, 3), mode="bilinear", align_corners=True)
    _close(y, [[[[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]]]])
    _close(F.interpolate(_arange(1, 1, 4), size=2, mode="area"), [[[0.5, 2.5]]])


def test_interpolate_gradient():
    x = _arange(1, 1, 2, 2, requires_grad=True)
    F.interpolate(x, scale_factor=2, mode="nearest").sum().backward()
    _close(x.grad, [[[[4, 4], [4, 4]]]])


@pytest.mark.parametrize("call, words", [
    (lambda x: F.pad(x, (1, 2, 3)), ["pad", "pad"]),
    (lambda x: F.pad(x, (4, 0), mode="reflect"), ["pad", "reflect"]),
    (lambda x: F.pad(x, (1, 1), mode="mirror"), ["pad", "mode"]),
    (lambda x: F.pad(x, "ab"), ["pad", "sequence of ints"]),
    (lambda x: F.pad(x, (1.5, 1)), ["pad", "sequence of ints"]),
    (lambda x: F.interpolate(x), ["interpolate", "size"]),
    (lambda x: F.interpolate(x, size=3, scale_factor=2.0), ["interpolate", "scale_factor"]),
    (lambda x: F.interpolate(x, size=8, align_corners=True), ["interpolate", "align_corners"]),
    (lambda x: F.interpolate(x, size=(8, 8), mode="bilinear"), ["interpolate", "input"]),
    (lambda x: F.interpolate(x, size=8, mode="bicubic"), ["interpolate", "mode"]),
    (lambda x: F.interpolate(x, size=-1), ["interpolate", "size"]),
    (lambda x: F.interpolate(x, size=8, antialias=True), ["interpolate", "antialias"]),
    (lambda x: F.interpolate(x, scale_factor="x"), ["interpolate", "scale_factor"]),
])
def test_bad_arguments_raise_clear_errors(call, words):
    x = _arange(1, 2, 4)
    with pytest.raises((ValueError, TypeError, RuntimeError)) as e:
        call(x)
    for w in words:
        assert w in str(e.value)


# ---- against PyTorch ----------------------------------------------------------------------


PAD_CASES = [((1, 2), "constant", 0.5, [2, 3, 5]), ((2, -1, 1, 3), "constant", None, [2, 3, 4, 5]),
             ((2, 1), "reflect", None, [2, 3, 5]), ((1, 2, 2, 1), "reflect", None, [2, 3, 4, 5]),
             ((3, 1, 0, 2), "replicate", None, [2, 3, 4, 5]),
             ((1, 3, 2, 2), "circular", None, [2, 3, 4, 5]),
             ((1, 1, 1, 1, 1, 1), "replicate", None, [1, 2, 3, 4, 5])]

RESIZE_CASES = [([2, 3, 5], dict(size=9)), ([2, 3, 5], dict(scale_factor=0.7, mode="linear")),
                ([1, 2, 4, 5], dict(size=(7, 3), mode="bilinear", align_corners=True)),
                ([1, 2, 4, 5], dict(scale_factor=(1.7, 0.6), mode="bilinear")),
                ([1, 2, 4, 5], dict(size=(7, 3), mode="nearest-exact")),
                ([1, 2, 3, 2, 3], dict(size=(4, 3, 5), mode="trilinear")),
                ([1, 2, 6, 7], dict(size=(3, 2), mode="area"))]


def _both(torch, shape, seed):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return (tp.tensor(a.tolist(), requires_grad=True),
            torch.tensor(a, requires_grad=True))


@pytest.mark.parametrize("i", range(len(PAD_CASES)))
def test_pad_matches_pytorch(i):
    torch = pytest.importorskip("torch")
    p, mode, value, shape = PAD_CASES[i]
    x, tx = _both(torch, shape, i)
    y = F.pad(x, p, mode=mode, value=value)
    ty = torch.nn.functional.pad(tx, p, mode=mode, value=value)
    _close(y, ty.detach().numpy())
    g = np.random.default_rng(100 + i).standard_normal(ty.shape).astype(np.float32)
    y.backward(tp.tensor(g.tolist()))
    ty.backward(torch.tensor(g))
    _close(x.grad, tx.grad.numpy())


@pytest.mark.parametrize("i", range(len(RESIZE_CASES)))
def test_interpolate_matches_pytorch(i):
    torch = pytest.importorskip("torch")
    shape, kw = RESIZE_CASES[i]
    x, tx = _both(torch, shape, 50 + i)
    y = F.interpolate(x, **kw)
    ty = torch.nn.functional.interpolate(tx, **kw)
    _close(y, ty.detach().numpy())
    g = np.random.default_rng(200 + i).standard_normal(ty.shape).astype(np.float32)
    y.backward(tp.tensor(g.tolist()))
    ty.backward(torch.tensor(g))
    _close(x.grad, tx.grad.numpy(), atol=1e-5)
