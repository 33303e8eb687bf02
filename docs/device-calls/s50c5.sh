#!/usr/bin/env bash
# Stop 50, call 5: is FP8_DYNAMIC's slow prefill mode the page cache writing the new checkpoint
# back? pp512 right after the rewrite, again, then after `sync`; Dirty/Writeback before each run.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4-by8l4
nvidia-smi --query-gpu=name --format=csv,noheader
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1; tail -1 /tmp/build.log
python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs | tail -1
dirty() { awk '/^(Dirty|Writeback):/ {printf "%s %d MiB ", $1, $2/1024}' /proc/meminfo; }
bench() { # label checkpoint
  local d; d=$(dirty)
  timeout 90 $G4 bench --model /tmp/$2 --device cuda --dtype bf16 --tests pp512 -r 3 --json > /tmp/$1.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$1.json')); x=j['results'][0]['measurement']
print('$1 $2 pp512 %.0f ± %.0f' % (x['tokens_per_s_mean'], x['tokens_per_s_stddev']), 'before: $d', 'elapsed $SECONDS s')"
}
bench first g4-e4b-fp8-dynamic
bench second g4-e4b-fp8-dynamic
bench bf16-a g4-e4b
s=$SECONDS; sync; echo "sync took $((SECONDS - s)) s"
bench after-sync-1 g4-e4b-fp8-dynamic
bench after-sync-2 g4-e4b-fp8-dynamic
bench bf16-b g4-e4b
