#!/usr/bin/env bash
# Stop 49, call 1. NEW = 6300b62 (FP8 one-row GeGLU GEMV with four weight rows per group),
# BASE = f9fc128 (stop 48's code). Kernel benches, correctness, then E4B FP8 / FP8_DYNAMIC A/B.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-c49 BASE=/tmp/bins/g4-c2
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw2.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs > /tmp/rw1.log 2>&1; echo built > /tmp/built) &
timeout 120 /tmp/bins/fp8_gemv_bench > $OUT/fp8_gemv_bench.txt 2>&1; echo "fp8_gemv_bench exit $?"
timeout 120 /tmp/bins/gemv_bench > $OUT/gemv_bench.txt 2>&1; echo "gemv_bench exit $?"
sed -n '/GeGLU/,$p' $OUT/fp8_gemv_bench.txt | python3 -c "
import sys,re
for line in sys.stdin:
    if '|' not in line: continue
    name, rest = line.split('|',1)
    print(name.split()[0], ' '.join(re.sub(r'\s*\(\d+\)','',v).strip() for v in rest.split(';') if v.strip()))"
sed -n '/GeGLU/,$p' $OUT/gemv_bench.txt | python3 -c "
import sys,re
for line in sys.stdin:
    if '|' not in line: continue
    name, rest = line.split('|',1)
    print('bf16', name.split()[0], ' '.join(re.sub(r'\s*\(\d+\)','',v).strip() for v in rest.split(';') if v.strip()))"
echo "elapsed $SECONDS s"
{
for op in linear_gelu_mul matmul_bt_fp8_channel; do
  timeout 90 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens graph exit $?"
timeout 100 $NEW verify-golden --device cuda --decode eager | tail -1; echo "goldens eager exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu)|exit|passed" $OUT/correct.txt
echo "elapsed $SECONDS s"
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw2.log; tail -1 /tmp/rw1.log; echo "elapsed $SECONDS s"
bench() { # binary label checkpoint round
  timeout 90 $1 bench --model /tmp/$3 --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 2 --json > /tmp/$2-$3-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$2-$3-$4.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $4 $2 $3', 'pp512 %.0f ± %.0f tg128 %.1f ± %.1f MiB %.0f' % (*r['pp512'], *r['tg128'], j['memory_mib']['after_load']))"
}
bench $NEW new g4-e4b 1
bench $BASE base g4-e4b-fp8 1; bench $NEW new g4-e4b-fp8 1
bench $NEW new g4-e4b-fp8 2; bench $BASE base g4-e4b-fp8 2
bench $BASE base g4-e4b-fp8-dynamic 1; bench $NEW new g4-e4b-fp8-dynamic 1
bench $NEW new g4-e4b-fp8-dynamic 2; bench $BASE base g4-e4b-fp8-dynamic 2
bench $NEW new g4-e4b 2
echo "elapsed $SECONDS s"
