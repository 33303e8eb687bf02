#!/usr/bin/env bash
# Builds the standalone kernel benchmarks (gemv_bench, moe_bench, pdl_bench, attention_bench:
# each times g4's CUDA kernels from src/kernels/cuda beside alternatives, and the first two
# beside a plain read of the same bytes; gemv_bench, fp8_gemv_bench and moe_bench also with W loaded through
# other PTX `ld` qualifiers (cache hints); grouped_bench: g4's grouped expert GEMM (device-side
# row offsets) beside cuBLAS's grouped GEMM, stop 32's WMMA candidate and a plain read of the
# weights, and the device routing sort; it loads libcublas at run time; flash_bench: prefill
# attention's flash kernel, map and merge at E4B's prefill shapes, checked against f64;
# fp8_gemm_bench: prefill GEMMs over e4m3 weights, g4's dequantise-then-cuBLAS beside cuBLASLt's
# FP8 tensor cores (loaded at run time), the dequantised weight in L2-sized slices and a
# warp-specialised TMA + wgmma GEMM that widens e4m3 to bf16 in registers (g4's,
# src/kernels/cuda/tma_gemm.cuh; also over bf16 weights, with the GeGLU epilogue, and widening
# to f16 against an f16 X), checked against f64;
# fp8_gemv_bench: the FP8 decode GEMV (plain and with the GeGLU epilogue) beside stop 39's
# tensor-core candidate, fp8_gemv_candidates.cuh, and stop 49's streaming one, and prefill's
# dequantisation beside a plain read; glue_bench: 31B's prefill
# glue — attention's softmax, qkv_norm_rope, the layer tail's norm — beside a copy of its bytes;
# chain_bench: 31B's (or, `chain_bench e4b`, E4B's) decode layers as one graph of g4's kernels,
# each stage changed in turn, beside persistent.cuh's candidates — a grid barrier's cost, and the
# MLP or the whole layer from its o GEMV on as one persistent kernel) into
# target/kernel-bench/, for sm_90, with the pinned CUDA 13.0 wheels; no GPU needed here.
# `scripts/gpu-check.sh OUT kernel-bench` runs them on the device (carry target/kernel-bench).
set -euo pipefail
cd "$(dirname "$0")/../.."
nvcc_env="$(scripts/nvcc-env.sh)"
eval "$nvcc_env"
mkdir -p target/kernel-bench
for bench in gemv moe pdl attention grouped flash fp8_gemm fp8_gemv glue chain; do
  nvcc -O3 -std=c++17 -arch=sm_90a -L"$CUDA_HOME/lib" -o "target/kernel-bench/${bench}_bench" -ldl \
    "scripts/kernel-bench/${bench}_bench.cu"
done
echo "kernel-bench: target/kernel-bench/{gemv,moe,pdl,attention,grouped,flash,fp8_gemm,fp8_gemv,glue,chain}_bench"
