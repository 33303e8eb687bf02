// A grouped expert GEMM that reads the per-expert row offsets on the device (what a MoE prefill
// needs to skip the host round trip: moe_experts.rs hands cuBLAS's grouped GEMM counts from the
// host), at 26B-A4B's sizes: 512 tokens × top-8 of 128 experts, gate_up [1408, 2816] and down
// [2816, 704] per expert, bf16. Each block takes one expert and 128 output columns, streams that
// slice of the expert's weights once through a cp.async pipeline and multiplies it with all of the
// expert's rows on the tensor cores (WMMA). Checked against a plain kernel; timed beside a plain
// read of the weights (cuBLAS's grouped GEMM did both projections in 447 µs per layer, ≈ 3.4 TB/s,
// in the 26B-A4B prefill profile of docs/PERFORMANCE.md).
#include <mma.h>
#include "bench_common.cuh"

using namespace nvcuda;

__device__ __forceinline__ void cp_async16(void* shared, const void* global, bool valid) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

constexpr int BN = 128, BK = 32, STAGES = 3, THREADS = 256, PAD = 8;

// c rows [offsets[e], offsets[e+1]) = a rows × b[e]ᵀ; a [R, K], b [E, N, K], c [R, N]; K % 32 == 0.
template <int BM>
__global__ void __launch_bounds__(THREADS) grouped_gemm_bt(const bf* a, const bf* b, bf* c, const int* offsets,
                                                           int n, int k) {
    constexpr int MF = BM / 16;  // row fragments per warp; warp w owns columns [16w, 16w + 16)
    constexpr int A_STAGE = BM * (BK + PAD), B_STAGE = BN * (BK + PAD);
    constexpr int PIPE_BYTES = STAGES * (A_STAGE + B_STAGE) * 2, OUT_BYTES = BM * (BN + 4) * 4;
    __shared__ __align__(128) unsigned char shared[PIPE_BYTES > OUT_BYTES ? PIPE_BYTES : OUT_BYTES];
    bf* as = reinterpret_cast<bf*>(shared);
    bf* bs = as + STAGES * A_STAGE;
    float* out = reinterpret_cast<float*>(shared);
    const int e = blockIdx.y, n0 = blockIdx.x * BN;
    const int first = offsets[e], rows = offsets[e + 1] - first;
    const int tid = threadIdx.x, warp = tid / 32;
    const bf* weights = b + (size_t)e * n * k;
    const int k_tiles = k / BK;
    for (int m0 = 0; m0 < rows; m0 += BM) {
        auto load = [&](int stage, int k0) {
            for (int v = tid; v < BM * BK / 8; v += THREADS) {
                const int r = v / (BK / 8), col = v % (BK / 8) * 8;
                const bool valid = m0 + r < rows;
                const bf* src = a + (size_t)(first + (valid ? m0 + r : 0)) * k + k0 + col;
                cp_async16(as + stage * A_STAGE + r * (BK + PAD) + col, src, valid);
            }
            for (int v = tid; v < BN * BK / 8; v += THREADS) {
                const int r = v / (BK / 8), col = v % (BK / 8) * 8;
                const bool valid = n0 + r < n;
                const bf* src = weights + (size_t)(valid ? n0 + r : 0) * k + k0 + col;
                cp_async16(bs + stage * B_STAGE + r * (BK + PAD) + col, src, valid);
            }
        };
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[MF];
#pragma unroll
        for (int i = 0; i < MF; ++i) wmma::fill_fragment(acc[i], 0.0f);
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < k_tiles) load(s, s * BK);
            cp_async_commit();
        }
        for (int kt = 0; kt < k_tiles; ++kt) {
            cp_async_wait<STAGES - 2>();
            __syncthreads();
            const int next = kt + STAGES - 1;
            if (next < k_tiles) load(next % STAGES, next * BK);
            cp_async_commit();
            const bf* a_stage = as + (kt % STAGES) * A_STAGE;
            const bf* b_stage = bs + (kt % STAGES) * B_STAGE + warp * 16 * (BK + PAD);
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf, wmma::col_major> b_frag;
                wmma::load_matrix_sync(b_frag, b_stage + kk, BK + PAD);
#pragma unroll
                for (int i = 0; i < MF; ++i) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf, wmma::row_major> a_frag;
                    wmma::load_matrix_sync(a_frag, a_stage + i * 16 * (BK + PAD) + kk, BK + PAD);
                    wmma::mma_sync(acc[i], a_frag, b_frag, acc[i]);
                }
            }
        }
        cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int i = 0; i < MF; ++i)
            wmma::store_matrix_sync(out + i * 16 * (BN + 4) + warp * 16, acc[i], BN + 4, wmma::mem_row_major);
        __syncthreads();
        for (int v = tid; v < BM * BN; v += THREADS) {
            const int r = v / BN, col = v % BN;
            if (m0 + r < rows && n0 + col < n)
                c[(size_t)(first + m0 + r) * n + n0 + col] = __float2bfloat16(out[r * (BN + 4) + col]);
        }
        __syncthreads();
    }
}

