// argmax: each row's largest value's first index, in two passes — blocks reduce chunks of a row
// to (max, index), then one block per row merges its chunks. Ties go to the smaller index.
#include "g4_compat.cuh"

// Keeps the better of (value, index) and (other_value, other_index) in the first pair.
__device__ __forceinline__ void g4_better(float& value, unsigned& index, float other_value, unsigned other_index) {
    if (other_value > value || (other_value == value && other_index < index)) {
        value = other_value;
        index = other_index;
    }
}

// Block-wide (max, first index); every thread gets the result.
__device__ void g4_block_argmax(float& value, unsigned& index) {
    __shared__ float values[32];
    __shared__ unsigned indices[32];
    const int warp_size = warpSize;
    for (int bits = warp_size / 2; bits > 0; bits >>= 1) {
        g4_better(value, index, G4_SHFL_XOR(value, bits), G4_SHFL_XOR(index, bits));
    }
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    if (lane == 0) {
        values[warp] = value;
        indices[warp] = index;
    }
    __syncthreads();
    const int warps = (blockDim.x + warp_size - 1) / warp_size;
    for (int w = 0; w < warps; ++w) g4_better(value, index, values[w], indices[w]);
}

template <typename T>
__device__ void argmax_chunks(const T* x, float* partial_values, unsigned* partial_indices, int n, int chunk_size,
                              int chunks) {
    const int row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
    const T* values = x + (size_t)row * n;
    const int end = min(n, (chunk + 1) * chunk_size);
    float best = -INFINITY;
    unsigned best_index = 0xffffffffu;
    for (int i = chunk * chunk_size + threadIdx.x; i < end; i += blockDim.x) {
        g4_better(best, best_index, g4_to_f32(values[i]), (unsigned)i);
    }
    g4_block_argmax(best, best_index);
    if (threadIdx.x == 0) {
        partial_values[blockIdx.x] = best;
        partial_indices[blockIdx.x] = best_index;
    }
}

extern "C" __global__ void g4_argmax_merge(const float* partial_values, const unsigned* partial_indices,
                                           unsigned* out, int chunks) {
    G4_KERNEL_START();
    const int row = blockIdx.x;
    float best = -INFINITY;
    unsigned best_index = 0xffffffffu;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        g4_better(best, best_index, partial_values[row * chunks + c], partial_indices[row * chunks + c]);
    }
    g4_block_argmax(best, best_index);
    if (threadIdx.x == 0) out[row] = best_index;
}

#define G4_ARGMAX(NAME, T)                                                                                  \
    extern "C" __global__ void g4_argmax_chunks_##NAME(const T* x, float* partial_values,                  \
                                                        unsigned* partial_indices, int n, int chunk_size,    \
                                                        int chunks) {                                        \
        G4_KERNEL_START();                                                                                  \
        argmax_chunks<T>(x, partial_values, partial_indices, n, chunk_size, chunks);                        \
    }
// Logits are f32.
G4_ARGMAX(f32, float)
