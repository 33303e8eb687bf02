#!/usr/bin/env bash
# Stop 48, call 2. NEW = f9fc128 (vectorised rounding, e4m3 norm with hardware pairs, 4-row FP8
# GEMV), BASE = 775543a. Correctness, then E4B bf16 / FP8 / FP8_DYNAMIC A/B.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-c2 BASE=/tmp/bins/g4-base
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs > /tmp/rw1.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw2.log 2>&1; echo built > /tmp/built) &
{
for op in matmul_bt_fp8_channel dual_rms_norm_plus_res_e4m3 round_rows_e4m3 matmul_bt_fp8_dynamic linear_gelu_mul; do
  timeout 60 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens graph exit $?"
timeout 100 $NEW verify-golden --device cuda --decode eager | tail -1; echo "goldens eager exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(dual_rms|round_rows|matmul_bt_fp8|linear_gelu)|exit|passed" $OUT/correct.txt
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw1.log; tail -1 /tmp/rw2.log; echo "elapsed $SECONDS s"
bench() { # binary label checkpoint round
  timeout 90 $1 bench --model /tmp/$3 --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 2 --json > /tmp/$2-$3-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$2-$3-$4.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $4 $2 $3', 'pp512 %.0f ± %.0f tg128 %.1f ± %.1f MiB %.0f' % (*r['pp512'], *r['tg128'], j['memory_mib']['after_load']))"
}
bench $NEW new g4-e4b 1
bench $BASE base g4-e4b-fp8 1; bench $NEW new g4-e4b-fp8 1
bench $BASE base g4-e4b-fp8-dynamic 1; bench $NEW new g4-e4b-fp8-dynamic 1
bench $NEW new g4-e4b-fp8-dynamic 2; bench $BASE base g4-e4b-fp8-dynamic 2
bench $NEW new g4-e4b-fp8 2; bench $BASE base g4-e4b-fp8 2
bench $NEW new g4-e4b 2
echo "elapsed $SECONDS s"
