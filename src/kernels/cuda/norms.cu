// rms_norm, rms_norm_plus_add, dual_rms_norm_plus_res (and qkv_norm_rope, moe_inputs and
// moe_output below): one block per row, f32 inside, plain (not 1 + w) weight applied before the
// cast back — the semantics of the ops' composed arms.
// Each thread holds its up to V elements of the row (and of the weights and the residual) in
// registers, so a kernel reads memory once however many passes it makes over the row (the host
// sizes the block so that cols ≤ V × blockDim). Every kernel comes with V = 8 (rows up to 4,096
// wide) and V = 16 (`_wide`, up to 8,192): registers are reserved for all V values whether the
// row fills them or not, and at V = 16 a 512-thread block took a whole multiprocessor's
// registers, so a prefill's rows ran one block per multiprocessor.
#include "g4_compat.cuh"
#include "e4m3.cuh"

#define G4_NORM_MAX_THREADS 512

// The threads that share a row: a whole block (one row per block), or one warp (qkv_norm_rope's
// heads, a row per warp) — `lane` of `lanes`.
struct RowThreads {
    int lane, lanes;
    bool one_warp;
};
__device__ __forceinline__ RowThreads block_threads() { return {(int)threadIdx.x, (int)blockDim.x, false}; }
__device__ __forceinline__ RowThreads warp_threads() {
    return {(int)(threadIdx.x % warpSize), (int)warpSize, true};
}

// A thread's V values of a row lie in runs of R = 16 / sizeof(T) consecutive elements, run c of
// thread t starting at element (c · threads + t) · R, so that a row whose start is 16-byte
// aligned and whose length is a multiple of R moves as whole 16-byte vectors (one load per run
// instead of R; 2–3× fewer instructions a row). V is a multiple of R for every T.
template <typename T>
__device__ __forceinline__ int row_index(int i, RowThreads t) {
    constexpr int R = 16 / sizeof(T);
    return ((i / R) * t.lanes + t.lane) * R + i % R;
}

// Whether a row (of any element type) moves in whole runs of T: 16-byte aligned, cols % R == 0.
template <typename T>
__device__ __forceinline__ bool whole_runs(const void* row, int cols) {
    return cols % (16 / sizeof(T)) == 0 && reinterpret_cast<size_t>(row) % 16 == 0;
}

// Loads this thread's elements of a row (zeros past its end); `row` may be null (ones). The runs
// are those of the kernel's T whatever the row's type S (moe_output reads f32 rows in a bf16
// kernel: two vectors a run).
template <typename T, int V, typename S>
__device__ __forceinline__ void load_row(const S* row, int cols, float (&v)[V], RowThreads t = block_threads()) {
    constexpr int R = 16 / sizeof(T), P = 16 / sizeof(S);
    static_assert(R % P == 0, "a run is whole 16-byte vectors of S");
    const bool vectors = row && whole_runs<T>(row, cols);
#pragma unroll
    for (int c = 0; c < V / R; ++c) {
        const int first = row_index<T>(c * R, t);
        if (vectors && first < cols) {
#pragma unroll
            for (int q = 0; q < R / P; ++q) {
                const Pack<S, P> p = *reinterpret_cast<const Pack<S, P>*>(row + first + q * P);
#pragma unroll
                for (int e = 0; e < P; ++e) v[c * R + q * P + e] = g4_to_f32(p.v[e]);
            }
        } else {
#pragma unroll
            for (int e = 0; e < R; ++e) {
                const int j = first + e;
                v[c * R + e] = j < cols ? (row ? g4_to_f32(row[j]) : 1.0f) : 0.0f;
            }
        }
    }
}

// R consecutive f32 values of a 16-byte aligned row from `first` (a multiple of 4; zeros past
// `cols`, a multiple of 4), 16 bytes at a time.
template <int R>
__device__ __forceinline__ void load_f32_run(const float* row, int first, int cols, float (&out)[R]) {
#pragma unroll
    for (int q = 0; q < R / 4; ++q) {
        const float4 p = first + q * 4 < cols ? *reinterpret_cast<const float4*>(row + first + q * 4)
                                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        out[q * 4] = p.x, out[q * 4 + 1] = p.y, out[q * 4 + 2] = p.z, out[q * 4 + 3] = p.w;
    }
}

