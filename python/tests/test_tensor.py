"""Tensors from Python: factories, metadata, data access, operators, indexing, generated op
functions/methods, autograd, grad mode and numpy interop."""

import math

import pytest

import tensorplay as tp


def test_factories_and_metadata():
    x = tp.zeros(2, 3)
    assert x.shape == (2, 3) and x.ndim == 2 and x.numel() == 6
    assert x.dtype == tp.float32 and x.device == tp.device("cpu")
    assert tp.ones((2, 2), dtype=tp.float64).dtype == tp.float64
    assert tp.full([2], 7).tolist() == [7, 7] and tp.full([2], 7).dtype == tp.int64
    assert tp.arange(4).tolist() == [0, 1, 2, 3] and tp.arange(4).dtype == tp.int64
    assert tp.arange(0, 1, 0.5).tolist() == [0.0, 0.5]
    assert tp.empty(3).shape == (3,)
    tp.manual_seed(0)
    a = tp.randn(4, 5)
    tp.manual_seed(0)
    assert a.tolist() == tp.randn(4, 5).tolist()
    r = tp.rand(100)
    assert 0.0 <= r.min().item() and r.max().item() < 1.0
    assert repr(tp.float32) == "tensorplay.float32" and tp.float is tp.float32
    assert str(tp.device("cuda:1")) == "cuda:1" and tp.device("cuda", 1).index == 1


def test_tensor_from_data():
    t = tp.tensor([[1, 2], [3, 4]])
    assert t.dtype == tp.int64 and t.shape == (2, 2) and t.tolist() == [[1, 2], [3, 4]]
    assert tp.tensor([1.5, 2]).dtype == tp.float32
    assert tp.tensor([True, False]).dtype == tp.bool
    assert tp.tensor(3.0).item() == 3.0 and tp.tensor(3.0).shape == ()
    assert tp.tensor([1, 2], dtype=tp.float64).dtype == tp.float64
    with pytest.raises(ValueError):
        tp.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        tp.tensor(["a"])
    assert "tensor(" in repr(t)


def test_operators_with_tensors_and_scalars():
    x = tp.tensor([1.0, 2.0, 3.0])
    y = tp.tensor([4.0, 5.0, 6.0])
    assert (x + y).tolist() == [5.0, 7.0, 9.0]
    assert (x - 1).tolist() == [0.0, 1.0, 2.0]
    assert (1 - x).tolist() == [0.0, -1.0, -2.0]
    assert (x * 2).tolist() == [2.0, 4.0, 6.0] and (2 * x).tolist() == [2.0, 4.0, 6.0]
    assert (x / 2).tolist() == [0.5, 1.0, 1.5] and (6 / x).tolist() == [6.0, 3.0, 2.0]
    assert (x ** 2).tolist() == [1.0, 4.0, 9.0]
    assert (-x).tolist() == [-1.0, -2.0, -3.0]
    assert (x @ y).item() == 32.0
    assert (x < 2).tolist() == [True, False, False]
    assert (x >= y).tolist() == [False] * 3
    assert (x == tp.tensor([1.0, 0.0, 3.0])).tolist() == [True, False, True]
    # A Python scalar only raises the category: int tensor * 2 stays int, * 2.5 becomes float.
    i = tp.tensor([1, 2], dtype=tp.int32)
    assert (i * 2).dtype == tp.int32 and (i * 2.5).dtype == tp.float32
    z = tp.zeros(3)
    before = z
    z += x
    assert z is before and z.tolist() == [1.0, 2.0, 3.0]


def test_indexing_and_slicing():
    x = tp.arange(12).reshape(3, 4)
    assert x[0].tolist() == [0, 1, 2, 3]
    assert x[:, 1:3].tolist() == [[1, 2], [5, 6], [9, 10]]
    assert x[-1, -1].item() == 11
    assert x[x > 9].tolist() == [10, 11]
    assert x[tp.tensor([2, 0])].tolist() == [[8, 9, 10, 11], [0, 1, 2, 3]]
    assert x[None].shape == (1, 3, 4) and x[..., 0].tolist() == [0, 4, 8]
    x[0, 0] = 100
    assert x[0, 0].item() == 100
    with pytest.raises((IndexError, RuntimeError)):
        x[5]


