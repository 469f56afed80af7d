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
    """Base class: a Rust scheduler driving ``optimizer``'s groups.

    ``state_dict()`` / ``load_state_dict()`` save and restore the progress to resume training,
    with PyTorch's keys (``last_epoch``, ``_step_count``, ``base_lrs``, ``_last_lr``, the
    constructor's hyper-parameters, and ``_schedulers`` for ``SequentialLR`` and
    ``ChainedScheduler``). The hyper-parameters are the constructor's: a state saved with other
    ones is refused (PyTorch would overwrite them silently).

    >>> import tensorplay as tp
    >>> w = tp.ones(1, requires_grad=True)
    >>> opt = tp.optim.SGD([w], lr=1.0)
    >>> sched = tp.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    >>> for _ in range(3):
    ...     opt.step()
    ...     sched.step()
    >>> saved = sched.state_dict()
    >>> saved["last_epoch"], saved["step_size"]
    (3, 2)
    >>> resumed = tp.optim.lr_scheduler.StepLR(tp.optim.SGD([w], lr=0.5), step_size=2, gamma=0.5)
    >>> resumed.load_state_dict(saved)
    >>> resumed.last_epoch
    3
    """

    # The constructor's hyper-parameters by PyTorch's attribute names (set by each subclass).
    _hyper = {}

    def __init__(self, optimizer, make):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        for k, v in self._hyper.items():
            if not k.startswith("_"):
                setattr(self, k, v)
        optimizer._push()
        try:
            self._native = make(optimizer._native)
        finally:
            optimizer._pull()

    def state_dict(self):
        """The progress (and the hyper-parameters) as a dict with PyTorch's keys."""
        return self._state_tree(iter(self._native.state()))

    def _state_tree(self, nodes):
        last_epoch, step_count, base_lrs, last_lr, nested = next(nodes)
        d = dict(self._hyper)
        d.update(last_epoch=last_epoch, _step_count=step_count, base_lrs=list(base_lrs),
                 _last_lr=list(last_lr))
        if nested:
            d["_schedulers"] = [s._state_tree(nodes) for s in self._schedulers]
        return d

    def load_state_dict(self, state_dict):
        """Restores ``state_dict()``'s output from a scheduler of the same kind, hyper-parameters
        and group count; anything else raises (``TypeError`` / ``ValueError``) and changes
        nothing. The optimizer's rates come back with the optimizer's own ``load_state_dict``."""
        nodes = []
        self._collect(state_dict, nodes, "state_dict")
        self._native.load_state(nodes)

    def _collect(self, d, nodes, where):
        name = type(self).__name__ + ".load_state_dict"
        if not isinstance(d, dict):
            raise TypeError(f"{name}: {where} must be a dict, got {type(d).__name__}")
        for k, v in self._hyper.items():
            if k in d and d[k] != v:
                raise ValueError(f"{name}: {where} was saved with {k}={d[k]!r}, this scheduler has "
                                 f"{k}={v!r}")
        missing = [k for k in ("last_epoch", "base_lrs", "_last_lr") if k not in d]
        if missing:
            raise ValueError(f"{name}: {where} has no {', '.join(map(repr, missing))}")
        subs = getattr(self, "_schedulers", [])
        nested = d.get("_schedulers", [])
        if not isinstance(nested, (list, tuple)) or len(nested) != len(subs):
            got = len(nested) if isinstance(nested, (list, tuple)) else type(nested).__name__
            raise ValueError(f"{name}: {where} holds {got} nested scheduler states, this "
                             f"scheduler runs {len(subs)}")
        try:
            node = (int(d["last_epoch"]), int(d.get("_step_count", 0)),
                    [float(v) for v in d["base_lrs"]], [float(v) for v in d["_last_lr"]], len(nested))
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name}: {where} holds a value of the wrong type ({e})") from None
        nodes.append(node)
        for i, (s, sd) in enumerate(zip(subs, nested)):
            s._collect(sd, nodes, f"{where}['_schedulers'][{i}]")

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
        self._hyper = {"step_size": int(step_size), "gamma": float(gamma)}
        super().__init__(optimizer, lambda o: _C._Scheduler.step_lr(o, int(step_size), float(gamma)))


class LinearLR(LRScheduler):
    """Scales the rate linearly from ``start_factor`` to ``end_factor`` times ``initial_lr``
    over ``total_iters`` epochs (a warm-up)."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        _no_last_epoch("LinearLR", last_epoch)
        self._hyper = {"start_factor": float(start_factor), "end_factor": float(end_factor),
                       "total_iters": int(total_iters)}
        super().__init__(optimizer, lambda o: _C._Scheduler.linear_lr(
            o, float(start_factor), float(end_factor), int(total_iters)))


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from ``initial_lr`` to ``eta_min`` over ``T_max`` epochs."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803
        _no_last_epoch("CosineAnnealingLR", last_epoch)
        self._hyper = {"T_max": int(T_max), "eta_min": float(eta_min)}
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
        self._hyper = {"total_steps": int(total_steps), "_max_lrs": lrs, "_pct_start": float(pct_start),
                       "_anneal_strategy": str(anneal_strategy), "cycle_momentum": bool(cycle_momentum),
                       "_base_momentum": float(base_momentum), "_max_momentum": float(max_momentum),
                       "_div_factor": float(div_factor), "_final_div_factor": float(final_div_factor),
                       "_three_phase": bool(three_phase)}
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
        self._hyper = {"_milestones": [int(m) for m in milestones]}
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
