#include <cuda_runtime.h>

#include "core/cuda/cuda_probe.h"

namespace zerosim {

namespace {
// A trivial kernel, so that nvcc generates and the linker carries device code for the
// configured architectures (a broken CUDA toolchain fails the build, not a later run).
__global__ void fill_kernel(int* destination, int value) { *destination = value; }
}  // namespace

Result<CudaProbe> probe_cuda() {
  CudaProbe probe;
  probe.compiled_with_cuda = true;
  if (cudaRuntimeGetVersion(&probe.runtime_version) != cudaSuccess) probe.runtime_version = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&probe.device_count);
  if (count_error == cudaErrorNoDevice || count_error == cudaErrorInsufficientDriver) {
    probe.device_count = 0;
    return probe;
  }
  if (count_error != cudaSuccess) {
    return failed_precondition(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(count_error));
  }
  if (probe.device_count > 0) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, 0) == cudaSuccess) probe.first_device_name = properties.name;
    int* device_value = nullptr;
    if (cudaMalloc(&device_value, sizeof(int)) == cudaSuccess) {
      fill_kernel<<<1, 1>>>(device_value, 42);
      int host_value = 0;
      const cudaError_t copy_error = cudaMemcpy(&host_value, device_value, sizeof(int), cudaMemcpyDeviceToHost);
      cudaFree(device_value);
      if (copy_error != cudaSuccess || host_value != 42) {
        return internal_error(std::string("CUDA probe kernel did not run: ") + cudaGetErrorString(copy_error));
      }
    }
  }
  return probe;
}

}  // namespace zerosim
