#!/usr/bin/env bash
# Stop 63, call 2: the MoE expert kernels loading their weights as the dense GEMVs do
# (`W::load`: g4_load_weights), in the model. Payload target/s63/bins.tar.xz (see s63c1.sh).
# Random-weight 26B-A4B bf16, then its weight-only FP8 rewrite: tg64, graph decode, -r 3,
# g4-main and g4-moe alternated, each bench only while the call's time lasts.
set -u
source scripts/device-call-lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[ -x /tmp/bins/g4-moe ] || unpack_payload target/s63/bins.tar.xz
python3 scripts/e4b_reference.py build /tmp/g4-26b --preset 26b-a4b > /tmp/build26.log 2>&1 || tail -3 /tmp/build26.log
echo "built at $SECONDS s"
ab_bench 26b tg64 g4-main 200 1; ab_bench 26b tg64 g4-moe 240 1; ab_bench 26b tg64 g4-moe 280 2; ab_bench 26b tg64 g4-main 320 2
python3 scripts/fp8_checkpoint.py /tmp/g4-26b /tmp/g4-26b-fp8 --delete-source > /tmp/rw.log 2>&1 || tail -3 /tmp/rw.log
echo "rewritten at $SECONDS s"
ab_bench 26b-fp8 tg64 g4-main 440 1; ab_bench 26b-fp8 tg64 g4-moe 480 1; ab_bench 26b-fp8 tg64 g4-moe 520 2; ab_bench 26b-fp8 tg64 g4-main 560 2
echo "elapsed $SECONDS s"
