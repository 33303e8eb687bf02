// attention: softmax(q·kᵀ·scale + mask)·v with GQA by contiguous groups. Decode and short query
// blocks run split-K ("flash decoding"): each query row's keys are cut into `splits` chunks, one
// block per (row, chunk), so that a decode step with few heads still fills the GPU. Each warp of
// a block keeps an online softmax (f32) over its keys; the warps merge in the block, and with
// several chunks a second kernel merges the chunks' partial results. Longer query blocks run
// cuBLAS's GEMMs around attention_softmax (below).
// K/V may be views into a longer cache: rows are contiguous, heads are `kv_head_stride` elements
// apart. mask is an optional additive f32 [S, T]; a warp reads 32 mask entries at once and skips
// the hidden keys without touching K/V, so a mostly-empty cache buffer costs little. Lanes load
// K/V rows 16 bytes at a time where the rows allow it (VectorRow below), else element by element.
#include "g4_compat.cuh"

#define G4_ATTN_MAX_D 512
#define G4_ATTN_WARPS 4
// Chunks a row may be split into: the merge keeps one weight per chunk in shared memory.
#define G4_ATTN_MAX_SPLITS 1024
// Block size on a 64-lane GPU (the largest); at two such blocks per multiprocessor the chunk
// kernel fits 128 registers, four of its 128-thread blocks per multiprocessor on NVIDIA GPUs.
#define G4_ATTN_MAX_THREADS (G4_ATTN_WARPS * 64)

// How a lane holds its share of a D-row of q, K or V: `n` floats, float i being element
// `index(i)` of the row. StridedRow loads element lane + i·warp_size one at a time (any D);
// VectorRow loads 16 bytes at once (C loads of 16 / sizeof(T) contiguous elements per lane, for
// D = C · warp_size · 16 / sizeof(T) and 16-byte aligned rows), which halved the time of decode
// attention at Gemma-4's head sizes (scripts/kernel-bench/attention_bench.cu).
template <typename T>
struct StridedRow {
    static constexpr int n = G4_ATTN_MAX_D / 32;
    struct Loaded {
        float v[n];
    };
    __device__ static int index(int i, int lane, int warp_size) { return lane + i * warp_size; }
    __device__ static void load(const T* row, int lane, int warp_size, int d, Loaded& out) {
#pragma unroll
        for (int i = 0; i < n; ++i) {
            const int j = index(i, lane, warp_size);
            out.v[i] = j < d ? g4_to_f32(row[j]) : 0.0f;
        }
    }
    // q stays in shared memory (the block's copy): sixteen more registers a lane would spill the
    // loads in flight, and so would loading a warp's first key early.
    static constexpr bool first_key_early = false;
    typedef float QueryRow;  // the block's copy in shared memory
    struct Query {
        const float* row;
        int lane, warp_size, d;
    };
    __device__ static Query query(const float* q_row, int lane, int warp_size, int d) {
        return {q_row, lane, warp_size, d};
    }
    __device__ static float dot(const Query& q, const Loaded& k) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < n; ++i) {
            const int j = index(i, q.lane, q.warp_size);
            if (j < q.d) sum += q.row[j] * k.v[i];
        }
        return sum;
    }
    __device__ static void accumulate(float (&acc)[n], float correction, float p, const Loaded& v) {
#pragma unroll
        for (int i = 0; i < n; ++i) acc[i] = acc[i] * correction + p * v.v[i];
    }
};

template <typename T, int C>
struct VectorRow {
    static constexpr int per_load = 16 / sizeof(T);
    static constexpr int n = C * per_load;
    struct Loaded {
        uint4 v[C];
    };
    __device__ static int index(int i, int lane, int warp_size) {
        return ((i / per_load) * warp_size + lane) * per_load + i % per_load;
    }
    __device__ static void load(const T* row, int lane, int warp_size, int, Loaded& out) {
        const uint4* vectors = reinterpret_cast<const uint4*>(row);
#pragma unroll
        for (int c = 0; c < C; ++c) out.v[c] = vectors[c * warp_size + lane];
    }
    // A lane's q values in registers, loaded 16 bytes at a time like K and V (no block-wide
    // copy to wait for, so its loads are in flight with the mask's and the first key's). At four
    // vectors a lane (f32 heads of 512) the early first key would spill (ptxas, sm_90).
    static constexpr bool first_key_early = C < 4;
    typedef T QueryRow;  // q's row in global memory
    struct Query {
        float v[n];
    };
    __device__ static Query query(const T* q_row, int lane, int warp_size, int) {
        Loaded loaded;
        load(q_row, lane, warp_size, 0, loaded);
        Query q;
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const T* t = reinterpret_cast<const T*>(&loaded.v[c]);
#pragma unroll
            for (int e = 0; e < per_load; ++e) q.v[c * per_load + e] = g4_to_f32(t[e]);
        }
        return q;
    }
    __device__ static float dot(const Query& q, const Loaded& k) {
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const T* t = reinterpret_cast<const T*>(&k.v[c]);
#pragma unroll
            for (int e = 0; e < per_load; ++e) sum += q.v[c * per_load + e] * g4_to_f32(t[e]);
        }
        return sum;
    }
    __device__ static void accumulate(float (&acc)[n], float correction, float p, const Loaded& v) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const T* t = reinterpret_cast<const T*>(&v.v[c]);
