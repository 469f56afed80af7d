"""``tensorplay.nn.functional``'s CNN functions (conv1d, conv2d, max_pool2d, avg_pool2d,
adaptive_avg_pool2d, batch_norm, group_norm): hand-computed values and gradients always, bad
arguments raising clear errors, and agreement with PyTorch (values and gradients) when ``torch``
is importable (those tests skip otherwise)."""

import contextlib
import inspect

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

RTOL, ATOL = 1e-5, 1e-6


def _arange(*shape, requires_grad=False):
    n = int(np.prod(shape))
    return tp.tensor(np.arange(n, dtype=np.float32).reshape(shape).tolist(),
                     requires_grad=requires_grad)


def _close(t, expected, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(t.tolist(), dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


# ---- signatures ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, params", [
    ("conv1d", "(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)"),
    ("conv2d", "(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)"),
    ("max_pool2d", "(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
                   "return_indices=False)"),
    ("avg_pool2d", "(input, kernel_size, stride=None, padding=0, ceil_mode=False, "
                   "count_include_pad=True, divisor_override=None)"),
    ("adaptive_avg_pool2d", "(input, output_size)"),
    ("batch_norm", "(input, running_mean, running_var, weight=None, bias=None, training=False, "
                   "momentum=0.1, eps=1e-05)"),
    ("group_norm", "(input, num_groups, weight=None, bias=None, eps=1e-05)"),
])
def test_signatures_match_pytorch(name, params):
    f = getattr(F, name)
    assert str(inspect.signature(f)) == params
    assert f.__doc__


# ---- hand-computed values -----------------------------------------------------------------


def test_conv1d_values():
    x = tp.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    w = tp.tensor([[[1.0, -1.0]]])
    _close(F.conv1d(x, w), [[[-1, -1, -1]]])
    _close(F.conv1d(x, w, tp.tensor([0.5])), [[[-0.5, -0.5, -0.5]]])
    _close(F.conv1d(x, w, padding=1), [[[-1, -1, -1, -1, 4]]])
    _close(F.conv1d(x, w, stride=2), [[[-1, -1]]])
    _close(F.conv1d(x, w, stride=(2,)), [[[-1, -1]]])
    _close(F.conv1d(x, w, dilation=2), [[[-2, -2]]])
    # "same" pads the odd total (1) after, as PyTorch does.
    _close(F.conv1d(x, w, padding="same"), [[[-1, -1, -1, 4]]])
    _close(F.conv1d(x, w, padding="valid"), [[[-1, -1, -1]]])
    # Unbatched [C, L].
    _close(F.conv1d(x[0], w), [[-1, -1, -1]])
    # groups: each of 2 channels with its own 1-tap filter.
    x2 = tp.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    _close(F.conv1d(x2, tp.tensor([[[2.0]], [[-1.0]]]), groups=2), [[[2, 4], [-3, -4]]])


def test_conv2d_values():
    x = tp.ones(1, 2, 5, 5)
    w = tp.ones(4, 2, 3, 3)
    y = F.conv2d(x, w, padding=1)
    assert y.shape == (1, 4, 5, 5)
    assert y[0, 0, 0, 0].item() == 8.0 and y[0, 0, 2, 2].item() == 18.0
    assert F.conv2d(x, w, padding="same", dilation=2).shape == (1, 4, 5, 5)
    assert F.conv2d(x, w, padding="valid").shape == (1, 4, 3, 3)
    assert F.conv2d(x, w, stride=(1, 2), padding=(0, 1)).shape == (1, 4, 3, 3)
    assert F.conv2d(x[0], w).shape == (4, 3, 3)  # unbatched
    k = tp.tensor([[[[1.0, 0.0], [0.0, -1.0]]]])
    _close(F.conv2d(_arange(1, 1, 3, 3), k), [[[[-4, -4], [-4, -4]]]])
    _close(F.conv2d(_arange(1, 1, 3, 3), k, bias=tp.tensor([1.0])), [[[[-3, -3], [-3, -3]]]])
    # groups=2: channel c only sees filter c.
    y = F.conv2d(tp.tensor([[[[1.0]], [[2.0]]]]), tp.tensor([[[[3.0]]], [[[5.0]]]]), groups=2)
    _close(y, [[[[3.0]], [[10.0]]]])


