#!/usr/bin/env bash
# Stop 49, call 5: the streamed FP8 GEMVs (be06478) per kernel in an FP8 decode step (ncu), to set
# beside call 2's (9f2d0ff): were they slower alone, or only beside the launches around them?
set -u
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bins
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('target/ab/bins.tar.xz')).extractall('/tmp/bins')"
NEW=/tmp/bins/g4-c49c
nvidia-smi --query-gpu=name --format=csv,noheader
python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 && python3 scripts/fp8_checkpoint.py /tmp/g4-e4b /tmp/g4-e4b-fp8 > /tmp/rw2.log 2>&1
tail -1 /tmp/rw2.log; echo "elapsed $SECONDS s"
timeout 200 python3 scripts/kernel_breakdown.py $OUT/ncu-stream.csv -- $NEW bench --model /tmp/g4-e4b-fp8 --device cuda --dtype bf16 --tests tg4 --decode eager -r 1 > /tmp/ncu.log 2>&1; echo "ncu exit $?"
python3 scripts/kernel_breakdown.py $OUT/ncu-stream.csv > $OUT/profile-stream.md 2>&1; sed -n '/## decode/,$p' $OUT/profile-stream.md | head -12
echo "elapsed $SECONDS s"
