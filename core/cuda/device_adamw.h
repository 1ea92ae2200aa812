// The AdamW step on a CUDA device: one fused, multi-tensor kernel launch over any number of
// flat fp32 tensors (params, grads, exp_avg, exp_avg_sq), with the CPU kernel's exact op
// sequence (core/optim/adamw.h), element for element:
//   g = g_in * grad_multiplier; [L2: g = fma(p, wd, g)]; m = fma(g, 1-b1, m*b1);
//   v = fma(g*g, 1-b2, v*b2); d = fma(sqrt(v), bc2_rsqrt, eps); u = m / d;
//   [AdamW: p = fma(p, -lr*wd, p)]; p = fma(u, step_size, p)
// spelled with the round-to-nearest intrinsics (__fmul_rn, __fmaf_rn, __fsqrt_rn, __fdiv_rn),
// which nvcc never contracts or approximates, and no flush-to-zero. IEEE 754 rounds each of
// those ops correctly, so the GPU writes the same bits as every CPU path: a run may move its
// optimizer between the host and the device, or resume on the other, without changing a bit.
// (NaN payloads may differ, as between CPU paths.)
//
// Without the CUDA backend (no nvcc at configure time) every call returns kFailedPrecondition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/optim/adamw.h"
#include "core/status.h"

namespace zerosim {

// One tensor's four arrays, in device memory, each element_count long (no alignment needed;
// 16-byte aligned arrays take the vectorized path). The arrays must not overlap.
struct DeviceAdamTensor {
  float* params = nullptr;
  const float* grads = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  int64_t element_count = 0;
};

// Enqueues the step for every tensor on `stream` (a cudaStream_t; nullptr: the default
// stream), in as few launches as the kernel's argument table allows (32 tensors each).
// Returns the launch error, naming the tensor index; does not synchronize.
Status device_adam_update(const AdamStepScalars& scalars, float grad_multiplier,
                          std::span<const DeviceAdamTensor> tensors, void* stream = nullptr);

// For tests and tools: copies host arrays to the device, runs the step, copies them back,
// and synchronizes. The arrays are cut into consecutive tensors of `tensor_element_counts`
// (summing to element_count; empty: one tensor), which start at whatever alignment their
// offsets give, and all go through one device_adam_update call. Errors name the CUDA call.
Status device_adam_update_from_host(const AdamStepScalars& scalars, float grad_multiplier, float* params,
                                    const float* grads, float* exp_avg, float* exp_avg_sq, size_t element_count,
                                    std::span<const int64_t> tensor_element_counts = {});

}  // namespace zerosim
