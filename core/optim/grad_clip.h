// Unscale-and-clip by global norm (DeepSpeed ZeRO-3 unscale_and_clip_grads,
// docs/deepspeed-semantics.md §3.5), and the inf/NaN check that decides an fp16 overflow (§3.4).
//
// Promise: the multiplier is a pure function of (scaled norm, loss scale, max norm) with the
// precision of every op fixed below, so a resumed run that reproduces the norm reproduces the
// multiplier. It is applied as ONE fp32 multiply per gradient element, inside adam_update()
// (its grad_multiplier argument), i.e. in the same pass as the Adam step.
//
// The ops, in fp32 as DeepSpeed evaluates them on its fp32 norm tensor (stage3.py
// unscale_and_clip_grads; a Python float meeting an fp32 tensor is rounded to fp32 first):
//   S = float(loss_scale)
//   if max_grad_norm > 0:
//     clip = ((scaled_global_grad_norm / S) + 1e-6f) / float(max_grad_norm)
//     clip = clamp(clip, min 1)   (spelled "if clip > 1", so a NaN stays unclipped, below)
//     combined_scale = clip * S                      grad_multiplier = 1.0f / combined_scale
//   else: grad_multiplier = float(1.0 / loss_scale)  (a Python float division, then the cast)
// DeepSpeed reaches a non-finite norm only under bf16/fp32 (fp16 skips the step first), and
// there its sub-group norms are masked to -1 before the global norm; the engine passes -1
// for a non-finite norm, which leaves the gradients merely unscaled.
#pragma once

#include <cstddef>

namespace zerosim {

struct UnscaleAndClip {
  float combined_scale = 1.0f;  // float(loss_scale), times the clip factor when clipping
  float grad_multiplier = 1.0f; // 1 / combined_scale: what adam_update() multiplies by
  bool clipped = false;         // whether the clip factor exceeded 1
};

// scaled_global_grad_norm: the L2 norm of the loss-scaled gradients over all ranks, as the
// fp32 value DeepSpeed holds. loss_scale > 0: the scale after this step's update_scale(),
// which is the one DeepSpeed unscales by. max_grad_norm: gradient_clipping; 0 (or less)
// disables clipping.
UnscaleAndClip compute_unscale_and_clip(float scaled_global_grad_norm, double loss_scale, double max_grad_norm);

// True when any of the element_count values is +inf, -inf or NaN. Looks at the exponent bits
// only, so it is immune to compiler floating-point flags and to FTZ/DAZ.
bool has_non_finite(const float* values, size_t element_count);

}  // namespace zerosim
