"""``tensorplay.nn.Module`` and ``tensorplay.nn.Parameter``: PyTorch's module tree in Python —
attribute assignment registers parameters, buffers and submodules; names, state dicts and
train/eval mode follow PyTorch's conventions. The math lives in ``tensorplay.nn.functional``.

>>> import tensorplay as tp
>>> from tensorplay import nn
>>> class Net(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = nn.Linear(4, 2)
...     def forward(self, x):
...         return self.fc(x).relu()
>>> net = Net()
>>> [name for name, _ in net.named_parameters()]
['fc.weight', 'fc.bias']
>>> net(tp.ones(3, 4)).shape
(3, 2)
"""

import collections

from .. import _C
from .._grad_mode import no_grad


class Parameter(_C.Tensor):
    """A tensor that is a module parameter: assigning one to a ``Module`` attribute registers it.
    ``Parameter(data, requires_grad=True)`` shares ``data``'s storage (without its history).

    >>> import tensorplay as tp
    >>> p = tp.nn.Parameter(tp.zeros(2))
    >>> p.requires_grad, isinstance(p, tp.Tensor)
    (True, True)
    """

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _C.empty(0)
        return super().__new__(cls, data, requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of layers and models: subclasses set attributes in ``__init__`` (after
    ``super().__init__()``) and define ``forward``; calling the module calls ``forward``."""

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})

    # -- attributes ------------------------------------------------------------------------------

    def _registries(self):
        try:
            return self.__dict__["_parameters"], self.__dict__["_buffers"], self.__dict__["_modules"]
        except KeyError:
            raise AttributeError(
                f"cannot assign parameters, buffers or submodules before {type(self).__name__}.__init__() "
                "calls super().__init__()") from None

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__ and not isinstance(value, (Parameter, Module)):
            object.__setattr__(self, name, value)  # plain attributes may come before super().__init__()
            return
        params, buffers, modules = self._registries()
        if isinstance(value, Parameter):
            for d in (self.__dict__, buffers, modules):
                d.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            for d in (self.__dict__, params, buffers):
                d.pop(name, None)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as parameter '{name}' "
                                "(a nn.Parameter or None is expected)")
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as child module '{name}' "
                                "(a nn.Module or None is expected)")
            modules[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, _C.Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer '{name}' "
                                "(a Tensor or None is expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            reg = d.get(key)
            if reg is not None and name in reg:
                return reg[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            reg = self.__dict__.get(key, {})
            if name in reg:
                del reg[name]
                self.__dict__["_non_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        """Adds ``param`` (a ``Parameter`` or None) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign {type(param).__name__} as parameter '{name}' (a nn.Parameter or None is expected)")
        self._registries()[0][name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Adds a buffer (a tensor that is state but not a parameter, e.g. running statistics);
        non-persistent buffers are left out of ``state_dict``."""
        if tensor is not None and not isinstance(tensor, _C.Tensor):
            raise TypeError(f"cannot assign {type(tensor).__name__} as buffer '{name}' (a Tensor or None is expected)")
        self._registries()[1][name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        """Adds a submodule (or None) under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._registries()[2][name] = module

    register_module = add_module

    # -- calling ---------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # -- traversal -------------------------------------------------------------------------------

    def named_modules(self, memo=None, prefix=""):
        """``(name, module)`` for this module and every descendant, each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name)

    def modules(self):
        """This module and every descendant."""
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        """``(name, module)`` of the direct submodules."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        """The direct submodules."""
        for _, m in self.named_children():
            yield m

    def _named(self, attr, prefix, recurse):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, m in mods:
            for name, t in getattr(m, attr).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), t

    def named_parameters(self, prefix="", recurse=True):
        """``(dotted name, parameter)``, each parameter once (shared ones under their first name)."""
        return self._named("_parameters", prefix, recurse)

    def parameters(self, recurse=True):
        """Every parameter, each once."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        """``(dotted name, buffer)``."""
        return self._named("_buffers", prefix, recurse)

    def buffers(self, recurse=True):
        """Every buffer."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- modes and gradients ---------------------------------------------------------------------

    def train(self, mode=True):
        """Sets training mode on this module and its descendants; returns ``self``."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        """``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        """Sets ``requires_grad`` on every parameter; returns ``self``."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Clears the parameters' gradients (to None, or to zeros with ``set_to_none=False``)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = _C.zeros(*p.shape, dtype=p.dtype, device=p.device)

    def apply(self, fn):
        """Calls ``fn`` on every descendant, then on this module; returns ``self``."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs):
        """Converts parameters and buffers (``to(dtype)``, ``to(device)``, ``to(device, dtype)``,
        or keywords). Floating parameters and buffers take a new dtype; all take the device. A
        parameter that changes becomes a new ``Parameter`` (so make optimizers after ``to``)."""
        dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
        if kwargs:
            raise TypeError(f"Module.to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, _C.dtype):
                dtype = a
            elif isinstance(a, (str, _C.device)):
                device = a
            else:
                raise TypeError(f"Module.to() expects a dtype or a device, got {type(a).__name__}")

        def convert(t):
            out = t
            if device is not None:
                out = out.to(device)
            if dtype is not None and t.dtype.is_floating_point:
                out = out.to(dtype)
            return out

        with no_grad():
            for m in self.modules():
                for name, p in list(m._parameters.items()):
                    if p is not None:
                        q = convert(p)
                        if q is not p:
                            m._parameters[name] = Parameter(q, p.requires_grad)
                for name, b in list(m._buffers.items()):
                    if b is not None:
                        m._buffers[name] = convert(b)
        return self

    def float(self):
        """``to(tensorplay.float32)``."""
        return self.to(_C.float32)

    def double(self):
        """``to(tensorplay.float64)``."""
        return self.to(_C.float64)

    # -- state dict ------------------------------------------------------------------------------

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """An ordered dict of every parameter and persistent buffer by dotted name (PyTorch's
        keys: ``fc.weight``, ``bn.running_mean``, ...); detached unless ``keep_vars``."""
        out = collections.OrderedDict() if destination is None else destination
        for mod_prefix, m in self.named_modules(prefix=prefix.rstrip(".")):
            base = f"{mod_prefix}." if mod_prefix else ""
            for name, p in m._parameters.items():
                if p is not None:
                    out[base + name] = p if keep_vars else p.detach()
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent:
                    out[base + name] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies ``state_dict``'s tensors into the parameters and buffers of the same names.
        A shape mismatch is always an error; missing and unexpected keys are errors when
        ``strict``. One ``RuntimeError`` lists every problem; nothing is copied when there is
        one. Returns ``(missing_keys, unexpected_keys)``."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        mismatched = [f"size mismatch for {k}: copying a param with shape {tuple(state_dict[k].shape)} from "
                      f"checkpoint, the shape in current model is {tuple(own[k].shape)}"
                      for k in own if k in state_dict and tuple(state_dict[k].shape) != tuple(own[k].shape)]
        problems = []
        if strict and unexpected:
            problems.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if strict and missing:
            problems.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        problems += mismatched
        if problems:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(problems))
        with no_grad():
            for k, t in own.items():
                if k in state_dict:
                    v = state_dict[k]
                    if not isinstance(v, _C.Tensor):
                        raise TypeError(f"load_state_dict: '{k}' must be a Tensor, got {type(v).__name__}")
                    t.copy_(v.to(t.dtype))
        return _IncompatibleKeys(missing, unexpected)

    # -- printing --------------------------------------------------------------------------------

    def extra_repr(self):
        """The text inside this module's parentheses in ``repr``."""
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = ([extra] if extra else []) + lines
        return f"{type(self).__name__}(\n  " + "\n  ".join(body) + "\n)"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))
