// moe_experts: the routed experts' MLP for a few tokens (decode), reading only the chosen
// experts' weights by their ids on the device — no routing through the host, so a decode step
// with MoE layers can be captured as a graph.
//   gate_up: h[r, j] = gelu(x[t]·Wgu[e, j]) · (x[t]·Wgu[e, W + j])   r = t·K + slot, e = ids[r]
//   down:    out[t, c] = Σ_slot w[r] · (h[r]·Wd[e, c])                (f32)
// Each output is reduced with batches of independent 16-byte loads (a decode GEMV is bound by
// memory latency unless many loads are in flight); rounding to T happens where the composed arm
// stores an intermediate in T. The weights are T (moe_experts) or e4m3 with one f32 scale per
// row (moe_experts_fp8: an FP8 checkpoint's experts, decoded in registers, the scale applied to
// each row's sum), loaded and decoded by gemv.cuh's weight decoders (`W::load`, as the dense
// GEMVs load theirs).
#include "gemv.cuh"

#define G4_MOE_BATCH 8
#define G4_MOE_GATE_UP_BATCH 4
#define G4_MOE_MAX_SLOTS 8

// gate_up: one block per (row r, column j), blocks running over the columns of row 0, then row
// 1, ...; the block's warps split the hidden range, each lane loading its share of both rows in
// one batch. (H200, bf16, 26B-A4B's experts, top-8: 17.9 µs per call with four warps per
// column, against 20.6 with one warp per column over the whole row.)
template <typename T, typename W>
__device__ void moe_experts_gate_up(const T* x, const uint32_t* ids, const typename W::Stored* gate_up,
                                    const float* scale, T* h, int slots, int hidden, int width) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, part = threadIdx.x / warp_size;
    const int parts = blockDim.x / warp_size;
    const int r = blockIdx.x / width, j = blockIdx.x % width;
    const size_t expert = ids[r];
    const size_t gate_row = expert * 2 * width + j, up_row = gate_row + width;
    const T* x_row = x + (size_t)(r / slots) * hidden;
    const uint4* gate = reinterpret_cast<const uint4*>(gate_up + gate_row * hidden);
    const uint4* up = reinterpret_cast<const uint4*>(gate_up + up_row * hidden);
    const int vectors = hidden / W::per_vector;
    const int step = warp_size * parts;
    float g = 0.0f, u = 0.0f;
    for (int base = part * warp_size + lane; base < vectors; base += step * G4_MOE_GATE_UP_BATCH) {
        uint4 gb[G4_MOE_GATE_UP_BATCH], ub[G4_MOE_GATE_UP_BATCH];
#pragma unroll
        for (int b = 0; b < G4_MOE_GATE_UP_BATCH; ++b) {
            const int i = base + b * step;
            gb[b] = i < vectors ? W::load(gate + i) : make_uint4(0, 0, 0, 0);
            ub[b] = i < vectors ? W::load(up + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < G4_MOE_GATE_UP_BATCH; ++b) {
            const int i = base + b * step;
            if (i >= vectors) break;
            float xf[W::per_vector], gf[W::per_vector], uf[W::per_vector];
            x_values<T, W>(x_row, i, xf);
            W::decode(gb[b], gf);
            W::decode(ub[b], uf);
#pragma unroll
            for (int e = 0; e < W::per_vector; ++e) {
                g += xf[e] * gf[e];
                u += xf[e] * uf[e];
            }
        }
    }
    for (int bits = warp_size / 2; bits > 0; bits >>= 1) {
        g += G4_SHFL_XOR(g, bits);
        u += G4_SHFL_XOR(u, bits);
    }
    __shared__ float2 partial[G4_GEMV_MAX_WARPS];
    if (lane == 0) partial[part] = make_float2(g, u);
    __syncthreads();
    if (threadIdx.x == 0) {
        g = 0.0f;
        u = 0.0f;
        for (int p = 0; p < parts; ++p) {
            g += partial[p].x;
            u += partial[p].y;
        }
        g *= W::row_scale(scale, gate_row);
        u *= W::row_scale(scale, up_row);
        const float activated = g4_round<T>(g4_gelu_tanh(g4_round<T>(g)));
        h[(size_t)r * width + j] = g4_from_f32<T>(activated * g4_round<T>(u));
    }
}

