// The MoE prefill's expert GEMMs at 26B-A4B's sizes: 512 tokens × top-8 of 128 experts, gate_up
// [1408, 2816] and down [2816, 704] per expert, bf16. g4's grouped GEMM (src/kernels/cuda/
// moe_grouped.cu: per-expert row offsets read on the device) beside cuBLAS's grouped GEMM (which
// takes the group sizes from the host: the round trip g4's kernel removes), the best WMMA candidate
// of stop 32 (grouped_kernels.cuh) and a plain read of the weights; each checked against a plain
// kernel. Then g4_moe_route on the same routing, checked against a stable sort on the host.
#include <dlfcn.h>
#include "bench_common.cuh"
#include "grouped_kernels.cuh"  // and src/kernels/cuda/moe_grouped.cu

// One thread per output, f32 sums: the check. GELU_MUL: a's row r is token tokens[r]'s, and the
// output is gelu(gate) ⊙ up rounded as g4's kernels round.
template <bool GELU_MUL>
__global__ void plain_grouped(const bf* a, const uint32_t* tokens, const bf* b, bf* c, const int* row_expert,
                              int rows, int n, int k) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * n) return;
    const int r = i / n, col = i % n;
    const bf* x = a + (size_t)(GELU_MUL ? tokens[r] : r) * k;
    const int rows_w = GELU_MUL ? 2 * n : n;
    const bf* w = b + ((size_t)row_expert[r] * rows_w + col) * k;
    float sum = 0.0f, up = 0.0f;
    for (int j = 0; j < k; ++j) {
        sum += __bfloat162float(x[j]) * __bfloat162float(w[j]);
        if (GELU_MUL) up += __bfloat162float(x[j]) * __bfloat162float(w[(size_t)n * k + j]);
    }
    if (GELU_MUL) sum = g4_round<bf>(g4_gelu_tanh(g4_round<bf>(sum))) * g4_round<bf>(up);
    c[i] = __float2bfloat16(sum);
}

// cuBLAS's grouped GEMM, loaded at run time (the compiler wheels have no cuBLAS headers).
typedef int (*GroupedGemm)(void*, const int*, const int*, const int*, const int*, const int*, const void*,
                           const void* const*, int, const int*, const void* const*, int, const int*, const void*,
                           void* const*, int, const int*, int, const int*, int);
struct Cublas {
    void* handle = nullptr;
    GroupedGemm grouped = nullptr;
    Cublas(cudaStream_t stream) {
        void* lib = dlopen("libcublas.so.13", RTLD_NOW);
        if (!lib) return;
        auto create = (int (*)(void**))dlsym(lib, "cublasCreate_v2");
        auto set_stream = (int (*)(void*, cudaStream_t))dlsym(lib, "cublasSetStream_v2");
        grouped = (GroupedGemm)dlsym(lib, "cublasGemmGroupedBatchedEx");
        if (!create || !set_stream || !grouped || create(&handle) != 0 || set_stream(handle, stream) != 0) grouped = nullptr;
    }
};

// µs per launch of `launches` plain stream launches after a warm-up (cuBLAS's grouped GEMM copies
// its host arrays on each call, which a graph cannot capture).
static double stream_us(Bench& bench, int launches, const std::function<void()>& launch) {
    for (int i = 0; i < 3; ++i) launch();
    CHECK(cudaEventRecord(bench.start, bench.stream));
    for (int i = 0; i < launches; ++i) launch();
    CHECK(cudaEventRecord(bench.stop, bench.stream));
    CHECK(cudaEventSynchronize(bench.stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, bench.start, bench.stop));
    return ms * 1e3 / launches;
}

