#!/usr/bin/env bash
# GPU verification in two steps, since the GPU machine has no Rust toolchain:
#
#   scripts/gpu-check.sh build   here: builds the GPU test binaries (no CUDA toolkit needed) into
#                                target/gpu-check/, stripped so the bundle stays well under the
#                                64 MiB a device run carries.
#   scripts/gpu-check.sh run     on the GPU machine: runs them. The device tests must find the
#                                GPU (TP_EXPECT_GPU=1): tensors copy to the device and back,
#                                compiled graphs launch their regions as NVRTC-compiled kernels on
#                                cuda:0 and match the CPU (pointwise, reductions, softmax, W3, W6),
#                                and fused W3/W6 at 2^28 elements print their bandwidth against a
#                                device-to-device copy (TP_GPU_BENCH=1). The kernel check then
#                                compiles every generated kernel of the op-table sweep with the
#                                NVRTC found there and runs them under the host emulation.
#                                Output: $OUT/gpu-check.log.
#
# One device call does the second step:
#   run(command="bash scripts/gpu-check.sh run", carry=["target/gpu-check"], timeout_s=400)
#
# The compiled-on-device comparison needs an NVRTC library on the GPU machine (found below and
# passed as TP_NVRTC), and matmul on the device a cuBLAS (passed as TP_CUBLAS).
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
  # All symbols go: with them the two binaries (each links the whole compiler) weigh ~66 MB,
  # over the 64 MiB a device run carries; stripped, ~47 MB.
  strip --strip-all "$bundle"/cuda_devices "$bundle"/cuda_kernels
  du -sh "$bundle"
  echo "gpu-check: bundle ready in $bundle (carry it to the GPU machine and run: bash scripts/gpu-check.sh run)"
}

run() {
  local out=${OUT:-$bundle}
  mkdir -p "$out"
  {
    echo "== $(date -u +%FT%TZ) gpu-check on $(hostname)"
    nvidia-smi -L || echo "nvidia-smi: not available"
    local nvrtc
    nvrtc=$(find / \( -name 'libnvrtc.so.13' -o -name 'libnvrtc.so.12' \) -not -path '/proc/*' \
      2>/dev/null | head -n 1 || true)
    # matmul on the device needs cuBLAS: the loader's path, or the first libcublas found.
    local cublas
    cublas=$(find / -name 'libcublas.so.12' -not -path '/proc/*' 2>/dev/null | head -n 1 || true)
    echo "== device tests (TP_EXPECT_GPU=${TP_EXPECT_GPU:-1}, NVRTC ${nvrtc:-none found}," \
      "cuBLAS ${cublas:-none found})"
    TP_EXPECT_GPU=${TP_EXPECT_GPU:-1} TP_GPU_BENCH=1 TP_NVRTC="$nvrtc" TP_CUBLAS="$cublas" \
      "$bundle/cuda_devices" --nocapture --test-threads=1
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
