// attention: softmax(q·kᵀ·scale + mask)·v with GQA by contiguous groups. Decode and short query
// blocks run split-K ("flash decoding"): each query row's keys are cut into `splits` chunks, one
// block per (row, chunk), so that a decode step with few heads still fills the GPU. Each warp of
// a block keeps an online softmax (f32) over its keys; the warps merge in the block, and with
// several chunks a second kernel merges the chunks' partial results. Longer query blocks run
// cuBLAS's GEMMs around attention_softmax (below).
// K/V may be views into a longer cache: rows are contiguous, heads are `kv_head_stride` elements
// apart. mask is an optional additive f32 [S, T]; a warp reads 32 mask entries at once and skips
// the hidden keys without touching K/V. A decode step's keys past its device-held position
// (`last_slot`, optional) are hidden too, and the chunks cut only the keys up to it: the
// visible keys of a mostly-empty cache buffer spread over every chunk, instead of filling the
// first few while the rest walk hidden keys (31B, 64 of a sliding ring's 1,024 rows visible:
// 9.7 µs less a layer, scripts/kernel-bench/chain_bench). Lanes load
// K/V rows 16 bytes at a time where the rows allow it (VectorRow below), else element by element.
#include "g4_compat.cuh"
#include "mma.cuh"

#define G4_ATTN_MAX_D 512
#define G4_ATTN_WARPS 4
// Chunks a row may be split into: the merge keeps one weight per chunk in shared memory.
#define G4_ATTN_MAX_SPLITS 1024
// Fewest keys a chunk takes where the position is on the device: the host sizes the grid for a
// full cache, and a decode step uses only the chunks its visible keys fill at this many each.
#define G4_ATTN_MIN_KEYS_PER_CHUNK 8
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

// The keys a row may see: all of them, or with the position on the device the slots up to it.
__device__ __forceinline__ int seen_keys(const unsigned* last_slot, int keys) {
    return last_slot ? (int)min((unsigned)keys, *last_slot + 1u) : keys;
}

// The chunks a row's keys are cut into: all `splits` (the grid's, sized for a full cache), or
// with the position on the device only as many as its `seen` keys fill at
// G4_ATTN_MIN_KEYS_PER_CHUNK each — so that a short context's few keys are not spread one or two
// to a block. The merge derives the same count.
__device__ __forceinline__ int used_splits(const unsigned* last_slot, int seen, int splits) {
    if (!last_slot) return splits;
    return max(1, min(splits, (seen + G4_ATTN_MIN_KEYS_PER_CHUNK - 1) / G4_ATTN_MIN_KEYS_PER_CHUNK));
}

