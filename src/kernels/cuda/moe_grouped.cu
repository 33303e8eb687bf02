// The MoE prefill on the device (moe_experts' grouped arm): the routing sorted by expert, then
// each projection of every routed row as one grouped GEMM launch that reads the per-expert row
// offsets on the device — so no host round trip per layer. Tensor cores through mma.sync, which
// hipcc does not have: CUDA only (the HIP build takes the host-sorted path).
#include "g4_compat.cuh"
#include "e4m3.cuh"
#include "mma.cuh"

#if !defined(__HIPCC__)

// Experts times warps the sort's per-warp table holds (32 KiB of shared memory).
#define G4_ROUTE_TABLE 8192

// One block sorts `ids [routed]` (`slots` per token) by expert, keeping slot order within each
// expert: offsets[e] is expert e's first row, rows[r] the token of row r, positions[i] the row of
// slot i. Each of the first `warps` warps owns a contiguous segment of the slots: it counts its
// segment per expert, a scan over (expert, warp) gives each warp its first row per expert, and the
// warp then writes its segment 32 slots at a time, ranking equal ids among its lanes. Ids out of
// range get no row (position 0); the rows no slot filled read token 0.
extern "C" __global__ void __launch_bounds__(1024)
    g4_moe_route(const uint32_t* ids, uint32_t* offsets, uint32_t* rows, uint32_t* positions, int routed,
                 int slots, int experts) {
    G4_KERNEL_START();
    __shared__ uint32_t table[G4_ROUTE_TABLE];  // [warp][expert]: counts, then first rows
    __shared__ uint32_t totals[1024];
    const int tid = threadIdx.x, lane = tid % warpSize, warp = tid / warpSize;
    const int warps = min((int)(blockDim.x / warpSize), G4_ROUTE_TABLE / experts);
    const int segment = (routed + warps - 1) / warps;
    for (int i = tid; i < warps * experts; i += blockDim.x) table[i] = 0;
    __syncthreads();
    if (warp < warps) {
        const int end = min(routed, (warp + 1) * segment);
        for (int i = warp * segment + lane; i < end; i += warpSize) {
            const uint32_t e = ids[i];
            if (e < (uint32_t)experts) atomicAdd(&table[warp * experts + e], 1u);
        }
    }
    __syncthreads();
    for (int e = tid; e < experts; e += blockDim.x) {
        uint32_t running = 0;
        for (int w = 0; w < warps; ++w) {
            const uint32_t count = table[w * experts + e];
            table[w * experts + e] = running;
            running += count;
        }
        totals[e] = running;
    }
    __syncthreads();
    // An inclusive scan of the totals over experts (at most 1024: one thread each).
    for (int step = 1; step < experts; step <<= 1) {
        const uint32_t before = tid < experts && tid >= step ? totals[tid - step] : 0;
        __syncthreads();
        if (tid < experts) totals[tid] += before;
        __syncthreads();
    }
    if (tid < experts) offsets[tid + 1] = totals[tid];
    if (tid == 0) offsets[0] = 0;
    for (int i = tid; i < warps * experts; i += blockDim.x) {
        const int e = i % experts;
        table[i] += e > 0 ? totals[e - 1] : 0;
    }
    const uint32_t filled = totals[experts - 1];
    for (int r = filled + tid; r < routed; r += blockDim.x) rows[r] = 0;
    __syncthreads();
    if (warp < warps) {
        const unsigned below = (1u << lane) - 1;
        const int start = warp * segment, end = min(routed, start + segment);
        for (int first = start; first < end; first += warpSize) {
            const int i = first + lane;
            // Lanes past the end take an id no slot has, so they rank among themselves only.
            const uint32_t e = i < end ? ids[i] : 0xffffffffu;
            const unsigned same = __match_any_sync(0xffffffffu, e);  // the lanes holding this id
            if (i < end) {
                if (e < (uint32_t)experts) {
                    const uint32_t row = table[warp * experts + e] + __popc(same & below);
                    rows[row] = i / slots;
                    positions[i] = row;
                } else {
                    positions[i] = 0;
                }
            }
            __syncwarp();
            // The lowest lane of each id moves that id's next row past this group's.
            if (i < end && e < (uint32_t)experts && (same & below) == 0)
                table[warp * experts + e] += __popc(same);
            __syncwarp();
        }
    }
}

