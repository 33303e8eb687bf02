// Issue #17's prefill question at E4B's projection shapes (512 tokens; and 31B's MLP gate/up):
// what a GEMM over e4m3 weights with one f32 scale per row costs, against bf16's cuBLAS GEMM on
// the same weights dequantised once (what a bf16 checkpoint runs). Paths, each timed as a CUDA
// graph and checked against an f64 product of the exact e4m3 weights and bf16 inputs (16 rows,
// every column):
//   bf16        cuBLASLt bf16 GEMM on pre-dequantised weights (the bf16 checkpoint's cost)
//   dequant     g4's dequant_fp8_channel into a scratch weight, then the bf16 GEMM (g4 today)
//   fp8 x2      X split per row into two e4m3 terms (hi + lo/16, exact for bf16 inputs over
//               e4m3's range), two FP8 tensor-core GEMMs with the row scales as cuBLASLt outer
//               vectors, lo first so that hi's accumulates onto it (C = D, beta 1)
//   fp8 x1      the hi term alone (W8A8 as vLLM runs it): the speed such a GEMM could reach,
//               at e4m3's precision for the activations; then the same with each of the
//               algorithms cuBLASLt's heuristic offers (up to 16), to see whether its first is
//               its fastest
//   slices      dequant_fp8_channel and the bf16 GEMM over S slices of the weight's rows in
//               turn, through one scratch slice small enough to stay in L2 (the GEMM reads the
//               dequantised slice from L2 instead of HBM)
//   tma         src/kernels/cuda/tma_gemm.cuh: a warp-specialised TMA + wgmma pipeline, e4m3
//               widened to bf16 in registers on its way into Hopper's bf16 tensor cores (each
//               row's scale on its sums), 64–256 rows of X a block, K in 1–4 slices (the
//               tilings tma_gemm.rs's `tiling` and `narrow_split` choose among, and the wide
//               then narrow one); two probes with the widening left out; and the same pipeline
//               over the dequantised bf16 weights (how far the pipeline is from cuBLAS apart
//               from the widening).
//   tma e4m3→f16  the same pipeline with e4m3 widened to f16 (one instruction a pair, not
//               four) against X in f16, and what a pass making that X from bf16 would cost.
// For the MLP's gate/up, also its GeGLU product: the GEMM then g4's gelu_and_mul (a bf16
// checkpoint's prefill) against the TMA GEMM with the product as its epilogue (FP8 prefill's).
// cuBLASLt is loaded at run time (the compiler wheels have no cuBLAS headers); the enum values
// are cublasLt.h's (CUDA 13); the data types come from the runtime's library_types.h.
#include <dlfcn.h>
#include <cuda_fp8.h>
#include "bench_common.cuh"
#include "../../src/kernels/cuda/fp8.cu"
#include "../../src/kernels/cuda/tma_gemm.cu"
#include "../../src/kernels/cuda/elementwise.cu"
#include <cudaTypedefs.h>

enum : int {
    COMPUTE_32F = 68,
    DESC_TRANSA = 3,
    DESC_TRANSB = 4,
    DESC_A_SCALE_POINTER = 17,
    DESC_B_SCALE_POINTER = 18,
    DESC_A_SCALE_MODE = 31,
    DESC_B_SCALE_MODE = 32,
    SCALE_OUTER_VEC_32F = 3,
    PREF_MAX_WORKSPACE_BYTES = 1,
};

struct HeuristicResult {
    uint64_t algo[8];
    size_t workspace;
    int state;
    float waves;
    int reserved[4];
};

struct Lt {
    void* handle = nullptr;
    int (*create)(void**);
    int (*desc_create)(void**, int, int);
    int (*desc_set)(void*, int, const void*, size_t);
    int (*layout_create)(void**, int, uint64_t, uint64_t, int64_t);
    int (*pref_create)(void**);
    int (*pref_set)(void*, int, const void*, size_t);
    int (*heuristic)(void*, void*, void*, void*, void*, void*, void*, int, HeuristicResult*, int*);
    int (*matmul)(void*, void*, const void*, const void*, void*, const void*, void*, const void*, const void*, void*,
                  void*, void*, const void*, void*, size_t, cudaStream_t);
    void* workspace = nullptr;
    static constexpr size_t WORKSPACE = 32 << 20;

    bool load() {
        void* lib = dlopen("libcublasLt.so.13", RTLD_NOW);
        if (!lib) return false;
        create = (decltype(create))dlsym(lib, "cublasLtCreate");
        desc_create = (decltype(desc_create))dlsym(lib, "cublasLtMatmulDescCreate");
        desc_set = (decltype(desc_set))dlsym(lib, "cublasLtMatmulDescSetAttribute");
        layout_create = (decltype(layout_create))dlsym(lib, "cublasLtMatrixLayoutCreate");
        pref_create = (decltype(pref_create))dlsym(lib, "cublasLtMatmulPreferenceCreate");
        pref_set = (decltype(pref_set))dlsym(lib, "cublasLtMatmulPreferenceSetAttribute");
        heuristic = (decltype(heuristic))dlsym(lib, "cublasLtMatmulAlgoGetHeuristic");
        matmul = (decltype(matmul))dlsym(lib, "cublasLtMatmul");
        if (!create || !desc_create || !desc_set || !layout_create || !pref_create || !pref_set || !heuristic ||
            !matmul || create(&handle) != 0)
            return false;
        CHECK(cudaMalloc(&workspace, WORKSPACE));
        return true;
    }
};

// One planned row-major Y[m, n] = X[m, k] · W[n, k]ᵀ (column-major Yᵀ = Wᵀ·X: A = W transposed,
// B = X, the TN layout FP8 requires), optionally with outer-vector scales and C = D.
struct Gemm {
    Lt* lt;
    void *desc, *a_layout, *b_layout, *d_layout;
    HeuristicResult plan;
    int status = -1;

