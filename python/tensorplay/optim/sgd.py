"""``tensorplay.optim.SGD``."""

from .optimizer import Optimizer, _check_flags


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum, weight decay and
    ``maximize``: PyTorch's ``torch.optim.SGD`` (same signature, defaults and update), on the
    Rust optimizer's fused in-place kernel.

    >>> import tensorplay as tp
    >>> w = tp.ones(3, requires_grad=True)
    >>> (w * 2.0).sum().backward()
    >>> opt = tp.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> opt.step()
    >>> w.tolist()
    [0.800000011920929, 0.800000011920929, 0.800000011920929]
    """

    _kind = "SGD"
    _hyper = ("lr", "momentum", "dampening", "weight_decay", "nesterov")

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        _check_flags("SGD", differentiable=differentiable)
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
