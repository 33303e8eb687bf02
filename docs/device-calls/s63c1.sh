#!/usr/bin/env bash
# Stop 63, call 1: main's binary checked on a GPU at last, and the decode kernels timed with the
# weight loads main has. Payload target/s63/bins.tar.xz (one xz stream): g4-main (a2dff49's
# src, the binary stop 62 shipped and never ran), g4-moe (the same with the MoE expert kernels
# loading through `W::load`), gemv_bench, fp8_gemv_bench and moe_bench from this stop's tree.
# 1. g4-main, then g4-moe: the goldens with graph and eager decode; g4-moe: probe-ops of the
#    GEMV and expert ops.
# 2. The three benches: every variant now loads W as g4 does, so the tables say whether the
#    GEMVs' geometry rules still pick the fastest (bf16: largest relative difference from g4's
#    output; FP8: against f64; moe: g4's kernels with other loads beside the plain read).
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s63/bins.tar.xz
for binary in g4-main g4-moe; do
  for mode in graph eager; do
    timeout 60 /tmp/bins/$binary verify-golden --device cuda --decode $mode > $OUT/goldens-$binary-$mode.txt 2>&1
    echo "$binary goldens ($mode) exit $?: $(tail -1 $OUT/goldens-$binary-$mode.txt)"
  done
done
for op in linear linear_gelu_mul matmul_bt_fp8_channel moe_experts moe_experts_fp8 moe_experts_fp8_dynamic; do
  timeout 60 /tmp/bins/g4-moe probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | head -3 | tr -s ' ' | tr '\n' ';')"
done
echo "elapsed $SECONDS s"
timeout 60 /tmp/bins/moe_bench > $OUT/moe.txt 2>&1; echo "moe exit $?"; cat $OUT/moe.txt
timeout 90 /tmp/bins/gemv_bench > $OUT/gemv.txt 2>&1; echo "gemv exit $?"
timeout 120 /tmp/bins/fp8_gemv_bench > $OUT/fp8.txt 2>&1; echo "fp8 exit $?"
# Every variant but the other-load ones (g4's loads are the point now).
variants='^(?!.*(_plain|_noL1|_256B)).*'
echo "== bf16"; python3 scripts/kernel-bench/gemv_table.py $OUT/gemv.txt "$variants" | sed "s/\[[^]]*\]//g"
echo "== fp8"; python3 scripts/kernel-bench/gemv_table.py $OUT/fp8.txt "$variants" | sed "s/\[[^]]*\]//g"
echo "elapsed $SECONDS s"
