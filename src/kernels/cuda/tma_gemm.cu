// The Hopper GEMM's entry points (tma_gemm.cuh; host side src/kernels/tma_gemm.rs): many rows of
// X against e4m3 weights, one block a multiprocessor; tiles of 128 weight rows by 128 X rows in
// 6 stages (147 KiB of shared memory) or, `_wide`, by 256 X rows in 5 (201 KiB) for GEMMs with
// tiles to spare (H100, E4B's gate/up at 512 rows: 87.3 µs against 97.5), or, `_wide_then_narrow`,
// wide tiles for their whole waves and 128-row ones for the rest (the same: 80.4 µs). The host
// launches them on compute capability 9.0 only; built for anything else they trap.
#include "tma_gemm.cuh"
#if !defined(__HIPCC__)

// Every entry comes for bf16 X (`_bf16`) and for f16 X (`_f16`): rows on a power-of-two scale
// each, which x_scale undoes on the sums, against e4m3 widened to f16 in one instruction a pair
// (dual_rms_norm_plus_res_f16 writes such rows for q/k/v and gate/up).
#define G4_TMA_WEIGHTS_bf16 g4_tma::E4m3Weights
#define G4_TMA_WEIGHTS_f16 g4_tma::E4m3WeightsF16
#define G4_TMA_X_SCALE_PARAM_bf16
#define G4_TMA_X_SCALE_PARAM_f16 , const float* x_scale
#define G4_TMA_X_SCALE_bf16 nullptr
#define G4_TMA_X_SCALE_f16 x_scale

// matmul_bt_fp8_channel: e4m3 weights widened in registers on their way into the tensor cores,
// each row's scale on its sums; with `slices` > 1, slice z's f32 sums go to partial + z·m·n.
// fp8_gelu_and_mul: the same over an MLP's packed [gate ‖ up] (n = 2d rows), the GeGLU product
// as the epilogue: y [m, d], rounded as the GEMM followed by gelu_and_mul rounds; one slice of K.
#define G4_TMA_GEMM_ENTRIES(SUFFIX, ROWS, STAGES, X)                                                                \
    extern "C" __global__ void __launch_bounds__(g4_tma::THREADS, 1) g4_matmul_bt_fp8_channel_tma##SUFFIX##_##X(    \
        const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map, const float* scale,   \
        g4_bf16* y, float* partial, int m, int n, int k, int slices G4_TMA_X_SCALE_PARAM_##X) {                    \
        G4_KERNEL_START();                                                                                          \
        g4_tma::gemm_all<G4_TMA_WEIGHTS_##X, ROWS, STAGES>(&x_map, &w_map, scale, y, partial, m, n, k, slices,     \
                                                          G4_TMA_X_SCALE_##X);                                     \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(g4_tma::THREADS, 1) g4_fp8_gelu_and_mul_tma##SUFFIX##_##X(         \
        const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map, const float* scale,   \
        g4_bf16* y, int m, int n, int k G4_TMA_X_SCALE_PARAM_##X) {                                                \
        G4_KERNEL_START();                                                                                          \
        g4_tma::gemm_all<G4_TMA_WEIGHTS_##X, ROWS, STAGES, true>(&x_map, &w_map, scale, y, nullptr, m, n, k, 1,    \
                                                                G4_TMA_X_SCALE_##X);                               \
    }

// matmul_bt_fp8_channel in tiles of 64, 96 or 112 X rows (6 stages, one slice): for GEMMs whose
// 128-row tiles fill less than one wave, the narrowest tiles that still fill it at most once.
#define G4_TMA_GEMM_SUB_WAVE(ROWS, X)                                                                               \
    extern "C" __global__ void __launch_bounds__(g4_tma::THREADS, 1) g4_matmul_bt_fp8_channel_tma_rows##ROWS##_##X( \
        const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map, const float* scale,   \
        g4_bf16* y, float* partial, int m, int n, int k, int slices G4_TMA_X_SCALE_PARAM_##X) {                    \
        G4_KERNEL_START();                                                                                          \
        g4_tma::gemm_all<G4_TMA_WEIGHTS_##X, ROWS, g4_tma::NARROW_STAGES>(&x_map, &w_map, scale, y, partial, m, n, \
                                                                          k, slices, G4_TMA_X_SCALE_##X);          \
    }

// Both, wide tiles over the first `wide_outputs` outputs and 128-row ones over the rest
// (gemm_wide_then_narrow): wide_x_map's box is 64 × 256 rows of X, x_map's 64 × 128.
#define G4_TMA_GEMM_WIDE_THEN_NARROW(X)                                                                             \
    extern "C" __global__ void __launch_bounds__(g4_tma::THREADS, 1)                                                \
        g4_matmul_bt_fp8_channel_tma_wide_then_narrow_##X(                                                          \
            const __grid_constant__ CUtensorMap wide_x_map, const __grid_constant__ CUtensorMap x_map,              \
            const __grid_constant__ CUtensorMap w_map, const float* scale, g4_bf16* y, int m, int n, int k,         \
            int wide_outputs G4_TMA_X_SCALE_PARAM_##X) {                                                            \
        G4_KERNEL_START();                                                                                          \
        g4_tma::gemm_wide_then_narrow<G4_TMA_WEIGHTS_##X>(&wide_x_map, &x_map, &w_map, scale, y, m, n, k,           \
                                                          wide_outputs, G4_TMA_X_SCALE_##X);                       \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(g4_tma::THREADS, 1) g4_fp8_gelu_and_mul_tma_wide_then_narrow_##X( \
        const __grid_constant__ CUtensorMap wide_x_map, const __grid_constant__ CUtensorMap x_map,                  \
        const __grid_constant__ CUtensorMap w_map, const float* scale, g4_bf16* y, int m, int n, int k,             \
        int wide_outputs G4_TMA_X_SCALE_PARAM_##X) {                                                                \
        G4_KERNEL_START();                                                                                          \
        g4_tma::gemm_wide_then_narrow<G4_TMA_WEIGHTS_##X, true>(&wide_x_map, &x_map, &w_map, scale, y, m, n, k,     \
                                                                wide_outputs, G4_TMA_X_SCALE_##X);                 \
    }

#define G4_TMA_GEMMS(X)                                      \
    G4_TMA_GEMM_ENTRIES(, 128, g4_tma::NARROW_STAGES, X)     \
    G4_TMA_GEMM_ENTRIES(_wide, 256, g4_tma::WIDE_STAGES, X)  \
    G4_TMA_GEMM_SUB_WAVE(64, X)                              \
    G4_TMA_GEMM_SUB_WAVE(96, X)                              \
    G4_TMA_GEMM_SUB_WAVE(112, X)                             \
    G4_TMA_GEMM_WIDE_THEN_NARROW(X)
G4_TMA_GEMMS(bf16)
G4_TMA_GEMMS(f16)

// Y = the K slices' f32 partial sums, added in order and rounded to bf16 (count % 4 == 0).
extern "C" __global__ void g4_tma_gemm_sum_slices_bf16(const float* partial, g4_bf16* y, int slices, size_t count) {
    G4_KERNEL_START();
    g4_tma::sum_slices(partial, y, slices, count);
}
#endif
