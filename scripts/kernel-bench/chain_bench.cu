// A decode step as the GPU meets it: a chain of layers (31B's sliding-layer shapes, or E4B's with
// `chain_bench e4b`; bf16, one token, a sliding ring of the model's window — 1,024 rows for 31B, 512
// for E4B — of which 64 are visible), each g4's kernels
// in g4's order with g4's launch geometry and programmatic dependent launch — q/k/v GEMV,
// qkv_norm_rope, attention and its merge, o GEMV, dual_rms_norm_plus_res, gate/up GEMV with its
// GeGLU, down GEMV, then (E4B) rms_norm_plus_add and the per-layer input's gate and projection
// GEMVs, and dual_rms_norm_plus_res — in one CUDA graph, on distinct weights per layer (far
// beyond L2). Then the same chain with one stage changed (left out, an empty kernel in its place,
// another kernel), to measure what each stage adds to a step where it sits, which a kernel timed
// alone does not show. Before the chains: what a grid-wide barrier costs beside an empty kernel's
// launch, and the persistent MLP (persistent.cuh) checked bit for bit against g4's two GEMVs.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/linear.cu"
#include "../../src/kernels/cuda/linear_gelu_mul.cu"
#include "../../src/kernels/cuda/norms.cu"
#include "../../src/kernels/cuda/attention.cu"
#include "persistent.cuh"

// A stage's placeholder: one block that only takes its place in the dependency chain.
__global__ void empty_stage() {
    G4_KERNEL_START();
}

// How the norms run: the kernel g4 picks for the model's width, left out, or an empty kernel each.
enum Norm { NORM_G4, NORM_NONE, NORM_EMPTY };
// The per-layer input stage (E4B): g4's three kernels, left out, or one empty kernel.
enum Ple { PLE_ALL, PLE_NONE, PLE_EMPTY };
// How the attention stage runs: g4's (every kernel, its grid's chunks cut from the visible
// slots, which the position on the device bounds), the chunks cut from all the ring's rows
// (stop 42's kernel), left out, one empty kernel in its three kernels' place (what one fused
// kernel could at best reach), without one of its kernels, or with the general chunk kernel (128
// registers) where g4 takes the lean one for heads of 256 (63).
enum Attn {
    ATTN_ALL,
    ATTN_WHOLE_BUFFER,
    ATTN_NONE,
    ATTN_EMPTY,
    ATTN_NO_ROPE,
    ATTN_NO_MERGE,
    ATTN_GENERAL
};
// How the MLP's two GEMVs run: g4's two kernels, or one persistent kernel with a grid barrier
// between them, its first down weights loaded before or after the wait there, or with the dual
// norm before them folded in (each block normalising the row itself); or everything from the o
// GEMV to the next layer's q/k/v GEMV as one persistent kernel (persistent_layer_tail).
enum Mlp { MLP_G4, MLP_PERSISTENT, MLP_PERSISTENT_WAIT_FIRST, MLP_NORM_PERSISTENT, LAYER_TAIL_PERSISTENT };

// A model's sliding decoder layer as the chain runs it.
struct Model {
    const char* name;
    int hidden, heads, kv_heads, d, width;
    int ple;     // the per-layer input's width (E4B), 0 where there is none
    int window;  // the sliding layers' ring of cache rows
};

// One row through linear.rs's dense_gemv: its entry (plain, narrow, long K), W loads a lane and
// warps a block, then gemv_geometry's blocks and warps per column.
struct GemvLaunch {
    int entry;  // 0 _one_row, 1 _one_row_narrow, 2 _one_row_long
    int loads, warps_per_block, blocks, wpc;
};
static GemvLaunch dense_gemv(int n, int k) {
    const int vectors = k / 8, share = (vectors + 8 * 32 - 1) / (8 * 32);
    const bool narrow = n <= 5376, long_k = vectors >= 8 * 32 * 4, one_long_batch = share >= 5 && share <= 6;
    GemvLaunch g = !narrow                    ? GemvLaunch{0, 8, 4}
                   : long_k && one_long_batch ? GemvLaunch{2, 6, 8}
                   : long_k                   ? GemvLaunch{1, 4, 8}
                                              : GemvLaunch{1, 4, 4};
    const auto geo = gemv_geometry(n, vectors, g.loads, g.warps_per_block);
    g.blocks = geo.first, g.wpc = geo.second;
    return g;
}

