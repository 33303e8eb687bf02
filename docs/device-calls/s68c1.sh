#!/usr/bin/env bash
# Stop 68, call 1: FP8 prefill's q/k/v and gate/up GEMMs take their X in f16, each row on a
# power-of-two scale that the norm before them writes (dual_rms_norm_plus_res_f16), e4m3 widened
# to f16 in one instruction a pair. Payload target/s68c1/bins.tar.xz: g4-new (this change) and
# g4-base (main at 962650c), built on the build machine by scripts/build-cuda.sh (g4-base in a
# worktree of 962650c) and packed by
#   scripts/pack-device-payload.sh target/s68c1/bins.tar.xz g4-new=target/cuda/release/g4 \
#     g4-base=/tmp/wt-main/target/cuda/release/g4
# 1. g4-new: probe-ops of the two new ops and of the ops whose kernels changed around them (the
#    dual norms, the FP8 GEMM's bf16 entries); the goldens (graph decode).
# 2. Random-weight E4B's FP8 rewrite: 64 greedy tokens after a 600-token prompt with both
#    binaries (the f16 rows hold the bf16 rows' values exactly, so the tokens should agree).
# 3. E4B FP8 pp512 (-r 3), base and new alternated three times, pp4096 once each; then #17's
#    pair with g4-new: bf16 and FP8 pp512,tg128, memory after load.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack_payload target/s68c1/bins.tar.xz
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
for op in dual_rms_norm_plus_res_f16 matmul_bt_fp8_channel_f16_rows dual_rms_norm_plus_res dual_rms_norm_plus_res_e4m3 matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 90 /tmp/bins/g4-new probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1
  echo "probe exit $?: $(grep -E "^$op " $OUT/probe-$op.txt | tr -s ' ')"
done
grep -ih "fail" $OUT/probe-*.txt | head -6
timeout 120 /tmp/bins/g4-new verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1
echo "goldens (graph) exit $?: $(tail -1 $OUT/goldens.txt)"
wait
echo "built at $SECONDS s"
prompt=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 66))")
for bin in g4-new g4-base; do
  timeout 60 /tmp/bins/$bin generate --model /tmp/g4-e4b-fp8 --device cuda --temperature 0 -n 64 -p "$prompt" \
    > /tmp/gen-$bin.txt 2> /tmp/gen-$bin.err || tail -2 /tmp/gen-$bin.err
done
cmp -s /tmp/gen-g4-new.txt /tmp/gen-g4-base.txt && echo "64 greedy tokens: identical" || {
  echo "64 greedy tokens: differ"; diff /tmp/gen-g4-new.txt /tmp/gen-g4-base.txt | head -6 | cut -c1-160; }
ab_bench e4b-fp8 pp512 g4-base 300 1; ab_bench e4b-fp8 pp512 g4-new 310 1
ab_bench e4b-fp8 pp512 g4-new 320 2; ab_bench e4b-fp8 pp512 g4-base 330 2
ab_bench e4b-fp8 pp512 g4-base 340 3; ab_bench e4b-fp8 pp512 g4-new 350 3
ab_bench e4b-fp8 pp4096 g4-new 370 4; ab_bench e4b-fp8 pp4096 g4-base 380 4
ab_bench e4b pp512,tg128 g4-new 420 bf16-1; ab_bench e4b-fp8 pp512,tg128 g4-new 440 fp8-1
ab_bench e4b-fp8 pp512,tg128 g4-new 480 fp8-2; ab_bench e4b pp512,tg128 g4-new 500 bf16-2
load_memory e4b-g4-new-bf16-1 e4b-fp8-g4-new-fp8-1
echo "elapsed $SECONDS s"
