#!/usr/bin/env bash
# Stop 50, call 1. NEW = aa213be (experiment/dequant-by-8: dequant_fp8_channel 8 weights a thread
# per load, whole-sector stores), BASE = 9f2d0ff (main's kernels). Correctness of NEW, the kernel
# benches' dequantisation and L2-slice rows, then E4B weight-only FP8 A/B.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-by8 BASE=/tmp/bins/g4-c49b
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw2.log 2>&1; echo built > /tmp/built) &
{
for op in dequant_fp8_channel matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 90 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens graph exit $?"
timeout 100 $NEW verify-golden --device cuda --prefill-chunk 3 | tail -1; echo "goldens chunk3 exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(dequant|matmul_bt_fp8|linear_gelu)|exit|passed" $OUT/correct.txt
echo "elapsed $SECONDS s"
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw2.log; echo "elapsed $SECONDS s"
timeout 120 /tmp/bins/fp8_gemv_bench > $OUT/fp8_gemv_bench.txt 2>&1; echo "gemv bench exit $?"
grep -i -E "dequant|read" $OUT/fp8_gemv_bench.txt | tail -12
timeout 150 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm_bench.txt 2>&1; echo "gemm bench exit $?"
grep -E "bf16|slices" $OUT/fp8_gemm_bench.txt | head -30
echo "elapsed $SECONDS s"
bench() { # binary label checkpoint round
  timeout 90 $1 bench --model /tmp/$3 --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 2 --json > /tmp/$2-$3-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$2-$3-$4.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $4 $2 $3', 'pp512 %.0f ± %.0f tg128 %.1f ± %.1f MiB %.0f' % (*r['pp512'], *r['tg128'], j['memory_mib']['after_load']))"
}
bench $BASE base g4-e4b 1
bench $BASE base g4-e4b-fp8 1; bench $NEW new g4-e4b-fp8 1
bench $NEW new g4-e4b-fp8 2; bench $BASE base g4-e4b-fp8 2
bench $BASE base g4-e4b-fp8 3; bench $NEW new g4-e4b-fp8 3
bench $BASE base g4-e4b 2
echo "elapsed $SECONDS s"
