#!/usr/bin/env bash
# Stop 62, call 1: s61c2's measurement of the even-split decode GEMV, with time for E4B too.
# Payload target/s62c1/bins.tar.xz (one xz stream, 256 MiB dictionary): g4-base (main at
# e0431fa; src as at 9547b78), g4-new (main with scripts/kernel-bench/even-split-in-g4.patch
# applied) and gemv_bench. gemv_bench first (the candidate beside g4's GEMV and a plain read at
# every projection shape), then with g4-new: probe-ops for linear and linear_gelu_mul (against
# f64), the goldens (graph and eager); then 31B bf16 tg64 and E4B bf16 tg128, graph decode, -r 3,
# base/new alternated, each bench only while the call's time lasts.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/s62c1/bins.tar.xz')).extractall('/tmp/bins')"
chmod +x /tmp/bins/*
timeout 60 /tmp/bins/gemv_bench > $OUT/gemv.txt 2>&1; echo "gemv exit $?"
python3 scripts/kernel-bench/gemv_table.py $OUT/gemv.txt
python3 scripts/e4b_reference.py build /tmp/g4-31b --preset 31b > /tmp/build31.log 2>&1 &
for op in linear linear_gelu_mul; do
  timeout 60 /tmp/bins/g4-new probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1; echo "probe $op exit $?"
  grep -v "^ *$" $OUT/probe-$op.txt | tail -8
done
for mode in graph eager; do
  timeout 60 /tmp/bins/g4-new verify-golden --device cuda --decode $mode > $OUT/goldens-$mode.txt 2>&1; echo "goldens ($mode) exit $?"; tail -1 $OUT/goldens-$mode.txt
done
wait
bench() { # model tests binary deadline round
  [ $SECONDS -lt $4 ] || { echo "skipped $1 $3 round $5: $SECONDS s"; return; }
  timeout 100 /tmp/bins/$3 bench --model /tmp/g4-$1 --device cuda --dtype bf16 --tests $2 --decode graph -r 3 --json > $OUT/$1-$3-$5.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$3-$5.json'))
print('$1 round $5 %-7s ' % '$3', ', '.join('%s %.2f ± %.2f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
}
echo "elapsed $SECONDS s"
bench 31b tg64 g4-base 300 1; bench 31b tg64 g4-new 340 1; bench 31b tg64 g4-new 380 2; bench 31b tg64 g4-base 420 2
echo "elapsed $SECONDS s"
rm -rf /tmp/g4-31b
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build-e4b.log 2>&1 || tail -3 /tmp/build-e4b.log
bench e4b tg128 g4-base 520 1; bench e4b tg128 g4-new 535 1; bench e4b tg128 g4-new 550 2; bench e4b tg128 g4-base 565 2
echo "elapsed $SECONDS s"
