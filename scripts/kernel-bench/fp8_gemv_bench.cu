// The FP8 decode GEMV (one bf16 row, e4m3 weights, one f32 scale per row) on E4B's and 31B's
// projection shapes: gemv.cuh's CUDA-core GEMVs with E4m3Weights (gemv at several batches and
// block sizes, and gemv_columns at several rows per warp group, matmul_bt_fp8_channel's one-row
// launch since stop 48) beside the tensor-core candidates of fp8_gemv_candidates.cuh, and a
// plain read of the same bytes (the floor for one launch). Each shape runs as a
// CUDA graph of launches on distinct copies of its weights (2 GiB in all, far beyond L2), as a
// decode step meets them. Every variant is checked against an f64 product of the exact e4m3
// weights and bf16 inputs: relative RMS error and the largest error over the output's RMS.
// g4's choice also runs with W loaded by other `ld` instructions than g4's (bench_common.cuh's
// LoadHint: `_plain`, `_noL1`, `_256B`, `_noL1_256B_ef`). Then the same with the GeGLU epilogue
// (gate/up), and the dequantisation that weight-only FP8 prefill runs before each cuBLAS GEMM
// (g4's kernel beside a plain read).
#include "bench_common.cuh"
#include "../../src/kernels/cuda/fp8.cu"
#include "../../src/kernels/cuda/gemv.cuh"
#include "fp8_gemv_candidates.cuh"

template <int BATCH>
__global__ void fp8_gemv_cuda_cores(const bf* x, const uint8_t* w, const float* scale, bf* y, int n, int k,
                                    int warps_per_col) {
    gemv<bf, E4m3Weights, 1, BATCH>(x, w, scale, y, 1, n, k, warps_per_col);
}

// C weight rows per warp group (gemv.cuh's gemv_columns; g4's one-row FP8 GEMV since stop 48,
// at C = 2, BATCH = 4 or C = 4, BATCH = 2 by K since stop 49).
template <int C, int BATCH, typename W = E4m3Weights>
__global__ void fp8_gemv_columns(const bf* x, const uint8_t* w, const float* scale, bf* y, int n, int k, int parts) {
    gemv_columns<bf, W, C, BATCH>(x, w, scale, y, n, k, parts);
}

// linear_gelu_mul's FP8 one-row launch before stop 49: gemv_gelu_mul at a batch of 8, one
// output's gate and up warps in a block.
__global__ void fp8_gelu_mul_pairs(const bf* x, const uint8_t* w, const float* scale, const bf* up, bf* y, int d, int k,
                                   int warps_per_col) {
    gemv_gelu_mul<bf, E4m3Weights, 1>(x, w, scale, up, y, 1, d, k, warps_per_col);
}

// The same with C weight rows per warp group (gemv.cuh's gemv_columns_gelu_mul; g4's since stop
// 49, C and BATCH as for the plain GEMV).
template <int C, int BATCH, typename W = E4m3Weights>
__global__ void fp8_gelu_mul_columns(const bf* x, const uint8_t* w, const float* scale, const bf* up, bf* y, int d,
                                     int k, int parts) {
    gemv_columns_gelu_mul<bf, W, C, BATCH>(x, w, scale, up, y, d, k, parts);
}

