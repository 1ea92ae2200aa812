// device_mlp.h without the CUDA backend.
#include "core/cuda/device_mlp.h"

namespace zerosim {

namespace {
Status no_backend() {
  return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time)");
}
}  // namespace

Status device_mlp_layer_forward(const DeviceLayerShape&, const float*, const float*, const float*, float*, float*,
                                void*) {
  return no_backend();
}
Status device_mlp_layer_backward(const DeviceLayerShape&, const float*, const float*, const float*, const float*, float*,
                                 float*, float*, void*) {
  return no_backend();
}

Status device_softmax_cross_entropy(int64_t, int64_t, const float*, const int32_t*, float, float*, float*, float*,
                                    void*) {
  return no_backend();
}
Status device_portable_exp_log(const double*, size_t, double*, double*) { return no_backend(); }

}  // namespace zerosim
