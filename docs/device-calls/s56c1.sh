#!/usr/bin/env bash
# Stop 56, call 1; payload target/s56c1/bins.tar.xz: g4-pf (12b3788 on experiment/l2-prefetch:
# main's f8dd2bb — each decode attention row merged by its last chunk to finish — plus a decode
# GEMV's first bytes brought into L2 before the short kernels ahead of it, G4_L2_PREFETCH_MIB,
# off by default: with it off this is f8dd2bb's decode), g4-base (2e535a9's build: main's kernels
# at this stop's start), chain_bench (12b3788).
# 1) chain_bench: 31B decode layers as one graph: the last-block merge beside the merge kernel and
# other chunk counts; short kernels (or a kernel of its own) bringing the next GEMV's first MBs
# into L2. 2) g4-pf: probe-ops of attention; the goldens with graph and eager decode (prefetch off),
# and with graph decode, prefetch 40 MiB. 3) E4B bf16 tg128 at depths 0 and 4,096: base, new
# (prefetch off), prefetch 40 and 16 MiB, alternated (16 MiB once).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/s56c1/bins.tar.xz')).extractall('/tmp/bins')"
PF=/tmp/bins/g4-pf BASE=/tmp/bins/g4-base
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1; echo built > /tmp/built) &
timeout 150 /tmp/bins/chain_bench > $OUT/chain.txt 2>&1; echo "== chain exit $?"
cat $OUT/chain.txt; echo "elapsed $SECONDS s"
{
G4_L2_PREFETCH_MIB=0 timeout 120 $PF probe-ops --device cuda --op attention; echo "probe attention exit $?"
for flags in "--decode graph" "--decode eager"; do
  G4_L2_PREFETCH_MIB=0 timeout 100 $PF verify-golden --device cuda $flags | tail -1; echo "goldens $flags exit $?"
done
G4_L2_PREFETCH_MIB=40 timeout 100 $PF verify-golden --device cuda --decode graph | tail -1; echo "goldens prefetch 40 exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^attention|exit|passed|FAIL|fail" $OUT/correct.txt | head -20
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; echo "elapsed $SECONDS s"
bench() { # label binary prefetch-MiB round
  G4_L2_PREFETCH_MIB=$3 timeout 100 $2 bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg128 --depth 0,4096 --decode graph -r 3 --json > $OUT/$1-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$4.json'))
print('round $4 %-5s' % '$1', ', '.join('%s %.1f ± %.1f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
}
bench base $BASE 0 1; bench new $PF 0 1; bench pf40 $PF 40 1; bench pf16 $PF 16 1
bench pf40 $PF 40 2; bench new $PF 0 2; bench base $BASE 0 2
echo "elapsed $SECONDS s"