// A streaming candidate (stop 49): a grid of resident warps, each taking C whole weight rows at a
// time (V vectors of each per lane: K = 512 · V) and loading its next C rows before it sums the
// current ones, so that every lane keeps loads in flight from its first group to its last and no
// block ends while others start (the column kernels above run as several waves of short blocks).
// Here it won (H100, µs: E4B gate/up GeGLU 21.46 against 23.86, q/k/v 5.30 against 5.54), but in
// g4 (be06478, reverted) E4B FP8 decode fell from 269–277 to 259–262 tok/s, and under ncu its
// launches in a decode step took longer than the column kernels' (GeGLU 1,333 µs against 1,222).
// GELU: W packed [gate ‖ up] with d = n / 2 outputs; a group's first C/2 rows are gate rows and
// the rest their up rows, and it writes gelu_tanh(gate) ⊙ up as gemv_gelu_mul rounds it.
template <int C, int V, bool GELU>
__global__ void fp8_gemv_stream(const bf* x, const uint8_t* w, const float* scale, bf* y, int n, int k) {
    const int lane = threadIdx.x % 32;
    const int first = (blockIdx.x * blockDim.x + threadIdx.x) / 32, warps = gridDim.x * blockDim.x / 32;
    const int outs = GELU ? C / 2 : C, d = GELU ? n / 2 : n;
    const int groups = (d + outs - 1) / outs;
    auto row_of = [&](int group, int c) {
        const int out = group * outs + c % outs;
        return out < d ? out + c / outs * d : -1;
    };
    uint4 current[C][V], next[C][V];
    auto load = [&](int group, uint4 (&into)[C][V]) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const int row = row_of(group, c);
            const uint4* w_row = reinterpret_cast<const uint4*>(w + (size_t)max(row, 0) * k);
#pragma unroll
            for (int v = 0; v < V; ++v) into[c][v] = row >= 0 ? w_row[lane + 32 * v] : make_uint4(0, 0, 0, 0);
        }
    };
    if (first < groups) load(first, current);
    for (int group = first; group < groups; group += warps) {
        if (group + warps < groups) load(group + warps, next);
        float sum[C];
#pragma unroll
        for (int c = 0; c < C; ++c) sum[c] = 0.0f;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            float xf[16];
            x_values<bf, E4m3Weights>(x, lane + 32 * v, xf);
#pragma unroll
            for (int c = 0; c < C; ++c) {
                float wf[16];
                E4m3Weights::decode(current[c][v], wf);
#pragma unroll
                for (int e = 0; e < 16; ++e) sum[c] += xf[e] * wf[e];
            }
        }
        float total[C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            float s = sum[c];
            for (int bits = 16; bits > 0; bits >>= 1) s += __shfl_xor_sync(0xffffffffu, s, bits);
            const int row = row_of(group, c);
            total[c] = row >= 0 ? s * E4m3Weights::row_scale(scale, row) : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < outs; ++c) {
            const int out = group * outs + c;
            if (lane != c || out >= d) continue;
            if (GELU) {
                const float gate = g4_round<bf>(total[c]), u = g4_round<bf>(total[c + outs]);
                y[out] = g4_from_f32<bf>(g4_round<bf>(g4_gelu_tanh(gate)) * u);
            } else {
                y[out] = g4_from_f32<bf>(total[c]);
            }
        }
#pragma unroll
        for (int c = 0; c < C; ++c)
#pragma unroll
            for (int v = 0; v < V; ++v) current[c][v] = next[c][v];
    }
}

template <int BATCH>
__global__ void fp8_gemv_tensor_cores(const bf* x, const uint8_t* w, const float* scale, bf* y, int n, int k) {
    g4_gemv_fp8_mma<1, BATCH>(x, w, scale, y, 1, n, k);
}

template <int BATCH>
__global__ void fp8_gemv_mma16(const bf* x, const uint8_t* w, const float* scale, bf* y, int n, int k, int parts) {
    g4_gemv_fp8_mma16<1, BATCH>(x, w, scale, y, 1, n, k, parts);
}

