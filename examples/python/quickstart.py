"""The API page's weighted_sum example from Python: a custom op defined with
``tensorplay.library.custom_op``, used inside a compiled function, with a gradient.

Run: ``python examples/python/quickstart.py`` (after ``pip install ./python``)."""

import tensorplay


@tensorplay.library.custom_op("mylib::weighted_sum", mutates_args=())
def weighted_sum(x, weight):
    return (x * weight).sum()


@weighted_sum.register_fake
def _(x, weight):
    return tensorplay.empty(dtype=x.dtype)


def loss_fn(x, w, proj):
    h = (x @ proj).relu()
    return weighted_sum(h, w)


def main():
    tensorplay.manual_seed(0)
    x = tensorplay.randn(4, 8, requires_grad=True)
    w = tensorplay.rand(8)
    proj = tensorplay.randn(8, 8)

    eager = loss_fn(x, w, proj)
    compiled = tensorplay.compile(loss_fn)
    loss = compiled(x, w, proj)
    loss.backward()
    print(f"eager loss    = {eager.item():.6f}")
    print(f"compiled loss = {loss.item():.6f}")
    print(f"dloss/dx has shape {x.grad.shape}, |grad| = {x.grad.abs().sum().item():.6f}")
    assert abs(eager.item() - loss.item()) <= 1e-4 * max(1.0, abs(eager.item()))


if __name__ == "__main__":
    main()
