#!/usr/bin/env bash
# Stop 55, call 6; payload target/s55c6/bins.tar.xz: g4 (2e535a9's build), chain_bench (833a97a on
# experiment/norm-in-gemv-prologue: stop 54's prepared call s54c10).
# 1) chain_bench: 31B decode layers as one graph, with each dual norm in the prologue of the GEMV
# that reads it beside g4's kernels. 2) Issue #17's table with this stop's final binary: E4B bf16
# and its weight-only FP8 rewrite, g4 bench --dtype bf16 --tests pp512,tg128 --decode graph -r 3,
# alternated twice.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/s55c6/bins.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 200 /tmp/bins/chain_bench > $OUT/chain.txt 2>&1; echo "== chain exit $?"
cat $OUT/chain.txt
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/rw.log; echo "elapsed $SECONDS s"
bench() { # label model round
  timeout 120 $G4 bench --model $2 --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 3 --json > $OUT/$1-$3.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$3.json')); r={x['measurement']['test']: x['measurement'] for x in j['results']}
print('round $3 %-5s load %.1f s, after load %d MiB, pp512 %.0f ± %.0f, tg128 %.1f ± %.1f' % ('$1', j['load_s'], j['memory_mib']['after_load'], r['pp512']['tokens_per_s_mean'], r['pp512']['tokens_per_s_stddev'], r['tg128']['tokens_per_s_mean'], r['tg128']['tokens_per_s_stddev']))"
}
bench bf16 /tmp/g4-e4b 1; bench fp8 /tmp/g4-e4b-fp8 1; bench bf16 /tmp/g4-e4b 2; bench fp8 /tmp/g4-e4b-fp8 2
echo "elapsed $SECONDS s"
