// The MoE decode kernels (moe_experts.cu) at 26B-A4B's sizes (128 experts, hidden 2816, expert
// width 704, top-8), bf16, one token, beside a plain read of the chosen experts' bytes, g4's
// kernels with other weight loads and a few other ways to split the work. CUDA graphs of 32
// launches, each on another set of experts.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/moe_experts.cu"

// g4's expert kernels with W loaded another way (bench_common.cuh's hints; g4's own load is
// g4_load_weights).
template <typename W>
__global__ void gate_up_loaded(const bf* x, const uint32_t* ids, const bf* gate_up, bf* h, int slots, int hidden,
                               int width) {
    moe_experts_gate_up<bf, W>(x, ids, gate_up, nullptr, h, slots, hidden, width, {});
}
template <typename W>
__global__ void down_loaded(const bf* h, const uint32_t* ids, const float* weights, const bf* down, float* out,
                            int slots, int hidden, int width) {
    moe_experts_down<bf, W>(h, ids, weights, down, nullptr, out, slots, hidden, width, {});
}

// gate_up with P warps per (slot, column), blocks of WPB warps: each warp takes 1/P of the hidden
// range, every lane its whole share of both rows in one batch of 2·L loads.
template <int P, int L>
__global__ void gu_split(const bf* x, const uint32_t* ids, const bf* gate_up, bf* h, int slots, int hidden,
                         int width) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int cols_per_block = blockDim.x / 32 / P;
    const int blocks_per_row = (width + cols_per_block - 1) / cols_per_block;
    const int r = blockIdx.x / blocks_per_row;
    const int j = (blockIdx.x % blocks_per_row) * cols_per_block + warp / P;
    const int part = warp % P;
    const size_t expert = ids[r];
    const size_t gate_row = expert * 2 * width + j, up_row = gate_row + width;
    const bf* x_row = x + (size_t)(r / slots) * hidden;
    const int vectors = hidden / 8;
    float g = 0.f, u = 0.f;
    if (j < width) {
        const uint4* gate = reinterpret_cast<const uint4*>(gate_up + gate_row * hidden);
        const uint4* up = reinterpret_cast<const uint4*>(gate_up + up_row * hidden);
        uint4 gb[L], ub[L];
#pragma unroll
        for (int b = 0; b < L; ++b) {
            const int i = (b * P + part) * 32 + lane;
            gb[b] = i < vectors ? gate[i] : make_uint4(0, 0, 0, 0);
            ub[b] = i < vectors ? up[i] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < L; ++b) {
            const int i = (b * P + part) * 32 + lane;
            if (i >= vectors) break;
            float xf[8], gf[8], uf[8];
            x_values<bf, DenseWeights<bf>>(x_row, i, xf);
            DenseWeights<bf>::decode(gb[b], gf);
            DenseWeights<bf>::decode(ub[b], uf);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                g += xf[e] * gf[e];
                u += xf[e] * uf[e];
            }
        }
    }
    for (int bits = 16; bits > 0; bits >>= 1) {
        g += __shfl_xor_sync(0xffffffffu, g, bits);
        u += __shfl_xor_sync(0xffffffffu, u, bits);
    }
    __shared__ float2 partial[32];
    if (lane == 0) partial[warp] = make_float2(g, u);
    __syncthreads();
    if (part == 0 && lane == 0 && j < width) {
        g = 0.f;
        u = 0.f;
        for (int p = 0; p < P; ++p) {
            g += partial[warp + p].x;
            u += partial[warp + p].y;
        }
        const float activated = g4_round<bf>(g4_gelu_tanh(g4_round<bf>(g)));
        h[(size_t)r * width + j] = g4_from_f32<bf>(activated * g4_round<bf>(u));
    }
}