// Stores this thread's elements of a row (those before its end), each cast to T.
template <int V, typename T>
__device__ __forceinline__ void store_row(T* row, int cols, const float (&v)[V], RowThreads t = block_threads()) {
    constexpr int R = 16 / sizeof(T);
    const bool vectors = whole_runs<T>(row, cols);
#pragma unroll
    for (int c = 0; c < V / R; ++c) {
        const int first = row_index<T>(c * R, t);
        if (first >= cols) continue;
        if (vectors) {
            Pack<T, R> p;
#pragma unroll
            for (int e = 0; e < R; ++e) p.v[e] = g4_from_f32<T>(v[c * R + e]);
            *reinterpret_cast<Pack<T, R>*>(row + first) = p;
        } else {
#pragma unroll
            for (int e = 0; e < R; ++e) {
                if (first + e < cols) row[first + e] = g4_from_f32<T>(v[c * R + e]);
            }
        }
    }
}

template <int V>
__device__ __forceinline__ float inv_rms(const float (&v)[V], int cols, float eps, RowThreads t = block_threads()) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) sum += v[i] * v[i];
    sum = t.one_warp ? g4_warp_sum(sum) : g4_block_sum(sum);
    return 1.0f / sqrtf(sum / cols + eps);
}

// Every input is loaded before the first reduction: one memory round trip per kernel. The
// weights are loaded before the wait for the kernels before (G4_WAIT_FOR_INPUTS): no kernel
// writes them, so their loads overlap the end of the previous kernel.
template <typename T, int V>
__device__ void rms_norm(const T* x, const T* w, T* out, int cols, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    float v[V], weight[V];
    load_row<T>(w, cols, weight);
    G4_WAIT_FOR_INPUTS();
    load_row<T>(x + base, cols, v);
    const float inv = inv_rms(v, cols, eps);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = v[i] * inv * weight[i];
    store_row(out + base, cols, v);
}

template <typename T, int V>
__device__ void rms_norm_plus_add(const T* residual, const T* x, const T* w, T* out, int cols, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    float v[V], weight[V], res[V];
    load_row<T>(w, cols, weight);
    G4_WAIT_FOR_INPUTS();
    load_row<T>(x + base, cols, v);
    load_row<T>(residual + base, cols, res);
    const float inv = inv_rms(v, cols, eps);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = res[i] + g4_round<T>(v[i] * inv * weight[i]);
    store_row(out + base, cols, v);
}

// residual' = (residual + rms_norm(x; w1)) · s, each step rounded to T as the separate ops store
// it (s = 1 leaves the sum as it is: inside a layer); y = rms_norm(residual'; w2).
template <typename T>
__device__ __forceinline__ float residual_after(float residual, float x, float inv_x, float w1, float scale) {
    return g4_round<T>(g4_round<T>(residual + g4_round<T>(x * inv_x * w1)) * scale);
}

// Waits for the kernels before, loads this thread's x and residual of row `base`, and returns
// x's 1 / rms.
template <typename T, int V>
__device__ __forceinline__ float load_tail_inputs(const T* x, const T* residual, size_t base, int cols, float eps,
                                                  float (&v)[V], float (&res)[V]) {
    G4_WAIT_FOR_INPUTS();
    load_row<T>(x + base, cols, v);
    load_row<T>(residual + base, cols, res);
    return inv_rms(v, cols, eps);
}

// A row's V values per thread rounded to T, then to e4m3 on the row's scale and back, as
// round_rows_e4m3 (fp8.cu) rounds a stored row; values past the row's end are zero.
template <typename T, int V>
__device__ __forceinline__ void round_row_to_e4m3(float (&v)[V]) {
    float absmax = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        v[i] = g4_round<T>(v[i]);
        absmax = fmaxf(absmax, fabsf(v[i]));
    }
    const float scale = e4m3_scale_of<T>(g4_block_max(absmax));
    static_assert(V % 2 == 0, "e4m3 values are rounded in pairs");
#pragma unroll
    for (int i = 0; i < V; i += 2) {
        e4m3_pair(e4m3_input<T>(v[i], scale), e4m3_input<T>(v[i + 1], scale), v[i], v[i + 1]);
        v[i] *= scale;
        v[i + 1] *= scale;
    }
}

