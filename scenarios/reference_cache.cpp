#include "scenarios/reference_cache.h"

#include <nlohmann/json.hpp>

#include "core/checkpoint/manifest.h"

namespace zerosim {

std::string reference_key(const TrainingOptions& options, int64_t step_count) {
  const nlohmann::json key = {
      {"zerosim", ZEROSIM_VERSION},
      {"config", options.config.resolved},
      {"model", model_spec_to_string(options.model)},
      {"data", {options.data.seed, options.data.sample_count, options.data.feature_count, options.data.class_count,
                options.data.token_file}},
      {"seed", options.seed},
      {"frozen_parameters", options.frozen_parameters},
      {"world_size", options.world_size},
      {"simd_path", options.simd_path ? static_cast<int>(*options.simd_path) : -1},
      {"compute_device", options.compute.name},
      {"digest_every_step", options.digest_every_step},
      {"capture_state_at_step", options.capture_state_at_step},
      {"steps", step_count}};
  return xxh3_128_hex(key.dump());
}

Result<TrainingRun> ReferenceCache::get_or_run(const TrainingOptions& options, int64_t step_count,
                                               const std::function<Result<TrainingRun>()>& run) {
  const std::string key = reference_key(options, step_count);
  {
    std::lock_guard lock(mutex_);
    auto found = runs_.find(key);
    if (found != runs_.end()) {
      ++hits_;
      return found->second;
    }
    ++misses_;
  }
  Result<TrainingRun> computed = run();
  if (computed.ok()) {
    std::lock_guard lock(mutex_);
    runs_.emplace(key, *computed);
  }
  return computed;
}

int64_t ReferenceCache::hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}

int64_t ReferenceCache::misses() const {
  std::lock_guard lock(mutex_);
  return misses_;
}

}  // namespace zerosim
