"""The CNN training step of `examples/cnn.rs` (eager and compiled) beside its PyTorch twin
(eager and torch.compile): the same model (conv 1→8 → group norm → relu → max pool → conv 8→16
→ group norm → relu → max pool → global average pool → linear 16→4), batch 32 of 16×16 images,
cross-entropy, Adam (lr 1e-2). Each side reports the median step time (forward, backward,
optimizer step) over its steps after the first; the runs alternate for `--rounds` rounds per
thread count, and the table gives the median of the rounds.

    python3 scripts/bench/cnn.py --threads 1,2 --rounds 3 --torch-python /path/to/venv/bin/python
"""

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

TWIN = r"""
import sys, time, torch
import torch.nn as nn
import torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1]))
steps, compiled = int(sys.argv[2]), sys.argv[3] == "1"
torch.manual_seed(7)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(), nn.MaxPool2d(2),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
loss_fn = lambda x, y: F.cross_entropy(model(x), y)
if compiled:
    loss_fn = torch.compile(loss_fn)
g = torch.Generator().manual_seed(1)
times = []
for step in range(steps):
    x = torch.rand(32, 1, 16, 16, generator=g)
    y = torch.randint(0, 4, (32,), generator=g)
    t0 = time.perf_counter()
    loss = loss_fn(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - t0)
warm = sorted(times[max(1, steps // 3):])
print(f"step {warm[len(warm) // 2] * 1e3:.3f} ms")
"""


def ours(threads, steps):
    env = dict(os.environ, TP_NUM_THREADS=str(threads), STEPS=str(steps))
    out = subprocess.run([str(ROOT / "target/release/examples/cnn")], env=env, check=True,
                         capture_output=True, text=True).stdout
    t = dict(re.findall(r"^(eager|compiled): final loss .* step ([0-9.]+) ms$", out, re.M))
    return float(t["eager"]), float(t["compiled"])


def twin(py, threads, steps, compiled):
    out = subprocess.run([py, "-c", TWIN, str(threads), str(steps), "1" if compiled else "0"],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"step ([0-9.]+) ms", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--torch-python", required=True)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "cnn"], cwd=ROOT,
                   check=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print("| threads | TP eager ms | TP compiled ms | torch eager ms | torch.compile ms "
          "| TP compiled vs torch eager / torch.compile |")
    print("|---|---|---|---|---|---|")
    for t in [int(v) for v in a.threads.split(",")]:
        rows = []
        for _ in range(a.rounds):
            e, c = ours(t, a.steps)
            rows.append((e, c, twin(a.torch_python, t, a.steps, False),
                         twin(a.torch_python, t, a.steps, True)))
        e, c, te, tc = (statistics.median(r[i] for r in rows) for i in range(4))
        print(f"| {t} | {e:.2f} | {c:.2f} | {te:.2f} | {tc:.2f} | {te / c:.2f}x / {tc / c:.2f}x |")
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