// dual_rms_norm_plus_res' first half (also moe_inputs'): waits for the kernels before, then
// leaves in v row `base`'s residual' (residual + rms_norm(x; w1)) · s, rounded to T as it is
// stored (the norms after it read that; 0 past the row's end), and stores it.
template <typename T, int V>
__device__ __forceinline__ void store_residual_after(const T* residual, const T* x, const float (&weight1)[V],
                                                     T* out_residual, size_t base, int cols, float residual_scale,
                                                     float eps, float (&v)[V]) {
    float res[V];
    const float inv_x = load_tail_inputs(x, residual, base, cols, eps, v, res);
    const float scale = g4_round<T>(residual_scale);
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const float r = residual_after<T>(res[i], v[i], inv_x, weight1[i], scale);
        v[i] = row_index<T>(i, block_threads()) < cols ? r : 0.0f;
    }
    store_row(out_residual + base, cols, v);
}

// y's row (a block's) in f16 on the power of two that brings its largest |y|, rounded to T as the
// norm stores y, into [2^14, 2^15) (never more than 2^126; 1 for a row of zeros, infinities or
// NaNs), and the inverse in row_scale: tma_gemm.rs's F16Rows, X of the Hopper GEMM's f16
// entries. Exact for bf16 values down to 2^-28 of the row's largest. T is bf16, whose runs of 8
// values are f16's too.
template <typename T, int V>
__device__ __forceinline__ void store_row_f16_scaled(g4_f16* out, float* row_scale, int cols, float (&v)[V]) {
    static_assert(sizeof(T) == 2, "f16 rows keep the runs of a 16-bit T");
    float absmax = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        v[i] = g4_round<T>(v[i]);
        absmax = fmaxf(absmax, fabsf(v[i]));
    }
    const float row_max = g4_block_max(absmax);
    const int exponent = row_max > 0.0f && isfinite(row_max) ? max(ilogbf(row_max), 14 - 126) - 14 : 0;
    const float up = ldexpf(1.0f, -exponent);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] *= up;
    store_row(out + (size_t)blockIdx.x * cols, cols, v);
    if (threadIdx.x == 0) row_scale[blockIdx.x] = ldexpf(1.0f, exponent);
}

// dual_rms_norm_plus_res up to y: stores residual' and leaves y, unrounded, in `y`.
template <typename T, int V>
__device__ __forceinline__ void dual_norm_y(const T* residual, const T* x, const T* w1, const T* w2, T* out_residual,
                                            int cols, float residual_scale, float eps, float (&y)[V]) {
    const size_t base = (size_t)blockIdx.x * cols;
    float v[V], weight1[V];
    load_row<T>(w1, cols, weight1);
    load_row<T>(w2, cols, y);
    store_residual_after<T>(residual, x, weight1, out_residual, base, cols, residual_scale, eps, v);
    const float inv_r = inv_rms(v, cols, eps);
#pragma unroll
    for (int i = 0; i < V; ++i) y[i] = v[i] * inv_r * y[i];
}

// With ROUND_Y, y is the input of an FP8_DYNAMIC projection: rounded to e4m3 per row here, where
// the block holds the whole row, instead of by a round_rows_e4m3 launch of its own.
template <typename T, int V, bool ROUND_Y = false>
__device__ void dual_rms_norm_plus_res(const T* residual, const T* x, const T* w1, const T* w2, T* out_residual,
                                       T* out_y, int cols, float residual_scale, float eps) {
    float y[V];
    dual_norm_y<T, V>(residual, x, w1, w2, out_residual, cols, residual_scale, eps, y);
    if constexpr (ROUND_Y) round_row_to_e4m3<T>(y);
    store_row(out_y + (size_t)blockIdx.x * cols, cols, y);
}

// dual_rms_norm_plus_res for rows 4,097–6,144 wide (31B's 5,376), `_wide_lean`: 16 values a
// thread as `_wide` holds, but the weights are read a run at a time where they are used (from
// L1: every row shares them) instead of held in registers, and the host sizes the block to the
// row (352 threads at 5,376). `_wide` took 101 registers at 512 threads, one row per
// multiprocessor at a time; this takes about half, several rows at once. Same arithmetic.
template <typename T>
__device__ __forceinline__ void load_weight_run(const T* w, int first, int cols, float (&run)[16 / sizeof(T)]) {
    constexpr int R = 16 / sizeof(T);
    if (whole_runs<T>(w, cols)) {
        if (first < cols) {
            const Pack<T, R> p = *reinterpret_cast<const Pack<T, R>*>(w + first);
#pragma unroll
            for (int e = 0; e < R; ++e) run[e] = g4_to_f32(p.v[e]);
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < R; ++e) run[e] = first + e < cols ? g4_to_f32(w[first + e]) : 0.0f;
}

// Calls f(i, j, w_j) for each of this thread's V values (value i, row element j), the weights
// loaded a run at a time.
template <typename T, int V, typename F>
__device__ __forceinline__ void with_weight_runs(const T* w, int cols, RowThreads t, F f) {
    constexpr int R = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < V / R; ++c) {
        const int first = row_index<T>(c * R, t);
        float weight[R];
        load_weight_run<T>(w, first, cols, weight);
#pragma unroll
        for (int e = 0; e < R; ++e) f(c * R + e, first + e, weight[e]);
    }
}