// VECTORS > 0: the host has checked that q, K and V rows are VECTORS 16-byte vectors a lane, on
// 16-byte boundaries, so only that path is compiled (the lean entry points below); 0: the rows
// decide at run time.
template <typename T, int VECTORS = 0>
__device__ void attention_chunk(const T* q, const T* k, const T* v, const float* mask, const unsigned* last_slot,
                                T* out, float* partial_acc, float* partial_stats, int heads, int kv_heads, int seq,
                                int keys, int d, size_t kv_head_stride, float scale, int splits) {
    const int warp_size = warpSize;
    const int row = blockIdx.x / splits;  // (b * heads + h) * seq + s
    const int split = blockIdx.x % splits;
    const int s = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
    const int kvh = h / (heads / kv_heads);
    const T* k_head = k + ((size_t)b * kv_heads + kvh) * kv_head_stride;
    const T* v_head = v + ((size_t)b * kv_heads + kvh) * kv_head_stride;
    const int seen = seen_keys(last_slot, keys);
    const int used = used_splits(last_slot, seen, splits);
    if (split >= used) return;  // the whole block: the merge reads only the used chunks
    const int chunk = (seen + used - 1) / used;
    const int first = split * chunk, end = min(seen, first + chunk);
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
    if constexpr (VECTORS > 0) {
        attention_warp<T, VectorRow<T, VECTORS>>(q_global_row, k_head, v_head, mask_row, first, end, d, scale,
                                                 warp_max, warp_sum, warp_acc);
    } else if (vectors == 1) {
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

// Merges each query row's chunks, for this decode kernel and the flash kernel alike: partials
// [row][chunk][D] with each chunk's (max, sum) in natural-log units; a chunk with no visible key
// has max −∞ and adds nothing, and a row with none attends to nothing (zeros). A row's D outputs
// are spread over several blocks (blockDim elements each), so that the few rows of a decode
// step still fill the GPU when their chunks are many. The block finds the row's maximum and each
// chunk's weight once, in shared memory; each thread then sums its output over the chunks in
// chunk order with loads that do not wait on one another (each thread re-deriving the weights
// chunk by chunk made the merge walk its chunks latency-bound). Given the decode position
// (`last_slot`), it reads only the chunks the chunk kernel used (`used_splits`).
template <typename T>
__device__ void attention_merge(const float* partial_acc, const float* partial_stats, T* out, int d, int splits,
                                const unsigned* last_slot, int keys) {
    __shared__ float weights[G4_ATTN_MAX_SPLITS];
    const int blocks_per_row = (d + blockDim.x - 1) / blockDim.x;
    const int row = blockIdx.x / blocks_per_row;
    const int j = (blockIdx.x % blocks_per_row) * blockDim.x + threadIdx.x;
    const float* stats = partial_stats + (size_t)row * splits * 2;
    const int used = used_splits(last_slot, seen_keys(last_slot, keys), splits);
    float row_max = -INFINITY;
    for (int c = threadIdx.x; c < used; c += blockDim.x) row_max = fmaxf(row_max, stats[c * 2]);
    row_max = g4_block_max(row_max);
    for (int c = threadIdx.x; c < used; c += blockDim.x) {
        weights[c] = stats[c * 2] == -INFINITY ? 0.0f : expf(stats[c * 2] - row_max);
    }
    __syncthreads();
    if (j >= d) return;
    const float* acc = partial_acc + (size_t)row * splits * d + j;
    float total = 0.0f, o = 0.0f;
#pragma unroll 8
    for (int c = 0; c < used; ++c) {
        total += stats[c * 2 + 1] * weights[c];
        o += acc[(size_t)c * d] * weights[c];
    }
    out[(size_t)row * d + j] = g4_from_f32<T>(total > 0.0f ? o / total : 0.0f);
}

// The GEMM path of long query blocks: between cuBLAS's q·kᵀ and p·v, probs = softmax(scores ·
// scale + mask) in one kernel, f32 inside as the composed arm's cast, add and softmax are, stored
// in T. scores and probs are [rows, keys] with row = ((b · kv_heads + kv head) · group + g) · seq
// + s, so a row's query is row % seq; mask is an additive f32 [seq, keys] or null. One warp per
// row, no block-wide barrier: a lane holds G4_SOFTMAX_VALUES logits of a tile of the row in
// registers, VEC consecutive keys per load (16 bytes of scores where the rows allow it). A row
// of one tile (a 512-token prefill's) is read once; longer rows take three passes (max, sum,
// scale, as candle's softmax makes them), the later ones from cache. The sum and the scale are
// those of the composed arm (candle's CUDA softmax): exp(logit − row max), summed, then each
// exp times the sum's reciprocal. A quotient per key was slower by half: a masked key's 0 / sum
// and a far key's subnormal exp take the IEEE division's slow path, and random-weight logits
// spread far enough to make many. A row with no visible key attends to nothing (zeros, not NaN).
#define G4_SOFTMAX_VALUES 16

// A vector's VEC mask entries (zeros without a mask). The host takes the vector kernels only
// where mask rows are 16-byte aligned, so whole vectors load 16 bytes at a time: one scalar load
// per key put a row's mask through L1 a line per lane, ≈ 8× the requests of the scores' loads.
template <int VEC>
__device__ __forceinline__ void load_mask(const float* row_mask, int t, float (&masked)[VEC]) {
    if constexpr (VEC % 4 == 0) {
        if (row_mask) {
#pragma unroll
            for (int q = 0; q < VEC / 4; ++q) {
                const float4 m = *reinterpret_cast<const float4*>(row_mask + t + q * 4);
                masked[q * 4] = m.x, masked[q * 4 + 1] = m.y, masked[q * 4 + 2] = m.z, masked[q * 4 + 3] = m.w;
            }
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) masked[e] = row_mask ? row_mask[t + e] : 0.0f;
}

template <typename T, int VEC>
__device__ __forceinline__ void softmax_tile(const T* in, const float* row_mask, int keys, int first, int lane,
                                             int lanes, float scale, float (&logits)[G4_SOFTMAX_VALUES]) {
#pragma unroll
    for (int c = 0; c < G4_SOFTMAX_VALUES / VEC; ++c) {
        const int t = first + (c * lanes + lane) * VEC;
        if (t < keys) {  // keys % VEC == 0: the whole vector is in the row
            const Pack<T, VEC> scores = *reinterpret_cast<const Pack<T, VEC>*>(in + t);
            float masked[VEC];
            load_mask<VEC>(row_mask, t, masked);
#pragma unroll
            for (int e = 0; e < VEC; ++e) logits[c * VEC + e] = g4_to_f32(scores.v[e]) * scale + masked[e];
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) logits[c * VEC + e] = -INFINITY;
        }
    }
}

// ONE_TILE: the host knows the row is one tile (keys ≤ G4_SOFTMAX_VALUES × lanes): each exp is
// computed once and kept in registers, and no tile loop is compiled (a 512-token prefill's rows).
template <typename T, int VEC, bool ONE_TILE>
__device__ void attention_softmax(const T* scores, const float* mask, T* probs, int rows, int seq, int keys,
                                  float scale) {
    const int lanes = warpSize, lane = threadIdx.x % lanes;
    const int row = blockIdx.x * (blockDim.x / lanes) + threadIdx.x / lanes;
    if (row >= rows) return;  // the whole warp: its shuffles below stay full
    const T* in = scores + (size_t)row * keys;
    const float* row_mask = mask ? mask + (size_t)(row % seq) * keys : nullptr;
    const int tile = G4_SOFTMAX_VALUES * lanes;
    float logits[G4_SOFTMAX_VALUES];
    float max = -INFINITY;
    for (int first = 0; first < (ONE_TILE ? 1 : keys); first += tile) {
        softmax_tile<T, VEC>(in, row_mask, keys, first, lane, lanes, scale, logits);
#pragma unroll
        for (int i = 0; i < G4_SOFTMAX_VALUES; ++i) max = fmaxf(max, logits[i]);
    }
    for (int m = lanes / 2; m > 0; m >>= 1) max = fmaxf(max, G4_SHFL_XOR(max, m));
    const bool visible = max != -INFINITY;  // else the row attends to nothing: zeros, not NaN
    float sum = 0.0f;
    for (int first = 0; first < (ONE_TILE ? 1 : keys); first += tile) {
        if (!ONE_TILE) softmax_tile<T, VEC>(in, row_mask, keys, first, lane, lanes, scale, logits);
#pragma unroll
        for (int i = 0; i < G4_SOFTMAX_VALUES; ++i) {
            const float e = visible ? expf(logits[i] - max) : 0.0f;
            sum += e;
            if (ONE_TILE) logits[i] = e;
        }
    }
    for (int m = lanes / 2; m > 0; m >>= 1) sum += G4_SHFL_XOR(sum, m);
    const float inverse = visible ? 1.0f / sum : 0.0f;
    T* out = probs + (size_t)row * keys;
    for (int first = 0; first < (ONE_TILE ? 1 : keys); first += tile) {
        if (!ONE_TILE) softmax_tile<T, VEC>(in, row_mask, keys, first, lane, lanes, scale, logits);
#pragma unroll
        for (int c = 0; c < G4_SOFTMAX_VALUES / VEC; ++c) {
            const int t = first + (c * lanes + lane) * VEC;
            if (t >= keys) continue;
            Pack<T, VEC> p;
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float x = logits[c * VEC + e];
                const float exp = ONE_TILE ? x : (visible ? expf(x - max) : 0.0f);
                p.v[e] = g4_from_f32<T>(exp * inverse);
            }
            *reinterpret_cast<Pack<T, VEC>*>(out + t) = p;
        }
    }
}

// The chunk kernel's entries: the general one (every row layout; 128 registers, so four of its
// 128-thread blocks fill a multiprocessor's register file) and lean ones for rows of one or two
// 16-byte vectors a lane (63 and 80 registers, sm_90), which leave room for the kernels after
// them to start early.
#define G4_ATTENTION_CHUNK(ENTRY, T, VECTORS, MIN_BLOCKS)                                                     \
    extern "C" __global__ void __launch_bounds__(G4_ATTN_MAX_THREADS, MIN_BLOCKS)                             \
        ENTRY(const T* q, const T* k, const T* v, const float* mask, const unsigned* last_slot, T* out,       \
              float* partial_acc, float* partial_stats, int heads, int kv_heads, int seq, int keys, int d,    \
              size_t kv_head_stride, float scale, int splits) {                                               \
        G4_KERNEL_START();                                                                                     \
        attention_chunk<T, VECTORS>(q, k, v, mask, last_slot, out, partial_acc, partial_stats, heads, kv_heads, \
                                    seq, keys, d, kv_head_stride, scale, splits);                              \
    }

#define G4_ATTENTION(NAME, T)                                                                               \
    G4_ATTENTION_CHUNK(g4_attention_##NAME, T, 0, 2)                                                         \
    G4_ATTENTION_CHUNK(g4_attention_vec1_##NAME, T, 1, 4)                                                    \
    G4_ATTENTION_CHUNK(g4_attention_vec2_##NAME, T, 2, 3)                                                    \
    extern "C" __global__ void g4_attention_merge_##NAME(const float* partial_acc, const float* partial_stats, \
                                                         T* out, int d, int splits, const unsigned* last_slot, \
                                                         int keys) {                                         \
        G4_KERNEL_START();                                                                                   \
        attention_merge<T>(partial_acc, partial_stats, out, d, splits, last_slot, keys);                     \
    }                                                                                                        \
    extern "C" __global__ void g4_attention_softmax_##NAME(const T* scores, const float* mask, T* probs,     \
                                                           int rows, int seq, int keys, float scale) {       \
        G4_KERNEL_START();                                                                                   \
        attention_softmax<T, 1, false>(scores, mask, probs, rows, seq, keys, scale);                         \
    }                                                                                                        \
    extern "C" __global__ void g4_attention_softmax_vec_##NAME(const T* scores, const float* mask, T* probs, \
                                                               int rows, int seq, int keys, float scale) {   \
        G4_KERNEL_START();                                                                                   \
        attention_softmax<T, 16 / sizeof(T), false>(scores, mask, probs, rows, seq, keys, scale);            \
    }                                                                                                        \
    extern "C" __global__ void g4_attention_softmax_vec_one_tile_##NAME(const T* scores, const float* mask,  \
                                                                        T* probs, int rows, int seq, int keys, \
                                                                        float scale) {                       \
        G4_KERNEL_START();                                                                                   \
        attention_softmax<T, 16 / sizeof(T), true>(scores, mask, probs, rows, seq, keys, scale);             \
    }
