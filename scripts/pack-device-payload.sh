#!/usr/bin/env bash
# Packs binaries for a device call (docs/device-calls/): each one stripped, all in one tar inside
# one xz stream (LZMA2 with a 256 MiB dictionary, so that binaries sharing most of their bytes
# cost little more than one), which device-call-lib.sh's `unpack_payload` opens. A call carries
# at most 64 MiB.
#   scripts/pack-device-payload.sh ARCHIVE NAME=FILE…     e.g. target/s66c1/bins.tar.xz g4=target/cuda/release/g4
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,6p "$0" >&2; exit 2; }
archive=$1
shift
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
for pair in "$@"; do
  name=${pair%%=*} file=${pair#*=}
  [ "$name" != "$pair" ] && [ -f "$file" ] || { echo "pack-device-payload: $pair is not NAME=FILE" >&2; exit 2; }
  cp "$file" "$staging/$name"
  strip "$staging/$name"
done
mkdir -p "$(dirname "$archive")"
python3 - "$archive" "$staging" <<'PY'
import lzma, os, sys, tarfile
archive, staging = sys.argv[1:]
filters = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": 256 << 20}]
with lzma.open(archive, "wb", format=lzma.FORMAT_XZ, filters=filters) as xz:
    with tarfile.open(fileobj=xz, mode="w") as tar:
        for name in sorted(os.listdir(staging)):
            tar.add(os.path.join(staging, name), arcname=name)
print(f"{archive}: {os.path.getsize(archive) / 2**20:.1f} MiB")
PY
