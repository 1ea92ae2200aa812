// Synthetic data and the shuffling sampler: pure functions of the seed and the position.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/data/dataset.h"

namespace zerosim {
namespace {

TEST(Dataset, SamplesArePureFunctionsOfSeedAndIndex) {
  DatasetSpec spec;
  spec.feature_count = 7;
  spec.class_count = 3;
  SyntheticDataset first(spec), second(spec);
  std::vector<float> a(7), b(7);
  first.features(41, a.data());
  second.features(41, b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(first.label(41), second.label(41));
  spec.seed += 1;
  SyntheticDataset other(spec);
  other.features(41, b.data());
  EXPECT_NE(a, b);
}

TEST(Dataset, EveryClassOccurs) {
  DatasetSpec spec;
  spec.feature_count = 13;
  spec.class_count = 5;
  SyntheticDataset dataset(spec);
  std::set<int32_t> classes;
  for (int64_t i = 0; i < 500; ++i) classes.insert(dataset.label(i));
  EXPECT_EQ(classes.size(), 5u);
}

// A micro-batch's labels in one call (blocks of samples sharing each teacher row) are each
// sample's label alone, across block boundaries and with a class count past a vector width.
TEST(Dataset, ABatchsLabelsAreEachSamplesLabel) {
  DatasetSpec spec;
  spec.feature_count = 29;
  spec.class_count = 37;
  SyntheticDataset dataset(spec);
  for (const size_t samples : {size_t{1}, size_t{16}, size_t{37}}) {
    std::vector<float> features(samples * 29);
    for (size_t s = 0; s < samples; ++s) dataset.features(static_cast<int64_t>(100 + s), &features[s * 29]);
    std::vector<int32_t> labels(samples, -1);
    dataset.labels_of(features, labels);
    std::set<int32_t> classes;
    for (size_t s = 0; s < samples; ++s) {
      EXPECT_EQ(labels[s], dataset.label(static_cast<int64_t>(100 + s))) << "sample " << s << " of " << samples;
      classes.insert(labels[s]);
    }
    if (samples == 37) {
      EXPECT_GT(classes.size(), 3u) << "labels that differ between samples";
    }
  }
}

TEST(Sampler, EachEpochIsAPermutationAndEpochsDiffer) {
  DatasetSpec spec;
  spec.sample_count = 50;
  ShuffledSampler sampler(spec);
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t p = 0; p < 50; ++p) epoch0.push_back(sampler.sample_at(p));
  for (int64_t p = 50; p < 100; ++p) epoch1.push_back(sampler.sample_at(p));
  std::vector<int64_t> sorted0 = epoch0, sorted1 = epoch1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(sorted0[static_cast<size_t>(i)], i);
    EXPECT_EQ(sorted1[static_cast<size_t>(i)], i);
  }
  EXPECT_NE(epoch0, epoch1);
}

TEST(Sampler, PositionIsTheWholeState) {
  DatasetSpec spec;
  spec.sample_count = 33;
  ShuffledSampler straight(spec);
  std::vector<int64_t> expected;
  for (int64_t p = 0; p < 120; ++p) expected.push_back(straight.sample_at(p));
  // A fresh sampler asked from position 70 on (a resume) continues the same sequence.
  ShuffledSampler resumed(spec);
  for (int64_t p = 70; p < 120; ++p) EXPECT_EQ(resumed.sample_at(p), expected[static_cast<size_t>(p)]) << p;
  EXPECT_EQ(straight.shuffle_stream_state(70), resumed.shuffle_stream_state(70));
  EXPECT_NE(straight.shuffle_stream_state(0), straight.shuffle_stream_state(70));
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

TEST(Sampler, IsAPermutationForAwkwardSizes) {
  for (int64_t size : {1, 2, 3, 5, 17, 255, 256, 257, 1000, 4097}) {
    DatasetSpec spec;
    spec.sample_count = size;
    const ShuffledSampler sampler(spec);
    std::vector<bool> seen(static_cast<size_t>(size), false);
    for (int64_t p = size * 3; p < size * 4; ++p) {
      const int64_t sample = sampler.sample_at(p);
      ASSERT_GE(sample, 0);
      ASSERT_LT(sample, size);
      ASSERT_FALSE(seen[static_cast<size_t>(sample)]) << "size " << size << " repeats " << sample;
      seen[static_cast<size_t>(sample)] = true;
    }
  }
}

TEST(Sampler, HugeDatasetsNeedNoIndexTable) {
  DatasetSpec spec;
  spec.sample_count = int64_t{1} << 40;
  const ShuffledSampler sampler(spec);
  const int64_t sample = sampler.sample_at((int64_t{1} << 40) + 12345);
  EXPECT_GE(sample, 0);
  EXPECT_LT(sample, spec.sample_count);
  EXPECT_EQ(sample, ShuffledSampler(spec).sample_at((int64_t{1} << 40) + 12345));
}

}  // namespace
}  // namespace zerosim