// Leaves y, unrounded, in `y` (16 values a thread) and stores residual'.
template <typename T>
__device__ __forceinline__ void dual_norm_y_lean(const T* residual, const T* x, const T* w1, const T* w2,
                                                 T* out_residual, int cols, float residual_scale, float eps,
                                                 float (&y)[16]) {
    constexpr int V = 16;
    const RowThreads t = block_threads();
    const size_t base = (size_t)blockIdx.x * cols;
    float res[V];
    const float inv_x = load_tail_inputs(x, residual, base, cols, eps, y, res);
    const float scale = g4_round<T>(residual_scale);
    with_weight_runs<T, V>(w1, cols, t, [&](int i, int j, float w) {
        y[i] = j < cols ? residual_after<T>(res[i], y[i], inv_x, w, scale) : 0.0f;
    });
    store_row(out_residual + base, cols, y);
    const float inv_r = inv_rms(y, cols, eps);
    with_weight_runs<T, V>(w2, cols, t, [&](int i, int, float w) { y[i] = y[i] * inv_r * w; });
}

template <typename T>
__device__ void dual_rms_norm_plus_res_lean(const T* residual, const T* x, const T* w1, const T* w2,
                                            T* out_residual, T* out_y, int cols, float residual_scale, float eps) {
    float y[16];
    dual_norm_y_lean<T>(residual, x, w1, w2, out_residual, cols, residual_scale, eps, y);
    store_row(out_y + (size_t)blockIdx.x * cols, cols, y);
}

// qkv_norm_rope (src/kernels/qkv_norm_rope.rs): one warp per (token s, output head) of a layer's
// stacked projection [q | k | v] (kv_code 0: q only, 1: k and v, 2: k alone, v = k's raw
// projection), G4_QKV_BLOCK_THREADS a block. Output heads: q heads, then k and v of each kv head in
// turn. The head is normed like rms_norm, rounded to T as rms_norm stores it, then q and k are
// rotated like rope (a pair's halves exchanged in registers, by shuffles where they sit in
// different lanes) and written heads first [heads, seq, d] — or, given the layer's cache
// [kv_heads, cache_rows, d] (cache_rows > 0), k and v go straight into it from a row held on the
// device (`slot`: one decode token) or else `first_row` (a prefill chunk), where copies wrote
// them. The host sends heads wider than G4_QKV_MAX_HEAD_DIM elsewhere.
// A warp per head and no block barrier: a block per head (one warp at head_dim 256) kept too few
// warps on a multiprocessor, the cos/sin loads waited for the row's norm (a second memory round
// trip; they now load beside the row), and the pairs met in shared memory with 8-way bank
// conflicts (a lane's run is 8 consecutive floats).
#define G4_QKV_MAX_HEAD_DIM 512
#define G4_QKV_BLOCK_THREADS 256
#define G4_QKV_MAX_WARPS (G4_QKV_BLOCK_THREADS / 32)

// This lane's cos (or sin) of the pairs its elements belong to (zeros past the row's end):
// cos[pair] for element j = pair or pair + half.
template <typename T, int V>
__device__ __forceinline__ void load_pair_table(const float* table, int d, bool runs, RowThreads t, float (&out)[V]) {
    constexpr int R = 16 / sizeof(T);
    const int half = d / 2;
#pragma unroll
    for (int c = 0; c < V / R; ++c) {
        const int first = row_index<T>(c * R, t);
        if (runs) {  // half % R == 0: no run straddles the halves
            float run[R];
            load_f32_run<R>(table, first < half ? first : first - half, half, run);
#pragma unroll
            for (int e = 0; e < R; ++e) out[c * R + e] = run[e];
        } else {
#pragma unroll
            for (int e = 0; e < R; ++e) {
                const int j = first + e, pair = j < half ? j : j - half;
                out[c * R + e] = pair < half ? table[pair] : 0.0f;
            }
        }
    }
}

