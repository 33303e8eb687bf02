// The decode GEMV (gemv.cuh, one bf16 row) on every projection shape of E4B, 26B-A4B and 31B,
// beside a plain read of the same bytes (the floor for one launch of that size), for a few
// batch sizes and block sizes. Each shape runs as a CUDA graph of launches on distinct copies of
// its weights (2 GiB in all, far beyond L2), as a decode step meets them. Prints µs per launch
// and GB/s; every variant's output is compared with g4's choice.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/gemv.cuh"

template <int BATCH>
__global__ void gemv_one_row(const bf* x, const bf* w, bf* y, int n, int k, int warps_per_col) {
    gemv<bf, DenseWeights<bf>, 1, BATCH>(x, w, nullptr, y, 1, n, k, warps_per_col);
}

// Two columns per warp over the whole K, four loads per column in flight (no K split).
__global__ void two_columns_per_warp(const bf* x, const bf* w, bf* y, int n, int k) {
    constexpr int C = 2, U = 4;
    const int lane = threadIdx.x % 32;
    const int col0 = (blockIdx.x * blockDim.x + threadIdx.x) / 32 * C;
    if (col0 >= n) return;
    const int vectors = k / 8;
    float sum[C] = {0.f, 0.f};
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (int base = lane; base < vectors; base += 32 * U) {
        uint4 b[C][U];
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int i = base + u * 32;
                b[c][u] = (i < vectors && col0 + c < n) ? reinterpret_cast<const uint4*>(w + (size_t)(col0 + c) * k)[i]
                                                        : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * 32;
            if (i >= vectors) break;
            float xf[8];
            DenseWeights<bf>::decode(xv[i], xf);
#pragma unroll
            for (int c = 0; c < C; ++c) {
                float wf[8];
                DenseWeights<bf>::decode(b[c][u], wf);
#pragma unroll
                for (int e = 0; e < 8; ++e) sum[c] += xf[e] * wf[e];
            }
        }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
        float s = sum[c];
        for (int bits = 16; bits > 0; bits >>= 1) s += __shfl_xor_sync(0xffffffffu, s, bits);
        if (lane == 0 && col0 + c < n) y[col0 + c] = __float2bfloat16(s);
    }
}

int main() {
    Bench bench;
    const Shape shapes[] = {
        {"e4b.qkv", 3072, 2560},      {"e4b.qkv_full", 6144, 2560}, {"e4b.o", 2560, 2048},
        {"e4b.gate_up", 20480, 2560}, {"e4b.down", 2560, 10240},    {"e4b.ple_gate", 256, 2560},
        {"e4b.ple_proj", 2560, 256},  {"e4b.head", 262144, 2560},   {"26b.qkv", 8192, 2816},
        {"26b.o", 2816, 4096},        {"26b.gate_up", 4224, 2816},  {"26b.down", 2816, 2112},
        {"31b.qkv", 16384, 5376},     {"31b.o", 5376, 8192},        {"31b.gate_up", 43008, 5376},
        {"31b.down", 5376, 21504},
    };
    const size_t pool_bytes = 2ull << 30;
    bf* pool = bench.filled(pool_bytes / 2);
    bf* x = bench.filled(32768);
    bf* y = bench.alloc<bf>(1 << 19);
    std::vector<uint16_t> reference, got;
    printf("%-13s %8s | us per launch (GB/s), [max rel. difference from g4's choice]\n", "shape", "MB");
    for (const Shape& sh : shapes) {
        const size_t bytes = (size_t)sh.n * sh.k * 2;
        const int copies = (int)std::min<size_t>(64, pool_bytes / bytes);
        printf("%-13s %8.2f |", sh.name, bytes / 1e6);
        std::vector<std::pair<std::string, std::function<void(const bf*)>>> variants;
        auto add_gemv = [&](std::string name, int batch, int warps_per_block) {
            const std::pair<int, int> launch_shape = gemv_geometry(sh.n, sh.k / 8, batch, warps_per_block);
            const int blocks = launch_shape.first, per_col = launch_shape.second, threads = warps_per_block * 32;
            auto launch = [=, &bench](const bf* w) {
                if (batch == 4)
                    gemv_one_row<4><<<blocks, threads, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
                else
                    gemv_one_row<8><<<blocks, threads, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
            };
            variants.push_back({name, launch});
        };
        // g4's choice (linear.rs): the narrow kernel up to 5,376 columns.
        add_gemv("g4", sh.n <= 5376 ? 4 : 8, 4);
        variants.push_back({"read", [&, bytes](const bf* w) { bench.read(w, bytes); }});
        add_gemv("batch8", 8, 4);
        add_gemv("batch4", 4, 4);
        add_gemv("batch8_8warps", 8, 8);
        add_gemv("batch4_8warps", 4, 8);
        variants.push_back({"2cols", [&](const bf* w) {
                                const int blocks = ((sh.n + 1) / 2 + 3) / 4;
                                two_columns_per_warp<<<blocks, 128, 0, bench.stream>>>(x, w, y, sh.n, sh.k);
                            }});
        for (size_t v = 0; v < variants.size(); ++v) {
            const std::string& name = variants[v].first;
            const auto& launch = variants[v].second;
            launch(pool);
            bench.sync();
            const double us = bench.graph_us(copies, [&](int c) { launch(pool + (size_t)c * sh.n * sh.k); });
            printf(" %s %.2f (%.0f)", name.c_str(), us, bytes / (us * 1e3));
            if (name != "read") {
                auto& out = v == 0 ? reference : got;
                out = bench.download(y, sh.n);
                if (v > 0) printf(" [%.0e]", max_relative_difference(reference, got));
            }
            printf(";");
        }
        printf("\n");
    }
    return 0;
}
