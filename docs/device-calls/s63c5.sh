#!/usr/bin/env bash
# Stop 63, call 5: what a 26B-A4B bf16 decode step holds, kernel by kernel, with `moe_mlps`
# (main at 941a878, whose src is 42d8ea4's: call 3's g4-mlps, payload target/s63c3). Each
# kernel timed alone by ncu (kernel_breakdown.py) over eager decode steps (the kernels a graph
# replays), random-weight 26B-A4B.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s63c3/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b > /tmp/build26.log 2>&1 || tail -3 /tmp/build26.log
echo "built at $SECONDS s"
timeout 300 python3 scripts/kernel_breakdown.py $OUT/ncu-26b.csv -- /tmp/bins/g4-mlps bench --model /tmp/g4-26b \
  --device cuda --dtype bf16 --tests tg4 --decode eager -r 1 > /dev/null 2> /tmp/ncu.err || tail -3 /tmp/ncu.err
python3 scripts/kernel_breakdown.py $OUT/ncu-26b.csv > $OUT/profile-26b.md 2>&1
awk '/decode/{d=1} d' $OUT/profile-26b.md | head -45
echo "elapsed $SECONDS s"