G4_FOR_FLOAT_TYPES(G4_ATTENTION)

#if !defined(__HIPCC__)
// Prefill attention in one kernel ("flash"): scores, softmax and p·v per tile of keys, on tensor
// cores (mma.sync), with an online softmax in f32, so no score matrix is ever written. One block
// of G4_FLASH_WARPS warps takes G4_FLASH_QUERIES query rows of one head (16 per warp) and some
// of its output columns: q·kᵀ runs over the whole head_dim in every block, which keeps a warp's
// accumulators (16 rows × its columns) in registers at head_dim 512 too. q's tile
// stays in shared memory. Tiles of keys that no query of the block sees are skipped: the mask's
// tile map (g4_flash_mask_map, one byte per query tile × key tile) says which; the visible ones
// stream through two stages of shared memory (K, V and the mask's tile, by cp.async), the next
// loading while the warps work on the current one. Keys past the end count as hidden; queries past
// the end are computed and not written. Probabilities go through T (the mma's input)
// unnormalised, and the row sum divides at the end, in f32. A row with no visible key attends to
// nothing (zeros), as attention_softmax's rows do. out is token-major [B, S, heads, D].
// CUDA only (mma.sync): HIP takes the GEMM path.
#define G4_FLASH_QUERIES 64
#define G4_FLASH_WARPS 4
#define G4_FLASH_KEYS 32
// Output columns per block: at head_dim 512 (G4_FLASH_WIDE_D) half the head, which halves the
// blocks that recompute its scores; below it, 128, so that an E4B prefill (8 heads) still has a
// block per multiprocessor.
#define G4_FLASH_DV 128
#define G4_FLASH_WIDE_D 512
#define G4_FLASH_WIDE_DV 256

