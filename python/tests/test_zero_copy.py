"""Zero-copy import: ``from_numpy`` and ``from_dlpack`` share the producer's memory, keep it alive
as long as a view needs it, and copy only what cannot be shared."""

import gc
import weakref

import pytest

import tensorplay as tp

np = pytest.importorskip("numpy")


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tp.from_numpy(a)
    assert t.shape == (2, 3) and t.dtype == tp.float32
    a[0, 1] = 10.0  # numpy -> tensor
    assert t[0, 1].item() == 10.0
    t[1, 2] = -3.0  # tensor -> numpy
    assert a[1, 2] == -3.0
    t.add_(1.0)  # an in-place kernel writes the numpy memory
    assert a.tolist() == [[1.0, 11.0, 3.0], [4.0, 5.0, -2.0]]
    assert np.shares_memory(np.asarray(t), a)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "bool"])
def test_from_numpy_dtypes(dtype):
    a = (np.arange(5) % 2).astype(dtype)
    t = tp.from_numpy(a)
    assert t.tolist() == a.tolist()
    assert np.shares_memory(np.asarray(t), a)


def test_from_numpy_strided_views_are_shared():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    for view in (base[:, 1:5:2], base.T, base[::-1, ::-2], base[1]):
        t = tp.from_numpy(view)
        assert t.shape == view.shape and t.tolist() == view.tolist()
        t.mul_(2.0)
        assert np.shares_memory(np.asarray(t), base)
        assert np.asarray(t).tolist() == view.tolist()
    # Compiled kernels read the strided memory too.
    v = base[:, ::2]
    f = tp.compile(lambda x: (x * 2 + 1).relu())
    assert f(tp.from_numpy(v)).tolist() == (v * 2 + 1).clip(0).tolist()


def test_lifetimes():
    a = np.ones((3, 4), dtype=np.float32)
    ref = weakref.ref(a)
    t = tp.from_numpy(a)
    view = t[1:]
    del a, t
    gc.collect()
    assert ref() is not None  # the view keeps the array alive
    assert view.sum().item() == 8.0
    view.fill_(2.0)
    assert ref().tolist()[1:] == [[2.0] * 4] * 2
    del view
    gc.collect()
    assert ref() is None  # released with the last view
    # Dropping the tensor leaves the array as it was.
    b = np.full(4, 7, dtype=np.int64)
    t = tp.from_numpy(b)
    del t
    gc.collect()
    assert b.tolist() == [7, 7, 7, 7]


def test_results_never_reuse_numpy_memory():
    # An intermediate of a compiled graph must never land in a numpy array's memory, even after
    # the array's last tensor is gone (the buffer arena skips memory of other owners).
    f = tp.compile(lambda x: (x.reshape(-1) + 1.0) * 2.0)
    for _ in range(3):
        a = np.zeros(1024, dtype=np.float32)
        out = f(tp.from_numpy(a))
        gc.collect()
        b = np.zeros(1024, dtype=np.float32)
        out2 = f(tp.from_numpy(b))
        assert a.tolist() == [0.0] * 1024 and b.tolist() == [0.0] * 1024
        assert out.tolist() == out2.tolist() == [2.0] * 1024


def test_copies_what_cannot_be_shared():
    ro = np.arange(4, dtype=np.float32)
    ro.flags.writeable = False
    t = tp.from_numpy(ro)  # read-only: copied
    t.add_(1.0)
    assert ro.tolist() == [0.0, 1.0, 2.0, 3.0] and t.tolist() == [1.0, 2.0, 3.0, 4.0]
    raw = np.zeros(4 * 4 + 1, dtype=np.uint8)[1:].view(np.float32)  # misaligned address
    raw[:] = [1, 2, 3, 4]
    assert tp.from_numpy(raw).tolist() == [1.0, 2.0, 3.0, 4.0]
    big = np.arange(3, dtype=">f8")  # non-native byte order
    assert tp.from_numpy(big).tolist() == [0.0, 1.0, 2.0]
    assert tp.from_numpy(np.zeros((0, 3), dtype=np.float32)).shape == (0, 3)
    with pytest.raises(TypeError, match="np.ndarray"):
        tp.from_numpy([1.0, 2.0])
    with pytest.raises(TypeError, match="complex"):
        tp.from_numpy(np.zeros(2, dtype=np.complex64))


def test_from_dlpack_numpy_shares_memory():
    a = np.arange(4, dtype=np.int32)
    t = tp.from_dlpack(a)
    t[0] = 42
    assert a[0] == 42
    a[3] = -1
    assert t[3].item() == -1


def test_torch_round_trip_shares_memory():
    torch = pytest.importorskip("torch")
    src = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = tp.from_dlpack(src)
    t[0, 0] = 100.0
    assert src[0, 0].item() == 100.0
    src[1, 1] = -5.0
    assert t[1, 1].item() == -5.0
    back = torch.from_dlpack(t)  # and out again, still the same memory
    back.add_(1.0)
    assert src.tolist() == t.tolist() == [[101.0, 2.0, 3.0], [4.0, -4.0, 6.0]]
    # The producer can go first: the tensor keeps its memory.
    ref = weakref.ref(src)
    del src, back
    gc.collect()
    assert t.tolist() == [[101.0, 2.0, 3.0], [4.0, -4.0, 6.0]]
    del t
    gc.collect()
    assert ref() is None
    # A strided PyTorch view.
    base = torch.arange(12.0).reshape(3, 4)
    v = tp.from_dlpack(base[:, 1::2])
    v.fill_(0.0)
    assert base[:, 1].tolist() == [0.0, 0.0, 0.0] and base[:, 0].tolist() == [0.0, 4.0, 8.0]
