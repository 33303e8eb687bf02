// dequant_fp8_channel and matmul_bt_fp8_channel over e4m3 weights with one f32 scale per row.
// The e4m3 decode is written out (sign, 4-bit exponent with bias 7, 3-bit mantissa,
// S.1111.111 = NaN) so no vendor FP8 header is needed.
#include "g4_compat.cuh"
#include "e4m3.cuh"

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
        dequant_fp8_channel<T>(w, scale, out, rows, cols);                                                 \
    }
G4_FOR_FLOAT_TYPES(G4_FP8)


// matmul_bt_fp8_channel for a few rows of X (decode): Y[m, n] = scale[n] · Σ_k X[m, k]·e4m3(W[n, k]).
// linear.cu's GEMV with e4m3 weights: warps_per_col warps split each column's K, every lane issues
// a batch of independent 16-byte loads (16 weights each) before decoding them in registers, and
// the row scale (times the decode's G4_E4M3_UNIT) multiplies the f32 sum once. The weights are
// never materialised in T, so decode reads half of bf16's bytes. (Measured on E4B, H200: two
// columns per warp sharing each X conversion, or the next batch loaded before this one is used,
// were no faster; a one-row variant was, 180 → 209 tok/s; 16 loads per lane instead of 8 were
// slower, 232 → 207.)
#define G4_FP8_MAX_ROWS 8
#define G4_FP8_BATCH 8
#define G4_FP8_MAX_WARPS 32

template <typename T, int MAX_ROWS>
__device__ void linear_fp8(const T* x, const uint8_t* w, const float* scale, T* y, int m, int n, int k,
                           int warps_per_col) {
    constexpr int weights_per_vector = 16, x_per_vector = 16 / sizeof(T);
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int cols_per_block = blockDim.x / warp_size / warps_per_col;
    const int col = blockIdx.x * cols_per_block + warp / warps_per_col;
    const int part = warp % warps_per_col;
    const int vectors = k / weights_per_vector;
    const int step = warp_size * warps_per_col;
    float sum[MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) sum[r] = 0.0f;
    if (col < n) {
        const uint4* w_col = reinterpret_cast<const uint4*>(w + (size_t)col * k);
        for (int base = part * warp_size + lane; base < vectors; base += step * G4_FP8_BATCH) {
            uint4 batch[G4_FP8_BATCH];
#pragma unroll
            for (int u = 0; u < G4_FP8_BATCH; ++u) {
                const int i = base + u * step;
                batch[u] = i < vectors ? w_col[i] : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < G4_FP8_BATCH; ++u) {
                const int i = base + u * step;
                if (i >= vectors) break;
                float wf[weights_per_vector];
                e4m3x16_to_f32_over_unit(batch[u], wf);
#pragma unroll
                for (int r = 0; r < MAX_ROWS; ++r) {
                    if (r >= m) break;
                    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)r * k + (size_t)i * weights_per_vector);
#pragma unroll
                    for (int q = 0; q < weights_per_vector / x_per_vector; ++q) {
                        const uint4 xv = xr[q];
                        const T* xt = reinterpret_cast<const T*>(&xv);
#pragma unroll
                        for (int e = 0; e < x_per_vector; ++e) sum[r] += g4_to_f32(xt[e]) * wf[q * x_per_vector + e];
                    }
                }
            }
        }
    }
    __shared__ float partial[G4_FP8_MAX_WARPS][MAX_ROWS];
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
        y[(size_t)lane * n + col] = g4_from_f32<T>(total * (scale[col] * G4_E4M3_UNIT));
    }
}

// One entry point for decode's single row (fewer registers, more warps in flight) and one for up
// to G4_FP8_MAX_ROWS.
#define G4_FP8_MATMUL(NAME, T)                                                                              \
    extern "C" __global__ void g4_matmul_bt_fp8_channel_##NAME(const T* x, const uint8_t* w,               \
                                                               const float* scale, T* y, int m, int n,      \
                                                               int k, int warps_per_col) {                  \
        linear_fp8<T, G4_FP8_MAX_ROWS>(x, w, scale, y, m, n, k, warps_per_col);                             \
    }                                                                                                       \
    extern "C" __global__ void g4_matmul_bt_fp8_channel_one_row_##NAME(const T* x, const uint8_t* w,       \
                                                                       const float* scale, T* y, int m,     \
                                                                       int n, int k, int warps_per_col) {   \
        linear_fp8<T, 1>(x, w, scale, y, m, n, k, warps_per_col);                                           \
    }
G4_FOR_FLOAT_TYPES(G4_FP8_MATMUL)
