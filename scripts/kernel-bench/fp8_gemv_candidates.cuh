// A candidate for the FP8 decode GEMV that lost (stop 39, H200): e4m3 weights on tensor cores, for
// bf16 X. gemv.cuh's FP8 GEMV decodes every weight to f32 and multiplies it on the CUDA cores,
// about 3.5 instructions per byte read. Here mma.sync m16n8k32 e4m3 multiplies 16 weight rows by
// 32 of K in one instruction, with the weights as loaded. X must be e4m3 too: each row is split
// into two terms, x = s·(hi + lo/16) with s a power of two, which is exact for bf16 x over
// e4m3's range (hi keeps x's 4 leading significant bits, lo the next 4). The split runs in every
// block (X is a few KiB, from L2) while its first weight loads are in flight. Measured by
// fp8_gemv_bench beside g4's kernel it was slower on every E4B and 31B shape (E4B gate/up 24.6
// µs at best against 20.6; down 18.0 against 11.9), and E4B FP8 decode fell from 280 to 205
// tok/s with it in g4 (probe-ops passed it: NMSE 5.6e-6). The block-wide split before any
// multiply is a serial prologue of several µs in a kernel of 5–20 µs; a next try would convert
// X per chunk in the lanes that feed it, with one scale per chunk.
//
// A block owns G4_FP8_MMA_ROWS weight rows; its warps split K into chunks of 64 bytes, which
// lane (g, t) (g = lane / 4, t = lane % 4) reads as 16 bytes of row g and of row g + 8. The dot
// product does not care which K positions meet in one mma as long as X meets the same ones, so
// bytes 0–7 of those 16 are one mma's K and bytes 8–15 the next's, and X's fragments are read
// at the same offsets: A fragment (rows g, g+8; K 4t..4t+3, 16+4t..) = bytes 0–3 and 4–7, B
// fragment (column g = X row g) = X bytes 0–3 and 4–7 of that lane's 16. Each output column of
// the mma is a row of X.
#pragma once
#include "../../src/kernels/cuda/g4_compat.cuh"
#include "../../src/kernels/cuda/mma.cuh"

#if !defined(__HIPCC__)
#define G4_FP8_MMA_ROWS 16
#define G4_FP8_MMA_CHUNK 64
#define G4_FP8_MMA_MAX_WARPS 16

// The e4m3 instructions exist from sm_89 on; compiled for older targets these trap, and the
// host never launches them there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define G4_E4M3_TENSOR_CORES 1
#endif

// d += A·B over one m16n8k32 tile of e4m3, f32 sums.
__device__ __forceinline__ void g4_mma_e4m3(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
#if defined(G4_E4M3_TENSOR_CORES)
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

// Two f32 to two e4m3 (round to nearest even, saturating), `first` in the low byte.
__device__ __forceinline__ uint16_t g4_f32x2_to_e4m3x2(float first, float second) {
    uint16_t out = 0;
#if defined(G4_E4M3_TENSOR_CORES)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(out) : "f"(second), "f"(first));
#else
    __trap();
#endif
    return out;
}

// Two e4m3 (the low two bytes of `pair`, low byte first) as two f16, exactly.
__device__ __forceinline__ uint32_t g4_e4m3x2_to_f16x2(uint32_t pair) {
    uint32_t halves = 0;
#if defined(G4_E4M3_TENSOR_CORES)
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\t}" : "=r"(halves) : "r"(pair));
#else
    __trap();
#endif
    return halves;
}

// Two e4m3 (low byte first) back to f32, exactly.
__device__ __forceinline__ float2 g4_e4m3x2_to_f32x2(uint16_t bits) {
    const uint32_t halves = g4_e4m3x2_to_f16x2(bits);
    return __half22float2(*reinterpret_cast<const __half2*>(&halves));
}

