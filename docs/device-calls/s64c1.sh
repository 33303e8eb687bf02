#!/usr/bin/env bash
# Stop 64, call 1: main's binary after `launch_decode` became one launcher for moe_experts,
# moe_experts_fp8 and moe_mlps (72b3151), and moe_bench with the expert kernels over several
# output columns a block. Payload target/s64c1/bins.tar.xz: g4-new, moe_bench.
# 1. probe-ops --device cuda of the ops whose launches changed; the goldens with graph and
#    eager decode.
# 2. moe_bench (26B-A4B's experts, H100 or H200).
# 3. Random-weight 26B-A4B bf16 tg64 and pp512 with g4-new.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s64c1/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b > /tmp/build26.log 2>&1 &
for op in moe_mlps moe_experts moe_experts_fp8 moe_experts_fp8_dynamic; do
  timeout 60 /tmp/bins/g4-new probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ')"
done
for mode in graph eager; do
  timeout 90 /tmp/bins/g4-new verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1
  echo "goldens ($mode) exit $?: $(tail -1 $OUT/goldens-$mode.txt)"
done
grep -iE "fail|diverge" $OUT/goldens-*.txt | head -5
wait
echo "built at $SECONDS s"
/tmp/bins/moe_bench 2>&1 | tee $OUT/moe_bench.txt
ab_bench 26b tg64 g4-new 400 1; ab_bench 26b pp512 g4-new 440 1
echo "elapsed $SECONDS s"
