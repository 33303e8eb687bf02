// The Hopper GEMM for prefill's many rows of bf16 X (or f16 X, each row on a power-of-two
// scale): Y[m, n] = X[m, k] · Wᵀ, W e4m3 with one f32 scale per row or bf16, on the bf16 (f16)
// tensor cores, as a warp-specialised pipeline:
//   - one producer warp issues TMA copies (X and W tiles, swizzled by the copy engine) into a
//     ring of STAGES stages, each stage guarded by a "full" and an "empty" mbarrier;
//   - two consumer warpgroups, 64 weight rows each, wait on "full", run their wgmmas, and free
//     the stage a tile later (wgmma groups one deep), so the tensor cores never wait on a copy
//     that could have been issued earlier;
//   - registers move from the producer (40) to the consumers (232) with setmaxnreg.
// wgmma's M is the weight rows (A), its N the rows of X (B, K-major through a 128-byte-swizzle
// descriptor). With e4m3 weights A comes from registers: each consumer thread reads its A
// fragment's bytes from the W tile (TMA's 64-byte swizzle keeps those reads free of bank
// conflicts) and widens them to bf16, exactly (e4m3 → f16 → f32 → bf16), while the tile before's
// wgmmas run; each row's scale multiplies its sums in the epilogue, as the decode GEMV and the
// grouped expert GEMM apply theirs. (Scaling each weight before the wgmma, as
// dequant_fp8_channel's bf16 weights are, added two multiplies a pair to the widening, which
// runs between the wgmmas: 5–8 % of the GEMM's time, H100, stop 65.) With bf16 weights A is
// read by descriptor.
// The epilogue goes through shared memory: stmatrix.trans turns the (weight row, X row)
// fragments into rows of Y, which leave in 16-byte stores; for an MLP's packed gate/up it can be
// the GeGLU product instead (GEGLU). Where a GEMM has too few tiles to
// fill the GPU, its K is cut into slices whose f32 partial sums `sum_slices` adds in a fixed
// order (deterministic, unlike atomics).
// Stop 44's GEMM (cp.async, a __syncthreads a tile) ran 2.1–4.1× slower than cuBLAS even over
// bf16 weights: its pipeline, not the widening, was the cost.
// sm_90a only: compiled for anything else, the kernel traps.
#pragma once
#if !defined(__HIPCC__)
#include <cuda.h>
#include <cuda_fp16.h>
#include "g4_compat.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define G4_TMA_GEMM 1
#endif

namespace g4_tma {

constexpr int BM = 128;  // weight rows a block: two consumer warpgroups of 64
constexpr int BK = 64;   // K a stage: 128 bytes of a bf16 row, the 128-byte swizzle's width
constexpr int THREADS = 384;
constexpr int PRODUCER_REGISTERS = 40, CONSUMER_REGISTERS = 232;

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// mbarriers: initialised once, then a phase completes when its arrivals (and, for "full", the
// TMA bytes it was told to expect) are in. Waiters name the parity of the phase they wait for.
__device__ __forceinline__ void barrier_init(uint64_t* bar, int arrivals) {
#if defined(G4_TMA_GEMM)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
#endif
}
__device__ __forceinline__ void barrier_arrive_expecting(uint64_t* bar, int bytes) {
#if defined(G4_TMA_GEMM)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
#if defined(G4_TMA_GEMM)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
#endif
}
__device__ __forceinline__ void barrier_wait(uint64_t* bar, int parity) {
#if defined(G4_TMA_GEMM)
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(shared_address(bar)),
        "r"(parity)
        : "memory");
#endif
}

// A 2-D box of `map` at (inner, outer) into shared memory; its bytes complete `bar`'s phase.
__device__ __forceinline__ void tma_load(void* shared, const CUtensorMap* map, int inner, int outer, uint64_t* bar) {
#if defined(G4_TMA_GEMM)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            shared_address(shared)),
        "l"((uint64_t)map), "r"(inner), "r"(outer), "r"(shared_address(bar))
        : "memory");
#endif
}

__device__ __forceinline__ void named_barrier(int id, int threads) {
#if defined(G4_TMA_GEMM)
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
#endif
}

template <int REGISTERS>
__device__ __forceinline__ void set_registers_down() {
#if defined(G4_TMA_GEMM)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
#endif
}
template <int REGISTERS>
__device__ __forceinline__ void set_registers_up() {
#if defined(G4_TMA_GEMM)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
#endif
}

