// attention: softmax(q·kᵀ·scale + mask)·v with GQA by contiguous groups. Decode and short query
// blocks run split-K ("flash decoding"): each query row's keys are cut into `splits` chunks, one
// block per (row, chunk), so that a decode step with few heads still fills the GPU. Each warp of
// a block keeps an online softmax (f32) over its keys; the warps merge in the block, and with
// several chunks a second kernel merges the chunks' partial results. Longer query blocks run
// cuBLAS's GEMMs around attention_softmax (below).
// K/V may be views into a longer cache: rows are contiguous, heads are `kv_head_stride` elements
// apart. mask is an optional additive f32 [S, T]; a warp reads 32 mask entries at once and skips
// the hidden keys without touching K/V, so a mostly-empty cache buffer costs little.
#include "g4_compat.cuh"

#define G4_ATTN_MAX_D 512
#define G4_ATTN_WARPS 4
// Block size on a 64-lane GPU (the largest); at two such blocks per multiprocessor the chunk
// kernel fits 128 registers, four of its 128-thread blocks per multiprocessor on NVIDIA GPUs.
#define G4_ATTN_MAX_THREADS (G4_ATTN_WARPS * 64)

template <typename T>
__device__ void attention_chunk(const T* q, const T* k, const T* v, const float* mask, T* out,
                                float* partial_acc, float* partial_stats, int heads, int kv_heads, int seq,
                                int keys, int d, size_t kv_head_stride, float scale, int splits) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int row = blockIdx.x / splits;  // (b * heads + h) * seq + s
    const int split = blockIdx.x % splits;
    const int s = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
    const int kvh = h / (heads / kv_heads);
    const T* k_head = k + ((size_t)b * kv_heads + kvh) * kv_head_stride;
    const T* v_head = v + ((size_t)b * kv_heads + kvh) * kv_head_stride;
    const int chunk = (keys + splits - 1) / splits;
    const int first = split * chunk, end = min(keys, first + chunk);

    __shared__ float q_row[G4_ATTN_MAX_D];
    __shared__ float warp_max[G4_ATTN_WARPS], warp_sum[G4_ATTN_WARPS];
    __shared__ float warp_acc[G4_ATTN_WARPS][G4_ATTN_MAX_D];
    for (int j = threadIdx.x; j < d; j += blockDim.x) q_row[j] = g4_to_f32(q[(size_t)row * d + j]);
    __syncthreads();

    // Per-lane slices of a D-row: element lane + r·warp_size. Fixed bounds keep them in registers.
    constexpr int slices = G4_ATTN_MAX_D / 32;
    float acc[slices];
#pragma unroll
    for (int r = 0; r < slices; ++r) acc[r] = 0.0f;
    float running_max = -INFINITY, running_sum = 0.0f;
    // Warp w takes keys first + w, first + w + WARPS, …; it reads the mask of warp_size of them
    // at once (one per lane) and walks the visible ones, skipping hidden keys without loading K
    // or V. The next visible key's K/V loads are issued before this key's arithmetic, so that a
    // warp keeps two keys' loads in flight (one at a time left long contexts latency-bound).
    const int stride = G4_ATTN_WARPS;
    for (int base = first + warp; base < end; base += stride * warp_size) {
        const int mine = base + lane * stride;
        const float my_mask = mine >= end ? -INFINITY : (mask ? mask[(size_t)s * keys + mine] : 0.0f);
        unsigned long long visible = G4_BALLOT(my_mask != -INFINITY);
        if (!visible) continue;
        auto load = [&](int i, float (&k_val)[slices], float (&v_val)[slices]) {
            const T* k_row = k_head + (size_t)(base + i * stride) * d;
            const T* v_row = v_head + (size_t)(base + i * stride) * d;
#pragma unroll
            for (int r = 0; r < slices; ++r) {
                const int j = lane + r * warp_size;
                k_val[r] = j < d ? g4_to_f32(k_row[j]) : 0.0f;
                v_val[r] = j < d ? g4_to_f32(v_row[j]) : 0.0f;
            }
        };
        int i = __ffsll((long long)visible) - 1;
        float k_val[slices], v_val[slices], k_next[slices], v_next[slices];
        load(i, k_val, v_val);
        while (true) {
            visible &= visible - 1;
            const int next = visible ? __ffsll((long long)visible) - 1 : -1;
            if (next >= 0) load(next, k_next, v_next);
            float dot = 0.0f;
#pragma unroll
            for (int r = 0; r < slices; ++r) {
                const int j = lane + r * warp_size;
                if (j < d) dot += q_row[j] * k_val[r];
            }
            for (int bits = warp_size / 2; bits > 0; bits >>= 1) dot += G4_SHFL_XOR(dot, bits);
            const float score = dot * scale + G4_SHFL(my_mask, i);
            const float new_max = fmaxf(running_max, score);
            const float correction = expf(running_max - new_max), p = expf(score - new_max);
            running_sum = running_sum * correction + p;
#pragma unroll
            for (int r = 0; r < slices; ++r) acc[r] = acc[r] * correction + p * v_val[r];
            running_max = new_max;
            if (next < 0) break;
#pragma unroll
            for (int r = 0; r < slices; ++r) k_val[r] = k_next[r], v_val[r] = v_next[r];
            i = next;
        }
    }
    if (lane == 0) {
        warp_max[warp] = running_max;
        warp_sum[warp] = running_sum;
    }
