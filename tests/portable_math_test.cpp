// Reproducible exp, log and cos: accurate against libm, and bit-stable (a golden digest of
// many outputs, so that a change of implementation or a machine that computes otherwise
// shows up as a failure, not as a silent change of training results).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/tensor/portable_math.h"

namespace zerosim {
namespace {

double ulp_distance(double a, double b) {
  if (a == b) return 0;
  return std::fabs(a - b) / std::fabs(std::nextafter(b, std::numeric_limits<double>::infinity()) - b);
}

TEST(PortableMath, ExpIsAccurate) {
  for (double x = -740.0; x <= 709.0; x += 0.37) {
    EXPECT_LE(ulp_distance(portable_exp(x), std::exp(x)), 4.0) << x;
  }
  EXPECT_EQ(portable_exp(0.0), 1.0);
  EXPECT_EQ(portable_exp(-1000.0), 0.0);
  EXPECT_TRUE(std::isinf(portable_exp(1000.0)));
  EXPECT_TRUE(std::isnan(portable_exp(std::nan(""))));
}

TEST(PortableMath, LogIsAccurate) {
  for (double x = 1e-300; x < 1e300; x *= 1.9) EXPECT_LE(ulp_distance(portable_log(x), std::log(x)), 4.0) << x;
  for (double x = 0.5; x < 2.0; x += 0.001) EXPECT_LE(std::fabs(portable_log(x) - std::log(x)), 4e-16) << x;
  EXPECT_EQ(portable_log(1.0), 0.0);
  EXPECT_TRUE(std::isinf(portable_log(0.0)));
  EXPECT_TRUE(std::isnan(portable_log(-1.0)));
}

TEST(PortableMath, CosIsAccurate) {
  for (double x = -20.0; x <= 20.0; x += 0.0137) EXPECT_LE(std::fabs(portable_cos(x) - std::cos(x)), 4e-16) << x;
  EXPECT_EQ(portable_cos(0.0), 1.0);
  EXPECT_LE(std::fabs(portable_cos(3.14159265358979323846) + 1.0), 1e-16);
  EXPECT_TRUE(std::isnan(portable_cos(std::numeric_limits<double>::infinity())));
}

TEST(PortableMath, FloatVersionsRoundTheDoubleResultOnce) {
  for (float x = -80.0f; x < 80.0f; x += 0.173f) {
    EXPECT_EQ(portable_expf(x), static_cast<float>(portable_exp(x)));
    EXPECT_LE(std::fabs(portable_expf(x) - std::exp(x)) / std::exp(x), 1.2e-7) << x;
  }
}

// The bits of 3 x 200,000 outputs. If this digest changes, training results change: a new
// implementation must keep it or be announced as a break of the determinism contract.
TEST(PortableMath, OutputsAreBitStable) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (int i = 0; i < 200000; ++i) {
    const double x = -30.0 + i * 3.0e-4;
    const double values[3] = {portable_exp(x), portable_log(std::fabs(x) + 1e-3), portable_cos(x)};
    XXH3_64bits_update(state, values, sizeof values);
  }
  const unsigned long long digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  EXPECT_EQ(digest, 0xf1080f192614ae14ULL) << std::hex << "digest 0x" << digest;
}

}  // namespace
}  // namespace zerosim
