// A deterministic synthetic classification dataset and a per-epoch shuffling sampler.
//
// Sample i is a pure function of (seed, i): features uniform in [-1, 1), and the label is
// the argmax of a fixed random linear "teacher" applied to them, so there is a learnable
// signal and the loss falls. The sampler's order in epoch e is a pseudorandom permutation
// keyed by the RNG stream (seed, e): a 4-round Feistel network on the smallest even-bit
// domain covering the dataset, with cycle walking, so the sample at any position is computed
// in O(1) time and memory (no per-epoch index table, whatever the dataset size or the world
// size). Its whole state is the number of samples consumed,
// so a checkpoint that records that number resumes the exact sample sequence, and the
// sample at global position p is the same whatever the world size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/env/random_bits.h"
#include "core/env/rng.h"
#include "core/status.h"

namespace zerosim {

// Feature `feature` of synthetic sample `sample_index` (of `feature_count` features) for the
// dataset seed `seed`: the one definition that SyntheticDataset::features and a GPU backend's
// batches (core/cuda/device_dataset.h) compile.
inline constexpr uint64_t kSyntheticFeatureStream = 0x2000;
ZEROSIM_HOST_DEVICE constexpr float synthetic_feature(uint64_t seed, int64_t sample_index, int64_t feature_count,
                                                      int64_t feature) {
  const uint64_t counter = static_cast<uint64_t>(sample_index) * static_cast<uint64_t>(feature_count) +
                           static_cast<uint64_t>(feature);
  return random_symmetric_unit_float(mix_random_bits(seed, kSyntheticFeatureStream, counter));
}

// The data of a run. For the MLP: synthetic classification samples of feature_count features
// and class_count classes. For the transformer (token_dataset.h) a sample is a window of tokens:
// feature_count is the tokens it predicts (the sequence length, at most the model's block) and
// class_count the vocabulary; token_file names a nanoGPT-style uint16 file (empty: the
// synthetic stream), and then sample_count is the file's window count.
struct DatasetSpec {
  int64_t sample_count = 4096;
  int64_t feature_count = 13;
  int64_t class_count = 5;
  uint64_t seed = 1234;
  std::string token_file;
  // With token_file: the XXH3-128 of its contents (TokenDataset::scan_file), which a resume
  // compares (a file changed under a checkpoint is refused; a moved one is noted). Empty: unchecked.
  std::string token_file_xxh3_128;
  bool operator==(const DatasetSpec&) const = default;
};

class SyntheticDataset {
 public:
  explicit SyntheticDataset(const DatasetSpec& spec);
  const DatasetSpec& spec() const { return spec_; }
  // Writes feature_count floats.
  void features(int64_t sample_index, float* destination) const;
  int32_t label(int64_t sample_index) const;
  // The labels of a batch of samples whose features (`labels.size()` rows of feature_count
  // floats, as features() writes them) are given: label() of each, computed as one product
  // of the batch with the teacher (a 1024-class label is a million multiply-adds).
  void labels_of(std::span<const float> features, std::span<int32_t> labels) const;
  // The teacher's weights, [feature_count, class_count] row-major: label(i) is the first class
  // with the greatest score, score[c] = fma(x[j], w[j][c], score[c]) for j = 0, 1, ... from 0
  // (a left fold, each step one fused multiply-add: vector_ops' add_product).
  std::span<const float> teacher_by_feature() const { return teacher_by_feature_; }

 private:
  DatasetSpec spec_;
  // The teacher's weights, stored [feature_count, class_count] (transposed), so that label()
  // advances every class's score together over the features: each score is still the left
  // fold over the features in order (the same bits), and the loop over classes vectorizes.
  std::vector<float> teacher_by_feature_;
};

class ShuffledSampler {
 public:
  explicit ShuffledSampler(const DatasetSpec& spec);
  // Dataset index of the sample at global position `position` (0-based over all epochs).
  int64_t sample_at(int64_t position) const;
  // The RNG stream state that keys the order of the epoch containing `position`.
  RngState shuffle_stream_state(int64_t position) const;
  // Defect kShuffleEpochNotRestored only: epochs are counted from `epoch` as if it were epoch 0
  // (the shuffle of a resumed run restarting at epoch 0's order). 0 in every real run.
  void restart_epoch_count_at(int64_t epoch) { first_epoch_ = epoch; }

 private:
  DatasetSpec spec_;
  int64_t first_epoch_ = 0;
  int half_bits_ = 1;  // the Feistel halves: the domain is 2^(2*half_bits) >= sample_count
};

}  // namespace zerosim
