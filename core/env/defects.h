// Named defects: compiled-in bugs that reproduce the causes of real resume failures
// (docs/bug-catalog.md), so that the harness can show that it catches
// each one and names the state that diverged.
//
// One switch: Env::defects. It is null in every real run (RealEnv never sets it), and then
// every defect check is a null test that takes the production path; only the simulator and
// the tests hand the engine a DefectSet with defects switched on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zerosim {

enum class Defect : uint32_t {
  kOptimizerStateNotSaved,      // catalog #2, #3: shards hold zero moments
  kSwappedStateNotSaved,        // #0 (the seed): NVMe-swapped state not streamed into the shard
  kMasterRebuiltFromParams,     // #23, #26: the fp32 master reloaded from the 16-bit parameters
  kStepCounterNotRestored,      // #4, #6: Adam's step count starts again at 0 (bias correction)
  kSkippedStepsNotRestored,     // counters: skipped steps forgotten on load
  kSchedulerNotRestored,        // #7, #10: the LR schedule starts again
  kLossScalerResetOnLoad,       // #11, #12: the dynamic loss scaler starts again
  kSamplerPositionLost,         // #16, #17: the data order restarts from the first sample
  kAccumulationBoundaryLost,    // #21, #22: data position counted without gradient accumulation
  kLatestBeforeShardsDurable,   // #35: `latest` moves before the shards are fsynced
  kAsyncSnapshotNotCopied,      // #36: the async save writes live state, not a copy
  kWrongPaddingOnReshard,       // #28: fragments read with the padding of the new world size
  kShuffleEpochNotRestored,     // #13, #14: the shuffling RNG restarts at epoch 0 after a resume
  kParamsNotRefreshedAfterLoad, // #31, #25: the 16-bit parameters keep what the new process built
  kRequestedTagIgnored,         // #33: the loader follows `latest`, not the tag asked for
  kLoadOptimizerStatesIgnored,  // load_optimizer_states=False still restores the moments and step count
  kLoadLrSchedulerStatesIgnored,  // load_lr_scheduler_states=False still restores the schedule
  kModuleOnlyLoadsNoWeights,    // load_module_only at stage 3 loads no trainable weight (DeepSpeed HEAD)
  kFrozenParametersStepped,     // frozen parameters handed to AdamW: weight decay moves them
  kFrozenMasterNotRebuilt,      // a frozen parameter's fp32 master not rebuilt from its value on load
  kExcludedFrozenLeftZero,      // an excluded frozen parameter loads as zeros, not the model's value
  kDerivedBufferNotRebuiltOnLoad,  // #38: a non-persistent buffer is left as to_empty leaves it after a load
  kPersistentBufferNotSaved,    // M: a persistent buffer missing from the checkpoint; a load keeps the fresh value
  kTiedWeightUntiedOnLoad,      // the tied head keeps its own copy of wte after a load, which no update reaches
  // DeepSpeed edaa722's own behaviour (scenarios/deepspeed_model.h):
  kOptimizerLrNotRestored,      // the first update after a load uses a fresh optimizer's lr
  kUnswappedSubGroupResetOnLoad,  // NVMe: a sub-group under the swap threshold reverts to the initial weights
  kOtherWorldSizeRefused,       // a checkpoint of another world size is refused (no reshard)
};

struct DefectInfo {
  Defect defect;
  const char* name;         // "scheduler_not_restored"
  const char* description;  // one line
};

const std::vector<DefectInfo>& all_defects();
std::optional<Defect> defect_from_name(std::string_view name);
const char* defect_name(Defect defect);

class DefectSet {
 public:
  DefectSet() = default;
  explicit DefectSet(std::initializer_list<Defect> defects) {
    for (Defect defect : defects) enable(defect);
  }
  void enable(Defect defect) { bits_ |= uint64_t{1} << static_cast<uint32_t>(defect); }
  bool has(Defect defect) const { return (bits_ >> static_cast<uint32_t>(defect)) & 1u; }
  bool empty() const { return bits_ == 0; }

 private:
  uint64_t bits_ = 0;
};

// The check the core makes: false whenever no DefectSet is given.
inline bool defect_active(const DefectSet* defects, Defect defect) { return defects != nullptr && defects->has(defect); }

}  // namespace zerosim
