// Unscale-and-clip by global norm (DeepSpeed ZeRO-3 unscale_and_clip_grads,
// deepspeed-semantics.md §3.5), and the inf/NaN check that decides an fp16 overflow (§3.4).
//
// Promise: the multiplier is a pure function of (scaled norm, loss scale, max norm) with the
// precision of every op fixed below, so a resumed run that reproduces the norm reproduces the
// multiplier. It is applied as ONE fp32 multiply per gradient element, inside adam_update()
// (its grad_multiplier argument), i.e. in the same pass as the Adam step.
//
// The ops, all in double (as Python's float arithmetic), then one cast:
//   combined_scale = loss_scale
//   if max_grad_norm > 0:
//     clip = ((scaled_global_grad_norm / loss_scale) + 1e-6) / max_grad_norm
//     if clip > 1: combined_scale = clip * loss_scale
//   grad_multiplier = float(1.0 / combined_scale)
// "if clip > 1" rather than max(clip, 1): a NaN norm (and bf16's -1 sentinel for a non-finite
// norm) leaves the gradients merely unscaled, as DeepSpeed's comparison does.
// DeepSpeed evaluates this chain on an fp32 tensor (its norm is an fp32 tensor), so its
// multiplier may differ from ours in the last fp32 ulp; zerosim's bits are defined here.
#pragma once

#include <cstddef>

namespace zerosim {

struct UnscaleAndClip {
  double combined_scale = 1.0;  // loss_scale, times the clip factor when clipping
  float grad_multiplier = 1.0f; // float(1 / combined_scale): what adam_update() multiplies by
  bool clipped = false;         // whether the clip factor exceeded 1
};

// scaled_global_grad_norm: the L2 norm of the loss-scaled gradients over all ranks.
// loss_scale > 0. max_grad_norm: gradient_clipping; 0 (or less) disables clipping.
UnscaleAndClip compute_unscale_and_clip(double scaled_global_grad_norm, double loss_scale, double max_grad_norm);

// True when any of the element_count values is +inf, -inf or NaN. Looks at the exponent bits
// only, so it is immune to compiler floating-point flags and to FTZ/DAZ.
bool has_non_finite(const float* values, size_t element_count);

}  // namespace zerosim
