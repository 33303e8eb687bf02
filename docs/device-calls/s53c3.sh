#!/usr/bin/env bash
# Stop 53, call 3: why the TMA GEMM's pairs take twice the single blocks' time (s53c1.sh's
# fp8_gemm_bench): ncu on one launch of each, e4m3 128×128 6 stages, at E4B's q/k/v (512 rows).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab3/bins.tar.xz')).extractall('/tmp/bins', members=[m for m in tarfile.open(fileobj=lzma.open('target/ab3/bins.tar.xz')) if m.name == 'fp8_gemm_bench'])"
NCU=$(ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | tail -1)
echo "ncu: $NCU"
timeout 100 $NCU --kernel-name-base demangled --kernel-name regex:tma_gemm_variant --launch-count 1 --metrics gpu__time_duration.sum /tmp/bins/fp8_gemm_bench 2>&1 | grep -E "tma_gemm_variant" | head -3
i=0
for pat in "E4m3Weights, 128, 6, false, false>|E4m3Weights, \(int\)128, \(int\)6, \(bool\)0, \(bool\)0>" "E4m3Weights, 128, 6, false, true>|E4m3Weights, \(int\)128, \(int\)6, \(bool\)0, \(bool\)1>"; do
  i=$((i + 1))
  timeout 150 $NCU --kernel-name-base demangled --kernel-name "regex:$pat" --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis /tmp/bins/fp8_gemm_bench > $OUT/ncu-$i.txt 2>&1
  echo "ncu $i exit $?"
  grep -E "tma_gemm_variant|Duration|Cluster|Registers|Theoretical Occ|Achieved Occ|Issued Warp|No Eligible|Warp Cycles Per Issued|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)|Grid Size|Waves|Block Limit|Dynamic Shared" $OUT/ncu-$i.txt | head -40
  grep -E "^\s+(OPT|WRN|INF)" -A2 $OUT/ncu-$i.txt | head -30
done
echo "elapsed $SECONDS s"
