#!/usr/bin/env python3
"""Records TensorPlay's PyTorch-parity cases (`tests/data/parity.json`).

Each case names an op, its arguments (tensors with exact bit patterns, Rust-scalar operands,
plain ints/floats/strings) and what PyTorch 2.x on CPU returned: the dtype, shape and bit
pattern of every output, or that it raised. Gradient cases (`gcase`, marked "grad") hold the
gradients PyTorch's autograd gave some tensor arguments for a recorded upstream gradient.
`tests/parity/` replays every case through TensorPlay's public API (and autograd); it needs
neither PyTorch nor Python. Every op of docs/ops.md's tables needs a case here (a gradient case
too when it is differentiable): `tests/parity/coverage.rs` fails otherwise.

Regenerate (PyTorch installed outside the repository):

    PYTHONPATH=/path/to/torch-site python3 scripts/parity/record.py > tests/data/parity.json

The cases live in one file per family (`elementwise_cases.py`, `newer_op_cases.py`,
`cnn_cases.py`, `coverage_cases.py`, `grad_cases.py`, `resize_cases.py`,
`conv_transpose_cases.py`) over the shared
encoders of `parity_core.py`; this file imports them in order and writes the JSON.

The output is deterministic for a given PyTorch version (recorded in the file).
"""

import json
import sys

import torch

# The case families, recorded in this order (each import runs its cases).
import elementwise_cases  # noqa: F401
import newer_op_cases  # noqa: F401
import cnn_cases  # noqa: F401
import coverage_cases  # noqa: F401
import grad_cases
import newer_op_cases as newer
import resize_cases
import conv_transpose_cases
from parity_core import CASES, POOL, P, T, case

resize_cases.record(case, grad_cases.gcase, T, P, newer.rnd, grad_cases.gx)
conv_transpose_cases.record(case, grad_cases.gcase, T, P, newer.rnd, grad_cases.gx)

json.dump({"torch": torch.__version__, "tensors": POOL, "cases": CASES}, sys.stdout,
          separators=(",", ":"))
sys.stdout.write("\n")
