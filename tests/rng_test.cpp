// Counter-based random streams: pure, restorable, unbiased in range.
#include <gtest/gtest.h>

#include <set>

#include "core/env/rng.h"

namespace zerosim {
namespace {

TEST(Rng, StateRestoresTheExactSequence) {
  std::unique_ptr<Rng> rng = make_counter_rng(RngState{42, 7, 0});
  for (int i = 0; i < 5; ++i) (void)rng->next_u64();
  const RngState saved = rng->state();
  EXPECT_EQ(saved.counter, 5u);
  std::vector<uint64_t> expected;
  for (int i = 0; i < 10; ++i) expected.push_back(rng->next_u64());
  std::unique_ptr<Rng> resumed = make_counter_rng(RngState{});
  resumed->restore(saved);
  for (uint64_t value : expected) EXPECT_EQ(resumed->next_u64(), value);
}

TEST(Rng, StreamsAndSeedsAreIndependent) {
  EXPECT_NE(mix_random_bits(1, 0, 0), mix_random_bits(2, 0, 0));
  EXPECT_NE(mix_random_bits(1, 0, 0), mix_random_bits(1, 1, 0));
  EXPECT_NE(mix_random_bits(1, 0, 0), mix_random_bits(1, 0, 1));
  EXPECT_EQ(mix_random_bits(1, 2, 3), mix_random_bits(1, 2, 3));
}

TEST(Rng, NextBelowStaysInRangeAndCoversIt) {
  std::unique_ptr<Rng> rng = make_counter_rng(RngState{3, 1, 0});
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t value = rng->next_below(7);
    ASSERT_LT(value, 7u);
    seen.insert(value);
  }
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_EQ(rng->next_below(1), 0u);
}

TEST(Rng, SymmetricUnitFloatIsInRange) {
  EXPECT_EQ(random_symmetric_unit_float(0), -1.0f);
  EXPECT_LT(random_symmetric_unit_float(~uint64_t{0}), 1.0f);
}

}  // namespace
}  // namespace zerosim
