// The decode GEMV (gemv.cuh, one bf16 row) on every projection shape of E4B, 26B-A4B and 31B,
// beside a plain read of the same bytes (the floor for one launch of that size), for a few
// batch sizes and block sizes. Each shape runs as a CUDA graph of launches on distinct copies of
// its weights (2 GiB in all, far beyond L2), as a decode step meets them. Prints µs per launch
// and GB/s; every variant's output is compared with g4's choice. Then the gate/up GEMV with its
// GeGLU epilogue (linear_gelu_mul's single-row kernel) at E4B's and 31B's widths: packed and
// interleaved weight rows, batches of 8 and 6 loads, asked-for occupancy, beside the plain GEMV.
// Both with W loaded by other `ld` instructions than g4's (bench_common.cuh's LoadHint: `_plain`,
// `_noL1`, `_256B`, `_noL1_256B_ef`), g4's kernels otherwise, beside the plain read with and
// without g4's qualifiers.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/gemv.cuh"

typedef DenseWeights<bf> G4Weights;  // g4's decoder and loads

template <int BATCH, typename W = G4Weights>
__global__ void gemv_one_row(const bf* x, const bf* w, bf* y, int n, int k, int warps_per_col) {
    gemv<bf, W, 1, BATCH>(x, w, nullptr, y, 1, n, k, warps_per_col);
}

// The same with 10 blocks of 4 warps asked of a multiprocessor (48 registers instead of 56: 40
// warps in flight instead of 36).
__global__ void __launch_bounds__(128, 10) gemv_one_row_bounded(const bf* x, const bf* w, bf* y, int n, int k,
                                                                 int warps_per_col) {
    gemv<bf, DenseWeights<bf>, 1, G4_GEMV_BATCH>(x, w, nullptr, y, 1, n, k, warps_per_col);
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

// g4's gemv_gelu_mul (gemv.cuh) over packed [gate ‖ up] weights, one row of X, at a batch of
// BATCH loads.
template <int BATCH, typename W = G4Weights>
__global__ void gelu_mul_packed(const bf* x, const bf* w, bf* y, int d, int k, int warps_per_col) {
    gemv_gelu_mul<bf, W, 1, BATCH>(x, w, nullptr, nullptr, y, 1, d, k, warps_per_col);
}

// C weight rows per warp group (gemv.cuh's gemv_columns_gelu_mul, the FP8 one-row launch since
// stop 49, here over bf16): a group's first C/2 rows are gate rows, the rest their up rows.
template <int C, int BATCH>
__global__ void gelu_mul_columns(const bf* x, const bf* w, bf* y, int d, int k, int warps_per_col) {
    gemv_columns_gelu_mul<bf, DenseWeights<bf>, C, BATCH>(x, w, nullptr, nullptr, y, d, k, warps_per_col);
}

// The same at a batch of 8 with 5 blocks of 8 warps asked of a multiprocessor (at 56 registers 4
// fit: 32 warps in flight where the plain GEMV's 4-warp blocks keep 36).
__global__ void __launch_bounds__(256, 5) gelu_mul_packed_bounded(const bf* x, const bf* w, bf* y, int d, int k,
                                                                   int warps_per_col) {
    gemv_gelu_mul<bf, DenseWeights<bf>, 1, G4_GEMV_BATCH>(x, w, nullptr, nullptr, y, 1, d, k, warps_per_col);
}

// gemv_gelu_mul's block over a candidate layout: gate row o at 2o and up row o at 2o + 1, so
// that an output's block reads one contiguous stretch of W where the packed layout reads two, d
// rows apart.
__global__ void gelu_mul_interleaved(const bf* x, const bf* w, bf* y, int d, int k, int warps_per_col) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warps_per_out = warps_per_col * 2;
    const int out = blockIdx.x * (blockDim.x / 32 / warps_per_out) + warp / warps_per_out;
    const int half = (warp / warps_per_col) % 2, part = warp % warps_per_col;
    __shared__ float partial[G4_GEMV_MAX_WARPS][1];
    gemv_partials<bf, DenseWeights<bf>, 1, G4_GEMV_BATCH>(x, w, 2 * out + half, out < d, part, warps_per_col, 1, k,
                                                          partial);
    if (half == 0 && part == 0 && lane == 0 && out < d) {
        const float gate = g4_round<bf>(gemv_total<1>(partial, warp, warps_per_col, 0));
        const float u = g4_round<bf>(gemv_total<1>(partial, warp + warps_per_col, warps_per_col, 0));
        y[out] = g4_from_f32<bf>(g4_round<bf>(g4_gelu_tanh(gate)) * u);
    }
}