def test_conv2d_gradients():
    x = tp.ones(1, 1, 3, 3, requires_grad=True)
    w = tp.ones(1, 1, 2, 2, requires_grad=True)
    b = tp.zeros(1, requires_grad=True)
    F.conv2d(x, w, b).sum().backward()
    _close(x.grad, [[[[1, 2, 1], [2, 4, 2], [1, 2, 1]]]])
    _close(w.grad, [[[[4, 4], [4, 4]]]])
    _close(b.grad, [4])


def test_max_pool2d_values_indices_and_grad():
    x = _arange(1, 1, 4, 4, requires_grad=True)
    y = F.max_pool2d(x, 2)
    _close(y, [[[[5, 7], [13, 15]]]])
    y, i = F.max_pool2d(x, 2, return_indices=True)
    assert i.tolist() == [[[[5, 7], [13, 15]]]] and i.dtype == tp.int64
    y, i = F.max_pool2d(x, kernel_size=(2, 2), stride=2, padding=1, return_indices=True)
    _close(y, [[[[0, 2, 3], [8, 10, 11], [12, 14, 15]]]])
    assert i.tolist() == [[[[0, 2, 3], [8, 10, 11], [12, 14, 15]]]]
    assert F.max_pool2d(x, 3, stride=2, ceil_mode=True).shape == (1, 1, 2, 2)
    assert F.max_pool2d(x, 2, stride=()).shape == (1, 1, 2, 2)
    assert F.max_pool2d(x, 2, stride=1, dilation=2).shape == (1, 1, 2, 2)
    assert F.max_pool2d(x[0], 2).shape == (1, 2, 2)  # unbatched
    F.max_pool2d(x, 2).sum().backward()
    g = [[0.0] * 4 for _ in range(4)]
    for r, c in [(1, 1), (1, 3), (3, 1), (3, 3)]:
        g[r][c] = 1.0
    _close(x.grad, [[g]])


def test_max_pool2d_ceil_mode():
    x = _arange(1, 1, 5, 5)
    assert F.max_pool2d(x, 2).shape == (1, 1, 2, 2)
    y = F.max_pool2d(x, 2, ceil_mode=True)
    _close(y, [[[[6, 8, 9], [16, 18, 19], [21, 23, 24]]]])


def test_avg_pool2d_values_and_grad():
    x = tp.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    _close(F.avg_pool2d(x, 2, stride=1, padding=1, count_include_pad=False),
           [[[1, 1.5, 2], [2, 2.5, 3], [3, 3.5, 4]]])
    _close(F.avg_pool2d(x, 2, stride=1, padding=1),
           [[[0.25, 0.75, 0.5], [1, 2.5, 1.5], [0.75, 1.75, 1]]])
    _close(F.avg_pool2d(x, 2, stride=1, padding=1, divisor_override=1),
           [[[1, 3, 2], [4, 10, 6], [3, 7, 4]]])
    y = _arange(1, 1, 4, 4, requires_grad=True)
    out = F.avg_pool2d(y, kernel_size=(2, 2))
    _close(out, [[[[2.5, 4.5], [10.5, 12.5]]]])
    assert F.avg_pool2d(_arange(1, 1, 5, 5), 2, ceil_mode=True).shape == (1, 1, 3, 3)
    out.sum().backward()
    _close(y.grad, np.full((1, 1, 4, 4), 0.25))


