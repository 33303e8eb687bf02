// 31B's prefill glue at 512 tokens, beside the time a copy of the same bytes takes: prefill
// attention's masked softmax between cuBLAS's GEMMs (32 heads × 512 queries × 512 keys), and
// candidates that show where its time goes (softmax_candidate below; 8 warps a block); qkv_norm_rope on a sliding layer (32 q heads, 16 kv heads, head_dim
// 256) and a full one (32 q heads, 4 kv heads whose v is k, head_dim 512); the layer tail's
// dual_rms_norm_plus_res at [512, 5376], `_wide` beside `_wide_lean`. Each launch in a CUDA
// graph of 16, on one of 8 input sets (each layer's activations are new to L2).
#include "bench_common.cuh"
#include "../../src/kernels/cuda/attention.cu"
#include "../../src/kernels/cuda/norms.cu"

// attention_softmax's one-tile row (keys ≤ 16 × 32) with what the candidates change (a bit
// each): the mask read (MASKED), __expf (FAST_EXP), the quotient skipped for a zero numerator
// (SKIP_ZERO: a masked key's exp is 0, and 0 / sum takes the division's slow path), the
// quotient as a product with the sum's reciprocal (RECIPROCAL, not the composed arm's rounding).
enum { MASKED = 1, FAST_EXP = 2, SKIP_ZERO = 4, RECIPROCAL = 8 };
template <int FLAGS>
__global__ void softmax_candidate(const bf* scores, const float* mask, bf* probs, int rows, int seq, int keys,
                                  float scale) {
    constexpr int VEC = 8;
    const int lanes = 32, lane = threadIdx.x % lanes;
    const int row = blockIdx.x * (blockDim.x / lanes) + threadIdx.x / lanes;
    if (row >= rows) return;
    const bf* in = scores + (size_t)row * keys;
    const float* row_mask = FLAGS & MASKED ? mask + (size_t)(row % seq) * keys : nullptr;
    float logits[G4_SOFTMAX_VALUES];
    softmax_tile<bf, VEC>(in, row_mask, keys, 0, lane, lanes, scale, logits);
    float max = -INFINITY;
#pragma unroll
    for (int i = 0; i < G4_SOFTMAX_VALUES; ++i) max = fmaxf(max, logits[i]);
    for (int m = 16; m > 0; m >>= 1) max = fmaxf(max, G4_SHFL_XOR(max, m));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < G4_SOFTMAX_VALUES; ++i) {
        logits[i] = FLAGS & FAST_EXP ? __expf(logits[i] - max) : expf(logits[i] - max);
        sum += logits[i];
    }
    for (int m = 16; m > 0; m >>= 1) sum += G4_SHFL_XOR(sum, m);
    const float inverse = 1.0f / sum;
    bf* out = probs + (size_t)row * keys;
#pragma unroll
    for (int c = 0; c < G4_SOFTMAX_VALUES / VEC; ++c) {
        const int t = (c * lanes + lane) * VEC;
        if (t >= keys) continue;
        Pack<bf, VEC> p;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const float x = logits[c * VEC + e];
            float q;
            if (FLAGS & RECIPROCAL) {
                q = x * inverse;
            } else if (FLAGS & SKIP_ZERO) {
                q = 0.0f;
                if (x != 0.0f) q = x / sum;
            } else {
                q = x / sum;
            }
            p.v[e] = g4_from_f32<bf>(q);
        }
        *reinterpret_cast<Pack<bf, VEC>*>(out + t) = p;
    }
}

