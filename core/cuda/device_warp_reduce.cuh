// A warp's maximum and sum by a butterfly of shuffles, for the fast mode's row kernels. Every
// lane ends with the same bits (each step adds two values that every lane pairs the same way,
// and a + b is b + a), and the tree is fixed by the warp's width alone: the same bits run to run.
// Device code: included by .cu files only.
#pragma once

namespace zerosim {

inline constexpr int kWarpLanes = 32;

__device__ inline float warp_max(float value) {
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

__device__ inline float warp_sum(float value) {
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

}  // namespace zerosim