// down with R output columns per block: warp s takes slot s's R rows (contiguous in its
// expert's matrix) in one batch of L loads (g4's `g4_load_weights`); the slots are combined in
// slot order. R = 1 is moe_experts.cu's kernel with every load in one batch.
template <int R, int L>
__global__ void down_rows(const bf* h, const uint32_t* ids, const float* weights, const bf* down, float* out,
                          int slots, int hidden, int width) {
    const int lane = threadIdx.x % 32, s = threadIdx.x / 32;
    const int groups = (hidden + R - 1) / R;
    const int t = blockIdx.x / groups;
    const int c0 = (blockIdx.x % groups) * R;
    const int vectors = width / 8;
    const int total = R * vectors;
    float sum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) sum[r] = 0.f;
    if (s < slots) {
        const size_t expert = ids[(size_t)t * slots + s];
        const uint4* rows = reinterpret_cast<const uint4*>(down + (expert * hidden + c0) * width);
        const bf* hs = h + ((size_t)t * slots + s) * width;
        uint4 wb[L];
#pragma unroll
        for (int b = 0; b < L; ++b) {
            const int i = b * 32 + lane;
            wb[b] = (i < total && c0 + i / vectors < hidden) ? g4_load_weights(rows + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < L; ++b) {
            const int i = b * 32 + lane;
            if (i >= total) break;
            float hf[8], wf[8];
            x_values<bf, DenseWeights<bf>>(hs, i % vectors, hf);
            DenseWeights<bf>::decode(wb[b], wf);
            float p = 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) p += hf[e] * wf[e];
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (r == i / vectors) sum[r] += p;
        }
    }
    __shared__ float partial[8][R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = sum[r];
        for (int bits = 16; bits > 0; bits >>= 1) v += __shfl_xor_sync(0xffffffffu, v, bits);
        if (lane == 0 && s < 8) partial[s][r] = v;
    }
    __syncthreads();
    if (threadIdx.x < R && c0 + threadIdx.x < hidden) {
        float combined = 0.f;
        for (int q = 0; q < slots; ++q) combined += weights[(size_t)t * slots + q] * g4_round<bf>(partial[q][threadIdx.x]);
        out[(size_t)t * hidden + c0 + threadIdx.x] = combined;
    }
}


// gate_up with C columns (of one routed row) per block of 4 warps: the warps split the hidden
// range as g4's kernel does, each lane loading its share of all C gate and up rows in one batch
// of g4's loads (C = 1 is g4's kernel).
template <int C>
__global__ void gu_cols(const bf* x, const uint32_t* ids, const bf* gate_up, bf* h, int slots, int hidden,
                        int width) {
    constexpr int L = 3;  // ceil(2816 / 8 / 128) vectors a lane per row
    const int lane = threadIdx.x % 32, part = threadIdx.x / 32, parts = blockDim.x / 32;
    const int groups = width / C;
    const int r = blockIdx.x / groups, j0 = (blockIdx.x % groups) * C;
    const size_t gate_row = (size_t)ids[r] * 2 * width + j0;
    const bf* x_row = x + (size_t)(r / slots) * hidden;
    const int vectors = hidden / 8, step = 32 * parts;
    const uint4* gate = reinterpret_cast<const uint4*>(gate_up + gate_row * hidden);
    const uint4* up = reinterpret_cast<const uint4*>(gate_up + (gate_row + width) * hidden);
    uint4 gb[C][L], ub[C][L];
#pragma unroll
    for (int c = 0; c < C; ++c)
#pragma unroll
        for (int b = 0; b < L; ++b) {
            const int i = part * 32 + lane + b * step;
            gb[c][b] = i < vectors ? g4_load_weights(gate + (size_t)c * vectors + i) : make_uint4(0, 0, 0, 0);
            ub[c][b] = i < vectors ? g4_load_weights(up + (size_t)c * vectors + i) : make_uint4(0, 0, 0, 0);
        }
    float g[C], u[C];
#pragma unroll
    for (int c = 0; c < C; ++c) g[c] = u[c] = 0.f;
#pragma unroll
    for (int b = 0; b < L; ++b) {
        const int i = part * 32 + lane + b * step;
        if (i >= vectors) break;
        float xf[8];
        x_values<bf, DenseWeights<bf>>(x_row, i, xf);
#pragma unroll
        for (int c = 0; c < C; ++c) {
            float gf[8], uf[8];
            DenseWeights<bf>::decode(gb[c][b], gf);
            DenseWeights<bf>::decode(ub[c][b], uf);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                g[c] += xf[e] * gf[e];
                u[c] += xf[e] * uf[e];
            }
        }
    }
    __shared__ float2 partial[4][C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        for (int bits = 16; bits > 0; bits >>= 1) {
            g[c] += __shfl_xor_sync(0xffffffffu, g[c], bits);
            u[c] += __shfl_xor_sync(0xffffffffu, u[c], bits);
        }
        if (lane == 0) partial[part][c] = make_float2(g[c], u[c]);
    }
    __syncthreads();
    if (threadIdx.x < C) {
        float gs = 0.f, us = 0.f;
        for (int p = 0; p < parts; ++p) {
            gs += partial[p][threadIdx.x].x;
            us += partial[p][threadIdx.x].y;
        }
        const float activated = g4_round<bf>(g4_gelu_tanh(g4_round<bf>(gs)));
        h[(size_t)r * width + j0 + threadIdx.x] = g4_from_f32<bf>(activated * g4_round<bf>(us));
    }
}