template <typename T, int V>
__device__ void qkv_norm_rope(const T* qkv, const T* q_norm, const T* k_norm, const float* cos, const float* sin,
                              T* q_out, T* k_out, T* v_out, const unsigned* slot, int first_row, int cache_rows, int seq,
                              int q_heads, int kv_heads, int d, int kv_code, float eps) {
    const RowThreads t = warp_threads();
    const int warp = threadIdx.x / t.lanes;
    const int heads = q_heads + (kv_code ? 2 * kv_heads : 0);
    const int row = blockIdx.x * (blockDim.x / t.lanes) + warp;
    if (row >= seq * heads) return;  // the whole warp: its shuffles stay full
    const int parts = kv_code == 1 ? 2 : (kv_code == 2 ? 1 : 0);
    const int width = (q_heads + kv_heads * parts) * d;
    const int s = row / heads, head = row % heads;
    int offset, out_head;
    const T* w;
    T* out;
    bool rotate = true;
    if (head < q_heads) {
        offset = head * d, out_head = head, w = q_norm, out = q_out;
    } else {
        const int h = (head - q_heads) / 2;
        out_head = h;
        if ((head - q_heads) % 2 == 0) {
            offset = (q_heads + h) * d, w = k_norm, out = k_out;
        } else {
            offset = ((kv_code == 1 ? q_heads + kv_heads : q_heads) + h) * d, w = nullptr, out = v_out;
            rotate = false;
        }
    }
    float v[V], weight[V];
    load_row<T>(w, d, weight, t);
    G4_WAIT_FOR_INPUTS();
    load_row<T>(qkv + (size_t)s * width + offset, d, v, t);
    T* dst = cache_rows > 0 && out != q_out ? out + ((size_t)out_head * cache_rows + (slot ? *slot : first_row) + s) * d
                                            : out + ((size_t)out_head * seq + s) * d;
    if (!rotate) {  // the same for the whole warp
        const float inv = inv_rms(v, d, eps, t);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = v[i] * inv * weight[i];
        store_row(dst, d, v, t);
        return;
    }
    constexpr int R = 16 / sizeof(T);
    const int half = d / 2;
    const float* cos_row = cos + (size_t)s * half;
    const float* sin_row = sin + (size_t)s * half;
    const bool runs = half % R == 0 && reinterpret_cast<size_t>(cos_row) % 16 == 0 &&
                      reinterpret_cast<size_t>(sin_row) % 16 == 0;
    float cs[V], sn[V];
    load_pair_table<T>(cos_row, d, runs, t, cs);
    load_pair_table<T>(sin_row, d, runs, t, sn);
    const float inv = inv_rms(v, d, eps, t);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = g4_round<T>(v[i] * inv * weight[i]);
    // Each element's pair partner (the element half a row away), found where it lives: half / R
    // runs apart, a power of two below the lanes is another lane's same run (one shuffle; heads
    // of 256 in 16-bit floats); a multiple of the lanes is this lane's run c ^ that / lanes
    // (heads of 512; a lane holds at most 4 runs, so that is 1 or 2 — said in the condition,
    // without which the compiler kept v in local memory to index it). Other widths go through
    // the warp's row in shared memory.
    float partner[V];
    const int runs_apart = half % R == 0 ? half / R : 0;
    const int runs_per_lane = runs_apart / t.lanes;
    if (runs_apart > 0 && runs_apart < t.lanes && (runs_apart & (runs_apart - 1)) == 0) {
#pragma unroll
        for (int i = 0; i < V; ++i) partner[i] = G4_SHFL_XOR(v[i], runs_apart);
    } else if (runs_apart > 0 && runs_apart % t.lanes == 0 && (runs_per_lane == 1 || runs_per_lane == 2) &&
               2 * runs_per_lane <= V / R) {
#pragma unroll
        for (int c = 0; c < V / R; ++c) {
#pragma unroll
            for (int other = 0; other < V / R; ++other) {
                if (other != (c ^ runs_per_lane)) continue;
#pragma unroll
                for (int e = 0; e < R; ++e) partner[c * R + e] = v[other * R + e];
            }
        }
    } else {
        __shared__ float rows[G4_QKV_MAX_WARPS][G4_QKV_MAX_HEAD_DIM];
        float* normed = rows[warp];
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const int j = row_index<T>(i, t);
            if (j < d) normed[j] = v[i];
        }
        G4_SYNC_WARP();
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const int j = row_index<T>(i, t);
            const int other = j < half ? j + half : j - half;
            partner[i] = j < d ? normed[other] : 0.0f;
        }
    }
    // Each lane rotates its own elements and stores them as it loaded them (16 bytes at a time).
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const int j = row_index<T>(i, t);
        const float cj = g4_round<T>(cs[i]), sj = g4_round<T>(sn[i]);
        v[i] = j < half ? g4_round<T>(v[i] * cj) - g4_round<T>(partner[i] * sj)
                        : g4_round<T>(v[i] * cj) + g4_round<T>(partner[i] * sj);
    }
    store_row(dst, d, v, t);
}

