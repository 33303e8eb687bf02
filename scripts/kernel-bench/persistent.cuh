// Stages of a decode layer as one persistent kernel (chain_bench's candidates): the MLP's two
// GEMVs, those with the norm before them, and the layer from its o GEMV to the next layer's q/k/v
// GEMV. The question a persistent layer (or step) kernel hangs on is whether a grid-wide barrier
// between two dependent stages costs less than the kernel boundary g4 has there. Every block of
// such a kernel is resident at once (the host sizes the grid from the occupancy), loops over the
// GEMV work g4's blocks would have done, and meets the others at a barrier in software where g4
// ends one kernel and starts the next.
//
// The GEMV work is g4's (gemv.cuh's gemv_partials for one row of X): the same warps per output
// column splitting K the same way, the same loads a lane, the sums in the same order, so the
// outputs are the same bits as g4's two kernels'.
#pragma once
#include "../../src/kernels/cuda/gemv.cuh"

#define PERSISTENT_WARPS 8
#define PERSISTENT_THREADS (32 * PERSISTENT_WARPS)
// Five 8-warp blocks a multiprocessor at 48 registers a thread: the 40 warps g4's GEMVs keep in
// flight.
#define PERSISTENT_BLOCKS_PER_SM 5

// A grid-wide barrier in two halves, so that a block can issue loads of what no stage writes (the
// next stage's weights) between arriving and waiting. The last block to arrive resets the count
// and bumps the generation the others spin on.
struct GridBarrier {
    unsigned arrived, generation;
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The generation this block arrived in (meaningful in thread 0).
__device__ __forceinline__ unsigned barrier_arrive(GridBarrier* barrier) {
    __syncthreads();
    unsigned generation = 0;
    if (threadIdx.x == 0) {
        // The generation cannot move before this block arrives, so this read is current.
        generation = load_acquire(&barrier->generation);
        __threadfence();
        if (atomicAdd(&barrier->arrived, 1u) == gridDim.x - 1) {
            barrier->arrived = 0;
            __threadfence();
            atomicExch(&barrier->generation, generation + 1);
        }
    }
    return generation;
}

__device__ __forceinline__ void barrier_wait(GridBarrier* barrier, unsigned generation) {
    if (threadIdx.x == 0) {
        while (load_acquire(&barrier->generation) == generation) {
        }
        __threadfence();
    }
    __syncthreads();
}

// One row of X through W (bf16) as g4's one-row GEMV (GELU false: `outs` columns) or GeGLU GEMV
// (GELU true: `outs` products, W packed [gate ‖ up] where `up` is null, else W the gate alone and
// `up` the other factor), `wpc` warps per column. The grid walks the blocks g4 would launch of
// PERSISTENT_WARPS warps each; each walk's first weight batch is loaded before `wait()` (every
// thread calls it once, before reading X). BATCH does not change the sums' order.
template <int BATCH, bool GELU, typename Wait>
__device__ void persistent_gemv(const bf* x, const bf* w, const bf* up, bf* y, int outs, int k, int wpc, Wait wait) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int halves = GELU && !up ? 2 : 1, warps_per_out = wpc * halves;
    const int outs_per_block = PERSISTENT_WARPS / warps_per_out;
    const int work_blocks = (outs + outs_per_block - 1) / outs_per_block;
    const int vectors = k / 8, step = 32 * wpc, part = warp % wpc, half = (warp / wpc) % halves;
    __shared__ float partial[PERSISTENT_WARPS][1];
    bool waited = false;
    for (int work = blockIdx.x; work < work_blocks; work += gridDim.x) {
        const int out = work * outs_per_block + warp / warps_per_out;
        const bool has_row = out < outs;
        const uint4* w_row = reinterpret_cast<const uint4*>(w + (size_t)(out + half * outs) * k);
        float sum = 0.0f;
        // A warp's rounds of BATCH loads: the same per warp for all its lanes, so that the wait
        // below is reached by every thread.
        for (int first = part * 32; first < vectors || !waited; first += step * BATCH) {
            uint4 batch[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = first + lane + u * step;
                batch[u] = has_row && i < vectors ? w_row[i] : make_uint4(0, 0, 0, 0);
            }
            if (!waited) {
                wait();
                waited = true;
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = first + lane + u * step;
                if (!has_row || i >= vectors) break;
                float wf[8], xf[8];
                DenseWeights<bf>::decode(batch[u], wf);
                x_values<bf, DenseWeights<bf>>(x, i, xf);
#pragma unroll
                for (int e = 0; e < 8; ++e) sum += xf[e] * wf[e];
            }
        }
        for (int bits = 16; bits > 0; bits >>= 1) sum += G4_SHFL_XOR(sum, bits);
        if (lane == 0) partial[warp][0] = sum;
        __syncthreads();
        if (has_row && part == 0 && half == 0 && lane == 0) {
            if (GELU) {
                const float gate = g4_round<bf>(gemv_total<1>(partial, warp, wpc, 0));
                const float u = up ? g4_to_f32(up[out]) : g4_round<bf>(gemv_total<1>(partial, warp + wpc, wpc, 0));
                y[out] = g4_from_f32<bf>(g4_round<bf>(g4_gelu_tanh(gate)) * u);
            } else {
                y[out] = g4_from_f32<bf>(gemv_total<1>(partial, warp, wpc, 0));
            }
        }
        // The next walk's partials overwrite these.
        __syncthreads();
    }
    if (!waited) wait();
}

