// What the standalone kernel benchmarks share: buffers filled with bf16 values near 1, a plain
// read of a buffer (the floor for one launch of that many bytes), and timing as a CUDA graph of
// launches replayed after a warm-up.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#include "../../src/kernels/cuda/g4_compat.cuh"

typedef g4_bf16 bf;

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        cudaError_t status = (call);                                                                \
        if (status != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status)); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

// Loads of one 16-byte vector by PTX `ld` qualifiers, to time them against one another: `no_l1`
// reads through the non-coherent path without allocating in L1 (`.nc.L1::no_allocate`),
// `prefetch_256` asks L2 to fetch 256 bytes around each miss (`.L2::256B`), and `evict_first`
// marks the lines as the first to leave L2 (a cache policy). g4's decode GEMVs load W as
// `no_l1_prefetch_256` (g4_load_weights).
enum class LoadHint { plain, no_l1, prefetch_256, no_l1_prefetch_256, no_l1_prefetch_256_evict_first };

template <LoadHint HINT>
__device__ __forceinline__ uint4 load_with_hint(const uint4* p) {
    uint4 v;
    if constexpr (HINT == LoadHint::plain) {
        v = *p;
    } else if constexpr (HINT == LoadHint::no_l1) {
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p));
    } else if constexpr (HINT == LoadHint::prefetch_256) {
        asm("ld.global.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    } else if constexpr (HINT == LoadHint::no_l1_prefetch_256) {
        v = g4_load_weights(p);
    } else {
        // Hopper takes an L2 eviction priority on a 16-byte load only as a cache policy.
        uint64_t policy;
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p), "l"(policy));
    }
    return v;
}

// A gemv.cuh weight decoder whose kernels load W with HINT's qualifiers (the decoders issue
// their loads through `load`); everything else is g4's.
template <typename Weights, LoadHint HINT>
struct HintedLoads : Weights {
    __device__ static uint4 load(const uint4* vector) { return load_with_hint<HINT>(vector); }
};

// The loads timed beside g4's (g4_load_weights: `.nc.L1::no_allocate.L2::256B`), with the
// suffix their variants print.
template <typename F> static void for_each_hint(F&& f) {
    f(std::integral_constant<LoadHint, LoadHint::plain>(), "_plain");
    f(std::integral_constant<LoadHint, LoadHint::no_l1>(), "_noL1");
    f(std::integral_constant<LoadHint, LoadHint::prefetch_256>(), "_256B");
    f(std::integral_constant<LoadHint, LoadHint::no_l1_prefetch_256_evict_first>(), "_noL1_256B_ef");
}

template <LoadHint HINT = LoadHint::plain>
__global__ void read_bytes(const uint4* data, size_t vectors, float* sink) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
        const uint4 a = load_with_hint<HINT>(data + i), b = load_with_hint<HINT>(data + i + stride),
                    c = load_with_hint<HINT>(data + i + 2 * stride), d = load_with_hint<HINT>(data + i + 3 * stride);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < vectors; i += stride) acc ^= load_with_hint<HINT>(data + i).x;
    if (acc == 0x12345678u) sink[0] = 1.0f;  // keeps the loads
}

static float bf16_bits_to_float(uint16_t bits) {
    const uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double max_relative_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double x = bf16_bits_to_float(a[i]), y = bf16_bits_to_float(b[i]);
        worst = std::max(worst, fabs(x - y) / (fabs(x) + 1e-3));
    }
    return worst;
}

// linear.rs's gemv_geometry for a weight of n rows of `vectors` 16-byte vectors: (blocks, warps
// per column).
static std::pair<int, int> gemv_geometry(int n, int vectors, int loads_per_lane, int warps_per_block) {
    const int one_batch = (vectors + 32 * loads_per_lane - 1) / (32 * loads_per_lane);
    int warps = std::max(one_batch, (2048 + n - 1) / n), p = 1;
    while (p < warps) p <<= 1;
    const int wpc = std::min(p, warps_per_block);
    return {(n + warps_per_block / wpc - 1) / (warps_per_block / wpc), wpc};
}

