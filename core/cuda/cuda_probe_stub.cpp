// Built instead of cuda_probe.cu when nvcc is not found.
#include "core/cuda/cuda_probe.h"

namespace zerosim {

Result<CudaProbe> probe_cuda() { return CudaProbe{}; }

}  // namespace zerosim
