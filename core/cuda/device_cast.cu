#include "core/cuda/device_cast.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/cuda/batched_launch.cuh"
#include "core/tensor/dtype_bits.h"

namespace zerosim {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t count) { return static_cast<int>(std::min<int64_t>((count + kThreads - 1) / kThreads, 65535)); }

__global__ void from_fp32_kernel(bool to_fp16, const float* source, uint16_t* destination, int64_t count) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t bits = __float_as_uint(source[k]);
    destination[k] = to_fp16 ? fp32_bits_to_fp16_bits(bits) : fp32_bits_to_bf16_bits(bits);
  }
}

__global__ void to_fp32_kernel(bool from_fp16, const uint16_t* source, float* destination, int64_t count) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    destination[k] = __uint_as_float(from_fp16 ? fp16_bits_to_fp32_bits(source[k]) : bf16_bits_to_fp32_bits(source[k]));
  }
}

// A launch's share of a batch (batched_launch.cuh), either direction.
struct CastBatch {
  const void* source[kWideningsPerLaunch];
  void* destination[kWideningsPerLaunch];
  int64_t count[kWideningsPerLaunch];
  int block_start[kWideningsPerLaunch + 1];
  int jobs;
};

// `narrowing`: fp32 sources to `dtype`; else `dtype` sources to fp32. fp32 to fp32 copies.
__global__ void cast_batch_kernel(int dtype, bool narrowing, CastBatch batch) {
  const auto [job, first, stride] = batched_slice(batch.block_start, batch.jobs);
  const int64_t count = batch.count[job];
  if (dtype == static_cast<int>(DType::kFp32)) {
    const float* source = static_cast<const float*>(batch.source[job]);
    float* destination = static_cast<float*>(batch.destination[job]);
    for (int64_t k = first; k < count; k += stride) destination[k] = source[k];
    return;
  }
  const bool fp16 = dtype == static_cast<int>(DType::kFp16);
  if (narrowing) {
    const float* source = static_cast<const float*>(batch.source[job]);
    uint16_t* destination = static_cast<uint16_t*>(batch.destination[job]);
    for (int64_t k = first; k < count; k += stride) {
      const uint32_t bits = __float_as_uint(source[k]);
      destination[k] = fp16 ? fp32_bits_to_fp16_bits(bits) : fp32_bits_to_bf16_bits(bits);
    }
    return;
  }
  const uint16_t* source = static_cast<const uint16_t*>(batch.source[job]);
  float* destination = static_cast<float*>(batch.destination[job]);
  for (int64_t k = first; k < count; k += stride) {
    destination[k] = __uint_as_float(fp16 ? fp16_bits_to_fp32_bits(source[k]) : bf16_bits_to_fp32_bits(source[k]));
  }
}

// fp32 to fp32: a device copy.
Status copy_fp32(const void* source, void* destination, int64_t element_count, cudaStream_t stream) {
  const cudaError_t error = cudaMemcpyAsync(destination, source, static_cast<size_t>(element_count) * sizeof(float),
                                            cudaMemcpyDeviceToDevice, stream);
  return error == cudaSuccess ? Status() : internal_error(std::string("device cast: ") + cudaGetErrorString(error));
}

Status launched(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status();
  return internal_error(std::string("device cast ") + what + ": " + cudaGetErrorString(error));
}

}  // namespace

Status device_cast_from_fp32(DType dtype, const float* source, std::byte* destination, int64_t element_count,
                             void* stream) {
  if (element_count < 0) return invalid_argument("device cast: negative element count");
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (element_count == 0) return Status();
  if (dtype == DType::kFp32) return copy_fp32(source, destination, element_count, cuda_stream);
  from_fp32_kernel<<<blocks_for(element_count), kThreads, 0, cuda_stream>>>(
      dtype == DType::kFp16, source, reinterpret_cast<uint16_t*>(destination), element_count);
  return launched("from fp32");
}

Status device_cast_to_fp32(DType dtype, const std::byte* source, float* destination, int64_t element_count,
                           void* stream) {
  if (element_count < 0) return invalid_argument("device cast: negative element count");
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (element_count == 0) return Status();
  if (dtype == DType::kFp32) return copy_fp32(source, destination, element_count, cuda_stream);
  to_fp32_kernel<<<blocks_for(element_count), kThreads, 0, cuda_stream>>>(
      dtype == DType::kFp16, reinterpret_cast<const uint16_t*>(source), destination, element_count);
  return launched("to fp32");
}

namespace {

// Packs `jobs` (DeviceWidening or DeviceNarrowing) into launches of kWideningsPerLaunch.
template <typename Job>
Status cast_batch(DType dtype, bool narrowing, std::span<const Job> jobs, void* stream) {
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const char* what = narrowing ? "from fp32 (batch)" : "to fp32 (batch)";
  CastBatch batch{};
  auto launch = [&]() -> Status {
    if (batch.jobs == 0) return Status();
    cast_batch_kernel<<<batch.block_start[batch.jobs], kThreads, 0, cuda_stream>>>(static_cast<int>(dtype), narrowing,
                                                                                    batch);
    batch = CastBatch{};
    return launched(what);
  };
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    if (job.element_count < 0) {
      return invalid_argument(std::string("device cast ") + what + ": job " + std::to_string(j) +
                              " has a negative element count (" + std::to_string(job.element_count) + ")");
    }
    if (job.element_count == 0) continue;
    const int slot = batch.jobs++;
    batch.source[slot] = job.source;
    batch.destination[slot] = job.destination;
    batch.count[slot] = job.element_count;
    batch.block_start[slot + 1] = batch.block_start[slot] + batched_job_blocks(job.element_count, kThreads);
    if (batch.jobs == kWideningsPerLaunch) ZEROSIM_RETURN_IF_ERROR(launch());
  }
  return launch();
}

}  // namespace

Status device_cast_to_fp32_batch(DType dtype, std::span<const DeviceWidening> jobs, void* stream) {
  return cast_batch(dtype, false, jobs, stream);
}

Status device_cast_from_fp32_batch(DType dtype, std::span<const DeviceNarrowing> jobs, void* stream) {
  return cast_batch(dtype, true, jobs, stream);
}

}  // namespace zerosim