// Shared memory: q's tile, then two stages of K, V and mask tiles, then the tile map's bits.
// Rows are padded (8 elements) so that ldmatrix's eight rows of one 16-byte column, and a warp's
// mask reads, fall in different banks. Two blocks fit a multiprocessor up to head_dim 256.
template <int D> struct FlashTiles {
    static constexpr int dv = D >= G4_FLASH_WIDE_D ? G4_FLASH_WIDE_DV : G4_FLASH_DV;
    static constexpr int keys = G4_FLASH_KEYS;
    static constexpr int row = D + 8;
    static constexpr int v_row = dv + 8;
    static constexpr int mask_row = keys + 8;
    static constexpr int q_bytes = G4_FLASH_QUERIES * row * 2;
    static constexpr int k_bytes = keys * row * 2, v_bytes = keys * v_row * 2;
    static constexpr int stage_bytes = k_bytes + v_bytes + G4_FLASH_QUERIES * mask_row * 4;
    static constexpr int shared_bytes = q_bytes + 2 * stage_bytes;
};

// map[qt · key_tiles + kt] = whether any query of tile qt sees any key of tile kt: one block per
// tile, each thread four runs of four keys (one 16-byte load each where rows allow).
#define G4_FLASH_MAP_THREADS 128
extern "C" __global__ void __launch_bounds__(G4_FLASH_MAP_THREADS)
    g4_flash_mask_map(const float* mask, uint8_t* map, int seq, int keys, int key_tiles) {
    G4_KERNEL_START();
    const int tile = blockIdx.x, q0 = tile / key_tiles * G4_FLASH_QUERIES;
    const int col = tile % key_tiles * G4_FLASH_KEYS + threadIdx.x % (G4_FLASH_KEYS / 4) * 4;
    constexpr int ROWS_PER_PASS = G4_FLASH_MAP_THREADS / (G4_FLASH_KEYS / 4);
    const bool vectors = keys % 4 == 0 && (uintptr_t)mask % 16 == 0;
    bool visible = false;
#pragma unroll
    for (int pass = 0; pass < G4_FLASH_QUERIES / ROWS_PER_PASS; ++pass) {
        const int row = q0 + pass * ROWS_PER_PASS + threadIdx.x / (G4_FLASH_KEYS / 4);
        if (row >= seq || col >= keys) continue;
        const float* run = mask + (size_t)row * keys + col;
        if (vectors) {
            const float4 m = *reinterpret_cast<const float4*>(run);
            visible |= m.x != -INFINITY || m.y != -INFINITY || m.z != -INFINITY || m.w != -INFINITY;
        } else {
            for (int e = 0; e < 4 && col + e < keys; ++e) visible |= run[e] != -INFINITY;
        }
    }
    visible = __syncthreads_or(visible);
    if (threadIdx.x == 0) map[tile] = visible;
}

