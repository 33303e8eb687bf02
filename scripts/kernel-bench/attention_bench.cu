// Decode attention (attention.cu) at E4B's graph-step shapes: 8 query heads over 2 KV heads, one
// query, a reserved cache buffer of which a prefix is visible (the mask), bf16. g4's split-K
// kernel and merge with the chunks g4 picks (16 keys a chunk) beside more, smaller chunks. CUDA
// graphs of 48 launches (a decode step has 42), each on its own K/V buffers (8 for the long
// contexts, each larger than L2), so that the caches come from HBM as they do after a step's
// weights have gone through L2. (The first version of
// this benchmark also timed 16-byte K/V loads per lane against g4's element-wise ones: 10.7 →
// 5.7 µs at the first shape; attention.cu has loaded that way since, docs/PERFORMANCE.md.)
#include "bench_common.cuh"
#include "../../src/kernels/cuda/attention.cu"

int main() {
    Bench b;
    const int heads = 8, kv_heads = 2, rows = heads;
    const float scale = 1.0f;
    printf("| head dim | buffer keys | visible | splits | g4 (µs) | its chunk kernel alone | chunks of 8 keys | chunks of 4 keys | 1,024 blocks | 2,048 blocks | 4,096 blocks | K/V read at 4.0 TB/s (µs) | max rel. diff |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    // (head dim, buffer keys, visible keys): a sliding layer's ring (256) and full layers (512)
    // early in a context, then full layers after 4,096 and 16,384 tokens (bench --depth; a graph
    // step there attends over 18,432 slots).
    const int cases[][3] = {{256, 256, 32}, {256, 256, 128}, {256, 256, 256}, {256, 512, 32}, {256, 512, 128},
                            {256, 512, 256}, {512, 256, 32}, {512, 256, 128}, {512, 256, 256}, {512, 512, 32},
                            {512, 512, 128}, {512, 512, 256}, {512, 4224, 4096}, {512, 16512, 16384}, {512, 18432, 16384}};
    for (const auto& c : cases) {
        const int d = c[0], keys = c[1], visible = c[2];
        // Long contexts: fewer buffer sets (each holds the whole cache), still more than L2.
        const int sets = keys > 1024 ? 8 : 48;
        {
            {
                const size_t kv_count = (size_t)kv_heads * keys * d;
                std::vector<bf*> ks, vs;
                for (int s = 0; s < sets; ++s) ks.push_back(b.filled(kv_count)), vs.push_back(b.filled(kv_count));
                bf* q = b.filled((size_t)rows * d);
                std::vector<float> mask_host(keys);
                for (int t = 0; t < keys; ++t) mask_host[t] = t < visible ? 0.0f : -INFINITY;
                float* mask = b.alloc<float>(keys);
                CHECK(cudaMemcpy(mask, mask_host.data(), keys * 4, cudaMemcpyHostToDevice));
                bf* out = b.alloc<bf>((size_t)rows * d);
                bf* out_small = b.alloc<bf>((size_t)rows * d);
                const int max_splits = 512;
                float* acc = b.alloc<float>((size_t)rows * max_splits * d);
                float* stats = b.alloc<float>((size_t)rows * max_splits * 2);
                // g4 aims at 512 blocks (TARGET_BLOCKS in attention.rs); more splits shorten each
                // warp's walk over a long context.
                auto splits_for = [&](int keys_per_chunk, int blocks = 512) {
                    return std::max(1, std::min((keys + keys_per_chunk - 1) / keys_per_chunk, (blocks + rows - 1) / rows));
                };
                const size_t stride = (size_t)keys * d;
                auto chunks_of = [&](int keys_per_chunk, bf* o, int blocks = 512) {
                    return [&, keys_per_chunk, o, blocks](int i) {
                        const int splits = splits_for(keys_per_chunk, blocks);
                        g4_attention_bf16<<<rows * splits, 128, 0, b.stream>>>(q, ks[i % sets], vs[i % sets], mask, nullptr, o, acc,
                                                                              stats, heads, kv_heads, 1, keys, d, stride,
                                                                              scale, splits);
                        if (splits > 1)
                            g4_attention_merge_bf16<<<rows * ((d + 127) / 128), 128, 0, b.stream>>>(acc, stats, o, d, splits, nullptr, keys);
                    };
                };
                chunks_of(16, out)(0);
                chunks_of(16, out_small, 4096)(0);
                b.sync();
                const double diff = max_relative_difference(b.download(out, (size_t)rows * d), b.download(out_small, (size_t)rows * d));
                const double t16 = b.graph_us(sets, chunks_of(16, out)), t8 = b.graph_us(sets, chunks_of(8, out_small)),
                             t4 = b.graph_us(sets, chunks_of(4, out_small)),
                             t1024 = b.graph_us(sets, chunks_of(16, out_small, 1024)),
                             t2048 = b.graph_us(sets, chunks_of(16, out_small, 2048)),
                             t4096 = b.graph_us(sets, chunks_of(16, out_small, 4096));
                // The chunk kernel alone (g4's splits, no merge): what the merge adds.
                const double t_chunks = b.graph_us(sets, [&](int i) {
                    g4_attention_bf16<<<rows * splits_for(16), 128, 0, b.stream>>>(q, ks[i % sets], vs[i % sets], mask, nullptr, out_small,
                                                                                 acc, stats, heads, kv_heads, 1, keys, d, stride,
                                                                                 scale, splits_for(16));
                });
                const double floor_us = 2.0 * kv_heads * visible * d * sizeof(bf) / 4.0e6;
                printf("| %d | %d | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1e |\n", d, keys, visible,
                       splits_for(16), t16, t_chunks, t8, t4, t1024, t2048, t4096, floor_us, diff);
                fflush(stdout);
                for (int s = 0; s < sets; ++s) {
                    CHECK(cudaFree(ks[s]));
                    CHECK(cudaFree(vs[s]));
                }
                for (void* p : {(void*)q, (void*)mask, (void*)out, (void*)out_small, (void*)acc, (void*)stats}) CHECK(cudaFree(p));
            }
        }
    }
    return 0;
}
