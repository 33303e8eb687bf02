// attention: softmax(q·kᵀ·scale + mask)·v with GQA by contiguous groups, for decode and prefill.
// One block per (batch, head, query); its warps split the keys and keep an online softmax each
// (f32 throughout), merged at the end. K/V may be views into a longer cache: rows are contiguous,
// heads are `kv_head_stride` elements apart. mask is an optional additive f32 [S, T].
#include "g4_compat.cuh"

#define G4_ATTN_MAX_D 512
#define G4_ATTN_WARPS 4

template <typename T>
__device__ void attention(const T* q, const T* k, const T* v, const float* mask, T* out, int heads, int kv_heads,
                          int seq, int keys, int d, size_t kv_head_stride, float scale) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int row = blockIdx.x;  // (b * heads + h) * seq + s
    const int s = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
    const int kvh = h / (heads / kv_heads);
    const T* k_head = k + ((size_t)b * kv_heads + kvh) * kv_head_stride;
    const T* v_head = v + ((size_t)b * kv_heads + kvh) * kv_head_stride;

    __shared__ float q_row[G4_ATTN_MAX_D];
    __shared__ float warp_max[G4_ATTN_WARPS], warp_sum[G4_ATTN_WARPS];
    __shared__ float warp_acc[G4_ATTN_WARPS][G4_ATTN_MAX_D];
    for (int j = threadIdx.x; j < d; j += blockDim.x) q_row[j] = g4_to_f32(q[(size_t)row * d + j]);
    __syncthreads();

    const int per_lane = (d + warp_size - 1) / warp_size;
    float acc[G4_ATTN_MAX_D / 32];
    for (int i = 0; i < per_lane; ++i) acc[i] = 0.0f;
    float running_max = -INFINITY, running_sum = 0.0f;
    for (int t = warp; t < keys; t += G4_ATTN_WARPS) {
        const float m = mask ? mask[(size_t)s * keys + t] : 0.0f;
        if (m == -INFINITY) continue;
        float dot = 0.0f;
        for (int j = lane; j < d; j += warp_size) dot += q_row[j] * g4_to_f32(k_head[(size_t)t * d + j]);
        for (int mask_bits = warp_size / 2; mask_bits > 0; mask_bits >>= 1) dot += G4_SHFL_XOR(dot, mask_bits);
        const float score = dot * scale + m;
        const float new_max = fmaxf(running_max, score);
        const float correction = expf(running_max - new_max), p = expf(score - new_max);
        running_sum = running_sum * correction + p;
        for (int i = 0, j = lane; j < d; ++i, j += warp_size) {
            acc[i] = acc[i] * correction + p * g4_to_f32(v_head[(size_t)t * d + j]);
        }
        running_max = new_max;
    }
    if (lane == 0) {
        warp_max[warp] = running_max;
        warp_sum[warp] = running_sum;
    }
    for (int i = 0, j = lane; j < d; ++i, j += warp_size) warp_acc[warp][j] = acc[i];
    __syncthreads();
    float total_max = -INFINITY;
    for (int w = 0; w < G4_ATTN_WARPS; ++w) total_max = fmaxf(total_max, warp_max[w]);
    float total = 0.0f;
    for (int w = 0; w < G4_ATTN_WARPS; ++w) {
        if (warp_max[w] != -INFINITY) total += warp_sum[w] * expf(warp_max[w] - total_max);
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < G4_ATTN_WARPS; ++w) {
            if (warp_max[w] != -INFINITY) o += warp_acc[w][j] * expf(warp_max[w] - total_max);
        }
        out[(size_t)row * d + j] = g4_from_f32<T>(o / total);
    }
}

#define G4_ATTENTION(NAME, T)                                                                              \
    extern "C" __global__ void g4_attention_##NAME(const T* q, const T* k, const T* v, const float* mask,  \
                                                   T* out, int heads, int kv_heads, int seq, int keys,      \
                                                   int d, size_t kv_head_stride, float scale) {             \
        attention<T>(q, k, v, mask, out, heads, kv_heads, seq, keys, d, kv_head_stride, scale);             \
    }
G4_FOR_FLOAT_TYPES(G4_ATTENTION)
