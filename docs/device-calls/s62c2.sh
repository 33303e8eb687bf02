#!/usr/bin/env bash
# Stop 62, call 2: W loaded through other PTX `ld` qualifiers in g4's decode GEMVs. Payload
# target/s62c2/bins.tar.xz (one xz stream, 256 MiB dictionary): gemv_bench and fp8_gemv_bench
# built from this stop's tree; g4-base (main's kernels) and g4-hint (the same with gemv.cuh's
# decoders loading W by `ld.global.nc.L1::no_allocate.L2::256B`).
# 1. Each bench times g4's choice per shape with plain loads and with `.nc.L1::no_allocate`,
#    `.L2::256B`, both, and both under an evict-first L2 policy, beside the plain read with and
#    without the hints (bf16: largest relative difference from g4's output; FP8: against f64).
# 2. g4-hint: the goldens (graph decode), probe-ops of the three GEMV ops.
# 3. E4B bf16 and its FP8 rewrite tg128, then 31B bf16 tg64, graph decode, -r 3, base/hint
#    alternated, each bench only while the call's time lasts.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s62c2/bins.tar.xz
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 90 /tmp/bins/gemv_bench > $OUT/gemv.txt 2>&1; echo "gemv exit $?"
timeout 120 /tmp/bins/fp8_gemv_bench > $OUT/fp8.txt 2>&1; echo "fp8 exit $?"
echo "== bf16"; python3 scripts/kernel-bench/gemv_table.py $OUT/gemv.txt
echo "== fp8"; python3 scripts/kernel-bench/gemv_table.py $OUT/fp8.txt '^(g4|cols2_b4_w4$|cols4_b2_w4$|read)'
for op in linear linear_gelu_mul matmul_bt_fp8_channel; do
  timeout 60 /tmp/bins/g4-hint probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1; echo "probe $op exit $?"
done
timeout 60 /tmp/bins/g4-hint verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1; echo "goldens (graph) exit $?"; tail -1 $OUT/goldens.txt
wait
echo "elapsed $SECONDS s"
ab_bench e4b tg128 g4-base 200 1; ab_bench e4b tg128 g4-hint 215 1; ab_bench e4b tg128 g4-hint 230 2; ab_bench e4b tg128 g4-base 245 2
ab_bench e4b-fp8 tg128 g4-base 260 1; ab_bench e4b-fp8 tg128 g4-hint 275 1; ab_bench e4b-fp8 tg128 g4-hint 290 2; ab_bench e4b-fp8 tg128 g4-base 305 2
echo "elapsed $SECONDS s"
rm -rf /tmp/g4-e4b /tmp/g4-e4b-fp8
python3 scripts/e4b_reference.py build /tmp/g4-31b --preset 31b > /tmp/build31.log 2>&1 || tail -3 /tmp/build31.log
ab_bench 31b tg64 g4-base 480 1; ab_bench 31b tg64 g4-hint 510 1; ab_bench 31b tg64 g4-hint 540 2; ab_bench 31b tg64 g4-base 570 2
echo "elapsed $SECONDS s"
