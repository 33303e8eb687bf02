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
# The table, one variant a line: shape, variant, µs.
python3 - $OUT/gemv.txt <<'PY'
import re, sys
for line in open(sys.argv[1]):
    if '|' not in line or line.startswith('shape'):
        print(line.rstrip()[:160]); continue
    shape, rest = line.split('|', 1)
    cells = dict((m.group(1), m.group(2)) for m in re.finditer(r' (\S+) ([\d.]+) \(', rest))
    keep = ['g4', 'packed', 'read']
    print(shape.split()[0], ' '.join(f'{k}={cells[k]}' for k in keep if k in cells),
          ' '.join(re.findall(r'(\S*even\S* [\d.]+ \(\d+\) \[[^\]]*\])', rest)))
PY
echo "elapsed $SECONDS s"
