#!/usr/bin/env bash
# Stop 64, call 3: the MoE down kernels' loads in batches of 4, not 8 (G4_MOE_BATCH; 40
# registers a thread where there were 56). Payload target/s64c3/bins.tar.xz: g4-inputs (64f478d,
# call 2's), g4-batch (2f5b7a3) and moe_bench built with it.
# 1. g4-batch: probe-ops of the ops whose down kernel changed; the goldens with graph and eager
#    decode.
# 2. moe_bench once the checkpoint is built.
# 3. Random-weight 26B-A4B bf16 tg64 (graph decode, -r 3), the binaries alternated three times.
# 4. Its FP8 (weight-only) rewrite: tg64 alternated twice, while device time lasts.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s64c3/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b > /tmp/build26.log 2>&1 &
for op in moe_mlps moe_experts moe_experts_fp8 moe_experts_fp8_dynamic; do
  timeout 60 /tmp/bins/g4-batch probe-ops --device cuda --op $op > /tmp/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " /tmp/probe-$op.txt | tr -s ' ')"
done
for mode in graph eager; do
  timeout 90 /tmp/bins/g4-batch verify-golden --device cuda --decode $mode > /tmp/goldens-$mode.txt 2>&1
  echo "goldens ($mode) exit $?: $(tail -1 /tmp/goldens-$mode.txt)"
done
grep -iE "fail|diverge" /tmp/goldens-*.txt | head -5
wait
echo "built at $SECONDS s"
/tmp/bins/moe_bench 2>&1 | grep -E "^g4 down |^down batch [34] min blocks 1" -A1
ab_bench 26b tg64 g4-inputs 200 1; ab_bench 26b tg64 g4-batch 215 1
ab_bench 26b tg64 g4-batch 230 2; ab_bench 26b tg64 g4-inputs 245 2
ab_bench 26b tg64 g4-inputs 260 3; ab_bench 26b tg64 g4-batch 275 3
python3 scripts/fp8_checkpoint.py /tmp/g4-26b /tmp/g4-26bfp8 --delete-source > /tmp/fp8.log 2>&1 || tail -3 /tmp/fp8.log
echo "fp8 at $SECONDS s"
ab_bench 26bfp8 tg64 g4-inputs 380 1; ab_bench 26bfp8 tg64 g4-batch 395 1
ab_bench 26bfp8 tg64 g4-batch 410 2; ab_bench 26bfp8 tg64 g4-inputs 425 2
echo "elapsed $SECONDS s"
