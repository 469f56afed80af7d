"""Per-call overhead of the Python front (issue 34, item 9), PyTorch side by side when importable.

Measures, per call (median over alternating rounds; each round times a batch of calls of every
case, in forward then reverse order so that drift and cache effects fall on both sides alike):

- a ``tensorplay.library.custom_op`` whose kernel is a Python function, against calling that
  function directly: without autograd (inputs that do not require grad) and with autograd
  recording (an input that requires grad, a registered backward);
- eager ``x + y`` on 16 float32 elements;
- a ``tensorplay.compile``d function call (``x + y`` on 16 elements);
- the anchor workloads W1-W6 (float32, 2^20 elements; see benches/fusion.rs) compiled from
  Python, to compare with ``cargo bench --bench fusion -- '_2\\^20/compiled/'`` (the same
  kernels driven from Rust);
- with PyTorch importable: ``torch.library.custom_op`` against the direct call, eager add, and a
  ``torch.compile``d call (skipped with the reason when torch.compile cannot build here).

Run (from the repository root, after ``maturin develop --release`` into target/pyenv)::

    target/pyenv/bin/python python/bench/overhead.py [--rounds 15] [--no-torch]
    # with PyTorch from another environment of the same Python version:
    PYTHONPATH=/path/to/torch/site-packages target/pyenv/bin/python python/bench/overhead.py
"""

import argparse
import os
import statistics
import sys
import time

import tensorplay as tp