int main() {
    Bench b;
    const int sets = 8, launches = 16;
    auto copy_us = [&](std::vector<bf*>& in, bf* out, size_t bytes) {
        return b.graph_us(launches, [&](int i) {
            CHECK(cudaMemcpyAsync(out, in[i % sets], bytes, cudaMemcpyDeviceToDevice, b.stream));
        });
    };
    printf("| kernel | shape | µs | copy of its bytes (µs) | max rel. diff to g4 |\n|---|---|---:|---:|---:|\n");

    {  // softmax
        const int heads = 32, seq = 512, keys = 512, rows = heads * seq;
        const size_t count = (size_t)rows * keys;
        std::vector<bf*> scores;
        for (int s = 0; s < sets; ++s) scores.push_back(b.filled(count));
        std::vector<float> mask_host((size_t)seq * keys);
        for (int s = 0; s < seq; ++s)
            for (int t = 0; t < keys; ++t) mask_host[(size_t)s * keys + t] = t <= s ? 0.0f : -INFINITY;
        float* mask = b.alloc<float>(mask_host.size());
        CHECK(cudaMemcpy(mask, mask_host.data(), mask_host.size() * 4, cudaMemcpyHostToDevice));
        bf* probs = b.alloc<bf>(count);
        bf* other = b.alloc<bf>(count);
        const float scale = 0.0625f;
        const double copy = copy_us(scores, probs, count * 2);
        auto g4 = [&](int warps, bool one_tile) {
            return [&, warps, one_tile](int i) {
                const int blocks = (rows + warps - 1) / warps;
                if (one_tile)
                    g4_attention_softmax_vec_one_tile_bf16<<<blocks, warps * 32, 0, b.stream>>>(
                        scores[i % sets], mask, probs, rows, seq, keys, scale);
                else
                    g4_attention_softmax_vec_bf16<<<blocks, warps * 32, 0, b.stream>>>(scores[i % sets], mask, probs,
                                                                                       rows, seq, keys, scale);
            };
        };
        g4(4, true)(0);
        b.sync();
        const std::vector<uint16_t> reference = b.download(probs, count);
        printf("| g4_attention_softmax_vec_one_tile | [%d, %d] | %.2f | %.2f | 0 |\n", rows, keys,
               b.graph_us(launches, g4(4, true)), copy);
        g4(4, false)(0);
        b.sync();
        printf("| g4_attention_softmax_vec (any length) | [%d, %d] | %.2f | %.2f | %.1e |\n", rows, keys,
               b.graph_us(launches, g4(4, false)), copy, max_relative_difference(reference, b.download(probs, count)));
        auto candidate = [&](const char* name, auto kernel) {
            auto run = [&](int i) {
                kernel<<<rows / 4, 128, 0, b.stream>>>(scores[i % sets], mask, other, rows, seq, keys, scale);
            };
            run(0);
            b.sync();
            const double diff = max_relative_difference(reference, b.download(other, count));
            printf("| %s | [%d, %d] | %.2f | %.2f | %.1e |\n", name, rows, keys, b.graph_us(launches, run), copy, diff);
        };
        candidate("candidate: one tile, every quotient", softmax_candidate<MASKED>);
        candidate("candidate: no mask", softmax_candidate<0>);
        candidate("candidate: __expf", softmax_candidate<MASKED | FAST_EXP>);
        candidate("candidate: no quotient for a zero", softmax_candidate<MASKED | SKIP_ZERO>);
        candidate("candidate: reciprocal", softmax_candidate<MASKED | RECIPROCAL>);
        candidate("candidate: no quotient for a zero, __expf", softmax_candidate<MASKED | SKIP_ZERO | FAST_EXP>);
        {  // logits spread as a random-weight model's are (±100 after the scale): many exps subnormal
            std::vector<uint16_t> host(count);
            for (size_t i = 0; i < count; ++i) {
                const float value = 3200.0f * (float)((i * 2654435761u) % 1000) / 1000.0f - 1600.0f;
                uint32_t bits;
                memcpy(&bits, &value, 4);
                host[i] = (uint16_t)(bits >> 16);
            }
            for (int s = 0; s < sets; ++s)
                CHECK(cudaMemcpy(scores[s], host.data(), count * 2, cudaMemcpyHostToDevice));
            printf("| g4_attention_softmax_vec_one_tile, logits ±100 | [%d, %d] | %.2f | %.2f | |\n", rows, keys,
                   b.graph_us(launches, g4(4, true)), copy);
            auto every_quotient = [&](int i) {
                softmax_candidate<MASKED><<<rows / 4, 128, 0, b.stream>>>(scores[i % sets], mask, other, rows, seq, keys, scale);
            };
            printf("| candidate: one tile, every quotient, logits ±100 | [%d, %d] | %.2f | %.2f | |\n", rows, keys,
                   b.graph_us(launches, every_quotient), copy);
        }
        fflush(stdout);
    }

    // qkv_norm_rope: (q heads, kv heads, head_dim, kv_code)
    const int qkv_cases[][4] = {{32, 16, 256, 1}, {32, 4, 512, 2}};
    for (const auto& c : qkv_cases) {
        const int seq = 512, hq = c[0], hkv = c[1], d = c[2], kv_code = c[3];
        const int width = (hq + hkv * (kv_code == 1 ? 2 : 1)) * d, heads = hq + 2 * hkv;
        std::vector<bf*> qkv;
        for (int s = 0; s < sets; ++s) qkv.push_back(b.filled((size_t)seq * width));
        bf* q_norm = b.filled(d);
        bf* k_norm = b.filled(d);
        std::vector<float> table((size_t)seq * d / 2);
        for (size_t i = 0; i < table.size(); ++i) table[i] = (float)cos(0.001 * i);
        float* cos_t = b.alloc<float>(table.size());
        float* sin_t = b.alloc<float>(table.size());
        CHECK(cudaMemcpy(cos_t, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(sin_t, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
        bf* q = b.alloc<bf>((size_t)hq * seq * d);
        bf* k = b.alloc<bf>((size_t)hkv * seq * d);
        bf* v = b.alloc<bf>((size_t)hkv * seq * d);
        bf* copy_out = b.alloc<bf>((size_t)seq * heads * d);
        const int rows = seq * heads, warps = G4_QKV_BLOCK_THREADS / 32;
        auto run = [&](int i) {
            if (d <= 256)
                g4_qkv_norm_rope_bf16<<<(rows + warps - 1) / warps, G4_QKV_BLOCK_THREADS, 0, b.stream>>>(
                    qkv[i % sets], q_norm, k_norm, cos_t, sin_t, q, k, v, nullptr, 0, 0, seq, hq, hkv, d, kv_code, 1e-6f);
            else
                g4_qkv_norm_rope_wide_bf16<<<(rows + warps - 1) / warps, G4_QKV_BLOCK_THREADS, 0, b.stream>>>(
                    qkv[i % sets], q_norm, k_norm, cos_t, sin_t, q, k, v, nullptr, 0, 0, seq, hq, hkv, d, kv_code, 1e-6f);
        };
        char shape[64];
        snprintf(shape, sizeof shape, "%d tokens, %d+%d heads of %d", seq, hq, hkv, d);
        // The copy: the projection's bytes in and as many out (the outputs hold v twice at k = v).
        const double copy = copy_us(qkv, copy_out, (size_t)seq * width * 2);
        printf("| g4_qkv_norm_rope (a warp a head) | %s | %.2f | %.2f | |\n", shape, b.graph_us(launches, run), copy);
        fflush(stdout);
    }

    {  // dual_rms_norm_plus_res at 31B's hidden size
        const int rows = 512, cols = 5376;
        const size_t count = (size_t)rows * cols;
        std::vector<bf*> xs, residuals;
        for (int s = 0; s < sets; ++s) xs.push_back(b.filled(count)), residuals.push_back(b.filled(count));
        bf* w1 = b.filled(cols);
        bf* w2 = b.filled(cols);
        bf* out_r = b.alloc<bf>(count);
        bf* out_y = b.alloc<bf>(count);
        bf* out_r2 = b.alloc<bf>(count);
        bf* out_y2 = b.alloc<bf>(count);
        auto wide = [&](int i) {
            g4_dual_rms_norm_plus_res_wide_bf16<<<rows, 512, 0, b.stream>>>(residuals[i % sets], xs[i % sets], w1, w2,
                                                                            out_r, out_y, cols, 0.375f, 1e-6f);
        };
        auto lean = [&](int i) {
            g4_dual_rms_norm_plus_res_wide_lean_bf16<<<rows, 352, 0, b.stream>>>(
                residuals[i % sets], xs[i % sets], w1, w2, out_r2, out_y2, cols, 0.375f, 1e-6f);
        };
        wide(0);
        lean(0);
        b.sync();
        const double diff = std::max(max_relative_difference(b.download(out_r, count), b.download(out_r2, count)),
                                     max_relative_difference(b.download(out_y, count), b.download(out_y2, count)));
        // Two rows in, two out: twice a copy of one.
        const double copy = 2 * copy_us(xs, out_r, count * 2);
        printf("| g4_dual_rms_norm_plus_res_wide | [%d, %d] | %.2f | %.2f | 0 |\n", rows, cols, b.graph_us(launches, wide), copy);
        printf("| g4_dual_rms_norm_plus_res_wide_lean | [%d, %d] | %.2f | %.2f | %.1e |\n", rows, cols,
               b.graph_us(launches, lean), copy, diff);
    }
    return 0;
}
