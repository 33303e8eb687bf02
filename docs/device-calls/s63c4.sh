#!/usr/bin/env bash
# Stop 63, call 4: `moe_mlps` over FP8 checkpoints too — the shared MLP inside the experts' two
# decode launches where all four projections are e4m3. Payload target/s63c4/bins.tar.xz:
# g4-moe (call 2's, ae1d670) and g4-mlps (this stop's tree).
# 1. g4-mlps: probe-ops of moe_mlps (dense and e4m3 cases), moe_experts_fp8 and
#    linear_gelu_mul; the goldens with graph and eager decode.
# 2. Random-weight 26B-A4B bf16 tg64 once each (the dense path after the FP8 change), then its
#    weight-only FP8 rewrite tg64, g4-moe and g4-mlps alternated twice; graph decode, -r 3.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s63c4/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b > /tmp/build26.log 2>&1 &
for op in moe_mlps moe_experts_fp8 linear_gelu_mul; do
  timeout 60 /tmp/bins/g4-mlps probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ')"
done
for mode in graph eager; do
  timeout 90 /tmp/bins/g4-mlps verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1
  echo "goldens ($mode) exit $?: $(tail -1 $OUT/goldens-$mode.txt)"
done
wait
echo "built at $SECONDS s"
ab_bench 26b tg64 g4-moe 200 1; ab_bench 26b tg64 g4-mlps 230 1
python3 scripts/fp8_checkpoint.py /tmp/g4-26b /tmp/g4-26b-fp8 --delete-source > /tmp/rw.log 2>&1 || tail -3 /tmp/rw.log
echo "rewritten at $SECONDS s"
ab_bench 26b-fp8 tg64 g4-moe 400 1; ab_bench 26b-fp8 tg64 g4-mlps 430 1; ab_bench 26b-fp8 tg64 g4-mlps 460 2; ab_bench 26b-fp8 tg64 g4-moe 490 2
echo "elapsed $SECONDS s"
