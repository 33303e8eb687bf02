#!/usr/bin/env bash
# Stop 49, call 2. NEW = 9f2d0ff (FP8 one-row GEMVs: 2 or 4 weight rows per group by K, the GeGLU
# GEMV too), BASE = f9fc128 (stop 48's code). Correctness, E4B FP8 / FP8_DYNAMIC A/B, then the
# per-kernel time of an FP8 decode step (ncu).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-c49b BASE=/tmp/bins/g4-c2
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw2.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs > /tmp/rw1.log 2>&1; echo built > /tmp/built) &
{
for op in linear_gelu_mul matmul_bt_fp8_channel moe_experts_fp8; do
  timeout 90 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens graph exit $?"
timeout 100 $NEW verify-golden --device cuda --decode eager | tail -1; echo "goldens eager exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu|moe_experts_fp8)|exit|passed" $OUT/correct.txt
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
bench $BASE base g4-e4b-fp8 3; bench $NEW new g4-e4b-fp8 3
bench $BASE base g4-e4b-fp8-dynamic 1; bench $NEW new g4-e4b-fp8-dynamic 1
bench $NEW new g4-e4b-fp8-dynamic 2; bench $BASE base g4-e4b-fp8-dynamic 2
bench $NEW new g4-e4b 2
echo "elapsed $SECONDS s"
timeout 240 python3 scripts/kernel_breakdown.py $OUT/ncu-fp8.csv -- $NEW bench --model /tmp/g4-e4b-fp8 --device cuda --dtype bf16 --tests pp512,tg4 --decode eager -r 1 > /tmp/ncu.log 2>&1; echo "ncu exit $?"
python3 scripts/kernel_breakdown.py $OUT/ncu-fp8.csv > $OUT/profile-fp8.md 2>&1; sed -n '/decode/,$p' $OUT/profile-fp8.md | head -40
echo "elapsed $SECONDS s"
