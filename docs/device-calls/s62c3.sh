#!/usr/bin/env bash
# Stop 62, call 3: the adopted weight loads (g4_load_weights) on the binary that will ship.
# Payload target/s62c3/bins.tar.xz: g4-base (main's kernels before the change) and g4-final
# (this stop's tree, whose GEMV PTX is byte-identical to call 2's g4-hint). The goldens with
# graph and eager decode, probe-ops of the three GEMV ops, then E4B bf16 tg128 base/final
# alternated while the call's time lasts.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s62c3/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 &
for mode in graph eager; do
  timeout 60 /tmp/bins/g4-final verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1; echo "goldens ($mode) exit $?"; tail -1 $OUT/goldens-$mode.txt
done
for op in linear linear_gelu_mul matmul_bt_fp8_channel; do
  timeout 60 /tmp/bins/g4-final probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1; echo "probe $op exit $?"
done
wait
echo "elapsed $SECONDS s"
ab_bench e4b tg128 g4-base 150 1; ab_bench e4b tg128 g4-final 165 1; ab_bench e4b tg128 g4-final 180 2; ab_bench e4b tg128 g4-base 195 2
echo "elapsed $SECONDS s"