int main(int argc, char** argv) {
    Bench bench;
    const bool e4b = argc > 1 && !strcmp(argv[1], "e4b");
    const Model model = e4b ? Model{"E4B", 2560, 8, 2, 256, 10240, 256, 512}
                              : Model{"31B", 5376, 32, 16, 256, 21504, 0, 1024};
    const int layers = 16, hidden = model.hidden, heads = model.heads, kv_heads = model.kv_heads, d = model.d,
              width = model.width, ple = model.ple;
    const int qkv_rows = (heads + 2 * kv_heads) * d, attn_cols = heads * d;
    // attention.rs's grid: a chunk per 16 of the ring's rows, at most 512 blocks' worth (31B: 16
    // a row; E4B: 32, its ring of 512 rows being shorter than 64 chunks').
    const int cache_rows = model.window, visible = 64;
    const int most_splits = std::min((cache_rows + 15) / 16, (512 + heads - 1) / heads);
    const size_t qkv_w = (size_t)qkv_rows * hidden, o_w = (size_t)hidden * attn_cols,
                 gate_up_w = (size_t)2 * width * hidden, down_w = (size_t)hidden * width,
                 ple_w = (size_t)ple * hidden;
    std::vector<bf*> wq(layers), wo(layers), wgu(layers), wd(layers), kc(layers), vc(layers), wpg(layers),
        wpp(layers);
    for (int l = 0; l < layers; ++l) {
        wq[l] = bench.filled(qkv_w), wo[l] = bench.filled(o_w), wgu[l] = bench.filled(gate_up_w);
        wd[l] = bench.filled(down_w);
        kc[l] = bench.filled((size_t)kv_heads * cache_rows * d),
        vc[l] = bench.filled((size_t)kv_heads * cache_rows * d);
        if (ple) wpg[l] = bench.filled(ple_w), wpp[l] = bench.filled(ple_w);
    }
    bf *x = bench.filled(hidden), *normed = bench.filled(hidden), *qkv = bench.filled(qkv_rows);
    bf* q = bench.filled(attn_cols);
    bf *attn = bench.filled(attn_cols), *o = bench.filled(hidden), *res = bench.filled(hidden);
    bf *act = bench.filled(width), *down = bench.filled(hidden), *norm_w = bench.filled(hidden);
    bf* after_mlp = bench.filled(hidden);
    bf *ple_in = bench.filled(std::max(ple, 1)), *ple_act = bench.filled(std::max(ple, 1)),
       *ple_out = bench.filled(hidden);
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

    // linear.rs's and linear_gelu_mul.rs's launches for one row.
    const GemvLaunch qkv_geo = dense_gemv(qkv_rows, hidden), o_geo = dense_gemv(hidden, attn_cols),
                     down_geo = dense_gemv(hidden, width), gu_geo = dense_gemv(2 * width, hidden),
                     pg_geo = dense_gemv(std::max(ple, 1), hidden), pp_geo = dense_gemv(hidden, std::max(ple, 8));
    auto linear = [&](const GemvLaunch& g, const bf* in, const bf* w, bf* out, int n, int k) {
        const auto kernel = g.entry == 0   ? g4_linear_one_row_bf16
                            : g.entry == 1 ? g4_linear_one_row_narrow_bf16
                                           : g4_linear_one_row_long_bf16;
        launch_kernel(true, bench.stream, g.blocks, 32 * g.warps_per_block, kernel, in, w, out, 1, n, k, g.wpc);
    };
    // pairs_geometry: an output's warps are its gate's and, packed, its up's.
    auto gelu_mul_grid = [&](const GemvLaunch& g, int outs, bool packed) {
        const int per_out = g.wpc * (packed ? 2 : 1), warps = std::max(g.warps_per_block, per_out);
        return std::make_pair((outs + warps / per_out - 1) / (warps / per_out), 32 * warps);
    };
    auto gelu_mul = [&](const GemvLaunch& g, const bf* in, const bf* w, const bf* up, bf* out, int outs, int k) {
        const auto kernel = g.entry == 0   ? g4_linear_gelu_mul_one_row_bf16
                            : g.entry == 1 ? g4_linear_gelu_mul_one_row_narrow_bf16
                                           : g4_linear_gelu_mul_one_row_long_bf16;
        const auto grid = gelu_mul_grid(g, outs, up == nullptr);
        launch_kernel(true, bench.stream, grid.first, grid.second, kernel, in, w, up, out, 1, outs, k, g.wpc);
    };

    bool wrong = false;  // a persistent candidate's outputs differ from g4's
    // The persistent MLP: every block resident, one barrier per layer (they reset themselves).
    const auto persistent_kernel = [&](bool prefetch) {
        if (down_geo.entry == 2)
            return prefetch ? persistent_mlp<G4_GEMV_LONG_BATCH, true> : persistent_mlp<G4_GEMV_LONG_BATCH, false>;
        return prefetch ? persistent_mlp<G4_GEMV_NARROW_BATCH, true> : persistent_mlp<G4_GEMV_NARROW_BATCH, false>;
    };
    const auto norm_persistent_kernel = down_geo.entry == 2 ? persistent_norm_mlp<G4_GEMV_LONG_BATCH>
                                                            : persistent_norm_mlp<G4_GEMV_NARROW_BATCH>;
    // A persistent kernel's grid: as many blocks as can all be resident at once.
    auto resident_grid = [&](auto kernel) { return bench.resident_blocks(kernel, PERSISTENT_THREADS); };
    const int persistent_grid = resident_grid(persistent_kernel(true)),
              norm_grid = resident_grid(norm_persistent_kernel);
    // The residual after the attention block, where a persistent candidate writes it: in its own
    // buffer, as every block reads the old one.
    bf* res_mid = bench.filled(hidden);
    GridBarrier* barriers = bench.alloc<GridBarrier>(layers);
    CHECK(cudaMemset(barriers, 0, layers * sizeof(GridBarrier)));
    // The MLP's two GEMVs, from the dual norm's `normed` to `down`.
    auto mlp = [&](Mlp kind, int l) {
        if (kind == MLP_G4) {
            gelu_mul(gu_geo, normed, wgu[l], nullptr, act, width, hidden);
            return linear(down_geo, act, wd[l], down, hidden, width);
        }
        launch_kernel(true, bench.stream, persistent_grid, PERSISTENT_THREADS,
                      persistent_kernel(kind == MLP_PERSISTENT), (const bf*)normed, (const bf*)wgu[l], act,
                      (const bf*)wd[l], down, width, hidden, gu_geo.wpc, down_geo.wpc, barriers + l);
    };
    // native/mod.rs's row launch for the model's width: rows up to 4,096 wide in one block of
    // 8 values a thread (a power of two), 31B's 5,376 in `_few_rows`.
    const int plain_threads = std::min(512, 1 << (int)ceil(log2((hidden + 7) / 8)));
    auto norm = [&](Norm kind, const bf* residual, const bf* branch, bf* out_res, bf* out_y) {
        auto dual = [&](auto kernel, int threads) {
            launch_kernel(true, bench.stream, 1, threads, kernel, residual, branch, (const bf*)norm_w,
                          (const bf*)norm_w, out_res, out_y, hidden, 1.0f, 1e-6f);
        };
        switch (kind) {
            case NORM_NONE:
                return;
            case NORM_EMPTY:
                return launch_kernel(true, bench.stream, 1, 352, empty_stage);
            case NORM_G4:
                if (hidden <= 4096) return dual(g4_dual_rms_norm_plus_res_bf16, plain_threads);
                return dual(g4_dual_rms_norm_plus_res_few_rows_bf16, hidden / 8);
        }
    };
    // The layer's end: after the MLP's down projection onto `residual`, (E4B) the per-layer input's
    // stage, then the dual norm that writes the next residual and the next layer's q/k/v input.
    auto layer_end = [&](Norm norm_kind, Ple ple_kind, int l, const bf* residual, bf* out_residual, bf* out_y) {
        if (!ple) return norm(norm_kind, residual, down, out_residual, out_y);
        if (ple_kind == PLE_ALL) {
            launch_kernel(true, bench.stream, 1, plain_threads, g4_rms_norm_plus_add_bf16, residual,
                          (const bf*)down, (const bf*)norm_w, after_mlp, hidden, 1e-6f);
            gelu_mul(pg_geo, after_mlp, wpg[l], ple_in, ple_act, ple, hidden);
            linear(pp_geo, ple_act, wpp[l], ple_out, hidden, ple);
        }
        if (ple_kind == PLE_EMPTY) launch_kernel(true, bench.stream, 1, 128, empty_stage);
        norm(norm_kind, after_mlp, ple_out, out_residual, out_y);
    };
    // The dual norm before the MLP and its two GEMVs as one persistent kernel.
    auto fused_norm_mlp = [&](int l) {
        launch_kernel(true, bench.stream, norm_grid, PERSISTENT_THREADS, norm_persistent_kernel, (const bf*)res,
                      (const bf*)o, (const bf*)norm_w, (const bf*)norm_w, res_mid,
                      (const bf*)wgu[l], act, (const bf*)wd[l], down, width, hidden, gu_geo.wpc, down_geo.wpc,
                      barriers + l);
    };
    {
        // The same sums in the same order: the same bits, or the candidate is wrong (its timings
        // below are then marked so, not dropped: a device call is scarce).
        mlp(MLP_G4, 0);
        bench.sync();
        const auto act_g4 = bench.download(act, width), down_g4 = bench.download(down, hidden);
        for (Mlp kind : {MLP_PERSISTENT, MLP_PERSISTENT_WAIT_FIRST}) {
            CHECK(cudaMemset(act, 0, width * 2));
            CHECK(cudaMemset(down, 0, hidden * 2));
            mlp(kind, 0);
            bench.sync();
            const bool same = bench.download(act, width) == act_g4 && bench.download(down, hidden) == down_g4;
            printf("persistent MLP (%s, %d blocks of %d threads, %d a multiprocessor): %s g4's bits\n",
                   kind == MLP_PERSISTENT ? "down weights before the wait" : "wait first", persistent_grid,
                   PERSISTENT_THREADS, persistent_grid / bench.sms, same ? "the same as" : "NOT the same as");
            if (!same) wrong = true;
        }
        // Folding the norm in sums the row in another order: a last bit of the residual or of y
        // may differ, and with it the outputs by about a bf16 rounding.
        norm(NORM_G4, res, o, res_mid, normed);
        mlp(MLP_G4, 0);
        bench.sync();
        const auto res_g4 = bench.download(res_mid, hidden), fused_g4 = bench.download(down, hidden);
        CHECK(cudaMemset(res_mid, 0, hidden * 2));
        CHECK(cudaMemset(down, 0, hidden * 2));
        fused_norm_mlp(0);
        bench.sync();
        const double residual_diff = max_relative_difference(bench.download(res_mid, hidden), res_g4),
                     down_diff = max_relative_difference(bench.download(down, hidden), fused_g4);
        printf("persistent MLP with the dual norm folded in (%d blocks): largest relative difference from g4's "
               "kernels: residual %.2e, down %.2e\n",
               norm_grid, residual_diff, down_diff);
        if (residual_diff > 2e-2 || down_diff > 2e-2) wrong = true;
    }
    {
        // A barrier's cost at several grid sizes, beside an empty kernel's in a chain of them.
        const int chained = 200;
        printf("\n| %d in a graph | µs each |\n|---|---:|\n", chained);
        printf("| empty kernels (1 block, programmatic dependent launch) | %.2f |\n",
               bench.graph_us(chained, [&](int) { launch_kernel(true, bench.stream, 1, 128, empty_stage); }));
        for (int per_sm : {1, 2, 4, 5}) {
            const double us = bench.graph_us(1, [&](int) {
                launch_kernel(true, bench.stream, per_sm * bench.sms, PERSISTENT_THREADS, barrier_rounds, barriers,
                              chained);
            });
            printf("| grid barriers, %d blocks of %d threads | %.2f |\n", per_sm * bench.sms, PERSISTENT_THREADS,
                   us / chained);
        }
        printf("\n");
    }

    // The layer from its o GEMV to the next layer's q/k/v GEMV as one persistent kernel
    // (persistent_layer_tail), g4's loads a lane where they fit its 48 registers (31B's q/k/v: 6
    // where g4 loads 8; the sums' order is the same).
    const auto tail_kernel = e4b ? persistent_layer_tail<G4_GEMV_NARROW_BATCH, G4_GEMV_LONG_BATCH, G4_GEMV_NARROW_BATCH>
                                 : persistent_layer_tail<G4_GEMV_NARROW_BATCH, G4_GEMV_NARROW_BATCH, G4_GEMV_PAIR_BATCH>;
    const int tail_grid = resident_grid(tail_kernel);
    bf* res_out = bench.filled(hidden);
    auto layer_tail = [&](int l, bf* qkv_out) {
        LayerTail a = {};
        a.attn = attn, a.w_o = wo[l], a.o = o, a.o_wpc = o_geo.wpc;
        a.residual = res, a.w_attn_norm = norm_w, a.w_mlp_norm = norm_w, a.residual_mid = res_mid;
        a.w_gate_up = wgu[l], a.act = act, a.gate_up_wpc = gu_geo.wpc;
        a.w_down = wd[l], a.down = down, a.down_wpc = down_geo.wpc;
        a.ple = ple, a.w_ple_norm = norm_w, a.after_mlp = after_mlp;
        a.ple_in = ple_in, a.w_ple_gate = wpg[l], a.ple_act = ple_act, a.ple_gate_wpc = pg_geo.wpc;
        a.w_ple_proj = wpp[l], a.ple_out = ple_out, a.ple_proj_wpc = pp_geo.wpc;
        a.w_end_norm = norm_w, a.w_next_norm = norm_w, a.residual_out = res_out;
        a.w_qkv = wq[(l + 1) % layers], a.qkv = qkv_out, a.qkv_wpc = qkv_geo.wpc;
        a.hidden = hidden, a.attn_cols = attn_cols, a.width = width, a.qkv_rows = qkv_rows;
        a.barrier = barriers + l;
        launch_kernel(true, bench.stream, tail_grid, PERSISTENT_THREADS, tail_kernel, a);
    };
    {
        // g4's kernels for the same stages, into the same buffers; the norms' sums are in another
        // order, so the outputs may differ by about a bf16 rounding.
        bf *normed_next = bench.filled(hidden), *qkv_g4 = bench.filled(qkv_rows);
        linear(o_geo, attn, wo[0], o, hidden, attn_cols);
        norm(NORM_G4, res, o, res_mid, normed);
        mlp(MLP_G4, 0);
        layer_end(NORM_G4, PLE_ALL, 0, res_mid, res_out, normed_next);
        linear(qkv_geo, normed_next, wq[1], qkv_g4, qkv_rows, hidden);
        bench.sync();
        const auto qkv_ref = bench.download(qkv_g4, qkv_rows), res_ref = bench.download(res_out, hidden),
                   down_ref = bench.download(down, hidden);
        CHECK(cudaMemset(res_out, 0, hidden * 2));
        CHECK(cudaMemset(down, 0, hidden * 2));
        CHECK(cudaMemset(qkv_g4, 0, qkv_rows * 2));
        layer_tail(0, qkv_g4);
        bench.sync();
        const double down_diff = max_relative_difference(bench.download(down, hidden), down_ref),
                     res_diff = max_relative_difference(bench.download(res_out, hidden), res_ref),
                     qkv_diff = max_relative_difference(bench.download(qkv_g4, qkv_rows), qkv_ref);
        printf("persistent layer tail (%d blocks): largest relative difference from g4's kernels: down %.2e, "
               "residual %.2e, next q/k/v %.2e\n\n",
               tail_grid, down_diff, res_diff, qkv_diff);
        if (down_diff > 2e-2 || res_diff > 2e-2 || qkv_diff > 2e-2) wrong = true;
    }
    // Layer l's attention stage, from its q/k/v projection's output to attention's.
    auto attend = [&](Attn attn_kind, int l, int splits) {
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
    };
    auto step = [&](Norm norm_kind, Attn attn_kind, int splits, Ple ple_kind, Mlp mlp_kind) {
        for (int l = 0; l < layers; ++l) {
            if (mlp_kind == LAYER_TAIL_PERSISTENT) {
                // The q/k/v came from the layer before's tail (the last layer's: the step before).
                attend(attn_kind, l, splits);
                layer_tail(l, qkv);
                continue;
            }
            linear(qkv_geo, normed, wq[l], qkv, qkv_rows, hidden);
            attend(attn_kind, l, splits);
            linear(o_geo, attn, wo[l], o, hidden, attn_cols);
            if (mlp_kind == MLP_NORM_PERSISTENT) {
                fused_norm_mlp(l);
            } else {
                norm(norm_kind, res, o, res, normed);
                mlp(mlp_kind, l);
            }
            layer_end(norm_kind, ple_kind, l, res, x, normed);
        }
    };
    struct Variant {
        const char* name;
        Norm norm;
        Attn attn;
        int splits;
        Ple ple;
        Mlp mlp = MLP_G4;
    };
    const int all = most_splits;
    std::vector<Variant> variants = {
        {"g4: its norms, lean chunk kernel, chunks cut from the visible slots", NORM_G4, ATTN_ALL, all, PLE_ALL},
        {"attention: the general chunk kernel (128 registers)", NORM_G4, ATTN_GENERAL, all, PLE_ALL},
        {"attention: half the chunks", NORM_G4, ATTN_ALL, all / 2, PLE_ALL},
        {"attention: a quarter of the chunks", NORM_G4, ATTN_ALL, all / 4, PLE_ALL},
        {"norms: an empty kernel each", NORM_EMPTY, ATTN_ALL, all, PLE_ALL},
        {"norms left out", NORM_NONE, ATTN_ALL, all, PLE_ALL},
        {"attention: chunks cut from the whole buffer", NORM_G4, ATTN_WHOLE_BUFFER, all, PLE_ALL},
        {"attention stage left out (q/k/v -> o)", NORM_G4, ATTN_NONE, all, PLE_ALL},
        {"attention stage: one empty kernel", NORM_G4, ATTN_EMPTY, all, PLE_ALL},
        {"qkv_norm_rope left out", NORM_G4, ATTN_NO_ROPE, all, PLE_ALL},
        {"attention merge left out", NORM_G4, ATTN_NO_MERGE, all, PLE_ALL},
        {"MLP: one persistent kernel, a grid barrier between its GEMVs", NORM_G4, ATTN_ALL, all, PLE_ALL,
         MLP_PERSISTENT},
        {"MLP: the same, each block waiting before its first down weights", NORM_G4, ATTN_ALL, all, PLE_ALL,
         MLP_PERSISTENT_WAIT_FIRST},
        {"MLP: the persistent kernel with the dual norm before it folded in", NORM_G4, ATTN_ALL, all, PLE_ALL,
         MLP_NORM_PERSISTENT},
        {"o GEMV to the next q/k/v GEMV: one persistent kernel", NORM_G4, ATTN_ALL, all, PLE_ALL,
         LAYER_TAIL_PERSISTENT},
    };
    if (ple) {
        variants.push_back({"per-layer input stage left out", NORM_G4, ATTN_ALL, all, PLE_NONE});
        variants.push_back({"per-layer input stage: one empty kernel", NORM_G4, ATTN_ALL, all, PLE_EMPTY});
    }
    const int count = (int)variants.size(), rounds = 5;
    const double bytes = (double)(qkv_w + o_w + gate_up_w + down_w + 2 * ple_w) * 2;
    // Rounds over every variant in turn, so that a drift in clocks reaches them all alike; the
    // median of each.
    std::vector<std::vector<double>> us(count);
    for (int round = 0; round < rounds; ++round)
        for (int i = 0; i < count; ++i)
            us[i].push_back(bench.graph_us(1, [&](int) {
                const Variant& v = variants[i];
                step(v.norm, v.attn, v.splits, v.ple, v.mlp);
            }) / layers);
    printf(
        "| chain (%d layers of %s, bf16) | µs a layer (median of %d) | min | max | Δ median | weights GB/s |\n"
        "|---|---:|---:|---:|---:|---:|\n",
        layers, model.name, rounds);
    double base = 0;
    for (int i = 0; i < count; ++i) {
        std::vector<double> sorted = us[i];
        std::sort(sorted.begin(), sorted.end());
        const double median = sorted[rounds / 2];
        if (i == 0) base = median;
        printf("| %s | %.2f | %.2f | %.2f | %+.2f | %.0f |\n", variants[i].name, median, sorted.front(), sorted.back(),
               median - base, bytes / (median * 1e3));
    }
    if (wrong) printf("\nA PERSISTENT CANDIDATE'S OUTPUTS DIFFER FROM G4'S (above): its rows time a wrong kernel.\n");
    return wrong ? 1 : 0;
}
