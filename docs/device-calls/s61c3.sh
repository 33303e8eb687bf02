#!/usr/bin/env bash
# Stop 61, call 3 (not run: 271 s of the budget left, too little to start a machine): s61c2's
# kernel half only. Payload target/s61c3/bins.tar.xz: g4-new (main with
# scripts/kernel-bench/even-split-in-g4.patch applied) and gemv_bench.
# gemv_bench first (the even split beside g4's GEMV and a plain read on every projection shape),
# then probe-ops on both ops with g4-new (checked against f64), then the goldens.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/s61c3/bins.tar.xz')).extractall('/tmp/bins')"
chmod +x /tmp/bins/*
timeout 30 /tmp/bins/gemv_bench > $OUT/gemv.txt 2>&1; echo "gemv exit $?"
python3 scripts/kernel-bench/gemv_table.py $OUT/gemv.txt
for op in linear linear_gelu_mul; do
  timeout 25 /tmp/bins/g4-new probe-ops --device cuda --op $op > $OUT/probe-$op.txt 2>&1; echo "probe $op exit $?"
  grep -v "^ *$" $OUT/probe-$op.txt | tail -6
done
timeout 20 /tmp/bins/g4-new verify-golden --device cuda --decode graph > $OUT/goldens.txt 2>&1; echo "goldens (graph) exit $?"; tail -1 $OUT/goldens.txt
echo "elapsed $SECONDS s"
