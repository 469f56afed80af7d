"""``tensorplay.optim.Adam`` and ``tensorplay.optim.AdamW``."""

from .optimizer import Optimizer, _check_flags


class Adam(Optimizer):
    """Adam with L2 weight decay, AMSGrad and ``maximize``: PyTorch's ``torch.optim.Adam`` (same
    signature, defaults and update; ``decoupled_weight_decay=True`` makes it AdamW), on the Rust
    optimizer's fused in-place kernel.

    >>> import tensorplay as tp
    >>> w = tp.zeros(2, requires_grad=True)
    >>> (w * 3.0).sum().backward()
    >>> opt = tp.optim.Adam([w], lr=0.1)
    >>> opt.step()
    >>> [round(v, 6) for v in w.tolist()]  # the first Adam step moves by lr against the gradient
    [-0.1, -0.1]
    """

    _kind = "Adam"
    _hyper = ("lr", "betas", "eps", "weight_decay", "amsgrad")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        _check_flags(type(self).__name__, capturable, differentiable)
        if decoupled_weight_decay:
            self._kind = "AdamW"
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the update):
    PyTorch's ``torch.optim.AdamW``, whose default ``weight_decay`` is 0.01.

    >>> import tensorplay as tp
    >>> w = tp.ones(2, requires_grad=True)
    >>> (w * 0.0).sum().backward()
    >>> tp.optim.AdamW([w], lr=0.1, weight_decay=0.5).step()
    >>> [round(v, 6) for v in w.tolist()]  # zero gradient: only the decay acts
    [0.95, 0.95]
    """

    _kind = "AdamW"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, foreach=foreach, maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused, decoupled_weight_decay=True)
