#!/usr/bin/env bash
# Stop 51's first call (prepared without a GPU). TMA = experiment/fp8-tma-gemm's binary (678a1cc): prefill's
# FP8 projections, and the MLP's gate/up with its GeGLU product (FP8 and bf16), through
# src/kernels/cuda/tma_gemm.cuh; G4_TMA_GEMM=0 turns that off in the same binary. BASE =
# f58e019 (main's kernels: dequantise + cuBLAS + gelu_and_mul).
# 1. fp8_gemm_bench: the TMA GEMM's correctness and speed beside cuBLAS at E4B's shapes (a hang is
#    a pipeline deadlock: timeout; its last line names the path before the one that hung).
# 2. probe-ops on CUDA (the new cases) and the goldens.
# 3. E4B bf16 and FP8: greedy tokens and log-probabilities of a 600-token prompt with and
#    without the TMA GEMM; pp512 A/B alternated (decode does not take the path: tg128 once).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
TMA=/tmp/bins/g4-tma BASE=/tmp/bins/g4-by8l4
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 240 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm_bench.txt 2>&1; echo "fp8_gemm_bench exit $?"
grep -E "proj|bf16 \(|dequant \+|tma|wrong|unwritten" $OUT/fp8_gemm_bench.txt | head -70
{
for op in matmul_bt_fp8_channel linear_gelu_mul dequant_fp8_channel; do
  timeout 120 $TMA probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $TMA verify-golden --device cuda | tail -1; echo "goldens exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu|dequant)|exit|passed|FAIL|fail" $OUT/correct.txt | head -40
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw.log; echo "elapsed $SECONDS s"
PROMPT="$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 66))")"
generate() { # label checkpoint env...
  local label=$1 model=$2; shift 2
  env "$@" timeout 120 $TMA generate --model /tmp/$model --device cuda --dtype bf16 -p "$PROMPT" -n 12 --logprobs 3 > $OUT/gen-$label.txt 2>&1; echo "$label exit $?"
}
generate fp8-off g4-e4b-fp8 G4_TMA_GEMM=0; generate fp8-on g4-e4b-fp8 G4_TMA_GEMM=1
generate bf16-off g4-e4b G4_TMA_GEMM=0; generate bf16-on g4-e4b G4_TMA_GEMM=1
for c in fp8 bf16; do echo "== $c: off vs on"; diff <(grep -v "tok/s" $OUT/gen-$c-off.txt) <(grep -v "tok/s" $OUT/gen-$c-on.txt) | head -30; done
bench() { # label checkpoint round tests env...
  local label=$1 model=$2 round=$3 tests=$4; shift 4
  env "$@" timeout 90 $BIN bench --model /tmp/$model --device cuda --dtype bf16 --tests $tests --decode graph -r 3 --json > /tmp/$label-$model-$round.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$label-$model-$round.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $round $label $model', ' '.join('%s %.1f ± %.1f' % (t, *v) for t, v in r.items()), 'MiB %.0f' % j['memory_mib']['after_load'])"
}
BIN=$BASE bench base g4-e4b-fp8 1 pp512,tg128
BIN=$TMA bench off g4-e4b-fp8 1 pp512,tg128 G4_TMA_GEMM=0
BIN=$TMA bench on g4-e4b-fp8 1 pp512,tg128 G4_TMA_GEMM=1
BIN=$TMA bench off g4-e4b 1 pp512,tg128 G4_TMA_GEMM=0
BIN=$TMA bench on g4-e4b 1 pp512,tg128 G4_TMA_GEMM=1
echo "elapsed $SECONDS s"
BIN=$TMA bench on g4-e4b-fp8 2 pp512 G4_TMA_GEMM=1
BIN=$TMA bench off g4-e4b-fp8 2 pp512 G4_TMA_GEMM=0
BIN=$BASE bench base g4-e4b-fp8 2 pp512
BIN=$TMA bench on g4-e4b 2 pp512 G4_TMA_GEMM=1
BIN=$TMA bench off g4-e4b 2 pp512 G4_TMA_GEMM=0
echo "elapsed $SECONDS s"
