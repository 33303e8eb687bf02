#!/usr/bin/env bash
# Stop 50, call 6: FP8_DYNAMIC prefill's slow processes. Six processes of pp512 (-r 4), each with
# its samples, its host-queued share, cuBLASLt's trace, and the SM clock and power sampled beside.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins $OUT/lt
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
G4=/tmp/bins/g4-by8l4
nvidia-smi --query-gpu=name --format=csv,noheader
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1; tail -1 /tmp/build.log
python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8-dynamic --dynamic-inputs | tail -1
for i in 1 2 3 4 5 6; do
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 50 > /tmp/smi-$i.txt &
  smi=$!
  CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=/tmp/lt-$i.log timeout 90 $G4 bench --model /tmp/g4-e4b-fp8-dynamic --device cuda --dtype bf16 --tests pp512 -r 4 --json > $OUT/run-$i.json 2> /tmp/e.err || tail -3 /tmp/e.err
  kill $smi
  python3 - $i $OUT <<'PY'
import json, sys
i = sys.argv[1]
x = json.load(open(f"{sys.argv[2]}/run-{i}.json"))['results'][0]['measurement']
clk = [l.split(',') for l in open(f"/tmp/smi-{i}.txt") if l.strip()]
sm = [float(c[0].split()[0]) for c in clk]; pw = [float(c[1].split()[0]) for c in clk]
print(f"run {i}: pp512 {x['tokens_per_s_mean']:.0f} samples {[round(s) for s in x['samples_tokens_per_s']]} queued {x['host_queued_share']:.2f} | sm MHz min {min(sm):.0f} med {sorted(sm)[len(sm)//2]:.0f} | W max {max(pw):.0f}")
PY
  grep -o "algo=[^]]*]" /tmp/lt-$i.log | sort | uniq -c > $OUT/lt/algos-$i.txt
  grep -m3 -o "A=[^ ,]*\|B=[^ ,]*\|D=[^ ,]*" /tmp/lt-$i.log | head -3 | tr '\n' ' '; echo
done
for i in 1 2 3 4 5 6; do md5sum < $OUT/lt/algos-$i.txt; done
grep -m2 "cublasLtMatmul" /tmp/lt-1.log | cut -c1-600
