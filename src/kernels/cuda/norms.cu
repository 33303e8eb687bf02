// rms_norm, rms_norm_plus_add, dual_rms_norm_plus_res: one block per row, f32 inside, plain
// (not 1 + w) weight applied before the cast back — the semantics of the ops' composed arms.
// Each thread holds its up to G4_NORM_VALUES elements of the row (and of the weights and the
// residual) in registers, so a kernel reads memory once however many passes it makes over the
// row (the host sizes the block so that cols ≤ G4_NORM_VALUES × blockDim).
#include "g4_compat.cuh"

#define G4_NORM_VALUES 16
#define G4_NORM_MAX_THREADS 512

// Loads this thread's elements of a row (zeros past its end); `row` may be null (ones).
template <typename T>
__device__ __forceinline__ void load_row(const T* row, int cols, float (&v)[G4_NORM_VALUES]) {
#pragma unroll
    for (int i = 0; i < G4_NORM_VALUES; ++i) {
        const int j = threadIdx.x + i * blockDim.x;
        v[i] = j < cols ? (row ? g4_to_f32(row[j]) : 1.0f) : 0.0f;
    }
}

__device__ __forceinline__ float inv_rms(const float (&v)[G4_NORM_VALUES], int cols, float eps) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < G4_NORM_VALUES; ++i) sum += v[i] * v[i];
    return 1.0f / sqrtf(g4_block_sum(sum) / cols + eps);
}

// Every input is loaded before the first reduction: one memory round trip per kernel.
template <typename T>
__device__ void rms_norm(const T* x, const T* w, T* out, int cols, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    float v[G4_NORM_VALUES], weight[G4_NORM_VALUES];
    load_row(x + base, cols, v);
    load_row(w, cols, weight);
    const float inv = inv_rms(v, cols, eps);
#pragma unroll
    for (int i = 0; i < G4_NORM_VALUES; ++i) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < cols) out[base + j] = g4_from_f32<T>(v[i] * inv * weight[i]);
    }
}

template <typename T>
__device__ void rms_norm_plus_add(const T* residual, const T* x, const T* w, T* out, int cols, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    float v[G4_NORM_VALUES], weight[G4_NORM_VALUES], res[G4_NORM_VALUES];
    load_row(x + base, cols, v);
    load_row(w, cols, weight);
    load_row(residual + base, cols, res);
    const float inv = inv_rms(v, cols, eps);
#pragma unroll
    for (int i = 0; i < G4_NORM_VALUES; ++i) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < cols) out[base + j] = g4_from_f32<T>(res[i] + g4_round<T>(v[i] * inv * weight[i]));
    }
}

template <typename T>
__device__ void dual_rms_norm_plus_res(const T* residual, const T* x, const T* w1, const T* w2, T* out_residual,
                                       T* out_y, int cols, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    float v[G4_NORM_VALUES], weight1[G4_NORM_VALUES], weight2[G4_NORM_VALUES], res[G4_NORM_VALUES];
    load_row(x + base, cols, v);
    load_row(w1, cols, weight1);
    load_row(w2, cols, weight2);
    load_row(residual + base, cols, res);
    const float inv_x = inv_rms(v, cols, eps);
    // v becomes the new residual, rounded to T as it is stored: the second norm reads that.
#pragma unroll
    for (int i = 0; i < G4_NORM_VALUES; ++i) {
        const int j = threadIdx.x + i * blockDim.x;
        const T r = g4_from_f32<T>(res[i] + g4_round<T>(v[i] * inv_x * weight1[i]));
        if (j < cols) out_residual[base + j] = r;
        v[i] = j < cols ? g4_to_f32(r) : 0.0f;
    }
    const float inv_r = inv_rms(v, cols, eps);
#pragma unroll
    for (int i = 0; i < G4_NORM_VALUES; ++i) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < cols) out_y[base + j] = g4_from_f32<T>(v[i] * inv_r * weight2[i]);
    }
}

#define G4_NORMS(NAME, T)                                                                                   \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS) g4_rms_norm_##NAME(const T* x, const T* w, T* out, int cols, float eps) {   \
        rms_norm<T>(x, w, out, cols, eps);                                                                  \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS) g4_rms_norm_plus_add_##NAME(const T* residual, const T* x, const T* w, T* out, \
                                                            int cols, float eps) {                           \
        rms_norm_plus_add<T>(residual, x, w, out, cols, eps);                                               \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS) g4_dual_rms_norm_plus_res_##NAME(const T* residual, const T* x, const T* w1,   \
                                                                 const T* w2, T* out_residual, T* out_y,      \
                                                                 int cols, float eps) {                      \
        dual_rms_norm_plus_res<T>(residual, x, w1, w2, out_residual, out_y, cols, eps);                     \
    }
G4_FOR_FLOAT_TYPES(G4_NORMS)