// A K-major operand tile in the 128-byte swizzle (rows of 128 bytes, 8-row atoms 1,024 bytes
// apart), as TMA's CU_TENSOR_MAP_SWIZZLE_128B writes it.
__device__ __forceinline__ uint64_t descriptor_sw128(const void* shared) {
    const uint64_t address = shared_address(shared);
    return ((address & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(G4_TMA_GEMM)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(G4_TMA_GEMM)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
#if defined(G4_TMA_GEMM)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// An empty asm that reads and writes `r`: wgmma reads its register operands while it runs,
// which the compiler does not know, so A's registers (and the sums) are held in place with it
// until the wgmmas that read them have been waited for.
__device__ __forceinline__ void hold(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void hold(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// The sums of a 64 × N wgmma as asm operands ("{%0, …}") and their bindings to d.
#define G4_OPERANDS_0_63 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define G4_OPERANDS_64_127 \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define G4_SUMS_64 "{" G4_OPERANDS_0_63 "}"
#define G4_SUMS_128 "{" G4_OPERANDS_0_63 ", " G4_OPERANDS_64_127 "}"
#define G4_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define G4_D16(i) G4_D4(i), G4_D4(i + 4), G4_D4(i + 8), G4_D4(i + 12)
#define G4_D64 G4_D16(0), G4_D16(16), G4_D16(32), G4_D16(48)
#define G4_D128 G4_D64, G4_D16(64), G4_D16(80), G4_D16(96), G4_D16(112)
#define G4_D32 G4_D16(0), G4_D16(16)
#define G4_D48 G4_D32, G4_D16(32)
#define G4_D56 G4_D48, G4_D4(48), G4_D4(52)
#define G4_WGMMA(SHAPE, TYPE) \
    "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " "
// One wgmma over bf16 inputs, or over f16 ones where F16: the same asm with the type named.
#define G4_WGMMA_TYPED(SHAPE, OPERANDS, OUTPUTS, ...)                               \
    if constexpr (F16)                                                              \
        asm volatile(G4_WGMMA(SHAPE, "f16") OPERANDS : OUTPUTS : __VA_ARGS__);      \
    else                                                                            \
        asm volatile(G4_WGMMA(SHAPE, "bf16") OPERANDS : OUTPUTS : __VA_ARGS__)

// d (64 × N f32, CuTe's CLayout_64xN) += A (64 × 16 bf16, or f16 where F16: registers `a` or
// descriptor) · B (16 × N of the same type, descriptor `b`). N = 128 or 256.
template <bool F16>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
#if defined(G4_TMA_GEMM)
    G4_WGMMA_TYPED("m64n128k16", G4_SUMS_64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n", G4_D64, "r"(a[0]),
                   "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}
template <bool F16>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[64], uint64_t a, uint64_t b) {
#if defined(G4_TMA_GEMM)
    G4_WGMMA_TYPED("m64n128k16", G4_SUMS_64 ", %64, %65, p, 1, 1, 0, 0;\n}\n", G4_D64, "l"(a), "l"(b));
#endif
}
template <bool F16>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
#if defined(G4_TMA_GEMM)
    G4_WGMMA_TYPED("m64n256k16", G4_SUMS_128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n", G4_D128,
                   "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}
template <bool F16>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[128], uint64_t a, uint64_t b) {
#if defined(G4_TMA_GEMM)
    G4_WGMMA_TYPED("m64n256k16", G4_SUMS_128 ", %128, %129, p, 1, 1, 0, 0;\n}\n", G4_D128, "l"(a), "l"(b));
#endif
}

// The sub-wave tiles' (64, 96 or 112 rows of X: where 128-row tiles leave multiprocessors idle),
// A from registers only (e4m3 weights).
#define G4_OPERANDS_0_31 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define G4_OPERANDS_32_47 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define G4_OPERANDS_48_55 "%48, %49, %50, %51, %52, %53, %54, %55"
template <bool F16>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
#if defined(G4_TMA_GEMM)
    G4_WGMMA_TYPED("m64n64k16", "{" G4_OPERANDS_0_31 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n", G4_D32,
                   "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}
template <bool F16>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[48], const uint32_t (&a)[4], uint64_t b) {
#if defined(G4_TMA_GEMM)
    G4_WGMMA_TYPED("m64n96k16",
                   "{" G4_OPERANDS_0_31 ", " G4_OPERANDS_32_47 "}, {%48, %49, %50, %51}, %52, p, 1, 1, 0;\n}\n",
                   G4_D48, "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}
template <bool F16>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[56], const uint32_t (&a)[4], uint64_t b) {
#if defined(G4_TMA_GEMM)
    G4_WGMMA_TYPED("m64n112k16",
                   "{" G4_OPERANDS_0_31 ", " G4_OPERANDS_32_47 ", " G4_OPERANDS_48_55
                   "}, {%56, %57, %58, %59}, %60, p, 1, 1, 0;\n}\n",
                   G4_D56, "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}

#undef G4_WGMMA_TYPED
#undef G4_WGMMA
#undef G4_D56
#undef G4_D48
#undef G4_D32
#undef G4_D128
#undef G4_D64
#undef G4_D16
#undef G4_D4
#undef G4_SUMS_128
#undef G4_SUMS_64
#undef G4_OPERANDS_64_127
#undef G4_OPERANDS_0_63
#undef G4_OPERANDS_48_55
#undef G4_OPERANDS_32_47
#undef G4_OPERANDS_0_31

// Two e4m3 bytes (low byte first) as an f16 pair, exactly, in one instruction.
__device__ __forceinline__ uint32_t widen_to_f16(uint16_t pair) {
    uint32_t halves = 0;
#if defined(G4_TMA_GEMM)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(pair));
#endif
    return halves;
}
// The same pair as bf16, exactly: through f16 and f32 (every e4m3 value is a bf16 value).
__device__ __forceinline__ uint32_t widen_to_bf16(uint16_t pair) {
    const uint32_t halves = widen_to_f16(pair);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&halves));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    return *reinterpret_cast<const uint32_t*>(&b);
}

// e4m3 weights, one f32 scale a row: a W tile is 128 rows of 64 bytes in TMA's 64-byte swizzle
// (16-byte chunk c of row r at c ^ (r / 2 % 4)); A comes from registers, widened to bf16 for bf16
// X, or (F16) to f16 for X in f16 — one instruction a pair instead of four (3–12 % shorter
// GEMMs, H100, stop 67). g4's f16 X are the rows the norms before q/k/v and gate/up write on a
// power-of-two scale a row (dual_rms_norm_plus_res_f16).
template <bool F16>
struct E4m3Tiles {
    typedef uint8_t Stored;
    static constexpr bool F16_INPUTS = F16;
    static constexpr int TILE_BYTES = BM * BK;
    static constexpr CUtensorMapDataType MAP_TYPE = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    static constexpr CUtensorMapSwizzle MAP_SWIZZLE = CU_TENSOR_MAP_SWIZZLE_64B;
    static constexpr bool IN_REGISTERS = true;

    __device__ static uint32_t widen(uint16_t pair) { return F16 ? widen_to_f16(pair) : widen_to_bf16(pair); }
    // This lane's A fragments (CuTe's ALayout_64x16: rows g and g + 8 of its warp's 16, K pairs
    // 2t and 2t + 8 of each k16 step) for tile rows from `first_row` (a multiple of 8, so both
    // rows share the swizzle phase g / 2).
    __device__ static void fragments(const uint8_t* tile, int first_row, int lane, uint32_t (&a)[BK / 16][4]) {
        const int g = lane / 4, t = lane % 4, phase = g / 2 % 4;
        const uint8_t* low = tile + (first_row + g) * BK + 2 * t;
        const uint8_t* high = low + 8 * BK;
#pragma unroll
        for (int step = 0; step < BK / 16; ++step) {
            const int chunk = 16 * (step ^ phase);
            a[step][0] = widen(*reinterpret_cast<const uint16_t*>(low + chunk));
            a[step][1] = widen(*reinterpret_cast<const uint16_t*>(high + chunk));
            a[step][2] = widen(*reinterpret_cast<const uint16_t*>(low + chunk + 8));
            a[step][3] = widen(*reinterpret_cast<const uint16_t*>(high + chunk + 8));
        }
    }
    __device__ static float row_scale(const float* scale, int row, int n) { return row < n ? scale[row] : 0.0f; }
};
typedef E4m3Tiles<false> E4m3Weights;
typedef E4m3Tiles<true> E4m3WeightsF16;

// bf16 weights (already scaled): a W tile is 128 rows of 128 bytes in the 128-byte swizzle; A is
// read by descriptor, a warpgroup's 64 rows from its first. Only kernel-bench instantiates it
// (the pipeline set beside cuBLAS, which g4 keeps for bf16: 1.13× its time at E4B's gate/up).
struct Bf16Weights {
    typedef g4_bf16 Stored;
    static constexpr bool F16_INPUTS = false;
    static constexpr int TILE_BYTES = BM * BK * 2;
    static constexpr CUtensorMapDataType MAP_TYPE = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    static constexpr CUtensorMapSwizzle MAP_SWIZZLE = CU_TENSOR_MAP_SWIZZLE_128B;
    static constexpr bool IN_REGISTERS = false;
    __device__ static float row_scale(const float*, int, int) { return 1.0f; }
};

template <typename W, int BN>
struct Stage {
    static constexpr int X_BYTES = BN * BK * 2;
    static constexpr int BYTES = X_BYTES + W::TILE_BYTES;
    static_assert(X_BYTES % 1024 == 0 && BYTES % 1024 == 0, "every tile starts on a 1,024-byte swizzle atom");
};

// Shared memory a launch needs: the stages, their barriers, and room to align to 1,024 bytes.
template <typename W, int BN, int STAGES>
constexpr int shared_bytes() {
    return STAGES * Stage<W, BN>::BYTES + 2 * STAGES * 8 + 1024;
}

// One block of the GEMM; the __global__ wrappers (tma_gemm.cu, kernel-bench) are launched with
// THREADS threads and shared_bytes<W, BN, STAGES>(), over a flat grid of ceil(m / BN) X tiles ×
// ceil(n / 128) weight tiles × `slices` slices of K, X tiles fastest (the blocks that share a
// weight tile run together, so it is read from memory once). `block` is this block's place in
// that grid, and the weight tiles cover `region_outputs` outputs from `first_output` (a multiple
// of the block's outputs): all of them, or one part of gemm_wide_then_narrow's split.
// x_map: X as bf16 (f16 where W::F16_INPUTS) [m, k], box 64 × BN, 128-byte swizzle; w_map: W
// [n, k], box 64 × 128, in W's type and swizzle. k % 16 == 0 (TMA's 16-byte row pitch; a partial
// last tile reads zeros), n % 8 == 0 (whole 16-byte stores).
// With one slice Y is bf16 [m, n]; with more, slice z writes its f32 sums to partial + z·m·n.
// GEGLU (one slice): W is an MLP's packed [gate ‖ up] (n = 2d rows, w_map's box 64 × 64) and Y
// [m, d] = gelu_tanh(X·gateᵀ) ⊙ X·upᵀ, rounded as the GEMM and then gelu_and_mul round (each
// projection to bf16, the GeLU to bf16, the product): a block's first consumer warpgroup takes 64
// outputs' gate rows, its second their up rows.
// x_scale (f16 X only, else null): X's rows were multiplied by powers of two to fit f16's range,
// and x_scale[i] undoes row i's on its sums (exactly, being a power of two too).
template <typename W, int BN, int STAGES, bool GEGLU = false>
__device__ __forceinline__ void gemm_block(const CUtensorMap* x_map, const CUtensorMap* w_map,
                                           const float* __restrict__ scale, g4_bf16* __restrict__ y,
                                           float* __restrict__ partial, int m, int n, int k, int slices, int block,
                                           int first_output, int region_outputs,
                                           const float* __restrict__ x_scale = nullptr) {
    static_assert(BN == 128 || BN == 256 || (W::IN_REGISTERS && (BN == 64 || BN == 96 || BN == 112)),
                  "wgmma's N: 128 or 256 rows of X, or 64, 96 or 112 with A from registers");
    static_assert(2 * BN * 128 <= STAGES * Stage<W, BN>::BYTES, "the epilogue's tiles fit in the stages");
#if defined(G4_TMA_GEMM)
    typedef Stage<W, BN> Tile;
    extern __shared__ uint8_t raw_shared[];
    uint8_t* shared = raw_shared + ((1024 - shared_address(raw_shared) % 1024) % 1024);
    uint64_t* full = reinterpret_cast<uint64_t*>(shared + STAGES * Tile::BYTES);
    uint64_t* empty = full + STAGES;
    auto x_tile = [&](int stage) { return shared + stage * Tile::BYTES; };
    auto w_tile = [&](int stage) { return shared + stage * Tile::BYTES + Tile::X_BYTES; };

    // A block's outputs: 128 weight rows' own, or 64 gate and up rows' products.
    constexpr int OUTPUTS = GEGLU ? BM / 2 : BM;
    const int outputs = GEGLU ? n / 2 : n;
    const int x_tiles = (m + BN - 1) / BN, w_tiles = (region_outputs + OUTPUTS - 1) / OUTPUTS;
    const int slice = block / (x_tiles * w_tiles);
    const int m0 = block % x_tiles * BN, n0 = first_output + block / x_tiles % w_tiles * OUTPUTS;
    const int tiles = (k + BK - 1) / BK, per_slice = (tiles + slices - 1) / slices;
    const int first_tile = slice * per_slice, count = max(0, min(per_slice, tiles - first_tile));
    const int tid = threadIdx.x, warpgroup = tid / 128, lane = tid % 32;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            barrier_init(&full[s], 1);
            // One arrival from each consumer warp (8) once its wgmmas have read the stage.
            barrier_init(&empty[s], 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        set_registers_down<PRODUCER_REGISTERS>();
        if (tid == 0) {
            for (int i = 0; i < count; ++i) {
                const int s = i % STAGES;
                // The first pass over the ring finds each stage free (parity 1 of a fresh
                // barrier counts as complete).
                barrier_wait(&empty[s], (i / STAGES + 1) % 2);
                barrier_arrive_expecting(&full[s], Tile::BYTES);
                const int k0 = (first_tile + i) * BK;
                tma_load(x_tile(s), x_map, k0, m0, &full[s]);
                tma_load(w_tile(s), w_map, k0, n0, &full[s]);
                if constexpr (GEGLU) tma_load(w_tile(s) + W::TILE_BYTES / 2, w_map, k0, outputs + n0, &full[s]);
            }
        }
        return;
    }

    set_registers_up<CONSUMER_REGISTERS>();
    const int consumer = warpgroup - 1, warp = tid % 128 / 32, g = lane / 4, t = lane % 4;
    // This warp's first A row in a W tile: its warpgroup's 64 rows, then its 16; the weight
    // rows behind the warpgroup's, and the end of their range.
    const int first_row = consumer * 64 + warp * 16;
    const int group_row = GEGLU ? consumer * outputs + n0 : n0 + consumer * 64;
    const int group_end = GEGLU ? (consumer + 1) * outputs : n;
    const float scale_low = W::row_scale(scale, group_row + warp * 16 + g, group_end);
    const float scale_high = W::row_scale(scale, group_row + warp * 16 + g + 8, group_end);

    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;

    // Tile i: wait for its copies, widen its A (e4m3) while tile i - 1's wgmmas run, start its
    // wgmmas, then wait for tile i - 1's and free its stage. `a` takes tile i's A; `in_flight`
    // holds tile i - 1's until that wait.
    auto compute_tile = [&](int i, uint32_t (&a)[BK / 16][4], uint32_t (&in_flight)[BK / 16][4]) {
        const int s = i % STAGES;
        barrier_wait(&full[s], (i / STAGES) % 2);
        if constexpr (W::IN_REGISTERS) {
            W::fragments(w_tile(s), first_row, lane, a);
#pragma unroll
            for (int step = 0; step < BK / 16; ++step)
#pragma unroll
                for (int r = 0; r < 4; ++r) hold(a[step][r]);
        }
        wgmma_fence();
#pragma unroll
        for (int step = 0; step < BK / 16; ++step) {
            const uint64_t b = descriptor_sw128(x_tile(s) + 32 * step);
            if constexpr (W::IN_REGISTERS)
                wgmma_m64nk16<W::F16_INPUTS>(d, a[step], b);
            else
                wgmma_m64nk16<W::F16_INPUTS>(d, descriptor_sw128(w_tile(s) + consumer * 64 * 128 + 32 * step), b);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if constexpr (W::IN_REGISTERS)
#pragma unroll
            for (int step = 0; step < BK / 16; ++step)
#pragma unroll
                for (int r = 0; r < 4; ++r) hold(in_flight[step][r]);
        if (i > 0 && lane == 0) barrier_arrive(&empty[(i - 1) % STAGES]);
    };
    // Two sets of A registers used in turn, so each tile's are fixed at compile time.
    uint32_t a_even[BK / 16][4] = {}, a_odd[BK / 16][4] = {};
    int i = 0;
    for (; i + 1 < count; i += 2) {
        compute_tile(i, a_even, a_odd);
        compute_tile(i + 1, a_odd, a_even);
    }
    if (i < count) compute_tile(i, a_even, a_odd);
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < BN / 2; ++r) hold(d[r]);
    // Each weight row's scale on its sums (1 for bf16 weights, already scaled).
    if constexpr (W::IN_REGISTERS)
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) d[r] *= r % 4 >= 2 ? scale_high : scale_low;
    if (x_scale != nullptr)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int x_row = m0 + 8 * j + 2 * t;
            const float even = x_row < m ? x_scale[x_row] : 0.0f, odd = x_row + 1 < m ? x_scale[x_row + 1] : 0.0f;
            d[4 * j] *= even;
            d[4 * j + 2] *= even;
            d[4 * j + 1] *= odd;
            d[4 * j + 3] *= odd;
        }

    // d[4j + e] is weight row first_row + g (+ 8 for e ≥ 2) and X row 8j + 2t (+ 1 for odd e).
    const int row_low = group_row + warp * 16 + g, row_high = row_low + 8;
    if (!GEGLU && slices > 1) {
        float* out = partial + (size_t)slice * m * n;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int x_row = m0 + 8 * j + 2 * t + (e & 1), w_row = e >= 2 ? row_high : row_low;
                if (x_row < m && w_row < n) out[(size_t)x_row * n + w_row] = d[4 * j + e];
            }
        return;
    }
    // Every consumer warp is past its last wgmma, so the stages are free for Y's tiles: this
    // warpgroup's [BN X rows][64 weight rows] bf16, 128-byte rows, chunk c of row r at c ^ (r % 8).
    named_barrier(1, 256);
    uint8_t* out_tile = shared + consumer * BN * 128;
    const int q = lane / 8, r = lane % 8;
#pragma unroll
    for (int j = 0; j < BN / 8; j += 2) {
        uint32_t v[4];
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const __nv_bfloat162 pair = __floats2bfloat162_rn(d[4 * (j + h / 2) + 2 * (h % 2)],
                                                              d[4 * (j + h / 2) + 2 * (h % 2) + 1]);
            v[h] = *reinterpret_cast<const uint32_t*>(&pair);
        }
        // Matrix q of the four is (X rows 8(j + q / 2)…, weight rows first_row + 8(q % 2)…);
        // lane 8q + r names the address of its stored row r: X row 8(j + q / 2) + r.
        const int x_row = 8 * (j + q / 2) + r, chunk = 2 * warp + q % 2;
        const uint32_t address = shared_address(out_tile + x_row * 128 + 16 * (chunk ^ r));
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
                     "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                     : "memory");
    }
    if constexpr (GEGLU) {
        // Both halves written: each output's gate (the first warpgroup's tile) and up (the
        // second's), by all 256 consumer threads.
        named_barrier(1, 256);
        const uint8_t *gate_tile = shared, *up_tile = shared + BN * 128;
        for (int c = tid - 128; c < BN * 8; c += 256) {
            const int x_row = c / 8, chunk = c % 8, col = n0 + 8 * chunk;
            if (m0 + x_row >= m || col >= outputs) continue;
            const int offset = x_row * 128 + 16 * (chunk ^ (x_row % 8));
            const uint4 gate = *reinterpret_cast<const uint4*>(gate_tile + offset);
            const uint4 up = *reinterpret_cast<const uint4*>(up_tile + offset);
            const __nv_bfloat162* gates = reinterpret_cast<const __nv_bfloat162*>(&gate);
            const __nv_bfloat162* ups = reinterpret_cast<const __nv_bfloat162*>(&up);
            uint4 product;
            __nv_bfloat162* products = reinterpret_cast<__nv_bfloat162*>(&product);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 g2 = __bfloat1622float2(gates[e]), u2 = __bfloat1622float2(ups[e]);
                products[e] = __floats2bfloat162_rn(g4_round<g4_bf16>(g4_gelu_tanh(g2.x)) * u2.x,
                                                    g4_round<g4_bf16>(g4_gelu_tanh(g2.y)) * u2.y);
            }
            *reinterpret_cast<uint4*>(y + (size_t)(m0 + x_row) * outputs + col) = product;
        }
        return;
    }
    named_barrier(2 + consumer, 128);
    const int col0 = n0 + consumer * 64;
    for (int c = tid % 128; c < BN * 8; c += 128) {
        const int x_row = c / 8, chunk = c % 8, col = col0 + 8 * chunk;
        if (m0 + x_row < m && col < n)
            *reinterpret_cast<uint4*>(y + (size_t)(m0 + x_row) * n + col) =
                *reinterpret_cast<const uint4*>(out_tile + x_row * 128 + 16 * (chunk ^ (x_row % 8)));
    }
#else
    __trap();
#endif
}

// gemm_block over every output of the grid's GEMM.
template <typename W, int BN, int STAGES, bool GEGLU = false>
__device__ __forceinline__ void gemm_all(const CUtensorMap* x_map, const CUtensorMap* w_map, const float* scale,
                                         g4_bf16* y, float* partial, int m, int n, int k, int slices,
                                         const float* x_scale = nullptr) {
    gemm_block<W, BN, STAGES, GEGLU>(x_map, w_map, scale, y, partial, m, n, k, slices, blockIdx.x, 0,
                                     GEGLU ? n / 2 : n, x_scale);
}

// Stages of the two tile shapes: 128 weight rows by 128 X rows, or by 256 ("wide").
constexpr int NARROW_STAGES = 6, WIDE_STAGES = 5;

// One slice of K in two kinds of tiles: wide ones over the first `wide_outputs` outputs (a
// multiple of a block's), launched first, then 128-row ones over the rest. Wide tiles read each
// weight tile half as often, but where their last wave would leave most multiprocessors idle,
// twice as many narrow tiles finish it in about two thirds of a wide wave's time (H100, E4B's
// gate/up: a narrow 128 × 128 wave ≈ 19.6 µs, a wide one ≈ 29.9). The grid: the wide tiles'
// blocks, then the narrow ones'; shared memory: the wide tiles' (the larger).
template <typename W, bool GEGLU = false>
__device__ __forceinline__ void gemm_wide_then_narrow(const CUtensorMap* wide_x_map, const CUtensorMap* x_map,
                                                      const CUtensorMap* w_map, const float* scale, g4_bf16* y,
                                                      int m, int n, int k, int wide_outputs,
                                                      const float* x_scale = nullptr) {
    constexpr int OUTPUTS = GEGLU ? BM / 2 : BM;
    const int outputs = GEGLU ? n / 2 : n;
    const int wide_blocks = (m + 255) / 256 * (wide_outputs / OUTPUTS);
    const int block = blockIdx.x;
    if (block < wide_blocks)
        gemm_block<W, 256, WIDE_STAGES, GEGLU>(wide_x_map, w_map, scale, y, nullptr, m, n, k, 1, block, 0,
                                               wide_outputs, x_scale);
    else
        gemm_block<W, 128, NARROW_STAGES, GEGLU>(x_map, w_map, scale, y, nullptr, m, n, k, 1, block - wide_blocks,
                                                 wide_outputs, outputs - wide_outputs, x_scale);
}

// Y = the K slices' partial sums added in order, rounded to bf16; 4 values a thread, grid-stride.
__device__ __forceinline__ void sum_slices(const float* __restrict__ partial, g4_bf16* __restrict__ y, int slices,
                                           size_t count) {
    const size_t stride = 4 * (size_t)gridDim.x * blockDim.x;
    for (size_t i = 4 * ((size_t)blockIdx.x * blockDim.x + threadIdx.x); i < count; i += stride) {
        float4 sum = *reinterpret_cast<const float4*>(partial + i);
        for (int s = 1; s < slices; ++s) {
            const float4 p = *reinterpret_cast<const float4*>(partial + s * count + i);
            sum.x += p.x;
            sum.y += p.y;
            sum.z += p.z;
            sum.w += p.w;
        }
        const __nv_bfloat162 low = __floats2bfloat162_rn(sum.x, sum.y), high = __floats2bfloat162_rn(sum.z, sum.w);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t*>(&low);
        packed.y = *reinterpret_cast<const uint32_t*>(&high);
        *reinterpret_cast<uint2*>(y + i) = packed;
    }
}

}  // namespace g4_tma
#endif
