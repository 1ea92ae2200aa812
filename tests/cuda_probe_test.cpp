// The CUDA build switch: the probe is the CUDA object exactly when the build found nvcc, and
// it never fails on a machine without a GPU.
#include <gtest/gtest.h>

#include "core/cuda/cuda_probe.h"

namespace zerosim {
namespace {

TEST(CudaProbe, CompiledInExactlyWhenTheBuildFoundCuda) {
  Result<CudaProbe> probe = probe_cuda();
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
#ifdef ZEROSIM_HAVE_CUDA
  EXPECT_TRUE(probe->compiled_with_cuda);
  EXPECT_GE(probe->device_count, 0);
#else
  EXPECT_FALSE(probe->compiled_with_cuda);
  EXPECT_EQ(probe->device_count, 0);
#endif
}

}  // namespace
}  // namespace zerosim