// One thread per output, f32 sums: the check.
__global__ void plain_grouped(const bf* a, const bf* b, bf* c, const int* row_expert, int rows, int n, int k) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * n) return;
    const int r = i / n, col = i % n;
    const bf* x = a + (size_t)r * k;
    const bf* w = b + ((size_t)row_expert[r] * n + col) * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += __bfloat162float(x[j]) * __bfloat162float(w[j]);
    c[i] = __float2bfloat16(sum);
}

int main() {
    Bench bench;
    const int experts = 128, tokens = 512, top = 8, routed = tokens * top;
    // Each token's 8 distinct experts, uniformly (a fixed LCG): about 32 rows per expert.
    std::vector<int> counts(experts, 0);
    uint64_t state = 12345;
    for (int t = 0; t < tokens; ++t) {
        std::vector<int> all(experts);
        for (int i = 0; i < experts; ++i) all[i] = i;
        for (int s = 0; s < top; ++s) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            const int j = s + (int)((state >> 33) % (experts - s));
            std::swap(all[s], all[j]);
            ++counts[all[s]];
        }
    }
    std::vector<int> offsets(experts + 1, 0), row_expert(routed);
    for (int e = 0; e < experts; ++e) {
        offsets[e + 1] = offsets[e] + counts[e];
        for (int r = offsets[e]; r < offsets[e + 1]; ++r) row_expert[r] = e;
    }
    printf("rows per expert: min %d, max %d\n", *std::min_element(counts.begin(), counts.end()),
           *std::max_element(counts.begin(), counts.end()));
    int* offsets_dev = bench.alloc<int>(experts + 1);
    int* row_expert_dev = bench.alloc<int>(routed);
    CHECK(cudaMemcpy(offsets_dev, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(row_expert_dev, row_expert.data(), routed * 4, cudaMemcpyHostToDevice));
    struct Shape {
        const char* name;
        int n, k;
    };
    printf("%-8s %-22s %10s %10s %12s\n", "proj", "kernel", "µs", "TB/s", "max rel diff");
    for (const Shape shape : {Shape{"gate_up", 1408, 2816}, Shape{"down", 2816, 704}}) {
        const size_t weight_count = (size_t)experts * shape.n * shape.k;
        const double bytes = weight_count * 2.0;
        bf* a = bench.filled((size_t)routed * shape.k);
        bf* b = bench.filled(weight_count);
        bf* expected = bench.alloc<bf>((size_t)routed * shape.n);
        bf* got = bench.alloc<bf>((size_t)routed * shape.n);
        const size_t outputs = (size_t)routed * shape.n;
        plain_grouped<<<(outputs + 255) / 256, 256, 0, bench.stream>>>(a, b, expected, row_expert_dev, routed, shape.n,
                                                                        shape.k);
        bench.sync();
        const std::vector<uint16_t> want = bench.download(expected, outputs);
        const double floor_us = bench.graph_us(4, [&](int) { bench.read(b, weight_count * 2); });
        printf("%-8s %-22s %10.1f %10.2f %12s\n", shape.name, "read the weights", floor_us, bytes / floor_us / 1e6, "-");
        auto run = [&](const char* name, auto kernel) {
            const dim3 grid((shape.n + BN - 1) / BN, experts);
            CHECK(cudaMemset(got, 0xff, outputs * 2));
            kernel<<<grid, THREADS, 0, bench.stream>>>(a, b, got, offsets_dev, shape.n, shape.k);
            bench.sync();
            const double diff = max_relative_difference(want, bench.download(got, outputs));
            const double us = bench.graph_us(4, [&](int) {
                kernel<<<grid, THREADS, 0, bench.stream>>>(a, b, got, offsets_dev, shape.n, shape.k);
            });
            printf("%-8s %-22s %10.1f %10.2f %12.2e\n", shape.name, name, us, bytes / us / 1e6, diff);
        };
        run("wmma, 64 rows a pass", grouped_gemm_bt<64>);
        run("wmma, 32 rows a pass", grouped_gemm_bt<32>);
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        CHECK(cudaFree(expected));
        CHECK(cudaFree(got));
    }
    return 0;
}
