#!/usr/bin/env bash
# Stop 59, call 3 (the warm machine after call 2): 31B bf16 tg64 at depths 0 and 2,048 with
# g4-cluster (target/s59c2, experiment/attention-cluster-model at 2e4c881), G4_ATTN_CLUSTER 0
# (main's split-K + merge), 16, 16, 0 — the chain put clusters of 16 ahead on 31B at 64 and 1,024 keys.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
[ -x /tmp/bins/g4-cluster ] || { mkdir -p /tmp/bins; python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('target/s59c2/g4-cluster.xz'), open('/tmp/bins/g4-cluster','wb'))"; chmod +x /tmp/bins/g4-cluster; }
rm -rf /tmp/g4-e4b
python3 scripts/e4b_reference.py build /tmp/g4-31b --preset 31b > /tmp/build31.log 2>&1 || tail -3 /tmp/build31.log
echo "built at $SECONDS s"
round=0
for c in 0 16 16 0; do
  round=$((round + 1)); json=$OUT/31b-round$round-clusters$c.json
  G4_ATTN_CLUSTER=$c timeout 110 /tmp/bins/g4-cluster bench --model /tmp/g4-31b --device cuda --dtype bf16 --tests tg64 --depth 0,2048 --decode graph -r 2 --json > $json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$json'))
print('31b clusters=%-2s ' % '$c', ', '.join('%s %.2f ± %.2f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
done
echo "elapsed $SECONDS s"
