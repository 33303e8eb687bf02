// A decode layer's MLP as one persistent kernel: the question a persistent layer (or step) kernel
// hangs on is whether a grid-wide barrier between two dependent GEMVs costs less than the kernel
// boundary g4 has there. Every block of the kernel is resident at once (the host sizes the grid
// from the occupancy), loops over the GEMV work g4's blocks would have done, and meets the others
// at a barrier in software where g4 ends one kernel and starts the next.
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
// (GELU true: W packed [gate ‖ up], `outs` products), `wpc` warps per column. The grid walks the
// blocks g4 would launch of PERSISTENT_WARPS warps each; each walk's first weight batch is loaded
// before `wait()` (every thread calls it once, before reading X).
template <int BATCH, bool GELU, typename Wait>
__device__ void persistent_gemv(const bf* x, const bf* w, bf* y, int outs, int k, int wpc, Wait wait) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int halves = GELU ? 2 : 1, warps_per_out = wpc * halves;
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
                const float up = g4_round<bf>(gemv_total<1>(partial, warp + wpc, wpc, 0));
                y[out] = g4_from_f32<bf>(g4_round<bf>(g4_gelu_tanh(gate)) * up);
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
    persistent_gemv<G4_GEMV_PAIR_BATCH, true>(x, w_gate_up, act, width, hidden, gate_up_wpc,
                                              [] { G4_WAIT_FOR_INPUTS(); });
    const unsigned generation = barrier_arrive(barrier);
    if (PREFETCH) {
        persistent_gemv<DOWN_BATCH, false>(act, w_down, out, hidden, width, down_wpc,
                                           [&] { barrier_wait(barrier, generation); });
    } else {
        barrier_wait(barrier, generation);
        persistent_gemv<DOWN_BATCH, false>(act, w_down, out, hidden, width, down_wpc, [] {});
    }
    G4_LET_DEPENDENTS_LAUNCH();
}

// The widest row a block normalises into shared memory (31B's hidden size).
#define PERSISTENT_MAX_HIDDEN 5376

// dual_rms_norm_plus_res (norms.cu) of one row, computed by this block alone into `y` (shared
// memory): residual + rms_norm(branch)·w1 becomes the new residual (written to `out_residual`
// where given), and y its rms_norm·w2. The same roundings as g4's kernel; its sums over the row
// are in another order (another block size), so y may differ from g4's in a last bit.
__device__ void block_dual_norm(const bf* residual, const bf* branch, const bf* w1, const bf* w2, bf* out_residual,
                                bf* y, int cols, float eps) {
    const int vectors = cols / 8;
    float sum = 0.0f;
    for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
        float b[8];
        DenseWeights<bf>::decode(reinterpret_cast<const uint4*>(branch)[v], b);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum += b[e] * b[e];
    }
    const float inv_branch = 1.0f / sqrtf(g4_block_sum(sum) / cols + eps);
    sum = 0.0f;
    for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
        float b[8], r[8], w[8];
        DenseWeights<bf>::decode(reinterpret_cast<const uint4*>(branch)[v], b);
        DenseWeights<bf>::decode(reinterpret_cast<const uint4*>(residual)[v], r);
        DenseWeights<bf>::decode(reinterpret_cast<const uint4*>(w1)[v], w);
        Pack<bf, 8> p;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            r[e] = residual_after<bf>(r[e], b[e], inv_branch, w[e], 1.0f);
            sum += r[e] * r[e];
            p.v[e] = g4_from_f32<bf>(r[e]);
        }
        reinterpret_cast<Pack<bf, 8>*>(y)[v] = p;
        if (out_residual) reinterpret_cast<Pack<bf, 8>*>(out_residual)[v] = p;
    }
    const float inv_residual = 1.0f / sqrtf(g4_block_sum(sum) / cols + eps);
    for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
        float r[8], w[8];
        DenseWeights<bf>::decode(reinterpret_cast<const uint4*>(y)[v], r);
        DenseWeights<bf>::decode(reinterpret_cast<const uint4*>(w2)[v], w);
        Pack<bf, 8> p;
#pragma unroll
        for (int e = 0; e < 8; ++e) p.v[e] = g4_from_f32<bf>(r[e] * inv_residual * w[e]);
        reinterpret_cast<Pack<bf, 8>*>(y)[v] = p;
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
    persistent_gemv<G4_GEMV_PAIR_BATCH, true>(normed, w_gate_up, act, width, hidden, gate_up_wpc, [&] {
        G4_WAIT_FOR_INPUTS();
        block_dual_norm(residual, branch, w1, w2, blockIdx.x == 0 ? out_residual : nullptr, normed, hidden, 1e-6f);
    });
    const unsigned generation = barrier_arrive(barrier);
    persistent_gemv<DOWN_BATCH, false>(act, w_down, out, hidden, width, down_wpc,
                                       [&] { barrier_wait(barrier, generation); });
    G4_LET_DEPENDENTS_LAUNCH();
}

// `rounds` barriers and nothing else: what one costs at a grid's size.
__global__ void barrier_rounds(GridBarrier* barrier, int rounds) {
    G4_WAIT_FOR_INPUTS();
    for (int r = 0; r < rounds; ++r) barrier_wait(barrier, barrier_arrive(barrier));
    G4_LET_DEPENDENTS_LAUNCH();
}
