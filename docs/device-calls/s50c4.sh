#!/usr/bin/env bash
# Stop 50, call 4. NEW = rms_norm_plus_add_e4m3 (the norm before E4B's per-layer-input gate rounds
# its copy for an FP8_DYNAMIC gate: one round_rows_e4m3 launch a layer fewer), BASE = f58e019.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-pa BASE=/tmp/bins/g4-by8l4
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs > /tmp/rw1.log 2>&1; echo built > /tmp/built) &
{
for op in rms_norm_plus_add_e4m3 rms_norm_plus_add dual_rms_norm_plus_res_e4m3; do
  timeout 90 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens graph exit $?"
timeout 100 $NEW verify-golden --device cuda --decode eager | tail -1; echo "goldens eager exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(rms_norm|dual_rms)|NMSE|exit|passed" $OUT/correct.txt
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw1.log; echo "elapsed $SECONDS s"
bench() { # binary label checkpoint round
  timeout 90 $1 bench --model /tmp/$3 --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 2 --json > /tmp/$2-$3-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$2-$3-$4.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $4 $2 $3', ' '.join('%s %.1f ± %.1f' % (t, *v) for t, v in r.items()), 'MiB %.0f' % j['memory_mib']['after_load'])"
}
bench $BASE base g4-e4b-fp8-dynamic 1; bench $NEW new g4-e4b-fp8-dynamic 1
bench $NEW new g4-e4b-fp8-dynamic 2; bench $BASE base g4-e4b-fp8-dynamic 2
bench $BASE base g4-e4b-fp8-dynamic 3; bench $NEW new g4-e4b-fp8-dynamic 3
bench $NEW new g4-e4b 1
echo "elapsed $SECONDS s"
