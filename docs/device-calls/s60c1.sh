#!/usr/bin/env bash
# Stop 60, call 1. Payload target/s60c1/chain_bench.xz (scripts/kernel-bench/chain_bench.cu with
# persistent.cuh): a grid barrier's cost beside an empty kernel's, the persistent MLP checked bit
# for bit against g4's two GEMVs, then E4B's and 31B's chains with the persistent MLP in place of
# g4's two GEMVs (its first down weights loaded before or after the barrier's wait), and with the
# dual norm before it folded in (every block normalising the row itself), and everything from the o
# GEMV to the next layer's q/k/v GEMV as one persistent kernel.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('target/s60c1/chain_bench.xz'), open('/tmp/chain_bench','wb'))"
chmod +x /tmp/chain_bench
for model in e4b 31b; do
  timeout 120 /tmp/chain_bench $model > $OUT/chain-$model.md 2>&1; echo "chain $model exit $?"; cat $OUT/chain-$model.md
done
echo "elapsed $SECONDS s"
