// A decode step's launch chain (E4B's 42 layers: six GEMVs per layer with the short single-row
// kernels between them, or the GEMVs alone), in a CUDA graph, with and without programmatic
// dependent launch (PDL) as native/cuda.rs launches g4's kernels. The kernels carry g4's hooks
// (G4_KERNEL_START; gemv.cuh loads its first weights before waiting), which do nothing when a
// launch does not ask for the overlap, so the two sides differ only in the launch attribute.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/gemv.cuh"

// A norm-like single-row kernel: one block reads a row, reduces, writes it scaled.
__global__ void row_kernel(const bf* in, bf* out, int n) {
    G4_KERNEL_START();
    float squares = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = g4_to_f32(in[i]);
        squares += v * v;
    }
    const float scale = rsqrtf(g4_block_sum(squares) / n + 1e-6f);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = g4_from_f32<bf>(g4_to_f32(in[i]) * scale);
}

// linear.cu's one-row entry point.
__global__ void gemv_kernel(const bf* x, const bf* w, bf* y, int n, int k, int warps_per_col) {
    G4_LET_DEPENDENTS_LAUNCH();
    gemv<bf, DenseWeights<bf>, 1>(x, w, nullptr, y, 1, n, k, warps_per_col);
}

int main() {
    Bench bench;
    struct Projection {
        int n, k;
    };
    // One E4B layer: q/k/v, o, gate/up, down, PLE gate, PLE projection, and how many short
    // kernels follow each in a decode step.
    const Projection layer[] = {{3072, 2560}, {2560, 2048}, {20480, 2560}, {2560, 10240}, {256, 2560}, {2560, 256}};
    const int layers = 42, shorts_after[] = {3, 2, 2, 1, 1, 2};
    size_t per_layer = 0;
    for (auto p : layer) per_layer += (size_t)p.n * p.k;
    bf* w = bench.filled(per_layer * layers);
    bf* a = bench.filled(32768);
    bf* b = bench.filled(32768);
    for (int with_shorts = 0; with_shorts < 2; ++with_shorts)
        for (int overlap = 0; overlap < 2; ++overlap) {
            int launches = 0;
            auto step = [&](int) {
                launches = 0;
                size_t offset = 0;
                for (int l = 0; l < layers; ++l)
                    for (int p = 0; p < 6; ++p) {
                        const Projection pr = layer[p];
                        // linear.rs's gemv_geometry with 8 loads per lane, 4 warps per block.
                        const int wanted = std::max((pr.k / 8 + 255) / 256, (2048 + pr.n - 1) / pr.n);
                        int warps_per_col = 1;
                        while (warps_per_col < wanted) warps_per_col <<= 1;
                        warps_per_col = std::min(warps_per_col, 4);
                        const int blocks = (pr.n + 4 / warps_per_col - 1) / (4 / warps_per_col);
                        launch_kernel(overlap, bench.stream, blocks, 128, gemv_kernel, (const bf*)a, (const bf*)(w + offset),
                               b, pr.n, pr.k, warps_per_col);
                        ++launches;
                        offset += (size_t)pr.n * pr.k;
                        for (int s = 0; with_shorts && s < shorts_after[p]; ++s, ++launches)
                            launch_kernel(overlap, bench.stream, 1, 512, row_kernel, (const bf*)b, a, 2560);
                    }
            };
            const double us = bench.graph_us(1, step);
            printf("%-22s overlap=%d: %4d launches, %7.1f us per step (%.2f us per launch), %.0f GB/s of weights\n",
                   with_shorts ? "GEMVs + short kernels" : "GEMVs only", overlap, launches, us, us / launches,
                   per_layer * layers * 2 / (us * 1e3));
        }
    return 0;
}
