"""Training from Python: a two-layer MLP (``tensorplay.nn`` modules: ``Linear`` layers with
PyTorch's initialization) fitted to a synthetic regression task, its loss computed by a
``tensorplay.compile``d function of the parameters (fused native kernels forward and backward)
and its parameters updated by ``tensorplay.optim.Adam`` (one fused in-place kernel launch per
step), with a cosine learning-rate schedule; the trained weights round-trip through a
safetensors file.

Run: ``python examples/python/train.py [--steps N] [--batch B] [--hidden H]`` (after
``pip install ./python``). It prints the loss as it falls and the median step time."""

import argparse
import statistics
import time

import os
import tempfile

import tensorplay as tp
from tensorplay import nn
from tensorplay.nn import functional as F


class MLP(nn.Module):
    """``Linear → ReLU → Linear``."""

    def __init__(self, d_in, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def mlp_loss(x, y, w1, b1, w2, b2):
    """Mean squared error of the MLP's output against ``y``, as a function of its parameters
    (``tensorplay.compile`` takes tensors as inputs: a compiled function reads no module state)."""
    out = F.linear(F.linear(x, w1, b1).relu(), w2, b2)
    return ((out - y) ** 2).mean()


def make_data(n, d_in, seed):
    """Inputs in [-1, 1) and a smooth nonlinear target ``sin(2 x0) + x1 * x2 - 0.5 x3``."""
    tp.manual_seed(seed)
    x = tp.rand(n, d_in) * 2.0 - 1.0
    y = (x[:, 0] * 2.0).sin() + x[:, 1] * x[:, 2] - x[:, 3] * 0.5
    return x, y.reshape(n, 1)


def train(steps=300, batch=256, hidden=64, d_in=8, lr=1e-2, seed=0, log_every=50, out=print):
    """Trains the MLP; returns the loss of every step."""
    x, y = make_data(batch, d_in, seed)
    model = MLP(d_in, hidden)
    params = list(model.parameters())  # fc1.weight, fc1.bias, fc2.weight, fc2.bias
    opt = tp.optim.Adam(params, lr=lr)
    sched = tp.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=lr / 10)
    loss_fn = tp.compile(mlp_loss)

    losses, times = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(x, y, *params)
        loss.backward()
        opt.step()
        sched.step()
        value = loss.item()
        times.append(time.perf_counter() - t0)
        losses.append(value)
        if step % log_every == 0 or step == steps - 1:
            out(f"step {step:4d}  loss {value:.5f}  lr {opt.param_groups[0]['lr']:.5f}")
    # The first step captures and compiles; the median is the steady state.
    steady = times[1:] or times
    out(f"median step time {statistics.median(steady) * 1e6:.1f} us "
        f"(first step, with compilation: {times[0] * 1e3:.1f} ms); "
        f"loss {losses[0]:.5f} -> {losses[-1]:.5f}")
    # The module runs eagerly too; its weights survive a safetensors round trip.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mlp.safetensors")
        tp.save_file(model.state_dict(), path)
        restored = MLP(d_in, hidden)
        restored.load_state_dict(tp.load_file(path))
    with tp.no_grad():
        eager = ((restored(x) - y) ** 2).mean().item()
    out(f"eager loss of the restored model {eager:.5f}")
    return losses


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-2)
    a = p.parse_args()
    losses = train(steps=a.steps, batch=a.batch, hidden=a.hidden, lr=a.lr)
    if not losses[-1] < losses[0]:
        raise SystemExit("the loss did not fall")


if __name__ == "__main__":
    main()