// moe_inputs (src/kernels/moe_inputs.rs): an MoE layer's inputs from its attention output x:
// dual_rms_norm_plus_res's residual' and shared-MLP input y, then the router's input
// rms_norm(residual') × scale × factor and the experts' rms_norm(residual'; w), rounded to T after
// each step as the composed arm stores them. All three norms of residual' share its one reduction.
template <typename T, int V>
__device__ void moe_inputs(const T* residual, const T* x, const T* w1, const T* w2, const T* router_scale,
                           const T* experts_norm, T* out_residual, T* out_y, T* router_out, T* experts_out,
                           int cols, float residual_scale, float factor, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    float v[V], weight1[V], weight2[V], scale[V], weight[V];
    load_row<T>(w1, cols, weight1);
    load_row<T>(w2, cols, weight2);
    load_row<T>(router_scale, cols, scale);
    load_row<T>(experts_norm, cols, weight);
    store_residual_after<T>(residual, x, weight1, out_residual, base, cols, residual_scale, eps, v);
    const float inv = inv_rms(v, cols, eps);
    const float rounded_factor = g4_round<T>(factor);
    // weight2, scale and weight become the three outputs.
#pragma unroll
    for (int i = 0; i < V; ++i) {
        weight2[i] = v[i] * inv * weight2[i];
        scale[i] = g4_round<T>(g4_round<T>(v[i] * inv) * scale[i]) * rounded_factor;
        weight[i] = v[i] * inv * weight[i];
    }
    store_row(out_y + base, cols, weight2);
    store_row(router_out + base, cols, scale);
    store_row(experts_out + base, cols, weight);
}

// moe_output (src/kernels/moe_output.rs): out = (r + rms_norm(rms_norm(dense; w1) +
// rms_norm(T(experts); w2); w3)) · s, rounded to T where the composed arm stores an
// intermediate, and — where w4 (the next layer's input norm) is given — next = rms_norm(out; w4).
template <typename T, int V>
__device__ void moe_output(const T* residual, const T* dense, const float* experts, const T* w1, const T* w2,
                           const T* w3, const T* w4, T* out, T* next, int cols, float output_scale, float eps) {
    const size_t base = (size_t)blockIdx.x * cols;
    float d[V], e[V], res[V], weight1[V], weight2[V], weight3[V], weight4[V];
    load_row<T>(w1, cols, weight1);
    load_row<T>(w2, cols, weight2);
    load_row<T>(w3, cols, weight3);
    if (w4) load_row<T>(w4, cols, weight4);
    G4_WAIT_FOR_INPUTS();
    load_row<T>(dense + base, cols, d);
    load_row<T>(experts + base, cols, e);
    load_row<T>(residual + base, cols, res);
#pragma unroll
    for (int i = 0; i < V; ++i) e[i] = g4_round<T>(e[i]);
    const float inv_d = inv_rms(d, cols, eps), inv_e = inv_rms(e, cols, eps);
    // d becomes the branches' sum, rounded to T as it is stored: the block's norm reads that.
#pragma unroll
    for (int i = 0; i < V; ++i) {
        d[i] = row_index<T>(i, block_threads()) < cols
                   ? g4_round<T>(g4_round<T>(d[i] * inv_d * weight1[i]) + g4_round<T>(e[i] * inv_e * weight2[i]))
                   : 0.0f;
    }
    const float inv_sum = inv_rms(d, cols, eps);
    const float scale = g4_round<T>(output_scale);
    // d becomes the output, rounded to T as it is stored: the next layer's norm reads that.
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const float summed = g4_round<T>(res[i] + g4_round<T>(d[i] * inv_sum * weight3[i]));
        d[i] = row_index<T>(i, block_threads()) < cols ? g4_round<T>(summed * scale) : 0.0f;
    }
    store_row(out + base, cols, d);
    if (w4 == nullptr) return;  // the same for the whole block
    const float inv_out = inv_rms(d, cols, eps);
#pragma unroll
    for (int i = 0; i < V; ++i) e[i] = d[i] * inv_out * weight4[i];
    store_row(next + base, cols, e);
}

