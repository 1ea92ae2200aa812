// One row of softmax cross-entropy on a CUDA device, computed by one block: the MLP's loss
// (device_mlp.cu) and the transformer's (device_gpt_backend.cu) both call it, and both hold it
// to their CPU kernels' bits (softmax_cross_entropy in core/model/mlp.h, the loss in
// core/model/gpt.cpp). The CPU takes the maximum as a left fold from class 0 (a class replaces
// it only when strictly greater, so the first of equal values stays and a NaN at class 0 is
// never replaced) and the exponential sum as a left fold in class order; every operation is
// rounded on its own.
//
// Why it is spread the way it is: the maximum is the same value whichever thread finds it, so
// the block finds it in parallel (each thread keeps its first greatest class, the block keeps
// the lowest class among equal values, which gives the fold's choice between +0 and -0). The
// sum's order is the CPU's, so one thread folds it, but from shared memory: the block computes
// a chunk of exponentials into shared memory (and into `gradient`), then thread 0 folds the
// chunk. A fold over a 50,257-class vocabulary read from global memory by one thread cost
// milliseconds per row; from shared memory it is bound by the adds' own latency.
// Device code: included by .cu files only.
#pragma once

#include <cstdint>

#include "core/cuda/device_portable_math.cuh"

namespace zerosim {

constexpr int kSoftmaxChunk = 2048;      // exponentials staged per fold round (8 KiB of shared memory)
constexpr int kSoftmaxMaxThreads = 1024;  // the largest block the row accepts

// Every thread of the block calls it with the same arguments. Writes gradient[c] =
// (softmax(logits)[c] - [c == target]) * gradient_scale and, from thread 0, *row_loss =
// log(sum of exp(logits - max)) - (logits[target] - max). `gradient` may be `logits` (in place:
// the target's logit is read before the exponentials replace it). Returns with the block
// synchronized, so a loop over rows may call it again at once.
__device__ inline void device_softmax_cross_entropy_row(const float* logits, float* gradient, int64_t classes,
                                                        int32_t target, float gradient_scale, float* row_loss) {
  __shared__ float maximum, exp_sum, target_logit;
  __shared__ float best_values[kSoftmaxMaxThreads];
  __shared__ int64_t best_classes[kSoftmaxMaxThreads];
  __shared__ float staged[kSoftmaxChunk];
  const int thread = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  // Each thread's first greatest value among classes >= 1 (a NaN never compares greater).
  float best = -__int_as_float(0x7f800000);  // -infinity
  int64_t best_class = INT64_MAX;            // none yet
  for (int64_t c = 1 + thread; c < classes; c += threads) {
    const float value = logits[c];
    if (value > best || (value == best && best_class == INT64_MAX)) {
      best = value;
      best_class = c;
    }
  }
  best_values[thread] = best;
  best_classes[thread] = best_class;
  __syncthreads();
  if (thread == 0) {
    float m = logits[0];
    int64_t m_class = 0;
    const bool first_is_nan = m != m;
    for (int k = 0; k < threads && !first_is_nan; ++k) {
      if (best_classes[k] == INT64_MAX) continue;
      if (best_values[k] > m || (best_values[k] == m && best_classes[k] < m_class)) {
        m = best_values[k];
        m_class = best_classes[k];
      }
    }
    maximum = m;
    target_logit = logits[target];
  }
  __syncthreads();
  float total = 0.0f;  // thread 0's fold
  for (int64_t chunk = 0; chunk < classes; chunk += kSoftmaxChunk) {
    const int64_t count = classes - chunk < kSoftmaxChunk ? classes - chunk : kSoftmaxChunk;
    for (int64_t k = thread; k < count; k += threads) {
      const float e = device_portable_expf(__fsub_rn(logits[chunk + k], maximum));
      staged[k] = e;
      gradient[chunk + k] = e;  // the exponentials, parked
    }
    __syncthreads();
    if (thread == 0) {
      for (int64_t k = 0; k < count; ++k) total = __fadd_rn(total, staged[k]);
    }
    __syncthreads();
  }
  if (thread == 0) {
    exp_sum = total;
    *row_loss = __fsub_rn(device_portable_logf(total), __fsub_rn(target_logit, maximum));
  }
  __syncthreads();
  for (int64_t c = thread; c < classes; c += threads) {
    gradient[c] = __fmul_rn(__fsub_rn(__fdiv_rn(gradient[c], exp_sum), c == target ? 1.0f : 0.0f), gradient_scale);
  }
  __syncthreads();
}

}  // namespace zerosim
