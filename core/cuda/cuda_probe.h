// A probe of the CUDA runtime, compiled by nvcc when the toolkit is found (ZEROSIM_HAVE_CUDA):
// the devices visible and the runtime's version, what `zerosim devices` and the device tests ask
// first. Without CUDA, the probe reports that the backend is absent.
#pragma once

#include <string>

#include "core/status.h"

namespace zerosim {

struct CudaProbe {
  bool compiled_with_cuda = false;
  int runtime_version = 0;  // e.g. 13000
  int device_count = 0;
  std::string first_device_name;
};

// Never fails on a machine without GPUs: no driver or no device gives device_count 0 and the
// runtime's reason in the Status message only when compiled_with_cuda and the call failed.
Result<CudaProbe> probe_cuda();

}  // namespace zerosim
