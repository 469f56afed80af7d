"""``tensorplay.optim.lr_scheduler``: the Rust schedulers (PyTorch's formulas and chainable
updates) with PyTorch's constructors: ``StepLR``, ``LinearLR``, ``CosineAnnealingLR``,
``OneCycleLR``, ``SequentialLR`` and ``ChainedScheduler``.

As in PyTorch, building a scheduler records each group's ``initial_lr`` and sets the epoch-0
rate, and ``step()`` writes the next rates into ``optimizer.param_groups``.

>>> import tensorplay as tp
>>> w = tp.ones(1, requires_grad=True)
>>> opt = tp.optim.SGD([w], lr=1.0)
>>> sched = tp.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for _ in range(4):
...     opt.step()
...     sched.step()
...     lrs.append(opt.param_groups[0]["lr"])
>>> lrs
[1.0, 0.5, 0.5, 0.25]
"""

from .. import _C
from .optimizer import Optimizer


class LRScheduler:
    """Base class: a Rust scheduler driving ``optimizer``'s groups."""

    def __init__(self, optimizer, make):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        optimizer._push()
        try:
            self._native = make(optimizer._native)
        finally:
            optimizer._pull()

    def step(self, epoch=None):
        """Advances one epoch (or, deprecated as in PyTorch, jumps to ``epoch`` using the closed
        form) and sets the optimizer's rates."""
        opt = self.optimizer
        opt._push()
        try:
            if epoch is None:
                self._native.step(opt._native)
            else:
                self._native.step_to(opt._native, int(epoch))
        finally:
            opt._pull()

    def get_last_lr(self):
        """The rates the last step set, one per group."""
        return self._native.last_lr()

    @property
    def last_epoch(self):
        """The step count (0 right after construction)."""
        return self._native.last_epoch()

    @property
    def base_lrs(self):
        """Each group's ``initial_lr`` when the scheduler was built."""
        return self._native.base_lrs()


def _no_last_epoch(name, last_epoch):
    if last_epoch != -1:
        raise ValueError(f"{name}: resuming with last_epoch={last_epoch} is not supported; build the "
                         "scheduler at the start and step it (or load the optimizer's state_dict)")


class StepLR(LRScheduler):
    """Multiplies the rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        _no_last_epoch("StepLR", last_epoch)
        super().__init__(optimizer, lambda o: _C._Scheduler.step_lr(o, int(step_size), float(gamma)))


class LinearLR(LRScheduler):
    """Scales the rate linearly from ``start_factor`` to ``end_factor`` times ``initial_lr``
    over ``total_iters`` epochs (a warm-up)."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        _no_last_epoch("LinearLR", last_epoch)
        super().__init__(optimizer, lambda o: _C._Scheduler.linear_lr(
            o, float(start_factor), float(end_factor), int(total_iters)))


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from ``initial_lr`` to ``eta_min`` over ``T_max`` epochs."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803
        _no_last_epoch("CosineAnnealingLR", last_epoch)
        super().__init__(optimizer, lambda o: _C._Scheduler.cosine_annealing_lr(o, int(T_max), float(eta_min)))


class OneCycleLR(LRScheduler):
    """The 1cycle policy: the rate rises to ``max_lr`` and falls to ``initial_lr /
    final_div_factor`` over ``total_steps`` (or ``epochs * steps_per_epoch``) steps, the
    momentum (Adam's ``beta1``) moving the other way."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        _no_last_epoch("OneCycleLR", last_epoch)
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
            total_steps = int(epochs) * int(steps_per_epoch)
        lrs = [float(v) for v in max_lr] if isinstance(max_lr, (list, tuple)) else [float(max_lr)]
        super().__init__(optimizer, lambda o: _C._Scheduler.one_cycle_lr(
            o, lrs, int(total_steps), float(pct_start), str(anneal_strategy), bool(cycle_momentum),
            float(base_momentum), float(max_momentum), float(div_factor), float(final_div_factor),
            bool(three_phase)))


class SequentialLR(LRScheduler):
    """Runs ``schedulers`` one after another, switching at ``milestones``. The schedulers are
    handed over: step only the ``SequentialLR`` afterwards."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        _no_last_epoch("SequentialLR", last_epoch)
        for s in schedulers:
            if s.optimizer is not optimizer:
                raise ValueError("SequentialLR expects all schedulers to belong to the same optimizer")
        natives = [s._native for s in schedulers]
        self._schedulers = list(schedulers)
        super().__init__(optimizer, lambda o: _C._Scheduler.sequential_lr(o, natives, [int(m) for m in milestones]))


class ChainedScheduler(LRScheduler):
    """Steps every scheduler of ``schedulers`` at each ``step()``. They are handed over: step
    only the ``ChainedScheduler`` afterwards."""

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("ChainedScheduler expects at least one scheduler")
        optimizer = optimizer if optimizer is not None else schedulers[0].optimizer
        for s in schedulers:
            if s.optimizer is not optimizer:
                raise ValueError("ChainedScheduler expects all schedulers to belong to the same optimizer")
        natives = [s._native for s in schedulers]
        self._schedulers = schedulers
        super().__init__(optimizer, lambda o: _C._Scheduler.chained(o, natives))
