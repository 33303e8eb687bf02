// linear_gelu_mul: Y[m, d] = gelu_tanh(X·W_gateᵀ) ⊙ U for a few rows of X (decode), U the packed up
// half of W or a given tensor: gemv.cuh's gemv_gelu_mul with dense weights (stored as T) or e4m3
// weights with one f32 scale per row. One launch where a GEMV and an elementwise kernel were.
#include "gemv.cuh"

// Per weight format: one entry point for up to G4_GEMV_MAX_ROWS rows and one for decode's single
// row; dense weights also have the narrow single-row one (`linear`'s, for the same shapes).
#define G4_LINEAR_GELU_MUL(NAME, T)                                                                                        \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_gelu_mul_##NAME(const T* x, const T* w, const T* up, T* y, int m,  \
                                                                        int d, int k, int warps_per_col) {                 \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, DenseWeights<T>, G4_GEMV_MAX_ROWS>(x, w, nullptr, up, y, m, d, k, warps_per_col);                 \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_gelu_mul_one_row_##NAME(const T* x, const T* w, const T* up, T* y, \
                                                                                int m, int d, int k, int warps_per_col) {  \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, DenseWeights<T>, 1>(x, w, nullptr, up, y, m, d, k, warps_per_col);                                \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_linear_gelu_mul_one_row_narrow_##NAME(                                    \
        const T* x, const T* w, const T* up, T* y, int m, int d, int k, int warps_per_col) {                               \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, DenseWeights<T>, 1, G4_GEMV_NARROW_BATCH>(x, w, nullptr, up, y, m, d, k,                          \
                                                                   warps_per_col);                                         \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_fp8_gelu_mul_##NAME(const T* x, const uint8_t* w, const float* scale,     \
                                                                     const T* up, T* y, int m, int d, int k,               \
                                                                     int warps_per_col) {                                  \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, E4m3Weights, G4_GEMV_MAX_ROWS>(x, w, scale, up, y, m, d, k, warps_per_col);                       \
    }                                                                                                                      \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_fp8_gelu_mul_one_row_##NAME(const T* x, const uint8_t* w,                 \
                                                                             const float* scale, const T* up, T* y, int m, \
                                                                             int d, int k, int warps_per_col) {            \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                        \
        gemv_gelu_mul<T, E4m3Weights, 1>(x, w, scale, up, y, m, d, k, warps_per_col);                                      \
    }
G4_FOR_FLOAT_TYPES(G4_LINEAR_GELU_MUL)
