// 31B's decode step as the GPU meets it: a chain of layers (sliding-layer shapes, bf16, one token,
// 1,024 cache rows of which 64 are visible), each g4's kernels in g4's order with g4's launch
// geometry and programmatic dependent launch — q/k/v GEMV, qkv_norm_rope, attention and its merge,
// o GEMV, dual_rms_norm_plus_res, gate/up GEMV with its GeGLU, down GEMV, dual_rms_norm_plus_res —
// in one CUDA graph, on distinct weights per layer (far beyond L2). Then the same chain with one
// stage changed (left out, an empty kernel in its place, another kernel), to measure what each
// stage adds to a step where it sits, which a kernel timed alone does not show.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/linear.cu"
#include "../../src/kernels/cuda/linear_gelu_mul.cu"
#include "../../src/kernels/cuda/norms.cu"
#include "../../src/kernels/cuda/attention.cu"

// A stage's placeholder: one block that only takes its place in the dependency chain.
__global__ void empty_stage() {
    G4_KERNEL_START();
}

enum Norm { NORM_FEW_ROWS, NORM_LEAN, NORM_NONE, NORM_EMPTY, NORM_WIDE };
// How the attention stage runs: g4's (every kernel, 16 chunks cut from the visible slots, which
// the position on the device bounds), the chunks cut from all 1,024 buffer rows (stop 42's
// kernel), left out, one empty kernel in its three kernels' place (what one fused kernel could
// at best reach), without one of its kernels, or with the general chunk kernel (128 registers)
// where g4 takes the lean one for heads of 256 (63).
enum Attn { ATTN_ALL, ATTN_WHOLE_BUFFER, ATTN_NONE, ATTN_EMPTY, ATTN_NO_ROPE, ATTN_NO_MERGE, ATTN_GENERAL };