def test_adaptive_avg_pool2d_values_and_grad():
    x = _arange(1, 1, 4, 4, requires_grad=True)
    _close(F.adaptive_avg_pool2d(x, 1), [[[[7.5]]]])
    _close(F.adaptive_avg_pool2d(x, (2, 2)), [[[[2.5, 4.5], [10.5, 12.5]]]])
    _close(F.adaptive_avg_pool2d(x, (None, 1)), [[[[1.5], [5.5], [9.5], [13.5]]]])
    assert F.adaptive_avg_pool2d(x, [3, None]).shape == (1, 1, 3, 4)
    # Overlapping windows: output i of 3 over 5 averages floor(5i/3) .. ceil(5(i+1)/3).
    _close(F.adaptive_avg_pool2d(_arange(1, 1, 1, 5), (1, 3)), [[[[0.5, 2.0, 3.5]]]])
    assert F.adaptive_avg_pool2d(x[0], 2).shape == (1, 2, 2)  # unbatched
    F.adaptive_avg_pool2d(x, 1).sum().backward()
    _close(x.grad, np.full((1, 1, 4, 4), 1 / 16))


def test_batch_norm_training_updates_running_stats():
    x = tp.tensor([[1.0, 4.0], [3.0, 6.0]], requires_grad=True)
    rm, rv = tp.zeros(2), tp.ones(2)
    y = F.batch_norm(x, rm, rv, training=True, momentum=0.5, eps=0.0)
    _close(y, [[-1, -1], [1, 1]])
    _close(rm, [1.0, 2.5])  # halfway to the batch means [2, 5]
    _close(rv, [1.5, 1.5])  # halfway to the unbiased variance 2
    # Evaluation mode uses (and keeps) the running statistics.
    e = F.batch_norm(tp.tensor([[1.0, 2.5], [2.0, 4.0]]), rm, rv, eps=0.0)
    _close(e, [[0.0, 0.0], [1 / 1.5 ** 0.5, 1.5 / 1.5 ** 0.5]])
    _close(rm, [1.0, 2.5])
    # Affine, and the gradient of a normalized sum (zero for x, counts for the bias).
    w = tp.tensor([2.0, 3.0], requires_grad=True)
    b = tp.tensor([0.5, -1.0], requires_grad=True)
    y = F.batch_norm(x, None, None, w, b, True, 0.1, 0.0)
    _close(y, [[-1.5, -4.0], [2.5, 2.0]])
    y.sum().backward()
    _close(x.grad, [[0, 0], [0, 0]], atol=1e-6)
    _close(b.grad, [2, 2])
    _close(w.grad, [0, 0], atol=1e-6)


def test_batch_norm_4d_default_momentum():
    x = tp.tensor([[[[1.0, 3.0]], [[0.0, 0.0]]]])  # [1, 2, 1, 2]
    rm, rv = tp.zeros(2), tp.ones(2)
    y = F.batch_norm(x, rm, rv, training=True)
    _close(y, [[[[-1 / (1 + 1e-5) ** 0.5, 1 / (1 + 1e-5) ** 0.5]], [[0, 0]]]], atol=1e-6)
    _close(rm, [0.2, 0.0])  # 0.1 * mean 2
    _close(rv, [0.9 + 0.1 * 2.0, 0.9])  # unbiased variance 2 and 0


def test_group_norm_values_and_grad():
    x = tp.tensor([[1.0, 3.0, 5.0, 9.0]], requires_grad=True)
    _close(F.group_norm(x, 2, eps=0.0), [[-1, 1, -1, 1]])
    _close(F.group_norm(x, 1, eps=0.0), np.array([[-3.5, -1.5, 0.5, 4.5]]) / np.sqrt(8.75))
    w = tp.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    b = tp.tensor([0.0, 0.0, 1.0, 1.0], requires_grad=True)
    y = F.group_norm(x, 2, w, b, 0.0)
    _close(y, [[-1, 2, -2, 5]])
    F.group_norm(x, 2, eps=0.0).sum().backward()
    _close(x.grad, [[0, 0, 0, 0]], atol=1e-6)
    y.sum().backward()
    _close(b.grad, [1, 1, 1, 1])
    _close(w.grad, [-1, 1, -1, 1])
    assert F.group_norm(tp.ones(2, 6, 3, 3), 3).shape == (2, 6, 3, 3)
    # One value per group: it is its own mean, so the output is the bias.
    assert F.group_norm(x, 4, w, b).tolist() == [[0.0, 0.0, 1.0, 1.0]]


