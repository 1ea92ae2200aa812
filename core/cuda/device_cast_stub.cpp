// device_cast.h without the CUDA backend.
#include "core/cuda/device_cast.h"

namespace zerosim {

namespace {
Status no_backend() {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time)");
}
}  // namespace

Status device_cast_from_fp32(DType, const float*, std::byte*, int64_t, void*) { return no_backend(); }
Status device_cast_to_fp32(DType, const std::byte*, float*, int64_t, void*) { return no_backend(); }
Status device_cast_to_fp32_batch(DType, std::span<const DeviceWidening>, void*) { return no_backend(); }
Status device_cast_from_fp32_batch(DType, std::span<const DeviceNarrowing>, void*) { return no_backend(); }
Status device_cast_rows_from_fp32(DType, const float*, int64_t, int64_t, int64_t, std::byte*, int64_t, void*) {
  return no_backend();
}

}  // namespace zerosim
