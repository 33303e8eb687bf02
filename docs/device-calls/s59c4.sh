#!/usr/bin/env bash
# Stop 59, call 4. Payload target/s59c4/g4-exp.xz (experiment/attention-cluster-model at fd5e87c,
# run with G4_ATTN_CLUSTER=0, i.e. main's decode path): E4B bf16 tg128, graph decode, as g4 bench
# runs it (argmax on the device, the id back to the host every step) against
# G4_BENCH_NO_READBACK=1 (the same steps queued back to back, no argmax, no id back): the gap is
# what a device-side token chain could save at most. Alternated normal, no-readback ×2, normal.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export G4_ATTN_CLUSTER=0
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('target/s59c4/g4-exp.xz'), open('/tmp/bins/g4-exp','wb'))"
chmod +x /tmp/bins/g4-exp
[ -d /tmp/g4-e4b ] || python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 || tail -3 /tmp/build.log
round=0
for mode in 0 1 1 0; do
  round=$((round + 1)); json=$OUT/e4b-round$round-noreadback$mode.json
  G4_BENCH_NO_READBACK=$mode timeout 100 /tmp/bins/g4-exp bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg128 --decode graph -r 3 --json > $json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$json'))
print('e4b no_readback=$mode ', ', '.join('%s %.1f ± %.1f (%.3f ms a step)' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev'], 1e3 / x['measurement']['tokens_per_s_mean']) for x in j['results']))"
done
echo "elapsed $SECONDS s"
# Then every kernel of a graph decode step, each timed alone by ncu (kernel_breakdown.py; a window
# of launches after the warm-up's prefill and capture): what a step holds outside the layers.
timeout 240 python3 scripts/kernel_breakdown.py $OUT/ncu-e4b-graph.csv --window 2000,2400 -- /tmp/bins/g4-exp bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg4 --decode graph -r 1 > /dev/null 2> /tmp/ncu.err || tail -3 /tmp/ncu.err
python3 scripts/kernel_breakdown.py $OUT/ncu-e4b-graph.csv --window 2000,2400 > $OUT/profile-e4b-graph.md 2>&1; head -60 $OUT/profile-e4b-graph.md
echo "elapsed $SECONDS s"
