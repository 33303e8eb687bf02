// dequant_fp8_channel and matmul_bt_fp8_channel over e4m3 weights with one f32 scale per row.
// The e4m3 decode is written out (sign, 4-bit exponent with bias 7, 3-bit mantissa,
// S.1111.111 = NaN) so no vendor FP8 header is needed.
#include "g4_compat.cuh"
#include "gemv.cuh"

__device__ __forceinline__ float e4m3_to_f32(uint8_t bits) {
    const float sign = (bits & 0x80) ? -1.0f : 1.0f;
    const int exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
    if (exponent == 0xF && mantissa == 0x7) return __int_as_float(0x7fc00000);
    if (exponent == 0) return sign * ldexpf((float)mantissa, -9);
    return sign * ldexpf(1.0f + mantissa / 8.0f, exponent - 7);
}

// dequant_fp8_channel: W = f32(W_e4m3) × scale[row], cast to T. Rows of whole 16-byte vectors
// are read 16 weights per load and decoded in registers (e4m3 / unit × (scale × unit) is the
// same product, rounded once: see e4m3.cuh); each thread first issues G4_DEQUANT_LOADS
// independent loads, since a single one per thread leaves too few bytes in flight to reach HBM's
// rate. Other widths go one weight at a time.
#define G4_DEQUANT_LOADS 4
template <typename T>
__device__ void dequant_fp8_channel(const uint8_t* w, const float* scale, T* out, size_t rows, size_t cols) {
    const size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    const size_t groups = rows * cols / 16;
    if (cols % 16 == 0 && ((uintptr_t)w % 16) == 0 && groups < (1ull << 32)) {
        const unsigned groups_per_row = (unsigned)(cols / 16);
        for (size_t start = first; start < groups; start += stride * G4_DEQUANT_LOADS) {
            uint4 bytes[G4_DEQUANT_LOADS];
#pragma unroll
            for (int j = 0; j < G4_DEQUANT_LOADS; ++j) {
                const size_t g = start + j * stride;
                bytes[j] = g < groups ? reinterpret_cast<const uint4*>(w)[g] : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < G4_DEQUANT_LOADS; ++j) {
                const unsigned g = (unsigned)(start + j * stride);
                if (g >= groups) break;
                float v[16];
                e4m3x16_to_f32_over_unit(bytes[j], v);
                const float s = scale[g / groups_per_row] * G4_E4M3_UNIT;
                __align__(16) T values[16];
#pragma unroll
                for (int e = 0; e < 16; ++e) values[e] = g4_from_f32<T>(v[e] * s);
#pragma unroll
                for (int q = 0; q < (int)sizeof(T); ++q) {
                    reinterpret_cast<uint4*>(out + (size_t)g * 16)[q] = reinterpret_cast<const uint4*>(values)[q];
                }
            }
        }
        return;
    }
    for (size_t i = first; i < rows * cols; i += stride) out[i] = g4_from_f32<T>(e4m3_to_f32(w[i]) * scale[i / cols]);
}

#define G4_FP8(NAME, T)                                                                                    \
    extern "C" __global__ void g4_dequant_fp8_channel_##NAME(const uint8_t* w, const float* scale, T* out, \
                                                             size_t rows, size_t cols) {                   \
        G4_KERNEL_START();                                                                                 \
        dequant_fp8_channel<T>(w, scale, out, rows, cols);                                                 \
    }
G4_FOR_FLOAT_TYPES(G4_FP8)

// matmul_bt_fp8_channel for a few rows of X (decode): Y[m, n] = scale[n] · Σ_k X[m, k]·e4m3(W[n, k]),
// gemv.cuh's GEMV with e4m3 weights decoded in registers and the row scale (times the decode's
// G4_E4M3_UNIT) applied to each f32 sum once. The weights are never materialised in T, so decode
// reads half of bf16's bytes. (Measured on E4B, H200: two columns per warp sharing each X
// conversion, or the next batch loaded before this one is used, were no faster; a one-row variant
// was, 180 → 209 tok/s; 16 loads per lane instead of 8 were slower, 232 → 207.)
//
// One entry point for decode's single row and one for up to G4_GEMV_MAX_ROWS.
#define G4_FP8_MATMUL(NAME, T)                                                                                           \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_matmul_bt_fp8_channel_##NAME(const T* x, const uint8_t* w,              \
                                                                              const float* scale, T* y, int m, int n,    \
                                                                              int k, int warps_per_col) {                \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                      \
        gemv<T, E4m3Weights, G4_GEMV_MAX_ROWS>(x, w, scale, y, m, n, k, warps_per_col);                                  \
    }                                                                                                                    \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_matmul_bt_fp8_channel_one_row_##NAME(const T* x, const uint8_t* w,      \
                                                                                      const float* scale, T* y, int m,   \
                                                                                      int n, int k, int warps_per_col) { \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                      \
        gemv<T, E4m3Weights, 1>(x, w, scale, y, m, n, k, warps_per_col);                                                 \
    }
G4_FOR_FLOAT_TYPES(G4_FP8_MATMUL)

// round_rows_e4m3: each row of x rounded to e4m3 on its own scale (max|x| / 448) and scaled back,
// every step rounded to T as compressed-tensors rounds it in the activations' dtype: an FP8_DYNAMIC
// checkpoint's projection input. One block per row; the rounding is e4m3.cuh's.
template <typename T>
__device__ void round_rows_e4m3(const T* x, T* out, int cols) {
    const T* row = x + (size_t)blockIdx.x * cols;
    const float scale = e4m3_row_scale(row, cols);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        out[(size_t)blockIdx.x * cols + c] = g4_from_f32<T>(e4m3_of(row[c], scale) * scale);
    }
}

// The same rounding, kept as e4m3 bits and one f32 scale per row: the X of an FP8 tensor-core
// GEMM whose outer-vector scales bring back what round_rows_e4m3 would have multiplied in.
template <typename T>
__device__ void quantize_rows_e4m3(const T* x, uint8_t* q, float* scales, int cols) {
    const T* row = x + (size_t)blockIdx.x * cols;
    const float scale = e4m3_row_scale(row, cols);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        q[(size_t)blockIdx.x * cols + c] = g4_e4m3_bits(e4m3_of(row[c], scale));
    }
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

#define G4_ROUND_ROWS_E4M3(NAME, T)                                                                            \
    extern "C" __global__ void g4_round_rows_e4m3_##NAME(const T* x, T* out, int cols) {                       \
        G4_KERNEL_START();                                                                                     \
        round_rows_e4m3<T>(x, out, cols);                                                                      \
    }                                                                                                          \
    extern "C" __global__ void g4_quantize_rows_e4m3_##NAME(const T* x, uint8_t* q, float* scales, int cols) { \
        G4_KERNEL_START();                                                                                     \
        quantize_rows_e4m3<T>(x, q, scales, cols);                                                             \
    }
G4_FOR_FLOAT_TYPES(G4_ROUND_ROWS_E4M3)
