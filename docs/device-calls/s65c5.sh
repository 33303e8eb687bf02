#!/usr/bin/env bash
# Stop 65, call 5, on call 4's machine while it was still warm (call 4's payload and FP8
# checkpoint still there): random-weight E4B bf16 rebuilt, then bf16 and its FP8 rewrite with
# g4-wide (9aad4a1), pp512 and tg128 (graph decode, -r 3), then pp512 again: #17 on an H200.
source scripts/device-call-lib.sh; nvidia-smi --query-gpu=name --format=csv,noheader; ls /tmp/g4-e4b-fp8 >/dev/null 2>&1 && echo fp8-there; [ -x /tmp/bins/g4-wide ] || unpack_payload target/s65c4/bins.tar.xz; python3 scripts/e4b_reference.py build /tmp/g4-e4b > /tmp/build.log 2>&1 || tail -2 /tmp/build.log; echo "built $SECONDS"; ab_bench e4b pp512,tg128 g4-wide 150 1; ab_bench e4b-fp8 pp512,tg128 g4-wide 150 1; ab_bench e4b pp512 g4-wide 150 2; ab_bench e4b-fp8 pp512 g4-wide 160 2; echo "elapsed $SECONDS"
