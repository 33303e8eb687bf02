#!/usr/bin/env bash
# Stop 54, call 1 (H100): stop 53's prepared s53c4.sh, as it ran; its payload (target/ab5, target/ab6)
# was built in stop 53: kernel-bench fp8_gemm_bench at ae9c2ec (new) and 942c8a3 (old), g4 at ae9c2ec
# (g4-new) and 068e929 (g4-base).
# Stop 53, call 4. The pairs' remote "empty" arrivals without a cluster-scope release (CUTLASS's
# form, mbarrier.arrive.shared::cluster: 52 MEMBARs in the bench's SASS against 208); ncu
# (s53c3.sh) had the pair's warps stalled on memory barriers. 1) fp8_gemm_bench, new then old (as in
# s53c1.sh), TMA rows. 2) NEW = experiment/tma-cluster-multicast at ae9c2ec,
# BASE = 068e929 (main's kernels: single blocks): probe-ops of the two FP8 ops and the goldens
# with NEW, then E4B weight-only FP8 pp512 NEW / BASE alternated.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 --delete-source > /tmp/rw.log 2>&1; echo built > /tmp/built) &
for b in old new; do python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('target/ab5/fp8_gemm_bench_$b.xz'), open('/tmp/fp8_gemm_bench_$b','wb'))"; chmod +x /tmp/fp8_gemm_bench_$b; done
for b in new old; do
  timeout 100 /tmp/fp8_gemm_bench_$b > $OUT/bench-$SECONDS-$b.txt 2>&1; echo "== $b exit $?"
done
for f in $OUT/bench-*.txt; do echo "== $f"; grep -E "^(qkv|o|gate_up|down|gu_31b) +(bf16 \(weights|tma)" $f | grep -v "K in" | awk '{n=NF-4; printf "%s", $1; for(i=2;i<=n;i++) printf " %s", $i; printf " | %s\n", $(NF-3)}'; done
echo "TMA rows followed by wrong values (W8A8 rows are expected there):"; grep -h -B8 "unwritten" $OUT/bench-*.txt | grep -E "^\S+ +tma" | sort | uniq -c
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab6/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-new BASE=/tmp/bins/g4-base
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
import json; j=json.load(open('$OUT/$1-$3.json')); m=j['results'][0]['measurement']; print('round $3 $1 pp512 %.1f ± %.1f' % (m['tokens_per_s_mean'], m['tokens_per_s_stddev']))"
}
bench new $NEW 1; bench base $BASE 1; bench base $BASE 2; bench new $NEW 2
echo "elapsed $SECONDS s"
