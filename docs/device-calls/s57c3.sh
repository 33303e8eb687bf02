#!/usr/bin/env bash
# Stop 57, call 3. Payloads: target/s56c2/bins.tar.xz (g4 at 28fd4b5: main's kernels) and
# target/s57c3/bins.tar.xz (g4-new at bc16c70: lean chunk-kernel entries, and a decode step's
# attention uses only the chunks its visible keys fill at 4 keys each). probe-ops' attention cases
# and the goldens (graph) with g4-new; E4B bf16 tg128 at depths 0 and 4,096, graph decode,
# -r 3, alternated: main, new, new, main.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "
import lzma,tarfile
for p in ('target/s56c2/bins.tar.xz','target/s57c3/bins.tar.xz'): tarfile.open(fileobj=lzma.open(p)).extractall('/tmp/bins')"
if [ -d /tmp/g4-e4b ]; then touch /tmp/built; else
  (python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1; touch /tmp/built) &
fi
G4=/tmp/bins/g4-new
timeout 100 $G4 probe-ops --device cuda --op attention > $OUT/probe.txt 2>&1; echo "probe exit $?"; grep -i "attention" $OUT/probe.txt | head -5
timeout 100 $G4 verify-golden --device cuda --decode graph | tail -1; echo "goldens (graph) exit $?"

while [ ! -f /tmp/built ]; do sleep 2; done
echo "elapsed $SECONDS s"
bench() { # binary - round
  timeout 100 /tmp/bins/$1 bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg128 --depth 0,4096 --decode graph -r 3 --json > $OUT/$1-$2-$3.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$2-$3.json'))
print('round $3 %-6s ' % '$1', ', '.join('%s %.1f ± %.1f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
}
bench g4 - 1; bench g4-new - 1; bench g4-new - 2; bench g4 - 2
echo "elapsed $SECONDS s"