// The value of an e4m3 byte (sign, 4-bit exponent with bias 7, 3-bit mantissa; S.1111.111, NaN,
// is never passed).
static double e4m3_value(uint8_t bits) {
    const double sign = bits & 0x80 ? -1.0 : 1.0;
    const int exponent = (bits >> 3) & 0xF, mantissa = bits & 7;
    if (exponent == 0) return sign * ldexp((double)mantissa, -9);
    return sign * ldexp(1.0 + mantissa / 8.0, exponent - 7);
}

// Launches `kernel` as native/cuda.rs launches g4's kernels: with programmatic stream
// serialization where `overlap` (each kernel may start while the one before it finishes).
template <typename Kernel, typename... Args>
void launch_kernel(bool overlap, cudaStream_t stream, int blocks, int threads, Kernel kernel, Args... args) {
    cudaLaunchConfig_t config = {};
    config.gridDim = blocks;
    config.blockDim = threads;
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = overlap ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// A projection's weight: n rows of k.
struct Shape {
    const char* name;
    int n, k;
};

struct Bench {
    cudaStream_t stream;
    cudaEvent_t start, stop;
    float* sink;
    int sms;

    Bench() {
        cudaDeviceProp prop;
        CHECK(cudaGetDeviceProperties(&prop, 0));
        sms = prop.multiProcessorCount;
        printf("%s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
        CHECK(cudaStreamCreate(&stream));
        CHECK(cudaEventCreate(&start));
        CHECK(cudaEventCreate(&stop));
        sink = alloc<float>(4);
    }

    template <typename T> T* alloc(size_t count) {
        T* p;
        CHECK(cudaMalloc(&p, count * sizeof(T)));
        return p;
    }

    // bf16 values in [0.75, 1.25): sums stay finite, and no two kernels' outputs agree by accident.
    bf* filled(size_t count) {
        bf* p = alloc<bf>(count);
        std::vector<uint16_t> chunk(std::min<size_t>(count, 1 << 24));
        for (size_t i = 0; i < chunk.size(); ++i)
            chunk[i] = (uint16_t)(0x3f40 + ((i * 2654435761u >> 16) & 0x7f));
        for (size_t off = 0; off < count; off += chunk.size())
            CHECK(cudaMemcpy(p + off, chunk.data(), std::min(chunk.size(), count - off) * 2, cudaMemcpyHostToDevice));
        return p;
    }

    template <LoadHint HINT = LoadHint::plain> void read(const void* data, size_t bytes) {
        const size_t vectors = bytes / 16;
        const int blocks = (int)std::min<size_t>((size_t)sms * 8, (vectors + 511) / 512);
        read_bytes<HINT><<<blocks, 512, 0, stream>>>(static_cast<const uint4*>(data), vectors, sink);
    }

    // Blocks of `kernel`, `threads` wide, that fit on the GPU at once (a persistent grid).
    template <typename Kernel> int resident_blocks(Kernel kernel, int threads) const {
        int per_sm = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
        return per_sm * sms;
    }

    void sync() {
        CHECK(cudaStreamSynchronize(stream));
        CHECK(cudaGetLastError());
    }

    std::vector<uint16_t> download(const bf* p, size_t count) {
        std::vector<uint16_t> host(count);
        CHECK(cudaMemcpy(host.data(), p, count * 2, cudaMemcpyDeviceToHost));
        return host;
    }

    // µs per launch: `launches` calls of `launch(i)` captured once, the graph replayed 10 times.
    double graph_us(int launches, const std::function<void(int)>& launch) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < launches; ++i) launch(i);
        CHECK(cudaStreamEndCapture(stream, &graph));
        CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));
        const int replays = 10;
        CHECK(cudaEventRecord(start, stream));
        for (int i = 0; i < replays; ++i) CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaGetLastError());
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        CHECK(cudaGraphExecDestroy(exec));
        CHECK(cudaGraphDestroy(graph));
        return ms * 1e3 / (replays * launches);
    }
};
