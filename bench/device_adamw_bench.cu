// The device AdamW kernel's throughput beside the device-to-device copy bandwidth measured in
// the same run (bench/device_adamw_vs_torch.sh adds PyTorch's fused AdamW on the same sizes).
//
// It steps N fp32 parameters (p, g, m, v in device memory; default 268,435,456: 4 GiB) as one
// tensor or as --tensors equal tensors, best of --repetitions, and counts 28 B per parameter
// (reads p, g, m, v; writes p, m, v). The copy is cudaMemcpy device to device of 1 GiB, best of
// the same number of runs, counted as bytes read plus bytes written. Prints one JSON line.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/device_adamw.h"

namespace {

__global__ void fill(float* data, int64_t count, uint32_t seed, float scale, float offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    data[i] = offset + scale * (static_cast<float>(x & 0xffffff) / 16777216.0f - 0.5f);
  }
}

bool check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t parameters = int64_t{268435456};
  int tensors = 1;
  int repetitions = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--params") == 0) parameters = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--tensors") == 0) tensors = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--repetitions") == 0) repetitions = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: device_adamw_bench [--params N] [--tensors T] [--repetitions R]\n");
      return 2;
    }
  }
  if (parameters <= 0 || tensors <= 0 || repetitions <= 0) {
    std::fprintf(stderr, "device_adamw_bench: --params, --tensors and --repetitions must be positive\n");
    return 2;
  }
  float* arrays[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int k = 0; k < 4; ++k) {
    if (!check(cudaMalloc(&arrays[k], static_cast<size_t>(parameters) * sizeof(float)), "cudaMalloc")) return 3;
    fill<<<1024, 256>>>(arrays[k], parameters, 17u + k, k == 3 ? 1e-4f : 1.0f, k == 3 ? 1e-4f : 0.0f);
  }
  if (!check(cudaDeviceSynchronize(), "fill")) return 3;
  std::vector<zerosim::DeviceAdamTensor> table;
  const int64_t per_tensor = parameters / tensors;
  for (int t = 0; t < tensors; ++t) {
    const int64_t offset = t * per_tensor;
    const int64_t count = t + 1 == tensors ? parameters - offset : per_tensor;
    table.push_back({arrays[0] + offset, arrays[1] + offset, arrays[2] + offset, arrays[3] + offset, count});
  }
  zerosim::AdamHyperparameters hyperparameters;
  hyperparameters.learning_rate = 1e-3f;
  hyperparameters.weight_decay = 0.01f;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best_adam_ms = 1e30f;
  for (int r = 0; r < repetitions + 1; ++r) {  // the first is a warm-up
    const zerosim::AdamStepScalars scalars = zerosim::make_adam_step_scalars(hyperparameters, r + 1);
    cudaEventRecord(start);
    const zerosim::Status status = zerosim::device_adam_update(scalars, 1.0f, table);
    cudaEventRecord(stop);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.to_string().c_str());
      return 1;
    }
    if (!check(cudaEventSynchronize(stop), "adam")) return 3;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0) best_adam_ms = std::min(best_adam_ms, ms);
  }
  const size_t copy_bytes = size_t{1} << 30;
  void* source = nullptr;
  void* destination = nullptr;
  if (!check(cudaMalloc(&source, copy_bytes), "cudaMalloc") || !check(cudaMalloc(&destination, copy_bytes), "cudaMalloc")) {
    return 3;
  }
  cudaMemset(source, 1, copy_bytes);
  float best_copy_ms = 1e30f;
  for (int r = 0; r < repetitions + 1; ++r) {
    cudaEventRecord(start);
    cudaMemcpyAsync(destination, source, copy_bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    if (!check(cudaEventSynchronize(stop), "copy")) return 3;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0) best_copy_ms = std::min(best_copy_ms, ms);
  }
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, 0);
  const double adam_params_per_s = static_cast<double>(parameters) / (best_adam_ms * 1e-3);
  const double adam_bytes_per_s = adam_params_per_s * 28.0;
  const double copy_bytes_per_s = 2.0 * static_cast<double>(copy_bytes) / (best_copy_ms * 1e-3);
  std::printf("{\"device\": \"%s\", \"params\": %lld, \"tensors\": %d, \"adam_ms\": %.3f, \"adam_gparams_per_s\": %.2f, "
              "\"adam_tb_per_s_at_28b\": %.3f, \"copy_tb_per_s\": %.3f, \"adam_over_copy\": %.3f}\n",
              properties.name, static_cast<long long>(parameters), tensors, best_adam_ms, adam_params_per_s / 1e9,
              adam_bytes_per_s / 1e12, copy_bytes_per_s / 1e12, adam_bytes_per_s / copy_bytes_per_s);
  return 0;
}
