// The uninterrupted reference runs of a process, keyed by a hash of everything that determines
// them, so that a suite run with several defects, a fuzz campaign's shrinking, or the tests'
// sweeps compute each reference once. The key hashes the resolved DeepSpeed config (every
// default explicit, every "auto" filled), the model, the dataset, the seed, the world size, the
// SIMD path, the step count and the zerosim version; the disk and the clock are not in it,
// because the determinism contract says they change no bit (the explorer's determinism
// self-check is where that is tested, never through this cache).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "core/engine/engine.h"

namespace zerosim {

// XXH3-128 (32 hex digits) of the canonical JSON of the determining inputs.
std::string reference_key(const TrainingOptions& options, int64_t step_count);

class ReferenceCache {
 public:
  // The cached run for (options, step_count), or `run()`'s result, cached when it succeeded.
  Result<TrainingRun> get_or_run(const TrainingOptions& options, int64_t step_count,
                                 const std::function<Result<TrainingRun>()>& run);
  int64_t hits() const;
  int64_t misses() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, TrainingRun> runs_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace zerosim
