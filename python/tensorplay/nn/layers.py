"""The layers of ``tensorplay.nn``: thin ``Module`` classes holding parameters (with PyTorch's
initialization and defaults) over the functions of ``tensorplay.nn.functional``.

>>> import tensorplay as tp
>>> from tensorplay import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> model(tp.ones(5, 4)).shape
(5, 2)
>>> list(model.state_dict())
['0.weight', '0.bias', '2.weight', '2.bias']
"""

import math

from .. import _C
from . import functional as F
from .module import Module, Parameter


def _uniform(shape, bound, dtype, device):
    """Samples ``U(-bound, bound)`` of ``shape`` as a new parameter."""
    t = _C.rand(*shape, dtype=dtype or _C.float32, device=device) * (2.0 * bound) - bound
    return Parameter(t)


def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2 or not all(isinstance(i, int) for i in v):
        raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
    return v


class Identity(Module):
    """Returns its input."""

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x Wᵀ + b``; weight ``[out_features, in_features]`` and bias drawn from
    ``U(-1/√in_features, 1/√in_features)`` (PyTorch's default)."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None
        if not bias:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table ``[num_embeddings, embedding_dim]`` drawn from ``N(0, 1)``; the
    ``padding_idx`` row starts at zero and gets no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, device=None, dtype=None):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx must be within num_embeddings ({num_embeddings}), got {padding_idx}")
            padding_idx = padding_idx % num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        w = _C.randn(num_embeddings, embedding_dim, dtype=dtype or _C.float32, device=device)
        if padding_idx is not None:
            w[padding_idx] = 0.0
        self.weight = Parameter(w)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class LayerNorm(Module):
    """Normalizes over the trailing ``normalized_shape`` dims; weight ones and bias zeros when
    ``elementwise_affine``."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        kw = {"dtype": dtype or _C.float32, "device": device}
        self.weight = Parameter(_C.ones(*shape, **kw)) if elementwise_affine else None
        self.bias = Parameter(_C.zeros(*shape, **kw)) if elementwise_affine and bias else None
        for name in ("weight", "bias"):
            if getattr(self, name) is None:
                self.register_parameter(name, None)

    def forward(self, input):
        return F.layer_norm(input, list(self.normalized_shape), self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode (survivors scaled by
    ``1/(1-p)``); the identity in evaluation mode."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        if inplace:
            raise ValueError("Dropout(inplace=True) is not supported (as for nn.functional.dropout)")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Conv2d(Module):
    """2-D convolution over ``[N, C, H, W]``; weight ``[out, in/groups, kh, kw]`` and bias drawn
    from ``U(-1/√fan_in, 1/√fan_in)``, ``fan_in = in/groups·kh·kw`` (PyTorch's default)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError(f"Conv2d: only padding_mode='zeros' is supported, got {padding_mode!r}")
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride, self.dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
        self.padding = padding if isinstance(padding, str) else _pair(padding, "padding")
        kh, kw = self.kernel_size
        fan_in = in_channels // groups * kh * kw
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.weight = _uniform((out_channels, in_channels // groups, kh, kw), bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None
        if not bias:
            self.register_parameter("bias", None)

    def forward(self, input):
        padding = self.padding if isinstance(self.padding, str) else list(self.padding)
        return F.conv2d(input, self.weight, self.bias, list(self.stride), padding, list(self.dilation), self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class BatchNorm2d(Module):
    """Batch normalization over ``[N, C, H, W]``: batch statistics in training mode (updating
    the ``running_mean``/``running_var`` buffers, and ``num_batches_tracked``), the running ones
    in evaluation mode; ``momentum=None`` is the cumulative average."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = {"dtype": dtype or _C.float32, "device": device}
        self.weight = Parameter(_C.ones(num_features, **kw)) if affine else None
        self.bias = Parameter(_C.zeros(num_features, **kw)) if affine else None
        if not affine:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features, **kw))
            self.register_buffer("running_var", _C.ones(num_features, **kw))
            self.register_buffer("num_batches_tracked", _C.zeros(1, dtype=_C.int64, device=device).reshape(()))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def forward(self, input):
        if input.dim() != 4:
            raise ValueError(f"BatchNorm2d: expected 4D input (got {input.dim()}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / self.num_batches_tracked.item()
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class MaxPool2d(Module):
    """2-D max pooling (``stride`` defaults to ``kernel_size``)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class ReLU(Module):
    """``max(x, 0)``."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input)


class GELU(Module):
    """GELU, exact (``approximate="none"``) or the tanh approximation (``"tanh"``)."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Flatten(Module):
    """Flattens dims ``start_dim..=end_dim`` into one."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        shape = tuple(input.shape)
        n = len(shape)
        s = self.start_dim + n if self.start_dim < 0 else self.start_dim
        e = self.end_dim + n if self.end_dim < 0 else self.end_dim
        if not (0 <= s < max(n, 1) and 0 <= e < max(n, 1) and s <= e):
            raise IndexError(f"Flatten: start_dim={self.start_dim}, end_dim={self.end_dim} out of range for {n} dims")
        if n == 0:
            return input.reshape([1])
        return input.reshape(list(shape[:s]) + [math.prod(shape[s:e + 1])] + list(shape[e + 1:]))

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Sequential(Module):
    """Runs its modules in order; indexable (``seq[0]``, slices), iterable, ``len``,
    ``append``. Submodules are named ``"0"``, ``"1"``, ... (or by an ``OrderedDict``'s keys)."""

    def __init__(self, *mods):
        super().__init__()
        if len(mods) == 1 and isinstance(mods[0], dict):
            for name, m in mods[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(mods):
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        mods = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(dict(mods[idx]))
        if not -len(mods) <= idx < len(mods):
            raise IndexError(f"index {idx} is out of range for a Sequential of {len(mods)}")
        return mods[idx][1]

    def append(self, module):
        """Adds ``module`` at the end; returns ``self``."""
        self.add_module(str(len(self)), module)
        return self