#pragma unroll
            for (int e = 0; e < per_load; ++e) {
                acc[c * per_load + e] = acc[c * per_load + e] * correction + p * g4_to_f32(t[e]);
            }
        }
    }
};

// One warp's online softmax over its keys of the chunk [first, end), into the block's shared
// per-warp state. Warp w takes keys first + w, first + w + WARPS, …; it reads the mask of
// warp_size of them at once (one per lane) and walks the visible ones, skipping hidden keys
// without loading K or V. The next visible key's K/V loads are issued before this key's
// arithmetic, so that a warp keeps two keys' loads in flight (one at a time left long contexts
// latency-bound). With 16-byte rows the warp's first key is loaded before the mask says whether
// it is visible (in a decode step the visible keys are a prefix, so it nearly always is): its
// loads, q's and the mask's make one memory round trip instead of three.
template <typename T, typename Row>
__device__ __noinline__ void attention_warp(const typename Row::QueryRow* q_row, const T* k_head, const T* v_head,
                                            const float* mask_row, int first, int end, int d, float scale,
                                            float* warp_max, float* warp_sum, float (*warp_acc)[G4_ATTN_MAX_D]) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int first_key = first + warp;
    typename Row::Loaded k_first, v_first;
    if (Row::first_key_early && first_key < end) {
        Row::load(k_head + (size_t)first_key * d, lane, warp_size, d, k_first);
        Row::load(v_head + (size_t)first_key * d, lane, warp_size, d, v_first);
    }
    const typename Row::Query q_val = Row::query(q_row, lane, warp_size, d);
    float acc[Row::n];
#pragma unroll
    for (int i = 0; i < Row::n; ++i) acc[i] = 0.0f;
    float running_max = -INFINITY, running_sum = 0.0f;
    const int stride = G4_ATTN_WARPS;
    for (int base = first_key; base < end; base += stride * warp_size) {
        const int mine = base + lane * stride;
        const float my_mask = mine >= end ? -INFINITY : (mask_row ? mask_row[mine] : 0.0f);
        unsigned long long visible = G4_BALLOT(my_mask != -INFINITY);
        if (!visible) continue;
        auto load = [&](int i, typename Row::Loaded& k_val, typename Row::Loaded& v_val) {
            const size_t offset = (size_t)(base + i * stride) * d;
            Row::load(k_head + offset, lane, warp_size, d, k_val);
            Row::load(v_head + offset, lane, warp_size, d, v_val);
        };
        int i = __ffsll((long long)visible) - 1;
        typename Row::Loaded k_val, v_val, k_next, v_next;
        if (Row::first_key_early && base == first_key && i == 0) {
            k_val = k_first, v_val = v_first;
        } else {
            load(i, k_val, v_val);
        }
        while (true) {
            visible &= visible - 1;
            const int next = visible ? __ffsll((long long)visible) - 1 : -1;
            if (next >= 0) load(next, k_next, v_next);
            float dot = Row::dot(q_val, k_val);
            for (int bits = warp_size / 2; bits > 0; bits >>= 1) dot += G4_SHFL_XOR(dot, bits);
            const float score = dot * scale + G4_SHFL(my_mask, i);
            const float new_max = fmaxf(running_max, score);
            const float correction = expf(running_max - new_max), p = expf(score - new_max);
            running_sum = running_sum * correction + p;
            Row::accumulate(acc, correction, p, v_val);
            running_max = new_max;
            if (next < 0) break;
            k_val = k_next, v_val = v_next;
            i = next;
        }
    }
    if (lane == 0) {
        warp_max[warp] = running_max;
        warp_sum[warp] = running_sum;
    }
#pragma unroll
    for (int r = 0; r < Row::n; ++r) {
        const int j = Row::index(r, lane, warp_size);
        if (j < d) warp_acc[warp][j] = acc[r];
    }
}