// The MLP's gate/up GEMV with its GeGLU, then its down GEMV, with a grid barrier between them.
// With PREFETCH a block's first down weights are in flight while it waits at the barrier;
// without, it waits first. The next kernel may launch only at the end: a block of it, waiting for
// this kernel, could otherwise hold the slot one of this kernel's blocks needs to reach the
// barrier.
template <int DOWN_BATCH, bool PREFETCH>
__global__ void __launch_bounds__(PERSISTENT_THREADS, PERSISTENT_BLOCKS_PER_SM)
    persistent_mlp(const bf* x, const bf* w_gate_up, bf* act, const bf* w_down, bf* out, int width, int hidden,
                   int gate_up_wpc, int down_wpc, GridBarrier* barrier) {
    persistent_gemv<G4_GEMV_PAIR_BATCH, true>(x, w_gate_up, nullptr, act, width, hidden, gate_up_wpc,
                                              [] { G4_WAIT_FOR_INPUTS(); });
    const unsigned generation = barrier_arrive(barrier);
    if (PREFETCH) {
        persistent_gemv<DOWN_BATCH, false>(act, w_down, nullptr, out, hidden, width, down_wpc,
                                           [&] { barrier_wait(barrier, generation); });
    } else {
        barrier_wait(barrier, generation);
        persistent_gemv<DOWN_BATCH, false>(act, w_down, nullptr, out, hidden, width, down_wpc, [] {});
    }
    G4_LET_DEPENDENTS_LAUNCH();
}

// The widest row a block normalises into shared memory (31B's hidden size).
#define PERSISTENT_MAX_HIDDEN 5376

// Four bf16 of a row (8 bytes) as floats, and back: the norms below walk rows 4 values a thread
// at a time, so that the loaded weights of the GEMV after them stay in registers beside them.
__device__ __forceinline__ void load4(const bf* row, int quad, float (&out)[4]) {
    const Pack<bf, 4> p = reinterpret_cast<const Pack<bf, 4>*>(row)[quad];
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] = g4_to_f32(p.v[e]);
}
__device__ __forceinline__ void store4(bf* row, int quad, const float (&v)[4]) {
    Pack<bf, 4> p;
#pragma unroll
    for (int e = 0; e < 4; ++e) p.v[e] = g4_from_f32<bf>(v[e]);
    reinterpret_cast<Pack<bf, 4>*>(row)[quad] = p;
}

// 1 / rms of a row, by this block.
__device__ __forceinline__ float block_inv_rms(const bf* row, int cols, float eps) {
    float sum = 0.0f;
    for (int quad = threadIdx.x; quad < cols / 4; quad += blockDim.x) {
        float v[4];
        load4(row, quad, v);
#pragma unroll
        for (int e = 0; e < 4; ++e) sum += v[e] * v[e];
    }
    return 1.0f / sqrtf(g4_block_sum(sum) / cols + eps);
}

