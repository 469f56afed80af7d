"""``tensorplay.nn.functional``: activations from the op table and the composite functions of the
Rust ``nn`` module, with PyTorch's names and keywords."""

from .. import _C

_nn = _C._nn
linear = _nn.linear
layer_norm = _nn.layer_norm
rms_norm = _nn.rms_norm
dropout = _nn.dropout
embedding = _nn.embedding
mse_loss = _nn.mse_loss
nll_loss = _nn.nll_loss
cross_entropy = _nn.cross_entropy
scaled_dot_product_attention = _nn.scaled_dot_product_attention
conv1d = _nn.conv1d
conv2d = _nn.conv2d
conv_transpose2d = _nn.conv_transpose2d
max_pool2d = _nn.max_pool2d
avg_pool2d = _nn.avg_pool2d
adaptive_avg_pool2d = _nn.adaptive_avg_pool2d
pad = _nn.pad
interpolate = _nn.interpolate
batch_norm = _nn.batch_norm
group_norm = _nn.group_norm


def _op(name):
    def f(input, *args, **kwargs):
        kwargs.pop("inplace", None)
        return _C._call(f"tp::{name}", (input,) + args, kwargs or None)

    f.__name__ = name
    f.__doc__ = f"``tp::{name}`` (schema: ``{_C._schema('tp::' + name)}``)."
    return f


relu = _op("relu")
gelu = _op("gelu")
silu = _op("silu")
sigmoid = _op("sigmoid")
tanh = _op("tanh")
elu = _op("elu")
leaky_relu = _op("leaky_relu")
softplus = _op("softplus")
hardtanh = _op("hardtanh")
hardsigmoid = _op("hardsigmoid")
hardswish = _op("hardswish")
mish = _op("mish")


def softmax(input, dim=None, dtype=None):
    """``softmax(input, dim)`` (``dtype`` casts first)."""
    if dtype is not None:
        input = input.to(dtype)
    return _C._call("tp::softmax", (input, -1 if dim is None else dim))


def log_softmax(input, dim=None, dtype=None):
    """``log_softmax(input, dim)`` (``dtype`` casts first)."""
    if dtype is not None:
        input = input.to(dtype)
    return _C._call("tp::log_softmax", (input, -1 if dim is None else dim))
