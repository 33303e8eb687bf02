#!/usr/bin/env bash
# Prints the environment (for `eval`) of the pinned CUDA 13.0 compiler wheels — nvcc and the
# headers, no libraries — installing them into a venv outside the repo on first use. Shared by
# the CI checks that compile CUDA code without a GPU (check-cuda-sources.sh, check-cuda-rust.sh).
set -euo pipefail
VENV="${G4_NVCC_VENV:-$HOME/.cache/g4/nvcc13-venv}"
PACKAGES=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 "nvidia-cuda-cccl==13.0.*")
if [ ! -f "$VENV/.g4-installed" ] || [ "$(cat "$VENV/.g4-installed")" != "${PACKAGES[*]}" ]; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q "${PACKAGES[@]}" >&2
  echo "${PACKAGES[*]}" > "$VENV/.g4-installed"
fi
CU13="$(echo "$VENV"/lib/python3*/site-packages/nvidia/cu13)"
[ -x "$CU13/bin/nvcc" ] || { echo "nvcc-env: nvcc missing under $CU13" >&2; exit 1; }
echo "export PATH='$CU13/bin:$PATH' CUDA_ROOT='$CU13' CUDA_PATH='$CU13' CUDA_HOME='$CU13' CUDA_COMPUTE_CAP='${CUDA_COMPUTE_CAP:-90}'"
