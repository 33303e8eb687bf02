// A candidate for FP8 prefill (issue #17): Y[m, n] = X[m, k] · (W[n, k] ⊙ scale[n])ᵀ with W
// e4m3 and X bf16, on Hopper's bf16 tensor cores, the weights widened to bf16 on their way in.
// Stop 39 measured both cuBLASLt FP8 paths below bf16's GEMM (fp8_gemm_bench): two FP8 GEMMs
// to keep bf16's accuracy cost more than one bf16 GEMM, and one (W8A8) is ten times less
// accurate. Widening e4m3 to bf16 is exact, so this GEMM is as accurate as bf16's and reads half
// its weight bytes; at best it ties bf16, which is compute-bound at 512 rows.
//
// Layout: wgmma's M is the weight rows (A, from registers: the widening happens there), its N
// the rows of X (B, from shared memory through a descriptor). A block owns 128 weight rows and
// BN rows of X; each of its two warpgroups owns 64 weight rows. K goes in tiles of 64 through a
// cp.async pipeline of STAGES tiles:
//   X tile  BN rows of 128 bytes, 16-byte chunk c of row r stored at chunk c ^ (r % 8): the
//           128-byte swizzle wgmma reads K-major B in (8-row atoms 1,024 bytes apart)
//   W tile  128 rows of 64 weights at a pitch of W::PITCH bytes (E4m3Rows, Bf16Rows below)
// Each warp's A fragment for one k16 step is the mma.m16n8k16 A fragment of its 16 rows (CuTe's
// ALayout_64x16): rows g and g + 8, K pairs 2t and 2t + 8. The row scale is applied to the f32
// sums in the epilogue. sm_90a only (wgmma); the bench runs it on the H200.
//
// The same kernel over bf16 weights (`Bf16Rows`: A fragments by ldmatrix, no widening) is timed
// beside cuBLAS's bf16 GEMM: it says how far the pipeline itself is from cuBLAS, apart from what
// the widening costs.
#pragma once
#include <cuda_fp16.h>
#include "../../src/kernels/cuda/g4_compat.cuh"
#include "../../src/kernels/cuda/mma.cuh"

#define G4_WGMMA_BM 128
#define G4_WGMMA_BK 64
#define G4_WGMMA_THREADS 256

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define G4_WGMMA 1
#endif

// Two e4m3 (low byte first) as two bf16, exactly: e4m3 → f16 in one instruction, then → f32 → bf16.
__device__ __forceinline__ uint32_t g4_e4m3x2_to_bf16x2(uint16_t pair) {
    uint32_t halves = 0;
#if defined(G4_WGMMA)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(pair));
#endif
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&halves));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    return *reinterpret_cast<const uint32_t*>(&b);
}

