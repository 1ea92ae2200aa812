// The MLP's layer forward and backward on a CUDA device, in deterministic mode: every sum is
// the CPU model's left fold (core/model/mlp.h) in the same index order, with a separate
// round-to-nearest multiply and add (__fmul_rn, __fadd_rn: never contracted to an FMA), one
// thread per output element. So a layer on the GPU writes the CPU layer's bits, and a run may
// move between the backends, resume on the other, or change world size without changing one.
// (This mode trades the tensor cores for that; a cuBLAS fast mode is still to come.)
//
// All pointers are device memory, row-major as on the CPU: input [samples, in], weight
// [out, in], bias [out], pre_activation [samples, out]. Calls enqueue on `stream` (a
// cudaStream_t; nullptr: the default stream) and return the launch error; they do not wait.
// Without the CUDA backend they return kFailedPrecondition.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace zerosim {

struct DeviceLayerShape {
  int64_t samples = 0;
  int64_t in = 0;   // input features
  int64_t out = 0;  // output features
};

// pre_activation[s][o] = bias[o] + x[s][0]*w[o][0] + ... (left fold), then, when next_input is
// not null, next_input = ReLU(pre_activation) (a hidden layer feeding the next).
Status device_mlp_layer_forward(const DeviceLayerShape& shape, const float* input, const float* weight,
                                const float* bias, float* pre_activation, float* next_input, void* stream = nullptr);

// weight_gradient[o][i] = sum over s in order of dz[s][o]*x[s][i]; bias_gradient[o] = sum over
// s of dz[s][o] (both from zero); and, when previous_output_gradient is not null (not layer
// 0), dx[s][i] = sum over o in order of dz[s][o]*w[o][i], zeroed where the previous layer's
// pre-activation is not positive.
Status device_mlp_layer_backward(const DeviceLayerShape& shape, const float* input, const float* weight,
                                 const float* output_gradient, const float* previous_pre_activation,
                                 float* weight_gradient, float* bias_gradient, float* previous_output_gradient,
                                 void* stream = nullptr);

// The mean softmax cross-entropy of a micro-batch and the gradient of gradient_scale x the
// summed loss with respect to the logits, as softmax_cross_entropy (core/model/mlp.h) computes
// them: the same folds, and exp and log by portable_exp / portable_log's exact op sequence in
// double (core/tensor/portable_math.h), so the loss and the gradient are the CPU's bits.
// logits [samples, classes], labels [samples] (int32, each in [0, classes)), sample_losses a
// device scratch of `samples` floats, loss one device float. Enqueues; does not wait.
Status device_softmax_cross_entropy(int64_t samples, int64_t classes, const float* logits, const int32_t* labels,
                                    float gradient_scale, float* logits_gradient, float* sample_losses, float* loss,
                                    void* stream = nullptr);

// portable_exp / portable_log on the device, elementwise over `count` doubles (for tests that
// hold them to the host's bits). Synchronous; host pointers in and out.
Status device_portable_exp_log(const double* arguments, size_t count, double* exp_results, double* log_results);

}  // namespace zerosim
