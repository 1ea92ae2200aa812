// device_square_sum.h without the CUDA backend.
#include "core/cuda/device_square_sum.h"

namespace zerosim {

namespace {
Status absent() { return failed_precondition("the CUDA backend is not compiled in (nvcc was not found at configure time)"); }
}  // namespace

DeviceSquareSummer::~DeviceSquareSummer() = default;

Status DeviceSquareSummer::add_squares(const float*, int64_t, ExactSquareSum&, void*) { return absent(); }

Status device_add_squares(const float*, int64_t, ExactSquareSum&, void*) { return absent(); }

}  // namespace zerosim
