#!/usr/bin/env bash
# Stop 54, call 7 (H100), as it ran; payload target/ab10/bins.tar.xz: g4-new (15b4a51), g4-base
# (4a88b87), fp8_gemm_bench (15b4a51).
# Stop 54, call 7. Sub-wave GEMMs in narrower tiles (112, 96 or 64 X rows where 128-row tiles
# fill less than one wave): NEW = that commit's build (as 6990941-dirty), BASE = 4a88b87 (main).
# 1) fp8_gemm_bench's q/k/v and o rows. 2) probe-ops of the FP8 ops and the goldens with NEW.
# 3) E4B weight-only FP8 pp512, NEW / BASE alternated.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab10/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-new BASE=/tmp/bins/g4-base
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 --delete-source > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 100 /tmp/bins/fp8_gemm_bench > $OUT/bench.txt 2>&1; echo "== bench exit $?"
grep -E "^(qkv|o) +(bf16 \(weights|dequant \+ bf16 \(|tma e4m3 128×(128, 6|112|96|64))" $OUT/bench.txt | awk '{n=NF-4; printf "%s", $1; for(i=2;i<=n;i++) printf " %s", $i; printf " | %s µs | err %s\n", $(NF-3), $(NF-1)}'
echo "TMA rows with rel. error > 1e-2:"; awk '/ tma / && $(NF-1)+0 > 1e-2' $OUT/bench.txt | cut -c1-100
{
for op in matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 120 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu)|exit|passed" $OUT/correct.txt | head -20
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/rw.log; echo "elapsed $SECONDS s"
bench() { # label binary round
  timeout 90 $2 bench --model /tmp/g4-e4b-fp8 --device cuda --dtype bf16 --tests pp512 -r 3 --json > $OUT/$1-$3.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$3.json')); m=j['results'][0]['measurement']; print('round $3 %-4s pp512 %.1f ± %.1f' % ('$1', m['tokens_per_s_mean'], m['tokens_per_s_stddev']))"
}
bench base $BASE 0; bench new $NEW 1; bench base $BASE 1; bench base $BASE 2; bench new $NEW 2; bench new $NEW 3; bench base $BASE 3
echo "elapsed $SECONDS s"
