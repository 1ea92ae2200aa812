#include "core/optim/grad_clip.h"

#include <cstdint>
#include <cstring>

namespace zerosim {

UnscaleAndClip compute_unscale_and_clip(float scaled_global_grad_norm, double loss_scale, double max_grad_norm) {
  UnscaleAndClip result;
  const float scale = static_cast<float>(loss_scale);
  result.combined_scale = scale;
  if (max_grad_norm > 0.0) {
    // DeepSpeed's constant; the norm is of scaled gradients, so unscale it first.
    const float clip = ((scaled_global_grad_norm / scale) + 1e-6f) / static_cast<float>(max_grad_norm);
    if (clip > 1.0f) {
      result.combined_scale = clip * scale;
      result.clipped = true;
    }
    result.grad_multiplier = 1.0f / result.combined_scale;
  } else {
    result.grad_multiplier = static_cast<float>(1.0 / loss_scale);
  }
  return result;
}

namespace {

// Exponent all ones: inf or NaN.
constexpr uint32_t kExponentMask = 0x7F800000u;

inline bool block_has_non_finite(const float* values, size_t count) {
  uint32_t found = 0;
  // No early exit inside a block: a branch-free OR lets the compiler vectorize the loop.
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof(bits));
    found |= static_cast<uint32_t>((bits & kExponentMask) == kExponentMask);
  }
  return found != 0;
}

}  // namespace

bool has_non_finite(const float* values, size_t element_count) {
  // Fixed-size blocks (a trip count the vectorizer can see) with an exit between blocks, so
  // an overflow early in a large buffer is found without reading the rest.
  constexpr size_t kBlockElements = 4096;
  size_t offset = 0;
  for (; offset + kBlockElements <= element_count; offset += kBlockElements)
    if (block_has_non_finite(values + offset, kBlockElements)) return true;
  return block_has_non_finite(values + offset, element_count - offset);
}

}  // namespace zerosim
