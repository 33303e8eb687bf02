// Vendor specifics of g4's kernels, kept here so that hipcc can compile the same sources.
#pragma once

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
// bf16 as its 16 storage bits, converted here: the HIP headers of the Debian toolchain that
// builds these objects (5.2.3) have no hip_bf16.h.
struct g4_bf16 {
    unsigned short bits;
};
__device__ __forceinline__ float g4_bf16_to_f32(g4_bf16 x) { return __uint_as_float((unsigned)x.bits << 16); }
// Round to nearest, ties to even, as __float2bfloat16 does; NaN stays a quiet NaN.
__device__ __forceinline__ g4_bf16 g4_f32_to_bf16(float f) {
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return g4_bf16{(unsigned short)((u >> 16) | 0x0040u)};
    return g4_bf16{(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
typedef __half g4_f16;
#define G4_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define G4_SHFL(v, lane) __shfl((v), (lane))
#define G4_BALLOT(pred) ((unsigned long long)__ballot(pred))
// A wavefront's lanes run together; the fence orders its shared-memory writes before the reads.
#define G4_SYNC_WARP()                    \
    do {                                  \
        __threadfence_block();            \
        __builtin_amdgcn_wave_barrier();  \
    } while (0)
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
typedef __nv_bfloat16 g4_bf16;
__device__ __forceinline__ float g4_bf16_to_f32(g4_bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ g4_bf16 g4_f32_to_bf16(float f) { return __float2bfloat16(f); }
typedef __half g4_f16;
#define G4_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define G4_SHFL(v, lane) __shfl_sync(0xffffffffu, (v), (lane))
#define G4_BALLOT(pred) ((unsigned long long)__ballot_sync(0xffffffffu, (pred)))
#define G4_SYNC_WARP() __syncwarp()
#endif

#include <stdint.h>

// Programmatic dependent launch (Hopper and newer; the host asks for it there): a kernel may
// start while the one before it in the stream finishes. Every g4 kernel lets the next one launch
// at once, and waits for the kernels before it to complete before it reads anything they wrote
// or writes anything itself; the decode GEMVs load their first weights before waiting, which is
// the point (a GEMV's start overlaps the short kernel before it). Elsewhere both are no-ops.
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define G4_LET_DEPENDENTS_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define G4_WAIT_FOR_INPUTS() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define G4_LET_DEPENDENTS_LAUNCH() \
    do {                           \
    } while (0)
#define G4_WAIT_FOR_INPUTS() \
    do {                     \
    } while (0)
#endif
// A 16-byte load of weights, which no kernel writes while they are read and which each decode
// step reads once: on CUDA through the read-only path without a place in L1
// (`.nc.L1::no_allocate`, with L2 fetching 256 bytes around a miss). The decode GEMVs read
// W this way up to 4 % faster than by a plain load, and the FP8 GeGLU GEMV up to 8 % (H100,
// scripts/kernel-bench/gemv_bench and fp8_gemv_bench, stop 62).
__device__ __forceinline__ uint4 g4_load_weights(const uint4* vector) {
#if defined(__HIPCC__)
    return *vector;
#else
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(vector));
    return v;
#endif
}

// The first statement of every kernel that reads nothing before its inputs are ready.
#define G4_KERNEL_START()          \
    do {                           \
        G4_LET_DEPENDENTS_LAUNCH(); \
        G4_WAIT_FOR_INPUTS();      \
    } while (0)

__device__ __forceinline__ float g4_to_f32(float x) { return x; }
__device__ __forceinline__ float g4_to_f32(g4_bf16 x) { return g4_bf16_to_f32(x); }
__device__ __forceinline__ float g4_to_f32(g4_f16 x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T g4_from_f32(float x);
template <> __device__ __forceinline__ float g4_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ g4_bf16 g4_from_f32<g4_bf16>(float x) { return g4_f32_to_bf16(x); }
template <> __device__ __forceinline__ g4_f16 g4_from_f32<g4_f16>(float x) { return __float2half(x); }

// The decode GEMVs' largest block: 8 warps (linear_gelu_mul's gate and up rows) of up to 64
// lanes. Without a bound HIP's compiler budgets registers for 1,024-thread blocks, too few for
// the 8-row GEMVs on gfx942; CUDA's keeps the allocation it was measured with.
#if defined(__HIPCC__)
#define G4_GEMV_BOUNDS __launch_bounds__(512)
#else
#define G4_GEMV_BOUNDS
#endif

// Rounds through T and back: reproduces where the composed arm stores an intermediate in T.
// VEC elements of T loaded or stored as one access (16 bytes at VEC = 16 / sizeof(T)).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

template <typename T> __device__ __forceinline__ float g4_round(float x) { return g4_to_f32(g4_from_f32<T>(x)); }

// GELU, tanh approximation (gelu_pytorch_tanh).
__device__ __forceinline__ float g4_gelu_tanh(float v) {
    const float sqrt_two_over_pi = 0.7978845608028654f;
    return 0.5f * v * (1.0f + tanhf(sqrt_two_over_pi * v * (1.0f + 0.044715f * v * v)));
}

// Sum over a warp, in every lane.
__device__ __forceinline__ float g4_warp_sum(float v) {
    for (int mask = warpSize / 2; mask > 0; mask >>= 1) v += G4_SHFL_XOR(v, mask);
    return v;
}

// Sum over a block (any size up to 1024 threads, a multiple of the warp size). Every warp sums
// the warps' partials at once, a lane each and shuffles: a walk over them one after another was
// up to 32 dependent shared-memory loads, on the critical path of a decode step's one-row norms.
__device__ __forceinline__ float g4_block_sum(float v) {
    __shared__ float partial[32];
    const int warp_size = warpSize;
    v = g4_warp_sum(v);
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    const int warps = (blockDim.x + warp_size - 1) / warp_size;
    const float total = g4_warp_sum(lane < warps ? partial[lane] : 0.0f);
    __syncthreads();
    return total;
}

// Maximum over a block (any size up to 1024 threads, a multiple of the warp size).
__device__ __forceinline__ float g4_block_max(float v) {
    __shared__ float partial[32];
    const int warp_size = warpSize;
    for (int mask = warp_size / 2; mask > 0; mask >>= 1) v = fmaxf(v, G4_SHFL_XOR(v, mask));
    const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    const int warps = (blockDim.x + warp_size - 1) / warp_size;
    float total = -INFINITY;
    for (int i = 0; i < warps; ++i) total = fmaxf(total, partial[i]);
    __syncthreads();
    return total;
}

// One extern "C" entry point per dtype: g4_<op>_f32, g4_<op>_bf16, g4_<op>_f16.
#define G4_FOR_FLOAT_TYPES(MACRO) MACRO(f32, float) MACRO(bf16, g4_bf16) MACRO(f16, g4_f16)
