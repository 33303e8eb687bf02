#!/usr/bin/env bash
# Stop 55, call 7; payload target/s55c7/fp8_gemm_bench (main's, 2e535a9).
# Where FP8 prefill's TMA GEMM loses to cuBLAS's bf16 GEMM at E4B's q/k/v (512 rows: 19.3 µs in
# 128 × 128 tiles against 13.4): ncu's speed-of-light, compute and memory sections of the first
# cuBLAS kernel (nvjet) and the first TMA variant the bench launches (both E4B's q/k/v), clocks
# left free (--clock-control none), as they run in g4.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for side in nvjet tma_gemm_variant; do
  timeout 200 $NCU --clock-control none --cache-control none -k regex:$side -c 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    target/s55c7/fp8_gemm_bench > $OUT/ncu-$side.txt 2>&1
  echo "== $side exit $?"
  grep -E "^  [a-z_<>0-9, :]+\(|Duration|SM Frequency|DRAM Frequency|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|SM Busy|Max Bandwidth|L2 Hit Rate|Mem Busy|Grid Size|Block Size|Registers Per|Achieved Occupancy|Dynamic Shared" $OUT/ncu-$side.txt | head -40
done
echo "elapsed $SECONDS s"
