#!/usr/bin/env bash
# Stop 54, call 4 (H100), as it ran; payload target/ab8/bins.tar.xz: g4-cl (46501e9 on
# experiment/tma-cluster-slices), g4-wtn (8a09e6f), fp8_gemm_bench (46501e9).
# Stop 54, call 4. A tile's K slices as one cluster, summed by its first block from the others'
# shared memory (46501e9, built as 23c4e22-dirty: CL) against the same GEMM with slices summed
# through memory by a second launch (8a09e6f: WTN, main before). 1) fp8_gemm_bench: q/k/v, o and
# down rows. 2) probe-ops of the FP8 ops and the goldens with CL. 3) E4B weight-only FP8 pp512,
# CL / WTN alternated, and bf16 once.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab8/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-cl BASE=/tmp/bins/g4-wtn
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 || tail -3 /tmp/build.log
(python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo done > /tmp/rw.done) &
timeout 100 /tmp/bins/fp8_gemm_bench > $OUT/bench.txt 2>&1; echo "== bench exit $?"
grep -E "^(qkv|o|down|gate_up) +(bf16 \(weights|dequant \+ bf16 \(|tma e4m3 128×128)" $OUT/bench.txt | awk '{n=NF-4; printf "%s", $1; for(i=2;i<=n;i++) printf " %s", $i; printf " | %s µs | err %s\n", $(NF-3), $(NF-1)}'
echo "TMA rows with rel. error > 1e-2:"; awk '/ tma / && $(NF-1)+0 > 1e-2' $OUT/bench.txt | cut -c1-100
{
for op in matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 120 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu)|exit|passed" $OUT/correct.txt | head -20
bench() { # label binary model round
  timeout 90 $2 bench --model $3 --device cuda --dtype bf16 --tests pp512 -r 3 --json > $OUT/$1-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$4.json')); m=j['results'][0]['measurement']; print('round $4 %-5s pp512 %.1f ± %.1f' % ('$1', m['tokens_per_s_mean'], m['tokens_per_s_stddev']))"
}
bench bf16 $NEW /tmp/g4-e4b 1
while [ ! -f /tmp/rw.done ]; do sleep 2; done; tail -1 /tmp/rw.log
bench wtn $BASE /tmp/g4-e4b-fp8 0
bench cl $NEW /tmp/g4-e4b-fp8 1; bench wtn $BASE /tmp/g4-e4b-fp8 1; bench wtn $BASE /tmp/g4-e4b-fp8 2; bench cl $NEW /tmp/g4-e4b-fp8 2
echo "elapsed $SECONDS s"
