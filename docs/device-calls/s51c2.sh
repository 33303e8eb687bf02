#!/usr/bin/env bash
# Stop 51, call 2. TMA = experiment/fp8-tma-gemm at ad35a73 (wide tiles for gate/up, K sliced only
# where it pays, bf16 back on cuBLAS); G4_TMA_GEMM=0 turns the GEMM off in the same binary. BASE =
# f58e019 (main's kernels). fp8_gemm_bench (the dense scratch fixed), probe-ops, goldens, greedy
# tokens and log-probabilities of 600 prompt ids with and without the GEMM, E4B FP8 pp512 A/B
# alternated beside bf16 (the bf16 checkpoint no longer takes the GEMM).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
TMA=/tmp/bins/g4-tma BASE=/tmp/bins/g4-by8l4
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 240 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm_bench.txt 2>&1; echo "fp8_gemm_bench exit $?"
grep -E "proj|bf16 \(|dequant \+|tma|unwritten" $OUT/fp8_gemm_bench.txt | head -90
{
for op in matmul_bt_fp8_channel linear_gelu_mul; do
  timeout 120 $TMA probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $TMA verify-golden --device cuda | tail -1; echo "goldens exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear_gelu)|exit|passed|FAIL|fail" $OUT/correct.txt | head -40
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw.log; echo "elapsed $SECONDS s"
IDS="$(python3 -c "print(' '.join(str(2 + (i * 7919) % 200000) for i in range(600)))")"
for v in 0 1; do
  G4_TMA_GEMM=$v timeout 120 $TMA generate --model /tmp/g4-e4b-fp8 --device cuda --dtype bf16 --prompt-ids "$IDS" -n 12 --logprobs 3 > $OUT/gen-fp8-$v.txt 2>&1; echo "generate G4_TMA_GEMM=$v exit $?"
done
diff <(grep -v "tok/s" $OUT/gen-fp8-0.txt) <(grep -v "tok/s" $OUT/gen-fp8-1.txt) | head -30; tail -14 $OUT/gen-fp8-1.txt
bench() { # label checkpoint round tests env...
  local label=$1 model=$2 round=$3 tests=$4; shift 4
  env "$@" timeout 90 $BIN bench --model /tmp/$model --device cuda --dtype bf16 --tests $tests --decode graph -r 3 --json > /tmp/$label-$model-$round.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('/tmp/$label-$model-$round.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $round $label $model', ' '.join('%s %.1f ± %.1f' % (t, *v) for t, v in r.items()), 'MiB %.0f' % j['memory_mib']['after_load'])"
}
BIN=$TMA bench on g4-e4b-fp8 1 pp512,tg128 G4_TMA_GEMM=1
BIN=$TMA bench off g4-e4b-fp8 1 pp512 G4_TMA_GEMM=0
BIN=$BASE bench base g4-e4b 1 pp512,tg128
BIN=$TMA bench on g4-e4b 1 pp512 G4_TMA_GEMM=1
BIN=$TMA bench on g4-e4b-fp8 2 pp512 G4_TMA_GEMM=1
BIN=$BASE bench base g4-e4b-fp8 2 pp512
BIN=$BASE bench base g4-e4b 2 pp512
BIN=$TMA bench on g4-e4b-fp8 3 pp512 G4_TMA_GEMM=1
echo "elapsed $SECONDS s"
