#!/usr/bin/env bash
# Compile-checks every src/kernels/cuda/*.cu to PTX with nvcc from the pinned CUDA 13.0 wheels
# (no GPU, no driver needed), for the two targets build.rs uses. CI runs this so that a kernel
# that does not compile cannot land.
set -euo pipefail
cd "$(dirname "$0")/.."
# Assigned first: under `set -e`, a failing nvcc-env.sh then stops the script.
nvcc_env="$(scripts/nvcc-env.sh)"
eval "$nvcc_env"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
count=0
for source in src/kernels/cuda/*.cu; do
  for arch in compute_90 compute_80; do
    nvcc --ptx -O3 -std=c++17 -arch="$arch" -Werror all-warnings -o "$out/kernel.ptx" "$source"
  done
  count=$((count + 1))
done
echo "check-cuda-sources: $count CUDA sources compile to PTX (compute_90, compute_80)"
