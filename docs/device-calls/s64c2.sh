#!/usr/bin/env bash
# Stop 64, call 2: `moe_inputs` with the post-attention dual norm inside it (one launch fewer a
# MoE layer). Payload target/s64c2/bins.tar.xz: g4-base (72b3151, call 1's binary) and
# g4-inputs (64f478d); moe_bench (down with smaller load batches and register bounds).
# 1. g4-inputs: probe-ops of moe_inputs, moe_mlps, dual_rms_norm_plus_res; the goldens with
#    graph and eager decode.
# 2. moe_bench once the checkpoint is built (its build uses the GPU).
# 3. Random-weight 26B-A4B bf16 tg64 (graph decode, -r 3), the binaries alternated twice, then
#    pp512 once each, then a third tg64 pair. (An FP8 round was left out: three starts had failed and cost device time.)
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s64c2/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b > /tmp/build26.log 2>&1 &
for op in moe_inputs moe_mlps dual_rms_norm_plus_res; do
  timeout 60 /tmp/bins/g4-inputs probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ')"
done
for mode in graph eager; do
  timeout 90 /tmp/bins/g4-inputs verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1
  echo "goldens ($mode) exit $?: $(tail -1 $OUT/goldens-$mode.txt)"
done
grep -iE "fail|diverge" $OUT/goldens-*.txt | head -5
wait
echo "built at $SECONDS s"
/tmp/bins/moe_bench > $OUT/moe_bench.txt 2>&1; grep -E "g4 down |down batch|g4 gate_up " -A1 $OUT/moe_bench.txt
ab_bench 26b tg64 g4-base 250 1; ab_bench 26b tg64 g4-inputs 275 1
ab_bench 26b tg64 g4-inputs 300 2; ab_bench 26b tg64 g4-base 325 2
ab_bench 26b pp512 g4-base 350 1; ab_bench 26b pp512 g4-inputs 375 1
ab_bench 26b tg64 g4-base 400 3; ab_bench 26b tg64 g4-inputs 425 3
echo "elapsed $SECONDS s"
