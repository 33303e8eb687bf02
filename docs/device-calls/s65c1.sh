#!/usr/bin/env bash
# Stop 65, call 1. Payload target/s65c1/bins.tar.xz: g4 (main's sources at this stop's start,
# af71637, with tma_gemm.cuh calling `W::fragments`) and fp8_gemm_bench with three timing
# probes of the e4m3 GEMM (A constant, A's bytes unconverted, converted but unscaled) and its
# mainloop one k16 step a wgmma group (`STEPWISE`).
# 1. fp8_gemm_bench: the probes beside g4's e4m3 GEMM, the same pipeline over bf16 and cuBLAS.
# 2. probe-ops of the ops af71637 touched (moe_mlps, moe_experts, moe_experts_fp8), the
#    goldens with graph and eager decode.
# 3. Random-weight E4B bf16 and its FP8 rewrite: pp512 and tg128 (graph decode, -r 3), twice
#    each, alternated: #10's and #17's E4B numbers at main's HEAD.
# ncu's warp-state sections of the e4m3 GEMM and of the const-A probe (after step 1).
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s65c1/bins.tar.xz
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 150 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm.txt 2>&1; echo "fp8_gemm_bench exit $?"
grep -E "^[a-z_0-9]+ +(bf16 \(weights|tma e4m3 128×128, 6|tma e4m3 128×256|tma e4m3 wide|probe|stepwise|tma bf16 128×128, 6)" $OUT/fp8_gemm.txt | cut -c1-70
# ncu's warp states of g4's e4m3 GEMM (its first launch: E4B's q/k/v) and of the const-A probe.
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for side in "tma_gemm_variant<g4_tma::E4m3Weights" E4m3ConstA; do
  timeout 120 $NCU --clock-control none -k "regex:$side" -c 1 --section WarpStateStats --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    /tmp/bins/fp8_gemm_bench > "$OUT/ncu-${side//[^a-zA-Z0-9]/_}.txt" 2>&1
  echo "== ncu $side exit $?"
  grep -E "Duration|Stall|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc Active|Compute \(SM\) Throughput" \
    "$OUT/ncu-${side//[^a-zA-Z0-9]/_}.txt" | grep -v stalled_ | tr -s ' ' | head -12
  grep -E "stalled_" "$OUT/ncu-${side//[^a-zA-Z0-9]/_}.txt" | awk '{print $NF, $1}' | sort -gr | head -8
done
for op in moe_mlps moe_experts moe_experts_fp8; do
  timeout 60 /tmp/bins/g4 probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe $op exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ' | head -3 | tr '\n' ';')"
done
for mode in graph eager; do
  timeout 90 /tmp/bins/g4 verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1
  echo "goldens ($mode) exit $?: $(tail -1 $OUT/goldens-$mode.txt)"
done
wait
echo "built at $SECONDS s"
ab_bench e4b pp512,tg128 g4 400 1; ab_bench e4b-fp8 pp512,tg128 g4 440 1
ab_bench e4b pp512,tg128 g4 480 2; ab_bench e4b-fp8 pp512,tg128 g4 520 2
for f in e4b-g4-1 e4b-fp8-g4-1; do
  python3 -c "import json,sys; print(sys.argv[1], json.load(open(sys.argv[2]))['memory_mib'])" $f $OUT/$f.json 2>&1 | head -2
done
echo "elapsed $SECONDS s"
