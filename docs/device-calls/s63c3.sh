#!/usr/bin/env bash
# Stop 63, call 3: `moe_mlps` — a MoE layer's shared MLP inside the experts' two decode
# launches (where there were four). Payload target/s63c3/bins.tar.xz: g4-moe (call 2's,
# ae1d670: the experts' loads through `W::load`) and g4-mlps (this stop's tree).
# 1. g4-mlps: probe-ops of moe_mlps, moe_experts, moe_experts_fp8; the goldens with graph and
#    eager decode.
# 2. Random-weight 26B-A4B bf16 tg64, graph decode, -r 3, g4-moe and g4-mlps alternated twice,
#    then the same binaries' pp512 once each (prefill goes through the ops apart).
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s63c3/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b > /tmp/build26.log 2>&1 &
for op in moe_mlps moe_experts moe_experts_fp8; do
  timeout 60 /tmp/bins/g4-mlps probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ')"
done
for mode in graph eager; do
  timeout 90 /tmp/bins/g4-mlps verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1
  echo "goldens ($mode) exit $?: $(tail -1 $OUT/goldens-$mode.txt)"
done
grep -iE "fail|diverge" $OUT/goldens-*.txt | head -5
wait
echo "built at $SECONDS s"
ab_bench 26b tg64 g4-moe 300 1; ab_bench 26b tg64 g4-mlps 330 1; ab_bench 26b tg64 g4-mlps 360 2; ab_bench 26b tg64 g4-moe 390 2
ab_bench 26b pp512 g4-moe 430 1; ab_bench 26b pp512 g4-mlps 470 1
echo "elapsed $SECONDS s"
