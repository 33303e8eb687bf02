#!/usr/bin/env bash
# Stop 55, call 4; payload target/sk/bins.tar.xz: g4-new (8da3598's build), fp8_gemm_bench (same).
# Call 3 again with stream-K over tall tiles (256 weight rows × 128 X rows); the bench times
# tall and 128-row stream-K.
# Stream-K for plain FP8 prefill GEMMs. 1) fp8_gemm_bench: stream-K beside the tilings g4 took
# before (112/96-row tiles, K in slices) and cuBLAS bf16. 2) probe-ops of both FP8 GEMM ops, the
# goldens. 3) E4B weight-only FP8 pp512 with stream-K (default) and without (G4_STREAM_K=0: the
# previous plans), alternated, and bf16 beside them; greedy tokens of both FP8 plans.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/sk/bins.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4-new
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 150 /tmp/bins/fp8_gemm_bench > $OUT/bench.txt 2>&1; echo "== bench exit $?"
grep -E "^(qkv|o|q_kvshare|down) +(bf16 \(weights|tma e4m3 128×(128, 6|112|96|64|128, K in)|tma e4m3 stream)" $OUT/bench.txt | awk '{n=NF-4; printf "%s", $1; for(i=2;i<=n;i++) printf " %s", $i; printf " | %s µs | err %s\n", $(NF-3), $(NF-1)}'
grep -E "^gate_up +tma e4m3 (128×128, 6|stream|wide, then)" $OUT/bench.txt | cut -c1-90
echo "TMA rows with rel. error > 1e-2:"; awk '/ tma / && $(NF-1)+0 > 1e-2' $OUT/bench.txt | cut -c1-100
{
for op in matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 150 $G4 probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu)|exit|passed|FAIL|fail" $OUT/correct.txt | head -20
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/rw.log; echo "elapsed $SECONDS s"
bench() { # label model round [env]
  env $4 timeout 90 $G4 bench --model $2 --device cuda --dtype bf16 --tests pp512 -r 3 --json > $OUT/$1-$3.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$3.json')); m=j['results'][0]['measurement']; print('round $3 %-6s pp512 %.1f ± %.1f' % ('$1', m['tokens_per_s_mean'], m['tokens_per_s_stddev']))"
}
F=/tmp/g4-e4b-fp8 B=/tmp/g4-e4b
bench bf16 $B 1 ""; bench slices $F 1 G4_STREAM_K=0; bench stream $F 1 ""; bench stream $F 2 ""; bench slices $F 2 G4_STREAM_K=0
bench bf16 $B 2 ""; bench slices $F 3 G4_STREAM_K=0; bench stream $F 3 ""
echo "elapsed $SECONDS s"
