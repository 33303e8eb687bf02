#!/usr/bin/env bash
# Prepared in stop 57 for the next one. Payload target/s58c1/bins.tar.xz (one xz stream: the two
# binaries share most bytes): g4-main (bc16c70's build: main's kernels, a decode step's chunks
# hold at least 4 visible keys) and g4-min8 (28b1676 on experiment/attention-min-keys-8: at least
# 8). Goldens (graph) and probe-ops' attention cases with g4-min8; E4B bf16 tg128 at depths 0 and
# 4,096, graph decode, -r 3, alternated main, min8, min8, main.
# First target/s58c1/chain_bench.xz (experiment/e4b-chain at 5e4b670, stop 58: E4B's layers too,
# `chain_bench e4b`, with the per-layer input's stage): 31B's, then E4B's sliding layers, with two candidates — qkv_norm_rope inside the chunk kernel (the bench prints how
# many of its outputs differ from g4's three kernels' on layer 0: none should), and each dual norm
# taken on the fly by the GEMV after it (it prints the GeGLU output's error against norm + GEMV,
# and how many residual values differ: few if any, its 1/rms being summed in another order).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/s58c1/bins.tar.xz')).extractall('/tmp/bins')"
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('target/s58c1/chain_bench.xz'), open('/tmp/bins/chain_bench','wb'))"
chmod +x /tmp/bins/chain_bench
[ -d /tmp/g4-e4b ] || python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 &
timeout 90 /tmp/bins/chain_bench > $OUT/chain.md 2>&1; echo "chain exit $?"; cat $OUT/chain.md
timeout 90 /tmp/bins/chain_bench e4b > $OUT/chain-e4b.md 2>&1; echo "chain e4b exit $?"; cat $OUT/chain-e4b.md
timeout 100 /tmp/bins/g4-min8 probe-ops --device cuda --op attention > $OUT/probe.txt 2>&1; echo "probe exit $?"
grep "^attention " $OUT/probe.txt
timeout 100 /tmp/bins/g4-min8 verify-golden --device cuda --decode graph | tail -1; echo "goldens (graph) exit $?"
wait
bench() { # model tests binary round
  timeout 120 /tmp/bins/$3 bench --model /tmp/g4-$1 --device cuda --dtype bf16 --tests $2 --decode graph -r 3 --json > $OUT/$1-$3-$4.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$3-$4.json'))
print('$1 round $4 %-8s ' % '$3', ', '.join('%s %.1f ± %.1f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
}
for r in 1 2; do
  if [ $r = 1 ]; then order="g4-main g4-min8"; else order="g4-min8 g4-main"; fi
  for b in $order; do bench e4b "tg128 --depth 0,4096" $b $r; done
done
echo "elapsed $SECONDS s"
# (31B part dropped at run time: two failed starts had cost 360 s of the budget)
