#!/usr/bin/env bash
# Stop 57, call 1. Payloads: target/s56c2/bins.tar.xz (g4 at 28fd4b5: main's kernels, the decode
# attention's block target from G4_ATTN_TARGET_BLOCKS, 512 by default) and target/s57c1/merge.tar.xz
# (g4-merge at da2a9ac: the same, with the chunk kernel's last block merging each row, f8dd2bb).
# E4B bf16 tg128 at depths 0 and 4,096, graph decode, -r 3: base 512 (main), base 128, merge 128,
# merge 256, then the reverse order; the goldens (graph) for both binaries at target 128.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "
import lzma,tarfile
for p in ('target/s56c2/bins.tar.xz','target/s57c1/merge.tar.xz'): tarfile.open(fileobj=lzma.open(p)).extractall('/tmp/bins')"
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1; echo built > /tmp/built) &
for b in g4 g4-merge; do
  G4_ATTN_TARGET_BLOCKS=128 timeout 100 /tmp/bins/$b verify-golden --device cuda --decode graph | tail -1; echo "$b goldens at 128 exit $?"
done
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; echo "elapsed $SECONDS s"
bench() { # binary target round
  G4_ATTN_TARGET_BLOCKS=$2 timeout 100 /tmp/bins/$1 bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg128 --depth 0,4096 --decode graph -r 3 --json > $OUT/$1-t$2-$3.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-t$2-$3.json'))
print('round $3 %-8s target %4s ' % ('$1', '$2'), ', '.join('%s %.1f ± %.1f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
}
bench g4 512 1; bench g4 128 1; bench g4-merge 128 1; bench g4-merge 256 1
bench g4-merge 256 2; bench g4-merge 128 2; bench g4 128 2; bench g4 512 2
echo "elapsed $SECONDS s"
