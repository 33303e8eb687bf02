#!/usr/bin/env bash
# Stop 65, call 4. Payload target/s65c4/bins.tar.xz: g4-new (call 2's, dbbf63c), g4-wide (the
# chooser also weighing tiles of 256 X rows over slices of K: E4B's and 31B's down at 512 rows
# take them) and fp8_gemm_bench with those tiles over 2–4 slices, and 112- and 96-row tiles
# over 2.
# 1. fp8_gemm_bench: every e4m3 tiling beside cuBLAS.
# 2. g4-wide: probe-ops of matmul_bt_fp8_channel (a new case takes the wide slices), the goldens.
# 3. Random-weight E4B's FP8 rewrite, pp512 (-r 3): g4-new and g4-wide alternated three times.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s65c4/bins.tar.xz
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 --delete-source > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 200 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm.txt 2>&1; echo "fp8_gemm_bench exit $?"
grep -E "^(qkv|o|down|gu_31b) +(bf16 \(weights|tma e4m3 128×(128|96|112|256)|probe: const)" $OUT/fp8_gemm.txt | cut -c1-82
timeout 120 /tmp/bins/g4-wide probe-ops --device cuda --op matmul_bt_fp8_channel > $OUT/probe.txt 2>&1
echo "probe exit $?: $(grep -E "^matmul_bt_fp8_channel " $OUT/probe.txt | tr -s ' ')"
grep -iE "fail|M129" $OUT/probe.txt | head -4
timeout 90 /tmp/bins/g4-wide verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1
echo "goldens (graph) exit $?: $(tail -1 $OUT/goldens.txt)"
wait
echo "built at $SECONDS s"
ab_bench e4b-fp8 pp512 g4-new 400 1; ab_bench e4b-fp8 pp512 g4-wide 420 1
ab_bench e4b-fp8 pp512 g4-wide 440 2; ab_bench e4b-fp8 pp512 g4-new 460 2
ab_bench e4b-fp8 pp512 g4-new 480 3; ab_bench e4b-fp8 pp512 g4-wide 500 3
echo "elapsed $SECONDS s"
