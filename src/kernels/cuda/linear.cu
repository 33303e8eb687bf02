// linear: Y[m, n] = Σ_k X[m, k]·W[n, k] for a few rows of X (decode), W stored as T: gemv.cuh's
// GEMV with dense weights.
#include "gemv.cuh"

// One entry point for decode's single row and one for up to G4_GEMV_MAX_ROWS.
// Both end by bringing `prefetch_bytes` of `prefetch` (the next weight) into L2.
#define G4_LINEAR(NAME, T)                                                                                 \
    extern "C" __global__ void g4_linear_##NAME(const T* x, const T* w, T* y, int m, int n, int k,         \
                                                int warps_per_col, const void* prefetch,                   \
                                                size_t prefetch_bytes) {                                   \
        gemv<T, DenseWeights<T>, G4_GEMV_MAX_ROWS>(x, w, nullptr, y, m, n, k, warps_per_col, prefetch,     \
                                                   prefetch_bytes);                                        \
    }                                                                                                      \
    extern "C" __global__ void g4_linear_one_row_##NAME(const T* x, const T* w, T* y, int m, int n, int k, \
                                                        int warps_per_col, const void* prefetch,           \
                                                        size_t prefetch_bytes) {                           \
        gemv<T, DenseWeights<T>, 1>(x, w, nullptr, y, m, n, k, warps_per_col, prefetch, prefetch_bytes);   \
    }
G4_FOR_FLOAT_TYPES(G4_LINEAR)
