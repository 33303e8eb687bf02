#!/usr/bin/env bash
# Stop 48, call 3: f9fc128's code (= f813c36's) on E4B bf16, FP8 and FP8_DYNAMIC side by side, two rounds.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-c2 BASE=/tmp/bins/g4-base
nvidia-smi --query-gpu=name --format=csv,noheader
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs > /tmp/rw1.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw2.log 2>&1
tail -1 /tmp/build.log; tail -1 /tmp/rw2.log; echo "elapsed $SECONDS s"
bench() { # binary label checkpoint round
  timeout 90 $1 bench --model /tmp/$3 --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 2 --json > /tmp/$2-$3-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$2-$3-$4.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $4 $2 $3', 'pp512 %.0f ± %.0f tg128 %.1f ± %.1f MiB %.0f' % (*r['pp512'], *r['tg128'], j['memory_mib']['after_load']))"
}
for round in 1 2; do
  bench $NEW new g4-e4b $round; bench $NEW new g4-e4b-fp8 $round; bench $NEW new g4-e4b-fp8-dynamic $round; bench $BASE base g4-e4b-fp8-dynamic $round
done
echo "elapsed $SECONDS s"
