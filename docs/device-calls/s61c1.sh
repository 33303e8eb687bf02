#!/usr/bin/env bash
# Stop 61, call 1. Payload target/s61c1/gemv_bench.xz (scripts/kernel-bench/gemv_bench.cu with
# even_split_gemv.cuh): the decode GEMV on every projection shape beside the even-split candidate
# (the weight's bytes split evenly over a grid that fits at once) and a plain read.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('target/s61c1/gemv_bench.xz'), open('/tmp/gemv_bench','wb'))"
chmod +x /tmp/gemv_bench
timeout 300 /tmp/gemv_bench > $OUT/gemv.txt 2>&1; echo "gemv exit $?"
python3 scripts/kernel-bench/gemv_table.py $OUT/gemv.txt
echo "elapsed $SECONDS s"
