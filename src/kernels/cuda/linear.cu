// linear: Y[m, n] = Σ_k X[m, k]·W[n, k] for a few rows of X (decode), W stored as T: gemv.cuh's
// GEMV with dense weights.
#include "gemv.cuh"

// One entry point for decode's single row (and two for its narrow projections: a short and a long
// K), one for up to G4_GEMV_MAX_ROWS.
#define G4_LINEAR(NAME, T)                                                                                                \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_##NAME(const T* x, const T* w, T* y, int m, int n, int k,         \
                                                               int warps_per_col) {                                       \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                       \
        gemv<T, DenseWeights<T>, G4_GEMV_MAX_ROWS>(x, w, nullptr, y, m, n, k, warps_per_col);                             \
    }                                                                                                                     \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_one_row_##NAME(const T* x, const T* w, T* y, int m, int n, int k, \
                                                                       int warps_per_col) {                               \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                       \
        gemv<T, DenseWeights<T>, 1>(x, w, nullptr, y, m, n, k, warps_per_col);                                            \
    }                                                                                                                     \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_one_row_narrow_##NAME(const T* x, const T* w, T* y, int m, int n, \
                                                                              int k, int warps_per_col) {                 \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                       \
        gemv<T, DenseWeights<T>, 1, G4_GEMV_NARROW_BATCH>(x, w, nullptr, y, m, n, k, warps_per_col);                      \
    }                                                                                                                     \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_one_row_long_##NAME(const T* x, const T* w, T* y, int m, int n,   \
                                                                            int k, int warps_per_col) {                   \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                       \
        gemv<T, DenseWeights<T>, 1, G4_GEMV_LONG_BATCH>(x, w, nullptr, y, m, n, k, warps_per_col);                        \
    }
G4_FOR_FLOAT_TYPES(G4_LINEAR)
