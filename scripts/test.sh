#!/usr/bin/env bash
# The README's test command: the Rust test suite, then the Python package — the `tensorplay._C`
# extension built in release by maturin into a virtual environment under target/ (made here, with
# maturin, pytest and numpy from PyPI) — and its pytest suite. Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test --workspace --release $*"
cargo test --workspace --release "$@"

venv=target/pyenv
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "maturin>=1.9,<2" "pytest>=8" numpy

echo "== maturin develop --release (python/)"
# Same release profile and target directory as the Rust tests: only the crates whose feature set
# differs are rebuilt.
(cd python && VIRTUAL_ENV="$PWD/../$venv" PATH="$PWD/../$venv/bin:$PATH" \
  "../$venv/bin/maturin" develop --release --quiet)

echo "== pytest python/tests"
"$venv/bin/python" -m pytest -q python/tests