#pragma unroll
    for (int r = 0; r < slices; ++r) {
        const int j = lane + r * warp_size;
        if (j < d) warp_acc[warp][j] = acc[r];
    }
    __syncthreads();
    float chunk_max = -INFINITY;
    for (int w = 0; w < G4_ATTN_WARPS; ++w) chunk_max = fmaxf(chunk_max, warp_max[w]);
    float chunk_sum = 0.0f;
    for (int w = 0; w < G4_ATTN_WARPS; ++w) {
        if (warp_max[w] != -INFINITY) chunk_sum += warp_sum[w] * expf(warp_max[w] - chunk_max);
    }
    const size_t slot = (size_t)row * splits + split;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < G4_ATTN_WARPS; ++w) {
            if (warp_max[w] != -INFINITY) o += warp_acc[w][j] * expf(warp_max[w] - chunk_max);
        }
        if (splits == 1) {
            out[(size_t)row * d + j] = g4_from_f32<T>(o / chunk_sum);
        } else {
            partial_acc[slot * d + j] = o;
        }
    }
    if (splits > 1 && threadIdx.x == 0) {
        partial_stats[slot * 2] = chunk_max;
        partial_stats[slot * 2 + 1] = chunk_sum;
    }
}

// Merges each query row's chunks (a chunk with no visible key has max −∞): a row's D outputs
// are spread over several blocks (blockDim elements each), so that the few rows of a decode step
// still fill the GPU when their chunks are many.
template <typename T>
__device__ void attention_merge(const float* partial_acc, const float* partial_stats, T* out, int d, int splits) {
    const int blocks_per_row = (d + blockDim.x - 1) / blockDim.x;
    const int row = blockIdx.x / blocks_per_row;
    const int j = (blockIdx.x % blocks_per_row) * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const float* stats = partial_stats + (size_t)row * splits * 2;
    float total_max = -INFINITY;
    for (int c = 0; c < splits; ++c) total_max = fmaxf(total_max, stats[c * 2]);
    float total = 0.0f, o = 0.0f;
    for (int c = 0; c < splits; ++c) {
        if (stats[c * 2] != -INFINITY) {
            const float weight = expf(stats[c * 2] - total_max);
            total += stats[c * 2 + 1] * weight;
            o += partial_acc[((size_t)row * splits + c) * d + j] * weight;
        }
    }
    out[(size_t)row * d + j] = g4_from_f32<T>(o / total);
}

// The GEMM path of long query blocks: between cuBLAS's q·kᵀ and p·v, probs = softmax(scores ·
// scale + mask) in one kernel, f32 inside as the composed arm's cast, add and softmax are, stored
// in T. scores and probs are [rows, keys] with row = ((b · kv_heads + kv head) · group + g) · seq
// + s, so a row's query is row % seq; mask is an additive f32 [seq, keys] or null. One block per
// row, three passes as candle's softmax makes them (max, sum, quotient); after the first the row
// comes from cache. A row with no visible key attends to nothing (zeros, not NaN).
template <typename T>
__device__ void attention_softmax(const T* scores, const float* mask, T* probs, int seq, int keys, float scale) {
    const size_t row = blockIdx.x;
    const T* in = scores + row * keys;
    const float* row_mask = mask ? mask + (size_t)(row % seq) * keys : nullptr;
    auto logit = [&](int t) { return g4_to_f32(in[t]) * scale + (row_mask ? row_mask[t] : 0.0f); };
    float max = -INFINITY;
    for (int t = threadIdx.x; t < keys; t += blockDim.x) max = fmaxf(max, logit(t));
    max = g4_block_max(max);
    float sum = 0.0f;
    if (max != -INFINITY) {
        for (int t = threadIdx.x; t < keys; t += blockDim.x) sum += expf(logit(t) - max);
    }
    sum = g4_block_sum(sum);
    T* out = probs + row * keys;
    for (int t = threadIdx.x; t < keys; t += blockDim.x) {
        out[t] = g4_from_f32<T>(max == -INFINITY ? 0.0f : expf(logit(t) - max) / sum);
    }
}

#define G4_ATTENTION(NAME, T)                                                                               \
    extern "C" __global__ void __launch_bounds__(G4_ATTN_MAX_THREADS, 2)                                     \
        g4_attention_##NAME(const T* q, const T* k, const T* v, const float* mask, T* out, float* partial_acc, \
                            float* partial_stats, int heads, int kv_heads, int seq, int keys, int d,        \
                            size_t kv_head_stride, float scale, int splits) {                               \
        G4_KERNEL_START();                                                                                   \
        attention_chunk<T>(q, k, v, mask, out, partial_acc, partial_stats, heads, kv_heads, seq, keys, d,    \
                           kv_head_stride, scale, splits);                                                   \
    }                                                                                                        \
    extern "C" __global__ void g4_attention_merge_##NAME(const float* partial_acc, const float* partial_stats, \
                                                         T* out, int d, int splits) {                        \
        G4_KERNEL_START();                                                                                   \
        attention_merge<T>(partial_acc, partial_stats, out, d, splits);                                      \
    }                                                                                                        \
    extern "C" __global__ void g4_attention_softmax_##NAME(const T* scores, const float* mask, T* probs,     \
                                                           int seq, int keys, float scale) {                 \
        G4_KERNEL_START();                                                                                   \
        attention_softmax<T>(scores, mask, probs, seq, keys, scale);                                         \
    }
G4_FOR_FLOAT_TYPES(G4_ATTENTION)
