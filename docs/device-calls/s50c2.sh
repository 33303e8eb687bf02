#!/usr/bin/env bash
# Stop 50, call 2. L4 = f58e019 (dequant_fp8_channel: 4 loads of 8 weights a thread), L8 = aa213be
# (8 loads), BASE = 9f2d0ff (16 weights a load). Correctness of L4, E4B weight-only FP8 A/B, then
# FP8_DYNAMIC prefill in 4 processes with cuBLASLt's trace (its per-process bimodality).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-by8l4 L8=/tmp/bins/g4-by8 BASE=/tmp/bins/g4-c49b
nvidia-smi --query-gpu=name --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw2.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs > /tmp/rw1.log 2>&1; echo built > /tmp/built) &
{
for op in dequant_fp8_channel matmul_bt_fp8_channel; do
  timeout 90 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens graph exit $?"
timeout 100 $NEW verify-golden --device cuda --prefill-chunk 3 | tail -1; echo "goldens chunk3 exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(dequant|matmul_bt_fp8)|exit|passed" $OUT/correct.txt
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw2.log; tail -1 /tmp/rw1.log; echo "elapsed $SECONDS s"
bench() { # binary label checkpoint round [tests]
  timeout 90 $1 bench --model /tmp/$3 --device cuda --dtype bf16 --tests ${5:-pp512,tg128} --decode graph -r 2 --json > /tmp/$2-$3-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$2-$3-$4.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $4 $2 $3', ' '.join('%s %.1f ± %.1f' % (t, *v) for t, v in r.items()), 'MiB %.0f' % j['memory_mib']['after_load'])"
}
bench $BASE base g4-e4b 1
bench $BASE base g4-e4b-fp8 1; bench $NEW l4 g4-e4b-fp8 1; bench $L8 l8 g4-e4b-fp8 1
bench $NEW l4 g4-e4b-fp8 2; bench $BASE base g4-e4b-fp8 2
bench $BASE base g4-e4b-fp8 3; bench $NEW l4 g4-e4b-fp8 3
bench $NEW l4 g4-e4b 2
echo "elapsed $SECONDS s"
for i in 1 2 3 4 5; do
  CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=/tmp/lt-$i.log bench $NEW l4 g4-e4b-fp8-dynamic $i pp512
  grep -c . /tmp/lt-$i.log
done
mkdir -p $OUT/lt; for i in 1 2 3 4 5; do grep -o "algo=[^]]*]" /tmp/lt-$i.log | sort | uniq -c > $OUT/lt/algos-$i.txt; head -c 3000 /tmp/lt-$i.log > $OUT/lt/head-$i.txt; done
for i in 1 2 3 4 5; do echo "== $i"; cat $OUT/lt/algos-$i.txt | head -12; done
echo "elapsed $SECONDS s"