// The grouped GEMM: out rows [offsets[e], offsets[e + 1]) = x rows × w[e]ᵀ. One block of 8 warps
// per (expert, G4_GROUPED_COLS weight rows); it streams that slice of the expert's weights once per
// G4_GROUPED_ROWS of the expert's rows (a 512-token piece gives each expert a few dozen), through
// a cp.async pipeline of G4_GROUPED_STAGES stages of 64 along K. Shared tiles have 64-element
// rows whose 16-byte chunks are XOR-swizzled by row, so that ldmatrix reads 8 rows of one chunk
// without bank conflicts. Warps: 2 (32 routed rows each) × 4 (32 weight rows each); a warp skips
// the 16-row fragments past its expert's rows. The routed rows are the mma's M, the weight rows
// its N, so each lane's outputs are pairs of adjacent columns. e4m3 weights (an FP8 checkpoint's
// experts, one f32 scale per weight row) arrive raw in the pipeline and are decoded once per K
// step into one shared tile of T, which the warps read as they read dense weights; the row
// scale multiplies each sum.
#define G4_GROUPED_ROWS 64
#define G4_GROUPED_COLS 128
#define G4_GROUPED_BK 64
#define G4_GROUPED_STAGES 4
#define G4_GROUPED_THREADS 256
#define G4_GROUPED_X_TILE (G4_GROUPED_ROWS * G4_GROUPED_BK * 2)
#define G4_GROUPED_W_TILE (G4_GROUPED_COLS * G4_GROUPED_BK * 2)
// Dynamic shared memory (the host raises the launch's limit to it): 96 KiB dense; e4m3 stages
// hold half the weight bytes, plus the decoded tile: 80 KiB.
#define G4_GROUPED_SHARED_BYTES (G4_GROUPED_STAGES * (G4_GROUPED_X_TILE + G4_GROUPED_W_TILE))
#define G4_GROUPED_FP8_SHARED_BYTES (G4_GROUPED_STAGES * (G4_GROUPED_X_TILE + G4_GROUPED_W_TILE / 2) + G4_GROUPED_W_TILE)

__device__ __forceinline__ int grouped_swizzled(int row, int chunk) { return row * G4_GROUPED_BK + ((chunk ^ (row & 7)) << 3); }

// Eight values as one 16-byte vector of T.
template <typename T> __device__ __forceinline__ uint4 grouped_pack8(const float* v) {
    uint4 packed;
    T* out = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = g4_from_f32<T>(v[i]);
    return packed;
}

