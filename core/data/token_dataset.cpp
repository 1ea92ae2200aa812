#include "core/data/token_dataset.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/env/rng.h"

namespace zerosim {
namespace {

constexpr uint64_t kFirstTokenStream = 0x7001;
constexpr uint64_t kNoiseStream = 0x7002;
constexpr uint64_t kPermutationStream = 0x7003;

}  // namespace

Result<std::unique_ptr<TokenDataset>> TokenDataset::open(const TokenDatasetSpec& spec, Disk& disk) {
  if (spec.vocab < 2 || spec.vocab > 65536) {
    return invalid_argument("token data: vocab must be in 2..65536 (uint16 tokens), found " + std::to_string(spec.vocab));
  }
  if (spec.window < 1 || spec.window > (int64_t{1} << 20)) {
    return invalid_argument("token data: window must be in 1..2^20, found " + std::to_string(spec.window));
  }
  std::unique_ptr<TokenDataset> dataset(new TokenDataset());
  dataset->spec_ = spec;
  if (spec.file.empty()) {
    if (spec.sample_count < 1) {
      return invalid_argument("token data: sample count must be positive, found " + std::to_string(spec.sample_count));
    }
    dataset->sample_count_ = spec.sample_count;
    // A seeded Fisher-Yates shuffle: the bigram the model learns.
    std::vector<int32_t>& successor = dataset->successor_;
    successor.resize(static_cast<size_t>(spec.vocab));
    for (int64_t k = 0; k < spec.vocab; ++k) successor[static_cast<size_t>(k)] = static_cast<int32_t>(k);
    for (int64_t k = spec.vocab - 1; k > 0; --k) {
      const uint64_t j = mix_random_bits(spec.seed, kPermutationStream, static_cast<uint64_t>(k)) % static_cast<uint64_t>(k + 1);
      std::swap(successor[static_cast<size_t>(k)], successor[static_cast<size_t>(j)]);
    }
    return dataset;
  }
  if (spec.sample_count != 0) {
    return invalid_argument(spec.file + ": a sample count (" + std::to_string(spec.sample_count) +
                            ") with a token file: the file's size decides it; give 0");
  }
  ZEROSIM_ASSIGN_OR_RETURN(dataset->file_, disk.open(spec.file, FileOpenOptions{}));
  ZEROSIM_ASSIGN_OR_RETURN(const uint64_t size, dataset->file_->size_bytes());
  if (size % 2 != 0) {
    return data_loss(spec.file + ": " + std::to_string(size) + " bytes is not a whole number of uint16 tokens");
  }
  const int64_t token_count = static_cast<int64_t>(size / 2);
  if (token_count < spec.window + 1) {
    return invalid_argument(spec.file + ": " + std::to_string(token_count) + " tokens, fewer than one window of " +
                            std::to_string(spec.window) + " + 1");
  }
  dataset->sample_count_ = (token_count - 1) / spec.window;
  return dataset;
}

Result<TokenFileSummary> TokenDataset::scan_file(const std::string& path, int64_t vocab, Disk& disk) {
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, FileOpenOptions{}));
  ZEROSIM_ASSIGN_OR_RETURN(const uint64_t size, file->size_bytes());
  if (size % 2 != 0) return data_loss(path + ": " + std::to_string(size) + " bytes is not a whole number of uint16 tokens");
  XXH3_state_t* state = XXH3_createState();
  ZEROSIM_CHECK(state != nullptr, "XXH3 state allocation");
  XXH3_128bits_reset(state);
  constexpr uint64_t kChunkBytes = uint64_t{8} << 20;
  std::vector<uint16_t> chunk;
  Status status;
  for (uint64_t offset = 0; offset < size && status.ok(); offset += kChunkBytes) {
    chunk.resize(static_cast<size_t>(std::min(kChunkBytes, size - offset) / 2));
    status = file->read_exact(offset, std::as_writable_bytes(std::span<uint16_t>(chunk)));
    if (!status.ok()) break;
    XXH3_128bits_update(state, chunk.data(), chunk.size() * 2);
    for (size_t t = 0; t < chunk.size(); ++t) {
      if (chunk[t] >= vocab) {
        status = data_loss(path + ": token " + std::to_string(chunk[t]) + " at token offset " +
                           std::to_string(offset / 2 + t) + " is outside the vocabulary of " + std::to_string(vocab));
        break;
      }
    }
  }
  const XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  ZEROSIM_RETURN_IF_ERROR(status);
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(hash.high64),
                static_cast<unsigned long long>(hash.low64));
  return TokenFileSummary{size, hex};
}

Status TokenDataset::tokens(int64_t sample_index, std::span<int32_t> destination) {
  ZEROSIM_CHECK(sample_index >= 0 && sample_index < sample_count_, "sample index out of range");
  ZEROSIM_CHECK(static_cast<int64_t>(destination.size()) == spec_.window + 1, "a window and its last target");
  if (!file_) {
    const uint64_t vocab = static_cast<uint64_t>(spec_.vocab);
    const uint64_t sample = static_cast<uint64_t>(sample_index);
    int32_t token = static_cast<int32_t>(mix_random_bits(spec_.seed, kFirstTokenStream, sample) % vocab);
    for (size_t t = 0; t < destination.size(); ++t) {
      destination[t] = token;
      const uint64_t draw = mix_random_bits(spec_.seed, kNoiseStream, sample * destination.size() + t);
      token = (draw & 7u) == 0 ? static_cast<int32_t>((draw >> 3) % vocab) : successor_[static_cast<size_t>(token)];
    }
    return Status();
  }
  window_scratch_.resize(destination.size());
  const uint64_t offset_bytes = static_cast<uint64_t>(sample_index) * static_cast<uint64_t>(spec_.window) * 2;
  ZEROSIM_RETURN_IF_ERROR(file_->read_exact(offset_bytes, std::as_writable_bytes(std::span<uint16_t>(window_scratch_))));
  for (size_t t = 0; t < destination.size(); ++t) {
    uint16_t value = 0;
    std::memcpy(&value, &window_scratch_[t], 2);  // little-endian on every machine zerosim builds for
    if (value >= spec_.vocab) {
      return data_loss(spec_.file + ": token " + std::to_string(value) + " at token offset " +
                       std::to_string(offset_bytes / 2 + t) + " is outside the vocabulary of " + std::to_string(spec_.vocab));
    }
    destination[t] = value;
  }
  return Status();
}

}  // namespace zerosim