// g4's dequantisation (fp8.cu) on E4B's projection shapes: µs per launch and the GB/s of its
// reads and writes together, beside a plain read of the e4m3 bytes. Stop 49's candidate here,
// 8 weights a thread per load instead of 16, won (H100, gate/up: 56.7 µs at 4 loads a thread,
// 61.8 at 8, against 75.8) and became g4's kernel.
static void dequant(Bench& bench, const uint8_t* pool, size_t pool_bytes, const float* scale) {
    const Shape shapes[] = {{"e4b.qkv", 3072, 2560}, {"e4b.o", 2560, 2048}, {"e4b.gate_up", 20480, 2560},
                            {"e4b.down", 2560, 10240}, {"e4b.ple_gate", 256, 2560}};
    bf* out = bench.alloc<bf>((size_t)20480 * 2560);
    printf("\ndequantisation, e4m3 to bf16: µs per launch (GB/s read + written)\n");
    for (const Shape& sh : shapes) {
        const size_t count = (size_t)sh.n * sh.k;
        const int copies = (int)std::min<size_t>(64, pool_bytes / count);
        // dequant_fp8_channel.rs's geometry: 8 weights a load, G4_DEQUANT_LOADS loads a thread.
        const size_t threads = count / (8 * G4_DEQUANT_LOADS);
        const unsigned blocks = (unsigned)std::min<size_t>((threads + 255) / 256, 65535);
        const double g4_us = bench.graph_us(copies, [&](int c) {
            g4_dequant_fp8_channel_bf16<<<blocks, 256, 0, bench.stream>>>(pool + (size_t)c * count, scale, out, sh.n,
                                                                          sh.k);
        });
        const double read_us = bench.graph_us(copies, [&](int c) { bench.read(pool + (size_t)c * count, count); });
        printf("%-13s %8.2f | g4 %.2f (%.0f); read %.2f (%.0f)\n", sh.name, count / 1e6, g4_us, 3 * count / (g4_us * 1e3),
               read_us, count / (read_us * 1e3));
    }
}

// Every byte an e4m3 value other than NaN, from a hash of its index.
__global__ void fill_e4m3(uint8_t* w, size_t count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32);
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        uint8_t b = (uint8_t)h;
        if ((b & 0x7f) == 0x7f) b ^= 1;
        w[i] = b;
    }
}

typedef std::vector<std::pair<std::string, std::function<void(const uint8_t*)>>> Variants;

// Times each variant as a graph over `copies` copies of a weight of `bytes` bytes, and checks its
// outputs (y, as many as `want`) from the first copy against the f64 `want`: relative RMS error,
// and the largest error over the output's RMS. The reads are only timed.
static void time_and_check(Bench& bench, const Variants& variants, const uint8_t* pool, size_t bytes, int copies,
                           bf* y, const std::vector<double>& want) {
    double want2 = 0;
    for (double v : want) want2 += v * v;
    const double rms = sqrt(want2 / want.size());
    for (const auto& variant : variants) {
        const std::string& name = variant.first;
        const auto& launch = variant.second;
        CHECK(cudaMemset(y, 0xff, want.size() * 2));
        launch(pool);
        bench.sync();
        const double us = bench.graph_us(copies, [&](int c) { launch(pool + (size_t)c * bytes); });
        printf(" %s %.2f (%.0f)", name.c_str(), us, bytes / (us * 1e3));
        if (name.rfind("read", 0) != 0) {
            // The graph's last launch read the last copy: the first copy's outputs again.
            launch(pool);
            bench.sync();
            const std::vector<uint16_t> got = bench.download(y, want.size());
            double err2 = 0, worst = 0;
            for (size_t o = 0; o < want.size(); ++o) {
                const double e = bf16_bits_to_float(got[o]) - want[o];
                err2 += e * e;
                worst = std::max(worst, fabs(e));
            }
            printf(" [%.1e %.1e]", sqrt(err2 / want2), worst / rms);
        }
        printf(";");
    }
    printf("\n");
}

