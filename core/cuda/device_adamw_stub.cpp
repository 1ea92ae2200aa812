// device_adamw.h without the CUDA backend: every call says so.
#include "core/cuda/device_adamw.h"

namespace zerosim {

namespace {
Status no_backend() {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time)");
}
}  // namespace

Status device_adam_update(const AdamStepScalars&, float, std::span<const DeviceAdamTensor>, void*) { return no_backend(); }

Status device_adam_update_from_host(const AdamStepScalars&, float, float*, const float*, float*, float*, size_t,
                                    std::span<const int64_t>) {
  return no_backend();
}

}  // namespace zerosim
