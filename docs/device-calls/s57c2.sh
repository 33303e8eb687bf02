#!/usr/bin/env bash
# Stop 57, call 2. Payload target/s57c2/bins.tar.xz: g4 at 10e9fde (main with lean entry points of
# the decode attention's chunk kernel for heads of 256 and 512: 63 and 80 registers against 128;
# G4_ATTN_LEAN=0 takes the general one) and chain_bench (1ce0a45: 31B's sliding layers, lean and
# general chunk kernels, 16, 8 and 4 chunks). E4B bf16 tg128 at depths 0 and 4,096, graph decode,
# -r 3, lean and general alternated; probe-ops' attention cases and the goldens with the lean ones.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/s57c2/bins.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4
if [ -d /tmp/g4-e4b ]; then touch /tmp/built; else
  (python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1; touch /tmp/built) &
fi
timeout 100 $G4 probe-ops --device cuda --op attention 2>&1 | tail -2
timeout 100 $G4 verify-golden --device cuda --decode graph | tail -1; echo "goldens (graph) exit $?"
timeout 100 $G4 verify-golden --device cuda --decode eager | tail -1; echo "goldens (eager) exit $?"
timeout 60 /tmp/bins/chain_bench > $OUT/chain.md 2>&1; cat $OUT/chain.md
while [ ! -f /tmp/built ]; do sleep 2; done
echo "elapsed $SECONDS s"
bench() { # lean round
  G4_ATTN_LEAN=$1 timeout 100 $G4 bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg128 --depth 0,4096 --decode graph -r 3 --json > $OUT/lean$1-$2.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/lean$1-$2.json'))
print('round $2 G4_ATTN_LEAN=$1 ', ', '.join('%s %.1f ± %.1f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
}
bench 0 1; bench 1 1; bench 1 2; bench 0 2
echo "elapsed $SECONDS s"
