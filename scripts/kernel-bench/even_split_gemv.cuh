// gemv.cuh's even-split decode GEMV (W's bytes split evenly over a grid that fits on the GPU at
// once) at other batches and register budgets than linear.cu's entry points, and the host's
// share rule (linear.rs's `even_split`).
#pragma once
#include "../../src/kernels/cuda/gemv.cuh"

// One bf16 row; with GELU, W packed [gate ‖ up]. MIN_BLOCKS: blocks a multiprocessor is asked
// to hold.
template <int BATCH, bool GELU, int MIN_BLOCKS>
__global__ void __launch_bounds__(G4_EVEN_SPLIT_THREADS, MIN_BLOCKS)
    gemv_even_split_bench(const bf* x, const bf* w, bf* y, int n, EvenSplit split) {
    G4_LET_DEPENDENTS_LAUNCH();
    gemv_even_split<bf, DenseWeights<bf>, BATCH, GELU>(x, w, nullptr, y, n, split);
}

// A share of ⌈vectors / warps⌉ rounded up to 32 (the warp width), widened until no column has
// more than G4_EVEN_SPLIT_MAX_PARTS parts.
static EvenSplit even_split(int n, int k, int blocks, float* partials, unsigned* arrivals) {
    const int vectors = k / 8, warps = blocks * (G4_EVEN_SPLIT_THREADS / 32), all = n * vectors;
    int share = std::max((all + warps - 1) / warps, (vectors + G4_EVEN_SPLIT_MAX_PARTS - 2) / (G4_EVEN_SPLIT_MAX_PARTS - 1));
    share = (share + 31) / 32 * 32;
    return EvenSplit{vectors, share, partials, arrivals};
}
