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

std::vector<std::byte> serialized(const ExactSquareSum& sum) {
  std::vector<std::byte> bytes(ExactSquareSum::kSerializedBytes);
  sum.serialize(std::span<std::byte, ExactSquareSum::kSerializedBytes>(bytes.data(), bytes.size()));
  return bytes;
}

// The wire format of the sum, computed the plain way: each square added to a 128-bit bin for
// its exponent field, then every bin (low, high), the infinities and the NaNs, little-endian.
std::vector<std::byte> reference_serialized(const std::vector<float>& values) {
  std::vector<unsigned __int128> bins(ExactSquareSum::kBinCount, 0);
  uint64_t infinities = 0, nans = 0;
  for (const float value : values) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    const uint32_t field = (bits >> 23) & 0xffu;
    const uint64_t mantissa = bits & 0x7fffffu;
    if (field == 0xffu) {
      (mantissa == 0 ? infinities : nans) += 1;
      continue;
    }
    const uint64_t significand = field == 0 ? mantissa : (mantissa | 0x800000u);
    bins[field] += static_cast<unsigned __int128>(significand) * significand;
  }
  std::vector<std::byte> bytes;
  auto put = [&](uint64_t word) {
    for (int byte = 0; byte < 8; ++byte) bytes.push_back(static_cast<std::byte>(word >> (8 * byte)));
  };
  for (const unsigned __int128 bin : bins) {
    put(static_cast<uint64_t>(bin));
    put(static_cast<uint64_t>(bin >> 64));
  }
  put(infinities);
  put(nans);
  return bytes;
}

// Many values of the largest significand in one exponent: a bin's sum passes 2^64 (each square is
// just below 2^48), which the 128-bit bins carry.
TEST(ExactSquareSum, ABinPastTwoToTheSixtyFourIsCarried) {
  const float largest_below_two = std::nextafter(2.0f, 0.0f);  // significand 2^24 - 1
  const std::vector<float> values(300'000, largest_below_two);
  ExactSquareSum sum;
  sum.add_squares(values);
  EXPECT_EQ(serialized(sum), reference_serialized(values));
  ExactSquareSum ones;
  ones.add_squares(std::vector<float>(300'000, 1.0f));
  EXPECT_EQ(ones.to_double(), 300'000.0);
}

// A long array's bins are those of adding each square to its bin the plain way, on one thread
// and split among three, with infinities and NaNs among the values. Values cluster in a range
// of exponents, as gradients do.
RC_GTEST_PROP(ExactSquareSumProperty, AnArrayGivesTheBinsOfEachSquareAddedInTurn, (uint32_t seed)) {
  std::mt19937 generator(seed);
  const size_t count = std::uniform_int_distribution<size_t>(0, 2'500'000)(generator);
  std::vector<float> values(count);
  std::uniform_int_distribution<uint32_t> exponent_field(std::uniform_int_distribution<uint32_t>(0, 250)(generator), 254);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7fffff);
  for (float& value : values) {
    uint32_t bits = (generator() & 0x80000000u) | (exponent_field(generator) << 23) | mantissa(generator);
    if (generator() % 50'000 == 0) bits |= 0x7f800000u;  // now and then an infinity or a NaN
    std::memcpy(&value, &bits, sizeof value);
  }
  ExactSquareSum sum;
  sum.add_squares(values);
  const std::vector<std::byte> expected = reference_serialized(values);
  RC_ASSERT(serialized(sum) == expected);
  // Split among threads (ranges of 2^20 values or more): the same bins.
  ExactSquareSum threaded;
  threaded.add_squares(values, 3);
  RC_ASSERT(serialized(threaded) == expected);
}

}  // namespace
}  // namespace zerosim
