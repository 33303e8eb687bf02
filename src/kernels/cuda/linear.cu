// linear: Y[m, n] = Σ_k X[m, k]·W[n, k] for a few rows of X (decode), bound by reading W once.
// Each output column n is reduced by `warps_per_col` warps that split its K range; every lane
// issues a batch of independent 16-byte W loads before using them, because a decode GEMV is
// bound by memory latency unless many loads are in flight. The host picks warps_per_col so that
// narrow projections (a few hundred columns) still spread over every SM. X is small and stays
// in L1/L2; sums are f32, one per row of X.
#include "g4_compat.cuh"

#define G4_LINEAR_MAX_ROWS 8
#define G4_LINEAR_BATCH 8
#define G4_LINEAR_MAX_WARPS 32

template <typename T, int MAX_ROWS>
__device__ void linear(const T* x, const T* w, T* y, int m, int n, int k, int warps_per_col) {
    constexpr int per_vector = 16 / sizeof(T);
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int cols_per_block = blockDim.x / warp_size / warps_per_col;
    const int col = blockIdx.x * cols_per_block + warp / warps_per_col;
    const int part = warp % warps_per_col;
    const int vectors = k / per_vector;
    const int step = warp_size * warps_per_col;
    // Fixed bounds (unrolled, guarded) keep the sums and the batch in registers.
    float sum[MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) sum[r] = 0.0f;
    if (col < n) {
        const uint4* w_col = reinterpret_cast<const uint4*>(w + (size_t)col * k);
        for (int base = part * warp_size + lane; base < vectors; base += step * G4_LINEAR_BATCH) {
            uint4 batch[G4_LINEAR_BATCH];
#pragma unroll
            for (int u = 0; u < G4_LINEAR_BATCH; ++u) {
                const int i = base + u * step;
                batch[u] = i < vectors ? w_col[i] : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < G4_LINEAR_BATCH; ++u) {
                const int i = base + u * step;
                if (i >= vectors) break;
                const T* wt = reinterpret_cast<const T*>(&batch[u]);
#pragma unroll
                for (int r = 0; r < MAX_ROWS; ++r) {
                    if (r >= m) break;
                    const uint4 xv = reinterpret_cast<const uint4*>(x + (size_t)r * k)[i];
                    const T* xt = reinterpret_cast<const T*>(&xv);
#pragma unroll
                    for (int e = 0; e < per_vector; ++e) sum[r] += g4_to_f32(xt[e]) * g4_to_f32(wt[e]);
                }
            }
        }
    }
    __shared__ float partial[G4_LINEAR_MAX_WARPS][MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
        if (r >= m) break;
        float s = sum[r];
        for (int bits = warp_size / 2; bits > 0; bits >>= 1) s += G4_SHFL_XOR(s, bits);
        if (lane == 0) partial[warp][r] = s;
    }
    __syncthreads();
    if (part == 0 && lane < m && col < n) {
        float total = 0.0f;
        for (int p = 0; p < warps_per_col; ++p) total += partial[warp + p][lane];
        y[(size_t)lane * n + col] = g4_from_f32<T>(total);
    }
}

// One entry point for decode's single row (fewer registers, more warps in flight) and one for up
// to G4_LINEAR_MAX_ROWS.
#define G4_LINEAR(NAME, T)                                                                                  \
    extern "C" __global__ void g4_linear_##NAME(const T* x, const T* w, T* y, int m, int n, int k,         \
                                                int warps_per_col) {                                        \
        linear<T, G4_LINEAR_MAX_ROWS>(x, w, y, m, n, k, warps_per_col);                                     \
    }                                                                                                       \
    extern "C" __global__ void g4_linear_one_row_##NAME(const T* x, const T* w, T* y, int m, int n, int k, \
                                                        int warps_per_col) {                                \
        linear<T, 1>(x, w, y, m, n, k, warps_per_col);                                                      \
    }
G4_FOR_FLOAT_TYPES(G4_LINEAR)
