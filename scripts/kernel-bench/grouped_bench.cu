// A candidate grouped expert GEMM (grouped_kernels.cuh: it reads the per-expert row offsets on the
// device, so a MoE prefill would need no host round trip) at 26B-A4B's sizes: 512 tokens × top-8
// of 128 experts, gate_up [1408, 2816] and down [2816, 704] per expert, bf16; tile shapes of one
// template, each checked against a plain kernel and timed
// beside a plain read of the weights (cuBLAS's grouped GEMM did both projections in 447 µs per
// layer, ≈ 3.4 TB/s, in the 26B-A4B prefill profile of docs/PERFORMANCE.md). Then the candidate
// routing sort (`g4_moe_route`) on the same routing, checked against a stable sort on the host and timed.
#include "bench_common.cuh"
#include "grouped_kernels.cuh"

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
    printf("rows per expert: min %d, max %d\n", *std::min_element(counts.begin(), counts.end()),
           *std::max_element(counts.begin(), counts.end()));
    uint32_t* offsets_dev = bench.alloc<uint32_t>(experts + 1);
    int* row_expert_dev = bench.alloc<int>(routed);
    CHECK(cudaMemcpy(offsets_dev, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(row_expert_dev, row_expert.data(), routed * 4, cudaMemcpyHostToDevice));
    struct Shape {
        const char* name;
        int n, k;
    };
    printf("%-8s %-30s %10s %10s %12s\n", "proj", "kernel", "µs", "TB/s", "max rel diff");
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
        printf("%-8s %-30s %10.1f %10.2f %12s\n", shape.name, "read the weights", floor_us, bytes / floor_us / 1e6, "-");
        auto run = [&](auto shape_of_tiles) {
            using S = decltype(shape_of_tiles);
            if (shape.k % S::bk != 0) return;
            char name[64];
            snprintf(name, sizeof name, "%dx%d, warp %d, k%d, %d", S::bm, S::bn, S::wn, S::bk, S::stages);
            CHECK(cudaFuncSetAttribute(S::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::shared_bytes));
            const int column_blocks = (shape.n + S::bn - 1) / S::bn;
            const int blocks = column_blocks * experts;
            auto launch = [&] {
                S::kernel<<<blocks, S::threads, S::shared_bytes, bench.stream>>>(a, b, got, offsets_dev, shape.n,
                                                                                   shape.k, column_blocks);
            };
            CHECK(cudaMemset(got, 0xff, outputs * 2));
            launch();
            bench.sync();
            const double diff = max_relative_difference(want, bench.download(got, outputs));
            const double us = bench.graph_us(4, [&](int) { launch(); });
            printf("%-8s %-30s %10.1f %10.2f %12.2e\n", shape.name, name, us, bytes / us / 1e6, diff);
        };
        run(GroupedShape<64, 128, 16, 64, 3>{});
        run(GroupedShape<64, 128, 32, 64, 3>{});
        run(GroupedShape<64, 128, 16, 64, 4>{});
        run(GroupedShape<64, 128, 32, 64, 4>{});
        run(GroupedShape<48, 128, 16, 64, 4>{});
        run(GroupedShape<64, 64, 16, 64, 4>{});
        run(GroupedShape<64, 64, 32, 64, 4>{});
        run(GroupedShape<64, 256, 32, 64, 3>{});
        run(GroupedShape<32, 128, 16, 64, 4>{});
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        CHECK(cudaFree(expected));
        CHECK(cudaFree(got));
    }
    // The routing sort: offsets, rows and positions against a stable counting sort on the host.
    std::vector<uint32_t> next(offsets.begin(), offsets.end() - 1), want_rows(routed), want_positions(routed);
    for (int i = 0; i < routed; ++i) {
        want_positions[i] = next[ids[i]]++;
        want_rows[want_positions[i]] = i / top;
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
    return same ? 0 : 1;
}