// The gate/up GEMV with its GeGLU epilogue (linear_gelu_mul's FP8 one-row launch) beside the
// same with C weight rows per warp group, at E4B's and 31B's gate/up (W packed [gate ‖ up]) and
// E4B's PLE gate (up given: x's first d values), checked against the f64 GeGLU of the exact
// products.
static void gelu_pairs(Bench& bench, const uint8_t* pool, size_t pool_bytes, const bf* x,
                       const std::vector<uint16_t>& x_host, const float* scale, const std::vector<float>& scale_host,
                       bf* y) {
    struct GeluShape {
        const char* name;
        int n, k;
        bool packed;
    };
    const GeluShape shapes[] = {
        {"e4b.gate_up", 20480, 2560, true}, {"e4b.ple_gate", 256, 2560, false}, {"31b.gate_up", 43008, 5376, true}};
    printf("\ngate/up with the GeGLU epilogue, one row: µs per launch (GB/s) [relative RMS error, largest error / "
           "output RMS]\n");
    auto gelu = [](double g) { return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))); };
    for (const GeluShape& sh : shapes) {
        const size_t bytes = (size_t)sh.n * sh.k;
        const int copies = (int)std::min<size_t>(64, pool_bytes / bytes), d = sh.packed ? sh.n / 2 : sh.n;
        const bf* up = sh.packed ? nullptr : x;
        std::vector<uint8_t> w_host(bytes);
        CHECK(cudaMemcpy(w_host.data(), pool, bytes, cudaMemcpyDeviceToHost));
        auto product = [&](int row) {
            double sum = 0;
            for (int i = 0; i < sh.k; ++i)
                sum += (double)bf16_bits_to_float(x_host[i]) * e4m3_value(w_host[(size_t)row * sh.k + i]);
            return sum * scale_host[row];
        };
        std::vector<double> want(d);
        for (int o = 0; o < d; ++o) {
            const double u = sh.packed ? product(o + d) : bf16_bits_to_float(x_host[o]);
            want[o] = gelu(product(o)) * u;
        }
        printf("%-13s %8.2f |", sh.name, bytes / 1e6);
        Variants variants;
        {
            const int per_col = gemv_geometry(sh.n, sh.k / 16, 8, 4).second;
            const int per_out = per_col * (sh.packed ? 2 : 1), warps = std::max(4, per_out),
                      blocks = (d + warps / per_out - 1) / (warps / per_out);
            variants.push_back({"g4_pairs", [=, &bench](const uint8_t* w) {
                                    fp8_gelu_mul_pairs<<<blocks, warps * 32, 0, bench.stream>>>(x, w, scale, up, y, d,
                                                                                                sh.k, per_col);
                                }});
        }
        variants.push_back({"read", [&, bytes](const uint8_t* w) { bench.read(w, bytes); }});
        auto add_columns = [&](int columns, int loads, int warps_per_block) {
            const int outs = sh.packed ? columns / 2 : columns, groups = (d + outs - 1) / outs;
            const std::pair<int, int> g = gemv_geometry(groups, sh.k / 16, loads, warps_per_block);
            variants.push_back(
                {"cols" + std::to_string(columns) + "_b" + std::to_string(loads) + "_w" + std::to_string(warps_per_block),
                 [=, &bench](const uint8_t* w) {
                     auto kernel = columns == 2   ? fp8_gelu_mul_columns<2, 4>
                                   : columns == 8 ? fp8_gelu_mul_columns<8, 2>
                                   : loads == 4   ? fp8_gelu_mul_columns<4, 4>
                                                  : fp8_gelu_mul_columns<4, 2>;
                     kernel<<<g.first, warps_per_block * 32, 0, bench.stream>>>(x, w, scale, up, y, d, sh.k, g.second);
                 }});
        };
        add_columns(4, 2, 4);
        add_columns(4, 4, 4);
        add_columns(4, 2, 8);
        add_columns(2, 4, 4);
        add_columns(8, 2, 4);
        // g4's choice (cols2_b4_w4 below K 4,096, cols4_b2_w4 from there) with other loads.
        for_each_hint([&](auto hint, const char* suffix) {
            using W = HintedLoads<E4m3Weights, decltype(hint)::value>;
            const bool long_k = sh.k >= 4096;
            const int columns = long_k ? 4 : 2, outs = sh.packed ? columns / 2 : columns, groups = (d + outs - 1) / outs;
            const std::pair<int, int> g = gemv_geometry(groups, sh.k / 16, long_k ? 2 : 4, 4);
            variants.push_back({std::string("g4") + suffix, [=, &bench](const uint8_t* w) {
                                    auto kernel =
                                        long_k ? fp8_gelu_mul_columns<4, 2, W> : fp8_gelu_mul_columns<2, 4, W>;
                                    kernel<<<g.first, 128, 0, bench.stream>>>(x, w, scale, up, y, d, sh.k, g.second);
                                }});
        });
        variants.push_back({"read_noL1_256B", [&, bytes](const uint8_t* w) {
                                bench.read<LoadHint::no_l1_prefetch_256>(w, bytes);
                            }});
        // The streaming candidate (packed, K = 2,560): 2 or 4 rows a group.
        auto add_stream = [&](int columns, int blocks_per_sm) {
            if (sh.k != 2560 || !sh.packed) return;
            auto kernel = columns == 2 ? fp8_gemv_stream<2, 5, true> : fp8_gemv_stream<4, 5, true>;
            int resident = 0;
            CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, 128, 0));
            const int blocks = bench.sms * std::min(resident, blocks_per_sm);
            variants.push_back(
                {"stream_c" + std::to_string(columns) + "_r" + std::to_string(std::min(resident, blocks_per_sm)),
                 [=, &bench](const uint8_t* w) {
                     kernel<<<blocks, 128, 0, bench.stream>>>(x, w, scale, y, sh.n, sh.k);
                 }});
        };
        for (int columns : {2, 4})
            for (int blocks_per_sm : {4, 8, 16}) add_stream(columns, blocks_per_sm);
        time_and_check(bench, variants, pool, bytes, copies, y, want);
    }
}