    // `ldy`: Y's row pitch, n unless Y's columns are a slice of a wider Y.
    Gemm(Lt* lt, int input_type, int m, int n, int k, const float* w_scale, const float* x_scale, int ldy = 0)
        : lt(lt) {
        const int trans = 1, no_trans = 0;
        if (lt->desc_create(&desc, COMPUTE_32F, CUDA_R_32F) != 0) return;
        lt->desc_set(desc, DESC_TRANSA, &trans, 4);
        lt->desc_set(desc, DESC_TRANSB, &no_trans, 4);
        if (w_scale) {
            const int mode = SCALE_OUTER_VEC_32F;
            lt->desc_set(desc, DESC_A_SCALE_MODE, &mode, 4);
            lt->desc_set(desc, DESC_B_SCALE_MODE, &mode, 4);
            lt->desc_set(desc, DESC_A_SCALE_POINTER, &w_scale, 8);
            lt->desc_set(desc, DESC_B_SCALE_POINTER, &x_scale, 8);
        }
        lt->layout_create(&a_layout, input_type, k, n, k);
        lt->layout_create(&b_layout, input_type, k, m, k);
        lt->layout_create(&d_layout, CUDA_R_16BF, n, m, ldy > 0 ? ldy : n);
        void* pref;
        lt->pref_create(&pref);
        const size_t workspace = Lt::WORKSPACE;
        lt->pref_set(pref, PREF_MAX_WORKSPACE_BYTES, &workspace, 8);
        int found = 0;
        status = lt->heuristic(lt->handle, desc, a_layout, b_layout, d_layout, d_layout, pref, 1, &plan, &found);
        if (status == 0 && found == 0) status = -2;
    }

    int run(const void* w, const void* x, void* y, float alpha, float beta, cudaStream_t stream) {
        return run_with(plan, w, x, y, alpha, beta, stream);
    }

    int run_with(const HeuristicResult& algo, const void* w, const void* x, void* y, float alpha, float beta,
                 cudaStream_t stream) {
        return lt->matmul(lt->handle, desc, &alpha, w, a_layout, x, b_layout, &beta, y, d_layout, y, d_layout, algo.algo,
                          lt->workspace, Lt::WORKSPACE, stream);
    }

    // cuBLASLt's first `count` algorithms for this GEMM, best first by its heuristic (the plan
    // above is the first).
    std::vector<HeuristicResult> candidates(int count) {
        std::vector<HeuristicResult> found(count);
        void* pref;
        lt->pref_create(&pref);
        const size_t workspace = Lt::WORKSPACE;
        lt->pref_set(pref, PREF_MAX_WORKSPACE_BYTES, &workspace, 8);
        int n = 0;
        if (lt->heuristic(lt->handle, desc, a_layout, b_layout, d_layout, d_layout, pref, count, found.data(), &n) != 0)
            n = 0;
        found.resize(n);
        return found;
    }
};

// The largest |x| of a bf16 row of k, as every thread of the block sees it.
__device__ float block_abs_max(const bf* row, int k) {
    float amax = 0.0f;
    for (int i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(__bfloat162float(row[i])));
    __shared__ float partial[32];
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
    __syncthreads();
    amax = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) amax = fmaxf(amax, partial[w]);
    return amax;
}

// Per row of X: scale = the power of two that brings the row's largest |x| to at most 448, hi =
// e4m3(x / scale), lo = e4m3(16·(x / scale − hi)). For bf16 x, hi keeps 4 significant bits and
// lo the next 4, so hi + lo/16 is x / scale exactly unless x / scale falls below e4m3's normals.
__global__ void split_rows(const bf* x, __nv_fp8_e4m3* hi, __nv_fp8_e4m3* lo, float* scale, int k) {
    const bf* row = x + (size_t)blockIdx.x * k;
    const float amax = block_abs_max(row, k);
    const float s = amax > 0.0f ? exp2f(ceilf(log2f(amax / 448.0f))) : 1.0f;
    if (threadIdx.x == 0) scale[blockIdx.x] = s;
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        const float v = __bfloat162float(row[i]) / s;
        const __nv_fp8_e4m3 h(v);
        hi[(size_t)blockIdx.x * k + i] = h;
        lo[(size_t)blockIdx.x * k + i] = __nv_fp8_e4m3((v - float(h)) * 16.0f);
    }
}

__global__ void scale_by(const float* in, float* out, int count, float factor) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = in[i] * factor;
}

// cuTensorMapEncodeTiled, from the driver through the runtime (no libcuda to link here).
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) {
        fprintf(stderr, "cuTensorMapEncodeTiled: not found\n");
        exit(1);
    }
    return (PFN_cuTensorMapEncodeTiled_v12000)function;
}

// A row-major [outer, inner] matrix as TMA boxes of box_inner × box_outer elements.
static CUtensorMap tensor_map(CUtensorMapDataType type, int element_bytes, const void* base, int inner, int outer,
                              int box_inner, int box_outer, CUtensorMapSwizzle swizzle) {
    static const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t pitch[1] = {(cuuint64_t)inner * element_bytes};
    const cuuint32_t box[2] = {(cuuint32_t)box_inner, (cuuint32_t)box_outer};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult status = encode(&map, type, 2, const_cast<void*>(base), dims, pitch, box, element_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (status != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: error %d (%d × %d, box %d × %d)\n", (int)status, outer, inner,
                box_outer, box_inner);
        exit(1);
    }
    return map;
}

