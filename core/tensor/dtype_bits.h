// The fp16 and bf16 conversions as pure integer functions of the bit patterns: the one
// definition that the CPU casts (dtype.h) and the CUDA kernels (core/cuda/device_cast.h) both
// compile, so the two backends round every value to the same bits by construction.
//
// fp32 -> fp16 and fp32 -> bf16 round to nearest, ties to even; values beyond the range become
// infinity; a NaN stays a NaN, made quiet, sign and the top payload bits kept. fp16 -> fp32 is
// exact (a NaN made quiet, payload kept); bf16 -> fp32 is a shift.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace zerosim {

ZEROSIM_HOST_DEVICE constexpr uint16_t fp32_bits_to_fp16_bits(uint32_t bits) {
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN
    if (magnitude == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 = largest value that rounds to 65504 or above: from here on, round to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const int32_t exponent = static_cast<int32_t>(magnitude >> 23) - 127;
  if (exponent >= -14) {
    // Normal fp16: keep 10 mantissa bits, round the 13 dropped bits to nearest even.
    uint32_t half = static_cast<uint32_t>((exponent + 15) << 10) | ((magnitude >> 13) & 0x3ffu);
    const uint32_t dropped = magnitude & 0x1fffu;
    if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
    return static_cast<uint16_t>(sign | half);
  }
  if (exponent < -25) return sign;  // below half of the smallest subnormal: rounds to zero
  // Subnormal fp16: value = mantissa_with_hidden * 2^(exponent-23); unit is 2^-24.
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const int shift = -exponent - 1;  // 14..24: bits to drop so the unit becomes 2^-24
  uint32_t half = mantissa >> shift;
  const uint32_t dropped = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

ZEROSIM_HOST_DEVICE constexpr uint32_t fp16_bits_to_fp32_bits(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) {
    // Infinity, or a NaN made quiet (as F16C and CUDA do), payload kept.
    return sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u);
  }
  if (exponent != 0) return sign | ((exponent + 112u) << 23) | (mantissa << 13);
  if (mantissa == 0) return sign;
  // Subnormal: normalise.
  int32_t normalized_exponent = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --normalized_exponent;
  }
  mantissa &= 0x3ffu;
  return sign | (static_cast<uint32_t>(normalized_exponent) << 23) | (mantissa << 13);
}

ZEROSIM_HOST_DEVICE constexpr uint16_t fp32_bits_to_bf16_bits(uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

ZEROSIM_HOST_DEVICE constexpr uint32_t bf16_bits_to_fp32_bits(uint16_t bits) { return static_cast<uint32_t>(bits) << 16; }

}  // namespace zerosim
