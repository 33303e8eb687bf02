// The decode GEMV and its weight decoders, shared by linear (weights stored as T), and
// matmul_bt_fp8_channel and moe_experts_fp8 (e4m3 weights with one f32 scale per row): the
// kernels differ only in how a 16-byte weight load becomes floats, so that step is a type
// parameter (`DenseWeights<T>` or `E4m3Weights`) and everything else is written once. The
// decoder also issues the load (`load`: g4_load_weights), so that a benchmark can time other
// load instructions through the same kernels.
#pragma once
#include "g4_compat.cuh"
#include "e4m3.cuh"

// Weights stored as T: a 16-byte load holds 16 / sizeof(T) of them.
template <typename T>
struct DenseWeights {
    typedef T Stored;
    static constexpr int per_vector = 16 / sizeof(T);
    __device__ static uint4 load(const uint4* vector) { return g4_load_weights(vector); }
    __device__ static void decode(const uint4& v, float* out) {
        const T* t = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int e = 0; e < per_vector; ++e) out[e] = g4_to_f32(t[e]);
    }
    __device__ static float row_scale(const float*, size_t) { return 1.0f; }
};

// e4m3 weights with one f32 scale per row: 16 per load, decoded over G4_E4M3_UNIT (undone with
// the scale).
struct E4m3Weights {
    typedef uint8_t Stored;
    static constexpr int per_vector = 16;
    __device__ static uint4 load(const uint4* vector) { return g4_load_weights(vector); }
    __device__ static void decode(const uint4& v, float* out) { e4m3x16_to_f32_over_unit(v, out); }
    __device__ static float row_scale(const float* scale, size_t row) { return scale[row] * G4_E4M3_UNIT; }
};

// The x values that meet weight vector i of a row: W::per_vector of them, as floats.
template <typename T, typename W>
__device__ __forceinline__ void x_values(const T* x_row, int i, float* out) {
    constexpr int x_per_load = 16 / sizeof(T);
    const uint4* xv = reinterpret_cast<const uint4*>(x_row + (size_t)i * W::per_vector);
#pragma unroll
    for (int q = 0; q < W::per_vector / x_per_load; ++q) {
        const uint4 v = xv[q];
        const T* t = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int e = 0; e < x_per_load; ++e) out[q * x_per_load + e] = g4_to_f32(t[e]);
    }
}

#define G4_GEMV_MAX_ROWS 8
#define G4_GEMV_BATCH 8
// Narrow projections (a few thousand columns) run faster with half the batch and so more warps
// per column (H200, bf16, one row, 26B-A4B's o projection 2816 × 4096: 8.7 µs against 10.3).
#define G4_GEMV_NARROW_BATCH 4
// Narrow projections over a long K run in 8-warp blocks (linear.rs); where a lane's share of K is
// 5 or 6 vectors there, one batch of 6 loads it in one round trip (E4B's down, 2560 × 10240:
// 16.3 µs against 17.8 at a batch of 4).
#define G4_GEMV_LONG_BATCH 6
#define G4_GEMV_MAX_WARPS 32

// Y[m, n] = row_scale(n) · Σ_k X[m, k]·W[n, k] for a few rows of X (decode), bound by reading W
// once. Each output column n is reduced by `warps_per_col` warps that split its K range; every
// lane issues a batch of independent 16-byte W loads before decoding them, because a decode GEMV
// is bound by memory latency unless many loads are in flight. The host picks warps_per_col so
// that narrow projections (a few hundred columns) still spread over every SM. X is small and
// stays in L1/L2; sums are f32, one per row of X (MAX_ROWS of them in registers: decode's single
// row gets its own instantiation, with fewer registers and so more warps in flight). The entry
// point lets dependents launch (G4_LET_DEPENDENTS_LAUNCH); the wait for X is here.
//
// gemv_partials is that reduction up to one partial sum per (warp, row of X) in shared memory;
// gemv and gemv_gelu_mul (below) differ only in which weight row each warp reads and in how the
// partials become outputs.
template <typename T, typename W, int MAX_ROWS, int BATCH>
__device__ void gemv_partials(const T* x, const typename W::Stored* w, int row, bool has_row, int part,
                              int warps_per_col, int m, int k, float (*partial)[MAX_ROWS]) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int vectors = k / W::per_vector;
    const int step = warp_size * warps_per_col;
    // Fixed bounds (unrolled, guarded) keep the sums and the batch in registers.
    float sum[MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) sum[r] = 0.0f;
    // W is no kernel's output: the first batch is in flight before X is waited for.
    bool waited = false;
    if (has_row) {
        const uint4* w_row = reinterpret_cast<const uint4*>(w + (size_t)row * k);
        for (int base = part * warp_size + lane; base < vectors; base += step * BATCH) {
            uint4 batch[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = base + u * step;
                batch[u] = i < vectors ? W::load(w_row + i) : make_uint4(0, 0, 0, 0);
            }
            if (!waited) {
                G4_WAIT_FOR_INPUTS();
                waited = true;
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = base + u * step;
                if (i >= vectors) break;
                float wf[W::per_vector];
                W::decode(batch[u], wf);
#pragma unroll
                for (int r = 0; r < MAX_ROWS; ++r) {
                    if (r >= m) break;
                    float xf[W::per_vector];
                    x_values<T, W>(x + (size_t)r * k, i, xf);
#pragma unroll
                    for (int e = 0; e < W::per_vector; ++e) sum[r] += xf[e] * wf[e];
                }
            }
        }
    }
    if (!waited) G4_WAIT_FOR_INPUTS();
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
        if (r >= m) break;
        float s = sum[r];
        for (int bits = warp_size / 2; bits > 0; bits >>= 1) s += G4_SHFL_XOR(s, bits);
        if (lane == 0) partial[warp][r] = s;
    }
    __syncthreads();
}

