// Stop 32's candidate grouped expert GEMM (WMMA), kept as grouped_bench.cu's yardstick: it reads
// the per-expert row offsets on the device, as g4's mma.sync kernel (moe_grouped.cu) does, and
// measured slower than cuBLAS's grouped GEMM (docs/PERFORMANCE.md).
// CUDA only (sm_80 and newer), as the benchmarks are.
#pragma once
#include <mma.h>
#include "../../src/kernels/cuda/moe_grouped.cu"

// c rows [offsets[e], offsets[e + 1]) = a rows × b[e]ᵀ: a [R, K], b [E, N, K], c [R, N]. One block
// per (expert, BN output columns), blockIdx.x = expert · column_blocks + column block; it streams
// that slice of the expert's weights once for every BM of the expert's rows.

// On the tensor cores (bf16, f16): WMMA 16×16×16 tiles, a cp.async pipeline of STAGES stages of
// BK along K (K % BK == 0), rows padded in shared memory against bank conflicts; each warp owns
// WN columns of the block's BN and all its BM rows, and skips the 16-row fragments past the
// expert's rows (a prefill piece gives each expert a few dozen: kernel-bench/grouped_bench.cu
// measured that skipping them, and so the multiplies, is what moves this kernel at 26B-A4B's sizes).
#define G4_GROUPED_PAD 8

template <typename T, int BM, int BN, int WN, int BK, int STAGES>
__device__ void grouped_gemm_wmma(const T* a, const T* b, T* c, const uint32_t* offsets, int n, int k,
                                  int column_blocks) {
    using namespace nvcuda;
    constexpr int LD = BK + G4_GROUPED_PAD, MF = BM / 16, NF = WN / 16;
    constexpr int THREADS = 32 * BN / WN;
    constexpr int A_STAGE = BM * LD, B_STAGE = BN * LD;
    extern __shared__ __align__(128) unsigned char shared[];
    T* as = reinterpret_cast<T*>(shared);
    T* bs = as + STAGES * A_STAGE;
    float* out = reinterpret_cast<float*>(shared);
    const int e = blockIdx.x / column_blocks, n0 = blockIdx.x % column_blocks * BN;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int tid = threadIdx.x, warp = tid / 32;
    const T* weights = b + (size_t)e * n * k;
    const int k_tiles = k / BK;
    for (int m0 = 0; m0 < rows; m0 += BM) {
        const int fragments = min(MF, (rows - m0 + 15) / 16);  // the same in every warp
        auto load = [&](int stage, int k0) {
            for (int v = tid; v < fragments * 16 * BK / 8; v += THREADS) {
                const int r = v / (BK / 8), col = v % (BK / 8) * 8;
                const bool valid = m0 + r < rows;
                const T* src = a + (size_t)(first + (valid ? m0 + r : 0)) * k + k0 + col;
                g4_cp_async16(as + stage * A_STAGE + r * LD + col, src, valid);
            }
            for (int v = tid; v < BN * BK / 8; v += THREADS) {
                const int r = v / (BK / 8), col = v % (BK / 8) * 8;
                const bool valid = n0 + r < n;
                const T* src = weights + (size_t)(valid ? n0 + r : 0) * k + k0 + col;
                g4_cp_async16(bs + stage * B_STAGE + r * LD + col, src, valid);
            }
        };
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[MF][NF];
#pragma unroll
        for (int i = 0; i < MF; ++i) {
#pragma unroll
            for (int j = 0; j < NF; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
        }
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < k_tiles) load(s, s * BK);
            g4_cp_async_commit();
        }
        for (int kt = 0; kt < k_tiles; ++kt) {
            g4_cp_async_wait<STAGES - 2>();
            __syncthreads();
            const int next = kt + STAGES - 1;
            if (next < k_tiles) load(next % STAGES, next * BK);
            g4_cp_async_commit();
            const T* a_stage = as + (kt % STAGES) * A_STAGE;
            const T* b_stage = bs + (kt % STAGES) * B_STAGE + warp * WN * LD;
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b_frag[NF];
#pragma unroll
                for (int j = 0; j < NF; ++j) wmma::load_matrix_sync(b_frag[j], b_stage + j * 16 * LD + kk, LD);
#pragma unroll
                for (int i = 0; i < MF; ++i) {
                    if (i < fragments) {
                        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a_frag;
                        wmma::load_matrix_sync(a_frag, a_stage + i * 16 * LD + kk, LD);
#pragma unroll
                        for (int j = 0; j < NF; ++j) wmma::mma_sync(acc[i][j], a_frag, b_frag[j], acc[i][j]);
                    }
                }
            }
        }
        g4_cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int i = 0; i < MF; ++i) {
#pragma unroll
            for (int j = 0; j < NF; ++j) {
                if (i < fragments)
                    wmma::store_matrix_sync(out + i * 16 * (BN + 4) + warp * WN + j * 16, acc[i][j], BN + 4,
                                            wmma::mem_row_major);
            }
        }
        __syncthreads();
        for (int v = tid; v < fragments * 16 * BN; v += THREADS) {
            const int r = v / BN, col = v % BN;
            if (m0 + r < rows && n0 + col < n)
                c[(size_t)(first + m0 + r) * n + n0 + col] = g4_from_f32<T>(out[r * (BN + 4) + col]);
        }
        __syncthreads();
    }
}

// One tile shape as a kernel, with the launch geometry it needs.
template <int BM, int BN, int WN, int BK, int STAGES>
__global__ void __launch_bounds__(32 * BN / WN)
    grouped_gemm_bt(const g4_bf16* a, const g4_bf16* b, g4_bf16* c, const uint32_t* offsets, int n, int k,
                    int column_blocks) {
    G4_KERNEL_START();
    grouped_gemm_wmma<g4_bf16, BM, BN, WN, BK, STAGES>(a, b, c, offsets, n, k, column_blocks);
}

template <int BM_, int BN_, int WN_, int BK_, int STAGES_>
struct GroupedShape {
    static constexpr int bm = BM_, bn = BN_, wn = WN_, bk = BK_, stages = STAGES_;
    static constexpr int threads = 32 * BN_ / WN_;
    static constexpr int pipe_bytes = STAGES_ * (BM_ + BN_) * (BK_ + G4_GROUPED_PAD) * 2;
    static constexpr int epilogue_bytes = BM_ * (BN_ + 4) * 4;
    static constexpr int shared_bytes = pipe_bytes > epilogue_bytes ? pipe_bytes : epilogue_bytes;
    static constexpr auto kernel = grouped_gemm_bt<BM_, BN_, WN_, BK_, STAGES_>;
};
