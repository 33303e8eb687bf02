#!/usr/bin/env bash
# Stop 65, call 3: issue #10's and #17's numbers on an H200 at this stop's binary (g4-new of
# call 2's payload, copied to target/s65c3/). On any other GPU it stops at once: the targets
# are the H200's.
# 1. Random-weight E4B bf16 and its FP8 rewrite: pp512 and tg128 (graph decode, -r 3), two
#    rounds alternated.
# 2. Random-weight 31B bf16: pp512 and tg64 (graph decode, -r 3), two rounds.
set -u
source scripts/device-call-lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
unpack_payload target/s65c3/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 || tail -3 /tmp/build.log
python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1 || tail -3 /tmp/rw.log
echo "built at $SECONDS s"
ab_bench e4b pp512,tg128 g4-new 200 1; ab_bench e4b-fp8 pp512,tg128 g4-new 230 1
ab_bench e4b pp512,tg128 g4-new 260 2; ab_bench e4b-fp8 pp512,tg128 g4-new 290 2
for f in e4b-g4-new-1 e4b-fp8-g4-new-1; do
  python3 -c "import json,sys; m=json.load(open(sys.argv[2]))['memory_mib']; print(sys.argv[1], 'MiB after load', m['after_load'])" $f $OUT/$f.json
done
rm -rf /tmp/g4-e4b /tmp/g4-e4b-fp8
python3 scripts/e4b_reference.py build /tmp/g4-31b --preset 31b > /tmp/build31.log 2>&1 || tail -3 /tmp/build31.log
echo "31B built at $SECONDS s"
ab_bench 31b pp512,tg64 g4-new 540 1; ab_bench 31b pp512,tg64 g4-new 570 2
echo "elapsed $SECONDS s"