// tma_gemm.cuh's GEMM in one configuration: W's type, X rows a block, pipeline stages, epilogue.
template <typename W, int BN, int STAGES, bool GEGLU = false>
__global__ void __launch_bounds__(g4_tma::THREADS, 1)
    tma_gemm_variant(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                     const float* scale, bf* y, float* partial, int m, int n, int k, int slices) {
    g4_tma::gemm_all<W, BN, STAGES, GEGLU>(&x_map, &w_map, scale, y, partial, m, n, k, slices);
}

// tma_gemm.rs's `tiling`: the outputs wide tiles take when a GEMM of `outputs` (`per_block` a
// block) would fill the GPU at least twice with them and leave its last wide wave at most half
// full; 0 where it takes one kind of tile.
static int wide_then_narrow_outputs(int m, int outputs, int per_block, int sms) {
    const int x_tiles = (m + 255) / 256, wide_tiles = x_tiles * ((outputs + per_block - 1) / per_block);
    const int last_wave = wide_tiles % sms;
    if (wide_tiles < 2 * sms || last_wave == 0 || 2 * last_wave > sms) return 0;
    const int wide_outputs = (wide_tiles - last_wave) / x_tiles * per_block;
    return wide_outputs < outputs ? wide_outputs : 0;
}
static int wide_then_narrow_blocks(int m, int outputs, int per_block, int wide_outputs) {
    return (m + 255) / 256 * (wide_outputs / per_block) +
           (m + 127) / 128 * ((outputs - wide_outputs + per_block - 1) / per_block);
}

// One configuration: kernel, X rows a block, shared memory, K slices, its name.
template <typename W>
struct TmaVariant {
    typedef W Weights;
    void (*kernel)(const CUtensorMap, const CUtensorMap, const float*, bf*, float*, int, int, int, int);
    int rows, shared_bytes, slices;
    const char* path;
};
#define G4_TMA_VARIANT(W, BN, STAGES, SLICES, PATH) \
    {tma_gemm_variant<W, BN, STAGES>, BN, g4_tma::shared_bytes<W, BN, STAGES>(), SLICES, PATH}
const TmaVariant<g4_tma::E4m3Weights> E4M3_VARIANTS[] = {
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 128, 6, 1, "tma e4m3 128×128, 6 stages"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 128, 8, 1, "tma e4m3 128×128, 8 stages"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 256, 5, 1, "tma e4m3 128×256, 5 stages"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 128, 6, 2, "tma e4m3 128×128, K in 2"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 128, 6, 3, "tma e4m3 128×128, K in 3"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 128, 6, 4, "tma e4m3 128×128, K in 4"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 112, 6, 1, "tma e4m3 128×112"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 96, 6, 1, "tma e4m3 128×96"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 64, 6, 1, "tma e4m3 128×64"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 256, 5, 2, "tma e4m3 128×256, K in 2"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 256, 5, 3, "tma e4m3 128×256, K in 3"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 256, 5, 4, "tma e4m3 128×256, K in 4"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 112, 6, 2, "tma e4m3 128×112, K in 2"),
    G4_TMA_VARIANT(g4_tma::E4m3Weights, 96, 6, 2, "tma e4m3 128×96, K in 2"),
};
// Timing probes whose outputs are wrong by design: the e4m3 pipeline (A from registers) with
// the widening left out, to tell what of its cost over the bf16 pipeline (A by descriptor) is
// the widening's instructions and what is A coming from registers (stop 65, H100: with A
// constant the pipeline ties cuBLAS at E4B's gate/up; g4's widening then scaled each weight,
// 1.26× that time, without the scale 1.18×).
//   const A    no shared-memory reads and no conversion: A is a constant a tile
//   raw A      the bytes read as E4m3Weights reads them, packed without conversion
struct E4m3ConstA : g4_tma::E4m3Weights {
    __device__ static void fragments(const uint8_t* tile, int, int, uint32_t (&a)[g4_tma::BK / 16][4]) {
        const uint32_t value = 0x3c003c00u ^ (g4_tma::shared_address(tile) & 0x400u);
#pragma unroll
        for (int step = 0; step < g4_tma::BK / 16; ++step)
#pragma unroll
            for (int r = 0; r < 4; ++r) a[step][r] = value;
    }
};
struct E4m3RawA : g4_tma::E4m3Weights {
    __device__ static void fragments(const uint8_t* tile, int first_row, int lane, uint32_t (&a)[g4_tma::BK / 16][4]) {
        const int g = lane / 4, t = lane % 4, phase = g / 2 % 4;
        const uint8_t* low = tile + (first_row + g) * g4_tma::BK + 2 * t;
        const uint8_t* high = low + 8 * g4_tma::BK;
        auto raw = [](const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p) * 0x10001u; };
#pragma unroll
        for (int step = 0; step < g4_tma::BK / 16; ++step) {
            const int chunk = 16 * (step ^ phase);
            a[step][0] = raw(low + chunk);
            a[step][1] = raw(high + chunk);
            a[step][2] = raw(low + chunk + 8);
            a[step][3] = raw(high + chunk + 8);
        }
    }
};
const TmaVariant<E4m3ConstA> CONST_A_VARIANTS[] = {
    G4_TMA_VARIANT(E4m3ConstA, 128, 6, 1, "probe: const A 128×128 (wrong)"),
};
const TmaVariant<E4m3RawA> RAW_A_VARIANTS[] = {
    G4_TMA_VARIANT(E4m3RawA, 128, 6, 1, "probe: raw A 128×128 (wrong)"),
};
// e4m3 widened to f16 (one instruction a pair) against X in f16: the candidate for closing the
// widening's cost; its X is this bench's bf16 X converted once (exact over f16's range).
const TmaVariant<g4_tma::E4m3WeightsF16> E4M3_F16_VARIANTS[] = {
    G4_TMA_VARIANT(g4_tma::E4m3WeightsF16, 128, 6, 1, "tma e4m3→f16 128×128, 6 stages"),
    G4_TMA_VARIANT(g4_tma::E4m3WeightsF16, 256, 5, 1, "tma e4m3→f16 128×256, 5 stages"),
    G4_TMA_VARIANT(g4_tma::E4m3WeightsF16, 112, 6, 1, "tma e4m3→f16 128×112"),
    G4_TMA_VARIANT(g4_tma::E4m3WeightsF16, 96, 6, 1, "tma e4m3→f16 128×96"),
    G4_TMA_VARIANT(g4_tma::E4m3WeightsF16, 64, 6, 1, "tma e4m3→f16 128×64"),
    G4_TMA_VARIANT(g4_tma::E4m3WeightsF16, 256, 5, 2, "tma e4m3→f16 128×256, K in 2"),
    G4_TMA_VARIANT(g4_tma::E4m3WeightsF16, 256, 5, 3, "tma e4m3→f16 128×256, K in 3"),
};
// What an f16 X would cost if made by a pass of its own (rather than by the norm before the GEMM):
// per row, the power of two that brings its largest |x| to at most 2^15, and x times it in f16
// (exact for every x at least 2^-28 of that largest, which lands in f16's normals).
__global__ void bf16_rows_to_f16(const bf* x, __half* out, float* scale, int k) {
    const bf* row = x + (size_t)blockIdx.x * k;
    const float amax = block_abs_max(row, k);
    const float s = amax > 0.0f ? exp2f(floorf(log2f(32768.0f / amax))) : 1.0f;
    if (threadIdx.x == 0) scale[blockIdx.x] = 1.0f / s;
    for (int i = threadIdx.x; i < k; i += blockDim.x)
        out[(size_t)blockIdx.x * k + i] = __float2half_rn(__bfloat162float(row[i]) * s);
}
// gemm_wide_then_narrow for weights whose entry point g4 does not have; x_scale as gemm_block's.
template <typename W, bool GEGLU>
__global__ void __launch_bounds__(g4_tma::THREADS, 1)
    wide_then_narrow_variant(const __grid_constant__ CUtensorMap wide_x_map, const __grid_constant__ CUtensorMap x_map,
                             const __grid_constant__ CUtensorMap w_map, const float* scale, bf* y, int m, int n, int k,
                             int wide_outputs, const float* x_scale) {
    g4_tma::gemm_wide_then_narrow<W, GEGLU>(&wide_x_map, &x_map, &w_map, scale, y, m, n, k, wide_outputs, x_scale);
}
const TmaVariant<g4_tma::Bf16Weights> BF16_VARIANTS[] = {
    G4_TMA_VARIANT(g4_tma::Bf16Weights, 128, 6, 1, "tma bf16 128×128, 6 stages"),
    G4_TMA_VARIANT(g4_tma::Bf16Weights, 256, 4, 1, "tma bf16 128×256, 4 stages"),
    G4_TMA_VARIANT(g4_tma::Bf16Weights, 128, 6, 2, "tma bf16 128×128, K in 2"),
};

