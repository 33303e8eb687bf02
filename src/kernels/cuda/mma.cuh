// Tensor-core building blocks of g4's tiled kernels (moe_grouped.cu, attention.cu's prefill):
// cp.async copies into shared memory, ldmatrix fragment loads and the m16n8k16 mma with f32
// accumulators. PTX that hipcc does not have: CUDA only.
#pragma once
#include "g4_compat.cuh"

#if !defined(__HIPCC__)

// 16 bytes from global to shared memory, in the background until cp.async.wait_group; an
// invalid source reads nothing and zero-fills the 16 bytes.
__device__ __forceinline__ void g4_cp_async16(void* shared, const void* global, bool valid) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void g4_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `PENDING` of this thread's committed groups are still in flight.
template <int PENDING> __device__ __forceinline__ void g4_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// Four 8×8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void g4_ldmatrix_x4(unsigned (&r)[4], const void* shared) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
// The same, each matrix transposed: B fragments from a row-major [k][n] tile.
__device__ __forceinline__ void g4_ldmatrix_x4_trans(unsigned (&r)[4], const void* shared) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

// d += a·b for a 16×16 A (row) and 16×8 B (col) of T, f32 accumulators: each lane holds rows
// lane/4 and lane/4 + 8, columns 2·(lane%4) and the next.
template <typename T> __device__ __forceinline__ void g4_mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void g4_mma_16816<g4_bf16>(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void g4_mma_16816<g4_f16>(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two values as one register of T (the first in the low half): an A fragment's pair.
template <typename T> __device__ __forceinline__ unsigned g4_pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned g4_pack2<g4_bf16>(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&pair);
}
template <> __device__ __forceinline__ unsigned g4_pack2<g4_f16>(float lo, float hi) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&pair);
}

#endif
