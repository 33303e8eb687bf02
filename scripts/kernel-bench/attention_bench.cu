// Decode attention (attention.cu) at E4B's graph-step shapes: 8 query heads over 2 KV heads, one
// query, a reserved cache buffer of which a prefix is visible (the mask), bf16. g4's split-K
// kernel and merge beside a variant whose lanes load 16 bytes of each K/V row at once (g4's lanes
// load one element at a time, 8 or 16 loads per row), and beside more, smaller chunks. CUDA
// graphs of 48 launches (a decode step has 42), each on its own K/V buffers, so that the caches
// come from HBM as they do after a step's weights have gone through L2.
#include "bench_common.cuh"
#include "../../src/kernels/cuda/attention.cu"
#include "../../src/kernels/cuda/gemv.cuh"

// attention_chunk with each lane holding 8 contiguous elements per 256 of the head (d 256 or 512):
// one 16-byte load per K row and per V row for every 256 elements.
template <int VECS>
__global__ void __launch_bounds__(128) attention_chunk_vec(const bf* q, const bf* k, const bf* v, const float* mask,
                                                           bf* out, float* partial_acc, float* partial_stats,
                                                           int heads, int kv_heads, int keys, size_t kv_head_stride,
                                                           float scale, int splits) {
    constexpr int d = VECS * 256;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int row = blockIdx.x / splits, split = blockIdx.x % splits;
    const int h = row % heads, kvh = h / (heads / kv_heads);
    const bf* k_head = k + (size_t)kvh * kv_head_stride;
    const bf* v_head = v + (size_t)kvh * kv_head_stride;
    const int chunk = (keys + splits - 1) / splits;
    const int first = split * chunk, end = min(keys, first + chunk);
    float qf[VECS][8], acc[VECS][8];
#pragma unroll
    for (int c = 0; c < VECS; ++c) {
        const uint4 qv = reinterpret_cast<const uint4*>(q + (size_t)row * d)[c * 32 + lane];
        DenseWeights<bf>::decode(qv, qf[c]);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[c][e] = 0.0f;
    }
    float running_max = -INFINITY, running_sum = 0.0f;
    const int stride = G4_ATTN_WARPS;
    for (int base = first + warp; base < end; base += stride * 32) {
        const int mine = base + lane * stride;
        const float my_mask = mine >= end ? -INFINITY : mask[mine];
        unsigned long long visible = G4_BALLOT(my_mask != -INFINITY);
        if (!visible) continue;
        auto load = [&](int i, uint4 (&kv)[VECS], uint4 (&vv)[VECS]) {
            const uint4* k_row = reinterpret_cast<const uint4*>(k_head + (size_t)(base + i * stride) * d);
            const uint4* v_row = reinterpret_cast<const uint4*>(v_head + (size_t)(base + i * stride) * d);
#pragma unroll
            for (int c = 0; c < VECS; ++c) kv[c] = k_row[c * 32 + lane], vv[c] = v_row[c * 32 + lane];
        };
        int i = __ffsll((long long)visible) - 1;
        uint4 k_val[VECS], v_val[VECS], k_next[VECS], v_next[VECS];
        load(i, k_val, v_val);
        while (true) {
            visible &= visible - 1;
            const int next = visible ? __ffsll((long long)visible) - 1 : -1;
            if (next >= 0) load(next, k_next, v_next);
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < VECS; ++c) {
                float kf[8];
                DenseWeights<bf>::decode(k_val[c], kf);
#pragma unroll
                for (int e = 0; e < 8; ++e) dot += qf[c][e] * kf[e];
            }
            for (int bits = 16; bits > 0; bits >>= 1) dot += G4_SHFL_XOR(dot, bits);
            const float score = dot * scale + G4_SHFL(my_mask, i);
            const float new_max = fmaxf(running_max, score);
            const float correction = expf(running_max - new_max), p = expf(score - new_max);
            running_sum = running_sum * correction + p;
#pragma unroll
            for (int c = 0; c < VECS; ++c) {
                float vf[8];
                DenseWeights<bf>::decode(v_val[c], vf);
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[c][e] = acc[c][e] * correction + p * vf[e];
            }
            running_max = new_max;
            if (next < 0) break;
#pragma unroll
            for (int c = 0; c < VECS; ++c) k_val[c] = k_next[c], v_val[c] = v_next[c];
            i = next;
        }
    }
    __shared__ float warp_max[G4_ATTN_WARPS], warp_sum[G4_ATTN_WARPS];
    __shared__ float warp_acc[G4_ATTN_WARPS][d];
    if (lane == 0) warp_max[warp] = running_max, warp_sum[warp] = running_sum;
#pragma unroll
    for (int c = 0; c < VECS; ++c)