def test_generated_ops_and_methods():
    x = tp.tensor([[1.0, -2.0], [3.0, -4.0]])
    assert tp.relu(x).tolist() == [[1.0, 0.0], [3.0, 0.0]] and x.relu().tolist() == tp.relu(x).tolist()
    assert x.sum().item() == -2.0 and x.sum(1).tolist() == [-1.0, -1.0]
    assert x.sum(dim=0, keepdim=True).shape == (1, 2)
    assert x.abs().max().item() == 4.0
    vals, idx = x.max(1)
    assert vals.tolist() == [1.0, 3.0] and idx.tolist() == [0, 0]
    assert tp.cat([x, x], dim=0).shape == (4, 2) and tp.stack([x, x]).shape == (2, 2, 2)
    assert x.transpose(0, 1).tolist() == [[1.0, 3.0], [-2.0, -4.0]] and x.T.shape == (2, 2)
    assert x.view(4).shape == (4,) and x.permute(1, 0).shape == (2, 2)
    assert x.unsqueeze(0).shape == (1, 2, 2) and x.flatten().shape == (4,)
    assert x.softmax(-1).sum(-1).tolist() == pytest.approx([1.0, 1.0])
    assert x.to(tp.float64).dtype == tp.float64 and x.long().dtype == tp.int64
    assert tp.where(x > 0, x, tp.zeros(2, 2)).tolist() == [[1.0, 0.0], [3.0, 0.0]]
    assert x.clamp(min=-1.0, max=1.0).tolist() == [[1.0, -1.0], [1.0, -1.0]]
    assert tp.nn.functional.gelu(x, approximate="tanh").shape == (2, 2)
    assert math.isclose(tp.exp(tp.tensor(1.0)).item(), math.e, rel_tol=1e-6)


def test_shape_errors_are_runtime_errors():
    with pytest.raises(RuntimeError, match="shape"):
        tp.ones(2, 3) + tp.ones(4)
    with pytest.raises(RuntimeError):
        tp.ones(2, 3) @ tp.ones(2, 3)


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError):
        tp.relu("x")
    with pytest.raises(TypeError):
        tp.softmax(tp.ones(2), dim=0, nope=1)


def test_autograd():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    assert y.grad_fn is not None and x.is_leaf
    w = tp.ones(3).requires_grad_()
    (g,) = tp.autograd.grad((w * 3).sum(), [w])
    assert g.tolist() == [3.0, 3.0, 3.0] and w.grad is None
    with tp.no_grad():
        z = x * 2
    assert not z.requires_grad and tp.is_grad_enabled()
    d = x.detach()
    assert not d.requires_grad
    v = x * 2
    v.backward(tp.ones(3))
    assert x.grad.tolist() == [4.0, 6.0, 8.0]
    x.grad = None
    assert x.grad is None

    @tp.no_grad()
    def f(a):
        return a * 2

    assert not f(x).requires_grad


def test_numpy_round_trip():
    np = pytest.importorskip("numpy")
    x = tp.arange(6, dtype=tp.float32).reshape(2, 3)
    a = x.numpy()
    assert a.shape == (2, 3) and a.dtype == np.float32
    x[0, 0] = 42.0
    assert a[0, 0] == 42.0  # shares memory
    t = x.T
    assert np.asarray(t).tolist() == t.tolist()  # strided view
    b = tp.from_numpy(np.array([[1, 2], [3, 4]], dtype=np.int64))
    assert b.dtype == tp.int64 and b.tolist() == [[1, 2], [3, 4]]
    with pytest.raises(RuntimeError, match="requires grad"):
        tp.ones(2, requires_grad=True).numpy()


def test_dlpack_round_trip():
    np = pytest.importorskip("numpy")
    x = tp.arange(6, dtype=tp.float64).reshape(2, 3)
    assert x.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(x)  # zero-copy export
    x[1, 2] = -1.0
    assert a[1, 2] == -1.0 and a.shape == (2, 3)
    y = tp.from_dlpack(np.arange(4, dtype=np.int32))
    assert y.dtype == tp.int32 and y.tolist() == [0, 1, 2, 3]


def test_torch_interop_when_available():
    torch = pytest.importorskip("torch")
    x = tp.randn(3, 4)
    t = torch.from_dlpack(x)
    assert t.tolist() == x.tolist()
    x[0, 0] = 5.0
    assert t[0, 0].item() == 5.0  # shared memory
    back = tp.from_dlpack(torch.ones(2, 2))
    assert back.tolist() == [[1.0, 1.0], [1.0, 1.0]]
