// A decode GEMV candidate that splits the weight's bytes evenly over a grid that fits on the GPU
// at once (stream-K for one row). g4's GEMV gives each column to a block; 31B's down projection
// is then 5,376 blocks over 660 resident slots, 8.15 waves, and the last wave's few blocks read
// alone: the kernel lands 10 % behind a plain read of its bytes (stop 42). Here W [n, k] is one
// flat run of 16-byte vectors and warp w reads vectors [w·share, (w + 1)·share), a multiple of 32
// of them, so every lane of a load lies in the same column and every warp finishes together.
// A column split between warps is summed by the warp that finishes its part last: each part
// leaves its sum in `partials` and counts itself in `arrivals`; the last adds the parts in warp
// order (so the sum does not depend on timing) and resets the count for the next launch.
#pragma once
#include "../../src/kernels/cuda/gemv.cuh"

// Every index fits in 32 bits (the widest weight, E4B's head, is 84 M vectors), which keeps the
// kernel at 48 registers. At most this many warps share a column (the host widens the share to keep it so).
#define EVEN_SPLIT_MAX_PARTS 8

struct EvenSplit {
    int vectors;       // 16-byte vectors in a column (k / 8 for bf16)
    int share;   // vectors a warp reads
    float* partials;   // [columns][EVEN_SPLIT_MAX_PARTS]
    unsigned* arrivals;  // [counted outputs], zero between launches

    __device__ int first_part(int col) const { return col * vectors / share; }
    __device__ int parts(int col) const {
        return (col * vectors + vectors - 1) / share - first_part(col) + 1;
    }
    // Leaves warp `warp`'s part of column `col`; true for the call that arrives last at counter
    // `counter` (of `expected` arrivals), whose partials are then all visible.
    __device__ bool leave(int warp, int col, float sum, int counter, int expected) const {
        partials[col * EVEN_SPLIT_MAX_PARTS + (warp - first_part(col))] = sum;
        __threadfence();
        if (atomicAdd(&arrivals[counter], 1u) != (unsigned)expected - 1) return false;
        __threadfence();
        arrivals[counter] = 0;
        return true;
    }
    __device__ float total(int col) const {
        float t = 0.0f;
        const int p = parts(col);
        for (int i = 0; i < p; ++i) t += __ldcg(&partials[col * EVEN_SPLIT_MAX_PARTS + i]);
        return t;
    }
};

// Y = W·x for one bf16 row; with GELU, W is [gate ‖ up] (2d rows) and Y[j] = gelu(gate_j)·up_j,
// rounded as linear_gelu_mul rounds it. MIN_BLOCKS: blocks a multiprocessor is asked to hold.
template <int BATCH, bool GELU, int MIN_BLOCKS>
__global__ void __launch_bounds__(256, MIN_BLOCKS) gemv_even_split(const bf* x, const bf* w, bf* y, int n, EvenSplit split) {
    G4_LET_DEPENDENTS_LAUNCH();
    const int lane = threadIdx.x % 32;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int vectors = split.vectors;
    const int all = n * vectors;
    const int begin = min(warp * split.share, all), end = min(begin + split.share, all);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    const int d = n / 2;
    auto finish = [&](int col, float sum) {
        for (int bits = 16; bits > 0; bits >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, bits);
        if (lane != 0) return;
        if (!GELU) {
            const int parts = split.parts(col);
            if (parts == 1) y[col] = g4_from_f32<bf>(sum);
            else if (split.leave(warp, col, sum, col, parts)) y[col] = g4_from_f32<bf>(split.total(col));
        } else {
            const int out = col % d;
            const int expected = split.parts(out) + split.parts(out + d);
            if (split.leave(warp, col, sum, out, expected)) {
                const float gate = g4_round<bf>(split.total(out)), up = g4_round<bf>(split.total(out + d));
                y[out] = g4_from_f32<bf>(g4_round<bf>(g4_gelu_tanh(gate)) * up);
            }
        }
    };
    int col = begin / vectors, col_end = (col + 1) * vectors;
    float sum = 0.0f;
    bool waited = false;
    for (int base = begin; base < end; base += 32 * BATCH) {
        uint4 batch[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int i = base + 32 * u + lane;
            batch[u] = i < end ? wv[i] : make_uint4(0, 0, 0, 0);
        }
        if (!waited) {
            G4_WAIT_FOR_INPUTS();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int first = base + 32 * u;
            if (first >= end) break;
            if (first >= col_end) {  // warp-uniform: share and vectors are multiples of 32
                finish(col, sum);
                ++col;
                col_end += vectors;
                sum = 0.0f;
            }
            float wf[8], xf[8];
            DenseWeights<bf>::decode(batch[u], wf);
            x_values<bf, DenseWeights<bf>>(x, first + lane - (col_end - vectors), xf);
#pragma unroll
            for (int e = 0; e < 8; ++e) sum += xf[e] * wf[e];
        }
    }
    if (!waited) G4_WAIT_FOR_INPUTS();
    if (begin < end) finish(col, sum);
}

// The launch: a grid of `blocks` 8-warp blocks (the most that fit at once), the share rounded up
// to 32 vectors and widened until no column has more than EVEN_SPLIT_MAX_PARTS parts.
static EvenSplit even_split(int n, int k, int blocks, float* partials, unsigned* arrivals) {
    const int vectors = k / 8;
    const int warps = blocks * 8, all = n * vectors;
    int share = (all + warps - 1) / warps;
    share = std::max(share, (vectors + EVEN_SPLIT_MAX_PARTS - 2) / (EVEN_SPLIT_MAX_PARTS - 1));
    share = (share + 31) / 32 * 32;
    return EvenSplit{vectors, share, partials, arrivals};
}
