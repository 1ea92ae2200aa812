#include "core/data/dataset.h"

#include <algorithm>

#include "core/tensor/vector_ops.h"

namespace zerosim {
namespace {
constexpr uint64_t kTeacherStream = 0x2001;
constexpr uint64_t kShuffleStreamBase = 0x3000000;
}  // namespace

SyntheticDataset::SyntheticDataset(const DatasetSpec& spec) : spec_(spec) {
  ZEROSIM_CHECK(spec.sample_count > 0 && spec.feature_count > 0 && spec.class_count >= 2, "dataset spec");
  // Element (c, j) of the [class, feature] teacher is drawn at index c * feature_count + j.
  const size_t classes = static_cast<size_t>(spec.class_count), features = static_cast<size_t>(spec.feature_count);
  teacher_by_feature_.resize(classes * features);
  for (size_t c = 0; c < classes; ++c) {
    for (size_t j = 0; j < features; ++j) {
      teacher_by_feature_[j * classes + c] = random_symmetric_unit_float(mix_random_bits(spec.seed, kTeacherStream, c * features + j));
    }
  }
}

void SyntheticDataset::features(int64_t sample_index, float* destination) const {
  for (int64_t j = 0; j < spec_.feature_count; ++j) {
    destination[j] = synthetic_feature(spec_.seed, sample_index, spec_.feature_count, j);
  }
}

int32_t SyntheticDataset::label(int64_t sample_index) const {
  std::vector<float> x(static_cast<size_t>(spec_.feature_count));
  features(sample_index, x.data());
  int32_t best_class = 0;
  labels_of(x, std::span<int32_t>(&best_class, 1));
  return best_class;
}

void SyntheticDataset::labels_of(std::span<const float> features, std::span<int32_t> labels) const {
  const size_t feature_count = static_cast<size_t>(spec_.feature_count);
  const size_t classes = static_cast<size_t>(spec_.class_count);
  ZEROSIM_CHECK(features.size() == labels.size() * feature_count, "one row of features per label");
  // scores[s][c] = fma(feature[s][j], weights[j][c], scores[s][c]) for j in order from zero: a
  // left fold per score (vector_ops' add_rows_times_matrix), with blocks of scores kept in
  // registers across the features.
  std::vector<float> scores(labels.size() * classes, 0.0f);
  add_rows_times_matrix(features.data(), labels.size(), feature_count, teacher_by_feature_.data(), classes,
                        scores.data());
  for (size_t s = 0; s < labels.size(); ++s) {
    const float* sample_scores = scores.data() + s * classes;
    int32_t best_class = 0;
    for (size_t c = 1; c < classes; ++c) {
      if (sample_scores[c] > sample_scores[static_cast<size_t>(best_class)]) best_class = static_cast<int32_t>(c);
    }
    labels[s] = best_class;
  }
}

ShuffledSampler::ShuffledSampler(const DatasetSpec& spec) : spec_(spec) {
  ZEROSIM_CHECK(spec.sample_count > 0, "dataset sample count must be positive");
  while ((uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(spec.sample_count)) ++half_bits_;
}

RngState ShuffledSampler::shuffle_stream_state(int64_t position) const {
  const int64_t epoch = std::max<int64_t>(0, position / spec_.sample_count - first_epoch_);
  return RngState{spec_.seed, kShuffleStreamBase + static_cast<uint64_t>(epoch), 0};
}

int64_t ShuffledSampler::sample_at(int64_t position) const {
  ZEROSIM_CHECK(position >= 0, "sampler position must be non-negative");
  const RngState stream = shuffle_stream_state(position);
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  const uint64_t count = static_cast<uint64_t>(spec_.sample_count);
  uint64_t value = static_cast<uint64_t>(position % spec_.sample_count);
  // Cycle walking: apply the permutation of the larger domain until the value lands inside
  // [0, count). It terminates because the orbit of a value below count returns below count;
  // the domain is less than 4 x count, so a few rounds suffice on average.
  do {
    uint64_t left = value >> half_bits_;
    uint64_t right = value & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t mixed = mix_random_bits(stream.seed, stream.stream_id, (round << 56) | right) & mask;
      const uint64_t next_right = left ^ mixed;
      left = right;
      right = next_right;
    }
    value = (left << half_bits_) | right;
  } while (value >= count);
  return static_cast<int64_t>(value);
}

}  // namespace zerosim