#define G4_NORM_KERNELS(NAME, T, V, WIDE)                                                                   \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS)                                       \
        g4_rms_norm##WIDE##_##NAME(const T* x, const T* w, T* out, int cols, float eps) {                   \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                  \
        rms_norm<T, V>(x, w, out, cols, eps);                                                               \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS) g4_rms_norm_plus_add##WIDE##_##NAME(  \
        const T* residual, const T* x, const T* w, T* out, int cols, float eps) {                           \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                  \
        rms_norm_plus_add<T, V>(residual, x, w, out, cols, eps);                                            \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS)                                       \
        g4_dual_rms_norm_plus_res##WIDE##_##NAME(const T* residual, const T* x, const T* w1, const T* w2,   \
                                                 T* out_residual, T* out_y, int cols, float residual_scale, \
                                                 float eps) {                                               \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                  \
        dual_rms_norm_plus_res<T, V>(residual, x, w1, w2, out_residual, out_y, cols, residual_scale, eps);  \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_QKV_BLOCK_THREADS) g4_qkv_norm_rope##WIDE##_##NAME(     \
        const T* qkv, const T* q_norm, const T* k_norm, const float* cos, const float* sin, T* q_out,         \
        T* k_out, T* v_out, const unsigned* slot, int first_row, int cache_rows, int seq, int q_heads,        \
        int kv_heads, int d,                                                                                 \
        int kv_code, float eps) {                                                                            \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                   \
        qkv_norm_rope<T, V>(qkv, q_norm, k_norm, cos, sin, q_out, k_out, v_out, slot, first_row, cache_rows, seq,  \
                            q_heads,                                                                         \
                            kv_heads, d, kv_code, eps);                                                     \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS) g4_moe_inputs##WIDE##_##NAME(        \
        const T* residual, const T* x, const T* w1, const T* w2, const T* router_scale,                     \
        const T* experts_norm, T* out_residual, T* out_y, T* router_out, T* experts_out, int cols,          \
        float residual_scale, float factor, float eps) {                                                    \
        G4_LET_DEPENDENTS_LAUNCH();                                                                         \
        moe_inputs<T, V>(residual, x, w1, w2, router_scale, experts_norm, out_residual, out_y, router_out,  \
                         experts_out, cols, residual_scale, factor, eps);                                   \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS) g4_moe_output##WIDE##_##NAME(        \
        const T* residual, const T* dense, const float* experts, const T* w1, const T* w2, const T* w3,      \
        const T* w4, T* out, T* next, int cols, float output_scale, float eps) {                            \
        G4_LET_DEPENDENTS_LAUNCH();                                                                                  \
        moe_output<T, V>(residual, dense, experts, w1, w2, w3, w4, out, next, cols, output_scale, eps);     \
    }
#define G4_LEAN_NORM_MAX_THREADS 384
// dual_rms_norm_plus_res for up to 8 rows 4,097–8,192 wide (a decode step's 31B rows of 5,376),
// `_few_rows`: V = 8 over up to 1,024 threads, one 16-byte load per thread and input, the
// weights loaded before the wait. A decode step's norm is one block alone on the GPU between two
// GEMVs, so its length is its latency: in a chain of 31B's decode layers `_wide_lean` (the weights
// read after each reduction) added 4.6 µs a launch, this 2.2, an empty kernel 0.25
// (scripts/kernel-bench/chain_bench). Many rows keep `_wide_lean`: 1,024-thread blocks would hold
// one row per multiprocessor.
#define G4_FEW_ROWS_NORM_MAX_THREADS 1024
#define G4_NORMS(NAME, T)                                                                                   \
    G4_NORM_KERNELS(NAME, T, 8, )                                                                           \
    G4_NORM_KERNELS(NAME, T, 16, _wide)                                                                     \
    extern "C" __global__ void __launch_bounds__(G4_FEW_ROWS_NORM_MAX_THREADS)                              \
        g4_dual_rms_norm_plus_res_few_rows_##NAME(const T* residual, const T* x, const T* w1, const T* w2,  \
                                                  T* out_residual, T* out_y, int cols, float residual_scale, \
                                                  float eps) {                                              \
        G4_LET_DEPENDENTS_LAUNCH();                                                                         \
        dual_rms_norm_plus_res<T, 8>(residual, x, w1, w2, out_residual, out_y, cols, residual_scale, eps);  \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(G4_LEAN_NORM_MAX_THREADS, 3)                               \
        g4_dual_rms_norm_plus_res_wide_lean_##NAME(const T* residual, const T* x, const T* w1, const T* w2, \
                                                   T* out_residual, T* out_y, int cols, float residual_scale, \
                                                   float eps) {                                             \
        G4_LET_DEPENDENTS_LAUNCH();                                                                         \
        dual_rms_norm_plus_res_lean<T>(residual, x, w1, w2, out_residual, out_y, cols, residual_scale, eps); \
    }
