"""TensorPlay: tensors, ``tensorplay.library`` custom operators and a JIT compiler, on a Rust core.

The classes and factories come from the extension module ``tensorplay._C``; every builtin op of
the op table is available as ``tensorplay.<op>`` and (when its first parameter is ``self``) as a
``Tensor`` method, generated from the op schemas in ``tensorplay._ops``.
"""

from . import _C
from ._C import (  # noqa: F401
    Tensor,
    arange,
    bfloat16,
    bool,
    device,
    dtype,
    empty,
    float16,
    float32,
    float64,
    full,
    int32,
    int64,
    is_grad_enabled,
    load_file,
    manual_seed,
    ones,
    rand,
    randn,
    save_file,
    tensor,
    zeros,
)
from ._grad_mode import autocast, enable_grad, no_grad, set_grad_enabled  # noqa: F401
from . import _ops

float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001

_ops.install(globals())

from . import autograd, library, nn, optim  # noqa: E402,F401
from ._compile import compile  # noqa: E402,F401
from ._interop import from_dlpack, from_numpy, zeros_like, ones_like, empty_like, full_like, randn_like, rand_like  # noqa: E402,F401
from ._vmap import vmap  # noqa: E402,F401

__all__ = [
    "Tensor", "dtype", "device", "tensor", "zeros", "ones", "empty", "full", "arange", "randn",
    "rand", "manual_seed", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "autocast", "compile", "vmap", "from_numpy", "from_dlpack", "library", "autograd", "nn", "optim",
    "save_file", "load_file",
]
