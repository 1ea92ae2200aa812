// fp32 <-> fp16 / bf16 casts on a CUDA device, from the same integer functions as the CPU casts
// (core/tensor/dtype_bits.h), so both backends round to the same bits. Device pointers; enqueue
// on `stream` (a cudaStream_t) and return the launch error. Without the CUDA backend they return
// kFailedPrecondition.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "core/tensor/dtype.h"

namespace zerosim {

Status device_cast_from_fp32(DType dtype, const float* source, std::byte* destination, int64_t element_count,
                             void* stream = nullptr);
Status device_cast_to_fp32(DType dtype, const std::byte* source, float* destination, int64_t element_count,
                           void* stream = nullptr);

}  // namespace zerosim