int main() {
    Bench bench;
    const Shape shapes[] = {
        {"e4b.qkv", 3072, 2560},      {"e4b.o", 2560, 2048},      {"e4b.gate_up", 20480, 2560},
        {"e4b.down", 2560, 10240},    {"e4b.ple_gate", 256, 2560}, {"e4b.ple_proj", 2560, 256},
        {"31b.qkv", 16384, 5376},     {"31b.o", 5376, 8192},      {"31b.gate_up", 43008, 5376},
        {"31b.down", 5376, 21504},
    };
    const size_t pool_bytes = 2ull << 30;
    uint8_t* pool = bench.alloc<uint8_t>(pool_bytes);
    fill_e4m3<<<bench.sms * 8, 256, 0, bench.stream>>>(pool, pool_bytes);
    // x: bf16 normals with every 97th value 30× (a post-norm activation's outliers).
    const int max_k = 21504;
    std::vector<uint16_t> x_host(max_k);
    uint64_t state = 88172645463325252ull;
    for (int i = 0; i < max_k; ++i) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        const double u1 = (state % 1000000 + 1) / 1e6;
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        const double u2 = (state % 1000000) / 1e6;
        float v = (float)(sqrt(-2 * log(u1)) * cos(6.283185307 * u2)) * (i % 97 == 0 ? 30.0f : 1.0f);
        uint32_t bits;
        memcpy(&bits, &v, 4);
        x_host[i] = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    }
    // One value past f16's range (99,840), met by 31B down's K only: the f16 candidate's
    // CUDA-core fallback for that chunk.
    x_host[12345] = 0x47c3;
    bf* x = bench.alloc<bf>(max_k);
    CHECK(cudaMemcpy(x, x_host.data(), max_k * 2, cudaMemcpyHostToDevice));
    std::vector<float> scale_host(65536);
    for (size_t i = 0; i < scale_host.size(); ++i) scale_host[i] = (0.5f + (i * 7919 % 1000) / 1000.0f) * 0.02f / 448.0f;
    float* scale = bench.alloc<float>(scale_host.size());
    CHECK(cudaMemcpy(scale, scale_host.data(), scale_host.size() * 4, cudaMemcpyHostToDevice));
    bf* y = bench.alloc<bf>(1 << 17);
    bench.sync();
    printf("%-13s %8s | µs per launch (GB/s) [relative RMS error, largest error / output RMS]\n", "shape", "MB");
    for (const Shape& sh : shapes) {
        const size_t bytes = (size_t)sh.n * sh.k;
        const int copies = (int)std::min<size_t>(64, pool_bytes / bytes);
        std::vector<uint8_t> w_host(bytes);
        CHECK(cudaMemcpy(w_host.data(), pool, bytes, cudaMemcpyDeviceToHost));
        std::vector<double> want(sh.n);
        for (int c = 0; c < sh.n; ++c) {
            double sum = 0;
            for (int i = 0; i < sh.k; ++i)
                sum += (double)bf16_bits_to_float(x_host[i]) * e4m3_value(w_host[(size_t)c * sh.k + i]);
            want[c] = sum * scale_host[c];
        }
        printf("%-13s %8.2f |", sh.name, bytes / 1e6);
        Variants variants;
        auto add_cuda_cores = [&](std::string name, int loads, int warps_per_block) {
            const std::pair<int, int> geometry = gemv_geometry(sh.n, sh.k / 16, loads, warps_per_block);
            const int threads = warps_per_block * 32;
            variants.push_back({name, [&, geometry, loads, threads](const uint8_t* w) {
                                    if (loads == 4)
                                        fp8_gemv_cuda_cores<4><<<geometry.first, threads, 0, bench.stream>>>(
                                            x, w, scale, y, sh.n, sh.k, geometry.second);
                                    else
                                        fp8_gemv_cuda_cores<8><<<geometry.first, threads, 0, bench.stream>>>(
                                            x, w, scale, y, sh.n, sh.k, geometry.second);
                                }});
        };
        // matmul_bt_fp8_channel's one-row launch before stop 48: 8 loads per lane, 4 warps per block.
        add_cuda_cores("gemv_b8", 8, 4);
        variants.push_back({"read", [&, bytes](const uint8_t* w) { bench.read(w, bytes); }});
        // `linear`'s narrow choice for bf16 (half the loads per lane, more warps per column), and
        // wider blocks.
        add_cuda_cores("batch4", 4, 4);
        add_cuda_cores("batch4_8warps", 4, 8);
        add_cuda_cores("batch8_8warps", 8, 8);
        // The candidate at its two best geometries of stop 39 (2 chunks a batch; 4 and 8 lost).
        auto add_mma = [&](int warps) {
            if (sh.k % G4_FP8_MMA_CHUNK != 0 || 2 * sh.k > 48 * 1024) return;
            const int blocks = (sh.n + G4_FP8_MMA_ROWS - 1) / G4_FP8_MMA_ROWS;
            variants.push_back({"mma_w" + std::to_string(warps) + "_b2", [=, &bench](const uint8_t* w) {
                                    fp8_gemv_tensor_cores<2><<<blocks, warps * 32, 2 * sh.k, bench.stream>>>(
                                        x, w, scale, y, sh.n, sh.k);
                                }});
        };
        for (int warps : {8, 16}) add_mma(warps);
        // The f16 candidate: 16-row groups, K split so that one batch covers a warp's chunks and
        // at least 2,048 warps stream W (gemv_geometry's rule over groups and chunks).
        auto add_mma16 = [&](int batch, int warps_per_block) {
            if (sh.k % G4_FP8_MMA16_CHUNK != 0) return;
            const int groups = (sh.n + 15) / 16, chunks = sh.k / G4_FP8_MMA16_CHUNK;
            int want = std::max((chunks + batch - 1) / batch, (2048 + groups - 1) / groups), parts = 1;
            while (parts < want) parts <<= 1;
            parts = std::min(parts, warps_per_block);
            const int per_block = warps_per_block / parts, blocks = (groups + per_block - 1) / per_block;
            variants.push_back({"mma16_b" + std::to_string(batch) + "_w" + std::to_string(warps_per_block),
                                [=, &bench](const uint8_t* w) {
                                    if (batch == 2)
                                        fp8_gemv_mma16<2><<<blocks, warps_per_block * 32, 0, bench.stream>>>(
                                            x, w, scale, y, sh.n, sh.k, parts);
                                    else
                                        fp8_gemv_mma16<4><<<blocks, warps_per_block * 32, 0, bench.stream>>>(
                                            x, w, scale, y, sh.n, sh.k, parts);
                                }});
        };
        for (int batch : {2, 4})
            for (int warps : {8, 16}) add_mma16(batch, warps);
        // C weight rows per warp group (gemv_geometry's rule over the groups; stop 48).
        auto add_columns = [&](int columns, int loads, int warps_per_block) {
            const int groups = (sh.n + columns - 1) / columns;
            const std::pair<int, int> g = gemv_geometry(groups, sh.k / 16, loads, warps_per_block);
            const int threads = warps_per_block * 32;
            variants.push_back({"cols" + std::to_string(columns) + "_b" + std::to_string(loads) + "_w" +
                                    std::to_string(warps_per_block),
                                [=, &bench](const uint8_t* w) {
                                    auto kernel = columns == 2 ? (loads == 4 ? fp8_gemv_columns<2, 4>
                                                                             : fp8_gemv_columns<2, 8>)
                                                               : (loads == 4 ? fp8_gemv_columns<4, 4>
                                                                             : fp8_gemv_columns<4, 2>);
                                    kernel<<<g.first, threads, 0, bench.stream>>>(x, w, scale, y, sh.n, sh.k,
                                                                                  g.second);
                                }});
        };
        // g4's since stop 49 (matmul_bt_fp8_channel::one_row_gemv): 2 rows with 4 loads of each
        // per lane below K 4,096, 4 rows with 2 loads from there; 4 warps per block.
        add_columns(2, 4, 4);
        add_columns(2, 8, 4);
        add_columns(2, 4, 8);
        add_columns(4, 2, 4);
        add_columns(4, 4, 4);
        for_each_hint([&](auto hint, const char* suffix) {
            using W = HintedLoads<E4m3Weights, decltype(hint)::value>;
            const bool long_k = sh.k >= 4096;
            const int columns = long_k ? 4 : 2;
            const std::pair<int, int> g = gemv_geometry((sh.n + columns - 1) / columns, sh.k / 16, long_k ? 2 : 4, 4);
            variants.push_back({std::string("g4") + suffix, [=, &bench](const uint8_t* w) {
                                    auto kernel = long_k ? fp8_gemv_columns<4, 2, W> : fp8_gemv_columns<2, 4, W>;
                                    kernel<<<g.first, 128, 0, bench.stream>>>(x, w, scale, y, sh.n, sh.k, g.second);
                                }});
        });
        variants.push_back({"read_noL1_256B", [&, bytes](const uint8_t* w) {
                                bench.read<LoadHint::no_l1_prefetch_256>(w, bytes);
                            }});
        // The streaming candidate, for K = 2,560 (5 vectors a lane), at 1 to 4 resident blocks of
        // 4 or 8 warps per multiprocessor.
        auto add_stream = [&](int columns, int warps_per_block, int blocks_per_sm) {
            if (sh.k != 2560) return;
            auto kernel = columns == 1   ? fp8_gemv_stream<1, 5, false>
                          : columns == 2 ? fp8_gemv_stream<2, 5, false>
                                         : fp8_gemv_stream<4, 5, false>;
            int resident = 0;
            CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, warps_per_block * 32, 0));
            const int blocks = bench.sms * std::min(resident, blocks_per_sm);
            variants.push_back({"stream_c" + std::to_string(columns) + "_w" + std::to_string(warps_per_block) + "_r" +
                                    std::to_string(std::min(resident, blocks_per_sm)),
                                [=, &bench](const uint8_t* w) {
                                    kernel<<<blocks, warps_per_block * 32, 0, bench.stream>>>(x, w, scale, y, sh.n, sh.k);
                                }});
        };
        for (int columns : {1, 2, 4})
            for (int blocks_per_sm : {4, 8, 16}) add_stream(columns, 4, blocks_per_sm);
        add_stream(2, 8, 4);
        time_and_check(bench, variants, pool, bytes, copies, y, want);
    }
    gelu_pairs(bench, pool, pool_bytes, x, x_host, scale, scale_host, y);
    dequant(bench, pool, pool_bytes, scale);
    return 0;
}