# ---- bad arguments ------------------------------------------------------------------------


@contextlib.contextmanager
def _raises(exc, *words):
    """pytest.raises whose message must name every word."""
    with pytest.raises(exc) as info:
        yield info
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_conv_bad_arguments():
    x, w = tp.ones(1, 2, 5, 5), tp.ones(4, 2, 3, 3)
    with _raises(ValueError, "conv2d", "input", "[5, 5]"):
        F.conv2d(tp.ones(5, 5), w)
    with _raises(ValueError, "conv2d", "weight"):
        F.conv2d(x, tp.ones(4, 2, 7, 7))  # kernel larger than the input
    with _raises(ValueError, "conv2d", "weight"):
        F.conv2d(x, tp.ones(4, 3, 3, 3))  # channel mismatch
    with _raises(ValueError, "conv2d", "stride", "(1, 2, 3)"):
        F.conv2d(x, w, stride=(1, 2, 3))
    with _raises(ValueError, "conv2d", "stride", "0"):
        F.conv2d(x, w, stride=0)
    with _raises(ValueError, "conv2d", "padding", "-1"):
        F.conv2d(x, w, padding=-1)
    with _raises(ValueError, "conv2d", "padding", "full"):
        F.conv2d(x, w, padding="full")
    with _raises(ValueError, "conv2d", "padding", "stride"):
        F.conv2d(x, w, stride=2, padding="same")
    with _raises(TypeError, "conv2d", "dilation", "1.5"):
        F.conv2d(x, w, dilation=1.5)
    with _raises(TypeError, "conv2d", "stride", "None"):
        F.conv2d(x, w, stride=None)
    with _raises(ValueError, "conv2d", "groups"):
        F.conv2d(x, w, groups=0)
    with _raises(ValueError, "conv2d", "groups"):
        F.conv2d(x, w, groups=3)
    with _raises(ValueError, "conv1d", "input"):
        F.conv1d(x, tp.ones(1, 2, 3))
    with _raises(ValueError, "conv1d", "weight"):
        F.conv1d(tp.ones(1, 2, 5), w)
    with _raises(ValueError, "conv1d", "padding", "stride 2"):
        F.conv1d(tp.ones(1, 2, 5), tp.ones(1, 2, 3), stride=2, padding="same")
    with _raises(RuntimeError, "conv2d", "dtype"):
        F.conv2d(x.double(), w)
    with _raises(ValueError, "conv1d", "stride", "(1, 1)"):
        F.conv1d(tp.ones(1, 2, 5), tp.ones(1, 2, 3), stride=(1, 1))


def test_pool_bad_arguments():
    x = tp.ones(1, 1, 4, 4)
    for f in (F.max_pool2d, F.avg_pool2d):
        name = f.__name__
        with _raises(ValueError, name, "input", "[4, 4]"):
            f(tp.ones(4, 4), 2)
        with _raises(ValueError, name, "kernel_size", "0"):
            f(x, 0)
        with _raises(ValueError, name, "kernel_size", "(2, 2, 2)"):
            f(x, (2, 2, 2))
        with _raises(TypeError, name, "kernel_size", "'a'"):
            f(x, "a")
        with _raises(ValueError, name + ":", "kernel_size"):
            f(x, 6)  # larger than the input
        with _raises(ValueError, name + ":", "padding"):
            f(x, 2, padding=2)  # more than half the kernel
        with _raises(RuntimeError, name + ":", "floating"):
            f(tp.ones(1, 1, 4, 4, dtype=tp.int64), 2)
        with _raises(ValueError, name, "stride"):
            f(x, 2, stride=(1, 1, 1))
    with _raises(ValueError, "divisor_override"):
        F.avg_pool2d(x, 2, divisor_override=0)
    with _raises(ValueError, "max_pool2d", "dilation"):
        F.max_pool2d(x, 2, dilation=0)
    with _raises(ValueError, "adaptive_avg_pool2d", "input"):
        F.adaptive_avg_pool2d(tp.ones(4), 2)
    with _raises(ValueError, "adaptive_avg_pool2d", "output_size", "0"):
        F.adaptive_avg_pool2d(x, 0)  # PyTorch: an empty result; refused here
    with _raises(ValueError, "adaptive_avg_pool2d", "output_size", "(3,)"):
        F.adaptive_avg_pool2d(x, (3,))
    with _raises(TypeError, "adaptive_avg_pool2d", "output_size", "None"):
        F.adaptive_avg_pool2d(x, None)


