// The pure functions under the Rng seam (rng.h): a random word from (seed, stream, counter), and
// the exact uniform float made from one. Inline for both compilers (host_device.h): the synthetic
// dataset's features are drawn from them on the CPU and, by a GPU backend, on the device
// (core/cuda/device_dataset.h), and must be the same bits there.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace zerosim {

ZEROSIM_HOST_DEVICE constexpr uint64_t splitmix64_finalize(uint64_t value) {
  value ^= value >> 30;
  value *= 0xbf58476d1ce4e5b9ULL;
  value ^= value >> 27;
  value *= 0x94d049bb133111ebULL;
  value ^= value >> 31;
  return value;
}

// A 64-bit mix of three words (SplitMix64 finalizer over a Weyl-sequence combination). Pure.
ZEROSIM_HOST_DEVICE constexpr uint64_t mix_random_bits(uint64_t seed, uint64_t stream_id, uint64_t counter) {
  // Each word goes through the finalizer before it is combined, so that nearby
  // (stream, counter) pairs do not produce correlated outputs.
  uint64_t combined = splitmix64_finalize(seed + 0x9e3779b97f4a7c15ULL);
  combined = splitmix64_finalize(combined ^ (stream_id + 0x6a09e667f3bcc909ULL));
  return splitmix64_finalize(combined ^ (counter * 0x9e3779b97f4a7c15ULL + 0xbb67ae8584caa73bULL));
}

// Uniform float in [-1, 1) from the top 24 bits of a random word: exact, no rounding. (Every
// operation is exact, k * 2^-23 and then - 1, so a compiler's contraction into an FMA cannot
// change the value either.)
ZEROSIM_HOST_DEVICE constexpr float random_symmetric_unit_float(uint64_t random_bits) {
  const uint32_t top_bits = static_cast<uint32_t>(random_bits >> 40);
  return static_cast<float>(top_bits) * (1.0f / 8388608.0f) - 1.0f;
}

}  // namespace zerosim