int main() {
    Bench bench;
    const int layers = 16, hidden = 5376, heads = 32, kv_heads = 16, d = 256, width = 21504;
    const int qkv_rows = (heads + 2 * kv_heads) * d, attn_cols = heads * d;
    const int cache_rows = 1024, visible = 64, most_splits = 16;
    const size_t qkv_w = (size_t)qkv_rows * hidden, o_w = (size_t)hidden * attn_cols,
                 gate_up_w = (size_t)2 * width * hidden, down_w = (size_t)hidden * width;
    std::vector<bf*> wq(layers), wo(layers), wgu(layers), wd(layers), kc(layers), vc(layers);
    for (int l = 0; l < layers; ++l) {
        wq[l] = bench.filled(qkv_w), wo[l] = bench.filled(o_w), wgu[l] = bench.filled(gate_up_w);
        wd[l] = bench.filled(down_w);
        kc[l] = bench.filled((size_t)kv_heads * cache_rows * d),
        vc[l] = bench.filled((size_t)kv_heads * cache_rows * d);
    }
    bf *x = bench.filled(hidden), *normed = bench.filled(hidden), *qkv = bench.filled(qkv_rows);
    bf* q = bench.filled(attn_cols);
    bf *attn = bench.filled(attn_cols), *o = bench.filled(hidden), *res = bench.filled(hidden);
    bf *act = bench.filled(width), *down = bench.filled(hidden), *norm_w = bench.filled(hidden);
    bf* head_norm_w = bench.filled(d);
    float* table = bench.alloc<float>(d);
    CHECK(cudaMemset(table, 0, d * sizeof(float)));
    std::vector<float> mask_host(cache_rows, -INFINITY);
    std::fill(mask_host.begin(), mask_host.begin() + visible, 0.0f);
    float* mask = bench.alloc<float>(cache_rows);
    CHECK(cudaMemcpy(mask, mask_host.data(), cache_rows * sizeof(float), cudaMemcpyHostToDevice));
    unsigned* slot = bench.alloc<unsigned>(1);
    const unsigned slot_value = visible - 1;
    CHECK(cudaMemcpy(slot, &slot_value, sizeof(unsigned), cudaMemcpyHostToDevice));
    float* partial_acc = bench.alloc<float>((size_t)most_splits * heads * d);
    float* partial_stats = bench.alloc<float>((size_t)most_splits * heads * 2);

    // linear.rs's dense_gemv for one row: q/k/v and gate/up are wide (batch 8, 4-warp blocks);
    // o and down are narrow over a long K (8-warp blocks, batch 4: a lane's share is 4 and 11).
    const auto qkv_geo = gemv_geometry(qkv_rows, hidden / 8, 8, 4);
    const auto o_geo = gemv_geometry(hidden, attn_cols / 8, 4, 8);
    const auto down_geo = gemv_geometry(hidden, width / 8, 4, 8);
    const int gu_wpc = gemv_geometry(2 * width, hidden / 8, 8, 4).second;
    const int gu_blocks = width / (std::max(4, 2 * gu_wpc) / (2 * gu_wpc));

    auto norm = [&](Norm kind, const bf* branch, bf* out_res, bf* out_y) {
        auto dual = [&](auto kernel, int threads) {
            launch_kernel(true, bench.stream, 1, threads, kernel, (const bf*)res, branch, (const bf*)norm_w,
                          (const bf*)norm_w, out_res, out_y, hidden, 1.0f, 1e-6f);
        };
        switch (kind) {
            case NORM_NONE:
                return;
            case NORM_EMPTY:
                return launch_kernel(true, bench.stream, 1, 352, empty_stage);
            case NORM_FEW_ROWS:
                return dual(g4_dual_rms_norm_plus_res_few_rows_bf16, hidden / 8);
            case NORM_LEAN:
                return dual(g4_dual_rms_norm_plus_res_wide_lean_bf16, 352);
            case NORM_WIDE:
                return dual(g4_dual_rms_norm_plus_res_wide_bf16, 512);
        }
    };
    auto step = [&](Norm norm_kind, Attn attn_kind, int splits) {
        for (int l = 0; l < layers; ++l) {
            launch_kernel(true, bench.stream, qkv_geo.first, 128, g4_linear_one_row_bf16, (const bf*)normed,
                          (const bf*)wq[l], qkv, 1, qkv_rows, hidden, qkv_geo.second);
            if (attn_kind == ATTN_EMPTY) launch_kernel(true, bench.stream, 1, 128, empty_stage);
            if (attn_kind != ATTN_NONE && attn_kind != ATTN_EMPTY && attn_kind != ATTN_NO_ROPE)
                launch_kernel(true, bench.stream, (heads + 2 * kv_heads + 7) / 8, 256, g4_qkv_norm_rope_bf16,
                              (const bf*)qkv, (const bf*)head_norm_w, (const bf*)head_norm_w, (const float*)table,
                              (const float*)table, q, kc[l], vc[l], (const unsigned*)slot, 0, cache_rows, 1, heads,
                              kv_heads, d, 1, 1e-6f);
            if (attn_kind != ATTN_NONE && attn_kind != ATTN_EMPTY) {
                // A graph step gives its position as the last visible slot and no mask; stop 42's gave
                // the mask.
                const bool whole = attn_kind == ATTN_WHOLE_BUFFER;
                const float* step_mask = whole ? mask : nullptr;
                const unsigned* last_slot = whole ? nullptr : slot;
                const auto chunk_kernel = attn_kind == ATTN_GENERAL ? g4_attention_bf16 : g4_attention_vec1_bf16;
                launch_kernel(true, bench.stream, heads * splits, 128, chunk_kernel, (const bf*)q,
                              (const bf*)kc[l], (const bf*)vc[l], step_mask, last_slot, attn, partial_acc,
                              partial_stats, heads, kv_heads, 1, cache_rows, d, (size_t)cache_rows * d, 0.0625f,
                              splits);
                if (attn_kind != ATTN_NO_MERGE)
                    launch_kernel(true, bench.stream, heads * ((d + 127) / 128), 128, g4_attention_merge_bf16,
                                  (const float*)partial_acc, (const float*)partial_stats, attn, d, splits,
                                  last_slot, cache_rows);
            }
            launch_kernel(true, bench.stream, o_geo.first, 256, g4_linear_one_row_narrow_bf16, (const bf*)attn,
                          (const bf*)wo[l], o, 1, hidden, attn_cols, o_geo.second);
            norm(norm_kind, o, res, normed);
            launch_kernel(true, bench.stream, gu_blocks, 256, g4_linear_gelu_mul_one_row_bf16, (const bf*)normed,
                          (const bf*)wgu[l], (const bf*)nullptr, act, 1, width, hidden, gu_wpc);
            launch_kernel(true, bench.stream, down_geo.first, 256, g4_linear_one_row_narrow_bf16, (const bf*)act,
                          (const bf*)wd[l], down, 1, hidden, width, down_geo.second);
            norm(norm_kind, down, x, normed);
        }
    };
    struct Variant {
        const char* name;
        Norm norm;
        Attn attn;
        int splits;
    };
    const Variant variants[] = {
        {"g4: few-rows norms, lean chunk kernel, 16 chunks cut from the visible slots", NORM_FEW_ROWS, ATTN_ALL, 16},
        {"attention: the general chunk kernel (128 registers)", NORM_FEW_ROWS, ATTN_GENERAL, 16},
        {"attention: 8 chunks", NORM_FEW_ROWS, ATTN_ALL, 8},
        {"attention: the general chunk kernel, 8 chunks", NORM_FEW_ROWS, ATTN_GENERAL, 8},
        {"attention: 4 chunks", NORM_FEW_ROWS, ATTN_ALL, 4},
        {"stop 42's: lean norms, chunks cut from the whole buffer", NORM_LEAN, ATTN_WHOLE_BUFFER, 16},
        {"norms: lean", NORM_LEAN, ATTN_ALL, 16},
        {"norms: _wide (512 threads, weights before the wait)", NORM_WIDE, ATTN_ALL, 16},
        {"norms: an empty kernel each", NORM_EMPTY, ATTN_ALL, 16},
        {"norms left out", NORM_NONE, ATTN_ALL, 16},
        {"attention: chunks cut from the whole buffer", NORM_FEW_ROWS, ATTN_WHOLE_BUFFER, 16},
        {"attention stage left out (q/k/v -> o)", NORM_FEW_ROWS, ATTN_NONE, 16},
        {"attention stage: one empty kernel", NORM_FEW_ROWS, ATTN_EMPTY, 16},
        {"qkv_norm_rope left out", NORM_FEW_ROWS, ATTN_NO_ROPE, 16},
        {"attention merge left out", NORM_FEW_ROWS, ATTN_NO_MERGE, 16},
    };
    const int count = sizeof(variants) / sizeof(variants[0]), rounds = 5;
    const double bytes = (double)(qkv_w + o_w + gate_up_w + down_w) * 2;
    // Rounds over every variant in turn, so that a drift in clocks reaches them all alike; the
    // median of each.
    std::vector<std::vector<double>> us(count);
    for (int round = 0; round < rounds; ++round)
        for (int i = 0; i < count; ++i)
            us[i].push_back(bench.graph_us(1, [&](int) { step(variants[i].norm, variants[i].attn, variants[i].splits); }) / layers);
    printf(
        "| chain (%d layers of 31B, bf16) | µs a layer (median of %d) | min | max | Δ median | weights GB/s |\n"
        "|---|---:|---:|---:|---:|---:|\n",
        layers, rounds);
    double base = 0;
    for (int i = 0; i < count; ++i) {
        std::vector<double> sorted = us[i];
        std::sort(sorted.begin(), sorted.end());
        const double median = sorted[rounds / 2];
        if (i == 0) base = median;
        printf("| %s | %.2f | %.2f | %.2f | %+.2f | %.0f |\n", variants[i].name, median, sorted.front(), sorted.back(),
               median - base, bytes / (median * 1e3));
    }
    return 0;
}
