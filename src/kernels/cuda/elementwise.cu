// gelu_mul, gelu_and_mul, softcap: grid-stride elementwise kernels. GELU is the tanh
// approximation; its result is rounded to T before the product, as in the composed arm.
// gelu_and_mul indexes in 32 bits (the host sends larger tensors elsewhere): a 64-bit division
// per element made it instruction-bound, at a third of HBM bandwidth on a 512-token prefill.
// Where rows allow it (`_vec`), a thread takes 16 bytes of gate and of up at once: one index
// division and three memory instructions per vector instead of per element.
#include "g4_compat.cuh"

// packed [rows, 2d] = [gate ‖ up] → out [rows, d], VEC consecutive outputs per thread (d % VEC == 0).
template <typename T, int VEC>
__device__ void gelu_and_mul(const T* packed, T* out, unsigned rows, unsigned d) {
    const unsigned per_row = d / VEC;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * per_row; i += gridDim.x * blockDim.x) {
        const unsigned r = i / per_row, j = (i - r * per_row) * VEC;
        const T* gate_at = packed + r * 2 * d + j;
        const Pack<T, VEC> gate = *reinterpret_cast<const Pack<T, VEC>*>(gate_at);
        const Pack<T, VEC> up = *reinterpret_cast<const Pack<T, VEC>*>(gate_at + d);
        Pack<T, VEC> result;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const float g = g4_round<T>(g4_gelu_tanh(g4_to_f32(gate.v[e])));
            result.v[e] = g4_from_f32<T>(g * g4_to_f32(up.v[e]));
        }
        *reinterpret_cast<Pack<T, VEC>*>(out + r * d + j) = result;
    }
}

#define G4_GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

#define G4_ELEMENTWISE(NAME, T)                                                                            \
    extern "C" __global__ void g4_gelu_mul_##NAME(const T* gate, const T* up, T* out, size_t n) {        \
        G4_KERNEL_START();                                                                                 \
        G4_GRID_STRIDE(i, n) {                                                                             \
            out[i] = g4_from_f32<T>(g4_round<T>(g4_gelu_tanh(g4_to_f32(gate[i]))) * g4_to_f32(up[i]));       \
        }                                                                                                  \
    }                                                                                                      \
    extern "C" __global__ void g4_gelu_and_mul_##NAME(const T* packed, T* out, unsigned rows, unsigned d) { \
        G4_KERNEL_START();                                                                                    \
        gelu_and_mul<T, 1>(packed, out, rows, d);                                                            \
    }                                                                                                        \
    extern "C" __global__ void g4_gelu_and_mul_vec_##NAME(const T* packed, T* out, unsigned rows, unsigned d) { \
        G4_KERNEL_START();                                                                                        \
        gelu_and_mul<T, 16 / sizeof(T)>(packed, out, rows, d);                                                   \
    }                                                                                                            \
    extern "C" __global__ void g4_softcap_##NAME(const T* x, T* out, size_t n, float cap) {              \
        G4_KERNEL_START();                                                                               \
        G4_GRID_STRIDE(i, n) { out[i] = g4_from_f32<T>(cap * tanhf(g4_to_f32(x[i]) / cap)); }            \
    }
G4_FOR_FLOAT_TYPES(G4_ELEMENTWISE)

// gather_rows_mapped: out[i] = table[ids[i]], whole rows of `row_vecs` 16-byte vectors, the table
// in page-locked host memory mapped for the device: the GPU reads a prompt's per-layer rows in
// place, and the host gathers nothing. One block per row.
extern "C" __global__ void g4_gather_rows_mapped(const uint4* table, const unsigned* ids, uint4* out,
                                                 unsigned row_vecs) {
    G4_KERNEL_START();
    const uint4* row = table + (size_t)ids[blockIdx.x] * row_vecs;
    uint4* dst = out + (size_t)blockIdx.x * row_vecs;
    for (unsigned v = threadIdx.x; v < row_vecs; v += blockDim.x) {
        dst[v] = row[v];
    }
}

// The same for a table or rows not aligned to 16 bytes (a safetensors tensor starts where the
// one before it ended): 2-byte units.
extern "C" __global__ void g4_gather_rows_mapped_u16(const unsigned short* table, const unsigned* ids,
                                                     unsigned short* out, unsigned row_units) {
    G4_KERNEL_START();
    const unsigned short* row = table + (size_t)ids[blockIdx.x] * row_units;
    unsigned short* dst = out + (size_t)blockIdx.x * row_units;
    for (unsigned v = threadIdx.x; v < row_units; v += blockDim.x) {
        dst[v] = row[v];
    }
}
