#!/usr/bin/env bash
# Stop 51, call 3: 26B-A4B bf16 and its weight-only FP8 rewrite with the TMA GEMM (ad35a73's
# binary: the attention projections and the shared MLP take it; the experts keep their grouped
# kernels), against the same binary with G4_TMA_GEMM=0, alternated.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
[ -x /tmp/bins/g4-tma ] || python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
TMA=/tmp/bins/g4-tma
nvidia-smi --query-gpu=name --format=csv,noheader
show() { python3 -c "
import json; j=json.load(open('$OUT/$1.json')); r={x['measurement']['test']: (x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']}
print('$1', 'pp512 %.0f ± %.0f tg64 %.1f ± %.1f MiB %.0f' % (*r['pp512'], *r['tg64'], j['memory_mib']['after_load']))" || tail -3 $OUT/$1.err; }
bench() { G4_TMA_GEMM=$1 timeout 170 $TMA bench --model /tmp/$2 --device cuda --dtype bf16 --tests pp512,tg64 --decode graph -r 2 --json > $OUT/$3.json 2> $OUT/$3.err; show $3; }
rm -rf /tmp/g4-e4b /tmp/g4-e4b-fp8 /tmp/g4-e4b-fp8-dynamic
t0=$(date +%s); timeout 240 python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b 2>&1 | grep -v -i warn | tail -1; echo "build $(( $(date +%s) - t0 )) s"
bench 1 g4-26b bf16-1
t0=$(date +%s); timeout 240 python3 scripts/fp8_checkpoint.py /tmp/g4-26b /tmp/g4-26b-fp8 --delete-source | tail -1; echo "rewrite $(( $(date +%s) - t0 )) s"
bench 0 g4-26b-fp8 off-fp8-1; bench 1 g4-26b-fp8 on-fp8-1
bench 1 g4-26b-fp8 on-fp8-2; bench 0 g4-26b-fp8 off-fp8-2
timeout 100 $TMA verify-golden --device cuda | tail -1
echo "elapsed $SECONDS s"
