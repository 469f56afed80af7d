#!/usr/bin/env bash
# The README's test command: the Rust test suite, then the Python package — the `tensorplay._C`
# extension built in release by maturin into a virtual environment under target/ (made here, with
# maturin, pytest and numpy from PyPI) — and its pytest suite. Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test --workspace --release $*"
cargo test --workspace --release "$@"

# tensorplay::distributed's multi-process tests (mpirun -np 2 and 3, and the timeout and
# failing-rank scenarios) need an MPI installation to build and run: OpenMPI's
# `openmpi-bin libopenmpi-dev` and `libclang-dev` (.ci/run installs them). `--workspace` keeps the
# feature set of the command above, so only the distributed crate and its test are built.
if command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1; then
  echo "== distributed: multi-process tests under mpirun"
  cargo test --workspace --release --features tensorplay-distributed/mpi --test mpi
elif [ -n "${TP_REQUIRE_MPI:-}" ]; then
  echo "TP_REQUIRE_MPI is set but mpirun/mpicc are missing" >&2
  exit 1
else
  echo "== distributed: multi-process tests skipped (no MPI installation; see docs/guide/distributed.md)"
fi

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
