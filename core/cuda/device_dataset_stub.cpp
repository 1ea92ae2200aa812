// device_dataset.h without the CUDA backend.
#include "core/cuda/device_dataset.h"

namespace zerosim {

Status device_synthetic_batch(const DatasetSpec&, const float*, const int64_t*, int64_t, float*, int32_t*, void*) {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time)");
}

}  // namespace zerosim