// A K-major B operand in the 128-byte swizzle: start address, leading offset 16 bytes (unused
// by this layout), 1,024 bytes between 8-row atoms, swizzle mode 1 (128 bytes).
__device__ __forceinline__ uint64_t g4_wgmma_desc_sw128(const void* shared) {
    const uint64_t address = (uint64_t)__cvta_generic_to_shared(shared);
    return ((address & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void g4_wgmma_fence() {
#if defined(G4_WGMMA)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void g4_wgmma_commit() {
#if defined(G4_WGMMA)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int PENDING>
__device__ __forceinline__ void g4_wgmma_wait() {
#if defined(G4_WGMMA)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}
// Writes through the generic proxy (cp.async's) made visible to wgmma's reads (the async proxy).
__device__ __forceinline__ void g4_fence_generic_to_async_shared() {
#if defined(G4_WGMMA)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// An empty asm that reads and writes `r`: the compiler must keep it in its register until here.
// wgmma reads its register operands while it runs, which the compiler does not know: the A
// registers of wgmmas in flight, and the sums until their wait, are kept live with this.
__device__ __forceinline__ void g4_keep(uint32_t& r) {
    asm volatile("" : "+r"(r)::"memory");
}
__device__ __forceinline__ void g4_keep(float& r) {
    asm volatile("" : "+f"(r)::"memory");
}

#define G4_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define G4_F16(i) G4_F4(i), G4_F4(i + 4), G4_F4(i + 8), G4_F4(i + 12)

// d (64 × 128, f32, CuTe's CLayout_64xN) += A (64 × 16 bf16, registers) · B (16 × 128, descriptor).
__device__ __forceinline__ void g4_wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
#if defined(G4_WGMMA)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : G4_F16(0), G4_F16(16), G4_F16(32), G4_F16(48)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}

// e4m3 weights with one f32 scale per row: a W tile row is 64 bytes at a pitch of 80, where lane
// (g, t) of a warp reads byte pairs 2t and 2t + 8 of rows g and g + 8 without bank conflicts
// (80 bytes = 20 banks: rows g land on distinct banks).
struct E4m3Rows {
    typedef uint8_t Stored;
    static constexpr int PITCH = 80;
    // This lane's A fragments of one W tile, for the warp's 16 rows from `first_row`, one per k16
    // step, widened to bf16.
    __device__ static void fragments(const uint8_t* tile, int first_row, int lane, uint32_t (&a)[G4_WGMMA_BK / 16][4]) {
        const uint8_t* row = tile + (first_row + lane / 4) * PITCH + 2 * (lane % 4);
#pragma unroll
        for (int step = 0; step < G4_WGMMA_BK / 16; ++step) {
            const uint8_t* p = row + 16 * step;
            a[step][0] = g4_e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(p));
            a[step][1] = g4_e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(p + 8 * PITCH));
            a[step][2] = g4_e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(p + 8));
            a[step][3] = g4_e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(p + 8 * PITCH + 8));
        }
    }
    __device__ static float row_scale(const float* scale, int row) { return scale[row]; }
};

// bf16 weights: a W tile row is 128 bytes at a pitch of 144 (ldmatrix's 8 row addresses then
// fall on distinct banks), the fragments one ldmatrix.x4 a k16 step: matrices (rows 0–7, K 0–7),
// (8–15, 0–7), (0–7, 8–15), (8–15, 8–15) are registers 0–3 of the mma A fragment.
struct Bf16Rows {
    typedef g4_bf16 Stored;
    static constexpr int PITCH = 144;
    __device__ static void fragments(const uint8_t* tile, int first_row, int lane, uint32_t (&a)[G4_WGMMA_BK / 16][4]) {
        const uint8_t* row = tile + (first_row + lane % 8 + 8 * (lane / 8 % 2)) * PITCH + 16 * (lane / 16);
#pragma unroll
        for (int step = 0; step < G4_WGMMA_BK / 16; ++step) g4_ldmatrix_x4(a[step], row + 32 * step);
    }
    __device__ static float row_scale(const float*, int) { return 1.0f; }
};

template <typename W, int BN>
struct WgmmaTile {
    static constexpr int X_BYTES = BN * G4_WGMMA_BK * 2;
    static constexpr int W_ROW_BYTES = G4_WGMMA_BK * (int)sizeof(typename W::Stored);
    static constexpr int STAGE_BYTES = X_BYTES + G4_WGMMA_BM * W::PITCH;
    static_assert(STAGE_BYTES % 1024 == 0, "each stage's X tile starts on a 1,024-byte swizzle atom");
};

// Shared memory a launch needs: the stages, and room to align them to 1,024 bytes.
template <typename W, int BN, int STAGES>
constexpr int wgmma_gemm_shared_bytes() {
    return STAGES * WgmmaTile<W, BN>::STAGE_BYTES + 1024;
}

// Grid: (ceil(m / BN), n / 128); 256 threads. k % 64 == 0, rows of W and X 16-byte aligned.
// OVERLAP: a warpgroup widens the next tile's A while its wgmmas on this one run (two sets of A
// registers; copies run STAGES - 2 tiles ahead instead of STAGES - 1, since the stage a copy
// overwrites may be read by the wgmmas still in flight until one tile later).
// GEGLU: W is an MLP's packed [gate ‖ up] (n = 2d rows) and Y [m, d] = gelu_tanh(X·gateᵀ) ⊙
// X·upᵀ, rounded as g4's GEMM and gelu_and_mul round (each projection to bf16, then the GeLU).
// A block's warpgroups take 64 gate rows and the 64 up rows that pair with them; in the
// epilogue the up warpgroup hands its values over through shared memory, each thread to the
// thread of the gate warpgroup that holds the same (row, X row) positions.
template <typename W, int BN, int STAGES, bool OVERLAP, bool GEGLU = false>
__global__ void __launch_bounds__(G4_WGMMA_THREADS, BN == 128 && !OVERLAP ? 2 : 1)
    wgmma_gemm(const typename W::Stored* __restrict__ w, const float* __restrict__ scale, const g4_bf16* __restrict__ x,
               g4_bf16* __restrict__ y, int m, int n, int k) {
    static_assert(BN % 128 == 0, "B goes to wgmma in slices of 128 rows of X");
    static_assert(STAGES >= (OVERLAP ? 3 : 2), "a tile in flight beside the one computed");
    typedef WgmmaTile<W, BN> Tile;
    constexpr int SLICES = BN / 128;
    constexpr int AHEAD = OVERLAP ? STAGES - 2 : STAGES - 1;
    extern __shared__ uint8_t raw_shared[];
    uint8_t* shared = raw_shared + ((1024 - (unsigned)__cvta_generic_to_shared(raw_shared) % 1024) % 1024);
    const int m0 = blockIdx.x * BN, n0 = blockIdx.y * G4_WGMMA_BM;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int tiles = k / G4_WGMMA_BK;

    // The weight row behind row r of a W tile, and whether it exists.
    auto weight_row = [&](int r) { return GEGLU ? n0 / 2 + r % 64 + (r >= 64 ? n / 2 : 0) : n0 + r; };
    auto row_valid = [&](int r) { return GEGLU ? n0 / 2 + r % 64 < n / 2 : n0 + r < n; };
    auto load_tile = [&](int tile, int stage) {
        uint8_t* xs = shared + stage * Tile::STAGE_BYTES;
        uint8_t* ws = xs + Tile::X_BYTES;
        const int k0 = tile * G4_WGMMA_BK;
        for (int c = tid; c < BN * 8; c += G4_WGMMA_THREADS) {
            const int r = c / 8, chunk = c % 8;
            const bool valid = m0 + r < m;
            const g4_bf16* src = x + (size_t)(valid ? m0 + r : 0) * k + k0 + chunk * 8;
            g4_cp_async16(xs + r * 128 + (chunk ^ (r % 8)) * 16, src, valid);
        }
        constexpr int W_CHUNKS = Tile::W_ROW_BYTES / 16;
        for (int c = tid; c < G4_WGMMA_BM * W_CHUNKS; c += G4_WGMMA_THREADS) {
            const int r = c / W_CHUNKS, chunk = c % W_CHUNKS;
            const bool valid = row_valid(r);
            const uint8_t* src =
                reinterpret_cast<const uint8_t*>(w + (size_t)(valid ? weight_row(r) : 0) * k + k0) + chunk * 16;
            g4_cp_async16(ws + r * W::PITCH + chunk * 16, src, valid);
        }
    };

    float d[SLICES][64];
#pragma unroll
    for (int s = 0; s < SLICES; ++s)
#pragma unroll
        for (int i = 0; i < 64; ++i) d[s][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < tiles) load_tile(s, s);
        g4_cp_async_commit();
    }
    // This warp's first A row within a W tile: warpgroup (warp / 4) owns 64 rows, warp 16 of them.
    const int first_row = (warp / 4) * 64 + (warp % 4) * 16;
    // `a` takes this tile's A; `in_flight` holds the tile before's, read by its wgmmas until the
    // wait below (OVERLAP).
    auto compute_tile = [&](int tile, uint32_t (&a)[G4_WGMMA_BK / 16][4], uint32_t (&in_flight)[G4_WGMMA_BK / 16][4]) {
        g4_cp_async_wait<AHEAD - 1>();
        g4_fence_generic_to_async_shared();
        // Every thread's copies of this tile have landed, and every warpgroup is done with the
        // stage the next copy overwrites (its wgmmas waited for below).
        __syncthreads();
        const int next = tile + AHEAD;
        if (next < tiles) load_tile(next, next % STAGES);
        g4_cp_async_commit();

        const uint8_t* xs = shared + (tile % STAGES) * Tile::STAGE_BYTES;
        W::fragments(xs + Tile::X_BYTES, first_row, lane, a);
        // All of A is computed before the wgmmas start (the compiler would otherwise sink a step's
        // conversion to just before its wgmma, and ptxas then serialises the wgmmas).
#pragma unroll
        for (int step = 0; step < G4_WGMMA_BK / 16; ++step)
#pragma unroll
            for (int r = 0; r < 4; ++r) g4_keep(a[step][r]);
        g4_wgmma_fence();
#pragma unroll
        for (int step = 0; step < G4_WGMMA_BK / 16; ++step)
#pragma unroll
            for (int s = 0; s < SLICES; ++s)
                g4_wgmma_m64n128k16_rs(d[s], a[step], g4_wgmma_desc_sw128(xs + s * 128 * 128 + 32 * step));
        g4_wgmma_commit();
        g4_wgmma_wait<OVERLAP ? 1 : 0>();
        if (OVERLAP)
#pragma unroll
            for (int step = 0; step < G4_WGMMA_BK / 16; ++step)
#pragma unroll
                for (int r = 0; r < 4; ++r) g4_keep(in_flight[step][r]);
    };
    // Two sets of A registers, used in turn, so each tile's are fixed at compile time.
    uint32_t a_even[G4_WGMMA_BK / 16][4] = {}, a_odd[G4_WGMMA_BK / 16][4] = {};
    int tile = 0;
    for (; tile + 1 < tiles; tile += 2) {
        compute_tile(tile, a_even, a_odd);
        compute_tile(tile + 1, a_odd, a_even);
    }
    if (tile < tiles) compute_tile(tile, a_even, a_odd);
    g4_wgmma_wait<0>();
#pragma unroll
    for (int s = 0; s < SLICES; ++s)
#pragma unroll
        for (int i = 0; i < 64; ++i) g4_keep(d[s][i]);

    // d[s][i] is tile row `low` (`high` for i % 4 ≥ 2) and X row 128 s + 8 (i / 4) + 2 t (+ 1 for
    // odd i); each sum is scaled by its weight row's scale.
    const int low = first_row + g, high = low + 8;
    const float scale_low = row_valid(low) ? W::row_scale(scale, weight_row(low)) : 0.0f;
    const float scale_high = row_valid(high) ? W::row_scale(scale, weight_row(high)) : 0.0f;
    // GEGLU: the up warpgroup's rounded projections, [register][thread of the warpgroup], over the
    // pipeline's shared memory once every copy has landed and every wgmma has read it.
    float* up = reinterpret_cast<float*>(shared);
    const int me = tid % 128;
    if constexpr (GEGLU) {
        static_assert(SLICES * 64 * 128 * 4 <= STAGES * Tile::STAGE_BYTES, "the hand-over fits the pipeline's memory");
        g4_cp_async_wait<0>();
        __syncthreads();
        if (warp / 4 == 1) {
#pragma unroll
            for (int s = 0; s < SLICES; ++s)
#pragma unroll
                for (int i = 0; i < 64; ++i)
                    up[(s * 64 + i) * 128 + me] = g4_round<g4_bf16>(d[s][i] * (i % 4 >= 2 ? scale_high : scale_low));
        }
        __syncthreads();
        if (warp / 4 == 1) return;
    }
    const int cols = GEGLU ? n / 2 : n, first_col = GEGLU ? n0 / 2 : n0;
#pragma unroll
    for (int s = 0; s < SLICES; ++s)
#pragma unroll
        for (int i = 0; i < 64; ++i) {
            const int out_row = m0 + 128 * s + 8 * (i / 4) + 2 * t + (i & 1);
            const int out_col = first_col + (i % 4 >= 2 ? high : low);
            if (out_row >= m || out_col >= cols) continue;
            float value = d[s][i] * (i % 4 >= 2 ? scale_high : scale_low);
            if constexpr (GEGLU)
                value = g4_round<g4_bf16>(g4_gelu_tanh(g4_round<g4_bf16>(value))) * up[(s * 64 + i) * 128 + me];
            y[(size_t)out_row * cols + out_col] = g4_from_f32<g4_bf16>(value);
        }
}

#undef G4_F16
#undef G4_F4