int main() {
    // Line by line, so that a path that hangs (a pipeline deadlock) is the one after the last line.
    setvbuf(stdout, nullptr, _IOLBF, 0);
    Bench bench;
    Lt lt;
    if (!lt.load()) {
        printf("libcublasLt.so.13 not loaded\n");
        return 1;
    }
    // Checked rows of Y: 33 apart, so every tile of X rows and every row within a swizzle atom
    // (r % 8) is among them.
    const int m = 512, checked_rows = 16, checked_stride = 33;
    printf("%-8s %-34s %10s %10s %12s %12s\n", "proj", "path", "µs", "TFLOP/s", "rel RMS err", "max rel err");
    // E4B's projections, and 31B's MLP gate/up (its prefill's largest GEMM).
    for (const Shape shape : {Shape{"qkv", 3072, 2560}, Shape{"o", 2560, 2048}, Shape{"gate_up", 20480, 2560},
                              Shape{"down", 2560, 10240}, Shape{"gu_31b", 43008, 5376}}) {
        const int n = shape.n, k = shape.k;
        // Weights: every finite e4m3 value equally likely; scales as a checkpoint's (≈ 1/448 of a
        // row's range); inputs: bf16 normals with a few 30× outlier columns, as after a norm.
        std::vector<uint8_t> w(n * (size_t)k);
        std::vector<float> w_scale(n);
        std::vector<uint16_t> x(m * (size_t)k);
        uint64_t state = 88172645463325252ull;
        auto next = [&] {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            return state;
        };
        for (auto& v : w) {
            do v = (uint8_t)next();
            while ((v & 0x7f) == 0x7f);
        }
        for (auto& s : w_scale) s = (0.5f + (next() % 1000) / 1000.0f) * 0.02f / 448.0f;
        for (size_t i = 0; i < x.size(); ++i) {
            const double u1 = (next() % 1000000 + 1) / 1e6, u2 = (next() % 1000000) / 1e6;
            float v = (float)(sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
            if (i % k % 97 == 0) v *= 30.0f;
            uint32_t bits;
            memcpy(&bits, &v, 4);
            x[i] = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
        }
        // The f64 reference over the checked rows.
        std::vector<double> want(checked_rows * (size_t)n);
        std::vector<float> w_value(256);
        for (int b = 0; b < 256; ++b) w_value[b] = e4m3_value((uint8_t)b);
        for (int r = 0; r < checked_rows; ++r)
            for (int c = 0; c < n; ++c) {
                double sum = 0;
                for (int i = 0; i < k; ++i)
                    sum += (double)bf16_bits_to_float(x[r * checked_stride * (size_t)k + i]) *
                           w_value[w[c * (size_t)k + i]];
                want[r * (size_t)n + c] = sum * w_scale[c];
            }
        uint8_t* w_dev = bench.alloc<uint8_t>(w.size());
        float* w_scale_dev = bench.alloc<float>(n);
        bf* x_dev = bench.alloc<bf>(x.size());
        __half* x_f16_dev = bench.alloc<__half>(x.size());
        bf* dense = bench.alloc<bf>(w.size());
        // The slices' scratch: apart from `dense`, which the paths after them read whole (stop
        // 45's and stop 51's first "bf16" TMA rows read a `dense` the slices had overwritten).
        bf* slice_scratch = bench.alloc<bf>(w.size() / 2);
        bf* y = bench.alloc<bf>(m * (size_t)n);
        __nv_fp8_e4m3* hi = bench.alloc<__nv_fp8_e4m3>(x.size());
        __nv_fp8_e4m3* lo = bench.alloc<__nv_fp8_e4m3>(x.size());
        float* x_scale = bench.alloc<float>(m);
        float* x_scale_lo = bench.alloc<float>(m);
        CHECK(cudaMemcpy(w_dev, w.data(), w.size(), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(w_scale_dev, w_scale.data(), n * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(x_dev, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        std::vector<__half> x_f16(x.size());
        for (size_t i = 0; i < x.size(); ++i) x_f16[i] = __float2half_rn(bf16_bits_to_float(x[i]));
        CHECK(cudaMemcpy(x_f16_dev, x_f16.data(), x.size() * 2, cudaMemcpyHostToDevice));
        auto dequant = [&] {
            g4_dequant_fp8_channel_bf16<<<bench.sms * 8, 256, 0, bench.stream>>>(w_dev, w_scale_dev, dense, n, k);
        };
        dequant();
        bench.sync();
        const double flops = 2.0 * m * n * k;
        // Every path starts from a Y of NaNs (0xFFFF), so one that writes nothing cannot pass on
        // the output of the path before it.
        auto timed = [&](const std::function<void(int)>& launch) {
            CHECK(cudaMemset(y, 0xFF, m * (size_t)n * 2));
            return bench.graph_us(10, launch);
        };
        // `out`'s checked rows (`cols` wide) against `expected`, with the path's time.
        auto check = [&](const char* path, double us, const bf* out, const std::vector<double>& expected, int cols) {
            const std::vector<uint16_t> all = bench.download(out, m * (size_t)cols);
            std::vector<uint16_t> got;
            for (int r = 0; r < checked_rows; ++r)
                got.insert(got.end(), all.begin() + r * checked_stride * (size_t)cols,
                           all.begin() + (r * checked_stride + 1) * (size_t)cols);
            double err2 = 0, ref2 = 0, worst = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                const double d = bf16_bits_to_float(got[i]) - expected[i];
                err2 += d * d;
                ref2 += expected[i] * expected[i];
                worst = std::max(worst, fabs(d) / (fabs(expected[i]) + 1e-2 * sqrt(ref2 / (i + 1))));
            }
            printf("%-8s %-34s %10.1f %10.1f %12.2e %12.2e\n", shape.name, path, us, flops / us / 1e6,
                   sqrt(err2 / ref2), worst);
            if (sqrt(err2 / ref2) > 1e-2) {
                // Where a wrong result is wrong (a new kernel's first run is its only debugger):
                // unwritten (NaN) share; wrong share (0–9) per checked row, per 8 columns of a
                // 128-column tile, and per 128-column tile (first 32); the first few wrong values.
                const double tolerance = 0.05 * sqrt(ref2 / got.size());
                std::vector<int> by_row(checked_rows), by_lane(16), by_tile(32), seen_lane(16), seen_tile(32);
                size_t unwritten = 0;
                int shown = 0;
                for (size_t i = 0; i < got.size(); ++i) {
                    const int r = (int)(i / cols), c = (int)(i % cols);
                    const double value = bf16_bits_to_float(got[i]);
                    const bool wrong = !(fabs(value - expected[i]) <= tolerance);
                    unwritten += std::isnan(value);
                    by_row[r] += wrong;
                    by_lane[c % 128 / 8] += wrong;
                    ++seen_lane[c % 128 / 8];
                    if (c / 128 < 32) by_tile[c / 128] += wrong, ++seen_tile[c / 128];
                    if (wrong && shown < 6) {
                        printf("         wrong: X row %d, column %d: %.5g, want %.5g\n", r * checked_stride, c, value,
                               expected[i]);
                        ++shown;
                    }
                }
                auto digits = [](const std::vector<int>& wrong, const std::vector<int>& seen) {
                    std::string s;
                    for (size_t i = 0; i < wrong.size(); ++i)
                        s += seen[i] ? (char)('0' + (9 * wrong[i] + seen[i] - 1) / seen[i]) : '.';
                    return s;
                };
                printf("         unwritten %.3f; wrong by row %s, by column %% 128 / 8 %s, by 128-column tile %s\n",
                       (double)unwritten / got.size(), digits(by_row, std::vector<int>(checked_rows, cols)).c_str(),
                       digits(by_lane, seen_lane).c_str(), digits(by_tile, seen_tile).c_str());
            }
        };
        auto report = [&](const char* path, double us) { check(path, us, y, want, n); };
        Gemm bf16_gemm(&lt, CUDA_R_16BF, m, n, k, nullptr, nullptr);
        Gemm fp8_gemm(&lt, CUDA_R_8F_E4M3, m, n, k, w_scale_dev, x_scale);
        Gemm fp8_gemm_lo(&lt, CUDA_R_8F_E4M3, m, n, k, w_scale_dev, x_scale_lo);
        if (bf16_gemm.status != 0) printf("%-8s bf16 GEMM: no plan (status %d)\n", shape.name, bf16_gemm.status);
        if (fp8_gemm.status != 0) printf("%-8s FP8 GEMM: no plan (status %d)\n", shape.name, fp8_gemm.status);
        int status = 0;
        if (bf16_gemm.status == 0) {
            auto run = [&](int) { status |= bf16_gemm.run(dense, x_dev, y, 1.0f, 0.0f, bench.stream); };
            const double us = timed(run);
            report("bf16 (weights dequantised once)", us);
            const double with_dequant = timed([&](int i) {
                dequant();
                run(i);
            });
            report("dequant + bf16 (g4 today)", with_dequant);
        }
        for (const int slices : {2, 4, 8}) {
            const int rows = n / slices;
            if (n % slices != 0 || rows % 128 != 0) continue;
            Gemm slice_gemm(&lt, CUDA_R_16BF, m, rows, k, nullptr, nullptr, n);
            if (slice_gemm.status != 0) continue;
            const double us = timed([&](int) {
                for (int s = 0; s < slices; ++s) {
                    const size_t first = (size_t)s * rows;
                    g4_dequant_fp8_channel_bf16<<<bench.sms * 8, 256, 0, bench.stream>>>(
                        w_dev + first * k, w_scale_dev + first, slice_scratch, rows, k);
                    status |= slice_gemm.run(slice_scratch, x_dev, y + first, 1.0f, 0.0f, bench.stream);
                }
            });
            char path[64];
            snprintf(path, sizeof path, "slices: %d × dequant + bf16", slices);
            report(path, us);
        }
        // `weights`: the e4m3 bytes with their scales, or the dequantised bf16 weights (no scales).
        const size_t most_partials = 4 * (size_t)m * n;
        float* partial = bench.alloc<float>(most_partials);
        const CUtensorMap x_map_128 = tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, x_dev, k, m, g4_tma::BK, 128,
                                                 CU_TENSOR_MAP_SWIZZLE_128B);
        const CUtensorMap x_map_256 = tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, x_dev, k, m, g4_tma::BK, 256,
                                                 CU_TENSOR_MAP_SWIZZLE_128B);
        const CUtensorMap x_f16_map_128 = tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, x_f16_dev, k, m, g4_tma::BK,
                                                     128, CU_TENSOR_MAP_SWIZZLE_128B);
        const CUtensorMap x_f16_map_256 = tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, x_f16_dev, k, m, g4_tma::BK,
                                                     256, CU_TENSOR_MAP_SWIZZLE_128B);
        auto tma = [&](const auto& variant, const void* weights, const float* scale) {
            typedef typename std::remove_reference<decltype(variant)>::type::Weights W;
            const CUtensorMap w_map = tensor_map(W::MAP_TYPE, sizeof(typename W::Stored), weights, k, n, g4_tma::BK,
                                                 g4_tma::BM, W::MAP_SWIZZLE);
            CHECK(cudaFuncSetAttribute(variant.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       variant.shared_bytes));
            const int blocks = (m + variant.rows - 1) / variant.rows * ((n + g4_tma::BM - 1) / g4_tma::BM) *
                               variant.slices;
            const CUtensorMap x_map =
                W::F16_INPUTS ? tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, x_f16_dev, k, m, g4_tma::BK,
                                           variant.rows, CU_TENSOR_MAP_SWIZZLE_128B)
                              : tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, x_dev, k, m, g4_tma::BK, variant.rows,
                                           CU_TENSOR_MAP_SWIZZLE_128B);
            const size_t count = (size_t)m * n;
            report(variant.path, timed([&](int) {
                       variant.kernel<<<blocks, g4_tma::THREADS, variant.shared_bytes, bench.stream>>>(
                           x_map, w_map, scale, y, partial, m, n, k, variant.slices);
                       if (variant.slices > 1)
                           g4_tma_gemm_sum_slices_bf16<<<(count / 4 + 255) / 256, 256, 0, bench.stream>>>(
                               partial, y, variant.slices, count);
                   }));
        };
        for (const auto& variant : E4M3_VARIANTS) tma(variant, w_dev, w_scale_dev);
        for (const auto& variant : E4M3_F16_VARIANTS) tma(variant, w_dev, w_scale_dev);
        {
            __half* converted = bench.alloc<__half>(x.size());
            float* row_scale = bench.alloc<float>(m);
            printf("%-8s %-34s %10.1f\n", shape.name, "bf16 X → f16 X and row scales", timed([&](int) {
                       bf16_rows_to_f16<<<m, 256, 0, bench.stream>>>(x_dev, converted, row_scale, k);
                   }));
            CHECK(cudaFree(converted));
            CHECK(cudaFree(row_scale));
        }
        for (const auto& variant : CONST_A_VARIANTS) tma(variant, w_dev, w_scale_dev);
        for (const auto& variant : RAW_A_VARIANTS) tma(variant, w_dev, w_scale_dev);
        // Wide tiles for the full waves, 128-row ones for the rest (where a last wide wave would
        // leave most multiprocessors idle; tma_gemm.rs's rule, on this GPU's count).
        const int plain_wide_outputs = wide_then_narrow_outputs(m, n, g4_tma::BM, bench.sms);
        if (plain_wide_outputs > 0) {
            const CUtensorMap w_map = tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, w_dev, k, n, g4_tma::BK,
                                                 g4_tma::BM, CU_TENSOR_MAP_SWIZZLE_64B);
            const int shared = g4_tma::shared_bytes<g4_tma::E4m3Weights, 256, g4_tma::WIDE_STAGES>();
            CHECK(cudaFuncSetAttribute(g4_matmul_bt_fp8_channel_tma_wide_then_narrow_bf16,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
            const int blocks = wide_then_narrow_blocks(m, n, g4_tma::BM, plain_wide_outputs);
            report("tma e4m3 wide, then 128×128", timed([&](int) {
                       g4_matmul_bt_fp8_channel_tma_wide_then_narrow_bf16<<<blocks, g4_tma::THREADS, shared,
                                                                             bench.stream>>>(
                           x_map_256, x_map_128, w_map, w_scale_dev, y, m, n, k, plain_wide_outputs);
                   }));
            auto f16_kernel = wide_then_narrow_variant<g4_tma::E4m3WeightsF16, false>;
            CHECK(cudaFuncSetAttribute(f16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
            report("tma e4m3→f16 wide, then 128×128", timed([&](int) {
                       f16_kernel<<<blocks, g4_tma::THREADS, shared, bench.stream>>>(
                           x_f16_map_256, x_f16_map_128, w_map, w_scale_dev, y, m, n, k, plain_wide_outputs,
                           nullptr);
                   }));
        }
        // The same pipeline on the dequantised bf16 weights, beside cuBLAS's bf16 row above.
        for (const auto& variant : BF16_VARIANTS) tma(variant, dense, nullptr);
        if (std::string(shape.name) == "gate_up" || std::string(shape.name) == "gu_31b") {
            // The MLP's gate/up projection and its GeGLU product. Expected: the f64 product.
            const int d = n / 2;
            std::vector<double> want_product(checked_rows * (size_t)d);
            for (int r = 0; r < checked_rows; ++r)
                for (int c = 0; c < d; ++c) {
                    const double gate = want[r * (size_t)n + c], up = want[r * (size_t)n + d + c];
                    want_product[r * (size_t)d + c] =
                        0.5 * gate * (1.0 + tanh(0.7978845608028654 * gate * (1.0 + 0.044715 * gate * gate))) * up;
                }
            bf* product = bench.alloc<bf>(m * (size_t)d);
            auto timed_product = [&](const std::function<void(int)>& launch) {
                CHECK(cudaMemset(product, 0xFF, m * (size_t)d * 2));
                return bench.graph_us(10, launch);
            };
            auto gelu_and_mul = [&] {
                const int vectors = m * d / 8;
                g4_gelu_and_mul_vec_bf16<<<(vectors + 255) / 256, 256, 0, bench.stream>>>(y, product, m, d);
            };
            if (bf16_gemm.status == 0) {
                check("bf16 + gelu_and_mul", timed_product([&](int) {
                          status |= bf16_gemm.run(dense, x_dev, y, 1.0f, 0.0f, bench.stream);
                          gelu_and_mul();
                      }),
                      product, want_product, d);
                check("dequant + bf16 + gelu_and_mul", timed_product([&](int) {
                          dequant();
                          status |= bf16_gemm.run(dense, x_dev, y, 1.0f, 0.0f, bench.stream);
                          gelu_and_mul();
                      }),
                      product, want_product, d);
            }
            const CUtensorMap w_map = tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, w_dev, k, n, g4_tma::BK,
                                                 g4_tma::BM, CU_TENSOR_MAP_SWIZZLE_64B);
            const CUtensorMap w_halves = tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, w_dev, k, n, g4_tma::BK,
                                                    g4_tma::BM / 2, CU_TENSOR_MAP_SWIZZLE_64B);
            const int shared = g4_tma::shared_bytes<g4_tma::E4m3Weights, 128, 6>();
            CHECK(cudaFuncSetAttribute(g4_matmul_bt_fp8_channel_tma_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       shared));
            CHECK(cudaFuncSetAttribute(g4_fp8_gelu_and_mul_tma_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       shared));
            const int x_tiles = (m + 127) / 128;
            check("tma e4m3 + gelu_and_mul", timed_product([&](int) {
                      g4_matmul_bt_fp8_channel_tma_bf16<<<x_tiles * (n / 128), g4_tma::THREADS, shared, bench.stream>>>(
                          x_map_128, w_map, w_scale_dev, y, nullptr, m, n, k, 1);
                      gelu_and_mul();
                  }),
                  product, want_product, d);
            check("tma e4m3, GeGLU epilogue", timed_product([&](int) {
                      g4_fp8_gelu_and_mul_tma_bf16<<<x_tiles * (d / 64), g4_tma::THREADS, shared, bench.stream>>>(
                          x_map_128, w_halves, w_scale_dev, product, m, n, k);
                  }),
                  product, want_product, d);
            const int wide_shared = g4_tma::shared_bytes<g4_tma::E4m3Weights, 256, 5>();
            CHECK(cudaFuncSetAttribute(g4_fp8_gelu_and_mul_tma_wide_bf16,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, wide_shared));
            check("tma e4m3 wide, GeGLU epilogue", timed_product([&](int) {
                      g4_fp8_gelu_and_mul_tma_wide_bf16<<<(m + 255) / 256 * (d / 64), g4_tma::THREADS, wide_shared,
                                                          bench.stream>>>(x_map_256, w_halves, w_scale_dev, product,
                                                                          m, n, k);
                  }),
                  product, want_product, d);
            const int geglu_wide_outputs = wide_then_narrow_outputs(m, d, g4_tma::BM / 2, bench.sms);
            if (geglu_wide_outputs > 0) {
                CHECK(cudaFuncSetAttribute(g4_fp8_gelu_and_mul_tma_wide_then_narrow_bf16,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, wide_shared));
                const int blocks = wide_then_narrow_blocks(m, d, g4_tma::BM / 2, geglu_wide_outputs);
                check("tma e4m3 wide, then 128×128, GeGLU", timed_product([&](int) {
                          g4_fp8_gelu_and_mul_tma_wide_then_narrow_bf16<<<blocks, g4_tma::THREADS, wide_shared,
                                                                          bench.stream>>>(
                              x_map_256, x_map_128, w_halves, w_scale_dev, product, m, n, k, geglu_wide_outputs);
                      }),
                      product, want_product, d);
                auto f16_geglu = wide_then_narrow_variant<g4_tma::E4m3WeightsF16, true>;
                CHECK(cudaFuncSetAttribute(f16_geglu, cudaFuncAttributeMaxDynamicSharedMemorySize, wide_shared));
                check("tma e4m3→f16 wide, then 128, GeGLU", timed_product([&](int) {
                          f16_geglu<<<blocks, g4_tma::THREADS, wide_shared, bench.stream>>>(
                              x_f16_map_256, x_f16_map_128, w_halves, w_scale_dev, product, m, n, k,
                              geglu_wide_outputs, nullptr);
                      }),
                      product, want_product, d);
                // The whole f16 path: X's rows scaled into f16 by bf16_rows_to_f16, its scales
                // undone in the epilogue (the pass itself timed above, at every shape).
                __half* scaled = bench.alloc<__half>(x.size());
                float* row_scale = bench.alloc<float>(m);
                bf16_rows_to_f16<<<m, 256, 0, bench.stream>>>(x_dev, scaled, row_scale, k);
                const CUtensorMap scaled_128 = tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, scaled, k, m, g4_tma::BK,
                                                          128, CU_TENSOR_MAP_SWIZZLE_128B);
                const CUtensorMap scaled_256 = tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, scaled, k, m, g4_tma::BK,
                                                          256, CU_TENSOR_MAP_SWIZZLE_128B);
                check("tma e4m3→f16 scaled rows, GeGLU", timed_product([&](int) {
                          f16_geglu<<<blocks, g4_tma::THREADS, wide_shared, bench.stream>>>(
                              scaled_256, scaled_128, w_halves, w_scale_dev, product, m, n, k, geglu_wide_outputs,
                              row_scale);
                      }),
                      product, want_product, d);
                CHECK(cudaFree(scaled));
                CHECK(cudaFree(row_scale));
            }
            // The same epilogue over the dequantised bf16 weights: what a bf16 checkpoint's prefill
            // could run in place of cuBLAS and gelu_and_mul.
            auto bf16_geglu = tma_gemm_variant<g4_tma::Bf16Weights, 128, 6, true>;
            const int bf16_shared = g4_tma::shared_bytes<g4_tma::Bf16Weights, 128, 6>();
            CHECK(cudaFuncSetAttribute(bf16_geglu, cudaFuncAttributeMaxDynamicSharedMemorySize, bf16_shared));
            const CUtensorMap dense_halves = tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dense, k, n, g4_tma::BK,
                                                        g4_tma::BM / 2, CU_TENSOR_MAP_SWIZZLE_128B);
            check("tma bf16, GeGLU epilogue", timed_product([&](int) {
                      bf16_geglu<<<x_tiles * (d / 64), g4_tma::THREADS, bf16_shared, bench.stream>>>(
                          x_map_128, dense_halves, nullptr, product, nullptr, m, n, k, 1);
                  }),
                  product, want_product, d);
            CHECK(cudaFree(product));
        }
        CHECK(cudaFree(partial));
        auto split = [&] {
            split_rows<<<m, 256, 0, bench.stream>>>(x_dev, hi, lo, x_scale, k);
            // lo's scale is hi's / 16: the same row vector, scaled once on the device.
            scale_by<<<(m + 255) / 256, 256, 0, bench.stream>>>(x_scale, x_scale_lo, m, 1.0f / 16.0f);
        };
        if (fp8_gemm.status == 0 && fp8_gemm_lo.status == 0) {
            printf("%-8s %-34s %10.1f\n", shape.name, "split alone (m rows)", timed([&](int) { split(); }));
            const double two = timed([&](int) {
                split();
                status |= fp8_gemm_lo.run(w_dev, lo, y, 1.0f, 0.0f, bench.stream);
                status |= fp8_gemm.run(w_dev, hi, y, 1.0f, 1.0f, bench.stream);
            });
            report("fp8 x2: split + lo + hi GEMMs", two);
            const double one = timed([&](int) {
                split();
                status |= fp8_gemm.run(w_dev, hi, y, 1.0f, 0.0f, bench.stream);
            });
            report("fp8 x1: split + hi GEMM (W8A8)", one);
            // Whether the heuristic's first choice is cuBLASLt's fastest for these shapes (g4
            // takes the first).
            const std::vector<HeuristicResult> algos = fp8_gemm.candidates(16);
            for (size_t a = 0; a < algos.size(); ++a) {
                const double us = timed([&](int) {
                    split();
                    status |= fp8_gemm.run_with(algos[a], w_dev, hi, y, 1.0f, 0.0f, bench.stream);
                });
                char path[64];
                snprintf(path, sizeof path, "W8A8 algo %zu/%zu (%.2f waves)", a + 1, algos.size(), algos[a].waves);
                report(path, us);
            }
        }
        if (status != 0) printf("%-8s cublasLtMatmul failed: status %d\n", shape.name, status);
        for (void* p : {(void*)w_dev, (void*)w_scale_dev, (void*)x_dev, (void*)x_f16_dev, (void*)dense, (void*)slice_scratch, (void*)y,
                        (void*)hi, (void*)lo,
                        (void*)x_scale, (void*)x_scale_lo})
            CHECK(cudaFree(p));
    }
    return 0;
}
