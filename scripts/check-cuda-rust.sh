#!/usr/bin/env bash
# Lints the Rust code behind `--features cuda` (the native seam's CUDA implementation, graph
# capture, every op's native arm) on a machine without a GPU: clippy needs nvcc, because
# candle's and g4's build scripts compile their kernels to PTX, but no driver and no linking.
# nvcc comes from the pinned wheels (nvcc-env.sh); the target directory lives outside the repo
# so that candle-kernels (about 5 minutes cold on 2 cores) is compiled once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Assigned first: under `set -e`, a failing nvcc-env.sh then stops the script.
nvcc_env="$(scripts/nvcc-env.sh)"
eval "$nvcc_env"
export CARGO_TARGET_DIR="${G4_CUDA_CHECK_TARGET:-$HOME/.cache/g4/cuda-check-target}"
cargo clippy --features cuda --all-targets -- -D warnings
echo "check-cuda-rust: the --features cuda build passes clippy"
