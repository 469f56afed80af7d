"""The ``Optimizer`` base class: PyTorch's ``param_groups`` dictionaries over a Rust optimizer.

The update itself is the Rust optimizer's (one fused, in-place kernel launch per kind of update
for the whole parameter list, with the GIL released). This class keeps the group dictionaries,
which the user and the schedulers may edit between steps (``group["lr"] = ...``): before every
native call the changed numbers are pushed to the Rust groups, and after a scheduler step the
Rust rates are read back into the dictionaries.
"""

import collections

from .. import _C
from .._grad_mode import enable_grad

# Group keys that only the Python side uses (PyTorch's flags that change nothing here).
_PY_ONLY = ("params", "maximize", "initial_lr", "foreach", "fused", "capturable", "differentiable",
            "decoupled_weight_decay")


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


class Optimizer:
    """Base class of the optimizers: ``param_groups``, ``zero_grad``, ``step``, ``state_dict``,
    ``load_state_dict`` and ``add_param_group`` with PyTorch's behaviour. Subclasses give the
    Rust optimizer's kind (``_kind``) and the names of its hyper-parameters (``_hyper``)."""

    _kind = None
    _hyper = ()

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.param_groups = []
        self._native = None
        self._pushed = []
        if isinstance(params, _C.Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, "
                "but got " + type(params).__name__)
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        return "\n".join(lines) + "\n)"

    # -- groups ------------------------------------------------------------------------------

    def _native_options(self, group):
        """A group's hyper-parameters as the Rust side names them (``betas.0``, bools as 0/1)."""
        out = {}
        for k in self._hyper:
            v = group[k]
            if k == "betas":
                b = tuple(v)
                if len(b) != 2:
                    raise ValueError(f"{type(self).__name__}: betas must be a pair, got {v!r}")
                out["betas.0"], out["betas.1"] = float(b[0]), float(b[1])
            else:
                if isinstance(v, _C.Tensor):
                    v = v.item()
                if not isinstance(v, (int, float)):
                    raise TypeError(f"{type(self).__name__}: {k} must be a number, got {type(v).__name__}")
                out[k] = float(v)
        return out

    def add_param_group(self, param_group):
        """Adds a group (a dict with ``params`` and any hyper-parameters; the missing ones take
        the constructor's values)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, _C.Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, _C.Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + type(p).__name__)
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group = dict(param_group)
        group["params"] = params
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {k}")
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        options = self._native_options(group)
        if self._native is None:
            self._native = _C._Optimizer(self._kind, params, options)
        else:
            self._native.add_param_group(params, options)
        self.param_groups.append(group)
        self._pushed.append((options, group.get("initial_lr")))

    def _push(self):
        """Sends the groups' numbers that changed since the last push to the Rust groups."""
        for i, g in enumerate(self.param_groups):
            options = self._native_options(g)
            initial = g.get("initial_lr")
            old_options, old_initial = self._pushed[i]
            if options != old_options:
                self._native.set_group_options(i, options)
            if initial is not None and initial != old_initial:
                self._native.set_group_initial_lr(i, float(initial))
            self._pushed[i] = (options, initial)

    def _pull(self):
        """Reads the Rust groups' rates, momenta and ``initial_lr`` back (after a scheduler)."""
        lrs, momenta, initial = self._native.lrs(), self._native.momenta(), self._native.initial_lrs()
        for i, g in enumerate(self.param_groups):
            g["lr"] = lrs[i]
            if momenta[i] is not None:
                if "betas" in g:
                    g["betas"] = (momenta[i], tuple(g["betas"])[1])
                elif "momentum" in g:
                    g["momentum"] = momenta[i]
            if initial[i] is not None:
                g["initial_lr"] = initial[i]
            self._pushed[i] = (self._native_options(g), g.get("initial_lr"))

    # -- the update --------------------------------------------------------------------------

    def zero_grad(self, set_to_none=True):
        """Clears the gradients: sets them to ``None`` (the default) or fills them with zeros."""
        if set_to_none:
            self._native.zero_grad()
            return
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad.fill_(0)

    def step(self, closure=None):
        """One update of every parameter that has a gradient. ``closure`` (re-evaluates the model
        and returns the loss) runs first, with grad mode on; its result is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self._push()
        self._native.step([bool(g.get("maximize", False)) for g in self.param_groups])
        return loss

    # -- state -------------------------------------------------------------------------------

    def state_dict(self):
        """PyTorch's layout: ``{"state": {index: {"step": tensor, "<buffer>": tensor}},
        "param_groups": [{..., "params": [indices]}]}``; parameters are numbered across the
        groups. The buffers are the optimizer's own tensors (not copies), as in PyTorch."""
        self._push()
        tensors, scalars = self._native.state_dict()
        state = {}
        for name, t in tensors:
            _, i, buf = name.split(".", 2)
            state.setdefault(int(i), {})[buf] = t
        for name, v in scalars:
            if name.startswith("state."):
                _, i, key = name.split(".", 2)
                state.setdefault(int(i), {})[key] = _C.tensor(v, dtype=_C.float32)
        groups, start = [], 0
        for g in self.param_groups:
            d = {k: v for k, v in g.items() if k != "params"}
            d["params"] = list(range(start, start + len(g["params"])))
            start += len(g["params"])
            groups.append(d)
        return {"state": state, "param_groups": groups}

    @property
    def state(self):
        """Per-parameter state keyed by the parameter, as PyTorch's ``optimizer.state[p]``:
        ``{"step": tensor, "exp_avg": tensor, ...}`` for every parameter that has been updated
        (a ``defaultdict``: other parameters give ``{}``). The buffers are the optimizer's own
        tensors, as in PyTorch (editing one in place edits the optimizer's state); ``step`` is a
        fresh 0-d tensor. Built on each access from ``state_dict()``.

        >>> import tensorplay as tp
        >>> w = tp.zeros(2, requires_grad=True)
        >>> (w * 3.0).sum().backward()
        >>> opt = tp.optim.Adam([w], lr=0.1)
        >>> opt.step()
        >>> sorted(opt.state[w]), opt.state[w]["step"].item()
        (['exp_avg', 'exp_avg_sq', 'step'], 1.0)
        """
        params = [p for g in self.param_groups for p in g["params"]]
        out = collections.defaultdict(dict)
        for i, entries in self.state_dict()["state"].items():
            out[params[i]] = entries
        return out

    def load_state_dict(self, state_dict):
        """Restores ``state_dict()``'s output (copying its tensors) into an optimizer of the same
        kind over parameters of the same shapes; a mismatch raises ``ValueError`` and leaves
        this optimizer unchanged."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for g, s in zip(self.param_groups, saved):
            if len(g["params"]) != len(s["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match "
                                 "the size of optimizer's group")
        index = {}
        for g, s in zip(self.param_groups, saved):
            index.update({old: new for new, old in enumerate(s["params"], start=len(index))})
        tensors, scalars = [], []
        for gi, s in enumerate(saved):
            merged = dict(self.param_groups[gi], **{k: v for k, v in s.items() if k != "params"})
            for k, v in self._native_options(merged).items():
                scalars.append((f"param_groups.{gi}.{k}", v))
        for old, entries in state_dict["state"].items():
            i = index.get(int(old), int(old))
            for k, v in entries.items():
                if k == "step":
                    scalars.append((f"state.{i}.step", float(v.item() if hasattr(v, "item") else v)))
                else:
                    if not isinstance(v, _C.Tensor):
                        raise TypeError(f"load_state_dict: state[{old}][{k!r}] must be a tensorplay Tensor, "
                                        f"got {type(v).__name__}")
                    tensors.append((f"state.{i}.{k}", v))
        self._push()
        self._native.load_state_dict(tensors, scalars)
        for g, s in zip(self.param_groups, saved):
            g.update({k: v for k, v in s.items() if k != "params"})
        self._pushed = [(self._native_options(g), g.get("initial_lr")) for g in self.param_groups]
        if any(g.get("initial_lr") is not None for g in self.param_groups):
            for i, g in enumerate(self.param_groups):
                if g.get("initial_lr") is not None:
                    self._native.set_group_initial_lr(i, float(g["initial_lr"]))

    @property
    def num_compiled(self):
        """How many fused update kernels the Rust optimizer compiled."""
        return self._native.num_compiled


def _check_flags(name, capturable=False, differentiable=False):
    if capturable:
        raise ValueError(f"{name}: capturable=True is not supported (there are no CUDA graphs here)")
    if differentiable:
        raise ValueError(f"{name}: differentiable=True is not supported (the update is a fused in-place kernel)")