// residual + rms_norm(branch)·w, each element as `combine(residual, branch, 1 / rms, w)` rounds
// it, by this block alone into `y` (shared memory), and to `out` where given.
template <typename Combine>
__device__ void block_add_normed(const bf* residual, const bf* branch, const bf* w, bf* out, bf* y, int cols,
                                 float eps, Combine combine) {
    const float inv_branch = block_inv_rms(branch, cols, eps);
    for (int quad = threadIdx.x; quad < cols / 4; quad += blockDim.x) {
        float b[4], r[4], wf[4];
        load4(branch, quad, b);
        load4(residual, quad, r);
        load4(w, quad, wf);
#pragma unroll
        for (int e = 0; e < 4; ++e) r[e] = combine(r[e], b[e], inv_branch, wf[e]);
        store4(y, quad, r);
        if (out) store4(out, quad, r);
    }
    __syncthreads();
}

// dual_rms_norm_plus_res (norms.cu) of one row, computed by this block alone into `y` (shared
// memory): residual + rms_norm(branch)·w1 becomes the new residual (written to `out_residual`
// where given), and y its rms_norm·w2. The same roundings as g4's kernel; its sums over the row
// are in another order (another block size), so y may differ from g4's in a last bit.
__device__ void block_dual_norm(const bf* residual, const bf* branch, const bf* w1, const bf* w2, bf* out_residual,
                                bf* y, int cols, float eps) {
    block_add_normed(residual, branch, w1, out_residual, y, cols, eps, [](float r, float b, float inv, float w) {
        return residual_after<bf>(r, b, inv, w, 1.0f);
    });
    const float inv_residual = block_inv_rms(y, cols, eps);
    for (int quad = threadIdx.x; quad < cols / 4; quad += blockDim.x) {
        float r[4], w[4];
        load4(y, quad, r);
        load4(w2, quad, w);
#pragma unroll
        for (int e = 0; e < 4; ++e) r[e] = r[e] * inv_residual * w[e];
        store4(y, quad, r);
    }
    __syncthreads();
}

// persistent_mlp with the dual norm before it folded in: every block normalises the row itself
// (while its first gate/up weights are in flight), so the norm's own launch goes; block 0 writes
// the new residual.
template <int DOWN_BATCH>
__global__ void __launch_bounds__(PERSISTENT_THREADS, PERSISTENT_BLOCKS_PER_SM)
    persistent_norm_mlp(const bf* residual, const bf* branch, const bf* w1, const bf* w2, bf* out_residual,
                        const bf* w_gate_up, bf* act, const bf* w_down, bf* out, int width, int hidden,
                        int gate_up_wpc, int down_wpc, GridBarrier* barrier) {
    __shared__ __align__(16) bf normed[PERSISTENT_MAX_HIDDEN];
    persistent_gemv<G4_GEMV_PAIR_BATCH, true>(normed, w_gate_up, nullptr, act, width, hidden, gate_up_wpc, [&] {
        G4_WAIT_FOR_INPUTS();
        block_dual_norm(residual, branch, w1, w2, blockIdx.x == 0 ? out_residual : nullptr, normed, hidden, 1e-6f);
    });
    const unsigned generation = barrier_arrive(barrier);
    persistent_gemv<DOWN_BATCH, false>(act, w_down, nullptr, out, hidden, width, down_wpc,
                                       [&] { barrier_wait(barrier, generation); });
    G4_LET_DEPENDENTS_LAUNCH();
}

// rms_norm_plus_add (norms.cu) of one row by this block alone: y = residual + rms_norm(x)·w into
// shared memory, and to `out` where given. Its sum over the row is in another order than g4's.
__device__ void block_norm_plus_add(const bf* residual, const bf* x, const bf* w, bf* out, bf* y, int cols,
                                    float eps) {
    block_add_normed(residual, x, w, out, y, cols, eps,
                     [](float r, float b, float inv, float wf) { return r + g4_round<bf>(b * inv * wf); });
}

