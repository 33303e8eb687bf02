#!/usr/bin/env bash
# Builds g4 with --features cuda on a machine without a GPU (docs: ../shared/docs/CUDA_BUILD.md).
# The CUDA 13.0 toolchain and link libraries come from pinned PyPI wheels in a venv outside the
# repo; libcuda.so (a driver library) is replaced at link time by a stub exporting the cu* symbols
# the objects reference — at run time the real driver is found by its soname. Idempotent: a second
# run with nothing changed only re-runs cargo. Output: target/cuda/release/g4, and COMMIT beside it.
#
#   scripts/build-cuda.sh            # build
#   scripts/build-cuda.sh --env      # print the environment lines, for `eval` (e.g. nvcc checks)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${G4_CUDA_VENV:-$HOME/.cache/g4/cuda13-venv}"
LINKS="${G4_CUDA_LINKS:-$HOME/.cache/g4/cuda13-links}"
PACKAGES=(
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
  "nvidia-cuda-cccl==13.0.*" nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88
)

if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.g4-installed" ] || [ "$(cat "$VENV/.g4-installed")" != "${PACKAGES[*]}" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "${PACKAGES[@]}"
  echo "${PACKAGES[*]}" > "$VENV/.g4-installed"
fi
CU13="$(echo "$VENV"/lib/python3*/site-packages/nvidia/cu13)"
[ -x "$CU13/bin/nvcc" ] || { echo "build-cuda: nvcc missing under $CU13" >&2; exit 1; }

export PATH="$CU13/bin:$PATH" CUDA_ROOT="$CU13" CUDA_PATH="$CU13" CUDA_HOME="$CU13" CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export G4_CUDA_LINK_DIR="$LINKS"
if [ "${1:-}" = "--env" ]; then
  echo "export PATH='$PATH' CUDA_ROOT='$CU13' CUDA_PATH='$CU13' CUDA_HOME='$CU13' CUDA_COMPUTE_CAP='$CUDA_COMPUTE_CAP' G4_CUDA_LINK_DIR='$LINKS'"
  exit 0
fi

# Unversioned names for the linker; the wheels ship only versioned sonames.
mkdir -p "$LINKS"
for lib in cublas cublasLt cudart nvrtc; do ln -sf "$CU13/lib/lib$lib.so.13" "$LINKS/lib$lib.so"; done
ln -sf "$CU13/lib/libcurand.so.10" "$LINKS/libcurand.so"

# The libcuda stub: every cu* driver symbol cudarc can call, as an empty function.
if [ ! -f "$LINKS/libcuda.so" ]; then
  # A fresh machine has no registry sources yet: under `set -o pipefail` a failing ls would end
  # the script here, so its absence is tested, then fetched.
  find_bindings() { compgen -G "$HOME/.cargo/registry/src/*/cudarc-*/src/driver/sys" | head -1 || true; }
  bindings="$(find_bindings)"
  if [ -z "$bindings" ]; then cargo fetch -q; bindings="$(find_bindings)"; fi
  [ -n "$bindings" ] || { echo "build-cuda: cudarc's driver bindings not found after cargo fetch" >&2; exit 1; }
  grep -rhoE '\bcu[A-Z][A-Za-z0-9_]*\b' "$bindings" | sort -u \
    | awk '{ printf "void %s(void) {}\n", $1 }' > "$LINKS/libcuda_stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$LINKS/libcuda.so" "$LINKS/libcuda_stub.c"
fi

cargo build --release --features cuda --target-dir target/cuda
# The commit it was built from, for scripts/gpu-check.sh to record beside what it measures.
git describe --always --dirty > target/cuda/release/COMMIT 2>/dev/null || echo unknown > target/cuda/release/COMMIT
echo "build-cuda: target/cuda/release/g4 ($(cat target/cuda/release/COMMIT))"