def per_call_us(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def measure(cases, rounds, target_s=0.02):
    """``cases``: name -> zero-argument callable. Returns name -> (median, min) microseconds per
    call over the rounds (the minimum shows how far a loaded machine spreads the median)."""
    calls = {}
    for name, fn in cases.items():
        fn()  # warm up (compiles, caches)
        n = 1
        while True:
            t = per_call_us(fn, n) * n / 1e6
            if t >= target_s / 4 or n >= 1 << 20:
                break
            n *= 4
        calls[name] = max(1, int(n * target_s / max(t, 1e-9)))
    samples = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            samples[name].append(per_call_us(cases[name], calls[name]))
    return {name: (statistics.median(v), min(v)) for name, v in samples.items()}


# -- the cases ---------------------------------------------------------------------------------

def tp_cases():
    cases = {}

    def kernel(x):
        return x * 2.0

    op = tp.library.custom_op("bench_overhead::scale", mutates_args=())(kernel)
    op.register_fake(lambda x: tp.empty_like(x))
    op.register_autograd(lambda ctx, g: g * 2.0)
    x = tp.randn(16)
    xg = tp.randn(16, requires_grad=True)
    y = tp.randn(16)
    cases["tp custom_op (Python kernel), no grad"] = lambda: op(x)
    cases["tp direct kernel call, no grad"] = lambda: kernel(x)
    cases["tp custom_op (Python kernel), autograd"] = lambda: op(xg)
    cases["tp direct kernel call, autograd"] = lambda: kernel(xg)
    cases["tp eager x + y (16)"] = lambda: x + y
    # Timing splits: the generic op call without the Python operator / CustomOpDef wrapper,
    # and the harness's own cost (an empty lambda).
    call, qual = tp._C._call, "bench_overhead::scale"
    cases["split: _C._call('tp::add') (16)"] = lambda: call("tp::add", (x, y))
    cases["split: _C._call(custom op), no grad"] = lambda: call(qual, (x,), None)

    # The call as CustomOpDef made it before issue 34 item 9's second round: a Python method
    # forwarding to the generic call (which releases the GIL around the dispatcher).
    def wrapper(*args, **kwargs):
        return call(qual, args, kwargs or None)

    cases["split: Python wrapper over _C._call (old CustomOpDef path), no grad"] = lambda: wrapper(x)
    cases["split: empty lambda (harness)"] = lambda: None
    add = tp.compile(lambda a, b: a + b)
    cases["tp compiled call x + y (16)"] = lambda: add(x, y)
    return cases


def workloads(lib, n=1 << 20, cols=1024):
    """W1-W6 as functions of ``lib`` (tensorplay or torch) and their inputs."""
    lib.manual_seed(0)
    randn, rand = lib.randn, lib.rand

    def w1(x):
        return x * 0.5 * ((x + x ** 3 * 0.044715) * 0.7978845608).tanh().add(1.0)

    def w2(a, b):
        return a * a.sigmoid() * b

    def w3(x, bias, r):
        return (x + bias).relu() + r

    def w4(x, w):
        return (x * w).sum()

    def w5(x):
        return x.softmax(-1)

    def w6(x):
        num = ((x * 1.1 + 0.3) * x - 0.7)
        return (num / (x * x + 1.0) + x).abs().sqrt()

    return {
        "W1_gelu_tanh": (w1, [randn(n)]),
        "W2_silu_mul": (w2, [randn(n), randn(n)]),
        "W3_bias_relu_add": (w3, [randn(n // cols, cols), randn(cols), randn(n // cols, cols)]),
        "W4_weighted_sum": (w4, [rand(n), rand(n)]),
        "W5_softmax": (w5, [randn(n // cols, cols)]),
        "W6_chain10": (w6, [randn(n)]),
    }


def tp_workload_cases():
    cases = {}
    for name, (f, args) in workloads(tp).items():
        c = tp.compile(f)
        cases[f"tp compiled {name} 2^20"] = (lambda c=c, args=args: c(*args))
    return cases


def torch_cases(torch):
    cases, notes = {}, []
    torch.set_grad_enabled(True)

    def kernel(x):
        return x * 2.0

    @torch.library.custom_op("bench_overhead::scale", mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        return kernel(x)

    op.register_fake(lambda x: torch.empty_like(x))
    op.register_autograd(lambda ctx, g: g * 2.0)
    x = torch.randn(16)
    xg = torch.randn(16, requires_grad=True)
    y = torch.randn(16)
    cases["torch custom_op (Python kernel), no grad"] = lambda: op(x)
    cases["torch direct kernel call, no grad"] = lambda: kernel(x)
    cases["torch custom_op (Python kernel), autograd"] = lambda: op(xg)
    cases["torch direct kernel call, autograd"] = lambda: kernel(xg)
    cases["torch eager x + y (16)"] = lambda: x + y
    try:
        add = torch.compile(lambda a, b: a + b)
        t0 = time.perf_counter()
        add(x, y)
        notes.append(f"torch.compile first call (compilation): {time.perf_counter() - t0:.1f} s")
        cases["torch compiled call x + y (16)"] = lambda: add(x, y)
    except Exception as e:  # no C++ toolchain for inductor, ...
        notes.append(f"torch.compile unavailable here: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    return cases, notes


def main():
    p = argparse.ArgumentParser(description="Per-call overhead of the Python front")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-workloads", action="store_true")
    a = p.parse_args()

    torch, notes = None, []
    if not a.no_torch:
        try:
            import torch
        except ImportError:
            notes.append("torch not importable: PyTorch columns skipped")
    small = tp_cases()
    if torch is not None:
        tc, tnotes = torch_cases(torch)
        small.update(tc)
        notes += tnotes
    res = measure(small, a.rounds)
    if not a.no_workloads:
        res.update(measure(tp_workload_cases(), max(5, a.rounds // 2), target_s=0.1))

    print(f"python {sys.version.split()[0]}, TP_NUM_THREADS={os.environ.get('TP_NUM_THREADS', '(default)')}, "
          f"load average {os.getloadavg()[0]:.2f}, {a.rounds} rounds")
    for n in notes:
        print("#", n)
    width = max(map(len, res))
    print(f"{'case':<{width}}  {'median':>10}  {'min':>10}  (us per call)")
    for name, (med, lo) in res.items():
        print(f"{name:<{width}}  {med:10.3f}  {lo:10.3f}")

    def diff(lib, mode):
        k = f"{lib} custom_op (Python kernel), {mode}"
        d = f"{lib} direct kernel call, {mode}"
        if k in res and d in res:
            print(f"{lib} custom_op overhead over the direct call, {mode}: "
                  f"{res[k][0] - res[d][0]:.3f} us (medians), {res[k][1] - res[d][1]:.3f} us (minima)")

    for lib in ("tp", "torch"):
        for mode in ("no grad", "autograd"):
            diff(lib, mode)


if __name__ == "__main__":
    main()
