// Token sequences for the transformer (core/model/gpt.h). Sample i is a window of `window` + 1
// tokens: the inputs and, shifted by one, the tokens they predict. The engine's ShuffledSampler
// over sample_count (dataset.h) picks the windows as it picks the MLP's samples: a position's
// sample the same at any world size, a checkpoint's data position resuming the exact sequence.
//
// Two sources:
//   * synthetic (no file): a pure function of (seed, sample): its first token is drawn, and each
//     next token is a fixed random permutation of the vocabulary applied to the previous one,
//     except one position in eight drawn uniformly. A bigram the model can learn, so the loss
//     falls; sample_count is the spec's.
//   * a nanoGPT-style file (train.bin): little-endian uint16 tokens. Sample i is the window at
//     token offset i * window (windows overlap by one token, the last one's target), so
//     sample_count = (tokens - 1) / window. Read through the Disk seam, one window at a time;
//     a token outside the vocabulary is an error naming the file and its offset.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/env/disk.h"
#include "core/status.h"

namespace zerosim {

struct TokenDatasetSpec {
  int64_t vocab = 64;
  int64_t window = 16;         // tokens predicted per sample (at most the model's block)
  int64_t sample_count = 0;    // synthetic: positive; with a file 0 (its size decides)
  uint64_t seed = 1234;
  std::string file;            // empty: synthetic
};

// What a whole pass over a token file found: its size and the XXH3-128 of its bytes (32 hex
// digits), which names its contents whatever its path.
struct TokenFileSummary {
  uint64_t size_bytes = 0;
  std::string xxh3_128;
};

class TokenDataset {
 public:
  // Reads the whole file once, through `disk`: refuses an odd size and any token outside the
  // vocabulary (naming its offset), and digests the contents. What a run checks up front, so a
  // bad token fails the start of the run, not its step that samples it.
  static Result<TokenFileSummary> scan_file(const std::string& path, int64_t vocab, Disk& disk);
  // Checks the spec (a file: its size, even and holding at least one window; opened through `disk`).
  static Result<std::unique_ptr<TokenDataset>> open(const TokenDatasetSpec& spec, Disk& disk);
  int64_t sample_count() const { return sample_count_; }
  const TokenDatasetSpec& spec() const { return spec_; }
  // Writes window + 1 tokens of sample `sample_index` (0 <= it < sample_count).
  Status tokens(int64_t sample_index, std::span<int32_t> destination);

 private:
  TokenDataset() = default;
  TokenDatasetSpec spec_;
  int64_t sample_count_ = 0;
  std::vector<int32_t> successor_;  // synthetic: the permutation
  std::unique_ptr<File> file_;
  std::vector<uint16_t> window_scratch_;
};

}  // namespace zerosim
