#!/usr/bin/env bash
# Compiles every kernel source (src/kernels/cuda/*.cu, written so that HIP compiles the same
# files) to AMD GPU code objects for gfx90a (MI200), gfx942 (MI300) and gfx1100 (RDNA3), on a
# machine without ROCm or an AMD GPU, and checks each object's ELF machine flags name its
# target. Prints one line per code object: `ARCH PATH`.
#
# The toolchain comes from Debian's packages, downloaded and extracted into a cache outside the
# repo (no system install): bookworm's clang-19 + lld-19 and HIP 5.2.3 headers, and trixie's
# rocm-device-libs-17 bitcode (../shared/docs/HIP_BUILD.md says why this combination).
# These objects have not run on AMD hardware in this project's tests.
#
#   scripts/build-hip.sh [OUT_DIR]     (default: target/hip)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-target/hip}"
CACHE="${G4_HIP_TOOLCHAIN:-$HOME/.cache/g4/hip-toolchain}"
BOOKWORM=(clang-19 libclang-cpp19 libllvm19 libclang-common-19-dev llvm-19-linker-tools libclang1-19 lld-19 libamdhip64-dev)
TRIXIE=(rocm-device-libs-17)
STAMP="${BOOKWORM[*]} ${TRIXIE[*]}"

if [ ! -f "$CACHE/.g4-installed" ] || [ "$(cat "$CACHE/.g4-installed")" != "$STAMP" ]; then
  rm -rf "$CACHE"
  mkdir -p "$CACHE/debs" "$CACHE/root"
  # Each suite through a private source list and state dir: the system's apt lists are neither
  # needed (a fresh machine has none) nor touched.
  fetch() {
    local suite="$1"; shift
    local state="$CACHE/apt-$suite"
    mkdir -p "$state/lists/partial"
    printf 'deb http://deb.debian.org/debian %s main\n' "$suite" "$suite-updates" > "$state/sources.list"
    local apt=(-o "Dir::Etc::sourcelist=$state/sources.list" -o "Dir::Etc::sourceparts=-"
               -o "Dir::State::Lists=$state/lists" -o "APT::Get::List-Cleanup=0")
    apt-get "${apt[@]}" update -qq >&2
    (cd "$CACHE/debs" && apt-get "${apt[@]}" download -q "$@" >&2)
  }
  fetch bookworm "${BOOKWORM[@]}"
  fetch trixie "${TRIXIE[@]}"
  for deb in "$CACHE"/debs/*.deb; do dpkg-deb -x "$deb" "$CACHE/root"; done
  echo "$STAMP" > "$CACHE/.g4-installed"
fi

ROOT="$CACHE/root"
export LD_LIBRARY_PATH="$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/usr/lib/llvm-19/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CLANG="$ROOT/usr/lib/llvm-19/bin/clang++"
BITCODE="$(dirname "$(find "$ROOT" -name ocml.bc | head -1)")"
[ -x "$CLANG" ] && [ -d "$BITCODE" ] || { echo "build-hip: toolchain incomplete under $CACHE" >&2; exit 1; }

# EF_AMDGPU_MACH, the low byte of a code object's ELF e_flags, per target.
declare -A MACH=([gfx90a]=3f [gfx942]=4c [gfx1100]=41)
mkdir -p "$OUT"
count=0
for source in src/kernels/cuda/*.cu; do
  name="$(basename "$source" .cu)"
  for arch in gfx90a gfx942 gfx1100; do
    object="$OUT/$name.$arch.co"
    "$CLANG" -x hip --offload-arch="$arch" --cuda-device-only --no-gpu-bundle-output -O3 -std=c++17 \
      -Werror --rocm-path="$ROOT/usr" --rocm-device-lib-path="$BITCODE" -c "$source" -o "$object"
    flags="$(od -An -t x4 -j 48 -N 4 "$object" | tr -d ' ')"
    if [ "${flags: -2}" != "${MACH[$arch]}" ]; then
      echo "build-hip: $object has e_flags 0x$flags, not a $arch object" >&2
      exit 1
    fi
    echo "$arch $object"
    count=$((count + 1))
  done
done
echo "build-hip: $count code objects (gfx90a, gfx942, gfx1100); not run on AMD hardware here" >&2
