"""Where the PyTorch twin's transformer step goes: `torch.profiler` self CPU time of every aten op
over `--steps` eager training steps (after warm-up), grouped into the op classes of
TensorPlay's own `TP_LOGS=profile` table (docs/PERFORMANCE.md, "The transformer step").

    python scripts/bench/torch_profile.py --threads 1 --steps 40

Prints one line per class: milliseconds per step and share of the profiled time. The
profiler adds its own overhead per op (PyTorch's eager step runs ~150 ops forward and
backward), so compare shares, and take step times from `e2e.py`.
"""

import argparse
import collections
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_twins  # noqa: E402

CLASSES = [
    ("matmul (mm, addmm, bmm)", ("aten::mm", "aten::addmm", "aten::bmm")),
    ("attention (sdpa fwd + bwd)", ("flash_attention", "scaled_dot_product", "efficient_attention")),
    ("layer_norm fwd + bwd", ("layer_norm",)),
    ("gelu fwd + bwd", ("aten::gelu",)),
    ("embedding, cross_entropy fwd + bwd", ("embedding", "log_softmax", "nll_loss", "index_select",
                                            "index_add", "embedding_dense_backward")),
    ("optimizer (foreach Adam)", ("_foreach_", "lerp")),
    ("sums (bias grads), fills, copies", ("aten::sum", "aten::fill_", "aten::copy_", "aten::zero_",
                                         "aten::zeros", "aten::empty", "aten::clone", "aten::cat")),
    ("other elementwise (add, mul...)", ("aten::add", "aten::mul", "aten::div", "aten::sub")),
]


def classify(name):
    for label, keys in CLASSES:
        if any(k in name for k in keys):
            return label
    return "other (views, autograd bookkeeping...)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    context, dim, heads, layers = 32, 64, 4, 2
    vocab, sample = torch_twins.transformer_batches(context, 16)
    ps = torch_twins.transformer_params(vocab, context, dim, layers)
    opt = torch.optim.Adam(ps, lr=3e-3, betas=(0.9, 0.99), eps=1e-8, foreach=True)

    def step(i):
        ids, targets = sample(i)
        loss = torch_twins.transformer_loss(ids, targets, ps, dim, heads, layers)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    for i in range(5):
        step(i)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(args.steps):
            step(5 + i)
    totals = collections.Counter()
    for e in prof.key_averages():
        totals[classify(e.key)] += e.self_cpu_time_total
    whole = sum(totals.values())
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} steps, "
          f"profiled self CPU time {whole / args.steps / 1e3:.3f} ms per step")
    for label, us in totals.most_common():
        print(f"  {label:<42} {us / args.steps / 1e3:8.3f} ms {100 * us / whole:6.1f} %")


if __name__ == "__main__":
    main()
