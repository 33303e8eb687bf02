#!/usr/bin/env bash
# Stop 65, call 2: FP8 prefill's GEMM widens e4m3 to bf16 exactly and puts each row's scale on
# its sums (the decode GEMV's and grouped GEMM's way), two multiplies a weight pair fewer
# between its wgmmas. Payload target/s65c2/bins.tar.xz: g4-base (call 1's binary), g4-new
# (this change) and fp8_gemm_bench built with it.
# 1. fp8_gemm_bench: g4's e4m3 GEMM beside cuBLAS's bf16 and the const-A / raw-A probes.
# 2. g4-new: probe-ops of matmul_bt_fp8_channel and linear_gelu_mul (their TMA cases against
#    f64), g4-base's for comparison; the goldens (graph decode).
# 3. Random-weight E4B's FP8 rewrite, pp512 (-r 3), base and new alternated three times; bf16
#    pp512 with g4-new twice, for the ratio.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s65c2/bins.tar.xz
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 150 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm.txt 2>&1; echo "fp8_gemm_bench exit $?"
grep -E "^[a-z_0-9]+ +(bf16 \(weights|tma e4m3 128×128, 6|tma e4m3 128×128, K in|tma e4m3 128×(112|96|64)|tma e4m3 wide|probe|tma bf16 128×128, 6)" $OUT/fp8_gemm.txt | cut -c1-96
for bin in g4-new g4-base; do
  for op in matmul_bt_fp8_channel linear_gelu_mul; do
    timeout 90 /tmp/bins/$bin probe-ops --device cuda --op $op > $OUT/probe-$bin-$op.txt 2>&1
    echo "$bin probe $op exit $?: $(grep -E "^$op " $OUT/probe-$bin-$op.txt | tr -s ' ' | tr '\n' ';')"
  done
done
grep -ih "tma\|M512\|fail" $OUT/probe-g4-new-*.txt | tr -s ' ' | head -12
timeout 90 /tmp/bins/g4-new verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1
echo "goldens (graph) exit $?: $(tail -1 $OUT/goldens.txt)"
wait
echo "built at $SECONDS s"
ab_bench e4b-fp8 pp512 g4-base 400 1; ab_bench e4b-fp8 pp512 g4-new 420 1
ab_bench e4b pp512 g4-new 440 1
ab_bench e4b-fp8 pp512 g4-new 460 2; ab_bench e4b-fp8 pp512 g4-base 480 2
ab_bench e4b pp512 g4-new 500 2
ab_bench e4b-fp8 pp512 g4-base 520 3; ab_bench e4b-fp8 pp512 g4-new 540 3
echo "elapsed $SECONDS s"