def test_norm_bad_arguments():
    with _raises(ValueError, "batch_norm", "running_mean", "None"):
        F.batch_norm(tp.ones(2, 3), None, None)  # evaluation mode needs running stats
    with _raises(ValueError, "batch_norm", "input"):
        F.batch_norm(tp.ones(1, 3), None, None, training=True)  # one value per channel
    with _raises(ValueError, "batch_norm", "input"):
        F.batch_norm(tp.ones(3), tp.zeros(3), tp.ones(3))  # rank 1
    with _raises(ValueError, "batch_norm", "weight", "[3]"):
        F.batch_norm(tp.ones(2, 3), tp.zeros(3), tp.ones(3), tp.ones(4))
    with _raises(ValueError, "batch_norm", "running_mean"):
        F.batch_norm(tp.ones(2, 3), tp.zeros(3), None)
    with _raises(ValueError, "group_norm", "num_groups", "3"):
        F.group_norm(tp.ones(2, 4), 3)
    with _raises(ValueError, "group_norm", "num_groups", "-1"):
        F.group_norm(tp.ones(2, 4), -1)
    with _raises(ValueError, "group_norm", "bias"):
        F.group_norm(tp.ones(2, 4), 2, None, tp.ones(2))


# ---- against PyTorch ----------------------------------------------------------------------


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _pair(a, requires_grad=True):
    torch = pytest.importorskip("torch")
    return (tp.tensor(a.tolist(), requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def _same(t, ref, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(t.tolist(), dtype=np.float32),
                               ref.detach().numpy(), rtol=rtol, atol=atol)


def _check_grads(ours, theirs, out_shape, rng, rtol=RTOL, atol=ATOL):
    """Backward of a random weighting of both outputs; compares each input's grad."""
    torch = pytest.importorskip("torch")
    g = _rand(rng, *out_shape)
    ours[0].backward(tp.tensor(g.tolist()))
    theirs[0].backward(torch.tensor(g))
    for a, b in zip(ours[1:], theirs[1:]):
        _same(a.grad, b.grad, rtol, atol)


CONV2D_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(1, 2), padding=(2, 0), dilation=(2, 1)),
    dict(padding="same", dilation=2),
    dict(padding="valid"),
    dict(groups=2, padding=1),
]


@pytest.mark.parametrize("kw", CONV2D_CASES)
def test_conv2d_against_torch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, tx = _pair(_rand(rng, 2, 4, 7, 6))
    w, tw = _pair(_rand(rng, 6, 4 // kw.get("groups", 1), 3, 3))
    b, tb = _pair(_rand(rng, 6))
    y = F.conv2d(x, w, b, **kw)
    ty = torch.nn.functional.conv2d(tx, tw, tb, **kw)
    assert y.shape == tuple(ty.shape)
    _same(y, ty, atol=1e-5)
    _check_grads((y, x, w, b), (ty, tx, tw, tb), ty.shape, rng, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2),
                                dict(padding="same"), dict(groups=3, padding=(1,))])
