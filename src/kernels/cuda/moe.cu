// The MoE ops: router top-k, row gather, weighted scatter-add into an f32 accumulator, zeroing.
#include "g4_compat.cuh"

// One warp per token: softmax over all experts (f32) -> top-k -> renormalise -> x scale. Each
// lane holds every warp-size-th expert; the k choices are k warp-wide arg-max reductions over
// the probabilities not chosen yet. Ties go to the lower expert index.
template <typename T>
__device__ void moe_router_topk(const T* logits, const T* per_expert_scale, float* weights,
                                uint32_t* experts, int rows, int num_experts, int k) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size;
    const int r = blockIdx.x * (blockDim.x / warp_size) + threadIdx.x / warp_size;
    if (r >= rows) return;
    const T* row = logits + (size_t)r * num_experts;
    float max = -INFINITY;
    for (int e = lane; e < num_experts; e += warp_size) max = fmaxf(max, g4_to_f32(row[e]));
    for (int bits = warp_size / 2; bits > 0; bits >>= 1) max = fmaxf(max, G4_SHFL_XOR(max, bits));
    float total = 0.0f;
    for (int e = lane; e < num_experts; e += warp_size) total += expf(g4_to_f32(row[e]) - max);
    for (int bits = warp_size / 2; bits > 0; bits >>= 1) total += G4_SHFL_XOR(total, bits);
    float kept = 0.0f;
    float previous = INFINITY;
    int previous_index = -1;
    for (int slot = 0; slot < k; ++slot) {
        int best = -1;
        float best_p = -1.0f;
        for (int e = lane; e < num_experts; e += warp_size) {
            const float p = expf(g4_to_f32(row[e]) - max) / total;
            const bool after_previous = p < previous || (p == previous && e > previous_index);
            if (after_previous && p > best_p) { best_p = p; best = e; }
        }
        for (int bits = warp_size / 2; bits > 0; bits >>= 1) {
            const float other_p = G4_SHFL_XOR(best_p, bits);
            const int other = G4_SHFL_XOR(best, bits);
            if (other_p > best_p || (other_p == best_p && other >= 0 && (best < 0 || other < best))) {
                best_p = other_p;
                best = other;
            }
        }
        if (lane == 0) {
            experts[(size_t)r * k + slot] = best;
            weights[(size_t)r * k + slot] = best_p;
        }
        kept += best_p;
        previous = best_p;
        previous_index = best;
    }
    for (int slot = lane; slot < k; slot += warp_size) {
        const size_t i = (size_t)r * k + slot;
        weights[i] = weights[i] / kept * g4_to_f32(per_expert_scale[experts[i]]);
    }
}

#define G4_ROUTER(NAME, T)                                                                                 \
    extern "C" __global__ void g4_moe_router_topk_##NAME(const T* logits, const T* per_expert_scale,       \
                                                         float* weights, uint32_t* experts, int rows,      \
                                                         int num_experts, int k) {                         \
        G4_KERNEL_START();                                                                                 \
        moe_router_topk<T>(logits, per_expert_scale, weights, experts, rows, num_experts, k);              \
    }                                                                                                      \
    extern "C" __global__ void g4_moe_gather_rows_##NAME(const T* x, const uint32_t* rows, T* out,          \
                                                         size_t count, size_t cols) {                      \
        G4_KERNEL_START();                                                                                  \
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count * cols;                    \
             i += (size_t)gridDim.x * blockDim.x) {                                                       \
            out[i] = x[(size_t)rows[i / cols] * cols + i % cols];                                          \
        }                                                                                                  \
    }                                                                                                      \
    extern "C" __global__ void g4_moe_weighted_scatter_add_##NAME(float* out, const uint32_t* tokens,       \
                                                                  const float* weights, const T* y,         \
                                                                  size_t count, size_t cols) {              \
        G4_KERNEL_START();                                                                                  \
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count * cols;                    \
             i += (size_t)gridDim.x * blockDim.x) {                                                       \
            const size_t r = i / cols;                                                                     \
            atomicAdd(&out[(size_t)tokens[r] * cols + i % cols], weights[r] * g4_to_f32(y[i]));           \
        }                                                                                                  \
    }
G4_FOR_FLOAT_TYPES(G4_ROUTER)

extern "C" __global__ void g4_moe_zero_f32(float* out, size_t n) {
    G4_KERNEL_START();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = 0.0f;
}

