#!/usr/bin/env bash
# Stop 67, call 1 (ran on experiment/bf16-geglu-tma at d17df0e: stop 66's call 1 plus the f16
# rows). Payload target/s67c1/bins.tar.xz:
# g4 (that branch: a bf16 checkpoint's packed MLP gate/up at prefill through the TMA GEMM with
# the GeGLU epilogue, in wide tiles; `G4_TMA_GEMM=0` gives main's cuBLAS + gelu_and_mul) and
# fp8_gemm_bench with the bf16 wide GeGLU rows. Built and packed on the build machine by
#   scripts/build-cuda.sh && eval "$(scripts/nvcc-env.sh)" && mkdir -p target/s66 &&
#   nvcc -O3 -std=c++17 -arch=sm_90a -L"$CUDA_HOME/lib" -o target/s66/fp8_gemm_bench -ldl \
#     scripts/kernel-bench/fp8_gemm_bench.cu &&
#   scripts/pack-device-payload.sh target/s67c1/bins.tar.xz g4=target/cuda/release/g4 \
#     fp8_gemm_bench=target/s66/fp8_gemm_bench
# Calls 2 (s66c2.sh, 31B) and 3 (s66c3.sh, 26B-A4B for #17) use the same payload.
# 1. fp8_gemm_bench, every shape: cuBLAS bf16, g4's e4m3 tilings, and e4m3 widened to f16
#    against an f16 X (the candidate for the widening's cost).
# 2. probe-ops of linear_gelu_mul (a new case takes the bf16 GEMM).
# 3. Random-weight E4B bf16, pp512 (-r 3): the GEMM on and off alternated three times; pp4096
#    once each; then its FP8 rewrite and bf16 pp512,tg128 twice each (#17).
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s67c1/bins.tar.xz
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 200 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm.txt 2>&1; echo "fp8_gemm_bench exit $?"
grep -E "^[a-z_0-9]+ +(bf16 \(weights|bf16 \+ gelu|tma bf16|tma e4m3 (wide|128×(128, 6|256, 5|112 |96 ))|tma e4m3→f16)" $OUT/fp8_gemm.txt | cut -c1-100
timeout 100 /tmp/bins/g4 probe-ops --device cuda --op linear_gelu_mul > $OUT/probe.txt 2>&1
echo "probe exit $?: $(grep -E "^linear_gelu_mul " $OUT/probe.txt | tr -s ' ')"
grep -iE "fail|K272" $OUT/probe.txt | head -4
wait
echo "built at $SECONDS s"
G4_TMA_GEMM=0 ab_bench e4b pp512 g4 300 off1; ab_bench e4b pp512 g4 300 on1
ab_bench e4b pp512 g4 310 on2; G4_TMA_GEMM=0 ab_bench e4b pp512 g4 310 off2
G4_TMA_GEMM=0 ab_bench e4b pp512 g4 320 off3; ab_bench e4b pp512 g4 320 on3
ab_bench e4b pp4096 g4 330 on4; G4_TMA_GEMM=0 ab_bench e4b pp4096 g4 330 off4
ab_bench e4b-fp8 pp512,tg128 g4 350 fp8-1; ab_bench e4b pp512,tg128 g4 360 bf16-1
ab_bench e4b-fp8 pp512,tg128 g4 380 fp8-2; ab_bench e4b pp512,tg128 g4 390 bf16-2
for f in e4b-g4-bf16-1 e4b-fp8-g4-fp8-1; do
  python3 -c "import json,sys; m=json.load(open(sys.argv[2]))['memory_mib']; print(sys.argv[1], 'MiB after load', m['after_load'])" $f $OUT/$f.json 2>/dev/null
done
echo "elapsed $SECONDS s"
