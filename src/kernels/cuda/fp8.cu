// dequant_fp8_channel: W = f32(W_e4m3) x scale[row], cast to T. The e4m3 decode is written out
// (sign, 4-bit exponent with bias 7, 3-bit mantissa, S.1111.111 = NaN) so no vendor FP8 header
// is needed.
#include "g4_compat.cuh"

__device__ __forceinline__ float e4m3_to_f32(uint8_t bits) {
    const float sign = (bits & 0x80) ? -1.0f : 1.0f;
    const int exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
    if (exponent == 0xF && mantissa == 0x7) return __int_as_float(0x7fc00000);
    if (exponent == 0) return sign * ldexpf((float)mantissa, -9);
    return sign * ldexpf(1.0f + mantissa / 8.0f, exponent - 7);
}

#define G4_FP8(NAME, T)                                                                                    \
    extern "C" __global__ void g4_dequant_fp8_channel_##NAME(const uint8_t* w, const float* scale, T* out, \
                                                             size_t rows, size_t cols) {                   \
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols;                     \
             i += (size_t)gridDim.x * blockDim.x) {                                                       \
            out[i] = g4_from_f32<T>(e4m3_to_f32(w[i]) * scale[i / cols]);                                  \
        }                                                                                                  \
    }
G4_FOR_FLOAT_TYPES(G4_FP8)