// down + weighted combine: one block per (token t, output column c), blocks running over the
// columns of token 0, then token 1, ...; warp s reads slot s's row of its expert (contiguous),
// and the slots' sums are combined in slot order. (H200, bf16, 26B-A4B's experts, top-8: 13.8
// µs per call, against 17.0 with one warp per column walking all eight rows.)
template <typename T, typename W>
__device__ void moe_experts_down(const T* h, const uint32_t* ids, const float* weights,
                                 const typename W::Stored* down, const float* scale, float* out, int slots,
                                 int hidden, int width) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, s = threadIdx.x / warp_size;
    const int t = blockIdx.x / hidden, c = blockIdx.x % hidden;
    const int vectors = width / W::per_vector;
    float sum = 0.0f;
    if (s < slots) {
        const size_t expert = ids[(size_t)t * slots + s];
        const uint4* row = reinterpret_cast<const uint4*>(down + (expert * hidden + c) * width);
        const T* h_row = h + ((size_t)t * slots + s) * width;
        for (int base = lane; base < vectors; base += warp_size * G4_MOE_BATCH) {
            uint4 wb[G4_MOE_BATCH];
#pragma unroll
            for (int b = 0; b < G4_MOE_BATCH; ++b) {
                const int i = base + b * warp_size;
                wb[b] = i < vectors ? W::load(row + i) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int b = 0; b < G4_MOE_BATCH; ++b) {
                const int i = base + b * warp_size;
                if (i >= vectors) break;
                float hf[W::per_vector], wf[W::per_vector];
                x_values<T, W>(h_row, i, hf);
                W::decode(wb[b], wf);
#pragma unroll
                for (int e = 0; e < W::per_vector; ++e) sum += hf[e] * wf[e];
            }
        }
        for (int bits = warp_size / 2; bits > 0; bits >>= 1) sum += G4_SHFL_XOR(sum, bits);
        sum *= W::row_scale(scale, expert * hidden + c);
    }
    __shared__ float per_slot[G4_MOE_MAX_SLOTS];
    if (lane == 0 && s < slots) per_slot[s] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float combined = 0.0f;
        for (int q = 0; q < slots; ++q) combined += weights[(size_t)t * slots + q] * g4_round<T>(per_slot[q]);
        out[(size_t)t * hidden + c] = combined;
    }
}

#define G4_MOE_EXPERTS(NAME, T)                                                                              \
    extern "C" __global__ void g4_moe_experts_gate_up_##NAME(const T* x, const uint32_t* ids,                \
                                                             const T* gate_up, T* h, int slots,              \
                                                             int hidden, int width) {                        \
        G4_KERNEL_START();                                                                                   \
        moe_experts_gate_up<T, DenseWeights<T>>(x, ids, gate_up, nullptr, h, slots, hidden, width);          \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_experts_down_##NAME(const T* h, const uint32_t* ids,                   \
                                                          const float* weights, const T* down, float* out,   \
                                                          int slots, int hidden, int width) {                \
        G4_KERNEL_START();                                                                                   \
        moe_experts_down<T, DenseWeights<T>>(h, ids, weights, down, nullptr, out, slots, hidden, width);     \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_experts_fp8_gate_up_##NAME(const T* x, const uint32_t* ids,            \
                                                                 const uint8_t* gate_up, const float* scale, \
                                                                 T* h, int slots, int hidden, int width) {   \
        G4_KERNEL_START();                                                                                   \
        moe_experts_gate_up<T, E4m3Weights>(x, ids, gate_up, scale, h, slots, hidden, width);                \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_experts_fp8_down_##NAME(const T* h, const uint32_t* ids,               \
                                                              const float* weights, const uint8_t* down,     \
                                                              const float* scale, float* out, int slots,     \
                                                              int hidden, int width) {                       \
        G4_KERNEL_START();                                                                                   \
        moe_experts_down<T, E4m3Weights>(h, ids, weights, down, scale, out, slots, hidden, width);           \
    }
G4_FOR_FLOAT_TYPES(G4_MOE_EXPERTS)
