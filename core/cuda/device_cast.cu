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

__device__ inline uint16_t narrowed(bool fp16, float value) {
  const uint32_t bits = __float_as_uint(value);
  return fp16 ? fp32_bits_to_fp16_bits(bits) : fp32_bits_to_bf16_bits(bits);
}

__device__ inline float widened(bool fp16, uint16_t value) {
  return __uint_as_float(fp16 ? fp16_bits_to_fp32_bits(value) : bf16_bits_to_fp32_bits(value));
}

__global__ void from_fp32_kernel(bool to_fp16, const float* source, uint16_t* destination, int64_t count) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    destination[k] = narrowed(to_fp16, source[k]);
  }
}

__global__ void to_fp32_kernel(bool from_fp16, const uint16_t* source, float* destination, int64_t count) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    destination[k] = widened(from_fp16, source[k]);
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

__device__ inline bool aligned_to(const void* pointer, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

// `narrowing`: fp32 sources to `dtype`; else `dtype` sources to fp32. fp32 to fp32 copies.
// A 16-bit job whose fp32 side is 16-byte aligned and 16-bit side 8-byte aligned (an
// allocation's start, a product's operand) goes four elements a thread, in one 16-byte and one
// 8-byte access: the cast of each element is the same function, so the bits are those of the
// element-wise loop; the job's last count % 4 elements go one a thread.
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
  const void* wide = narrowing ? batch.source[job] : batch.destination[job];
  const void* narrow = narrowing ? batch.destination[job] : batch.source[job];
  int64_t k = first;
  if (aligned_to(wide, 16) && aligned_to(narrow, 8)) {
    const int64_t groups = count / 4;
    if (narrowing) {
      const float4* source = static_cast<const float4*>(batch.source[job]);
      ushort4* destination = static_cast<ushort4*>(batch.destination[job]);
      for (int64_t g = first; g < groups; g += stride) {
        const float4 v = source[g];
        destination[g] = make_ushort4(narrowed(fp16, v.x), narrowed(fp16, v.y), narrowed(fp16, v.z), narrowed(fp16, v.w));
      }
    } else {
      const ushort4* source = static_cast<const ushort4*>(batch.source[job]);
      float4* destination = static_cast<float4*>(batch.destination[job]);
      for (int64_t g = first; g < groups; g += stride) {
        const ushort4 v = source[g];
        destination[g] = make_float4(widened(fp16, v.x), widened(fp16, v.y), widened(fp16, v.z), widened(fp16, v.w));
      }
    }
    k = groups * 4 + first;  // the tail: fewer than 4 elements, fewer than the stride
  }
  if (narrowing) {
    const float* source = static_cast<const float*>(batch.source[job]);
    uint16_t* destination = static_cast<uint16_t*>(batch.destination[job]);
    for (; k < count; k += stride) destination[k] = narrowed(fp16, source[k]);
    return;
  }
  const uint16_t* source = static_cast<const uint16_t*>(batch.source[job]);
  float* destination = static_cast<float*>(batch.destination[job]);
  for (; k < count; k += stride) destination[k] = widened(fp16, source[k]);
}

// A matrix's rows narrowed into rows `destination_stride` apart, each row's padding zeroed
// (blockIdx.y strides the rows). Four elements a thread where the destination's rows allow
// 8-byte stores (a padded operand's rows are 16-byte aligned; the source's rows need not be).
__global__ void narrow_rows_kernel(bool fp16, const float* source, int64_t rows, int64_t row_elements,
                                   int64_t source_stride, uint16_t* destination, int64_t destination_stride) {
  const bool by_four = destination_stride % 4 == 0 && aligned_to(destination, 8);
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const float* from = source + row * source_stride;
    uint16_t* to = destination + row * destination_stride;
    auto element = [&](int64_t k) -> uint16_t { return k < row_elements ? narrowed(fp16, from[k]) : uint16_t{0}; };
    if (by_four) {
      ushort4* to_four = reinterpret_cast<ushort4*>(to);
      for (int64_t group = first; group < destination_stride / 4; group += stride) {
        const int64_t k = group * 4;
        to_four[group] = make_ushort4(element(k), element(k + 1), element(k + 2), element(k + 3));
      }
    } else {
      for (int64_t k = first; k < destination_stride; k += stride) to[k] = element(k);
    }
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
    // A 16-bit job's aligned threads take four elements each (cast_batch_kernel).
    const int64_t thread_work = dtype == DType::kFp32 ? job.element_count : (job.element_count + 3) / 4;
    batch.block_start[slot + 1] = batch.block_start[slot] + batched_job_blocks(thread_work, kThreads);
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

Status device_cast_rows_from_fp32(DType dtype, const float* source, int64_t rows, int64_t row_elements,
                                  int64_t source_stride, std::byte* destination, int64_t destination_stride,
                                  void* stream) {
  if (rows < 0 || row_elements < 0 || source_stride < row_elements || destination_stride < row_elements) {
    return invalid_argument("device cast of rows: " + std::to_string(rows) + " rows of " + std::to_string(row_elements) +
                            " elements cannot be read " + std::to_string(source_stride) + " apart and written " +
                            std::to_string(destination_stride) + " apart");
  }
  if (rows == 0 || destination_stride == 0) return Status();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kFp32) {
    const size_t pitch = static_cast<size_t>(destination_stride) * sizeof(float);
    cudaError_t error = cudaMemcpy2DAsync(destination, pitch, source, static_cast<size_t>(source_stride) * sizeof(float),
                                          static_cast<size_t>(row_elements) * sizeof(float), static_cast<size_t>(rows),
                                          cudaMemcpyDeviceToDevice, cuda_stream);
    if (error == cudaSuccess && destination_stride > row_elements) {
      error = cudaMemset2DAsync(destination + static_cast<size_t>(row_elements) * sizeof(float), pitch, 0,
                                static_cast<size_t>(destination_stride - row_elements) * sizeof(float),
                                static_cast<size_t>(rows), cuda_stream);
    }
    return error == cudaSuccess ? Status() : internal_error(std::string("device cast of rows: ") + cudaGetErrorString(error));
  }
  const int64_t row_threads = destination_stride % 4 == 0 ? destination_stride / 4 : destination_stride;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((row_threads + kThreads - 1) / kThreads, 1024)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  narrow_rows_kernel<<<grid, kThreads, 0, cuda_stream>>>(dtype == DType::kFp16, source, rows, row_elements, source_stride,
                                                         reinterpret_cast<uint16_t*>(destination), destination_stride);
  return launched("of rows from fp32");
}

}  // namespace zerosim
