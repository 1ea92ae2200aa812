// device_compute_backend.h without the CUDA backend.
#include "core/cuda/device_compute_backend.h"

namespace zerosim {

namespace {
Status no_backend() {
  return failed_precondition("--device cuda: the CUDA backend is not compiled in (nvcc was not found at configure time)");
}
}  // namespace

Result<std::unique_ptr<ComputeBackend>> make_cuda_compute_backend(const ModelSpec&, int, CudaGemm, DType) { return no_backend(); }
Result<ComputeBackendFactory> cuda_compute_backend_factory(CudaGemm) { return no_backend(); }

}  // namespace zerosim