// With `splits` > 1 each query tile's visible key tiles are dealt out in `splits` even runs, one
// block each (a 512-token prefill of 8 heads has too few query tiles to keep the GPU busy); the
// blocks write unnormalised partial rows and each row's (max, sum) in the decode kernel's split
// layout, for g4_attention_merge_* to combine (rows token-major, as out's).
template <typename T, int D>
__device__ void flash_attention(const T* q, const T* k, const T* v, const float* mask, const uint8_t* map, T* out,
                                float* partial_acc, float* partial_stats, int heads, int kv_heads, int seq,
                                int keys, size_t q_batch_stride, size_t q_head_stride, size_t q_row_stride,
                                size_t kv_batch_stride, size_t kv_head_stride, float scale, int splits) {
    typedef FlashTiles<D> Tiles;
    constexpr int BK = Tiles::keys, ROW = Tiles::row, V_ROW = Tiles::v_row, MASK_ROW = Tiles::mask_row;
    constexpr int DV = Tiles::dv, CHUNKS = D / DV, N_TILES = DV / 8;
    constexpr int THREADS = G4_FLASH_WARPS * 32, ROW_CHUNKS = D / 8, V_CHUNKS = DV / 8;
    extern __shared__ __align__(128) unsigned char flash_shared[];
    T* q_tile = reinterpret_cast<T*>(flash_shared);
    auto k_tile = [&](int stage) { return reinterpret_cast<T*>(flash_shared + Tiles::q_bytes + stage * Tiles::stage_bytes); };
    auto v_tile = [&](int stage) { return reinterpret_cast<T*>(flash_shared + Tiles::q_bytes + stage * Tiles::stage_bytes + Tiles::k_bytes); };
    auto mask_tile = [&](int stage) {
        return reinterpret_cast<float*>(flash_shared + Tiles::q_bytes + stage * Tiles::stage_bytes + Tiles::k_bytes + Tiles::v_bytes);
    };
    unsigned* visible_bits = reinterpret_cast<unsigned*>(flash_shared + Tiles::shared_bytes);
    // Blocks in order of (batch, head, query tile from the last, column chunk, split): the last
    // query tiles see the most keys under a causal mask, so they start first.
    const int q_tiles = (seq + G4_FLASH_QUERIES - 1) / G4_FLASH_QUERIES, key_tiles = (keys + BK - 1) / BK;
    int block = blockIdx.x;
    const int split = block % splits;
    block /= splits;
    const int chunk = block % CHUNKS;
    block /= CHUNKS;
    const int q_tile_index = q_tiles - 1 - block % q_tiles, q0 = q_tile_index * G4_FLASH_QUERIES;
    block /= q_tiles;
    const int h = block % heads, b = block / heads;
    const int kv_h = h / (heads / kv_heads), dv0 = chunk * DV;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const T* q_rows = q + b * q_batch_stride + h * q_head_stride;
    const T* k_rows = k + b * kv_batch_stride + kv_h * kv_head_stride;
    const T* v_rows = v + b * kv_batch_stride + kv_h * kv_head_stride;
    const bool mask_vectors = keys % 4 == 0 && (uintptr_t)mask % 16 == 0;

    for (int i = tid; i < G4_FLASH_QUERIES * ROW_CHUNKS; i += THREADS) {
        const int r = i / ROW_CHUNKS, c = i % ROW_CHUNKS;
        const bool valid = q0 + r < seq;
        g4_cp_async16(q_tile + r * ROW + c * 8, q_rows + (valid ? (q0 + r) * q_row_stride : 0) + c * 8, valid);
    }
    g4_cp_async_commit();
    // The visible key tiles of this query tile, one bit each.
    const int words = (key_tiles + 31) / 32;
    if (mask != nullptr) {
        for (int w = warp; w < words; w += G4_FLASH_WARPS) {
            const int kt = 32 * w + lane;
            const unsigned bits = __ballot_sync(0xffffffffu, kt < key_tiles && map[(size_t)q_tile_index * key_tiles + kt]);
            if (lane == 0) visible_bits[w] = bits;
        }
        __syncthreads();
    }
    auto next_visible = [&](int after) {  // the first visible key tile past `after`; key_tiles: none
        const int first = after + 1;
        if (mask == nullptr || first >= key_tiles) return min(first, key_tiles);
        int w = first / 32;
        unsigned bits = visible_bits[w] & (~0u << (first % 32));
        while (bits == 0 && ++w < words) bits = visible_bits[w];
        return bits == 0 ? key_tiles : 32 * w + __ffs(bits) - 1;
    };
    // This block's run of the visible tiles: ranks [first_rank, first_rank + tiles).
    int visible_count = key_tiles;
    if (mask != nullptr) {
        visible_count = 0;
        for (int w = 0; w < words; ++w) visible_count += __popc(visible_bits[w]);
    }
    const int per_split = (visible_count + splits - 1) / splits;
    const int first_rank = min(visible_count, split * per_split);
    int tiles = min(visible_count, first_rank + per_split) - first_rank;
    auto tile_of_rank = [&](int rank) {  // the visible tile with `rank` visible tiles before it
        if (mask == nullptr) return rank;
        int w = 0;
        while (rank >= __popc(visible_bits[w])) rank -= __popc(visible_bits[w++]);
        unsigned bits = visible_bits[w];
        for (; rank > 0; --rank) bits &= bits - 1;
        return 32 * w + __ffs(bits) - 1;
    };
    auto load_stage = [&](int stage, int kt) {
        const int k0 = kt * BK;
        T* ks = k_tile(stage);
        T* vs = v_tile(stage);
        for (int i = tid; i < BK * ROW_CHUNKS; i += THREADS) {
            const int r = i / ROW_CHUNKS, c = i % ROW_CHUNKS;
            const bool valid = k0 + r < keys;
            g4_cp_async16(ks + r * ROW + c * 8, k_rows + (valid ? (size_t)(k0 + r) * D : 0) + c * 8, valid);
        }
        for (int i = tid; i < BK * V_CHUNKS; i += THREADS) {
            const int r = i / V_CHUNKS, c = i % V_CHUNKS;
            const bool valid = k0 + r < keys;
            g4_cp_async16(vs + r * V_ROW + c * 8, v_rows + (valid ? (size_t)(k0 + r) * D : 0) + dv0 + c * 8, valid);
        }
        if (mask == nullptr) return;
        float* ms = mask_tile(stage);
        constexpr int MASK_CHUNKS = BK / 4;
        for (int i = tid; i < G4_FLASH_QUERIES * MASK_CHUNKS; i += THREADS) {
            const int r = i / MASK_CHUNKS, col = k0 + i % MASK_CHUNKS * 4;
            float* dst = ms + r * MASK_ROW + i % MASK_CHUNKS * 4;
            const float* src = mask + (size_t)(q0 + r) * keys + col;
            if (mask_vectors) {
                const bool valid = q0 + r < seq && col < keys;
                g4_cp_async16(dst, valid ? src : mask, valid);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) dst[e] = q0 + r < seq && col + e < keys ? src[e] : 0.0f;
            }
        }
    };

    const float log2e = 1.4426950408889634f, log2_scale = scale * log2e;
    const int row_in_tile = warp * 16 + lane / 4;  // this lane's rows: row_in_tile and 8 more
    float acc[N_TILES][4];
