#!/usr/bin/env bash
# Stop 50, call 3: 26B-A4B bf16 and its weight-only FP8 rewrite. NEW = f58e019's binary (the
# dequantisation at 4 loads of 8 weights), BASE = 9f2d0ff's (16 weights a load).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
[ -x /tmp/bins/g4-by8l4 ] || python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-by8l4 BASE=/tmp/bins/g4-c49b
nvidia-smi --query-gpu=name --format=csv,noheader
show() { python3 -c "
import json; j=json.load(open('$OUT/$1.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('$1', 'pp512 %.0f ± %.0f tg64 %.1f ± %.1f MiB %.0f load %.1f s' % (*r['pp512'], *r['tg64'], j['memory_mib']['after_load'], j['load_s']))" || tail -3 $OUT/$1.err; }
bench() { timeout 170 $1 bench --model /tmp/$2 --device cuda --dtype bf16 --tests pp512,tg64 --decode graph -r 2 --json > $OUT/$3.json 2> $OUT/$3.err; show $3; }
rm -rf /tmp/g4-e4b /tmp/g4-e4b-fp8 /tmp/g4-e4b-fp8-dynamic
t0=$(date +%s); timeout 240 python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b 2>&1 | grep -v -i warn | tail -1; echo "build $(( $(date +%s) - t0 )) s"
bench $NEW g4-26b new-bf16-1
t0=$(date +%s); timeout 240 python3 scripts/fp8_checkpoint.py /tmp/g4-26b /tmp/g4-26b-fp8 --delete-source | tail -1; echo "rewrite $(( $(date +%s) - t0 )) s"
bench $BASE g4-26b-fp8 base-fp8-1; bench $NEW g4-26b-fp8 new-fp8-1
bench $NEW g4-26b-fp8 new-fp8-2; bench $BASE g4-26b-fp8 base-fp8-2
echo "elapsed $SECONDS s"
timeout 90 $NEW probe-ops --device cuda --op moe_experts_fp8 2>&1 | grep -E "^moe|FAIL|error"
timeout 150 python3 scripts/kernel_breakdown.py $OUT/ncu-26b-fp8.csv -- $NEW bench --model /tmp/g4-26b-fp8 --device cuda --dtype bf16 --tests pp512,tg2 --decode eager -r 1 > /tmp/ncu.log 2>&1; echo "ncu exit $?"
python3 scripts/kernel_breakdown.py $OUT/ncu-26b-fp8.csv > $OUT/profile-26b-fp8.md 2>&1; sed -n 1,28p $OUT/profile-26b-fp8.md
echo "elapsed $SECONDS s"
