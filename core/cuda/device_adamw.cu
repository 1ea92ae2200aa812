#include "core/cuda/device_adamw.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

namespace zerosim {

namespace {

constexpr int kTensorsPerLaunch = 32;
constexpr int kThreadsPerBlock = 256;
// Elements one block handles (a chunk): big enough to amortize the table lookup, small enough
// that a few large tensors still spread over every SM.
constexpr int64_t kChunkElements = 65536;

struct LaunchTable {
  DeviceAdamTensor tensors[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];  // prefix sums of each tensor's chunk count
  int tensor_count;
};

struct DeviceScalars {
  float grad_multiplier, l2_weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction2_rsqrt, epsilon, decoupled_decay_factor, step_size;
};

template <WeightDecayMode kMode>
__device__ __forceinline__ void adam_element(const DeviceScalars& s, float& param, float grad_in, float& exp_avg,
                                             float& exp_avg_sq) {
  float grad = __fmul_rn(grad_in, s.grad_multiplier);
  if constexpr (kMode == WeightDecayMode::kL2) grad = __fmaf_rn(param, s.l2_weight_decay, grad);
  float momentum = __fmul_rn(exp_avg, s.beta1);
  momentum = __fmaf_rn(grad, s.one_minus_beta1, momentum);
  const float grad_squared = __fmul_rn(grad, grad);
  float variance = __fmul_rn(exp_avg_sq, s.beta2);
  variance = __fmaf_rn(grad_squared, s.one_minus_beta2, variance);
  const float denominator = __fmaf_rn(__fsqrt_rn(variance), s.bias_correction2_rsqrt, s.epsilon);
  const float update = __fdiv_rn(momentum, denominator);
  float new_param = param;
  if constexpr (kMode == WeightDecayMode::kDecoupled) new_param = __fmaf_rn(new_param, s.decoupled_decay_factor, new_param);
  param = __fmaf_rn(update, s.step_size, new_param);
  exp_avg = momentum;
  exp_avg_sq = variance;
}

template <WeightDecayMode kMode>
__global__ void __launch_bounds__(kThreadsPerBlock) adam_kernel(const __grid_constant__ LaunchTable table,
                                                                const DeviceScalars scalars) {
  const int64_t chunk = blockIdx.x;
  int tensor = 0;
  while (tensor + 1 < table.tensor_count && table.first_chunk[tensor + 1] <= chunk) ++tensor;
  const DeviceAdamTensor& t = table.tensors[tensor];
  const int64_t begin = (chunk - table.first_chunk[tensor]) * kChunkElements;
  const int64_t end = min(begin + kChunkElements, t.element_count);
  const bool aligned = ((reinterpret_cast<uintptr_t>(t.params) | reinterpret_cast<uintptr_t>(t.grads) |
                         reinterpret_cast<uintptr_t>(t.exp_avg) | reinterpret_cast<uintptr_t>(t.exp_avg_sq)) &
                        15) == 0;
  int64_t scalar_begin = begin;
  if (aligned) {
    // Four elements per thread per iteration (16-byte loads and stores); begin is a multiple of 4.
    const int64_t vector_end = begin + (end - begin) / 4 * 4;
    for (int64_t i = begin + 4 * static_cast<int64_t>(threadIdx.x); i < vector_end; i += 4 * kThreadsPerBlock) {
      float4 p = *reinterpret_cast<const float4*>(t.params + i);
      const float4 g = *reinterpret_cast<const float4*>(t.grads + i);
      float4 m = *reinterpret_cast<const float4*>(t.exp_avg + i);
      float4 v = *reinterpret_cast<const float4*>(t.exp_avg_sq + i);
      adam_element<kMode>(scalars, p.x, g.x, m.x, v.x);
      adam_element<kMode>(scalars, p.y, g.y, m.y, v.y);
      adam_element<kMode>(scalars, p.z, g.z, m.z, v.z);
      adam_element<kMode>(scalars, p.w, g.w, m.w, v.w);
      *reinterpret_cast<float4*>(t.params + i) = p;
      *reinterpret_cast<float4*>(t.exp_avg + i) = m;
      *reinterpret_cast<float4*>(t.exp_avg_sq + i) = v;
    }
    scalar_begin = vector_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreadsPerBlock) {
    float p = t.params[i], m = t.exp_avg[i], v = t.exp_avg_sq[i];
    adam_element<kMode>(scalars, p, t.grads[i], m, v);
    t.params[i] = p;
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
  }
}

std::string cuda_error_text(const char* call, cudaError_t error) {
  return std::string(call) + ": " + cudaGetErrorString(error);
}

}  // namespace

Status device_adam_update(const AdamStepScalars& scalars, float grad_multiplier, std::span<const DeviceAdamTensor> tensors,
                          void* stream) {
  const DeviceScalars device_scalars{grad_multiplier,          scalars.l2_weight_decay, scalars.beta1,
                                     scalars.one_minus_beta1,  scalars.beta2,           scalars.one_minus_beta2,
                                     scalars.bias_correction2_rsqrt, scalars.epsilon,  scalars.decoupled_decay_factor,
                                     scalars.step_size};
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  for (size_t first = 0; first < tensors.size(); first += kTensorsPerLaunch) {
    LaunchTable table{};
    table.tensor_count = 0;
    int64_t chunks = 0;
    for (size_t i = first; i < std::min(tensors.size(), first + kTensorsPerLaunch); ++i) {
      if (tensors[i].element_count < 0) {
        return invalid_argument("device AdamW: tensor " + std::to_string(i) + " has a negative element count");
      }
      table.tensors[table.tensor_count] = tensors[i];
      table.first_chunk[table.tensor_count] = chunks;
      chunks += (tensors[i].element_count + kChunkElements - 1) / kChunkElements;
      ++table.tensor_count;
    }
    table.first_chunk[table.tensor_count] = chunks;
    if (chunks == 0) continue;
    const dim3 grid(static_cast<unsigned>(chunks));
    switch (scalars.decay_mode) {
      case WeightDecayMode::kNone:
        adam_kernel<WeightDecayMode::kNone><<<grid, kThreadsPerBlock, 0, cuda_stream>>>(table, device_scalars);
        break;
      case WeightDecayMode::kL2:
        adam_kernel<WeightDecayMode::kL2><<<grid, kThreadsPerBlock, 0, cuda_stream>>>(table, device_scalars);
        break;
      case WeightDecayMode::kDecoupled:
        adam_kernel<WeightDecayMode::kDecoupled><<<grid, kThreadsPerBlock, 0, cuda_stream>>>(table, device_scalars);
        break;
    }
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) {
      return internal_error("device AdamW launch for tensors " + std::to_string(first) + "..: " +
                            cuda_error_text("adam_kernel", launched));
    }
  }
  return Status();
}

