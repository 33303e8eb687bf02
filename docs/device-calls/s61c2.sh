#!/usr/bin/env bash
# Stop 61, call 2 (not run: no machine could be started). Payload target/s61c2/bins.tar.xz, one
# xz stream with a 256 MiB dictionary so that the two stripped binaries share their bytes:
# g4-base (main's build), g4-new (main with scripts/kernel-bench/even-split-in-g4.patch applied:
# the even-split decode GEMV for one row over W of 16 MiB or more, `linear` and packed
# `linear_gelu_mul`) and gemv_bench (the candidate at several batches and register budgets
# beside g4's column-per-block GEMV and a plain read, every projection shape).
# Then with g4-new: probe-ops for both ops (checked against f64), the goldens (graph decode);
# 31B bf16 tg64, graph decode, -r 3, base/new alternated, each bench only
# while the call's time lasts (failed starts had left 466 s of the budget:
# E4B's part was dropped).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/s61c2/bins.tar.xz')).extractall('/tmp/bins')"
chmod +x /tmp/bins/*
timeout 40 /tmp/bins/gemv_bench > $OUT/gemv.txt 2>&1; echo "gemv exit $?"
python3 scripts/kernel-bench/gemv_table.py $OUT/gemv.txt
python3 scripts/e4b_reference.py build /tmp/g4-31b --preset 31b > /tmp/build31.log 2>&1 &
for op in linear linear_gelu_mul; do
  timeout 60 /tmp/bins/g4-new probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1; echo "probe $op exit $?"
  grep -v "^ *$" $OUT/probe-$op.txt | tail -8
done
timeout 40 /tmp/bins/g4-new verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1; echo "goldens (graph) exit $?"; tail -1 $OUT/goldens.txt
wait
bench() { # model tests binary round
  [ $SECONDS -lt $4 ] || { echo "skipped $1 $3 round $5: $SECONDS s"; return; }
  timeout 100 /tmp/bins/$3 bench --model /tmp/g4-$1 --device cuda --dtype bf16 --tests $2 --decode graph -r 3 --json > $OUT/$1-$3-$5.json 2> /tmp/e.err || tail -3 /tmp/e.err
  python3 -c "
import json; j=json.load(open('$OUT/$1-$3-$5.json'))
print('$1 round $5 %-7s ' % '$3', ', '.join('%s %.2f ± %.2f' % (x['measurement']['test'], x['measurement']['tokens_per_s_mean'], x['measurement']['tokens_per_s_stddev']) for x in j['results']))"
}
echo "elapsed $SECONDS s"
bench 31b tg64 g4-base 150 1; bench 31b tg64 g4-new 210 1; bench 31b tg64 g4-new 180 2; bench 31b tg64 g4-base 215 2
echo "elapsed $SECONDS s"
