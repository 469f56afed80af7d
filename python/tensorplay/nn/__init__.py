"""``tensorplay.nn``: ``Module`` and ``Parameter`` (``module.py``), the layers (``layers.py``) and
the functional interface (``tensorplay.nn.functional``)."""

from . import functional  # noqa: F401
from .layers import (  # noqa: F401
    GELU, BatchNorm2d, Conv2d, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear, MaxPool2d, ReLU,
    Sequential,
)
from .module import Module, Parameter  # noqa: F401

__all__ = ["Module", "Parameter", "Identity", "Linear", "Embedding", "LayerNorm", "Dropout", "Conv2d",
           "BatchNorm2d", "MaxPool2d", "ReLU", "GELU", "Flatten", "Sequential", "functional"]
