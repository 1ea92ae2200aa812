// How many CUDA devices the GPU-labelled tests may use: 0 without the CUDA backend or a GPU
// (the tests then skip).
#pragma once

#include "core/cuda/cuda_probe.h"

namespace zerosim {

inline int usable_cuda_devices() {
  const Result<CudaProbe> probe = probe_cuda();
  return probe.ok() && probe->compiled_with_cuda ? probe->device_count : 0;
}

}  // namespace zerosim