// X's m rows as x = scale[r]·(hi + lo/16) in shared memory (hi, lo: [m, k] bytes). scale[r] is
// the least power of two at or above max|x_r| / 448, so x / scale is exact and within e4m3's
// range. Every thread of the block takes part.
__device__ __forceinline__ void g4_split_x_e4m3(const g4_bf16* x, int m, int k, uint8_t* hi, uint8_t* lo,
                                                float* scale) {
    for (int r = 0; r < m; ++r) {
        const g4_bf16* row = x + (size_t)r * k;
        float largest = 0.0f;
        for (int i = threadIdx.x; i < k; i += blockDim.x) largest = fmaxf(largest, fabsf(g4_to_f32(row[i])));
        largest = g4_block_max(largest);
        int exponent = 0;
        if (largest > 0.0f) frexpf(largest / 448.0f, &exponent);
        if (threadIdx.x == 0) scale[r] = ldexpf(1.0f, exponent);
        const float inverse = ldexpf(1.0f, -exponent);
        for (int i = 2 * threadIdx.x; i < k; i += 2 * blockDim.x) {
            const float v0 = g4_to_f32(row[i]) * inverse, v1 = g4_to_f32(row[i + 1]) * inverse;
            const uint16_t high = g4_f32x2_to_e4m3x2(v0, v1);
            const float2 h = g4_e4m3x2_to_f32x2(high);
            const uint16_t low = g4_f32x2_to_e4m3x2((v0 - h.x) * 16.0f, (v1 - h.y) * 16.0f);
            *reinterpret_cast<uint16_t*>(hi + (size_t)r * k + i) = high;
            *reinterpret_cast<uint16_t*>(lo + (size_t)r * k + i) = low;
        }
    }
}

// Partial sums of weight rows [first_row, first_row + 16) ∩ [.., end_row) over the chunks of K
// this warp takes (part, part + parts, …; batches of BATCH chunks loaded before use), into
// sums[warp][row − first_row][row of X]. Every thread of the block calls it once, together:
// it splits X into `split` (2·m·k bytes) and x_scale first, and ends with the block
// synchronised.
template <int MAX_ROWS, int BATCH>
__device__ void g4_fp8_mma_partials(const g4_bf16* x, const uint8_t* w, int first_row, int end_row, int part,
                                    int parts, int m, int k, uint8_t* split, float* x_scale,
                                    float (*sums)[G4_FP8_MMA_ROWS][MAX_ROWS]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int chunks = k / G4_FP8_MMA_CHUNK, stride = parts * BATCH;
    const bool has_low = first_row + g < end_row, has_high = first_row + g + 8 < end_row;
    const uint4* w_low = reinterpret_cast<const uint4*>(w + (size_t)(first_row + g) * k) + t;
    const uint4* w_high = reinterpret_cast<const uint4*>(w + (size_t)(first_row + g + 8) * k) + t;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint4 low[BATCH], high[BATCH];
    auto load = [&](int start) {
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int c = start + u * parts;
            low[u] = c < chunks && has_low ? w_low[c * (G4_FP8_MMA_CHUNK / 16)] : zero;
            high[u] = c < chunks && has_high ? w_high[c * (G4_FP8_MMA_CHUNK / 16)] : zero;
        }
    };
    // W is no kernel's output: its first batch is in flight before X is waited for and split.
    load(part);
    G4_WAIT_FOR_INPUTS();
    uint8_t *x_hi = split, *x_lo = split + (size_t)m * k;
    g4_split_x_e4m3(x, m, k, x_hi, x_lo, x_scale);
    __syncthreads();
    float sum_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int start = part; start < chunks; start += stride) {
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int c = start + u * parts;
            if (c >= chunks) break;
            const size_t at = (size_t)g * k + c * G4_FP8_MMA_CHUNK + 16 * t;
            const uint4 b_hi = g < m ? *reinterpret_cast<const uint4*>(x_hi + at) : zero;
            const uint4 b_lo = g < m ? *reinterpret_cast<const uint4*>(x_lo + at) : zero;
            // Each chunk's two tiles sum into fresh registers, added to the running sums in f32:
            // the tensor cores' own accumulation then spans 64 products only.
            float part_hi[4] = {0.0f, 0.0f, 0.0f, 0.0f}, part_lo[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            g4_mma_e4m3(part_hi, low[u].x, high[u].x, low[u].y, high[u].y, b_hi.x, b_hi.y);
            g4_mma_e4m3(part_hi, low[u].z, high[u].z, low[u].w, high[u].w, b_hi.z, b_hi.w);
            g4_mma_e4m3(part_lo, low[u].x, high[u].x, low[u].y, high[u].y, b_lo.x, b_lo.y);
            g4_mma_e4m3(part_lo, low[u].z, high[u].z, low[u].w, high[u].w, b_lo.z, b_lo.w);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                sum_hi[i] += part_hi[i];
                sum_lo[i] += part_lo[i];
            }
        }
        if (start + stride < chunks) load(start + stride);
    }
    // Lane (g, t) holds rows g and g + 8 for X rows 2t and 2t + 1.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i / 2) * 8, x_row = 2 * t + i % 2;
        if (x_row < MAX_ROWS) sums[warp][row][x_row] = sum_hi[i] + sum_lo[i] * (1.0f / 16.0f);
    }
    __syncthreads();
}

