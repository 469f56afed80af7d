"""``tensorplay.optim``: PyTorch's ``SGD``, ``Adam`` and ``AdamW`` (signatures, parameter groups,
``zero_grad``, ``step(closure)``, ``state_dict``) on the Rust optimizers, whose update is one
fused in-place kernel launch for the whole parameter list; ``tensorplay.optim.lr_scheduler`` has
the Rust schedulers."""

from .optimizer import Optimizer  # noqa: F401
from .sgd import SGD  # noqa: F401
from .adam import Adam, AdamW  # noqa: F401
from . import lr_scheduler  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