// Column `row`'s sum for X row `r`: its warps' partials, which start at warp `first`, in order.
template <int MAX_ROWS>
__device__ __forceinline__ float gemv_total(const float (*partial)[MAX_ROWS], int first, int warps_per_col, int r) {
    float total = 0.0f;
    for (int p = 0; p < warps_per_col; ++p) total += partial[first + p][r];
    return total;
}

template <typename T, typename W, int MAX_ROWS, int BATCH = G4_GEMV_BATCH>
__device__ void gemv(const T* x, const typename W::Stored* w, const float* scale, T* y, int m, int n, int k,
                     int warps_per_col) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int cols_per_block = blockDim.x / warp_size / warps_per_col;
    const int col = blockIdx.x * cols_per_block + warp / warps_per_col;
    const int part = warp % warps_per_col;
    __shared__ float partial[G4_GEMV_MAX_WARPS][MAX_ROWS];
    gemv_partials<T, W, MAX_ROWS, BATCH>(x, w, col, col < n, part, warps_per_col, m, k, partial);
    if (part == 0 && lane < m && col < n) {
        const float total = gemv_total<MAX_ROWS>(partial, warp, warps_per_col, lane);
        y[(size_t)lane * n + col] = g4_from_f32<T>(total * W::row_scale(scale, col));
    }
}

// One row of X (a decode step) against C weight rows per group of `warps_per_col` warps (which
// split K as gemv's do): one X load serves C rows, a lane has C · BATCH weight loads in flight,
// and the prologue and reduction are paid once per C rows. For e4m3 weights, whose 16 per load
// meet X in two loads, this took E4B's down GEMV from 11.8 to 9.1 µs and 31B's gate/up from 72.2
// to 59.2 (C = 4, BATCH = 2; scripts/kernel-bench/fp8_gemv_bench, H200, stop 48).
//
// gemv_column_partials is that reduction up to one partial sum per (warp, slot) in shared memory,
// slot c of the group being weight row rows[c] (−1: none); gemv_columns and gemv_columns_gelu_mul
// differ only in which rows the slots take and in how the partials become outputs. A row's sums
// depend on warps_per_col alone, not on the slot it sits in.
template <typename T, typename W, int C, int BATCH>
__device__ void gemv_column_partials(const T* x, const typename W::Stored* w, const int (&rows)[C], int part,
                                     int warps_per_col, int k, float (*partial)[C]) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int vectors = k / W::per_vector, step = warp_size * warps_per_col;
    float sum[C];
#pragma unroll
    for (int c = 0; c < C; ++c) sum[c] = 0.0f;
    bool waited = false;
    for (int base = part * warp_size + lane; base < vectors; base += step * BATCH) {
        uint4 batch[C][BATCH];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const uint4* w_row = reinterpret_cast<const uint4*>(w + (size_t)max(rows[c], 0) * k);
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = base + u * step;
                batch[c][u] = i < vectors && rows[c] >= 0 ? W::load(w_row + i) : make_uint4(0, 0, 0, 0);
            }
        }
        if (!waited) {
            G4_WAIT_FOR_INPUTS();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int i = base + u * step;
            if (i >= vectors) break;
            float xf[W::per_vector];
            x_values<T, W>(x, i, xf);
#pragma unroll
            for (int c = 0; c < C; ++c) {
                float wf[W::per_vector];
                W::decode(batch[c][u], wf);
#pragma unroll
                for (int e = 0; e < W::per_vector; ++e) sum[c] += xf[e] * wf[e];
            }
        }
    }
    if (!waited) G4_WAIT_FOR_INPUTS();
#pragma unroll
    for (int c = 0; c < C; ++c) {
        float s = sum[c];
        for (int bits = warp_size / 2; bits > 0; bits >>= 1) s += G4_SHFL_XOR(s, bits);
        if (lane == 0) partial[warp][c] = s;
    }
    __syncthreads();
}

// The FP8 one-row GEMVs' two configurations (weight rows per group, loads of each in flight a
// lane), the `_one_row_cols2` and `_one_row_cols4` entry points of matmul_bt_fp8_channel and
// linear_gelu_mul; matmul_bt_fp8_channel.rs's one_row_gemv picks between them by K.
#define G4_FP8_COLS2 2, 4
#define G4_FP8_COLS4 4, 2

