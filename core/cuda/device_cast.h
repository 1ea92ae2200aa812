// fp32 <-> fp16 / bf16 casts on a CUDA device, from the same integer functions as the CPU casts
// (core/tensor/dtype_bits.h), so both backends round to the same bits. Device pointers; enqueue
// on `stream` (a cudaStream_t) and return the launch error. Without the CUDA backend they return
// kFailedPrecondition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/tensor/dtype.h"

namespace zerosim {

Status device_cast_from_fp32(DType dtype, const float* source, std::byte* destination, int64_t element_count,
                             void* stream = nullptr);
Status device_cast_to_fp32(DType dtype, const std::byte* source, float* destination, int64_t element_count,
                           void* stream = nullptr);

// One widening of a batch: element_count elements of `dtype` at `source` to fp32 at `destination`.
struct DeviceWidening {
  const std::byte* source;
  float* destination;
  int64_t element_count;
};

// Every widening of `jobs`, in as few launches as fit (kWideningsPerLaunch a launch): each
// element is cast on its own, so the result is, bit for bit, that of device_cast_to_fp32 on each
// job. A layer's gather is a dozen tensors from each rank; one launch apiece cost more in launch
// latency than in memory traffic. Destinations must not overlap a source or each other.
inline constexpr int kWideningsPerLaunch = 32;
Status device_cast_to_fp32_batch(DType dtype, std::span<const DeviceWidening> jobs, void* stream = nullptr);

// The other direction, batched the same way: each job's fp32 elements at `source` rounded to
// `dtype` at `destination`, each element device_cast_from_fp32's bits. The fast mode's products
// narrow both operands of a product in one launch.
struct DeviceNarrowing {
  const float* source;
  std::byte* destination;
  int64_t element_count;
};
Status device_cast_from_fp32_batch(DType dtype, std::span<const DeviceNarrowing> jobs, void* stream = nullptr);

// A row-major matrix narrowed into another row stride: `rows` rows of `row_elements` fp32
// elements, `source_stride` elements apart, rounded to `dtype` (device_cast_from_fp32's bits)
// into rows `destination_stride` elements apart, the elements between a row's end and the next
// row's start set to zero (+0.0). The fast mode's products pad an operand's rows to a multiple
// of 8 elements this way (16-byte rows: cuBLAS's tensor-core kernels need them), and the zeros
// let a product pad its inner extent too. A stride shorter than a row is refused.
Status device_cast_rows_from_fp32(DType dtype, const float* source, int64_t rows, int64_t row_elements,
                                  int64_t source_stride, std::byte* destination, int64_t destination_stride,
                                  void* stream = nullptr);

}  // namespace zerosim
