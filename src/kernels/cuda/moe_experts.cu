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
#define G4_MOE_MAX_SHARED_WARPS 8

// A MoE layer's shared MLP riding along the experts' two launches (moe_mlps): its input rows x
// [tokens, hidden], packed gate_up [2·width, hidden], down [hidden, width] (each with its row
// scales when e4m3), its GeGLU rows h [tokens, width] and its output [tokens, hidden] in T.
// width 0: none (moe_experts).
template <typename T, typename W>
struct SharedMlp {
    const T* x;
    const typename W::Stored* gate_up;
    const float* gate_up_scale;
    const typename W::Stored* down;
    const float* down_scale;
    T* h;
    T* out;
    int tokens;
    int width;
};

// One GeGLU output, gelu(x·W[gate_row]) · (x·W[up_row]), by the whole block: its warps split
// the hidden range, each lane loading its share of both rows in one batch.
template <typename T, typename W>
__device__ void gelu_mul_output(const T* x_row, const typename W::Stored* gate_up, const float* scale,
                                size_t gate_row, size_t up_row, int hidden, T* out) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, part = threadIdx.x / warp_size;
    const int parts = blockDim.x / warp_size;
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
        *out = g4_from_f32<T>(activated * g4_round<T>(u));
    }
}

// gate_up: one block per (row r, column j), blocks running over the columns of row 0, then row
// 1, ... (H200, bf16, 26B-A4B's experts, top-8: 17.9 µs per call with four warps per column,
// against 20.6 with one warp per column over the whole row.) With a shared MLP (`moe_mlps`),
// its `shared_width` columns of each token follow the routed rows' as more blocks.
template <typename T, typename W>
__device__ void moe_experts_gate_up(const T* x, const uint32_t* ids, const typename W::Stored* gate_up,
                                    const float* scale, T* h, int slots, int hidden, int width,
                                    const SharedMlp<T, W>& shared) {
    const size_t routed_blocks = (size_t)shared.tokens * slots * width;
    if (shared.width > 0 && blockIdx.x >= routed_blocks) {
        const size_t block = blockIdx.x - routed_blocks;
        const int t = block / shared.width, j = block % shared.width;
        gelu_mul_output<T, W>(shared.x + (size_t)t * hidden, shared.gate_up, shared.gate_up_scale, j,
                              shared.width + j, hidden, shared.h + (size_t)t * shared.width + j);
        return;
    }
    const int r = blockIdx.x / width, j = blockIdx.x % width;
    const size_t gate_row = (size_t)ids[r] * 2 * width + j;
    gelu_mul_output<T, W>(x + (size_t)(r / slots) * hidden, gate_up, scale, gate_row, gate_row + width, hidden,
                          h + (size_t)r * width + j);
}

