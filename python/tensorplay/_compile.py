"""``tensorplay.compile(fn)``: capture a Python function's op calls (builtin and custom) into the
Rust compiler's graph and run the fused native kernels. Non-tensor arguments are baked into the
graph: each distinct set of them gets its own compiled function."""

import functools

from . import _C


class CompiledFunction:
    """The callable ``compile`` returns; ``explain()`` describes the latest compiled graph."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._compiled = {}
        self._single = {}
        # Fast path: number of arguments -> (compiled, key) for calls with tensors only and no
        # kwargs, so such calls skip building the layout, constants and cache key.
        self._all_tensors = {}

    def _entry(self, key, layout, consts, kwargs):
        if key not in self._compiled:
            fn = self._fn
            single = self._single

            def body(*tensors):
                it = iter(tensors)
                args = [next(it) if is_t else c for is_t, c in zip(layout, consts)]
                out = fn(*args, **kwargs)
                single[key] = isinstance(out, _C.Tensor)
                return out

            self._compiled[key] = _C._Compiled(body)
        return self._compiled[key]

    def __call__(self, *args, **kwargs):
        if not kwargs:
            hit = self._all_tensors.get(len(args))
            if hit is not None:
                tensor = _C.Tensor
                for a in args:
                    if type(a) is not tensor:
                        break
                else:
                    compiled, key = hit
                    outs = compiled(*args)
                    return outs[0] if self._single.get(key) else outs
        layout = tuple(isinstance(a, _C.Tensor) for a in args)
        consts = tuple(None if t else a for t, a in zip(layout, args))
        try:
            key = (layout, consts, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:
            key = (layout, repr(consts), repr(sorted(kwargs.items())))
        compiled = self._entry(key, layout, consts, kwargs)
        if not kwargs and all(layout):
            self._all_tensors[len(args)] = (compiled, key)
        outs = compiled(*[a for a in args if isinstance(a, _C.Tensor)])
        return outs[0] if self._single.get(key) else outs

    def _latest(self):
        if not self._compiled:
            return None
        return list(self._compiled.values())[-1]

    def explain(self):
        """The latest compiled graph's fusion plan (``None`` before the first call)."""
        c = self._latest()
        return None if c is None else c.explain()

    def graph(self):
        """The latest captured graph as text."""
        c = self._latest()
        return None if c is None else c.graph()

    @property
    def num_compiled(self):
        """Compiled graphs across every argument set."""
        return sum(c.num_compiled for c in self._compiled.values())


def compile(fn=None, **options):
    """``compile(fn)`` or ``@compile`` / ``@compile(...)``: returns a ``CompiledFunction``.
    Options (``dynamic``, ``fullgraph``, ``mode``, ``backend``) are accepted for call-site
    compatibility; shapes are always dynamic."""
    if fn is None:
        return lambda f: CompiledFunction(f)
    return CompiledFunction(fn)
