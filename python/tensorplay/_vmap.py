"""``tensorplay.vmap(func, in_dims=0, out_dims=0)`` over the Rust vmap (batching rules for builtin
ops, ``register_vmap`` rules for custom ops)."""

import functools

from . import _C


def vmap(func, in_dims=0, out_dims=0):
    """Vectorises ``func`` (tensors in, a tensor or tuple of tensors out) over a batch dim."""

    @functools.wraps(func)
    def wrapped(*args):
        dims = list(in_dims) if isinstance(in_dims, (list, tuple)) else [in_dims] * len(args)
        single = []

        def body(*xs):
            out = func(*xs)
            single.append(isinstance(out, _C.Tensor))
            return out

        od = list(out_dims) if isinstance(out_dims, (list, tuple)) else [out_dims]
        outs = _C._vmap(body, dims, od, list(args))
        return outs[0] if single and single[-1] else outs

    return wrapped