#pragma unroll
    for (int n = 0; n < N_TILES; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    int kt = tiles > 0 ? tile_of_rank(first_rank) : key_tiles, stage = 0;
    if (tiles > 0) load_stage(0, kt);
    g4_cp_async_commit();
    while (tiles-- > 0) {
        const int next = tiles > 0 ? next_visible(kt) : key_tiles;
        if (next < key_tiles) load_stage(stage ^ 1, next);
        g4_cp_async_commit();
        g4_cp_async_wait<1>();  // q and this stage
        __syncthreads();
        const T* ks = k_tile(stage);
        const T* vs = v_tile(stage);
        const float* ms = mask_tile(stage);
        const int k0 = kt * BK;

        float s[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll 4
        for (int kk = 0; kk < D / 16; ++kk) {
            unsigned a[4];
            g4_ldmatrix_x4(a, q_tile + (warp * 16 + lane % 16) * ROW + kk * 16 + lane / 16 * 8);
#pragma unroll
            for (int j = 0; j < BK / 16; ++j) {
                unsigned b[4];
                g4_ldmatrix_x4(b, ks + (16 * j + lane % 8 + lane / 16 * 8) * ROW + kk * 16 + lane / 8 % 2 * 8);
                g4_mma_16816<T>(s[2 * j], a, b[0], b[1]);
                g4_mma_16816<T>(s[2 * j + 1], a, b[2], b[3]);
            }
        }
        // Scores in log2 units, masked; a row's four lanes (lane % 4) share its maximum.
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) {
            const int col = 8 * j + 2 * (lane % 4);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float2 bias = make_float2(0.0f, 0.0f);
                if (mask != nullptr) bias = *reinterpret_cast<const float2*>(ms + (row_in_tile + 8 * half) * MASK_ROW + col);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float value = k0 + col + e < keys ? s[j][2 * half + e] * log2_scale + (e ? bias.y : bias.x) * log2e
                                                            : -INFINITY;
                    s[j][2 * half + e] = value;
                    tile_max[half] = fmaxf(tile_max[half], value);
                }
            }
        }
        float base[2], correction[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            tile_max[half] = fmaxf(tile_max[half], G4_SHFL_XOR(tile_max[half], 1));
            tile_max[half] = fmaxf(tile_max[half], G4_SHFL_XOR(tile_max[half], 2));
            const float new_max = fmaxf(row_max[half], tile_max[half]);
            base[half] = new_max == -INFINITY ? 0.0f : new_max;  // no key seen yet: every p is 0
            correction[half] = exp2f(row_max[half] - base[half]);
            row_max[half] = new_max;
            row_sum[half] *= correction[half];
        }
