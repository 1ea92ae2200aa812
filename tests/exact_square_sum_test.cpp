// The exact sum of squares behind the grad norm: independent of order and split.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <cstring>

#include "core/zero/exact_square_sum.h"

namespace zerosim {
namespace {

TEST(ExactSquareSum, SmallValuesByHand) {
  ExactSquareSum sum;
  const std::vector<float> values = {3.0f, -4.0f, 0.5f, 0.0f};
  sum.add_squares(values);
  EXPECT_EQ(sum.to_double(), 25.25);
  EXPECT_FALSE(sum.saw_non_finite());
}

TEST(ExactSquareSum, SubnormalsAndHugeValuesAreNotLost) {
  ExactSquareSum sum;
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> values = {tiny, 1e19f};
  sum.add_squares(values);
  EXPECT_EQ(sum.to_double(), static_cast<double>(1e19f) * static_cast<double>(1e19f));
}

TEST(ExactSquareSum, NonFiniteValuesAreReported) {
  ExactSquareSum with_infinity;
  const std::vector<float> infinite = {1.0f, std::numeric_limits<float>::infinity()};
  with_infinity.add_squares(infinite);
  EXPECT_TRUE(with_infinity.saw_non_finite());
  EXPECT_TRUE(std::isinf(with_infinity.to_double()));
  ExactSquareSum with_nan;
  const std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  with_nan.add_squares(nan);
  EXPECT_TRUE(std::isnan(with_nan.to_double()));
}

RC_GTEST_PROP(ExactSquareSumProperty, AnySplitAndOrderGivesTheSameBits, (std::vector<float> values, uint32_t seed)) {
  values.erase(std::remove_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); }), values.end());
  ExactSquareSum whole;
  whole.add_squares(values);
  std::mt19937 generator(seed);
  std::vector<float> shuffled = values;
  std::shuffle(shuffled.begin(), shuffled.end(), generator);
  const size_t split = values.empty() ? 0 : generator() % (values.size() + 1);
  ExactSquareSum left, right;
  left.add_squares(std::span<const float>(shuffled).first(split));
  right.add_squares(std::span<const float>(shuffled).subspan(split));
  // Serialize one half through the wire format, as the all-gather does.
  std::vector<std::byte> bytes(ExactSquareSum::kSerializedBytes);
  right.serialize(std::span<std::byte, ExactSquareSum::kSerializedBytes>(bytes.data(), bytes.size()));
  right = ExactSquareSum::deserialize(std::span<const std::byte, ExactSquareSum::kSerializedBytes>(bytes.data(), bytes.size()));
  right.merge(left);
  const double expected = whole.to_double();
  const double actual = right.to_double();
  RC_ASSERT(std::memcmp(&expected, &actual, sizeof expected) == 0);
}

}  // namespace
}  // namespace zerosim
