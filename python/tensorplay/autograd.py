"""``tensorplay.autograd``: ``grad`` (gradients without touching ``.grad``) and ``backward``."""

from ._C import grad as _grad
from ._grad_mode import enable_grad, no_grad, set_grad_enabled  # noqa: F401


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=None):
    """Gradients of ``outputs`` with respect to ``inputs`` (a tuple, ``None`` for an unused input)."""
    return _grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False):
    """Backpropagates from ``tensors`` (one tensor or a sequence) into the leaves' ``.grad``."""
    if not isinstance(tensors, (list, tuple)):
        tensors = [tensors]
    if grad_tensors is None:
        grad_tensors = [None] * len(tensors)
    elif not isinstance(grad_tensors, (list, tuple)):
        grad_tensors = [grad_tensors]
    for t, g in zip(tensors, grad_tensors):
        t.backward(g, retain_graph=retain_graph, create_graph=create_graph)