// A decode layer from its attention's output to the next layer's q/k/v, g4's kernels for it
// (each a stage here, a grid barrier between two): the o GEMV; the dual norm and the gate/up GEMV
// with its GeGLU; the down GEMV; (E4B) rms_norm_plus_add and the per-layer input's gate GEMV with
// its GeGLU, then its projection; the dual norm at the layer's end and the next layer's q/k/v
// GEMV. Every block computes a norm itself into shared memory where the GEMV after it needs its
// row; block 0 writes the rows later stages read from memory.
struct LayerTail {
    const bf *attn, *w_o;
    bf* o;
    const bf *residual, *w_attn_norm, *w_mlp_norm;
    bf* residual_mid;
    const bf* w_gate_up;
    bf* act;
    const bf* w_down;
    bf* down;
    const bf *w_ple_norm, *ple_in, *w_ple_gate, *w_ple_proj;  // E4B's per-layer input
    bf *after_mlp, *ple_act, *ple_out;
    const bf *w_end_norm, *w_next_norm;
    bf* residual_out;
    const bf* w_qkv;
    bf* qkv;
    int hidden, attn_cols, width, ple, qkv_rows;
    int o_wpc, gate_up_wpc, down_wpc, ple_gate_wpc, ple_proj_wpc, qkv_wpc;
    GridBarrier* barrier;
};

template <int O_BATCH, int DOWN_BATCH, int QKV_BATCH>
__global__ void __launch_bounds__(PERSISTENT_THREADS, PERSISTENT_BLOCKS_PER_SM) persistent_layer_tail(LayerTail a) {
    __shared__ __align__(16) bf rows[2][PERSISTENT_MAX_HIDDEN];
    const float eps = 1e-6f;
    persistent_gemv<O_BATCH, false>(a.attn, a.w_o, nullptr, a.o, a.hidden, a.attn_cols, a.o_wpc,
                                    [] { G4_WAIT_FOR_INPUTS(); });
    unsigned generation = barrier_arrive(a.barrier);
    persistent_gemv<G4_GEMV_PAIR_BATCH, true>(rows[0], a.w_gate_up, nullptr, a.act, a.width, a.hidden, a.gate_up_wpc,
                                              [&] {
                                                  barrier_wait(a.barrier, generation);
                                                  block_dual_norm(a.residual, a.o, a.w_attn_norm, a.w_mlp_norm,
                                                                  blockIdx.x == 0 ? a.residual_mid : nullptr,
                                                                  rows[0], a.hidden, eps);
                                              });
    generation = barrier_arrive(a.barrier);
    persistent_gemv<DOWN_BATCH, false>(a.act, a.w_down, nullptr, a.down, a.hidden, a.width, a.down_wpc,
                                       [&] { barrier_wait(a.barrier, generation); });
    generation = barrier_arrive(a.barrier);
    const bf *end_residual = a.residual_mid, *end_branch = a.down;
    if (a.ple) {
        persistent_gemv<G4_GEMV_NARROW_BATCH, true>(rows[1], a.w_ple_gate, a.ple_in, a.ple_act, a.ple, a.hidden,
                                                    a.ple_gate_wpc, [&] {
                                                        barrier_wait(a.barrier, generation);
                                                        block_norm_plus_add(a.residual_mid, a.down, a.w_ple_norm,
                                                                            blockIdx.x == 0 ? a.after_mlp : nullptr,
                                                                            rows[1], a.hidden, eps);
                                                    });
        generation = barrier_arrive(a.barrier);
        persistent_gemv<G4_GEMV_NARROW_BATCH, false>(a.ple_act, a.w_ple_proj, nullptr, a.ple_out, a.hidden, a.ple,
                                                     a.ple_proj_wpc, [&] { barrier_wait(a.barrier, generation); });
        generation = barrier_arrive(a.barrier);
        end_residual = a.after_mlp, end_branch = a.ple_out;
    }
    persistent_gemv<QKV_BATCH, false>(rows[0], a.w_qkv, nullptr, a.qkv, a.qkv_rows, a.hidden, a.qkv_wpc, [&] {
        barrier_wait(a.barrier, generation);
        block_dual_norm(end_residual, end_branch, a.w_end_norm, a.w_next_norm,
                        blockIdx.x == 0 ? a.residual_out : nullptr, rows[0], a.hidden, eps);
    });
    G4_LET_DEPENDENTS_LAUNCH();
}

// `rounds` barriers and nothing else: what one costs at a grid's size.
__global__ void barrier_rounds(GridBarrier* barrier, int rounds) {
    G4_WAIT_FOR_INPUTS();
    for (int r = 0; r < rounds; ++r) barrier_wait(barrier, barrier_arrive(barrier));
    G4_LET_DEPENDENTS_LAUNCH();
}
