"""``tensorplay.nn``: the functional interface (``tensorplay.nn.functional``)."""

from . import functional  # noqa: F401
