#include "core/data/dataset.h"

#include <numeric>

namespace zerosim {
namespace {
constexpr uint64_t kFeatureStream = 0x2000;
constexpr uint64_t kTeacherStream = 0x2001;
constexpr uint64_t kShuffleStreamBase = 0x3000000;
}  // namespace

SyntheticDataset::SyntheticDataset(const DatasetSpec& spec) : spec_(spec) {
  ZEROSIM_CHECK(spec.sample_count > 0 && spec.feature_count > 0 && spec.class_count >= 2, "dataset spec");
  teacher_.resize(static_cast<size_t>(spec.class_count * spec.feature_count));
  for (size_t k = 0; k < teacher_.size(); ++k) {
    teacher_[k] = random_symmetric_unit_float(mix_random_bits(spec.seed, kTeacherStream, k));
  }
}

void SyntheticDataset::features(int64_t sample_index, float* destination) const {
  const uint64_t base = static_cast<uint64_t>(sample_index) * static_cast<uint64_t>(spec_.feature_count);
  for (int64_t j = 0; j < spec_.feature_count; ++j) {
    destination[j] = random_symmetric_unit_float(mix_random_bits(spec_.seed, kFeatureStream, base + j));
  }
}

int32_t SyntheticDataset::label(int64_t sample_index) const {
  std::vector<float> x(static_cast<size_t>(spec_.feature_count));
  features(sample_index, x.data());
  int32_t best_class = 0;
  float best_score = 0.0f;
  for (int64_t c = 0; c < spec_.class_count; ++c) {
    float score = 0.0f;
    for (int64_t j = 0; j < spec_.feature_count; ++j) {
      score = score + teacher_[static_cast<size_t>(c * spec_.feature_count + j)] * x[static_cast<size_t>(j)];
    }
    if (c == 0 || score > best_score) {
      best_score = score;
      best_class = static_cast<int32_t>(c);
    }
  }
  return best_class;
}

ShuffledSampler::ShuffledSampler(const DatasetSpec& spec) : spec_(spec) {}

RngState ShuffledSampler::shuffle_stream_state(int64_t position) const {
  const int64_t epoch = position / spec_.sample_count;
  return RngState{spec_.seed, kShuffleStreamBase + static_cast<uint64_t>(epoch), 0};
}

int64_t ShuffledSampler::sample_at(int64_t position) {
  ZEROSIM_CHECK(position >= 0, "sampler position must be non-negative");
  const int64_t epoch = position / spec_.sample_count;
  if (epoch != cached_epoch_) {
    order_.resize(static_cast<size_t>(spec_.sample_count));
    std::iota(order_.begin(), order_.end(), int64_t{0});
    std::unique_ptr<Rng> rng = make_counter_rng(shuffle_stream_state(position));
    for (int64_t i = spec_.sample_count - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng->next_below(static_cast<uint64_t>(i + 1)));
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
    }
    cached_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(position % spec_.sample_count)];
}

}  // namespace zerosim
