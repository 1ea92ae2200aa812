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

}  // namespace zerosim