template <typename T>
__device__ void attention_chunk(const T* q, const T* k, const T* v, const float* mask, T* out,
                                float* partial_acc, float* partial_stats, int heads, int kv_heads, int seq,
                                int keys, int d, size_t kv_head_stride, float scale, int splits) {
    const int warp_size = warpSize;
    const int row = blockIdx.x / splits;  // (b * heads + h) * seq + s
    const int split = blockIdx.x % splits;
    const int s = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
    const int kvh = h / (heads / kv_heads);
    const T* k_head = k + ((size_t)b * kv_heads + kvh) * kv_head_stride;
    const T* v_head = v + ((size_t)b * kv_heads + kvh) * kv_head_stride;
    const int chunk = (keys + splits - 1) / splits;
    const int first = split * chunk, end = min(keys, first + chunk);
    const float* mask_row = mask ? mask + (size_t)s * keys : nullptr;

    __shared__ float q_row[G4_ATTN_MAX_D];
    __shared__ float warp_max[G4_ATTN_WARPS], warp_sum[G4_ATTN_WARPS];
    __shared__ float warp_acc[G4_ATTN_WARPS][G4_ATTN_MAX_D];
    const T* q_global_row = q + (size_t)row * d;

    // The same for the whole block: 16-byte loads where whole, aligned vectors cover the rows
    // (q's too: its lanes load it as they load K and V).
    constexpr int per_load = 16 / sizeof(T);
    const bool aligned =
        (((uintptr_t)k_head | (uintptr_t)v_head | (uintptr_t)q_global_row) % 16 == 0) && d % per_load == 0;
    const int vectors = aligned && d % (warp_size * per_load) == 0 ? d / (warp_size * per_load) : 0;
    if (vectors == 1) {
        attention_warp<T, VectorRow<T, 1>>(q_global_row, k_head, v_head, mask_row, first, end, d, scale, warp_max,
                                           warp_sum, warp_acc);
    } else if (vectors == 2) {
        attention_warp<T, VectorRow<T, 2>>(q_global_row, k_head, v_head, mask_row, first, end, d, scale, warp_max,
                                           warp_sum, warp_acc);
    } else if (per_load == 4 && vectors == 4) {
        // f32 heads of 512 (16-bit heads up to G4_ATTN_MAX_D take at most two vectors a lane).
        if constexpr (per_load == 4) {
            attention_warp<T, VectorRow<T, 4>>(q_global_row, k_head, v_head, mask_row, first, end, d, scale,
                                               warp_max, warp_sum, warp_acc);
        }
    } else {
        for (int j = threadIdx.x; j < d; j += blockDim.x) q_row[j] = g4_to_f32(q_global_row[j]);
        __syncthreads();
        attention_warp<T, StridedRow<T>>(q_row, k_head, v_head, mask_row, first, end, d, scale, warp_max, warp_sum,
                                         warp_acc);
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

// Merges each query row's chunks (a chunk with no visible key has max −∞, sum 0 and zero
// outputs): a row's D outputs are spread over several blocks (blockDim elements each), so that
// the few rows of a decode step still fill the GPU when their chunks are many. The block finds
// the row's maximum and each chunk's weight once, in shared memory; each thread then sums its
// output over the chunks in chunk order with loads that do not wait on one another (each thread
// re-deriving the weights chunk by chunk made the merge walk its chunks latency-bound).
template <typename T>
__device__ void attention_merge(const float* partial_acc, const float* partial_stats, T* out, int d, int splits) {
    __shared__ float weights[G4_ATTN_MAX_SPLITS];
    const int blocks_per_row = (d + blockDim.x - 1) / blockDim.x;
    const int row = blockIdx.x / blocks_per_row;
    const int j = (blockIdx.x % blocks_per_row) * blockDim.x + threadIdx.x;
    const float* stats = partial_stats + (size_t)row * splits * 2;
    float row_max = -INFINITY;
    for (int c = threadIdx.x; c < splits; c += blockDim.x) row_max = fmaxf(row_max, stats[c * 2]);
    row_max = g4_block_max(row_max);
    for (int c = threadIdx.x; c < splits; c += blockDim.x) {
        weights[c] = stats[c * 2] == -INFINITY ? 0.0f : expf(stats[c * 2] - row_max);
    }
    __syncthreads();
    if (j >= d) return;
    const float* acc = partial_acc + (size_t)row * splits * d + j;
    float total = 0.0f, o = 0.0f;
#pragma unroll 8
    for (int c = 0; c < splits; ++c) {
        total += stats[c * 2 + 1] * weights[c];
        o += acc[(size_t)c * d] * weights[c];
    }
    out[(size_t)row * d + j] = g4_from_f32<T>(o / total);
}

// The GEMM path of long query blocks: between cuBLAS's q·kᵀ and p·v, probs = softmax(scores ·
// scale + mask) in one kernel, f32 inside as the composed arm's cast, add and softmax are, stored
// in T. scores and probs are [rows, keys] with row = ((b · kv_heads + kv head) · group + g) · seq
// + s, so a row's query is row % seq; mask is an additive f32 [seq, keys] or null. One warp per
// row, no block-wide barrier: a lane holds G4_SOFTMAX_VALUES logits of a tile of the row in
// registers, VEC consecutive keys per load (16 bytes of scores where the rows allow it). A row
// of one tile (a 512-token prefill's) is read once; longer rows take three passes (max, sum,
// quotient, as candle's softmax makes them), the later ones from cache. The sum and the quotient
// are those of the composed arm: exp(logit − row max), summed, then divided. A row with no
// visible key attends to nothing (zeros, not NaN).
#define G4_SOFTMAX_VALUES 16

template <typename T, int VEC>
__device__ __forceinline__ void softmax_tile(const T* in, const float* row_mask, int keys, int first, int lane,
                                             int lanes, float scale, float (&logits)[G4_SOFTMAX_VALUES]) {
#pragma unroll
    for (int c = 0; c < G4_SOFTMAX_VALUES / VEC; ++c) {
        const int t = first + (c * lanes + lane) * VEC;
        if (t < keys) {  // keys % VEC == 0: the whole vector is in the row
            const Pack<T, VEC> scores = *reinterpret_cast<const Pack<T, VEC>*>(in + t);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                logits[c * VEC + e] = g4_to_f32(scores.v[e]) * scale + (row_mask ? row_mask[t + e] : 0.0f);
            }
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) logits[c * VEC + e] = -INFINITY;
        }
    }
}

