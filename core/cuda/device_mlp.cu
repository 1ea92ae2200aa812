#include "core/cuda/device_mlp.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/cuda/device_portable_math.cuh"
#include "core/cuda/device_softmax_row.cuh"

namespace zerosim {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t work) { return static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 65535)); }

__global__ void forward_kernel(int64_t samples, int64_t in, int64_t out, const float* input, const float* weight,
                               const float* bias, float* pre_activation, float* next_input) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < samples * out;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = k / out, o = k % out;
    const float* x = input + s * in;
    const float* w = weight + o * in;
    float sum = bias[o];
    for (int64_t i = 0; i < in; ++i) sum = __fadd_rn(sum, __fmul_rn(x[i], w[i]));
    pre_activation[k] = sum;
    if (next_input != nullptr) next_input[k] = sum > 0.0f ? sum : 0.0f;
  }
}

__global__ void weight_gradient_kernel(int64_t samples, int64_t in, int64_t out, const float* input,
                                       const float* output_gradient, float* weight_gradient) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < out * in;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = k / in, i = k % in;
    float sum = 0.0f;
    for (int64_t s = 0; s < samples; ++s) sum = __fadd_rn(sum, __fmul_rn(output_gradient[s * out + o], input[s * in + i]));
    weight_gradient[k] = sum;
  }
}

__global__ void bias_gradient_kernel(int64_t samples, int64_t out, const float* output_gradient, float* bias_gradient) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < out;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t s = 0; s < samples; ++s) sum = __fadd_rn(sum, output_gradient[s * out + o]);
    bias_gradient[o] = sum;
  }
}

__global__ void input_gradient_kernel(int64_t samples, int64_t in, int64_t out, const float* weight,
                                      const float* output_gradient, const float* previous_pre_activation,
                                      float* previous_output_gradient) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < samples * in;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = k / in, i = k % in;
    float sum = 0.0f;
    for (int64_t o = 0; o < out; ++o) sum = __fadd_rn(sum, __fmul_rn(output_gradient[s * out + o], weight[o * in + i]));
    previous_output_gradient[k] = previous_pre_activation[k] > 0.0f ? sum : 0.0f;
  }
}

// The CPU's per-sample loop, one block per sample (device_softmax_row.cuh).
__global__ void softmax_kernel(int64_t samples, int64_t classes, const float* logits, const int32_t* labels,
                               float gradient_scale, float* logits_gradient, float* sample_losses) {
  for (int64_t s = blockIdx.x; s < samples; s += gridDim.x) {
    device_softmax_cross_entropy_row(logits + s * classes, logits_gradient + s * classes, classes, labels[s],
                                     gradient_scale, sample_losses + s);
  }
}

// The loss: a left fold over the samples in order, then divided by the sample count.
__global__ void loss_fold_kernel(int64_t samples, const float* sample_losses, float* loss) {
  float sum = 0.0f;
  for (int64_t s = 0; s < samples; ++s) sum = __fadd_rn(sum, sample_losses[s]);
  *loss = __fdiv_rn(sum, static_cast<float>(samples));
}

__global__ void exp_log_kernel(const double* arguments, size_t count, double* exp_results, double* log_results) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<size_t>(gridDim.x) * blockDim.x) {
    exp_results[k] = device_portable_exp(arguments[k]);
    log_results[k] = device_portable_log(arguments[k]);
  }
}

Status launched(const char* kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status();
  return internal_error(std::string("device MLP: ") + kernel + ": " + cudaGetErrorString(error));
}

Status check_shape(const DeviceLayerShape& shape) {
  if (shape.samples < 0 || shape.in <= 0 || shape.out <= 0) {
    return invalid_argument("device MLP: layer shape samples " + std::to_string(shape.samples) + ", in " +
                            std::to_string(shape.in) + ", out " + std::to_string(shape.out));
  }
  return Status();
}

}  // namespace

