#!/usr/bin/env bash
# Stop 54, call 6 (H100), as it ran; payload target/ab9/g4.tar.xz (4a88b87's build).
# Stop 54, call 6: main at 4a88b87 (the TMA GEMM's trailing arguments assembled in one place) —
# probe-ops of the two FP8 ops and the goldens on CUDA, and E4B FP8 pp512 (its GEMMs take the
# wide-then-narrow, narrow and sliced entries).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab9/g4.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 --delete-source > /tmp/rw.log 2>&1; echo built > /tmp/built) &
{
for op in matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 120 $G4 probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $G4 verify-golden --device cuda | tail -1; echo "goldens exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu)|exit|passed" $OUT/correct.txt | head -20
while [ ! -f /tmp/built ]; do sleep 2; done
timeout 90 $G4 bench --model /tmp/g4-e4b-fp8 --device cuda --dtype bf16 --tests pp512 -r 3 --json > $OUT/fp8.json 2> /tmp/e.err || tail -3 /tmp/e.err
python3 -c "
import json; j=json.load(open('$OUT/fp8.json')); m=j['results'][0]['measurement']; print('FP8 pp512 %.1f ± %.1f' % (m['tokens_per_s_mean'], m['tokens_per_s_stddev']))"
echo "elapsed $SECONDS s"
