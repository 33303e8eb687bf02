// A decode step's launch chain (E4B's 42 layers: six GEMVs per layer with the short single-row
// kernels between them, or the GEMVs alone), in a CUDA graph, with and without programmatic
// dependent launch (PDL) as native/cuda.rs launches g4's kernels: each kernel lets its dependent
// launch at once, and a GEMV issues its first weight batch before waiting for its input.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include "../../src/kernels/cuda/g4_compat.cuh"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
typedef g4_bf16 bf;

template <bool PDL> __device__ __forceinline__ void let_dependents_launch() {
    if (PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
template <bool PDL> __device__ __forceinline__ void wait_for_inputs() {
    if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
}

// A norm-like single-row kernel: one block reads a row, reduces, writes it scaled.
template <bool PDL>
__global__ void row_kernel(const bf* in, bf* out, int n) {
    let_dependents_launch<PDL>();
    wait_for_inputs<PDL>();
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = g4_to_f32(in[i]);
        ss += v * v;
    }
    const float total = g4_block_sum(ss);
    const float r = rsqrtf(total / n + 1e-6f);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = g4_from_f32<bf>(g4_to_f32(in[i]) * r);
}

// gemv.cuh's one-row GEMV, with its first W batch loaded before the wait.
template <bool PDL>
__global__ void gemv_kernel(const bf* x, const bf* w, bf* y, int n, int k, int warps_per_col) {
    let_dependents_launch<PDL>();
    constexpr int BATCH = 8;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int cols_per_block = blockDim.x / 32 / warps_per_col;
    const int col = blockIdx.x * cols_per_block + warp / warps_per_col;
    const int part = warp % warps_per_col;
    const int vectors = k / 8;
    const int step = 32 * warps_per_col;
    float sum = 0.f;
    bool waited = false;
    if (col < n) {
        const uint4* w_col = reinterpret_cast<const uint4*>(w + (size_t)col * k);
        const uint4* xv = reinterpret_cast<const uint4*>(x);
        for (int base = part * 32 + lane; base < vectors; base += step * BATCH) {
            uint4 batch[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = base + u * step;
                batch[u] = i < vectors ? w_col[i] : make_uint4(0, 0, 0, 0);
            }
            if (!waited) {
                wait_for_inputs<PDL>();
                waited = true;
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = base + u * step;
                if (i >= vectors) break;
                const uint4 xq = xv[i];
                const bf* xt = reinterpret_cast<const bf*>(&xq);
                const bf* wt = reinterpret_cast<const bf*>(&batch[u]);
#pragma unroll
                for (int e = 0; e < 8; ++e) sum += g4_to_f32(xt[e]) * g4_to_f32(wt[e]);
            }
        }
    }
    if (!waited) wait_for_inputs<PDL>();
    __shared__ float partial[32];
    for (int bits = 16; bits > 0; bits >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, bits);
    if (lane == 0) partial[warp] = sum;
    __syncthreads();
    if (part == 0 && lane == 0 && col < n) {
        float total = 0.f;
        for (int p = 0; p < warps_per_col; ++p) total += partial[warp + p];
        y[col] = g4_from_f32<bf>(total);
    }
}

template <typename Kernel, typename... Args>
void launch(bool pdl, cudaStream_t st, dim3 grid, dim3 block, Kernel kernel, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

int main() {
    struct Proj {
        int n, k;
    };
    // One E4B layer: qkv, o, gate_up, down, PLE gate, PLE projection; short kernels between.
    const Proj layer[] = {{3072, 2560}, {2560, 2048}, {20480, 2560}, {2560, 10240}, {256, 2560}, {2560, 256}};
    const int layers = 42, shorts_after[] = {3, 2, 2, 1, 1, 2};
    size_t total = 0;
    for (auto p : layer) total += (size_t)p.n * p.k;
    bf* w;
    CK(cudaMalloc(&w, total * layers * 2));
    CK(cudaMemset(w, 0x3c, total * layers * 2));
    bf *a, *b;
    CK(cudaMalloc(&a, 64 << 10));
    CK(cudaMalloc(&b, 64 << 10));
    CK(cudaMemset(a, 0x3c, 64 << 10));
    CK(cudaMemset(b, 0x3c, 64 << 10));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int with_shorts = 0; with_shorts < 2; ++with_shorts)
        for (int pdl = 0; pdl < 2; ++pdl) {
            cudaGraph_t g;
            cudaGraphExec_t ge;
            int launches = 0;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            size_t off = 0;
            for (int l = 0; l < layers; ++l)
                for (int p = 0; p < 6; ++p) {
                    const Proj pr = layer[p];
                    const int vectors = pr.k / 8;
                    int wpc = std::max((vectors + 255) / 256, (2048 + pr.n - 1) / pr.n);
                    int pw = 1;
                    while (pw < wpc) pw <<= 1;
                    wpc = std::min(pw, 4);
                    const int grid = (pr.n + 4 / wpc - 1) / (4 / wpc);
                    if (pdl)
                        launch(true, st, grid, 128, gemv_kernel<true>, (const bf*)a, (const bf*)(w + off), b, pr.n,
                               pr.k, wpc);
                    else
                        launch(false, st, grid, 128, gemv_kernel<false>, (const bf*)a, (const bf*)(w + off), b,
                               pr.n, pr.k, wpc);
                    ++launches;
                    off += (size_t)pr.n * pr.k;
                    if (with_shorts)
                        for (int s = 0; s < shorts_after[p]; ++s) {
                            if (pdl)
                                launch(true, st, 1, 512, row_kernel<true>, (const bf*)b, a, 2560);
                            else
                                launch(false, st, 1, 512, row_kernel<false>, (const bf*)b, a, 2560);
                            ++launches;
                        }
                }
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            for (int it = 0; it < 3; ++it) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e0, st));
            const int reps = 20;
            for (int it = 0; it < reps; ++it) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            printf("%-22s pdl=%d: %4d launches, %7.1f us per step (%.2f us per launch), %.0f GB/s of weights\n",
                   with_shorts ? "GEMVs + short kernels" : "GEMVs only", pdl, launches, ms * 1e3 / reps,
                   ms * 1e3 / reps / launches, total * layers * 2 / (ms / reps * 1e6));
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
        }
    return 0;
}
