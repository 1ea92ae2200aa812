// Reproducible exp, log and cos: accurate against libm, and bit-stable (a golden digest of
// many outputs, so that a change of implementation or a machine that computes otherwise
// shows up as a failure, not as a silent change of training results).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

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
uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// The array form (eight lanes at a time with AVX-512) is the scalar portable_expf bit for bit:
// over a stride through every float bit pattern (NaNs, infinities, subnormals, both signs), a
// dense sweep of the range where exp is neither 0 nor inf in float, the edges of both cut-offs,
// every tail length and in place.
TEST(PortableMath, TheFloatArrayIsTheScalarFloatBitForBit) {
  std::vector<float> inputs;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 4099) inputs.push_back(float_of_bits(static_cast<uint32_t>(bits)));
  for (float x = -110.0f; x <= 90.0f; x += 0.000377f) inputs.push_back(x);
  for (double edge : {709.782712893384, -745.1332191019412, 88.72283935546875, -103.97208404541016, -87.33654022216797}) {
    float x = static_cast<float>(edge);
    for (int step = 0; step < 64; ++step) {
      inputs.push_back(x);
      inputs.push_back(-x);
      x = std::nextafter(x, std::numeric_limits<float>::infinity());
    }
  }
  for (float special : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                        std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()}) {
    inputs.push_back(special);
  }
  std::vector<float> out(inputs.size());
  portable_expf_array(inputs.data(), out.data(), inputs.size());
  size_t differing = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (float_bits(out[i]) != float_bits(portable_expf(inputs[i]))) {
      if (++differing <= 5) {
        ADD_FAILURE() << "x = " << inputs[i] << " (0x" << std::hex << float_bits(inputs[i]) << "): array 0x"
                      << float_bits(out[i]) << ", scalar 0x" << float_bits(portable_expf(inputs[i])) << std::dec;
      }
    }
  }
  EXPECT_EQ(differing, 0u) << "of " << inputs.size();
  // Every tail length, and in place.
  for (size_t length = 0; length <= 17; ++length) {
    std::vector<float> data(inputs.begin() + 1000, inputs.begin() + 1000 + static_cast<std::ptrdiff_t>(length));
    std::vector<float> expected(length);
    for (size_t i = 0; i < length; ++i) expected[i] = portable_expf(data[i]);
    std::vector<float> guard = data;
    guard.push_back(123.0f);  // the element after the end stays untouched
    portable_expf_array(guard.data(), guard.data(), length);
    for (size_t i = 0; i < length; ++i) EXPECT_EQ(float_bits(guard[i]), float_bits(expected[i])) << length << " " << i;
    EXPECT_EQ(guard[length], 123.0f) << length;
  }
}

// The double array form is the scalar portable_exp bit for bit, down to the last bit of the
// double (what the float form's rounding would mostly hide): across the whole finite range,
// where the result is subnormal (the scaling's one rounding), at both cut-offs, and specials.
TEST(PortableMath, TheDoubleArrayIsTheScalarBitForBit) {
  std::vector<double> inputs;
  for (double x = -746.0; x <= 710.0; x += 0.000573) inputs.push_back(x);
  for (double x = -745.2; x <= -707.0; x += 0.0000373) inputs.push_back(x);
  for (double edge : {709.782712893384, -745.1332191019412, -708.3964185322641}) {
    double x = edge;
    for (int step = 0; step < 64; ++step) {
      inputs.push_back(x);
      x = std::nextafter(x, -std::numeric_limits<double>::infinity());
    }
  }
  for (double special : {0.0, -0.0, 1e-300, -1e-300, std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    inputs.push_back(special);
  }
  std::vector<double> out(inputs.size());
  portable_exp_array(inputs.data(), out.data(), inputs.size());
  size_t differing = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const double expected = portable_exp(inputs[i]);
    if (std::memcmp(&out[i], &expected, sizeof(double)) != 0 && ++differing <= 5) {
      ADD_FAILURE() << "x = " << inputs[i] << ": array " << out[i] << ", scalar " << expected;
    }
  }
  EXPECT_EQ(differing, 0u) << "of " << inputs.size();
}

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
