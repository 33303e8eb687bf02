#!/usr/bin/env bash
# Stop 63, call 6: main's final binary (its src: 42d8ea4's, measured in calls 3 and 5, plus a
# host-side shape check before moe_mlps' launches) on a GPU: probe-ops of moe_mlps and
# moe_experts, and the goldens with graph and eager decode. Payload target/s63c6/bins.tar.xz.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
unpack_payload target/s63c6/bins.tar.xz
for op in moe_mlps moe_experts; do
  timeout 60 /tmp/bins/g4-final probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ')"
done
for mode in graph eager; do
  timeout 60 /tmp/bins/g4-final verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1
  echo "goldens ($mode) exit $?: $(tail -1 $OUT/goldens-$mode.txt)"
done
echo "elapsed $SECONDS s"
