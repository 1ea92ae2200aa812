// One row of softmax cross-entropy on a CUDA device, computed by one block: the MLP's loss
// (device_mlp.cu) and the transformer's (device_gpt_backend.cu) both call it, and both hold it
// to their CPU kernels' bits (softmax_cross_entropy in core/model/mlp.h, the loss in
// core/model/gpt.cpp). The maximum and the exponential sum are thread 0's left folds in class
// order; the exponentials (portable_expf's op sequence) and the gradient spread over the block;
// every operation rounded on its own. Device code: included by .cu files only.
#pragma once

#include <cstdint>

#include "core/cuda/device_portable_math.cuh"

namespace zerosim {

// Every thread of the block calls it with the same arguments. Writes gradient[c] =
// (softmax(logits)[c] - [c == target]) * gradient_scale and, from thread 0, *row_loss =
// log(sum of exp(logits - max)) - (logits[target] - max). `gradient` may be `logits` (in place:
// the target's logit is read before the exponentials replace it). Returns with the block
// synchronized, so a loop over rows may call it again at once.
__device__ inline void device_softmax_cross_entropy_row(const float* logits, float* gradient, int64_t classes,
                                                        int32_t target, float gradient_scale, float* row_loss) {
  __shared__ float maximum, exp_sum, target_logit;
  if (threadIdx.x == 0) {
    float m = logits[0];
    for (int64_t c = 1; c < classes; ++c) m = logits[c] > m ? logits[c] : m;
    maximum = m;
    target_logit = logits[target];
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    gradient[c] = device_portable_expf(__fsub_rn(logits[c], maximum));  // the exponentials, parked
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int64_t c = 0; c < classes; ++c) total = __fadd_rn(total, gradient[c]);
    exp_sum = total;
    *row_loss = __fsub_rn(device_portable_logf(total), __fsub_rn(target_logit, maximum));
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    gradient[c] = __fmul_rn(__fsub_rn(__fdiv_rn(gradient[c], exp_sum), c == target ? 1.0f : 0.0f), gradient_scale);
  }
  __syncthreads();
}

}  // namespace zerosim