#pragma unroll
        for (int e = 0; e < 8; ++e) warp_acc[warp][(c * 32 + lane) * 8 + e] = acc[c][e];
    __syncthreads();
    float chunk_max = -INFINITY, chunk_sum = 0.0f;
    for (int w = 0; w < G4_ATTN_WARPS; ++w) chunk_max = fmaxf(chunk_max, warp_max[w]);
    for (int w = 0; w < G4_ATTN_WARPS; ++w)
        if (warp_max[w] != -INFINITY) chunk_sum += warp_sum[w] * expf(warp_max[w] - chunk_max);
    const size_t slot = (size_t)row * splits + split;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < G4_ATTN_WARPS; ++w)
            if (warp_max[w] != -INFINITY) o += warp_acc[w][j] * expf(warp_max[w] - chunk_max);
        if (splits == 1) out[(size_t)row * d + j] = g4_from_f32<bf>(o / chunk_sum);
        else partial_acc[slot * d + j] = o;
    }
    if (splits > 1 && threadIdx.x == 0) partial_stats[slot * 2] = chunk_max, partial_stats[slot * 2 + 1] = chunk_sum;
}

int main() {
    Bench b;
    const int heads = 8, kv_heads = 2, sets = 48, rows = heads;
    const float scale = 1.0f;
    printf("| head dim | buffer keys | visible | splits | g4 (µs) | 16-byte loads | 16-byte, chunks of 8 | 16-byte, chunks of 4 | max rel. diff |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int d : {256, 512}) {
        for (int keys : {256, 512}) {
            for (int visible : {32, 128, 256}) {
                if (visible > keys) continue;
                const size_t kv_count = (size_t)kv_heads * keys * d;
                std::vector<bf*> ks, vs;
                for (int s = 0; s < sets; ++s) ks.push_back(b.filled(kv_count)), vs.push_back(b.filled(kv_count));
                bf* q = b.filled((size_t)rows * d);
                std::vector<float> mask_host(keys);
                for (int t = 0; t < keys; ++t) mask_host[t] = t < visible ? 0.0f : -INFINITY;
                float* mask = b.alloc<float>(keys);
                CHECK(cudaMemcpy(mask, mask_host.data(), keys * 4, cudaMemcpyHostToDevice));
                bf* out = b.alloc<bf>((size_t)rows * d);
                bf* out_vec = b.alloc<bf>((size_t)rows * d);
                const int max_splits = 128;
                float* acc = b.alloc<float>((size_t)rows * max_splits * d);
                float* stats = b.alloc<float>((size_t)rows * max_splits * 2);
                auto splits_for = [&](int keys_per_chunk) {
                    return std::max(1, std::min((keys + keys_per_chunk - 1) / keys_per_chunk, (512 + rows - 1) / rows));
                };
                const size_t stride = (size_t)keys * d;
                auto merge = [&](int splits, bf* o) {
                    if (splits > 1)
                        g4_attention_merge_bf16<<<rows * ((d + 127) / 128), 128, 0, b.stream>>>(acc, stats, o, d, splits);
                };
                auto g4 = [&](int i) {
                    const int splits = splits_for(16);
                    g4_attention_bf16<<<rows * splits, 128, 0, b.stream>>>(q, ks[i % sets], vs[i % sets], mask, out, acc, stats,
                                                                          heads, kv_heads, 1, keys, d, stride, scale, splits);
                    merge(splits, out);
                };
                auto vec = [&](int keys_per_chunk) {
                    return [&, keys_per_chunk](int i) {
                        const int splits = splits_for(keys_per_chunk);
                        if (d == 256)
                            attention_chunk_vec<1><<<rows * splits, 128, 0, b.stream>>>(
                                q, ks[i % sets], vs[i % sets], mask, out_vec, acc, stats, heads, kv_heads, keys, stride, scale, splits);
                        else
                            attention_chunk_vec<2><<<rows * splits, 128, 0, b.stream>>>(
                                q, ks[i % sets], vs[i % sets], mask, out_vec, acc, stats, heads, kv_heads, keys, stride, scale, splits);
                        merge(splits, out_vec);
                    };
                };
                g4(0);
                vec(16)(0);
                b.sync();
                const double diff = max_relative_difference(b.download(out, (size_t)rows * d), b.download(out_vec, (size_t)rows * d));
                const double t_g4 = b.graph_us(sets, g4), t_vec = b.graph_us(sets, vec(16)), t_vec8 = b.graph_us(sets, vec(8)),
                             t_vec4 = b.graph_us(sets, vec(4));
                printf("| %d | %d | %d | %d | %.2f | %.2f | %.2f | %.2f | %.1e |\n", d, keys, visible, splits_for(16), t_g4, t_vec,
                       t_vec8, t_vec4, diff);
                fflush(stdout);
                for (int s = 0; s < sets; ++s) {
                    CHECK(cudaFree(ks[s]));
                    CHECK(cudaFree(vs[s]));
                }
                for (void* p : {(void*)q, (void*)mask, (void*)out, (void*)out_vec, (void*)acc, (void*)stats}) CHECK(cudaFree(p));
            }
        }
    }
    return 0;
}
