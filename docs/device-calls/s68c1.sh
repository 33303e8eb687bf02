#!/usr/bin/env bash
# Stop 68, call 1 (prepared; no GPU was lent in stop 68): FP8 prefill's q/k/v and gate/up GEMMs
# take their X in f16, each row on a power-of-two scale that the norm before them writes
# (dual_rms_norm_plus_res_f16), e4m3 widened to f16 in one instruction a pair. The model takes
# that route only with G4_F16_ROWS=1 until this call has checked and measured it. Payload
# target/s68c1/bins.tar.xz: g4 from main, built and packed on the build machine by
#   scripts/build-cuda.sh && scripts/pack-device-payload.sh target/s68c1/bins.tar.xz \
#     g4=target/cuda/release/g4
# 1. probe-ops of the two new ops and of the ops whose kernels changed around them (the dual
#    norms, the FP8 GEMM's bf16 entries); the goldens (graph decode).
# 2. Random-weight E4B's FP8 rewrite: 64 greedy tokens after a 600-token prompt with and without
#    the f16 rows (they hold the bf16 rows' values exactly, so the tokens should agree).
# 3. E4B FP8 pp512 (-r 3) with and without them alternated three times, pp4096 once each; then
#    #17's pair with them: bf16 and FP8 pp512,tg128, memory after load.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s68c1/bins.tar.xz
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
for op in dual_rms_norm_plus_res_f16 matmul_bt_fp8_channel_f16_rows dual_rms_norm_plus_res dual_rms_norm_plus_res_e4m3 matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 90 /tmp/bins/g4 probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ')"
done
grep -ih "fail" $OUT/probe-*.txt | head -6
timeout 120 /tmp/bins/g4 verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1
echo "goldens (graph) exit $?: $(tail -1 $OUT/goldens.txt)"
wait
echo "built at $SECONDS s"
prompt=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 66))")
for rows in 1 0; do
  G4_F16_ROWS=$rows timeout 60 /tmp/bins/g4 generate --model /tmp/g4-e4b-fp8 --device cuda --temperature 0 -n 64 \
    -p "$prompt" > /tmp/gen-$rows.txt 2> /tmp/gen-$rows.err || tail -2 /tmp/gen-$rows.err
done
cmp -s /tmp/gen-1.txt /tmp/gen-0.txt && echo "64 greedy tokens: identical" || {
  echo "64 greedy tokens: differ"; diff /tmp/gen-1.txt /tmp/gen-0.txt | head -6 | cut -c1-160; }
ab_bench e4b-fp8 pp512 g4 300 bf16rows-1; G4_F16_ROWS=1 ab_bench e4b-fp8 pp512 g4 310 f16rows-1
G4_F16_ROWS=1 ab_bench e4b-fp8 pp512 g4 320 f16rows-2; ab_bench e4b-fp8 pp512 g4 330 bf16rows-2
ab_bench e4b-fp8 pp512 g4 340 bf16rows-3; G4_F16_ROWS=1 ab_bench e4b-fp8 pp512 g4 350 f16rows-3
G4_F16_ROWS=1 ab_bench e4b-fp8 pp4096 g4 370 f16rows-4; ab_bench e4b-fp8 pp4096 g4 380 bf16rows-4
ab_bench e4b pp512,tg128 g4 420 bf16-1; G4_F16_ROWS=1 ab_bench e4b-fp8 pp512,tg128 g4 440 fp8-1
G4_F16_ROWS=1 ab_bench e4b-fp8 pp512,tg128 g4 480 fp8-2; ab_bench e4b pp512,tg128 g4 500 bf16-2
load_memory e4b-g4-bf16-1 e4b-fp8-g4-fp8-1
echo "elapsed $SECONDS s"