// g4's down kernel with its loads in batches of B (g4: G4_MOE_BATCH, 8, of which a 704-wide
// row fills 3 a lane) and at least MIN_BLOCKS blocks a multiprocessor (fewer registers).
template <int B, int MIN_BLOCKS>
__global__ void __launch_bounds__(256, MIN_BLOCKS)
    down_batch(const bf* h, const uint32_t* ids, const float* weights, const bf* down, float* out, int slots,
               int hidden, int width) {
    const int lane = threadIdx.x % 32, s = threadIdx.x / 32;
    const int t = blockIdx.x / hidden, c = blockIdx.x % hidden;
    __shared__ float per_slot[G4_MOE_MAX_SLOTS];
    const size_t expert = ids[(size_t)t * slots + s];
    const bf* x_row = h + ((size_t)t * slots + s) * width;
    const uint4* w = reinterpret_cast<const uint4*>(down + (expert * hidden + c) * width);
    const int vectors = width / 8;
    float sum = 0.0f;
    for (int base = lane; base < vectors; base += 32 * B) {
        uint4 wb[B];
#pragma unroll
        for (int b = 0; b < B; ++b) {
            const int i = base + b * 32;
            wb[b] = i < vectors ? g4_load_weights(w + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < B; ++b) {
            const int i = base + b * 32;
            if (i >= vectors) break;
            float xf[8], wf[8];
            x_values<bf, DenseWeights<bf>>(x_row, i, xf);
            DenseWeights<bf>::decode(wb[b], wf);
#pragma unroll
            for (int e = 0; e < 8; ++e) sum += xf[e] * wf[e];
        }
    }
    for (int bits = 16; bits > 0; bits >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, bits);
    if (lane == 0) per_slot[s] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float combined = 0.0f;
        for (int q = 0; q < slots; ++q) combined += weights[(size_t)t * slots + q] * g4_round<bf>(per_slot[q]);
        out[(size_t)t * hidden + c] = combined;
    }
}

