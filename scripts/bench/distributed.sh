#!/usr/bin/env bash
# Distributed benchmarks (docs/PERFORMANCE.md, "Distributed"): all_reduce bus bandwidth on 2 ranks
# against MPI_Allreduce called from C, alternating, ROUNDS times (default 3); then DDP's step on
# 1 and 2 ranks. Needs OpenMPI (mpicc, mpirun). Prints the raw lines; the tables take medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TP_NUM_THREADS=1
cargo build --release --workspace --features tensorplay-distributed/mpi --example dist_bench
mkdir -p target/bench
mpicc -O2 -o target/bench/allreduce_mpi scripts/bench/allreduce_mpi.c
bench=target/release/examples/dist_bench
for round in $(seq "${ROUNDS:-3}"); do
  echo "== round $round"
  mpirun -np 2 --oversubscribe target/bench/allreduce_mpi
  mpirun -np 2 --oversubscribe "$bench" allreduce
done
for round in $(seq "${ROUNDS:-3}"); do
  mpirun -np 1 "$bench" ddp
  mpirun -np 2 --oversubscribe "$bench" ddp
done
