// linear_gelu_mul: Y[m, d] = gelu_tanh(X·W_gateᵀ) ⊙ U for a few rows of X (decode), U the packed up
// half of W or a given tensor: gemv.cuh's gemv_gelu_mul with dense weights (stored as T) or e4m3
// weights with one f32 scale per row. One launch where a GEMV and an elementwise kernel were.
#include "gemv.cuh"

// Per weight format: one entry point for up to G4_GEMV_MAX_ROWS rows and one or more for decode's
// single row: dense weights `linear`'s (plain, narrow and long K, for the same shapes), e4m3
// weights matmul_bt_fp8_channel's two (gemv_columns_gelu_mul with 2 or 4 weight rows per warp
// group, picked per K as there; fp8_gemv_bench, H100, stop 49, µs: E4B gate/up 25.50 with a
// group per output, 23.86 with 2 rows, 27.14 with 4).
// Dense single-row blocks hold an output's gate and up warps (8 warps at E4B's and 31B's widths),
// and at a batch of 8 loads (56 registers) only 4 such blocks fit a multiprocessor: 32 warps in
// flight where linear's 4-warp blocks keep 36. A batch of 6 (48 registers, 5 blocks) is all a
// lane of those rows loads anyway (E4B 5, 31B 5–6 vectors): 31B's gate/up 121.9 → 110.6 µs,
// E4B's 29.6 → 28.6 (scripts/kernel-bench/gemv_bench). The batch does not change the sums' order.
#define G4_GEMV_PAIR_BATCH 6
#define G4_LINEAR_GELU_MUL(NAME, T)                                                                                        \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_gelu_mul_##NAME(const T* x, const T* w, const T* up, T* y, int m,  \
                                                                        int d, int k, int warps_per_col) {                 \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, DenseWeights<T>, G4_GEMV_MAX_ROWS>(x, w, nullptr, up, y, m, d, k, warps_per_col);                 \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_gelu_mul_one_row_##NAME(const T* x, const T* w, const T* up, T* y, \
                                                                                int m, int d, int k, int warps_per_col) {  \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, DenseWeights<T>, 1, G4_GEMV_PAIR_BATCH>(x, w, nullptr, up, y, m, d, k, warps_per_col);            \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_gelu_mul_one_row_narrow_##NAME(                                    \
        const T* x, const T* w, const T* up, T* y, int m, int d, int k, int warps_per_col) {                               \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, DenseWeights<T>, 1, G4_GEMV_NARROW_BATCH>(x, w, nullptr, up, y, m, d, k,                          \
                                                                   warps_per_col);                                         \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_gelu_mul_one_row_long_##NAME(                                      \
        const T* x, const T* w, const T* up, T* y, int m, int d, int k, int warps_per_col) {                               \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, DenseWeights<T>, 1, G4_GEMV_LONG_BATCH>(x, w, nullptr, up, y, m, d, k, warps_per_col);            \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_fp8_gelu_mul_##NAME(const T* x, const uint8_t* w, const float* scale,     \
                                                                     const T* up, T* y, int m, int d, int k,               \
                                                                     int warps_per_col) {                                  \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, E4m3Weights, G4_GEMV_MAX_ROWS>(x, w, scale, up, y, m, d, k, warps_per_col);                       \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_fp8_gelu_mul_one_row_cols2_##NAME(                                        \
        const T* x, const uint8_t* w, const float* scale, const T* up, T* y, int m, int d, int k, int warps_per_col) {     \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_columns_gelu_mul<T, E4m3Weights, G4_FP8_COLS2>(x, w, scale, up, y, d, k, warps_per_col);                      \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_fp8_gelu_mul_one_row_cols4_##NAME(                                        \
        const T* x, const uint8_t* w, const float* scale, const T* up, T* y, int m, int d, int k, int warps_per_col) {     \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_columns_gelu_mul<T, E4m3Weights, G4_FP8_COLS4>(x, w, scale, up, y, d, k, warps_per_col);                      \
    }
G4_FOR_FLOAT_TYPES(G4_LINEAR_GELU_MUL)