int main() {
    Bench bench;
    const int E = 128, H = 2816, W = 704, K = 8;
    const size_t gate_up_count = (size_t)E * 2 * W * H, down_count = (size_t)E * H * W;
    bf* gate_up = bench.filled(gate_up_count);
    bf* down = bench.filled(down_count);
    // Launch i reads expert set i % 16 (eight experts 37 apart): consecutive launches share no
    // expert, and sixteen sets (1.5 GB) do not fit in L2.
    const int sets = 16;
    uint32_t* ids = bench.alloc<uint32_t>(sets * K);
    std::vector<uint32_t> host_ids(sets * K);
    for (int i = 0; i < sets * K; ++i) host_ids[i] = (uint32_t)(i * 37 % E);
    CHECK(cudaMemcpy(ids, host_ids.data(), host_ids.size() * 4, cudaMemcpyHostToDevice));
    float* weights = bench.alloc<float>(K);
    std::vector<float> host_weights(K);
    for (int i = 0; i < K; ++i) host_weights[i] = 0.1f + 0.01f * i;
    CHECK(cudaMemcpy(weights, host_weights.data(), K * 4, cudaMemcpyHostToDevice));
    bf* x = bench.filled(H);
    bf* h_in = bench.filled(K * W);
    bf* h = bench.alloc<bf>(K * W);
    float* out = bench.alloc<float>(H);
    const double gate_up_bytes = (double)K * 2 * W * H * 2, down_bytes = (double)K * H * W * 2;
    auto report = [&](const char* name, double bytes, const std::function<void(const uint32_t*)>& launch) {
        const double us = bench.graph_us(32, [&](int i) { launch(ids + (i % sets) * K); });
        printf("%-26s %7.2f us %6.0f GB/s\n", name, us, bytes / (us * 1e3));
    };
    report("read: gate_up of 8 experts", gate_up_bytes, [&](const uint32_t*) {
        for (int e = 0; e < K; ++e) bench.read(gate_up + (size_t)host_ids[e] * 2 * W * H, (size_t)2 * W * H * 2);
    });
    report("read: down of 8 experts", down_bytes, [&](const uint32_t*) {
        for (int e = 0; e < K; ++e) bench.read(down + (size_t)host_ids[e] * H * W, (size_t)H * W * 2);
    });
    // moe_experts.rs's grids: gate_up one block of 4 warps per (slot, column), down one block of
    // one warp per slot per output column.
    report("g4 gate_up", gate_up_bytes, [&](const uint32_t* id) {
        g4_moe_experts_gate_up_bf16<<<K * W, 128, 0, bench.stream>>>(x, id, gate_up, h, K, H, W);
    });
    bench.sync();
    const std::vector<uint16_t> g4_h = bench.download(h, K * W);
    report("g4 down", down_bytes, [&](const uint32_t* id) {
        g4_moe_experts_down_bf16<<<H, K * 32, 0, bench.stream>>>(h_in, id, weights, down, out, K, H, W);
    });
    bench.sync();
    std::vector<float> g4_out(H), other(H);
    CHECK(cudaMemcpy(g4_out.data(), out, H * 4, cudaMemcpyDeviceToHost));
    auto down_difference = [&] {
        CHECK(cudaMemcpy(other.data(), out, H * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int i = 0; i < H; ++i) worst = std::max(worst, (double)fabs(other[i] - g4_out[i]) / (fabs(g4_out[i]) + 1e-3));
        return worst;
    };
    for_each_hint([&](auto hint, const char* suffix) {
        using Loads = HintedLoads<DenseWeights<bf>, decltype(hint)::value>;
        report(("g4 gate_up" + std::string(suffix)).c_str(), gate_up_bytes, [&](const uint32_t* id) {
            gate_up_loaded<Loads><<<K * W, 128, 0, bench.stream>>>(x, id, gate_up, h, K, H, W);
        });
        bench.sync();
        printf("  max rel. difference from g4: %.0e\n", max_relative_difference(g4_h, bench.download(h, K * W)));
        report(("g4 down" + std::string(suffix)).c_str(), down_bytes, [&](const uint32_t* id) {
            down_loaded<Loads><<<H, K * 32, 0, bench.stream>>>(h_in, id, weights, down, out, K, H, W);
        });
        bench.sync();
        printf("  max rel. difference from g4: %.0e\n", down_difference());
    });
#define GATE_UP(P, WPB)                                                                                     \
    {                                                                                                       \
        constexpr int L = (352 + 32 * P - 1) / (32 * P);                                                    \
        const int blocks = K * ((W + WPB / P - 1) / (WPB / P));                                             \
        report("gate_up P" #P " WPB" #WPB, gate_up_bytes, [&](const uint32_t* id) {                         \
            gu_split<P, L><<<blocks, WPB * 32, 0, bench.stream>>>(x, id, gate_up, h, K, H, W);              \
        });                                                                                                 \
        bench.sync();                                                                                       \
        printf("  max rel. difference from g4: %.0e\n", max_relative_difference(g4_h, bench.download(h, K * W))); \
    }
    GATE_UP(1, 4) GATE_UP(1, 8) GATE_UP(2, 4) GATE_UP(4, 8) GATE_UP(8, 8)
#define DOWN(R)                                                                                              \
    {                                                                                                        \
        constexpr int L = (R * 88 + 31) / 32;                                                                \
        report("down R" #R, down_bytes, [&](const uint32_t* id) {                                            \
            down_rows<R, L><<<(H + R - 1) / R, K * 32, 0, bench.stream>>>(h_in, id, weights, down, out, K, H, W); \
        });                                                                                                  \
        bench.sync();                                                                                        \
        printf("  max rel. difference from g4: %.0e\n", down_difference());                                  \
    }
    DOWN(1) DOWN(2) DOWN(4) DOWN(8)
#define GATE_UP_COLS(C)                                                                                     \
    {                                                                                                       \
        report("gate_up C" #C, gate_up_bytes, [&](const uint32_t* id) {                                     \
            gu_cols<C><<<K * W / C, 128, 0, bench.stream>>>(x, id, gate_up, h, K, H, W);                     \
        });                                                                                                 \
        bench.sync();                                                                                       \
        printf("  max rel. difference from g4: %.0e\n", max_relative_difference(g4_h, bench.download(h, K * W))); \
    }
    GATE_UP_COLS(1) GATE_UP_COLS(2) GATE_UP_COLS(4)
#define DOWN_BATCH(B, MIN_BLOCKS)                                                                             \
    {                                                                                                        \
        report("down batch " #B " min blocks " #MIN_BLOCKS, down_bytes, [&](const uint32_t* id) {            \
            down_batch<B, MIN_BLOCKS><<<H, K * 32, 0, bench.stream>>>(h_in, id, weights, down, out, K, H, W); \
        });                                                                                                  \
        bench.sync();                                                                                        \
        printf("  max rel. difference from g4: %.0e\n", down_difference());                                  \
    }
    DOWN_BATCH(8, 1) DOWN_BATCH(4, 1) DOWN_BATCH(3, 1) DOWN_BATCH(4, 6) DOWN_BATCH(3, 8) DOWN_BATCH(2, 8)
    return 0;
}
