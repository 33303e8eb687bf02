// rope: rotate-half (NeoX) over the whole head; x [B, S, heads, D] contiguous, cos/sin f32
// [S, D/2]. cos/sin are rounded to T first, as the reference casts them to the activation dtype.
#include "g4_compat.cuh"

#define G4_ROPE(NAME, T)                                                                                   \
    extern "C" __global__ void g4_rope_##NAME(const T* x, const float* cos, const float* sin, T* out,     \
                                              size_t batch_seq_heads, int seq, int heads, int d) {          \
        G4_KERNEL_START();                                                                                 \
        const int half = d / 2;                                                                            \
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < batch_seq_heads * half;          \
             i += (size_t)gridDim.x * blockDim.x) {                                                       \
            const size_t row = i / half;                                                                   \
            const int j = i % half;                                                                        \
            const int s = (row / heads) % seq;                                                             \
            const float c = g4_round<T>(cos[s * half + j]), sn = g4_round<T>(sin[s * half + j]);           \
            const float a = g4_to_f32(x[row * d + j]), b = g4_to_f32(x[row * d + j + half]);                \
            out[row * d + j] = g4_from_f32<T>(g4_round<T>(a * c) - g4_round<T>(b * sn));                    \
            out[row * d + j + half] = g4_from_f32<T>(g4_round<T>(b * c) + g4_round<T>(a * sn));             \
        }                                                                                                  \
    }
G4_FOR_FLOAT_TYPES(G4_ROPE)
