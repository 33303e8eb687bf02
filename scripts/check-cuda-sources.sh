#!/usr/bin/env bash
# Compile-checks every src/kernels/cuda/*.cu to PTX with nvcc from the pinned CUDA 13.0 wheels
# (no GPU, no driver needed), for the two targets build.rs uses. CI runs this so that a kernel
# that does not compile cannot land.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${G4_NVCC_VENV:-$HOME/.cache/g4/nvcc13-venv}"
PACKAGES=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 "nvidia-cuda-cccl==13.0.*")
if [ ! -f "$VENV/.g4-installed" ] || [ "$(cat "$VENV/.g4-installed")" != "${PACKAGES[*]}" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "${PACKAGES[@]}"
  echo "${PACKAGES[*]}" > "$VENV/.g4-installed"
fi
CU13="$(echo "$VENV"/lib/python3*/site-packages/nvidia/cu13)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
count=0
for source in src/kernels/cuda/*.cu; do
  for arch in compute_90 compute_80; do
    "$CU13/bin/nvcc" --ptx -O3 -std=c++17 -arch="$arch" -Werror all-warnings -o "$out/kernel.ptx" "$source"
  done
  count=$((count + 1))
done
echo "check-cuda-sources: $count CUDA sources compile to PTX (compute_90, compute_80)"
