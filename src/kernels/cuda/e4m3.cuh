// e4m3 (FP8) weights decoded in registers, shared by the kernels that read FP8 checkpoints, and
// activations rounded to e4m3 (FP8_DYNAMIC checkpoints), below.
// A 16-byte load brings 16 weights to decode (twice bf16's per byte), so the decode is as short
// as each target allows. (On its own this did not move the H200's FP8 GEMV: probe-ops --perf
// read 2.06 TB/s with it, 2.04 without.) Both ways give the weight divided by
// G4_E4M3_UNIT exactly (every e4m3 value is an f16 value, and so is 1/256 of it); the kernels
// fold G4_E4M3_UNIT into the row scale once.
#pragma once
#include "g4_compat.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// Ada and Hopper convert two e4m3 bytes to two f16 in one instruction.
#define G4_E4M3_UNIT 1.0f

__device__ __forceinline__ void e4m3x4_to_f32_over_unit(uint32_t bytes, float out[4]) {
    uint32_t low, high;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
        "cvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
        : "=r"(low), "=r"(high)
        : "r"(bytes));
    const float2 first = __half22float2(*reinterpret_cast<const __half2*>(&low));
    const float2 second = __half22float2(*reinterpret_cast<const __half2*>(&high));
    out[0] = first.x;
    out[1] = first.y;
    out[2] = second.x;
    out[3] = second.y;
}
#else
// Elsewhere each byte's sign and 7 low bits are moved into an f16 (e4m3's exponent field lands
// in f16's, whose bias is 8 more, so the value comes out times 2^-8; subnormals map to
// subnormals), then widened. The NaN encoding S.1111.111 reads as ±480 here; quantisers never
// store it.
#define G4_E4M3_UNIT 256.0f

__device__ __forceinline__ void e4m3x4_to_f32_over_unit(uint32_t bytes, float out[4]) {
    const uint32_t even = ((bytes & 0x00800080u) << 8) | ((bytes & 0x007f007fu) << 7);
    const uint32_t odd = (bytes & 0x80008000u) | ((bytes & 0x7f007f00u) >> 1);
    out[0] = __half2float(__ushort_as_half((unsigned short)(even & 0xffffu)));
    out[1] = __half2float(__ushort_as_half((unsigned short)(odd & 0xffffu)));
    out[2] = __half2float(__ushort_as_half((unsigned short)(even >> 16)));
    out[3] = __half2float(__ushort_as_half((unsigned short)(odd >> 16)));
}
#endif

// The 16 e4m3 weights of one 16-byte load, divided by G4_E4M3_UNIT.
__device__ __forceinline__ void e4m3x16_to_f32_over_unit(const uint4& bytes, float out[16]) {
    e4m3x4_to_f32_over_unit(bytes.x, out);
    e4m3x4_to_f32_over_unit(bytes.y, out + 4);
    e4m3x4_to_f32_over_unit(bytes.z, out + 8);
    e4m3x4_to_f32_over_unit(bytes.w, out + 12);
}

// The other way: activations rounded to e4m3 per row (an FP8_DYNAMIC checkpoint's projection
// inputs: round_rows_e4m3 and quantize_rows_e4m3 in fp8.cu, and the norm before q/k/v and before
// gate/up in norms.cu). The rounding to e4m3 is written out (round to nearest even on a grid of
// 2^(e-3), e the value's binade, never below the subnormals' 2^-9) so no vendor FP8 header is
// needed; the division is a true one, as the reference's is.
__device__ __forceinline__ float g4_round_to_e4m3(float v) {
    if (v == 0.0f) return v;
    int binade;
    frexpf(v, &binade);
    const float step = ldexpf(1.0f, max(binade - 1, -6) - 3);
    return rintf(v / step) * step;
}

// The bits of an e4m3 value (one g4_round_to_e4m3 returned): sign, exponent with bias 7 (0 for
// the subnormals, multiples of 2^-9), 3 mantissa bits.
__device__ __forceinline__ uint8_t g4_e4m3_bits(float v) {
    const uint8_t sign = v < 0.0f ? 0x80 : 0;
    const float magnitude = fabsf(v);
    if (magnitude < 0.015625f) return sign | (uint8_t)(magnitude * 512.0f);
    int binade;
    const float fraction = frexpf(magnitude, &binade);
    return sign | (uint8_t)((binade - 1 + 7) << 3) | (uint8_t)((fraction * 2.0f - 1.0f) * 8.0f);
}

// A row's scale from its largest |x|: that / 448 rounded to T (1 for an all-zero row, which stays
// zero).
template <typename T>
__device__ __forceinline__ float e4m3_scale_of(float absmax) {
    return absmax == 0.0f ? 1.0f : g4_round<T>(absmax / 448.0f);
}

// x (a value of T) divided by its row's scale, rounded to T and clamped to e4m3's range: what is
// rounded to e4m3.
template <typename T>
__device__ __forceinline__ float e4m3_input(float x, float scale) {
    return fminf(fmaxf(g4_round<T>(x / scale), -448.0f), 448.0f);
}

// Two clamped values rounded to e4m3: their bits (first in the low byte) and their values.
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// Ada and Hopper round a pair in one instruction, to nearest with ties to even as the written-out
// rounding below does (the inputs are clamped, so saturation never applies), and widen it back in
// one more. A row's pass is then bound by its bytes, not by the rounding (E4B's down input, 512
// rows of 10,240: stop 47).
__device__ __forceinline__ uint16_t e4m3_pair(float first, float second, float& first_value, float& second_value) {
    uint16_t bits;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(bits) : "f"(second), "f"(first));
    uint32_t halves;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(bits));
    const float2 values = __half22float2(*reinterpret_cast<const __half2*>(&halves));
    first_value = values.x;
    second_value = values.y;
    return bits;
}
#else
__device__ __forceinline__ uint16_t e4m3_pair(float first, float second, float& first_value, float& second_value) {
    first_value = g4_round_to_e4m3(first);
    second_value = g4_round_to_e4m3(second);
    return (uint16_t)(g4_e4m3_bits(first_value) | (g4_e4m3_bits(second_value) << 8));
}
#endif
