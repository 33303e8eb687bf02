#!/usr/bin/env bash
# Stop 54, call 8 (H100), as it ran; payload target/ab11/g4.tar.xz (15b4a51's build).
# Stop 54, call 8: issue #17's table after the sub-wave tiles. g4 = 15b4a51's build (fd1019b
# changes only the cost model's constant, which chooses the same tiles for every E4B shape).
# E4B random weights (bf16) and its weight-only FP8 rewrite; g4 bench --dtype bf16 --tests
# pp512,tg128 --decode graph -r 3, bf16 and FP8 alternated twice.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab11/g4.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4-new
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 || tail -3 /tmp/build.log
(python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo done > /tmp/rw.done) &
bench() { # label model round
  timeout 120 $G4 bench --model $2 --device cuda --dtype bf16 --tests pp512,tg128 --decode graph -r 3 --json > $OUT/$1-$3.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$3.json')); r={x['measurement']['test']: x['measurement'] for x in j['results']}
print('round $3 %-5s load %.1f s, after load %d MiB, pp512 %.0f ± %.0f, tg128 %.1f ± %.1f' % ('$1', j['load_s'], j['memory_mib']['after_load'], r['pp512']['tokens_per_s_mean'], r['pp512']['tokens_per_s_stddev'], r['tg128']['tokens_per_s_mean'], r['tg128']['tokens_per_s_stddev']))"
}
bench bf16 /tmp/g4-e4b 1
while [ ! -f /tmp/rw.done ]; do sleep 2; done; tail -1 /tmp/rw.log
bench fp8 /tmp/g4-e4b-fp8 1
bench bf16 /tmp/g4-e4b 2
bench fp8 /tmp/g4-e4b-fp8 2
echo "elapsed $SECONDS s"
