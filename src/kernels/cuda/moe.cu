// The MoE ops: router top-k, row gather, weighted scatter-add into an f32 accumulator, zeroing.
#include "g4_compat.cuh"

// One thread per token: softmax over all experts (f32) -> top-k -> renormalise -> x scale.
// Ties go to the lower expert index.
#define G4_ROUTER(NAME, T)                                                                                 \
    extern "C" __global__ void g4_moe_router_topk_##NAME(const T* logits, const T* per_expert_scale,       \
                                                         float* weights, uint32_t* experts, int rows,      \
                                                         int num_experts, int k) {                         \
        const int r = blockIdx.x * blockDim.x + threadIdx.x;                                               \
        if (r >= rows) return;                                                                             \
        const T* row = logits + (size_t)r * num_experts;                                                   \
        float max = -INFINITY;                                                                             \
        for (int e = 0; e < num_experts; ++e) max = fmaxf(max, g4_to_f32(row[e]));                        \
        float total = 0.0f;                                                                                \
        for (int e = 0; e < num_experts; ++e) total += expf(g4_to_f32(row[e]) - max);                      \
        float kept = 0.0f;                                                                                 \
        float previous = INFINITY;                                                                         \
        int previous_index = -1;                                                                           \
        for (int slot = 0; slot < k; ++slot) {                                                             \
            int best = -1;                                                                                 \
            float best_p = -1.0f;                                                                          \
            for (int e = 0; e < num_experts; ++e) {                                                        \
                const float p = expf(g4_to_f32(row[e]) - max) / total;                                     \
                const bool after_previous = p < previous || (p == previous && e > previous_index);         \
                if (after_previous && p > best_p) { best_p = p; best = e; }                                 \
            }                                                                                              \
            experts[(size_t)r * k + slot] = best;                                                          \
            weights[(size_t)r * k + slot] = best_p;                                                        \
            kept += best_p;                                                                                \
            previous = best_p;                                                                             \
            previous_index = best;                                                                         \
        }                                                                                                  \
        for (int slot = 0; slot < k; ++slot) {                                                             \
            const size_t i = (size_t)r * k + slot;                                                         \
            weights[i] = weights[i] / kept * g4_to_f32(per_expert_scale[experts[i]]);                      \
        }                                                                                                  \
    }                                                                                                      \
    extern "C" __global__ void g4_moe_gather_rows_##NAME(const T* x, const uint32_t* rows, T* out,          \
                                                         size_t count, size_t cols) {                      \
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count * cols;                    \
             i += (size_t)gridDim.x * blockDim.x) {                                                       \
            out[i] = x[(size_t)rows[i / cols] * cols + i % cols];                                          \
        }                                                                                                  \
    }                                                                                                      \
    extern "C" __global__ void g4_moe_weighted_scatter_add_##NAME(float* out, const uint32_t* tokens,       \
                                                                  const float* weights, const T* y,         \
                                                                  size_t count, size_t cols) {              \
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count * cols;                    \
             i += (size_t)gridDim.x * blockDim.x) {                                                       \
            const size_t r = i / cols;                                                                     \
            atomicAdd(&out[(size_t)tokens[r] * cols + i % cols], weights[r] * g4_to_f32(y[i]));           \
        }                                                                                                  \
    }
G4_FOR_FLOAT_TYPES(G4_ROUTER)

extern "C" __global__ void g4_moe_zero_f32(float* out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = 0.0f;
}

