#!/usr/bin/env bash
# Stop 50, call 7: how host-bound is E4B prefill in each format, and does the programmatic-
# dependent-launch attribute cost host time? pp512 -r 4 with and without G4_PDL=0, alternated.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4-by8l4
nvidia-smi --query-gpu=name --format=csv,noheader
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1; tail -1 /tmp/build.log
python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 | tail -1
python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs | tail -1
sync
bench() { # label checkpoint [env]
  env $3 timeout 60 $G4 bench --model /tmp/$2 --device cuda --dtype bf16 --tests pp512 -r 4 --json > $OUT/$1.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; x=json.load(open('$OUT/$1.json'))['results'][0]['measurement']
print('%-14s %-22s pp512 %6.0f ± %5.0f queued %.3f' % ('$1', '$2', x['tokens_per_s_mean'], x['tokens_per_s_stddev'], x['host_queued_share']))"
}
for ck in g4-e4b g4-e4b-fp8 g4-e4b-fp8-dynamic; do
  bench $ck-pdl-1 $ck G4_PDL=1; bench $ck-nopdl-1 $ck G4_PDL=0
  bench $ck-nopdl-2 $ck G4_PDL=0; bench $ck-pdl-2 $ck G4_PDL=1
done
echo "elapsed $SECONDS s"
