"""``tensorplay.nn.functional.conv_transpose2d``: PyTorch's signature, hand-computed values and
gradients, bad arguments raising errors that name the function and the argument, and agreement
with PyTorch (values and gradients) when ``torch`` is importable (those tests skip otherwise)."""

import contextlib
import inspect

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

RTOL, ATOL = 1e-5, 1e-5


def _close(t, expected, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(t.tolist(), dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


def test_signature_matches_pytorch():
    assert str(inspect.signature(F.conv_transpose2d)) == (
        "(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, "
        "dilation=1)")
    assert F.conv_transpose2d.__doc__


def test_values():
    # One input pixel spreads the kernel onto the output; stride 2 spaces the copies.
    x = tp.tensor([[[[1.0, 2.0]]]])
    w = tp.tensor([[[[1.0, 10.0]]]])
    _close(F.conv_transpose2d(x, w), [[[[1, 12, 20]]]])
    _close(F.conv_transpose2d(x, w, stride=2), [[[[1, 10, 2, 20]]]])
    _close(F.conv_transpose2d(x, w, stride=2, output_padding=(0, 1)), [[[[1, 10, 2, 20, 0]]]])
    _close(F.conv_transpose2d(x, w, tp.tensor([0.5]), stride=(1, 2), padding=(0, 1)),
           [[[[10.5, 2.5]]]])
    _close(F.conv_transpose2d(x, w, dilation=2), [[[[1, 2, 10, 20]]]])
    # Unbatched [C, H, W]; groups: each channel with its own kernel.
    _close(F.conv_transpose2d(x[0], w), [[[1, 12, 20]]])
    x2 = tp.tensor([[[[1.0]], [[2.0]]]])
    w2 = tp.tensor([[[[3.0]]], [[[-1.0]]]])
    _close(F.conv_transpose2d(x2, w2, groups=2), [[[[3]], [[-2]]]])
    y = F.conv_transpose2d(tp.ones(2, 4, 3, 3), tp.ones(4, 3, 3, 3), stride=2, padding=1,
                           output_padding=1)
    assert y.shape == (2, 3, 6, 6)


def test_gradients():
    x = tp.tensor([[[[1.0, 2.0]]]], requires_grad=True)
    w = tp.tensor([[[[1.0, 10.0]]]], requires_grad=True)
    b = tp.tensor([0.0], requires_grad=True)
    F.conv_transpose2d(x, w, b, stride=2).sum().backward()
    _close(x.grad, [[[[11, 11]]]])
    _close(w.grad, [[[[3, 3]]]])
    _close(b.grad, [4])


@contextlib.contextmanager
def _raises(exc, *words):
    with pytest.raises(exc) as info:
        yield info
    msg = str(info.value)
    for word in words:
        assert word in msg, f"{word!r} not in {msg!r}"


def test_bad_arguments():
    x, w = tp.ones(1, 4, 3, 3), tp.ones(4, 2, 3, 3)
    with _raises(ValueError, "conv_transpose2d", "output_padding"):
        F.conv_transpose2d(x, w, stride=2, output_padding=2)
    with _raises(ValueError, "conv_transpose2d", "output_padding", "-1"):
        F.conv_transpose2d(x, w, output_padding=-1)
    with _raises(ValueError, "conv_transpose2d", "groups"):
        F.conv_transpose2d(x, w, groups=3)
    with _raises(ValueError, "conv_transpose2d", "groups"):
        F.conv_transpose2d(x, w, groups=0)
    with _raises(ValueError, "conv_transpose2d", "weight"):
        F.conv_transpose2d(x, tp.ones(3, 2, 3, 3))
    with _raises(ValueError, "conv_transpose2d", "bias"):
        F.conv_transpose2d(x, w, tp.ones(4))
    with _raises(ValueError, "conv_transpose2d", "stride", "(1, 2, 3)"):
        F.conv_transpose2d(x, w, stride=(1, 2, 3))
    with _raises(ValueError, "conv_transpose2d", "padding"):
        F.conv_transpose2d(x, w, padding=5)
    with _raises(ValueError, "conv_transpose2d", "input"):
        F.conv_transpose2d(tp.ones(3, 3), w)
    with _raises(TypeError, "conv_transpose2d", "dilation", "1.5"):
        F.conv_transpose2d(x, w, dilation=1.5)


# ---- against PyTorch ----------------------------------------------------------------------

CASES = [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2),
    dict(stride=(1, 2), dilation=(2, 1), output_padding=(1, 0)),
    dict(padding=2, dilation=2, groups=2),
]


@pytest.mark.parametrize("kw", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_against_torch(kw, bias):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32)
              for s in [(2, 4, 5, 4), (4, 6 // kw.get("groups", 1), 3, 3), (6,)]]
    ours = [tp.tensor(a.tolist(), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = F.conv_transpose2d(ours[0], ours[1], ours[2] if bias else None, **kw)
    ty = torch.nn.functional.conv_transpose2d(theirs[0], theirs[1],
                                              theirs[2] if bias else None, **kw)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(np.asarray(y.tolist(), dtype=np.float32), ty.detach().numpy(),
                               rtol=RTOL, atol=ATOL)
    g = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    y.backward(tp.tensor(g.tolist()))
    ty.backward(torch.tensor(g))
    for a, b in zip(ours[:3 if bias else 2], theirs):
        np.testing.assert_allclose(np.asarray(a.grad.tolist(), dtype=np.float32),
                                   b.grad.numpy(), rtol=RTOL, atol=ATOL)
