"""``tensorplay.compile`` from Python, and the GIL: Python kernels called from the Rust thread pool
(TP_NUM_THREADS=2 in a subprocess, large tensors) must not deadlock."""

import os
import subprocess
import sys
import textwrap

import pytest

import tensorplay as tp


def test_compile_matches_eager_and_decorator():
    def block(x, b):
        h = (x + b).relu()
        return (h * 0.5).softmax(-1), (h * h).sum(1)

    f = tp.compile(block)
    x, b = tp.randn(4, 8), tp.randn(8)
    got = f(x, b)
    want = block(x, b)
    for g, w in zip(got, want):
        assert g.flatten().tolist() == pytest.approx(w.flatten().tolist(), rel=1e-5, abs=1e-6)
    assert f.num_compiled == 1
    f(tp.randn(6, 8), tp.randn(8))  # another size: the dynamic graph serves it
    assert f.num_compiled == 1
    assert "tp::relu" in f.graph() and f.explain()

    @tp.compile
    def g(x):
        return x.exp() + 1

    assert g(tp.zeros(3)).tolist() == [2.0, 2.0, 2.0]

    @tp.compile()
    def h(x, k):
        return x * k

    assert h(tp.ones(2), 3).tolist() == [3.0, 3.0]
    assert h(tp.ones(2), 4).tolist() == [4.0, 4.0]


def test_compiled_gradient():
    w = tp.randn(8, 4, requires_grad=True)
    f = tp.compile(lambda x, w: (x @ w).tanh().sum())
    x = tp.randn(3, 8)
    f(x, w).backward()
    g1 = w.grad.flatten().tolist()
    w.grad = None
    (x @ w).tanh().sum().backward()
    assert g1 == pytest.approx(w.grad.flatten().tolist(), rel=1e-4, abs=1e-5)


GIL_SCRIPT = textwrap.dedent(
    """
    import threading
    import tensorplay as tp
    from tensorplay import library

    @library.custom_op("gil::bump", mutates_args=())
    def bump(x: tp.Tensor) -> tp.Tensor:
        return x + 1

    bump.register_fake(lambda x: tp.empty(*x.shape))
    big = tp.randn(1 << 20)

    # A compiled graph with big fused regions (thread pool) around the Python kernel.
    f = tp.compile(lambda x: (bump((x * 2).exp()) * 3).sum())
    for _ in range(3):
        f(big)

    # vmap over a Python kernel of a large batch, and eager pool-sized ops between Python calls.
    out = tp.vmap(lambda r: bump(r) * 2)(big.reshape(1024, 1024))
    assert out.shape == (1024, 1024)

    # Python threads calling into Rust at the same time.
    errs = []
    def work():
        try:
            for _ in range(5):
                f(big)
                bump(big).sum().item()
        except Exception as e:  # noqa: BLE001
            errs.append(e)
    ts = [threading.Thread(target=work) for _ in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs, errs
    print("ok")
    """
)


def test_python_kernels_from_pool_threads_do_not_deadlock():
    env = dict(os.environ, TP_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", GIL_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")


def test_bad_input_is_an_error_not_a_panic():
    # Sizes whose byte count overflows: a RuntimeError (pyo3 would turn a Rust panic into
    # PanicException, a BaseException, which this would not catch).
    with pytest.raises(RuntimeError, match="too large"):
        tp.zeros(1 << 40, 1 << 40)
    with pytest.raises(RuntimeError):
        tp.full([1 << 40, 1 << 40], 1.0)
    with pytest.raises(IndexError):
        tp.zeros(2, 2)[0, 0, 0]


def test_quickstart_example_runs():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "python", "quickstart.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "compiled loss" in r.stdout and "dloss/dx has shape (4, 8)" in r.stdout


def test_training_example_loss_falls():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "python", "train.py"), "--steps", "40",
                        "--batch", "64", "--hidden", "16", "--lr", "0.03"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    losses = [float(line.split("loss ")[1].split()[0]) for line in r.stdout.splitlines() if line.startswith("step")]
    assert len(losses) >= 2 and losses[-1] < 0.5 * losses[0], r.stdout
    assert "median step time" in r.stdout


def test_compiled_fast_path_and_constant_arguments_agree():
    # All-tensor calls take a fast path once seen; constants and kwargs still select their own
    # compiled entries, and a single-output function returns a tensor on either path.
    f = tp.compile(lambda x, y, scale=1.0: (x + y) * scale)
    x, y = tp.ones(3), tp.full([3], 2.0)
    assert f(x, y).tolist() == [3.0] * 3
    assert f(x, y).tolist() == [3.0] * 3  # fast path
    assert f(x, 5.0).tolist() == [6.0] * 3  # a constant: slow path, its own entry
    assert f(x, y, scale=2.0).tolist() == [6.0] * 3  # kwargs: slow path
    assert f(y, y).tolist() == [4.0] * 3  # fast path with other tensors
    g = tp.compile(lambda x: (x * 2, x + 1))
    a, b = g(x)
    a2, b2 = g(x)
    assert (a.tolist(), b.tolist()) == (a2.tolist(), b2.tolist()) == ([2.0] * 3, [2.0] * 3)
