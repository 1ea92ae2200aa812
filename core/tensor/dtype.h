// Element types and the casts between them.
//
// Casts from fp32 to fp16 and bf16 round to nearest, ties to even, in software, so the
// bits do not depend on the CPU (F16C or not) or on compiler flags. NaN stays NaN (quiet,
// sign kept); values beyond the target's range become infinity, as IEEE requires.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace zerosim {

// A run's precision (the config's fp16 and bf16 blocks): the model dtype and the communication
// dtype.
enum class Precision { kFp32, kFp16, kBf16 };
const char* precision_name(Precision precision);

// Where offloaded state lives (zero_optimization.offload_optimizer and offload_param).
enum class OffloadDevice { kNone, kCpu, kNvme };
const char* offload_device_name(OffloadDevice device);

// The storage types: fp32, and 16-bit payloads for fp16 and bf16.
using DType = Precision;

inline size_t dtype_size_bytes(DType dtype) { return dtype == DType::kFp32 ? 4 : 2; }
inline const char* dtype_name(DType dtype) { return precision_name(dtype); }

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float bits_to_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

uint16_t fp32_to_fp16_bits(float value);
float fp16_bits_to_fp32(uint16_t bits);
uint16_t fp32_to_bf16_bits(float value);
inline float bf16_bits_to_fp32(uint16_t bits) { return bits_to_float(static_cast<uint32_t>(bits) << 16); }

// Distance in units in the last place between two IEEE-754 values of `width_bits` (16 for fp16
// and bf16, 32, 64), given as bit patterns: the number of representable values one has to
// step through to go from one to the other. The sign-magnitude patterns are mapped onto one
// monotonic unsigned order (negative values below the bias, positive above it, both zeros on
// it), so the distance across zero is the sum of both sides' distances to zero and +0/-0 are
// 0 apart. NaN patterns order beyond the infinities: their distance is defined, not meaningful.
constexpr uint64_t ordered_float_key(uint64_t bits, int width_bits) {
  const uint64_t sign = uint64_t{1} << (width_bits - 1);
  const uint64_t magnitude = bits & (sign - 1);
  return (bits & sign) != 0 ? sign - magnitude : sign + magnitude;
}
constexpr uint64_t ulp_distance_bits(uint64_t bits_a, uint64_t bits_b, int width_bits) {
  const uint64_t key_a = ordered_float_key(bits_a, width_bits);
  const uint64_t key_b = ordered_float_key(bits_b, width_bits);
  return key_a > key_b ? key_a - key_b : key_b - key_a;
}
constexpr uint64_t ulp_distance(float a, float b) {
  return ulp_distance_bits(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b), 32);
}
constexpr uint64_t ulp_distance(double a, double b) {
  return ulp_distance_bits(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b), 64);
}


// Rounds a value through a dtype and back: what a tensor of that dtype would hold.
float round_through(DType dtype, float value);

// Bulk casts between fp32 arrays and raw storage of `dtype` (element counts, not bytes).
void cast_from_fp32(DType dtype, const float* source, std::byte* destination, size_t element_count);
void cast_to_fp32(DType dtype, const std::byte* source, float* destination, size_t element_count);
// The same cast split into ranges over up to `threads` threads (thread_split.h), none shorter
// than kCastElementsPerThread: each element is cast on its own, so the bits are cast_to_fp32's
// for any thread count.
inline constexpr size_t kCastElementsPerThread = size_t{1} << 18;
void cast_to_fp32_threads(DType dtype, const std::byte* source, float* destination, size_t element_count,
                          int threads);
// cast_from_fp32 split the same way (each element narrowed on its own: the serial cast's bytes).
void cast_from_fp32_threads(DType dtype, const float* source, std::byte* destination, size_t element_count,
                            int threads);
// `element_count` zeros from `destination` on, split as the casts are. One thread's memset moves
// a fraction of what the host's memory can (the state arrays are hundreds of MiB).
void fill_zeros_threads(float* destination, size_t element_count, int threads);

}  // namespace zerosim
