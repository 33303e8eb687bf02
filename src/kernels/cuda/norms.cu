// rms_norm, rms_norm_plus_add, dual_rms_norm_plus_res: one block per row, f32 inside, plain
// (not 1 + w) weight applied before the cast back — the semantics of the ops' composed arms.
#include "g4_compat.cuh"

template <typename T>
__device__ float inv_rms(const T* row, int cols, float eps) {
    float sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float v = g4_to_f32(row[j]);
        sum += v * v;
    }
    return 1.0f / sqrtf(g4_block_sum(sum) / cols + eps);
}

template <typename T>
__device__ void rms_norm(const T* x, const T* w, T* out, int cols, float eps) {
    const T* row = x + (size_t)blockIdx.x * cols;
    T* dst = out + (size_t)blockIdx.x * cols;
    const float inv = inv_rms(row, cols, eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float weight = w ? g4_to_f32(w[j]) : 1.0f;
        dst[j] = g4_from_f32<T>(g4_to_f32(row[j]) * inv * weight);
    }
}

template <typename T>
__device__ void rms_norm_plus_add(const T* residual, const T* x, const T* w, T* out, int cols, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    const float inv = inv_rms(x + base, cols, eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float normed = g4_round<T>(g4_to_f32(x[base + j]) * inv * g4_to_f32(w[j]));
        out[base + j] = g4_from_f32<T>(g4_to_f32(residual[base + j]) + normed);
    }
}

template <typename T>
__device__ void dual_rms_norm_plus_res(const T* residual, const T* x, const T* w1, const T* w2, T* out_residual,
                                       T* out_y, int cols, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    const float inv_x = inv_rms(x + base, cols, eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float normed = g4_round<T>(g4_to_f32(x[base + j]) * inv_x * g4_to_f32(w1[j]));
        out_residual[base + j] = g4_from_f32<T>(g4_to_f32(residual[base + j]) + normed);
    }
    __syncthreads();
    const float inv_r = inv_rms(out_residual + base, cols, eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        out_y[base + j] = g4_from_f32<T>(g4_to_f32(out_residual[base + j]) * inv_r * g4_to_f32(w2[j]));
    }
}

#define G4_NORMS(NAME, T)                                                                                   \
    extern "C" __global__ void g4_rms_norm_##NAME(const T* x, const T* w, T* out, int cols, float eps) {   \
        rms_norm<T>(x, w, out, cols, eps);                                                                  \
    }                                                                                                       \
    extern "C" __global__ void g4_rms_norm_plus_add_##NAME(const T* residual, const T* x, const T* w, T* out, \
                                                            int cols, float eps) {                           \
        rms_norm_plus_add<T>(residual, x, w, out, cols, eps);                                               \
    }                                                                                                       \
    extern "C" __global__ void g4_dual_rms_norm_plus_res_##NAME(const T* residual, const T* x, const T* w1,   \
                                                                 const T* w2, T* out_residual, T* out_y,      \
                                                                 int cols, float eps) {                      \
        dual_rms_norm_plus_res<T>(residual, x, w1, w2, out_residual, out_y, cols, eps);                     \
    }
G4_FOR_FLOAT_TYPES(G4_NORMS)
