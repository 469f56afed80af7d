#!/usr/bin/env bash
# GPU verification in two steps, since the GPU machine has no Rust toolchain:
#
#   scripts/gpu-check.sh build   here: builds the GPU test binaries (no CUDA toolkit needed) into
#                                target/gpu-check/, stripped so the bundle stays well under the
#                                64 MiB a device run carries.
#   scripts/gpu-check.sh run     on the GPU machine: runs them. The device queries must find the
#                                GPU (TP_EXPECT_GPU=1); the kernel check compiles every generated
#                                kernel of the op-table sweep with the NVRTC found there and runs
#                                them under the host emulation. Output: $OUT/gpu-check.log.
#
# One device call does the second step:
#   run(command="bash scripts/gpu-check.sh run", carry=["target/gpu-check"], timeout_s=400)
#
# What it does not do yet: launch generated kernels on the device (CUDA tensors and the launch
# path are not implemented), so no compiled-vs-eager comparison on hardware and no bandwidth
# numbers; see docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=target/gpu-check

build() {
  rm -rf "$bundle"
  mkdir -p "$bundle"
  local bin
  bin=$(cargo test --release -p tensorplay --test cuda_devices --no-run 2>&1 \
    | grep -o 'target/release/deps/cuda_devices-[0-9a-f]*' | head -n 1)
  cp "$bin" "$bundle/cuda_devices"
  bin=$(cargo test --release -p tensorplay-compiler --test cuda --no-run 2>&1 \
    | grep -o 'target/release/deps/cuda-[0-9a-f]*' | head -n 1)
  cp "$bin" "$bundle/cuda_kernels"
  strip --strip-debug "$bundle"/cuda_devices "$bundle"/cuda_kernels
  du -sh "$bundle"
  echo "gpu-check: bundle ready in $bundle (carry it to the GPU machine and run: bash scripts/gpu-check.sh run)"
}

run() {
  local out=${OUT:-$bundle}
  mkdir -p "$out"
  {
    echo "== $(date -u +%FT%TZ) gpu-check on $(hostname)"
    nvidia-smi -L || echo "nvidia-smi: not available"
    echo "== device queries (TP_EXPECT_GPU=${TP_EXPECT_GPU:-1})"
    TP_EXPECT_GPU=${TP_EXPECT_GPU:-1} "$bundle/cuda_devices" --nocapture
    local nvrtc
    nvrtc=$(find / \( -name 'libnvrtc.so.13' -o -name 'libnvrtc.so.12' \) -not -path '/proc/*' \
      2>/dev/null | head -n 1 || true)
    echo "== generated kernels: NVRTC (${nvrtc:-none found}) and the host emulation"
    if [ -n "$nvrtc" ]; then
      TP_NVRTC="$nvrtc" TP_REQUIRE_NVRTC=1 "$bundle/cuda_kernels" --nocapture
    else
      "$bundle/cuda_kernels" --nocapture
    fi
  } 2>&1 | tee "$out/gpu-check.log"
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
