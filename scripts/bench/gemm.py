"""GFLOPS of TensorPlay's matrix products beside PyTorch's at the same shapes, same run.

Builds `benches/gemm.rs` in release, then alternates it with a PyTorch twin (the same shapes,
layouts and timing rule) for `--rounds` rounds per thread count and prints a Markdown table of
median GFLOPS and the ratio TensorPlay / PyTorch.

    python3 scripts/bench/gemm.py --threads 1,2 --torch-python /path/to/venv/bin/python
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

TWIN = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
SHAPES = json.loads(sys.argv[2])
for name, b, m, k, n, ta, tb in SHAPES:
    def operand(rows, cols, t):
        dims = (cols, rows) if t else (rows, cols)
        z = torch.randn(*(((b,) if b > 1 else ()) + dims))
        return z.transpose(-1, -2) if t else z
    x, y = operand(m, k, ta), operand(k, n, tb)
    flops = 2.0 * b * m * n * k
    x @ y
    rates = []
    for _ in range(5):
        t0, reps = time.perf_counter(), 0
        while reps == 0 or time.perf_counter() - t0 < 0.2:
            x @ y
            reps += 1
        rates.append(flops * reps / (time.perf_counter() - t0) / 1e9)
    print(json.dumps({"shape": name, "gflops": sorted(rates)[2]}))
"""


def bench_binary():
    out = subprocess.run(
        ["cargo", "build", "--release", "--bench", "gemm", "--message-format=json"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "gemm" \
                and msg.get("executable"):
            return msg["executable"]
    raise RuntimeError("cargo built no gemm bench executable")


def shapes_of(exe):
    """The bench's shape table, read back from its source so both sides use the same list."""
    src = (ROOT / "benches" / "gemm.rs").read_text()
    rows = []
    for line in src.splitlines():
        line = line.strip()
        if line.startswith('("') and line.endswith("),"):
            parts = [p.strip() for p in line[1:-2].split(",")]
            name = parts[0].strip('"')
            b, m, k, n = (int(p) for p in parts[1:5])
            rows.append([name, b, m, k, n, parts[5] == "true", parts[6] == "true"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--filter", default="")
    ap.add_argument("--torch-python", default=sys.executable)
    args = ap.parse_args()
    exe = bench_binary()
    shapes = [s for s in shapes_of(exe) if args.filter in s[0]]
    live = subprocess.run([args.torch_python, "-c", "import torch"],
                          capture_output=True).returncode == 0
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| shape | threads | TensorPlay GFLOPS | PyTorch GFLOPS | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for t in (int(x) for x in args.threads.split(",")):
        ours, theirs = {}, {}
        for _ in range(args.rounds):
            env = dict(os.environ, TP_NUM_THREADS=str(t))
            out = subprocess.run([exe, args.filter] if args.filter else [exe], env=env,
                                 capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                r = json.loads(line)
                ours.setdefault(r["shape"], []).append(r["gflops"])
            if live:
                out = subprocess.run([args.torch_python, "-c", TWIN, str(t), json.dumps(shapes)],
                                     env=dict(os.environ, OMP_NUM_THREADS=str(t)),
                                     capture_output=True, text=True, check=True).stdout
                for line in out.splitlines():
                    r = json.loads(line)
                    theirs.setdefault(r["shape"], []).append(r["gflops"])
        for s in shapes:
            a = statistics.median(ours[s[0]])
            b = statistics.median(theirs[s[0]]) if live else None
            ratio = f"{a / b:.2f}" if b else "n/a"
            tb = f"{b:.1f}" if b else "n/a"
            print(f"| {s[0]} | {t} | {a:.1f} | {tb} | {ratio} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
