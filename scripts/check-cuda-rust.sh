#!/usr/bin/env bash
# Lints the Rust code behind `--features cuda` (the native seam's CUDA implementation, graph
# capture, every op's native arm) on a machine without a GPU: clippy needs nvcc, because
# candle's and g4's build scripts compile their kernels to PTX, but no driver and no linking.
# The toolchain comes from build-cuda.sh's pinned wheels; the target directory lives outside the
# repo so that candle-kernels (about 15 minutes cold on 2 cores) is compiled once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/build-cuda.sh --env)"
export CARGO_TARGET_DIR="${G4_CUDA_CHECK_TARGET:-$HOME/.cache/g4/cuda-check-target}"
cargo clippy --features cuda --all-targets -- -D warnings
echo "check-cuda-rust: the --features cuda build passes clippy"
