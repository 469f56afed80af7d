"""End-to-end training benchmark: TensorPlay's example models beside their PyTorch twins.

Runs `target/release/examples/{transformer,train_mlp}` (built first with `cargo build --release
--examples`) and `scripts/bench/torch_twins.py` alternately, `--rounds` times per thread count,
and prints a Markdown table of median step times and ratios. When torch cannot be imported by
`--torch-python`, the PyTorch columns come from `scripts/bench/recorded_torch.json` (numbers
recorded on the machine that file names) and the table says so.

    python3 scripts/bench/e2e.py --rounds 5 --threads 1,2 --torch-python /path/to/venv/bin/python

Measure on a quiet machine; the table prints the CPU model and the load average before and
after, so a noisy run shows itself.
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
RECORDED = ROOT / "scripts" / "bench" / "recorded_torch.json"
EXAMPLES = {"transformer": "transformer", "mlp": "train_mlp"}
STEP_LINE = re.compile(r"eager ([0-9.]+) ms, compiled ([0-9.]+) ms")


def cpu_model():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def isa():
    flags = pathlib.Path("/proc/cpuinfo").read_text()
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"


def run_tensorplay(model, threads, steps):
    exe = ROOT / "target" / "release" / "examples" / EXAMPLES[model]
    env = dict(os.environ, TP_NUM_THREADS=str(threads), STEPS=str(steps))
    out = subprocess.run([str(exe)], env=env, capture_output=True, text=True, check=True).stdout
    m = STEP_LINE.search(out)
    if m is None:
        raise RuntimeError(f"{exe.name}: no step-time line in its output:\n{out}")
    return float(m.group(1)), float(m.group(2))


def run_torch(python, model, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(
        [python, str(ROOT / "scripts" / "bench" / "torch_twins.py"), "--model", model,
         "--threads", str(threads), "--steps", str(steps)],
        env=env, capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["eager_ms"], r["compiled_ms"]


def torch_available(python):
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--models", default="transformer,mlp")
    ap.add_argument("--torch-python", default=sys.executable)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    models = args.models.split(",")
    live = torch_available(args.torch_python)
    recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    load0 = os.getloadavg()[0]
    rows = []
    for model in models:
        for t in threads:
            tp, th = [], []
            for _ in range(args.rounds):
                tp.append(run_tensorplay(model, t, args.steps))
                if live:
                    th.append(run_torch(args.torch_python, model, t, args.steps))
            med = lambda xs, i: statistics.median(x[i] for x in xs)
            if live:
                torch_e, torch_c = med(th, 0), med(th, 1)
            else:
                rec = recorded.get("results", {}).get(f"{model}/{t}")
                torch_e, torch_c = (rec["eager_ms"], rec["compiled_ms"]) if rec else (None, None)
            rows.append((model, t, med(tp, 0), med(tp, 1), torch_e, torch_c))
    load1 = os.getloadavg()[0]
    source = "same run" if live else f"recorded ({recorded.get('machine', 'no record')})"
    print(f"machine: {cpu_model()}, {isa()}, {os.cpu_count()} CPUs; load average "
          f"{load0:.2f} before, {load1:.2f} after; {args.rounds} rounds of {args.steps} steps, "
          f"medians; PyTorch: {source}")
    print()
    print("| model | threads | TP eager ms | TP compiled ms | torch eager ms | torch.compile ms "
          "| TP compiled vs torch eager | vs torch.compile | TP eager vs torch eager |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, t, e, c, te, tc in rows:
        fmt = lambda x: "n/a" if x is None else f"{x:.3f}"
        ratio = lambda a, b: "n/a" if a is None else f"{a / b:.2f}x"
        print(f"| {model} | {t} | {e:.3f} | {c:.3f} | {fmt(te)} | {fmt(tc)} | {ratio(te, c)} "
              f"| {ratio(tc, c)} | {ratio(te, e)} |")


if __name__ == "__main__":
    main()
