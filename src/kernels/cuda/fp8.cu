// dequant_fp8_channel and matmul_bt_fp8_channel over e4m3 weights with one f32 scale per row.
// The e4m3 decode is written out (sign, 4-bit exponent with bias 7, 3-bit mantissa,
// S.1111.111 = NaN) so no vendor FP8 header is needed.
#include "g4_compat.cuh"

__device__ __forceinline__ float e4m3_to_f32(uint8_t bits) {
    const float sign = (bits & 0x80) ? -1.0f : 1.0f;
    const int exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
    if (exponent == 0xF && mantissa == 0x7) return __int_as_float(0x7fc00000);
    if (exponent == 0) return sign * ldexpf((float)mantissa, -9);
    return sign * ldexpf(1.0f + mantissa / 8.0f, exponent - 7);
}

// dequant_fp8_channel: W = f32(W_e4m3) x scale[row], cast to T.
#define G4_FP8(NAME, T)                                                                                    \
    extern "C" __global__ void g4_dequant_fp8_channel_##NAME(const uint8_t* w, const float* scale, T* out, \
                                                             size_t rows, size_t cols) {                   \
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols;                     \
             i += (size_t)gridDim.x * blockDim.x) {                                                       \
            out[i] = g4_from_f32<T>(e4m3_to_f32(w[i]) * scale[i / cols]);                                  \
        }                                                                                                  \
    }
G4_FOR_FLOAT_TYPES(G4_FP8)

// matmul_bt_fp8_channel: Y[m, n] = Σ_k X[m, k] · e4m3(W[n, k]) · scale[n], one warp per output,
// decoding the weights on the fly (never materialised in T): the decode-time GEMV of an FP8
// checkpoint.
#define G4_FP8_MATMUL(NAME, T)                                                                             \
    extern "C" __global__ void g4_matmul_bt_fp8_channel_##NAME(const T* x, const uint8_t* w,              \
                                                               const float* scale, T* y, int m, int n,     \
                                                               int k) {                                    \
        const int warp_size = warpSize;                                                                    \
        const size_t output = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / warp_size;                 \
        const int lane = threadIdx.x % warp_size;                                                          \
        if (output >= (size_t)m * n) return;                                                               \
        const size_t row = output / n, col = output % n;                                                   \
        float acc = 0.0f;                                                                                  \
        for (int j = lane; j < k; j += warp_size) {                                                        \
            acc += g4_to_f32(x[row * k + j]) * e4m3_to_f32(w[col * k + j]);                                \
        }                                                                                                  \
        for (int mask = warp_size / 2; mask > 0; mask >>= 1) acc += G4_SHFL_XOR(acc, mask);               \
        if (lane == 0) y[output] = g4_from_f32<T>(acc * scale[col]);                                       \
    }
G4_FOR_FLOAT_TYPES(G4_FP8_MATMUL)
