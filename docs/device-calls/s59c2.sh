#!/usr/bin/env bash
# Stop 59, call 2. Payload target/s59c2/: g4-cluster.xz (experiment/attention-cluster-model at
# 2e4c881: decode attention's chunks as one thread-block cluster, merged in distributed shared
# memory, for rows of up to 1,024 keys; G4_ATTN_CLUSTER=0 is main's split-K + merge, 8 or 16 the
# cluster's blocks) and chain_bench.xz (stop 58's cluster candidate, experiment/attention-cluster-merge).
# First the model: probe-ops' attention cases and the goldens (graph) with clusters, then E4B bf16
# tg128 at depths 0 and 4,096 with G4_ATTN_CLUSTER 0, 8, 16, 16, 8, 0; then the chains.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
for b in g4-cluster chain_bench; do
  python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('target/s59c2/$b.xz'), open('/tmp/bins/$b','wb'))"
  chmod +x /tmp/bins/$b
done
[ -d /tmp/g4-e4b ] || python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 &
for c in 8 16; do
  G4_ATTN_CLUSTER=$c timeout 100 /tmp/bins/g4-cluster probe-ops --device cuda --op attention > $OUT/probe-$c.txt 2>&1
  echo "probe clusters of $c exit $?"; grep "^attention " $OUT/probe-$c.txt
done
G4_ATTN_CLUSTER=8 timeout 100 /tmp/bins/g4-cluster verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1
echo "goldens (graph, clusters of 8) exit $?"; tail -1 $OUT/goldens.txt
wait
round=0
for c in 0 8 16 16 8 0; do
  round=$((round + 1)); json=$OUT/e4b-round$round-clusters$c.json
  G4_ATTN_CLUSTER=$c timeout 100 /tmp/bins/g4-cluster bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg128 --depth 0,4096 --decode graph -r 3 --json > $json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$json'))
print('e4b clusters=%-2s ' % '$c', ', '.join('%s %.1f ± %.1f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
done
echo "elapsed $SECONDS s"
for args in "e4b 64" "e4b 512" "31b 64" "31b 1024"; do
  name=chain-${args// /-}
  timeout 60 /tmp/bins/chain_bench $args > $OUT/$name.md 2>&1; echo "$name exit $?"; cat $OUT/$name.md
done
echo "elapsed $SECONDS s"
