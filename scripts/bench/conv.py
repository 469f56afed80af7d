"""conv2d forward and forward+backward at ResNet-18 layer shapes: TensorPlay beside PyTorch eager.

Builds `runtime/benches/conv.rs` in release, then alternates it with a PyTorch twin (the same
shapes, dtype f32, bias, timing rule: median of 5 runs after a warm-up) for `--rounds` rounds
per thread count, and prints a Markdown table of the medians over rounds and the throughput
ratio TensorPlay / PyTorch (PyTorch time / TensorPlay time).

    python3 scripts/bench/conv.py --threads 1,2 --torch-python /path/to/venv/bin/python

`--variant NAME:VAR=VALUE[,VAR=VALUE]` (repeatable) adds a run of our binary with those
environment variables to every round (A/B of kernel choices in the same session, e.g.
`--variant per-image:TP_CONV_COLS=1 --variant direct:TP_CONV_ALGO=direct`); each variant gets
its own rows, its ratio against the same rounds' PyTorch.
"""

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

TWIN = r"""
import json, sys, time, torch
import torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1]))
for name, n, c, s, o, k, stride, pad in json.loads(sys.argv[2]):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, c, s, s, generator=g).requires_grad_()
    w = torch.randn(o, c, k, k, generator=g).requires_grad_()
    b = torch.randn(o, generator=g).requires_grad_()
    def med(f):
        f()
        t = []
        for _ in range(5):
            t0 = time.perf_counter(); f(); t.append((time.perf_counter() - t0) * 1e3)
        return sorted(t)[2]
    def fwd():
        with torch.no_grad():
            F.conv2d(x, w, b, stride, pad)
    go = torch.ones_like(F.conv2d(x, w, b, stride, pad))
    def fwd_bwd():
        y = F.conv2d(x, w, b, stride, pad)
        torch.autograd.grad([y], [x, w, b], [go])
    print(json.dumps({"shape": name, "fwd_ms": med(fwd), "fwd_bwd_ms": med(fwd_bwd)}))
"""


def bench_binary():
    out = subprocess.run(
        ["cargo", "build", "--release", "-p", "tensorplay-runtime", "--bench", "conv",
         "--message-format=json"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "conv" \
                and msg.get("executable"):
            return msg["executable"]
    raise RuntimeError("cargo built no conv bench executable")


def shapes():
    """The bench's shape table, read back from its source so both sides use the same list."""
    src = (ROOT / "runtime" / "benches" / "conv.rs").read_text()
    rows = []
    for m in re.finditer(r'\("([^"]+)",\s*([\d,\s]+)\)', src):
        rows.append([m.group(1)] + [int(v) for v in m.group(2).replace(" ", "").split(",") if v])
    return rows


def parse(out):
    return {r["shape"]: r for r in (json.loads(l) for l in out.splitlines() if l.startswith("{"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--variant", action="append", default=[])
    args = ap.parse_args()
    variants = [("default", {})]
    for v in args.variant:
        name, _, assigns = v.partition(":")
        variants.append((name, dict(a.split("=", 1) for a in assigns.split(",") if a)))
    exe = bench_binary()
    table = shapes()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| threads | shape | variant | TP fwd ms | PT fwd ms | TP fwd+bwd ms | PT fwd+bwd ms | "
          "fwd ratio | fwd+bwd ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for th in args.threads.split(","):
        ours, theirs = {v: {} for v, _ in variants}, {}
        for _ in range(args.rounds):
            runs = []
            for v, extra in variants:
                env = dict(os.environ, TP_NUM_THREADS=th, **extra)
                o = subprocess.run([exe], env=env, capture_output=True, text=True, check=True)
                runs.append((ours[v], o.stdout))
            t = subprocess.run([args.torch_python, "-c", TWIN, th, json.dumps(table)],
                               capture_output=True, text=True, check=True)
            runs.append((theirs, t.stdout))
            for d, out in runs:
                for k, r in parse(out).items():
                    d.setdefault(k, []).append(r)
        med = lambda rs, f: statistics.median(r[f] for r in rs)
        for name in theirs:
            b = theirs[name]
            bf, bb = med(b, "fwd_ms"), med(b, "fwd_bwd_ms")
            for v, _ in variants:
                a = ours[v][name]
                af, ab = med(a, "fwd_ms"), med(a, "fwd_bwd_ms")
                print(f"| {th} | {name} | {v} | {af:.1f} | {bf:.1f} | {ab:.1f} | {bb:.1f} | "
                      f"{bf / af:.2f} | {bb / ab:.2f} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