// Y[n] = row_scale(n) · W[n]·x: group g's slots are rows gC .. gC + C − 1.
template <typename T, typename W, int C, int BATCH>
__device__ void gemv_columns(const T* x, const typename W::Stored* w, const float* scale, T* y, int n, int k,
                             int warps_per_col) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int groups_per_block = blockDim.x / warp_size / warps_per_col;
    const int first = (blockIdx.x * groups_per_block + warp / warps_per_col) * C;
    int rows[C];
#pragma unroll
    for (int c = 0; c < C; ++c) rows[c] = first + c < n ? first + c : -1;
    __shared__ float partial[G4_GEMV_MAX_WARPS][C];
    gemv_column_partials<T, W, C, BATCH>(x, w, rows, warp % warps_per_col, warps_per_col, k, partial);
    if (warp % warps_per_col == 0 && lane < C && first + lane < n) {
        const float total = gemv_total<C>(partial, warp, warps_per_col, lane);
        y[first + lane] = g4_from_f32<T>(total * W::row_scale(scale, first + lane));
    }
}

// Y[m, d] = gelu_tanh(G) ⊙ U with G = X·W[:d]ᵀ, and U either X·W[d:2d]ᵀ (W packed [gate ‖ up],
// `up` null) or the given `up [m, d]`: the GEMV above with the GeGLU product as its epilogue.
// With W packed, each output's block holds the warps of its gate row and then those of its up
// row. Each projection is rounded to T before the product, and the GeLU too, exactly as a GEMV
// followed by gelu_and_mul / gelu_mul rounds (the sums are the same sums in the same order).
template <typename T, typename W, int MAX_ROWS, int BATCH = G4_GEMV_BATCH>
__device__ void gemv_gelu_mul(const T* x, const typename W::Stored* w, const float* scale, const T* up, T* y,
                              int m, int d, int k, int warps_per_col) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int halves = up ? 1 : 2;
    const int warps_per_out = warps_per_col * halves;
    const int outs_per_block = blockDim.x / warp_size / warps_per_out;
    const int out = blockIdx.x * outs_per_block + warp / warps_per_out;
    const int half = (warp / warps_per_col) % halves;
    const int part = warp % warps_per_col;
    __shared__ float partial[G4_GEMV_MAX_WARPS][MAX_ROWS];
    gemv_partials<T, W, MAX_ROWS, BATCH>(x, w, out + half * d, out < d, part, warps_per_col, m, k, partial);
    if (half == 0 && part == 0 && lane < m && out < d) {
        const float gate = g4_round<T>(gemv_total<MAX_ROWS>(partial, warp, warps_per_col, lane) *
                                       W::row_scale(scale, out));
        const float u = up ? g4_to_f32(up[(size_t)lane * d + out])
                           : g4_round<T>(gemv_total<MAX_ROWS>(partial, warp + warps_per_col, warps_per_col, lane) *
                                         W::row_scale(scale, out + d));
        y[(size_t)lane * d + out] = g4_from_f32<T>(g4_round<T>(g4_gelu_tanh(gate)) * u);
    }
}

// gemv_gelu_mul for one row of X with gemv_columns' C weight rows per warp group. With W packed,
// group g computes outputs g·C/2 .. g·C/2 + C/2 − 1: its first C/2 slots are their gate rows and
// the rest their up rows (d further on), so an output's two sums end in one block with no other
// group's help. With `up` given, all C slots are gate rows of C outputs. The epilogue rounds as
// gemv_gelu_mul's does.
template <typename T, typename W, int C, int BATCH>
__device__ void gemv_columns_gelu_mul(const T* x, const typename W::Stored* w, const float* scale, const T* up,
                                      T* y, int d, int k, int warps_per_col) {
    static_assert(C % 2 == 0, "a packed group holds as many up rows as gate rows");
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    const int outs = up ? C : C / 2;
    const int groups_per_block = blockDim.x / warp_size / warps_per_col;
    const int first = (blockIdx.x * groups_per_block + warp / warps_per_col) * outs;
    int rows[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const int out = first + c % outs;
        rows[c] = out < d ? out + c / outs * d : -1;
    }
    __shared__ float partial[G4_GEMV_MAX_WARPS][C];
    gemv_column_partials<T, W, C, BATCH>(x, w, rows, warp % warps_per_col, warps_per_col, k, partial);
    const int out = first + lane;
    if (warp % warps_per_col == 0 && lane < outs && out < d) {
        const float gate =
            g4_round<T>(gemv_total<C>(partial, warp, warps_per_col, lane) * W::row_scale(scale, out));
        const float u = up ? g4_to_f32(up[out])
                           : g4_round<T>(gemv_total<C>(partial, warp, warps_per_col, lane + outs) *
                                         W::row_scale(scale, out + d));
        y[out] = g4_from_f32<T>(g4_round<T>(g4_gelu_tanh(gate)) * u);
    }
}