// Row `row` of the block's 16 for X row `x_row`: the partials of warps first .. first + parts.
template <int MAX_ROWS>
__device__ __forceinline__ float g4_fp8_mma_total(const float (*sums)[G4_FP8_MMA_ROWS][MAX_ROWS], int first,
                                                  int parts, int row, int x_row) {
    float total = 0.0f;
    for (int p = 0; p < parts; ++p) total += sums[first + p][row][x_row];
    return total;
}

// Y = X·(W × scale)ᵀ for bf16 X [m, k], e4m3 W [n, k]: one block per 16 rows of W, its warps
// splitting K; 2·m·k bytes of dynamic shared memory.
template <int MAX_ROWS, int BATCH>
__device__ void g4_gemv_fp8_mma(const g4_bf16* x, const uint8_t* w, const float* scale, g4_bf16* y, int m, int n,
                                int k) {
    extern __shared__ __align__(16) uint8_t g4_fp8_mma_split[];
    __shared__ float x_scale[MAX_ROWS];
    __shared__ float sums[G4_FP8_MMA_MAX_WARPS][G4_FP8_MMA_ROWS][MAX_ROWS];
    const int first_row = blockIdx.x * G4_FP8_MMA_ROWS, warps = blockDim.x / 32;
    g4_fp8_mma_partials<MAX_ROWS, BATCH>(x, w, first_row, n, threadIdx.x / 32, warps, m, k, g4_fp8_mma_split,
                                         x_scale, sums);
    for (int i = threadIdx.x; i < G4_FP8_MMA_ROWS * m; i += blockDim.x) {
        const int row = i / m, x_row = i % m, col = first_row + row;
        if (col >= n) continue;
        const float total = g4_fp8_mma_total<MAX_ROWS>(sums, 0, warps, row, x_row);
        y[(size_t)x_row * n + col] = g4_from_f32<g4_bf16>(total * scale[col] * x_scale[x_row]);
    }
}


// A second tensor-core candidate (stop 42), without the block-wide prologue: mma.sync m16n8k16
// on f16. Each e4m3 pair becomes an f16 pair in one instruction (exactly), and each lane converts
// only the X values its own fragment needs, per chunk, in registers: bf16 → f16 is exact for
// |x| in [2^-17, 2^16) (below, f16's subnormals round it by at most 2^-25; from 2^16 up f16
// overflows, so a warp whose chunk holds such an x sums that chunk on the CUDA cores instead).
// The lane layout is the first candidate's: lane (g, t) reads 16 bytes of rows g and g + 8 at
// byte 16t of a 64-byte chunk; word s of those 16 bytes is mma s of the chunk's 4, whose A pairs
// are its bytes (0, 1) and (2, 3), and whose B pairs are X's values at the same K.
#define G4_FP8_MMA16_CHUNK 64

