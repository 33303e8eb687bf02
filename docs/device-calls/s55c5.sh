#!/usr/bin/env bash
# Stop 55, call 5; payload target/sk/bins.tar.xz: g4-new (0fe6e02's build), g4-base (15b4a51's
# build, stop 54's call 8: the same E4B launches as 1ad55ec, main at this stop's start),
# fp8_gemm_bench (0fe6e02).
# One chooser for a 128-row-tile GEMM's split (whole K, 112/96/64-row tiles, slices, stream-K):
# E4B's KV-sharing q now in 64-row tiles, down as stream-K. 1) fp8_gemm_bench's rows for those.
# 2) probe-ops of both FP8 GEMM ops and the goldens, NEW. 3) E4B weight-only FP8 pp512, NEW and
# BASE alternated, bf16 beside them.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/sk/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-new BASE=/tmp/bins/g4-base
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 150 /tmp/bins/fp8_gemm_bench > $OUT/bench.txt 2>&1; echo "== bench exit $?"
grep -E "^(q_kvshare|down) +(bf16 \(weights|tma e4m3 128×(128, 6|64|128, K in [23])|tma e4m3 stream)" $OUT/bench.txt | awk '{n=NF-4; printf "%s", $1; for(i=2;i<=n;i++) printf " %s", $i; printf " | %s µs | err %s\n", $(NF-3), $(NF-1)}'
echo "TMA rows with rel. error > 1e-2:"; awk '/ tma / && $(NF-1)+0 > 1e-2' $OUT/bench.txt | cut -c1-100
{
for op in matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 150 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu)|exit|passed|FAIL|fail" $OUT/correct.txt | head -20
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/rw.log; echo "elapsed $SECONDS s"
bench() { # label binary model round
  timeout 90 $2 bench --model $3 --device cuda --dtype bf16 --tests pp512 -r 3 --json > $OUT/$1-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$4.json')); m=j['results'][0]['measurement']; print('round $4 %-5s pp512 %.1f ± %.1f' % ('$1', m['tokens_per_s_mean'], m['tokens_per_s_stddev']))"
}
F=/tmp/g4-e4b-fp8 B=/tmp/g4-e4b
bench bf16 $NEW $B 1; bench base $BASE $F 1; bench new $NEW $F 1; bench new $NEW $F 2; bench base $BASE $F 2
bench bf16 $NEW $B 2; bench base $BASE $F 3; bench new $NEW $F 3
echo "elapsed $SECONDS s"
