"""PyTorch twins of TensorPlay's example models, timed the way the examples time themselves.

Each twin builds the same model as its Rust example (same sizes, initial scales, Adam settings and
batch sampler), trains `--steps` steps eagerly and under `torch.compile`, and prints one JSON line:
`{"model": ..., "threads": ..., "eager_ms": ..., "compiled_ms": ...}` with the median step time
after the first (warm-up) step. `scripts/bench/e2e.py` runs it beside the Rust examples.

    python scripts/bench/torch_twins.py --model transformer --threads 1 --steps 60
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

TEXT = (
    "the quick brown fox jumps over the lazy dog. "
    "a small model learns the text one character at a time. "
    "attention looks back at what came before, never ahead. "
    "the loss goes down as the model remembers the words. "
)


def transformer_params(vocab, context, dim, layers):
    g = torch.Generator().manual_seed(0)

    def p(*shape, scale):
        return (torch.randn(*shape, generator=g) * scale).requires_grad_(True)

    def ones(n):
        return torch.ones(n, requires_grad=True)

    def zeros(n):
        return torch.zeros(n, requires_grad=True)

    s = 1.0 / math.sqrt(dim)
    v = [p(vocab, dim, scale=0.1), p(context, dim, scale=0.1)]
    for _ in range(layers):
        v += [
            ones(dim), zeros(dim),
            p(3 * dim, dim, scale=s),
            p(dim, dim, scale=s / math.sqrt(2 * layers)),
            ones(dim), zeros(dim),
            p(4 * dim, dim, scale=s), zeros(4 * dim),
            p(dim, 4 * dim, scale=0.5 * s / math.sqrt(2 * layers)), zeros(dim),
        ]
    v += [ones(dim), zeros(dim), p(vocab, dim, scale=s)]
    return v


def transformer_loss(ids, targets, p, dim, heads, layers):
    b, t = ids.shape
    hd = dim // heads
    x = F.embedding(ids, p[0]) + p[1][:t]
    for l in range(layers):
        q = p[2 + l * 10: 2 + (l + 1) * 10]
        a = F.layer_norm(x, (dim,), q[0], q[1], 1e-5)
        qkv = F.linear(a, q[2]).chunk(3, -1)
        qh, kh, vh = (z.reshape(b, t, heads, hd).transpose(1, 2) for z in qkv)
        y = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        x = x + F.linear(y.transpose(1, 2).reshape(b, t, dim), q[3])
        m = F.layer_norm(x, (dim,), q[4], q[5], 1e-5)
        m = F.gelu(F.linear(m, q[6], q[7]), approximate="tanh")
        x = x + F.linear(m, q[8], q[9])
    f = 2 + layers * 10
    x = F.layer_norm(x, (dim,), p[f], p[f + 1], 1e-5)
    logits = F.linear(x, p[f + 2])
    return F.cross_entropy(logits.reshape(b * t, -1), targets.reshape(b * t))


def transformer_batches(context, batch):
    chars = sorted(set(TEXT))
    data = [chars.index(c) for c in TEXT]

    def sample(step):
        ids, targets = [], []
        for i in range(batch):
            r = (step * batch + i) * 6364136223846793005 + 1442695040888963407
            start = ((r % 2**64) >> 33) % (len(data) - context - 1)
            ids.append(data[start:start + context])
            targets.append(data[start + 1:start + context + 1])
        return torch.tensor(ids), torch.tensor(targets)

    return len(chars), sample


def mlp_setup():
    batch, dim, hidden, out = 64, 32, 256, 8
    g = torch.Generator().manual_seed(10)
    x = torch.randn(batch, dim, generator=g)
    a = torch.randn(dim, out, generator=g) * 0.3
    y = torch.tanh(x @ a)

    def params():
        return [
            (torch.randn(dim, hidden, generator=g) / math.sqrt(dim)).requires_grad_(True),
            torch.zeros(hidden, requires_grad=True),
            (torch.randn(hidden, out, generator=g) / math.sqrt(hidden)).requires_grad_(True),
            torch.zeros(out, requires_grad=True),
        ]

    def loss(x, y, w1, b1, w2, b2):
        h = F.gelu(x @ w1 + b1, approximate="tanh")
        d = h @ w2 + b2 - y
        return (d * d).mean()

    return params, loss, lambda step: (x, y), (0.9, 0.999)


def run(model, compiled, steps):
    if model == "transformer":
        context, dim, heads, layers = 32, 64, 4, 2
        vocab, sample = transformer_batches(context, 16)
        ps = transformer_params(vocab, context, dim, layers)

        def loss(ids, targets, *p):
            return transformer_loss(ids, targets, p, dim, heads, layers)

        betas = (0.9, 0.99)
    else:
        make, loss, sample, betas = mlp_setup()
        ps = make()
    f = torch.compile(loss) if compiled else loss
    opt = torch.optim.Adam(ps, lr=3e-3, betas=betas, eps=1e-8, foreach=True)
    times = []
    for step in range(steps):
        a, b = sample(step)
        t0 = time.perf_counter()
        l = f(a, b, *ps)
        l.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        l.item()
    return statistics.median(times[1:]) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["transformer", "mlp"], required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    eager = run(args.model, False, args.steps)
    compiled = run(args.model, True, args.steps)
    print(json.dumps({"model": args.model, "threads": args.threads,
                      "eager_ms": eager, "compiled_ms": compiled}))


if __name__ == "__main__":
    main()