// The gate/up GEMV with its GeGLU epilogue (linear_gelu_mul's single-row launch: one output's
// gate and up warps in a block) beside the same kernel over interleaved rows and beside the
// plain GEMV of the same bytes (g4's geometry for 2d columns).
static void gate_up_pairs(Bench& bench, bf* pool, size_t pool_bytes, const bf* x, bf* y) {
    const Shape shapes[] = {{"e4b.gate_up", 20480, 2560}, {"31b.gate_up", 43008, 5376}};
    printf("\ngate/up with the GeGLU epilogue, one row: us per launch (GB/s) [the other GeGLU kernels' max rel. "
           "difference from packed]\n");
    std::vector<uint16_t> packed_out;
    for (const Shape& sh : shapes) {
        const size_t bytes = (size_t)sh.n * sh.k * 2;
        const int copies = (int)std::min<size_t>(64, pool_bytes / bytes), d = sh.n / 2;
        const std::pair<int, int> plain = gemv_geometry(sh.n, sh.k / 8, 8, 4);
        const int per_col = plain.second, warps = std::max(4, 2 * per_col), outs = warps / (2 * per_col);
        auto time = [&](const char* name, const std::function<void(const bf*)>& launch) {
            launch(pool);
            bench.sync();
            const double us = bench.graph_us(copies, [&](int c) { launch(pool + (size_t)c * sh.n * sh.k); });
            printf(" %s %.2f (%.0f)", name, us, bytes / (us * 1e3));
            // The graph's last launch read the last copy: the first copy's outputs again.
            launch(pool);
            bench.sync();
            if (std::string(name) == "packed") packed_out = bench.download(y, d);
            const std::string kernel(name);
            if (kernel.rfind("cols", 0) == 0 || kernel.rfind("packed_", 0) == 0)
                printf(" [%.0e]", max_relative_difference(packed_out, bench.download(y, d)));
            printf(";");
        };
        printf("%-13s %8.2f |", sh.name, bytes / 1e6);
        time("packed", [&](const bf* w) {
            gelu_mul_packed<G4_GEMV_BATCH><<<(d + outs - 1) / outs, warps * 32, 0, bench.stream>>>(x, w, y, d, sh.k, per_col);
        });
        for_each_hint([&](auto hint, const char* suffix) {
            using W = HintedLoads<G4Weights, decltype(hint)::value>;
            time((std::string("packed") + suffix).c_str(), [&](const bf* w) {
                gelu_mul_packed<G4_GEMV_BATCH, W>
                    <<<(d + outs - 1) / outs, warps * 32, 0, bench.stream>>>(x, w, y, d, sh.k, per_col);
            });
        });
        time("interleaved", [&](const bf* w) {
            gelu_mul_interleaved<<<(d + outs - 1) / outs, warps * 32, 0, bench.stream>>>(x, w, y, d, sh.k, per_col);
        });
        time("packed_bounded", [&](const bf* w) {
            gelu_mul_packed_bounded<<<(d + outs - 1) / outs, warps * 32, 0, bench.stream>>>(x, w, y, d, sh.k, per_col);
        });
        time("packed_batch6", [&](const bf* w) {
            gelu_mul_packed<6><<<(d + outs - 1) / outs, warps * 32, 0, bench.stream>>>(x, w, y, d, sh.k, per_col);
        });
        auto columns = [&](const char* name, int c, int loads, auto kernel) {
            const std::pair<int, int> g = gemv_geometry(d / (c / 2), sh.k / 8, loads, 4);
            time(name, [&](const bf* w) { kernel<<<g.first, 128, 0, bench.stream>>>(x, w, y, d, sh.k, g.second); });
        };
        columns("cols2_b4", 2, 4, gelu_mul_columns<2, 4>);
        columns("cols2_b8", 2, 8, gelu_mul_columns<2, 8>);
        columns("cols4_b2", 4, 2, gelu_mul_columns<4, 2>);
        columns("cols4_b4", 4, 4, gelu_mul_columns<4, 4>);
        time("plain_gemv", [&](const bf* w) {
            gemv_one_row<8><<<plain.first, 128, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
        });
        time("plain_gemv_batch6", [&](const bf* w) {
            gemv_one_row<6><<<plain.first, 128, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
        });
        time("plain_gemv_bounded", [&](const bf* w) {
            gemv_one_row_bounded<<<plain.first, 128, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
        });
        time("read", [&](const bf* w) { bench.read(w, bytes); });
        time("read_noL1_256B", [&](const bf* w) { bench.read<LoadHint::no_l1_prefetch_256>(w, bytes); });
        printf("\n");
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
        auto add_gemv = [&](std::string name, int batch, int warps_per_block, auto weights) {
            using W = decltype(weights);
            const std::pair<int, int> launch_shape = gemv_geometry(sh.n, sh.k / 8, batch, warps_per_block);
            const int blocks = launch_shape.first, per_col = launch_shape.second, threads = warps_per_block * 32;
            auto launch = [=, &bench](const bf* w) {
                if (batch == 4)
                    gemv_one_row<4, W><<<blocks, threads, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
                else if (batch == 6)
                    gemv_one_row<6, W><<<blocks, threads, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
                else
                    gemv_one_row<8, W><<<blocks, threads, 0, bench.stream>>>(x, w, y, sh.n, sh.k, per_col);
            };
            variants.push_back({name, launch});
        };
        // g4's choice (linear.rs): the narrow kernel up to 5,376 columns, in 8-warp blocks where
        // one batch per lane needs 8 warps or more, then at a batch of 6 where a lane's share is
        // 5 or 6 vectors.
        const bool narrow = sh.n <= 5376, long_k = narrow && sh.k / 8 >= 8 * 32 * 4;
        const int share = (sh.k / 8 + 255) / 256;
        const int g4_batch = !narrow ? 8 : long_k && share >= 5 && share <= 6 ? 6 : 4, g4_warps = long_k ? 8 : 4;
        add_gemv("g4", g4_batch, g4_warps, G4Weights());
        for_each_hint([&](auto hint, const char* suffix) {
            add_gemv(std::string("g4") + suffix, g4_batch, g4_warps, HintedLoads<G4Weights, decltype(hint)::value>());
        });
        variants.push_back({"read", [&, bytes](const bf* w) { bench.read(w, bytes); }});
        variants.push_back(
            {"read_noL1_256B", [&, bytes](const bf* w) { bench.read<LoadHint::no_l1_prefetch_256>(w, bytes); }});
        add_gemv("batch4_4warps", 4, 4, G4Weights());
        add_gemv("batch8", 8, 4, G4Weights());
        add_gemv("batch8_8warps", 8, 8, G4Weights());
        add_gemv("batch4_8warps", 4, 8, G4Weights());
        add_gemv("batch6", 6, 4, G4Weights());
        add_gemv("batch6_8warps", 6, 8, G4Weights());
        add_gemv("batch4_16warps", 4, 16, G4Weights());
        add_gemv("batch6_16warps", 6, 16, G4Weights());
        {
            const std::pair<int, int> g = gemv_geometry(sh.n, sh.k / 8, 8, 4);
            variants.push_back({"batch8_bounded", [=, &bench](const bf* w) {
                                    gemv_one_row_bounded<<<g.first, 128, 0, bench.stream>>>(x, w, y, sh.n, sh.k, g.second);
                                }});
        }
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
            if (name.rfind("read", 0) != 0) {
                auto& out = v == 0 ? reference : got;
                out = bench.download(y, sh.n);
                if (v > 0) printf(" [%.0e]", max_relative_difference(reference, got));
            }
            printf(";");
        }
        printf("\n");
    }
    gate_up_pairs(bench, pool, pool_bytes, x, y);
    return 0;
}