G4_FOR_FLOAT_TYPES(G4_NORMS)

// dual_rms_norm_plus_res_e4m3: y rounded to e4m3 per row (a decode step's input of an FP8_DYNAMIC
// checkpoint's gate/up or q/k/v). V = 8 over up to 512 threads (rows up to 4,096 wide) or, for up
// to 8 rows 4,097–8,192 wide, up to 1,024 (`_few_rows`).
#define G4_DUAL_NORM_E4M3(NAME, T)                                                                             \
    extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS) g4_dual_rms_norm_plus_res_e4m3_##NAME(   \
        const T* residual, const T* x, const T* w1, const T* w2, T* out_residual, T* out_y, int cols,            \
        float residual_scale, float eps) {                                                                     \
        G4_LET_DEPENDENTS_LAUNCH();                                                                            \
        dual_rms_norm_plus_res<T, 8, true>(residual, x, w1, w2, out_residual, out_y, cols, residual_scale, eps); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(G4_FEW_ROWS_NORM_MAX_THREADS)                                 \
        g4_dual_rms_norm_plus_res_e4m3_few_rows_##NAME(const T* residual, const T* x, const T* w1, const T* w2, \
                                                       T* out_residual, T* out_y, int cols, float residual_scale, \
                                                       float eps) {                                            \
        G4_LET_DEPENDENTS_LAUNCH();                                                                            \
        dual_rms_norm_plus_res<T, 8, true>(residual, x, w1, w2, out_residual, out_y, cols, residual_scale, eps); \
    }
G4_FOR_FLOAT_TYPES(G4_DUAL_NORM_E4M3)

// dual_rms_norm_plus_res_f16: y in f16 on a power-of-two scale a row (store_row_f16_scaled), the
// input of an FP8 checkpoint's q/k/v or gate/up GEMM on Hopper; bf16 only. Prefill's rows: up to
// 4,096 wide in V = 8 over up to 512 threads, or 4,097–6,144 wide (31B's 5,376) as `_wide_lean`.
template <typename T, bool LEAN>
__device__ void dual_rms_norm_plus_res_f16(const T* residual, const T* x, const T* w1, const T* w2, T* out_residual,
                                           g4_f16* out_y, float* row_scale, int cols, float residual_scale,
                                           float eps) {
    float y[LEAN ? 16 : 8];
    if constexpr (LEAN)
        dual_norm_y_lean<T>(residual, x, w1, w2, out_residual, cols, residual_scale, eps, y);
    else
        dual_norm_y<T, 8>(residual, x, w1, w2, out_residual, cols, residual_scale, eps, y);
    store_row_f16_scaled<T>(out_y, row_scale, cols, y);
}
extern "C" __global__ void __launch_bounds__(G4_NORM_MAX_THREADS)
    g4_dual_rms_norm_plus_res_f16_bf16(const g4_bf16* residual, const g4_bf16* x, const g4_bf16* w1,
                                       const g4_bf16* w2, g4_bf16* out_residual, g4_f16* out_y, float* row_scale,
                                       int cols, float residual_scale, float eps) {
    G4_LET_DEPENDENTS_LAUNCH();
    dual_rms_norm_plus_res_f16<g4_bf16, false>(residual, x, w1, w2, out_residual, out_y, row_scale, cols,
                                               residual_scale, eps);
}
extern "C" __global__ void __launch_bounds__(G4_LEAN_NORM_MAX_THREADS, 3)
    g4_dual_rms_norm_plus_res_f16_wide_lean_bf16(const g4_bf16* residual, const g4_bf16* x, const g4_bf16* w1,
                                                 const g4_bf16* w2, g4_bf16* out_residual, g4_f16* out_y,
                                                 float* row_scale, int cols, float residual_scale, float eps) {
    G4_LET_DEPENDENTS_LAUNCH();
    dual_rms_norm_plus_res_f16<g4_bf16, true>(residual, x, w1, w2, out_residual, out_y, row_scale, cols,
                                              residual_scale, eps);
}