#pragma unroll
        for (int n = 0; n < N_TILES; ++n) {
            acc[n][0] *= correction[0];
            acc[n][1] *= correction[0];
            acc[n][2] *= correction[1];
            acc[n][3] *= correction[1];
        }
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[j][e] = exp2f(s[j][e] - base[e / 2]);
                row_sum[e / 2] += s[j][e];
            }
        }
        // p·v: the scores' accumulator layout is the A fragment's, two 8-key tiles per 16 keys.
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const unsigned a[4] = {g4_pack2<T>(s[2 * kk][0], s[2 * kk][1]), g4_pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                   g4_pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   g4_pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < N_TILES / 2; ++n) {
                unsigned b[4];
                g4_ldmatrix_x4_trans(b, vs + (16 * kk + lane % 8 + lane / 8 % 2 * 8) * V_ROW + 16 * n + lane / 16 * 8);
                g4_mma_16816<T>(acc[2 * n], a, b[0], b[1]);
                g4_mma_16816<T>(acc[2 * n + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();  // every warp is done with this stage before the next load refills it
        kt = next;
        stage ^= 1;
    }
    g4_cp_async_wait<0>();  // q's copy, when no tile was visible
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        row_sum[half] += G4_SHFL_XOR(row_sum[half], 1);
        row_sum[half] += G4_SHFL_XOR(row_sum[half], 2);
        const int row = q0 + row_in_tile + 8 * half;
        if (row >= seq) continue;
        const size_t out_index = ((size_t)b * seq + row) * heads + h;
        if (partial_acc != nullptr) {  // [row][split]; the maximum from log2 to natural-log units
            const size_t partial = out_index * splits + split;
            if (lane % 4 == 0) {
                partial_stats[2 * partial] = row_max[half] * 0.6931471805599453f;
                partial_stats[2 * partial + 1] = row_sum[half];
            }
            float* acc_row = partial_acc + partial * D + dv0 + 2 * (lane % 4);
#pragma unroll
            for (int n = 0; n < N_TILES; ++n)
                *reinterpret_cast<float2*>(acc_row + 8 * n) = make_float2(acc[n][2 * half], acc[n][2 * half + 1]);
            continue;
        }
        const float inverse = row_sum[half] > 0.0f ? 1.0f / row_sum[half] : 0.0f;
        T* out_row = out + out_index * D + dv0 + 2 * (lane % 4);
#pragma unroll
        for (int n = 0; n < N_TILES; ++n) {
            *reinterpret_cast<unsigned*>(out_row + 8 * n) =
                g4_pack2<T>(acc[n][2 * half] * inverse, acc[n][2 * half + 1] * inverse);
        }
    }
}

