// e4m3 (FP8) weights decoded in registers, shared by the kernels that read FP8 checkpoints.
#pragma once
#include "g4_compat.cuh"

// Four e4m3 bytes of a 32-bit word as floats times 2^-8, exactly: each byte's sign and 7 low bits
// moved into an f16 (e4m3's exponent field lands in f16's, whose bias is 8 more; subnormals map to
// subnormals), then widened. The NaN encoding S.1111.111 reads as ±480; quantisers never store it.
__device__ __forceinline__ void e4m3x4_to_f32_times_2_pow_minus_8(uint32_t bytes, float out[4]) {
    const uint32_t even = ((bytes & 0x00800080u) << 8) | ((bytes & 0x007f007fu) << 7);
    const uint32_t odd = (bytes & 0x80008000u) | ((bytes & 0x7f007f00u) >> 1);
    out[0] = __half2float(__ushort_as_half((unsigned short)(even & 0xffffu)));
    out[1] = __half2float(__ushort_as_half((unsigned short)(odd & 0xffffu)));
    out[2] = __half2float(__ushort_as_half((unsigned short)(even >> 16)));
    out[3] = __half2float(__ushort_as_half((unsigned short)(odd >> 16)));
}

// The 16 e4m3 weights of one 16-byte load, times 2^-8 (see above).
__device__ __forceinline__ void e4m3x16_to_f32_times_2_pow_minus_8(const uint4& bytes, float out[16]) {
    e4m3x4_to_f32_times_2_pow_minus_8(bytes.x, out);
    e4m3x4_to_f32_times_2_pow_minus_8(bytes.y, out + 4);
    e4m3x4_to_f32_times_2_pow_minus_8(bytes.z, out + 8);
    e4m3x4_to_f32_times_2_pow_minus_8(bytes.w, out + 12);
}