// Two bf16 (low half first) as two f16; `overflow` set when either is 2^16 or more in magnitude.
__device__ __forceinline__ uint32_t g4_bf16x2_to_f16x2(uint32_t bits, bool& overflow) {
    overflow |= (bits & 0x7fffu) >= 0x4780u || (bits & 0x7fff0000u) >= 0x47800000u;
    const __half2 h = __floats2half2_rn(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
    return *reinterpret_cast<const uint32_t*>(&h);
}

// Y = X·(W × scale)ᵀ for bf16 X [m, k], e4m3 W [n, k] (k a multiple of 64): each warp takes 16
// rows of W and the chunks part, part + parts, … of K (BATCH chunks loaded before use); a block
// holds blockDim / 32 / parts such row groups.
template <int MAX_ROWS, int BATCH>
__device__ void g4_gemv_fp8_mma16(const g4_bf16* x, const uint8_t* w, const float* scale, g4_bf16* y, int m,
                                  int n, int k, int parts) {
    __shared__ float sums[32][16][MAX_ROWS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int groups_per_block = blockDim.x / 32 / parts;
    const int first_row = (blockIdx.x * groups_per_block + warp / parts) * 16, part = warp % parts;
    const int chunks = k / G4_FP8_MMA16_CHUNK;
    const bool has_low = first_row + g < n, has_high = first_row + g + 8 < n;
    const uint4* w_low = reinterpret_cast<const uint4*>(w + (size_t)(first_row + g) * k) + t;
    const uint4* w_high = reinterpret_cast<const uint4*>(w + (size_t)(first_row + g + 8) * k) + t;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // One accumulator per mma of a chunk: four independent chains.
    float d[4][4] = {};
    // CUDA-core sums of chunks whose X overflows f16: rows g, g + 8 for each X row.
    float spill[2][MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) spill[0][r] = spill[1][r] = 0.0f;
    bool waited = false;
    for (int start = part; start < chunks; start += parts * BATCH) {
        uint4 low[BATCH], high[BATCH], x0[BATCH], x1[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int c = start + u * parts;
            low[u] = c < chunks && has_low ? w_low[c * (G4_FP8_MMA16_CHUNK / 16)] : zero;
            high[u] = c < chunks && has_high ? w_high[c * (G4_FP8_MMA16_CHUNK / 16)] : zero;
        }
        if (!waited) {
            G4_WAIT_FOR_INPUTS();
            waited = true;
        }
        // X for the whole batch, in flight together (lanes of X rows past m hold zeros).
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int c = start + u * parts;
            const bool valid = c < chunks && g < m;
            const uint4* xv = reinterpret_cast<const uint4*>(x + (size_t)g * k + (size_t)c * G4_FP8_MMA16_CHUNK + 16 * t);
            x0[u] = valid ? xv[0] : zero;
            x1[u] = valid ? xv[1] : zero;
        }
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const int c = start + u * parts;
            if (c >= chunks) break;
            const size_t at = (size_t)c * G4_FP8_MMA16_CHUNK + 16 * t;
            uint32_t b[8];
            bool overflow = false;
            const uint32_t words[8] = {x0[u].x, x0[u].y, x0[u].z, x0[u].w, x1[u].x, x1[u].y, x1[u].z, x1[u].w};
#pragma unroll
            for (int j = 0; j < 8; ++j) b[j] = g4_bf16x2_to_f16x2(words[j], overflow);
            const uint32_t wl[4] = {low[u].x, low[u].y, low[u].z, low[u].w};
            const uint32_t wh[4] = {high[u].x, high[u].y, high[u].z, high[u].w};
            if (__any_sync(0xffffffffu, overflow)) {
#pragma unroll
                for (int r = 0; r < MAX_ROWS; ++r) {
                    if (r >= m) break;
                    const g4_bf16* xr = x + (size_t)r * k + at;
                    for (int e = 0; e < 16; ++e) {
                        const float xe = g4_to_f32(xr[e]);
                        const uint32_t lw = (wl[e / 4] >> (8 * (e % 4))) & 0xffu, hw = (wh[e / 4] >> (8 * (e % 4))) & 0xffu;
                        const uint32_t lh = g4_e4m3x2_to_f16x2(lw), hh = g4_e4m3x2_to_f16x2(hw);
                        spill[0][r] += xe * __half2float(__ushort_as_half((unsigned short)(lh & 0xffffu)));
                        spill[1][r] += xe * __half2float(__ushort_as_half((unsigned short)(hh & 0xffffu)));
                    }
                }
                continue;
            }
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const unsigned a[4] = {g4_e4m3x2_to_f16x2(wl[s] & 0xffffu), g4_e4m3x2_to_f16x2(wh[s] & 0xffffu),
                                       g4_e4m3x2_to_f16x2(wl[s] >> 16), g4_e4m3x2_to_f16x2(wh[s] >> 16)};
                g4_mma_16816<g4_f16>(d[s], a, b[2 * s], b[2 * s + 1]);
            }
        }
    }
    if (!waited) G4_WAIT_FOR_INPUTS();
    // The spilled sums of the group's 4 lanes, then lane (g, t) holds rows g, g + 8 for X rows
    // 2t and 2t + 1.
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            spill[h][r] += __shfl_xor_sync(0xffffffffu, spill[h][r], 1);
            spill[h][r] += __shfl_xor_sync(0xffffffffu, spill[h][r], 2);
        }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i / 2) * 8, x_row = 2 * t + i % 2;
        float extra = 0.0f;
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r)
            if (r == x_row) extra = spill[i / 2][r];
        if (x_row < MAX_ROWS) sums[warp][row][x_row] = (d[0][i] + d[1][i]) + (d[2][i] + d[3][i]) + extra;
    }
    __syncthreads();
    if (part != 0) return;
    for (int i = lane; i < 16 * m; i += 32) {
        const int row = i / m, x_row = i % m, col = first_row + row;
        if (col >= n) continue;
        float total = 0.0f;
        for (int p = 0; p < parts; ++p) total += sums[warp + p][row][x_row];
        y[(size_t)x_row * n + col] = g4_from_f32<g4_bf16>(total * scale[col]);
    }
}

#endif