// x: the routed rows' source, [tokens, k] read through `row_tokens` (the routing's token of each
// row: the gather fused into the loads) or, without it, [routed, k] in expert order. w [E, rows_w,
// k] of W (T, or uint8_t for e4m3 with `scale [E, rows_w]`); out [routed, n]. GELU_MUL: w's rows
// are gate rows then up rows (rows_w = 2n) and out is gelu_tanh(gate) ⊙ up, each block taking 64
// gate rows and the 64 up rows of the same columns, rounded where the composed arm stores (the
// projection in T, the GELU in T). Otherwise rows_w = n. Rows are whole 16-byte vectors.
template <typename T, typename W, bool GELU_MUL>
__device__ void moe_grouped_gemm(const T* x, const uint32_t* row_tokens, const W* w, const float* scale, T* out,
                                 const uint32_t* offsets, int n, int k, int column_blocks) {
    constexpr bool FP8 = sizeof(W) == 1;
    extern __shared__ __align__(128) unsigned char grouped_shared[];
    constexpr int STAGE_BYTES = G4_GROUPED_X_TILE + (FP8 ? G4_GROUPED_W_TILE / 2 : G4_GROUPED_W_TILE);
    // e4m3: the decoded weights of the current K step, after the stages.
    T* decoded = reinterpret_cast<T*>(grouped_shared + G4_GROUPED_STAGES * STAGE_BYTES);
    const int e = blockIdx.x / column_blocks, column_block = blockIdx.x % column_blocks;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    if (rows <= 0) return;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_rows = warp / 4 * 32, warp_cols = warp % 4;
    // The weight rows of shared rows 0..127 and the output column each stands for.
    const int columns_per_block = GELU_MUL ? G4_GROUPED_COLS / 2 : G4_GROUPED_COLS;
    const int column0 = column_block * columns_per_block;
    const int rows_w = GELU_MUL ? 2 * n : n;
    const W* expert_w = w + (size_t)e * rows_w * k;
    auto weight_row = [&](int s) {  // the expert's weight row behind shared row s; -1: none
        const int column = column0 + (GELU_MUL ? s % 64 : s);
        return column >= n ? -1 : GELU_MUL && s >= 64 ? n + column : column;
    };
    // Per stage each thread copies one 16-byte chunk of 2 routed rows, and of 4 dense weight rows
    // (8 chunks a row) or 2 e4m3 ones (4 chunks a row).
    constexpr int W_CHUNKS = FP8 ? 4 : 8, W_COPIES = G4_GROUPED_COLS * W_CHUNKS / G4_GROUPED_THREADS;
    const int chunk = tid % 8, w_chunk = tid % W_CHUNKS;
    const W* w_src[W_COPIES];
    bool w_valid[W_COPIES];
#pragma unroll
    for (int i = 0; i < W_COPIES; ++i) {
        const int row = weight_row(tid / W_CHUNKS + G4_GROUPED_THREADS / W_CHUNKS * i);
        w_valid[i] = row >= 0;
        w_src[i] = expert_w + (size_t)max(row, 0) * k + w_chunk * (16 / sizeof(W));
    }
    // The weight rows this warp multiplies: two 16-row groups of shared rows.
    const int w_group0 = GELU_MUL ? 16 * warp_cols : 32 * warp_cols;
    const int w_group1 = GELU_MUL ? 64 + 16 * warp_cols : 32 * warp_cols + 16;
    const int k_tiles = (k + G4_GROUPED_BK - 1) / G4_GROUPED_BK;
    for (int m0 = 0; m0 < rows; m0 += G4_GROUPED_ROWS) {
        const T* x_src[2];
        bool x_valid[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = m0 + tid / 8 + 32 * i;
            x_valid[i] = r < rows;
            const uint32_t source = x_valid[i] ? (row_tokens ? row_tokens[first + r] : first + r) : 0;
            x_src[i] = x + (size_t)source * k + chunk * 8;
        }
        auto load = [&](int stage, int kt) {
            unsigned char* base = grouped_shared + stage * STAGE_BYTES;
            T* xs = reinterpret_cast<T*>(base);
            const int k0 = kt * G4_GROUPED_BK;
            const bool x_k_valid = k0 + chunk * 8 < k;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                g4_cp_async16(xs + grouped_swizzled(tid / 8 + 32 * i, chunk), x_src[i] + (x_k_valid ? k0 : 0),
                                   x_valid[i] && x_k_valid);
            }
            const bool w_k_valid = k0 + w_chunk * (16 / (int)sizeof(W)) < k;
#pragma unroll
            for (int i = 0; i < W_COPIES; ++i) {
                const int s = tid / W_CHUNKS + G4_GROUPED_THREADS / W_CHUNKS * i;
                // e4m3 rows stay raw (64 bytes, unswizzled) until they are decoded.
                void* dst = FP8 ? (void*)(base + G4_GROUPED_X_TILE + s * G4_GROUPED_BK + w_chunk * 16)
                                : (void*)(reinterpret_cast<T*>(base + G4_GROUPED_X_TILE) + grouped_swizzled(s, w_chunk));
                g4_cp_async16(dst, w_src[i] + (w_k_valid ? k0 : 0), w_valid[i] && w_k_valid);
            }
        };
        // 16-row fragments of routed rows this warp has (the same in every lane).
        const int fragments = max(0, min(2, (rows - m0 - warp_rows + 15) / 16));
        float acc[2][4][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;
            }
        }
#pragma unroll
        for (int s = 0; s < G4_GROUPED_STAGES - 1; ++s) {
            if (s < k_tiles) load(s, s);
            g4_cp_async_commit();
        }
        for (int kt = 0; kt < k_tiles; ++kt) {
            g4_cp_async_wait<G4_GROUPED_STAGES - 2>();
            __syncthreads();
            const int next = kt + G4_GROUPED_STAGES - 1;
            if (next < k_tiles) load(next % G4_GROUPED_STAGES, next);
            g4_cp_async_commit();
            const unsigned char* base = grouped_shared + (kt % G4_GROUPED_STAGES) * STAGE_BYTES;
            const T* xs = reinterpret_cast<const T*>(base);
            const T* ws = reinterpret_cast<const T*>(base + G4_GROUPED_X_TILE);
            if constexpr (FP8) {
                // Each thread decodes 32 weights: half a row, into 4 swizzled chunks of T.
                const int s = tid / 2, half = tid % 2;
                const uint4* raw = reinterpret_cast<const uint4*>(base + G4_GROUPED_X_TILE + s * G4_GROUPED_BK) + 2 * half;
#pragma unroll
                for (int v = 0; v < 2; ++v) {
                    float values[16];
                    e4m3x16_to_f32_over_unit(raw[v], values);
                    const int c = 4 * half + 2 * v;
                    *reinterpret_cast<uint4*>(decoded + grouped_swizzled(s, c)) = grouped_pack8<T>(values);
                    *reinterpret_cast<uint4*>(decoded + grouped_swizzled(s, c + 1)) = grouped_pack8<T>(values + 8);
                }
                __syncthreads();
                ws = decoded;
            }
            if (fragments > 0) {
#pragma unroll
                for (int ks = 0; ks < G4_GROUPED_BK / 16; ++ks) {
                    unsigned b[2][4];
                    const int w_row = lane % 8 + lane / 16 * 8, w_chunk_read = 2 * ks + lane / 8 % 2;
                    g4_ldmatrix_x4(b[0], ws + grouped_swizzled(w_group0 + w_row, w_chunk_read));
                    g4_ldmatrix_x4(b[1], ws + grouped_swizzled(w_group1 + w_row, w_chunk_read));
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        if (i < fragments) {
                            unsigned a[4];
                            g4_ldmatrix_x4(a, xs + grouped_swizzled(warp_rows + 16 * i + lane % 16, 2 * ks + lane / 16));
#pragma unroll
                            for (int j = 0; j < 2; ++j) {
                                g4_mma_16816<T>(acc[i][2 * j], a, b[j][0], b[j][1]);
                                g4_mma_16816<T>(acc[i][2 * j + 1], a, b[j][2], b[j][3]);
                            }
                        }
                    }
                }
            }
        }
        // Each lane holds rows lane/4 and lane/4 + 8 of a fragment, columns 2·(lane%4) and one more.
        auto scaled = [&](float sum, int s) {  // shared weight row s's sum, times its scale
            if constexpr (FP8) return sum * scale[(size_t)e * rows_w + weight_row(s)] * G4_E4M3_UNIT;
            return sum;
        };
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            if (i >= fragments) continue;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = m0 + warp_rows + 16 * i + lane / 4 + 8 * half;
                if (r >= rows) continue;
                T* out_row = out + (size_t)(first + r) * n;