// A lane's share of x·row over `vectors` 16-byte vectors of weights: vectors first, first +
// step, ..., in batches of G4_MOE_BATCH independent loads.
template <typename T, typename W>
__device__ float row_dot(const T* x_row, const typename W::Stored* row, int vectors, int first, int step) {
    const uint4* w = reinterpret_cast<const uint4*>(row);
    float sum = 0.0f;
    for (int base = first; base < vectors; base += step * G4_MOE_BATCH) {
        uint4 wb[G4_MOE_BATCH];
#pragma unroll
        for (int b = 0; b < G4_MOE_BATCH; ++b) {
            const int i = base + b * step;
            wb[b] = i < vectors ? W::load(w + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < G4_MOE_BATCH; ++b) {
            const int i = base + b * step;
            if (i >= vectors) break;
            float xf[W::per_vector], wf[W::per_vector];
            x_values<T, W>(x_row, i, xf);
            W::decode(wb[b], wf);
#pragma unroll
            for (int e = 0; e < W::per_vector; ++e) sum += xf[e] * wf[e];
        }
    }
    const int warp_size = warpSize;
    for (int bits = warp_size / 2; bits > 0; bits >>= 1) sum += G4_SHFL_XOR(sum, bits);
    return sum;
}

// down + weighted combine: one block per (token t, output column c), blocks running over the
// columns of token 0, then token 1, ...; warp s < slots reads slot s's row of its expert
// (contiguous), and the slots' sums are combined in slot order. (H200, bf16, 26B-A4B's experts,
// top-8: 13.8 µs per call, against 17.0 with one warp per column walking all eight rows.) With a
// shared MLP, the block's warps past the slots split its down row c and store its output.
template <typename T, typename W>
__device__ void moe_experts_down(const T* h, const uint32_t* ids, const float* weights,
                                 const typename W::Stored* down, const float* scale, float* out, int slots,
                                 int hidden, int width, const SharedMlp<T, W>& shared) {
    const int warp_size = warpSize;
    const int lane = threadIdx.x % warp_size, s = threadIdx.x / warp_size;
    const int shared_warps = blockDim.x / warp_size - slots;
    const int t = blockIdx.x / hidden, c = blockIdx.x % hidden;
    __shared__ float per_slot[G4_MOE_MAX_SLOTS];
    __shared__ float shared_part[G4_MOE_MAX_SHARED_WARPS];
    if (s < slots) {
        const size_t expert = ids[(size_t)t * slots + s];
        const float sum = row_dot<T, W>(h + ((size_t)t * slots + s) * width, down + (expert * hidden + c) * width,
                                        width / W::per_vector, lane, warp_size);
        if (lane == 0) per_slot[s] = sum * W::row_scale(scale, expert * hidden + c);
    } else {
        const int q = s - slots;
        const float sum = row_dot<T, W>(shared.h + (size_t)t * shared.width, shared.down + (size_t)c * shared.width,
                                        shared.width / W::per_vector, q * warp_size + lane, shared_warps * warp_size);
        if (lane == 0) shared_part[q] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float combined = 0.0f;
        for (int q = 0; q < slots; ++q) combined += weights[(size_t)t * slots + q] * g4_round<T>(per_slot[q]);
        out[(size_t)t * hidden + c] = combined;
        if (shared_warps > 0) {
            float sum = 0.0f;
            for (int q = 0; q < shared_warps; ++q) sum += shared_part[q];
            shared.out[(size_t)t * hidden + c] = g4_from_f32<T>(sum * W::row_scale(shared.down_scale, c));
        }
    }
}

#define G4_MOE_EXPERTS(NAME, T)                                                                              \
    extern "C" __global__ void g4_moe_experts_gate_up_##NAME(const T* x, const uint32_t* ids,                \
                                                             const T* gate_up, T* h, int slots,              \
                                                             int hidden, int width) {                        \
        G4_KERNEL_START();                                                                                   \
        moe_experts_gate_up<T, DenseWeights<T>>(x, ids, gate_up, nullptr, h, slots, hidden, width, {});      \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_experts_down_##NAME(const T* h, const uint32_t* ids,                   \
                                                          const float* weights, const T* down, float* out,   \
                                                          int slots, int hidden, int width) {                \
        G4_KERNEL_START();                                                                                   \
        moe_experts_down<T, DenseWeights<T>>(h, ids, weights, down, nullptr, out, slots, hidden, width, {}); \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_experts_fp8_gate_up_##NAME(const T* x, const uint32_t* ids,            \
                                                                 const uint8_t* gate_up, const float* scale, \
                                                                 T* h, int slots, int hidden, int width) {   \
        G4_KERNEL_START();                                                                                   \
        moe_experts_gate_up<T, E4m3Weights>(x, ids, gate_up, scale, h, slots, hidden, width, {});            \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_experts_fp8_down_##NAME(const T* h, const uint32_t* ids,               \
                                                              const float* weights, const uint8_t* down,     \
                                                              const float* scale, float* out, int slots,     \
                                                              int hidden, int width) {                       \
        G4_KERNEL_START();                                                                                   \
        moe_experts_down<T, E4m3Weights>(h, ids, weights, down, scale, out, slots, hidden, width, {});       \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_mlps_gate_up_##NAME(                                                   \
        const T* x, const uint32_t* ids, const T* gate_up, T* h, int slots, int hidden, int width,           \
        const T* shared_x, const T* shared_gate_up, T* shared_h, int tokens, int shared_width) {             \
        G4_KERNEL_START();                                                                                   \
        const SharedMlp<T, DenseWeights<T>> shared{shared_x, shared_gate_up, nullptr, nullptr, nullptr,      \
                                                   shared_h, nullptr, tokens, shared_width};                 \
        moe_experts_gate_up<T, DenseWeights<T>>(x, ids, gate_up, nullptr, h, slots, hidden, width, shared);  \
    }                                                                                                        \
    extern "C" __global__ void g4_moe_mlps_down_##NAME(                                                      \
        const T* h, const uint32_t* ids, const float* weights, const T* down, float* out, int slots,         \
        int hidden, int width, const T* shared_h, const T* shared_down, T* shared_out, int shared_width) {   \
        G4_KERNEL_START();                                                                                   \
        /* down only reads the GeGLU rows that gate_up wrote */                                              \
        const SharedMlp<T, DenseWeights<T>> shared{nullptr, nullptr, nullptr, shared_down, nullptr,          \
                                                   const_cast<T*>(shared_h), shared_out, 0, shared_width};   \
        moe_experts_down<T, DenseWeights<T>>(h, ids, weights, down, nullptr, out, slots, hidden, width,      \
                                             shared);                                                        \
    }
G4_FOR_FLOAT_TYPES(G4_MOE_EXPERTS)
