#!/usr/bin/env bash
# Stop 53, call 1. NEW = experiment/bf16-tma-prefill (1984d63): the TMA GEMM's blocks in pairs
# that share their X tile's copy (multicast; stop 52's experiment/tma-cluster-multicast), and bf16
# prefill projections (linear, linear_gelu_mul from 128 rows) through the same GEMM. BASE =
# 068e929 (main's kernels: single blocks, cuBLAS for bf16). fp8_gemm_bench (pairs beside single
# blocks and cuBLAS, e4m3 and bf16, every path checked against f64), probe-ops of the three ops
# and the goldens with NEW, then E4B pp512 (tg128 in round 1): FP8 NEW / BASE, and bf16 NEW with
# its GEMM on (TMA) and off (G4_TMA_GEMM=0: cuBLAS), alternated.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab3/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-bf16tma BASE=/tmp/bins/g4-base
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
(python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw.log 2>&1; echo built > /tmp/built) &
timeout 200 /tmp/bins/fp8_gemm_bench > $OUT/fp8_gemm_bench.txt 2>&1; echo "fp8_gemm_bench exit $? ($SECONDS s)"
grep -E "proj|bf16 \(|tma|cublas|cuBLAS|unwritten|wrong" $OUT/fp8_gemm_bench.txt | head -90
{
for op in matmul_bt_fp8_channel linear_gelu_mul linear; do
  timeout 120 $NEW probe-ops --device cuda --op $op; echo "probe $op exit $?"
done
timeout 100 $NEW verify-golden --device cuda | tail -1; echo "goldens exit $?"
} > $OUT/correct.txt 2>&1
grep -E "^(matmul_bt_fp8|linear)|exit|passed|FAIL|fail" $OUT/correct.txt | head -40
while [ ! -f /tmp/built ]; do sleep 2; done
tail -1 /tmp/build.log; tail -1 /tmp/rw.log; echo "elapsed $SECONDS s"
bench() { # label env binary checkpoint round tests
  local label=$1 env=$2 bin=$3 model=$4 round=$5 tests=$6
  env $env timeout 90 $bin bench --model /tmp/$model --device cuda --dtype bf16 --tests $tests --decode graph -r 3 --json > $OUT/$label-$model-$round.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$label-$model-$round.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('round $round $label $model', ' '.join('%s %.1f ± %.1f' % (t, *v) for t, v in r.items()), 'MiB %.0f' % j['memory_mib']['after_load'])"
}
bench new G4_TMA_GEMM=1 $NEW g4-e4b-fp8 1 pp512,tg128
bench base G4_TMA_GEMM=1 $BASE g4-e4b-fp8 1 pp512,tg128
bench new-tma G4_TMA_GEMM=1 $NEW g4-e4b 1 pp512,tg128
bench new-cublas G4_TMA_GEMM=0 $NEW g4-e4b 1 pp512
bench base G4_TMA_GEMM=1 $BASE g4-e4b-fp8 2 pp512
bench new G4_TMA_GEMM=1 $NEW g4-e4b-fp8 2 pp512
bench new-cublas G4_TMA_GEMM=0 $NEW g4-e4b 2 pp512
bench new-tma G4_TMA_GEMM=1 $NEW g4-e4b 2 pp512
bench new G4_TMA_GEMM=1 $NEW g4-e4b-fp8 3 pp512
bench base G4_TMA_GEMM=1 $BASE g4-e4b-fp8 3 pp512
echo "elapsed $SECONDS s"