#pragma unroll
                for (int j = 0; j < (GELU_MUL ? 2 : 4); ++j) {
                    const int within = (GELU_MUL ? 16 * warp_cols : 32 * warp_cols) + 8 * j + 2 * (lane % 4);
#pragma unroll
                    for (int v = 0; v < 2; ++v) {
                        if (column0 + within + v >= n) continue;
                        float value = scaled(acc[i][j][2 * half + v], within + v);
                        if (GELU_MUL) {
                            const float up = scaled(acc[i][j + 2][2 * half + v], 64 + within + v);
                            value = g4_round<T>(g4_gelu_tanh(g4_round<T>(value))) * g4_round<T>(up);
                        }
                        out_row[column0 + within + v] = g4_from_f32<T>(value);
                    }
                }
            }
        }
        // The next pass refills every stage.
        g4_cp_async_wait<0>();
        __syncthreads();
    }
}

#define G4_MOE_GROUPED(NAME, T)                                                                                    \
    extern "C" __global__ void __launch_bounds__(G4_GROUPED_THREADS, 2)                                          \
        g4_moe_grouped_gate_up_##NAME(const T* x, const uint32_t* row_tokens, const T* w, T* out,                \
                                      const uint32_t* offsets, int n, int k, int column_blocks) {                \
        G4_KERNEL_START();                                                                                       \
        moe_grouped_gemm<T, T, true>(x, row_tokens, w, nullptr, out, offsets, n, k, column_blocks);              \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(G4_GROUPED_THREADS, 2)                                          \
        g4_moe_grouped_down_##NAME(const T* x, const T* w, T* out, const uint32_t* offsets, int n, int k,        \
                                   int column_blocks) {                                                          \
        G4_KERNEL_START();                                                                                       \
        moe_grouped_gemm<T, T, false>(x, nullptr, w, nullptr, out, offsets, n, k, column_blocks);                \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(G4_GROUPED_THREADS, 2)                                          \
        g4_moe_grouped_fp8_gate_up_##NAME(const T* x, const uint32_t* row_tokens, const uint8_t* w,              \
                                          const float* scale, T* out, const uint32_t* offsets, int n, int k,     \
                                          int column_blocks) {                                                   \
        G4_KERNEL_START();                                                                                       \
        moe_grouped_gemm<T, uint8_t, true>(x, row_tokens, w, scale, out, offsets, n, k, column_blocks);          \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(G4_GROUPED_THREADS, 2)                                          \
        g4_moe_grouped_fp8_down_##NAME(const T* x, const uint8_t* w, const float* scale, T* out,                 \
                                       const uint32_t* offsets, int n, int k, int column_blocks) {               \
        G4_KERNEL_START();                                                                                       \
        moe_grouped_gemm<T, uint8_t, false>(x, nullptr, w, scale, out, offsets, n, k, column_blocks);            \
    }
G4_MOE_GROUPED(bf16, g4_bf16)
G4_MOE_GROUPED(f16, g4_f16)

#endif
