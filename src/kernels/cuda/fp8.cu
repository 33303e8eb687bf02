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

// dequant_fp8_channel: W = f32(W_e4m3) × scale[row], cast to T. Rows of whole 8-byte pieces are
// read 8 weights per load and decoded in registers (e4m3 / unit × (scale × unit) is the same
// product, rounded once: see e4m3.cuh), so that a warp's loads read 256 contiguous bytes and,
// for 16-bit T, its stores write 512 (16 weights a thread stored in two 16-byte halves filled
// half of each 32-byte sector per store instruction); each thread first issues G4_DEQUANT_LOADS
// independent loads, since a single one per thread leaves too few bytes in flight to reach
// HBM's rate (H100, E4B gate/up: 56.7 µs at 4 loads, 61.8 at 8, 75.8 for 16 weights a load).
// Other widths go one weight at a time.
#define G4_DEQUANT_LOADS 4
template <typename T>
__device__ void dequant_fp8_channel(const uint8_t* w, const float* scale, T* out, size_t rows, size_t cols) {
    const size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    const size_t pieces = rows * cols / 8;
    if (cols % 8 == 0 && ((uintptr_t)w % 8) == 0 && pieces < (1ull << 32)) {
        const unsigned pieces_per_row = (unsigned)(cols / 8);
        for (size_t start = first; start < pieces; start += stride * G4_DEQUANT_LOADS) {
            uint2 bytes[G4_DEQUANT_LOADS];
#pragma unroll
            for (int j = 0; j < G4_DEQUANT_LOADS; ++j) {
                const size_t p = start + j * stride;
                bytes[j] = p < pieces ? reinterpret_cast<const uint2*>(w)[p] : make_uint2(0, 0);
            }
#pragma unroll
            for (int j = 0; j < G4_DEQUANT_LOADS; ++j) {
                const unsigned p = (unsigned)(start + j * stride);
                if (p >= pieces) break;
                float v[8];
                e4m3x4_to_f32_over_unit(bytes[j].x, v);
                e4m3x4_to_f32_over_unit(bytes[j].y, v + 4);
                const float s = scale[p / pieces_per_row] * G4_E4M3_UNIT;
                __align__(16) T values[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) values[e] = g4_from_f32<T>(v[e] * s);
                // 8 values of T: one 16-byte store for 16-bit T, two for f32.
#pragma unroll
                for (int q = 0; q < (int)sizeof(T) / 2; ++q) {
                    reinterpret_cast<uint4*>(out + (size_t)p * 8)[q] = reinterpret_cast<const uint4*>(values)[q];
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
// reads half of bf16's bytes. (Measured on E4B, H200: the next batch loaded before this one is
// used was no faster; a one-row variant was, 180 → 209 tok/s; 16 loads per lane instead of 8
// were slower, 232 → 207.)
//
// One entry point for up to G4_GEMV_MAX_ROWS, and two for decode's single row (gemv.cuh's
// gemv_columns, chosen by the host per K): `_one_row_cols2`, 2 weight rows per warp group with 4
// loads of each in flight, and `_one_row_cols4`, 4 rows with 2 loads each, which wins over a long
// K (fp8_gemv_bench, µs, H100, stop 49: E4B q/k/v 5.55 against 5.64, gate/up 21.97 against 23.84;
// E4B down, K = 10,240, 13.45 against 11.46).
#define G4_FP8_MATMUL(NAME, T)                                                                                           \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_matmul_bt_fp8_channel_##NAME(const T* x, const uint8_t* w,              \
                                                                              const float* scale, T* y, int m, int n,    \
                                                                              int k, int warps_per_col) {                \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                      \
        gemv<T, E4m3Weights, G4_GEMV_MAX_ROWS>(x, w, scale, y, m, n, k, warps_per_col);                                  \
    }                                                                                                                    \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_matmul_bt_fp8_channel_one_row_cols2_##NAME(                             \
        const T* x, const uint8_t* w, const float* scale, T* y, int m, int n, int k, int warps_per_col) {                \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                      \
        gemv_columns<T, E4m3Weights, G4_FP8_COLS2>(x, w, scale, y, n, k, warps_per_col);                                 \
    }                                                                                                                    \
    extern "C" __global__ void G4_GEMV_BOUNDS g4_matmul_bt_fp8_channel_one_row_cols4_##NAME(                             \
        const T* x, const uint8_t* w, const float* scale, T* y, int m, int n, int k, int warps_per_col) {                \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                      \
        gemv_columns<T, E4m3Weights, G4_FP8_COLS4>(x, w, scale, y, n, k, warps_per_col);                                 \
    }
G4_FOR_FLOAT_TYPES(G4_FP8_MATMUL)

// round_rows_e4m3: each row of x rounded to e4m3 on its own scale (max|x| / 448) and scaled back,
// every step rounded to T as compressed-tensors rounds it in the activations' dtype: an FP8_DYNAMIC
// checkpoint's projection input; the rounding of each value is e4m3.cuh's.
//
// One block rounds row `blockIdx.x` of x: its scale (the block's reduction of max|x|), then the
// e4m3 bits and values of a 16-byte vector of x at a time, `store_vector(column, bits, values,
// scale)`, or of one value, `store_one(column, bits, value, scale)`. Rows of whole 16-byte vectors on 16-byte boundaries are read a vector per load
// (one scalar load per value left too few bytes in flight: stop 47); others a value at a time.
// Returns the scale.
template <typename T, typename StoreVector, typename StoreOne>
__device__ float round_row_e4m3(const T* x, int cols, StoreVector store_vector, StoreOne store_one) {
    constexpr int per_vector = 16 / sizeof(T);
    const T* row = x + (size_t)blockIdx.x * cols;
    const bool vectors = cols % per_vector == 0 && (uintptr_t)row % 16 == 0;
    float absmax = 0.0f;
    if (vectors) {
        for (int v = threadIdx.x; v < cols / per_vector; v += blockDim.x) {
            const uint4 q = reinterpret_cast<const uint4*>(row)[v];
            const T* t = reinterpret_cast<const T*>(&q);
#pragma unroll
            for (int e = 0; e < per_vector; ++e) absmax = fmaxf(absmax, fabsf(g4_to_f32(t[e])));
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) absmax = fmaxf(absmax, fabsf(g4_to_f32(row[c])));
    }
    const float scale = e4m3_scale_of<T>(g4_block_max(absmax));
    if (vectors) {
        for (int v = threadIdx.x; v < cols / per_vector; v += blockDim.x) {
            const uint4 q = reinterpret_cast<const uint4*>(row)[v];
            const T* t = reinterpret_cast<const T*>(&q);
            __align__(8) uint16_t bits[per_vector / 2];
            float values[per_vector];
#pragma unroll
            for (int e = 0; e < per_vector; e += 2) {
                bits[e / 2] = e4m3_pair(e4m3_input<T>(g4_to_f32(t[e]), scale), e4m3_input<T>(g4_to_f32(t[e + 1]), scale), values[e],
                                        values[e + 1]);
            }
            store_vector(v * per_vector, bits, values, scale);
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            float value, unused;
            const uint16_t bits = e4m3_pair(e4m3_input<T>(g4_to_f32(row[c]), scale), 0.0f, value, unused);
            store_one(c, (uint8_t)(bits & 0xff), value, scale);
        }
    }
    return scale;
}

template <typename T>
__device__ void round_rows_e4m3(const T* x, T* out, int cols) {
    constexpr int per_vector = 16 / sizeof(T);
    T* out_row = out + (size_t)blockIdx.x * cols;
    round_row_e4m3<T>(
        x, cols,
        [&](int column, const uint16_t*, const float* values, float scale) {
            uint4 rounded;
            T* r = reinterpret_cast<T*>(&rounded);
#pragma unroll
            for (int e = 0; e < per_vector; ++e) r[e] = g4_from_f32<T>(values[e] * scale);
            *reinterpret_cast<uint4*>(out_row + column) = rounded;
        },
        [&](int column, uint8_t, float value, float scale) { out_row[column] = g4_from_f32<T>(value * scale); });
}

// The same rounding, kept as e4m3 bits and one f32 scale per row: the X of an FP8 tensor-core
// GEMM whose outer-vector scales bring back what round_rows_e4m3 would have multiplied in.
template <typename T>
__device__ void quantize_rows_e4m3(const T* x, uint8_t* q, float* scales, int cols) {
    constexpr int per_vector = 16 / sizeof(T);
    uint8_t* q_row = q + (size_t)blockIdx.x * cols;
    const float scale = round_row_e4m3<T>(
        x, cols,
        // A vector's bytes (8 of bf16 or f16, 4 of f32) in one store: cols is a multiple of
        // per_vector on this path, so they are aligned to their size.
        [&](int column, const uint16_t* bits, const float*, float) {
            if constexpr (per_vector == 8) {
                *reinterpret_cast<uint2*>(q_row + column) = *reinterpret_cast<const uint2*>(bits);
            } else {
                *reinterpret_cast<uint32_t*>(q_row + column) = *reinterpret_cast<const uint32_t*>(bits);
            }
        },
        [&](int column, uint8_t bits, float, float) { q_row[column] = bits; });
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