template <typename T, int VEC>
__device__ void attention_softmax(const T* scores, const float* mask, T* probs, int rows, int seq, int keys,
                                  float scale) {
    const int lanes = warpSize, lane = threadIdx.x % lanes;
    const int row = blockIdx.x * (blockDim.x / lanes) + threadIdx.x / lanes;
    if (row >= rows) return;  // the whole warp: its shuffles below stay full
    const T* in = scores + (size_t)row * keys;
    const float* row_mask = mask ? mask + (size_t)(row % seq) * keys : nullptr;
    const int tile = G4_SOFTMAX_VALUES * lanes;
    const bool one_tile = keys <= tile;
    float logits[G4_SOFTMAX_VALUES];
    float max = -INFINITY;
    for (int first = 0; first < keys; first += tile) {
        softmax_tile<T, VEC>(in, row_mask, keys, first, lane, lanes, scale, logits);
#pragma unroll
        for (int i = 0; i < G4_SOFTMAX_VALUES; ++i) max = fmaxf(max, logits[i]);
    }
    for (int m = lanes / 2; m > 0; m >>= 1) max = fmaxf(max, G4_SHFL_XOR(max, m));
    float sum = 0.0f;
    if (max != -INFINITY) {
        for (int first = 0; first < keys; first += tile) {
            if (!one_tile) softmax_tile<T, VEC>(in, row_mask, keys, first, lane, lanes, scale, logits);
#pragma unroll
            for (int i = 0; i < G4_SOFTMAX_VALUES; ++i) sum += expf(logits[i] - max);
        }
    }
    for (int m = lanes / 2; m > 0; m >>= 1) sum += G4_SHFL_XOR(sum, m);
    T* out = probs + (size_t)row * keys;
    for (int first = 0; first < keys; first += tile) {
        if (!one_tile) softmax_tile<T, VEC>(in, row_mask, keys, first, lane, lanes, scale, logits);
#pragma unroll
        for (int c = 0; c < G4_SOFTMAX_VALUES / VEC; ++c) {
            const int t = first + (c * lanes + lane) * VEC;
            if (t >= keys) continue;
            Pack<T, VEC> p;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                p.v[e] = g4_from_f32<T>(max == -INFINITY ? 0.0f : expf(logits[c * VEC + e] - max) / sum);
            }
            *reinterpret_cast<Pack<T, VEC>*>(out + t) = p;
        }
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
                                                           int rows, int seq, int keys, float scale) {       \
        G4_KERNEL_START();                                                                                   \
        attention_softmax<T, 1>(scores, mask, probs, rows, seq, keys, scale);                                \
    }                                                                                                        \
    extern "C" __global__ void g4_attention_softmax_vec_##NAME(const T* scores, const float* mask, T* probs, \
                                                               int rows, int seq, int keys, float scale) {   \
        G4_KERNEL_START();                                                                                   \
        attention_softmax<T, 16 / sizeof(T)>(scores, mask, probs, rows, seq, keys, scale);                   \
    }
G4_FOR_FLOAT_TYPES(G4_ATTENTION)
