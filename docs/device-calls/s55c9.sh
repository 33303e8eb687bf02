#!/usr/bin/env bash
# Stop 55, call 9; payload target/s55c8/fp8_gemm_bench (experiment/tma-staged-widening, after call 8
# hung: the producer told "full" to expect the staged tile's bytes too, which no copy brings).
# A candidate from call 7's ncu: the TMA GEMM with its e4m3 weights widened once a stage into
# shared memory as bf16 by the producer warpgroup's three idle warps, the consumers reading A by
# descriptor (the bf16 loop). fp8_gemm_bench at 512 rows beside g4's kernel (widening in the
# consumers' registers), the same pipeline over bf16 weights, and cuBLAS bf16.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 target/s55c8/fp8_gemm_bench > $OUT/bench.txt 2>&1; echo "== bench exit $?"
grep -E "^(qkv|o|q_kvshare|gate_up|down|gu_31b) +(bf16 \(weights|tma e4m3 128×(128, 6|256)|tma e4m3 staged|tma e4m3 128×128, K in 3|tma bf16 128×(128, 6|256))" $OUT/bench.txt | awk '{n=NF-4; printf "%s", $1; for(i=2;i<=n;i++) printf " %s", $i; printf " | %s µs | err %s\n", $(NF-3), $(NF-1)}'
echo "TMA rows with rel. error > 1e-2:"; awk '/ tma / && $(NF-1)+0 > 1e-2' $OUT/bench.txt | cut -c1-100
echo "elapsed $SECONDS s"