int main() {
    Bench bench;
    Cublas cublas(bench.stream);
    const int experts = 128, tokens = 512, top = 8, routed = tokens * top, hidden = 2816, width = 704;
    // Each token's 8 distinct experts, uniformly (a fixed LCG): about 32 rows per expert.
    std::vector<int> counts(experts, 0);
    std::vector<uint32_t> ids;
    uint64_t state = 12345;
    for (int t = 0; t < tokens; ++t) {
        std::vector<int> all(experts);
        for (int i = 0; i < experts; ++i) all[i] = i;
        for (int s = 0; s < top; ++s) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            const int j = s + (int)((state >> 33) % (experts - s));
            std::swap(all[s], all[j]);
            ++counts[all[s]];
            ids.push_back(all[s]);
        }
    }
    std::vector<int> offsets(experts + 1, 0), row_expert(routed);
    for (int e = 0; e < experts; ++e) {
        offsets[e + 1] = offsets[e] + counts[e];
        for (int r = offsets[e]; r < offsets[e + 1]; ++r) row_expert[r] = e;
    }
    // The stable counting sort on the host: the token of each row, the row of each slot.
    std::vector<uint32_t> next(offsets.begin(), offsets.end() - 1), want_rows(routed), want_positions(routed);
    for (int i = 0; i < routed; ++i) {
        want_positions[i] = next[ids[i]]++;
        want_rows[want_positions[i]] = i / top;
    }
    printf("rows per expert: min %d, max %d\n", *std::min_element(counts.begin(), counts.end()),
           *std::max_element(counts.begin(), counts.end()));
    uint32_t* offsets_dev = bench.alloc<uint32_t>(experts + 1);
    int* row_expert_dev = bench.alloc<int>(routed);
    uint32_t* tokens_dev = bench.alloc<uint32_t>(routed);
    CHECK(cudaMemcpy(offsets_dev, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(row_expert_dev, row_expert.data(), routed * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(tokens_dev, want_rows.data(), routed * 4, cudaMemcpyHostToDevice));
    CHECK(cudaFuncSetAttribute(g4_moe_grouped_gate_up_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               G4_GROUPED_SHARED_BYTES));
    CHECK(cudaFuncSetAttribute(g4_moe_grouped_down_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               G4_GROUPED_SHARED_BYTES));
    bool all_close = true;
    printf("%-8s %-44s %10s %10s %12s\n", "proj", "kernel", "µs", "TB/s", "max rel diff");
    auto report = [&](const char* proj, const char* name, double us, double bytes, double diff) {
        const bool close = diff < 2e-2;
        all_close &= close;
        printf("%-8s %-44s %10.1f %10.2f %12.2e%s\n", proj, name, us, bytes / us / 1e6, diff, close ? "" : "  WRONG");
    };
    for (const Shape shape : {Shape{"gate_up", 2 * width, hidden}, Shape{"down", hidden, width}}) {
        const size_t weight_count = (size_t)experts * shape.n * shape.k;
        const double bytes = weight_count * 2.0;
        const size_t outputs = (size_t)routed * shape.n;
        bf* a = bench.filled((size_t)routed * shape.k);
        bf* b = bench.filled(weight_count);
        bf* expected = bench.alloc<bf>(outputs);
        bf* got = bench.alloc<bf>(outputs);
        auto check = [&](const std::vector<uint16_t>& want, size_t count) {
            return max_relative_difference(want, bench.download(got, count));
        };
        plain_grouped<false><<<(outputs + 255) / 256, 256, 0, bench.stream>>>(a, nullptr, b, expected, row_expert_dev,
                                                                               routed, shape.n, shape.k);
        bench.sync();
        const std::vector<uint16_t> want = bench.download(expected, outputs);
        const double floor_us = bench.graph_us(4, [&](int) { bench.read(b, weight_count * 2); });
        printf("%-8s %-44s %10.1f %10.2f %12s\n", shape.name, "read the weights", floor_us, bytes / floor_us / 1e6, "-");

        using Wmma = GroupedShape<64, 128, 32, 64, 4>;
        CHECK(cudaFuncSetAttribute(Wmma::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Wmma::shared_bytes));
        const int wmma_blocks = (shape.n + Wmma::bn - 1) / Wmma::bn * experts;
        auto wmma = [&] {
            Wmma::kernel<<<wmma_blocks, Wmma::threads, Wmma::shared_bytes, bench.stream>>>(
                a, b, got, offsets_dev, shape.n, shape.k, wmma_blocks / experts);
        };
        CHECK(cudaMemset(got, 0xff, outputs * 2));
        wmma();
        bench.sync();
        report(shape.name, "WMMA 64x128, warp 32, k64, 4 stages (stop 32)", bench.graph_us(4, [&](int) { wmma(); }),
               bytes, check(want, outputs));

        if (cublas.grouped) {
            // Row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ, one group per expert with rows.
            std::vector<const void*> a_ptrs, b_ptrs;
            std::vector<void*> c_ptrs;
            std::vector<int> ms;
            for (int e = 0; e < experts; ++e) {
                if (counts[e] == 0) continue;
                b_ptrs.push_back(b + (size_t)e * shape.n * shape.k);
                a_ptrs.push_back(a + (size_t)offsets[e] * shape.k);
                c_ptrs.push_back(got + (size_t)offsets[e] * shape.n);
                ms.push_back(counts[e]);
            }
            const int groups = (int)ms.size();
            const void** a_dev = bench.alloc<const void*>(groups);
            const void** b_dev = bench.alloc<const void*>(groups);
            void** c_dev = bench.alloc<void*>(groups);
            CHECK(cudaMemcpy(a_dev, a_ptrs.data(), groups * 8, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(b_dev, b_ptrs.data(), groups * 8, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(c_dev, c_ptrs.data(), groups * 8, cudaMemcpyHostToDevice));
            const std::vector<int> transa(groups, 1), transb(groups, 0), ns(groups, shape.n), ks(groups, shape.k),
                ones(groups, 1);
            const std::vector<float> alphas(groups, 1.0f), betas(groups, 0.0f);
            int status = 0;
            auto grouped = [&] {
                status |= cublas.grouped(cublas.handle, transa.data(), transb.data(), ns.data(), ms.data(), ks.data(),
                                         alphas.data(), b_dev, 14, ks.data(), a_dev, 14, ks.data(), betas.data(), c_dev,
                                         14, ns.data(), groups, ones.data(), 68);
            };
            CHECK(cudaMemset(got, 0xff, outputs * 2));
            grouped();
            bench.sync();
            const double diff = check(want, outputs);
            const double us = stream_us(bench, 10, grouped);
            if (status != 0) printf("cuBLAS grouped GEMM: status %d\n", status);
            report(shape.name, "cuBLAS grouped GEMM (sizes from the host)", us, bytes, status ? 1.0 : diff);
        } else {
            printf("%-8s %-44s\n", shape.name, "cuBLAS grouped GEMM: libcublas.so.13 not loaded");
        }

        const int plain_blocks = (shape.n + G4_GROUPED_COLS - 1) / G4_GROUPED_COLS * experts;
        auto mma = [&] {
            g4_moe_grouped_down_bf16<<<plain_blocks, G4_GROUPED_THREADS, G4_GROUPED_SHARED_BYTES, bench.stream>>>(
                a, b, got, offsets_dev, shape.n, shape.k, plain_blocks / experts);
        };
        CHECK(cudaMemset(got, 0xff, outputs * 2));
        mma();
        bench.sync();
        report(shape.name, "g4 mma.sync grouped GEMM", bench.graph_us(4, [&](int) { mma(); }), bytes,
               check(want, outputs));

        if (shape.n == 2 * width) {
            // gate_up as the model runs it: rows gathered from the tokens, GeGLU in the epilogue.
            bf* x = bench.filled((size_t)tokens * shape.k);
            const size_t fused_outputs = (size_t)routed * width;
            plain_grouped<true><<<(fused_outputs + 255) / 256, 256, 0, bench.stream>>>(
                x, tokens_dev, b, expected, row_expert_dev, routed, width, shape.k);
            bench.sync();
            const std::vector<uint16_t> want_fused = bench.download(expected, fused_outputs);
            const int fused_blocks = (width + G4_GROUPED_COLS / 2 - 1) / (G4_GROUPED_COLS / 2) * experts;
            auto fused = [&] {
                g4_moe_grouped_gate_up_bf16<<<fused_blocks, G4_GROUPED_THREADS, G4_GROUPED_SHARED_BYTES, bench.stream>>>(
                    x, tokens_dev, b, got, offsets_dev, width, shape.k, fused_blocks / experts);
            };
            CHECK(cudaMemset(got, 0xff, outputs * 2));
            fused();
            bench.sync();
            report(shape.name, "g4 mma.sync, rows gathered, GeGLU fused", bench.graph_us(4, [&](int) { fused(); }),
                   bytes, check(want_fused, fused_outputs));
            CHECK(cudaFree(x));
        }
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        CHECK(cudaFree(expected));
        CHECK(cudaFree(got));
    }
    uint32_t* ids_dev = bench.alloc<uint32_t>(routed);
    uint32_t* rows_dev = bench.alloc<uint32_t>(routed);
    uint32_t* positions_dev = bench.alloc<uint32_t>(routed);
    CHECK(cudaMemcpy(ids_dev, ids.data(), routed * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(offsets_dev, 0xff, (experts + 1) * 4));
    g4_moe_route<<<1, 1024, 0, bench.stream>>>(ids_dev, offsets_dev, rows_dev, positions_dev, routed, top, experts);
    bench.sync();
    std::vector<uint32_t> got_offsets(experts + 1), got_rows(routed), got_positions(routed);
    CHECK(cudaMemcpy(got_offsets.data(), offsets_dev, (experts + 1) * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got_rows.data(), rows_dev, routed * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got_positions.data(), positions_dev, routed * 4, cudaMemcpyDeviceToHost));
    const bool same = std::equal(offsets.begin(), offsets.end(), got_offsets.begin(),
                                 [](int a, uint32_t b) { return (uint32_t)a == b; }) &&
                      got_rows == want_rows && got_positions == want_positions;
    const double route_us = bench.graph_us(4, [&](int) {
        g4_moe_route<<<1, 1024, 0, bench.stream>>>(ids_dev, offsets_dev, rows_dev, positions_dev, routed, top,
                                                   experts);
    });
    printf("g4_moe_route, %d slots of %d experts: %.1f µs, %s the host's stable sort\n", routed, experts, route_us,
           same ? "same as" : "DIFFERS FROM");
    return same && all_close ? 0 : 1;
}