Status device_mlp_layer_forward(const DeviceLayerShape& shape, const float* input, const float* weight,
                                const float* bias, float* pre_activation, float* next_input, void* stream) {
  ZEROSIM_RETURN_IF_ERROR(check_shape(shape));
  if (shape.samples == 0) return Status();
  forward_kernel<<<blocks_for(shape.samples * shape.out), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      shape.samples, shape.in, shape.out, input, weight, bias, pre_activation, next_input);
  return launched("forward");
}

Status device_mlp_layer_backward(const DeviceLayerShape& shape, const float* input, const float* weight,
                                 const float* output_gradient, const float* previous_pre_activation,
                                 float* weight_gradient, float* bias_gradient, float* previous_output_gradient,
                                 void* stream) {
  ZEROSIM_RETURN_IF_ERROR(check_shape(shape));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  weight_gradient_kernel<<<blocks_for(shape.out * shape.in), kThreads, 0, cuda_stream>>>(
      shape.samples, shape.in, shape.out, input, output_gradient, weight_gradient);
  ZEROSIM_RETURN_IF_ERROR(launched("weight gradient"));
  bias_gradient_kernel<<<blocks_for(shape.out), kThreads, 0, cuda_stream>>>(shape.samples, shape.out, output_gradient,
                                                                             bias_gradient);
  ZEROSIM_RETURN_IF_ERROR(launched("bias gradient"));
  if (previous_output_gradient == nullptr || shape.samples == 0) return Status();
  if (previous_pre_activation == nullptr) {
    return invalid_argument("device MLP: the input gradient needs the previous layer's pre-activation");
  }
  input_gradient_kernel<<<blocks_for(shape.samples * shape.in), kThreads, 0, cuda_stream>>>(
      shape.samples, shape.in, shape.out, weight, output_gradient, previous_pre_activation, previous_output_gradient);
  return launched("input gradient");
}

Status device_softmax_cross_entropy(int64_t samples, int64_t classes, const float* logits, const int32_t* labels,
                                    float gradient_scale, float* logits_gradient, float* sample_losses, float* loss,
                                    void* stream) {
  if (samples <= 0 || classes < 2) {
    return invalid_argument("device softmax: " + std::to_string(samples) + " samples of " + std::to_string(classes) +
                            " classes");
  }
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  softmax_kernel<<<static_cast<unsigned>(std::min<int64_t>(samples, 65535)), kThreads, 0, cuda_stream>>>(
      samples, classes, logits, labels, gradient_scale, logits_gradient, sample_losses);
  ZEROSIM_RETURN_IF_ERROR(launched("softmax"));
  loss_fold_kernel<<<1, 1, 0, cuda_stream>>>(samples, sample_losses, loss);
  return launched("loss fold");
}

Status device_portable_exp_log(const double* arguments, size_t count, double* exp_results, double* log_results) {
  double* device = nullptr;
  const size_t bytes = std::max<size_t>(count, 1) * sizeof(double);
  if (cudaMalloc(&device, 3 * bytes) != cudaSuccess) return internal_error("device exp/log: cudaMalloc failed");
  cudaMemcpy(device, arguments, count * sizeof(double), cudaMemcpyHostToDevice);
  exp_log_kernel<<<blocks_for(static_cast<int64_t>(count)), kThreads>>>(device, count, device + bytes / sizeof(double),
                                                                         device + 2 * bytes / sizeof(double));
  const Status status = launched("exp/log");
  if (!status.ok()) {
    cudaFree(device);
    return status;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) {
    cudaFree(device);
    return internal_error("device exp/log: synchronize failed");
  }
  cudaMemcpy(exp_results, device + bytes / sizeof(double), count * sizeof(double), cudaMemcpyDeviceToHost);
  cudaMemcpy(log_results, device + 2 * bytes / sizeof(double), count * sizeof(double), cudaMemcpyDeviceToHost);
  cudaFree(device);
  return Status();
}

}  // namespace zerosim
