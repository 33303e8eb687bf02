#!/usr/bin/env bash
# Stop 48, call 1. NORM = e806779 (norm rounds FP8_DYNAMIC decode inputs), VEC = 8ceb281 (vector
# e4m3 rounding branch), BASE = 775543a. Correctness first, then fp8_gemv_bench, then E4B A/B.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NORM=/tmp/bins/g4-norm VEC=/tmp/bins/g4-new BASE=/tmp/bins/g4-base
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs > /tmp/rw1.log 2>&1; echo built > /tmp/built) &
{
for op in dual_rms_norm_plus_res_e4m3 round_rows_e4m3 matmul_bt_fp8_dynamic; do
  timeout 60 $NORM probe-ops --device cuda --op $op; echo "norm probe $op exit $?"
done
for op in round_rows_e4m3 matmul_bt_fp8_dynamic; do
  timeout 60 $VEC probe-ops --device cuda --op $op; echo "vec probe $op exit $?"
done
timeout 100 $NORM verify-golden --device cuda | tail -1; echo "norm goldens graph exit $?"
timeout 100 $NORM verify-golden --device cuda --decode eager | tail -1; echo "norm goldens eager exit $?"
timeout 100 $VEC verify-golden --device cuda | tail -1; echo "vec goldens graph exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(dual_rms|round_rows|matmul_bt_fp8_dyn)|exit|passed" $OUT/correct.txt
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw1.log; echo "elapsed $SECONDS s"
timeout 100 target/ab/fp8_gemv_bench > $OUT/fp8_gemv.txt 2>&1; echo "fp8_gemv_bench exit $?"
python3 - <<'PY'
import os,re
for line in open(os.environ['OUT']+'/fp8_gemv.txt'):
    if '|' not in line or line.startswith('shape'): continue
    name=line.split()[0]; cells=line.split('|',1)[1].split(';')
    out=[]
    for c in cells:
        m=re.match(r'\s*(\S+) ([\d.]+) \((\d+)\)(?: \[([\de.+-]+))?',c)
        if m and (m.group(1) in ('g4','read') or m.group(1).startswith('cols')): out.append('%s %s%s'%(m.group(1),m.group(2),'' if not m.group(4) else ' e'+m.group(4)))
    print(name, '; '.join(out))
PY
echo "elapsed $SECONDS s"
bench() { # binary label round
  timeout 90 $1 bench --model /tmp/g4-e4b-fp8-dynamic --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 2 --json > $OUT/$2-$3.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$2-$3.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $3 $2', 'pp512 %.0f ± %.0f tg128 %.1f ± %.1f MiB %.0f' % (*r['pp512'], *r['tg128'], j['memory_mib']['after_load']))"
}
bench $BASE base 1; bench $NORM norm 1; bench $VEC vec 1
bench $VEC vec 2; bench $NORM norm 2; bench $BASE base 2
echo "elapsed $SECONDS s"