def test_conv1d_against_torch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, tx = _pair(_rand(rng, 2, 3, 9))
    w, tw = _pair(_rand(rng, 6, 3 // kw.get("groups", 1), 3))
    y = F.conv1d(x, w, **kw)
    ty = torch.nn.functional.conv1d(tx, tw, **kw)
    _same(y, ty, atol=1e-5)
    _check_grads((y, x, w), (ty, tx, tw), ty.shape, rng, atol=1e-5)


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=2, padding=1, ceil_mode=True),
])
def test_max_pool2d_against_torch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x, tx = _pair(_rand(rng, 2, 3, 7, 8))
    y, i = F.max_pool2d(x, return_indices=True, **kw)
    ty, ti = torch.nn.functional.max_pool2d(tx, return_indices=True, **kw)
    _same(y, ty)
    assert i.tolist() == ti.tolist()
    _check_grads((y, x), (ty, tx), ty.shape, rng)


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, divisor_override=3),
])
def test_avg_pool2d_against_torch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x, tx = _pair(_rand(rng, 2, 3, 7, 8))
    y = F.avg_pool2d(x, **kw)
    ty = torch.nn.functional.avg_pool2d(tx, **kw)
    _same(y, ty)
    _check_grads((y, x), (ty, tx), ty.shape, rng)


@pytest.mark.parametrize("size", [1, 3, (2, 5), (None, 3), (4, None), (7, 8)])
def test_adaptive_avg_pool2d_against_torch(size):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x, tx = _pair(_rand(rng, 2, 3, 7, 8))
    y = F.adaptive_avg_pool2d(x, size)
    ty = torch.nn.functional.adaptive_avg_pool2d(tx, size)
    _same(y, ty)
    _check_grads((y, x), (ty, tx), ty.shape, rng)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_against_torch(shape, affine):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, tx = _pair(_rand(rng, *shape))
    rm0, rv0 = _rand(rng, 3), np.abs(_rand(rng, 3)) + 0.5
    rm, trm = _pair(rm0, requires_grad=False)
    rv, trv = _pair(rv0, requires_grad=False)
    w, tw = _pair(_rand(rng, 3)) if affine else (None, None)
    b, tb = _pair(_rand(rng, 3)) if affine else (None, None)
    # Training: batch statistics, running ones updated in place.
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
    ty = torch.nn.functional.batch_norm(tx, trm, trv, tw, tb, training=True, momentum=0.3)
    _same(y, ty, atol=1e-5)
    _same(rm, trm)
    _same(rv, trv)
    grads = (x, w, b) if affine else (x,)
    tgrads = (tx, tw, tb) if affine else (tx,)
    _check_grads((y,) + grads, (ty,) + tgrads, ty.shape, rng, atol=1e-5)
    # Evaluation: the running statistics.
    x2, tx2 = _pair(_rand(rng, *shape))
    y = F.batch_norm(x2, rm, rv, w, b, eps=1e-3)
    ty = torch.nn.functional.batch_norm(tx2, trm, trv, tw, tb, eps=1e-3)
    _same(y, ty, atol=1e-5)
    _check_grads((y, x2), (ty, tx2), ty.shape, rng, atol=1e-5)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
@pytest.mark.parametrize("shape", [(2, 6), (2, 6, 5), (2, 6, 3, 4)])
def test_group_norm_against_torch(groups, shape):
    torch = pytest.importorskip("torch")
    if shape == (2, 6) and groups == 6:
        pytest.skip("one value per group: PyTorch's result is rounding noise times 1/sqrt(eps) "
                    "(ours is exactly the bias, see test_group_norm_values_and_grad)")
    rng = np.random.default_rng(6)
    x, tx = _pair(_rand(rng, *shape))
    w, tw = _pair(_rand(rng, 6))
    b, tb = _pair(_rand(rng, 6))
    y = F.group_norm(x, groups, w, b)
    ty = torch.nn.functional.group_norm(tx, groups, tw, tb)
    _same(y, ty, atol=1e-5)
    _check_grads((y, x, w, b), (ty, tx, tw, tb), ty.shape, rng, atol=1e-5)
