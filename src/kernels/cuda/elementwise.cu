// gelu_mul, gelu_and_mul, softcap: grid-stride elementwise kernels. GELU is the tanh
// approximation; its result is rounded to T before the product, as in the composed arm.
#include "g4_compat.cuh"

#define G4_GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

#define G4_ELEMENTWISE(NAME, T)                                                                            \
    extern "C" __global__ void g4_gelu_mul_##NAME(const T* gate, const T* up, T* out, size_t n) {        \
        G4_GRID_STRIDE(i, n) {                                                                             \
            out[i] = g4_from_f32<T>(g4_round<T>(g4_gelu_tanh(g4_to_f32(gate[i]))) * g4_to_f32(up[i]));       \
        }                                                                                                  \
    }                                                                                                      \
    extern "C" __global__ void g4_gelu_and_mul_##NAME(const T* packed, T* out, size_t rows, size_t d) {  \
        G4_GRID_STRIDE(i, rows * d) {                                                                      \
            const size_t r = i / d, j = i % d;                                                             \
            const float g = g4_round<T>(g4_gelu_tanh(g4_to_f32(packed[r * 2 * d + j])));                     \
            out[i] = g4_from_f32<T>(g * g4_to_f32(packed[r * 2 * d + d + j]));                            \
        }                                                                                                  \
    }                                                                                                      \
    extern "C" __global__ void g4_softcap_##NAME(const T* x, T* out, size_t n, float cap) {              \
        G4_GRID_STRIDE(i, n) { out[i] = g4_from_f32<T>(cap * tanhf(g4_to_f32(x[i]) / cap)); }            \
    }
G4_FOR_FLOAT_TYPES(G4_ELEMENTWISE)
