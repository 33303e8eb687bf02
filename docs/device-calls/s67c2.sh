#!/usr/bin/env bash
# Stop 67, call 2 (prepared; the session's device time ran out before it ran). Payload
# target/s67c2/bins.tar.xz: g4 and fp8_gemm_bench built from main, by
#   scripts/build-cuda.sh && eval "$(scripts/nvcc-env.sh)" &&
#   nvcc -O3 -std=c++17 -arch=sm_90a -L"$CUDA_HOME/lib" -o target/s66/fp8_gemm_bench -ldl \
#     scripts/kernel-bench/fp8_gemm_bench.cu &&
#   scripts/pack-device-payload.sh target/s67c2/bins.tar.xz g4=target/cuda/release/g4 \
#     fp8_gemm_bench=target/s66/fp8_gemm_bench
# 1. fp8_gemm_bench at E4B's shapes: g4's e4m3 tilings beside the same tilings widened to f16,
#    the pass that would make an f16 X, and gate/up through the whole f16 path (rows scaled).
# 2. On an H200 only (call 1 ran the pair on an H100): #17's E4B pair, random-weight E4B bf16 and
#    its FP8 rewrite, pp512,tg128 twice each.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[ -x /tmp/bins/fp8_gemm_bench ] || unpack_payload target/s67c2/bins.tar.xz
on_h200=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c H200)
[ "$on_h200" = 0 ] || (python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 150 /tmp/bins/fp8_gemm_bench qkv o gate_up down > /tmp/fp8_gemm.txt 2>&1; echo "fp8_gemm_bench exit $?"
grep -E "^(qkv|o|gate_up|down) +(bf16 \(w|bf16 \+ gelu|tma e4m3 128×(112 |96 |64 |256, K in 3)|tma e4m3 wide|tma e4m3→f16|bf16 X)" /tmp/fp8_gemm.txt | cut -c1-100
[ "$on_h200" = 0 ] && { echo "not an H200: no #17 pair; elapsed $SECONDS s"; exit 0; }
wait
echo "built at $SECONDS s"
ab_bench e4b-fp8 pp512,tg128 g4 400 fp8-1; ab_bench e4b pp512,tg128 g4 420 bf16-1
ab_bench e4b-fp8 pp512,tg128 g4 440 fp8-2; ab_bench e4b pp512,tg128 g4 460 bf16-2
load_memory e4b-g4-bf16-1 e4b-fp8-g4-fp8-1
echo "elapsed $SECONDS s"
