#!/usr/bin/env bash
# Stop 57, call 4: run on call 3's machine while it was still warm (its /tmp/bins and /tmp/g4-e4b),
# as one command line: three more rounds of call 3's E4B comparison, g4-new (bc16c70) first.
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib
for r in 3 4 5; do for b in g4-new g4; do
  timeout 60 /tmp/bins/$b bench --model /tmp/g4-e4b --device cuda --dtype bf16 --tests tg128 --depth 0,4096 --decode graph -r 3 --json > $OUT/$b-$r.json 2>/dev/null
  python3 -c "
import json; j=json.load(open('$OUT/$b-$r.json'))
print('round $r %-6s ' % '$b', ', '.join('%s %.1f ± %.1f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
done; done
echo "elapsed $SECONDS"