Status device_adam_update_from_host(const AdamStepScalars& scalars, float grad_multiplier, float* params,
                                    const float* grads, float* exp_avg, float* exp_avg_sq, size_t element_count,
                                    std::span<const int64_t> tensor_element_counts) {
  int64_t counted = 0;
  for (int64_t count : tensor_element_counts) counted += count;
  if (!tensor_element_counts.empty() && counted != static_cast<int64_t>(element_count)) {
    return invalid_argument("device AdamW: the tensors hold " + std::to_string(counted) + " elements, the arrays " +
                            std::to_string(element_count));
  }
  const size_t bytes = element_count * sizeof(float);
  float* device[4] = {nullptr, nullptr, nullptr, nullptr};
  auto release = [&] {
    for (float*& pointer : device) {
      if (pointer != nullptr) cudaFree(pointer);
      pointer = nullptr;
    }
  };
  const float* host[4] = {params, grads, exp_avg, exp_avg_sq};
  for (int k = 0; k < 4; ++k) {
    cudaError_t error = cudaMalloc(&device[k], std::max<size_t>(bytes, 4));
    if (error == cudaSuccess) error = cudaMemcpy(device[k], host[k], bytes, cudaMemcpyHostToDevice);
    if (error != cudaSuccess) {
      release();
      return failed_precondition(cuda_error_text("cudaMalloc/cudaMemcpy to the device", error));
    }
  }
  std::vector<DeviceAdamTensor> tensors;
  if (tensor_element_counts.empty()) {
    tensors.push_back(DeviceAdamTensor{device[0], device[1], device[2], device[3], static_cast<int64_t>(element_count)});
  } else {
    int64_t offset = 0;
    for (int64_t count : tensor_element_counts) {
      tensors.push_back(DeviceAdamTensor{device[0] + offset, device[1] + offset, device[2] + offset, device[3] + offset, count});
      offset += count;
    }
  }
  const Status launched = device_adam_update(scalars, grad_multiplier, tensors);
  if (!launched.ok()) {
    release();
    return launched;
  }
  const cudaError_t synced = cudaDeviceSynchronize();
  if (synced != cudaSuccess) {
    release();
    return internal_error(cuda_error_text("cudaDeviceSynchronize after AdamW", synced));
  }
  float* back[3] = {params, exp_avg, exp_avg_sq};
  const int from[3] = {0, 2, 3};
  for (int k = 0; k < 3; ++k) {
    const cudaError_t error = cudaMemcpy(back[k], device[from[k]], bytes, cudaMemcpyDeviceToHost);
    if (error != cudaSuccess) {
      release();
      return internal_error(cuda_error_text("cudaMemcpy to the host", error));
    }
  }
  release();
  return Status();
}

}  // namespace zerosim
