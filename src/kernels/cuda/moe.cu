// The MoE ops: router top-k, row gather, and each token's weighted sum of its routed rows.
#include "g4_compat.cuh"

// One warp per token: softmax over all experts (f32) -> top-k -> renormalise -> x scale. Each
// lane holds every warp-size-th expert's probability and scale in registers (up to
// G4_ROUTER_PER_LANE of each; the host sends more experts elsewhere), so that the k choices —
// k warp-wide arg-max reductions over the probabilities not chosen yet — read no memory. Ties go
// to the lower expert index. The scales are read before the wait: no kernel writes them.
#define G4_ROUTER_PER_LANE 8

template <typename T>
__device__ void moe_router_topk(const T* logits, const T* per_expert_scale, float* weights,
                                uint32_t* experts, int rows, int num_experts, int k) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size;
    const int r = blockIdx.x * (blockDim.x / warp_size) + threadIdx.x / warp_size;
    float p[G4_ROUTER_PER_LANE], scale[G4_ROUTER_PER_LANE];
#pragma unroll
    for (int i = 0; i < G4_ROUTER_PER_LANE; ++i) {
        const int e = lane + i * warp_size;
        scale[i] = e < num_experts ? g4_to_f32(per_expert_scale[e]) : 0.0f;
    }
    G4_WAIT_FOR_INPUTS();
    if (r >= rows) return;
    const T* row = logits + (size_t)r * num_experts;
    float max = -INFINITY;
#pragma unroll
    for (int i = 0; i < G4_ROUTER_PER_LANE; ++i) {
        const int e = lane + i * warp_size;
        p[i] = e < num_experts ? g4_to_f32(row[e]) : -INFINITY;
        max = fmaxf(max, p[i]);
    }
    for (int bits = warp_size / 2; bits > 0; bits >>= 1) max = fmaxf(max, G4_SHFL_XOR(max, bits));
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < G4_ROUTER_PER_LANE; ++i) {
        p[i] = expf(p[i] - max);  // 0 past the last expert
        total += p[i];
    }
    for (int bits = warp_size / 2; bits > 0; bits >>= 1) total += G4_SHFL_XOR(total, bits);
    // Chosen (and absent) experts read −1: below every probability.
#pragma unroll
    for (int i = 0; i < G4_ROUTER_PER_LANE; ++i) {
        const int e = lane + i * warp_size;
        p[i] = e < num_experts ? p[i] / total : -1.0f;
    }
    float kept = 0.0f, my_p = 0.0f, my_scale = 0.0f;
    int my_expert = 0;
    for (int slot = 0; slot < k; ++slot) {
        int best = -1;
        float best_p = -1.0f, best_scale = 0.0f;
#pragma unroll
        for (int i = 0; i < G4_ROUTER_PER_LANE; ++i) {
            if (p[i] > best_p) best_p = p[i], best = lane + i * warp_size, best_scale = scale[i];
        }
        for (int bits = warp_size / 2; bits > 0; bits >>= 1) {
            const float other_p = G4_SHFL_XOR(best_p, bits);
            const int other = G4_SHFL_XOR(best, bits);
            const float other_scale = G4_SHFL_XOR(best_scale, bits);
            if (other_p > best_p || (other_p == best_p && other >= 0 && (best < 0 || other < best))) {
                best_p = other_p, best = other, best_scale = other_scale;
            }
        }
#pragma unroll
        for (int i = 0; i < G4_ROUTER_PER_LANE; ++i) {
            if (lane + i * warp_size == best) p[i] = -1.0f;
        }
        if (lane == slot % warp_size) my_p = best_p, my_expert = best, my_scale = best_scale;
        kept += best_p;
    }
    if (lane < k) {
        const size_t i = (size_t)r * k + lane;
        experts[i] = my_expert;
        weights[i] = my_p / kept * my_scale;
    }
}

// One block per routed row: row r of the output is row rows[r] of x, copied 16 bytes a thread
// where the rows are whole aligned vectors.
template <typename T>
__device__ void moe_gather_row(const T* x, const uint32_t* rows, T* out, size_t cols) {
    const T* src = x + (size_t)rows[blockIdx.x] * cols;
    T* dst = out + (size_t)blockIdx.x * cols;
    constexpr int per_vector = 16 / sizeof(T);
    if (cols % per_vector == 0 && ((uintptr_t)src | (uintptr_t)dst) % 16 == 0) {
        const uint4* from = reinterpret_cast<const uint4*>(src);
        uint4* to = reinterpret_cast<uint4*>(dst);
        for (size_t j = threadIdx.x; j < cols / per_vector; j += blockDim.x) to[j] = from[j];
    } else {
        for (size_t j = threadIdx.x; j < cols; j += blockDim.x) dst[j] = src[j];
    }
}

// One block per token: out[t] = Σ_s w[t, s] · y[positions[t, s]], the slots in order, f32.
template <typename T>
__device__ void moe_combine(const T* y, const uint32_t* positions, const float* weights, float* out, int slots,
                            size_t cols) {
    const size_t t = blockIdx.x;
    for (size_t j = threadIdx.x; j < cols; j += blockDim.x) {
        float sum = 0.0f;
        for (int s = 0; s < slots; ++s) {
            sum += weights[t * slots + s] * g4_to_f32(y[(size_t)positions[t * slots + s] * cols + j]);
        }
        out[t * cols + j] = sum;
    }
}

#define G4_ROUTER(NAME, T)                                                                                 \
    extern "C" __global__ void g4_moe_router_topk_##NAME(const T* logits, const T* per_expert_scale,       \
                                                         float* weights, uint32_t* experts, int rows,      \
                                                         int num_experts, int k) {                         \
        G4_LET_DEPENDENTS_LAUNCH();                                                                        \
        moe_router_topk<T>(logits, per_expert_scale, weights, experts, rows, num_experts, k);              \
    }                                                                                                      \
    extern "C" __global__ void g4_moe_gather_rows_##NAME(const T* x, const uint32_t* rows, T* out,          \
                                                         size_t cols) {                                    \
        G4_KERNEL_START();                                                                                  \
        moe_gather_row<T>(x, rows, out, cols);                                                              \
    }                                                                                                      \
    extern "C" __global__ void g4_moe_combine_##NAME(const T* y, const uint32_t* positions,                 \
                                                     const float* weights, float* out, int slots,           \
                                                     size_t cols) {                                         \
        G4_KERNEL_START();                                                                                  \
        moe_combine<T>(y, positions, weights, out, slots, cols);                                            \
    }
G4_FOR_FLOAT_TYPES(G4_ROUTER)