#define G4_FLASH_ATTENTION(NAME, T, D)                                                                              \
    extern "C" __global__ void __launch_bounds__(G4_FLASH_WARPS * 32)                                             \
        g4_flash_attention_d##D##_##NAME(const T* q, const T* k, const T* v, const float* mask, const uint8_t* map, \
                                         T* out, float* partial_acc, float* partial_stats, int heads,             \
                                         int kv_heads, int seq, int keys, size_t q_batch_stride,                 \
                                         size_t q_head_stride, size_t q_row_stride, size_t kv_batch_stride,      \
                                         size_t kv_head_stride, float scale, int splits) {                       \
        G4_KERNEL_START();                                                                                          \
        flash_attention<T, D>(q, k, v, mask, map, out, partial_acc, partial_stats, heads, kv_heads, seq,          \
                              keys, q_batch_stride, q_head_stride, q_row_stride, kv_batch_stride,                \
                              kv_head_stride, scale, splits);                                                    \
    }
#define G4_FLASH_ATTENTION_SIZES(NAME, T) \
    G4_FLASH_ATTENTION(NAME, T, 128) G4_FLASH_ATTENTION(NAME, T, 256) G4_FLASH_ATTENTION(NAME, T, 512)
G4_FLASH_ATTENTION_SIZES(bf16, g4_bf16)
G4_FLASH_ATTENTION_SIZES(f16, g4_f16)
#endif
