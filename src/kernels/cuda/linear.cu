// linear: Y[m, n] = Σ_k X[m, k]·W[n, k] for a few rows of X (decode), bound by reading W once.
// Each warp owns a run of whole output columns: consecutive rows of W, one stretch of memory. It
// walks that stretch in steps of 32 vectors (one 16-byte vector per lane) and keeps DEPTH steps
// in flight the whole time: consuming step s issues the load of step s + DEPTH, across column
// boundaries, so the warp never drains its loads between columns (a decode GEMV is bound by
// memory latency unless many loads are in flight). Owning whole columns keeps the sums
// deterministic: each column is reduced by one warp, in one order, with no atomics. X is small
// and stays in L1/L2; sums are f32, one per row of X.
#include "g4_compat.cuh"

#define G4_LINEAR_MAX_ROWS 8
#define G4_LINEAR_DEPTH 8

template <typename T>
__device__ void linear(const T* x, const T* w, T* y, int m, int n, int k, int cols_per_warp) {
    constexpr int per_vector = 16 / sizeof(T);
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / warp_size;
    const long long first_col = warp * cols_per_warp;
    if (first_col >= n) return;
    const int cols = (int)min((long long)cols_per_warp, n - first_col);
    const int vectors = k / per_vector;  // per column
    const int slices = (vectors + warp_size - 1) / warp_size;
    const int steps = cols * slices;
    const uint4* w_run = reinterpret_cast<const uint4*>(w) + first_col * vectors;

    // The load cursor runs DEPTH steps ahead of the consuming one.
    uint4 batch[G4_LINEAR_DEPTH];
    int load_col = 0, load_slice = 0;
#pragma unroll
    for (int u = 0; u < G4_LINEAR_DEPTH; ++u) {
        const int i = load_slice * warp_size + lane;
        batch[u] = (u < steps && i < vectors) ? w_run[(size_t)load_col * vectors + i] : make_uint4(0, 0, 0, 0);
        if (++load_slice == slices) {
            load_slice = 0;
            ++load_col;
        }
    }

    float sum[G4_LINEAR_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < G4_LINEAR_MAX_ROWS; ++r) sum[r] = 0.0f;
    int col = 0, slice = 0;
    for (int base = 0; base < steps; base += G4_LINEAR_DEPTH) {
#pragma unroll
        for (int u = 0; u < G4_LINEAR_DEPTH; ++u) {
            const int step = base + u;
            if (step >= steps) break;
            const uint4 current = batch[u];
            {
                const int i = load_slice * warp_size + lane;
                const bool wanted = step + G4_LINEAR_DEPTH < steps && i < vectors;
                batch[u] = wanted ? w_run[(size_t)load_col * vectors + i] : make_uint4(0, 0, 0, 0);
                if (++load_slice == slices) {
                    load_slice = 0;
                    ++load_col;
                }
            }
            const int i = slice * warp_size + lane;
            if (i < vectors) {
                const T* wt = reinterpret_cast<const T*>(&current);
#pragma unroll
                for (int r = 0; r < G4_LINEAR_MAX_ROWS; ++r) {
                    if (r >= m) break;
                    const uint4 xv = reinterpret_cast<const uint4*>(x + (size_t)r * k)[i];
                    const T* xt = reinterpret_cast<const T*>(&xv);
#pragma unroll
                    for (int e = 0; e < per_vector; ++e) sum[r] += g4_to_f32(xt[e]) * g4_to_f32(wt[e]);
                }
            }
            if (++slice == slices) {
                // Column `col` is complete: reduce over the warp, lane r writes row r.
                float mine = 0.0f;
#pragma unroll
                for (int r = 0; r < G4_LINEAR_MAX_ROWS; ++r) {
                    if (r >= m) break;
                    float s = sum[r];
                    for (int bits = warp_size / 2; bits > 0; bits >>= 1) s += G4_SHFL_XOR(s, bits);
                    if (lane == r) mine = s;
                    sum[r] = 0.0f;
                }
                if (lane < m) y[(size_t)lane * n + first_col + col] = g4_from_f32<T>(mine);
                slice = 0;
                ++col;
            }
        }
    }
}

#define G4_LINEAR(NAME, T)                                                                                  \
    extern "C" __global__ void g4_linear_##NAME(const T* x, const T* w, T* y, int m, int n, int k,         \
                                                int cols_per_warp) {                                        \
        linear<T>(x, w, y, m, n, k, cols_per_warp);                                                         \
    }
G4_FOR_FLOAT_TYPES(G4_LINEAR)
