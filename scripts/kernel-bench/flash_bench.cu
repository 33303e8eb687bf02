// Prefill attention's flash kernel (attention.cu) at E4B's prefill shapes: 8 query heads over 2
// KV heads, a 512-query piece at the end of 512, 4,096 or 16,384 keys, head_dim 256 (sliding
// window 512) and 512 (causal), bf16. Times the mask's tile map, the flash kernel at several
// split counts (g4's choice marked) and the merge (the decode kernel's, which flash shares), each
// as µs per launch in a graph, so that the kernel can be tuned without a whole model (stop 37
// measured it only inside pp512 and pp16384 runs). Every split count's output is checked against
// an f64 reference on the host at a few query rows of the first and last head (normalised mean
// squared error); past the attention probe's bf16 threshold the benchmark fails.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/attention.cu"

// Values in [-1, 1) from a fixed sequence, as bf16 (host image and device copy).
static std::vector<uint16_t> pattern(size_t count, uint32_t seed, float spread) {
    std::vector<uint16_t> bits(count);
    uint32_t state = seed;
    for (size_t i = 0; i < count; ++i) {
        state = state * 1664525u + 1013904223u;
        const float value = ((state >> 8) / 16777216.0f * 2.0f - 1.0f) * spread;
        uint32_t u;
        memcpy(&u, &value, 4);
        bits[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return bits;
}

static bool visible(int position, int key, int window) { return key <= position && (window == 0 || position - key < window); }

int main() {
    Bench b;
    const int heads = 8, kv_heads = 2, seq = 512, group = heads / kv_heads, target_blocks = 512;
    const float scale = 1.0f;
    const double nmse_limit = 3e-4;  // attention's bf16 threshold in probe-ops
    bool failed = false;
    printf("| head dim | keys | window | map (µs) | splits | flash (µs) | merge (µs) | total (µs) | NMSE vs f64 |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    // (head dim, keys, sliding window; 0: causal only)
    const int cases[][3] = {{256, 512, 512}, {512, 512, 0}, {256, 4096, 512}, {512, 4096, 0}, {256, 16384, 512}, {512, 16384, 0}};
    for (const auto& c : cases) {
        const int d = c[0], keys = c[1], window = c[2];
        const int dv = d >= G4_FLASH_WIDE_D ? G4_FLASH_WIDE_DV : G4_FLASH_DV;
        const int q_tiles = (seq + G4_FLASH_QUERIES - 1) / G4_FLASH_QUERIES, key_tiles = (keys + G4_FLASH_KEYS - 1) / G4_FLASH_KEYS;
        const int rows = seq * heads, base_blocks = heads * q_tiles * (d / dv);
        const int g4_splits = std::max(1, std::min(key_tiles, (target_blocks + base_blocks - 1) / base_blocks));
        const float spread = powf((float)d, -0.25f) * 1.5f;
        const std::vector<uint16_t> q_host = pattern((size_t)heads * seq * d, 1, spread);
        const std::vector<uint16_t> k_host = pattern((size_t)kv_heads * keys * d, 2, spread);
        const std::vector<uint16_t> v_host = pattern((size_t)kv_heads * keys * d, 3, 1.0f);
        auto upload = [&](const std::vector<uint16_t>& host) {
            bf* p = b.alloc<bf>(host.size());
            CHECK(cudaMemcpy(p, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
            return p;
        };
        bf *q = upload(q_host), *k = upload(k_host), *v = upload(v_host);
        std::vector<float> mask_host((size_t)seq * keys);
        for (int i = 0; i < seq; ++i)
            for (int j = 0; j < keys; ++j) mask_host[(size_t)i * keys + j] = visible(keys - seq + i, j, window) ? 0.0f : -INFINITY;
        float* mask = b.alloc<float>(mask_host.size());
        CHECK(cudaMemcpy(mask, mask_host.data(), mask_host.size() * 4, cudaMemcpyHostToDevice));
        uint8_t* map = b.alloc<uint8_t>((size_t)q_tiles * key_tiles);
        bf* out = b.alloc<bf>((size_t)rows * d);
        const int max_splits = 8;
        float* acc = b.alloc<float>((size_t)max_splits * rows * d);
        float* stats = b.alloc<float>((size_t)max_splits * rows * 2);

        const int shared = (d == 256 ? FlashTiles<256>::shared_bytes : FlashTiles<512>::shared_bytes) + (key_tiles + 31) / 32 * 4;
        auto kernel = d == 256 ? g4_flash_attention_d256_bf16 : g4_flash_attention_d512_bf16;
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
        auto run_map = [&](int) {
            g4_flash_mask_map<<<q_tiles * key_tiles, G4_FLASH_MAP_THREADS, 0, b.stream>>>(mask, map, seq, keys, key_tiles);
        };
        auto run_flash = [&](int splits) {
            return [&, splits](int) {
                kernel<<<base_blocks * splits, G4_FLASH_WARPS * 32, shared, b.stream>>>(
                    q, k, v, mask, map, out, splits > 1 ? acc : nullptr, splits > 1 ? stats : nullptr, heads, kv_heads, seq,
                    keys, (size_t)heads * seq * d, (size_t)seq * d, (size_t)d, (size_t)kv_heads * keys * d, (size_t)keys * d,
                    scale, splits);
            };
        };
        auto run_merge = [&](int splits) {
            return [&, splits](int) {
                // g4's merge geometry (merge_splits in attention.rs): 128-thread blocks along each row.
                g4_attention_merge_bf16<<<rows * ((d + 127) / 128), G4_ATTN_WARPS * 32, 0, b.stream>>>(acc, stats, out, d,
                                                                                                    splits, nullptr, 0);
            };
        };

        // The f64 reference at a few query rows of the first and last head; out is [S, heads, D].
        auto to_f64 = [](uint16_t bits) { return (double)bf16_bits_to_float(bits); };
        const int check_rows[] = {0, seq / 2, seq - 1};
        auto nmse = [&](const std::vector<uint16_t>& got) {
            double error = 0, energy = 0;
            for (int h : {0, heads - 1}) {
                const int kv_h = h / group;
                for (int s : check_rows) {
                    std::vector<double> scores(keys);
                    double top = -INFINITY;
                    for (int t = 0; t < keys; ++t) {
                        double dot = 0;
                        for (int e = 0; e < d; ++e)
                            dot += to_f64(q_host[((size_t)h * seq + s) * d + e]) * to_f64(k_host[((size_t)kv_h * keys + t) * d + e]);
                        scores[t] = dot * scale + mask_host[(size_t)s * keys + t];
                        top = std::max(top, scores[t]);
                    }
                    double total = 0;
                    for (double& x : scores) total += (x = exp(x - top));
                    for (int e = 0; e < d; ++e) {
                        double expected = 0;
                        for (int t = 0; t < keys; ++t) expected += scores[t] / total * to_f64(v_host[((size_t)kv_h * keys + t) * d + e]);
                        const double value = bf16_bits_to_float(got[((size_t)s * heads + h) * d + e]);
                        error += (value - expected) * (value - expected);
                        energy += expected * expected;
                    }
                }
            }
            return error / energy;
        };

        const int launches = 16;
        const double map_us = b.graph_us(launches, run_map);
        run_map(0);
        for (int splits : {1, 2, 4, 8}) {
            if (splits > key_tiles) continue;
            run_flash(splits)(0);
            if (splits > 1) run_merge(splits)(0);
            b.sync();
            const double diff = nmse(b.download(out, (size_t)rows * d));
            failed |= !(diff <= nmse_limit);
            const double flash_us = b.graph_us(launches, run_flash(splits));
            const double merge_us = splits > 1 ? b.graph_us(launches, run_merge(splits)) : 0.0;
            printf("| %d | %d | %d | %.2f | %d%s | %.2f | %.2f | %.2f | %.1e |\n", d, keys, window, map_us, splits,
                   splits == g4_splits ? " (g4)" : "", flash_us, merge_us, map_us + flash_us + merge_us, diff);
            fflush(stdout);
        }
        for (void* p : {(void*)q, (void*)k, (void*)v, (void*)mask, (void*)map, (void*)out, (void*)acc, (void*)stats}) CHECK(cudaFree(p));
    }
    if (failed) fprintf(stderr, "flash_bench: an output is further than NMSE %.0e from the f64 reference\n", nmse_limit);
    return failed ? 1 : 0;
}
