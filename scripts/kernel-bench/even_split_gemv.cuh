// A decode GEMV candidate (not in g4's path yet: measured on no GPU so far) that reads W's bytes
// split evenly over a grid that fits on the GPU at once, beside the entry points gemv_bench times
// (several batches and register budgets) and the host's share rule. even-split-in-g4.patch
// moves the kernel into gemv.cuh and gives `linear` and `linear_gelu_mul` their `_even` entry
// points and launch rule.
#pragma once
#include "../../src/kernels/cuda/gemv.cuh"

// Decode's one-row GEMV over W's bytes split evenly: W [n, k] read as one run of 16-byte
// vectors, warp w of a grid that fits on the GPU at once reading vectors [w·share, (w+1)·share).
// gemv.cuh's column-per-block GEMV ends in a ragged last wave: 31B's down projection is 5,376
// blocks over 660 resident slots, 8.15 waves, and the last wave's few blocks read alone, 10 %
// behind a plain read of the bytes (stop 42). Here every warp finishes at about the same time.
// `vectors` (a column's) and `share` are multiples of the warp width, so each of a warp's loads
// lies in one column and its columns change warp-uniformly. A column split between warps is
// summed by the warp that finishes its part last: each part leaves its sum in `partials` and
// counts itself in `arrivals`; the last adds the parts in warp order (so the sum does not depend
// on timing) and sets the count back to zero for the next launch.
// The host widens `share` until no column has more than G4_EVEN_SPLIT_MAX_PARTS parts. Blocks
// are G4_EVEN_SPLIT_THREADS wide; G4_EVEN_SPLIT_BATCH loads a lane keeps in flight, and
// G4_EVEN_SPLIT_BLOCKS blocks a multiprocessor is asked to hold (the register budget).
#define G4_EVEN_SPLIT_MAX_PARTS 8
#define G4_EVEN_SPLIT_THREADS 256
#define G4_EVEN_SPLIT_BATCH 8
#define G4_EVEN_SPLIT_BLOCKS 4
#if defined(__HIPCC__)
#define G4_EVEN_SPLIT_BOUNDS __launch_bounds__(G4_EVEN_SPLIT_THREADS)
#else
#define G4_EVEN_SPLIT_BOUNDS __launch_bounds__(G4_EVEN_SPLIT_THREADS, G4_EVEN_SPLIT_BLOCKS)
#endif
struct EvenSplit {
    int vectors, share;
    float* partials;     // [columns][G4_EVEN_SPLIT_MAX_PARTS]
    unsigned* arrivals;  // [columns counted], zero between launches

    __device__ int first_part(int col) const { return col * vectors / share; }
    __device__ int parts(int col) const { return (col * vectors + vectors - 1) / share - first_part(col) + 1; }
    // Leaves `warp`'s part of column `col`; true for the last of `expected` arrivals at
    // `counter`, which then sees every part.
    __device__ bool leave(int warp, int col, float sum, int counter, int expected) const {
        partials[col * G4_EVEN_SPLIT_MAX_PARTS + (warp - first_part(col))] = sum;
        __threadfence();
        if (atomicAdd(&arrivals[counter], 1u) != (unsigned)expected - 1) return false;
        __threadfence();
        arrivals[counter] = 0;
        return true;
    }
    __device__ float total(int col) const {
        const volatile float* part = partials + col * G4_EVEN_SPLIT_MAX_PARTS;
        float t = 0.0f;
        for (int p = 0, count = parts(col); p < count; ++p) t += part[p];
        return t;
    }
};

// Y[n] = row_scale(n) · W[n]·x; with GELU, W is packed [gate ‖ up] (n = 2d rows) and
// Y[j] = gelu_tanh(G_j) ⊙ U_j, rounded as gemv_gelu_mul rounds it.
template <typename T, typename W, int BATCH, bool GELU>
__device__ void gemv_even_split(const T* x, const typename W::Stored* w, const float* scale, T* y, int n,
                                const EvenSplit split) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / warp_size;
    const int vectors = split.vectors, all = n * vectors, d = n / 2;
    const int begin = min(warp * split.share, all), end = min(begin + split.share, all);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    auto finish = [&](int col, float sum) {
        for (int bits = warp_size / 2; bits > 0; bits >>= 1) sum += G4_SHFL_XOR(sum, bits);
        if (lane != 0) return;
        if (!GELU) {
            const int parts = split.parts(col);
            if (parts == 1) y[col] = g4_from_f32<T>(sum * W::row_scale(scale, col));
            else if (split.leave(warp, col, sum, col, parts))
                y[col] = g4_from_f32<T>(split.total(col) * W::row_scale(scale, col));
        } else {
            const int out = col % d;
            if (split.leave(warp, col, sum, out, split.parts(out) + split.parts(out + d))) {
                const float gate = g4_round<T>(split.total(out) * W::row_scale(scale, out));
                const float up = g4_round<T>(split.total(out + d) * W::row_scale(scale, out + d));
                y[out] = g4_from_f32<T>(g4_round<T>(g4_gelu_tanh(gate)) * up);
            }
        }
    };
    int col = begin / vectors, col_end = (col + 1) * vectors;
    float sum = 0.0f;
    bool waited = false;
    for (int base = begin; base < end; base += warp_size * BATCH) {
        uint4 batch[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int i = base + warp_size * u + lane;
            batch[u] = i < end ? wv[i] : make_uint4(0, 0, 0, 0);
        }
        if (!waited) {
            G4_WAIT_FOR_INPUTS();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int first = base + warp_size * u;
            if (first >= end) break;
            if (first >= col_end) {
                finish(col, sum);
                ++col;
                col_end += vectors;
                sum = 0.0f;
            }
            float wf[W::per_vector], xf[W::per_vector];
            W::decode(batch[u], wf);
            x_values<T, W>(x, first + lane - (col_end - vectors), xf);
#pragma unroll
            for (int e = 0; e < W::per_vector; ++e) sum += xf[e] * wf[e];
        }
    }
    if (!waited) G4_WAIT_FOR_INPUTS();
    if (begin < end) finish(col, sum);
}

// One bf16 row; with GELU, W packed [gate ‖ up]. MIN_BLOCKS: blocks a multiprocessor is asked
// to hold.
template <int BATCH, bool GELU, int MIN_BLOCKS>
__global__ void __launch_bounds__(G4_EVEN_SPLIT_THREADS, MIN_BLOCKS)
    gemv_even_split_bench(const bf* x, const bf* w, bf* y, int n, EvenSplit split) {
    G4_LET_DEPENDENTS_LAUNCH();
    gemv_even_split<bf, DenseWeights<bf>, BATCH, GELU>(x, w, nullptr, y, n, split);
}

// Each warp's share of W's vectors: all of them over the warps, rounded up to 32 (the warp width), widened until no column has
// more than G4_EVEN_SPLIT_MAX_PARTS parts.
static EvenSplit even_split(int n, int k, int blocks, float* partials, unsigned* arrivals) {
    const int vectors = k / 8, warps = blocks * (G4_EVEN_SPLIT_THREADS / 32), all = n * vectors;
    int share = std::max((all + warps - 1) / warps, (vectors + G4_EVEN_SPLIT_MAX_PARTS - 2) / (G4_EVEN_SPLIT_MAX_PARTS - 1));
    share = (share + 31) / 32 * 32;
    return EvenSplit{vectors, share, partials, arrivals};
}
