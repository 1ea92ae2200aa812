// Exhaustive crash exploration of a checkpoint save: the real core on W rank threads, on
// SimDisk, killed at every crash point that the save hits, and for each point in every crash
// state the power-loss model allows (bounded), then resumed and compared with the
// uninterrupted run at every step.
//
// The scenario: train, save every `save_every_steps` steps; the save at `explored_save_step`
// is the one explored, so an earlier committed checkpoint exists (the save before it, at
// explored_save_step - save_every_steps: saves commit in order, an async one included). For
// each (site, rank, occurrence) of that save ("ckpt.*" sites, discovered by a recording run):
//   1. a fresh SimDisk, the same run, and at that point the disk freezes (the power goes out:
//      no rank does any more I/O) and the ranks stop (the hook throws SimulatedCrash);
//   2. the pending operations at that instant get fates. Those under the checkpoint directory
//      get every combination of keep / drop (and, for writes of several sectors, torn: the
//      first half of the sectors kept) when there are at most `crash_state_bound`
//      combinations, otherwise `crash_state_bound` combinations drawn from the seed, always
//      including "keep all" and "drop all"; the others (swap files, scratch state a resume
//      never reads) get a fate drawn from the seed and the operation's identity. Fates follow
//      what an operation is, not its position, so an exploration is reproducible although
//      rank threads interleave their operations differently from run to run;
//   3. for each crash state, on a copy of the frozen disk: power loss, then a restart from the
//      config and the durable disk only (`latest`), at resume_world_size, to total_steps.
// A case passes when the resumed run matches the reference bit for bit from the step it
// resumed at, that step is one of the saves, and no committed checkpoint was lost (the
// earlier save is still complete). A clear refusal (no complete checkpoint) is counted apart;
// anything else (a divergence, an unexpected error, a lost checkpoint) fails, naming the state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "sim/sim_disk.h"

namespace zerosim {

// Thrown by a crash-point hook to stop a rank (run_training turns it into an error).
struct SimulatedCrash {
  std::string site;
  int rank = 0;
};

struct CrashPoint {
  std::string site;
  int rank = 0;
  int64_t occurrence = 0;  // 1-based, per (site, rank)
  std::string describe() const;  // "ckpt.shard_written@rank2#2"
};

// Counts hits per (site, rank); records them, or crashes at one: freezes the disk and throws.
class ScriptedCrashPoints final : public CrashPointHook {
 public:
  // Recording mode.
  ScriptedCrashPoints() = default;
  // Crash mode.
  ScriptedCrashPoints(CrashPoint target, SimDisk* disk) : target_(std::move(target)), disk_(disk), armed_(true) {}
  void hit(std::string_view site, int rank) override;
  std::vector<CrashPoint> recorded() const;
  bool fired() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> counts_;  // recording mode
  int64_t target_hits_ = 0;                                 // crash mode
  std::vector<CrashPoint> recorded_;
  CrashPoint target_;
  SimDisk* disk_ = nullptr;
  bool armed_ = false;
  bool fired_ = false;
};

// The crash states to try for these pending operations: every combination of keep / drop (and,
// for writes of several sectors, a tear keeping the first half) of the operations under
// `directory` ("" : all of them) when there are at most `bound`, else `bound` of them drawn
// from `seed` (always "keep all" and "drop all"); the other operations get a fate drawn from
// their identity. Fates follow what an operation is (PendingOperation::describe()), not its
// position. `zerosim explore` and `zerosim exec` use it.
std::vector<std::vector<CrashFate>> crash_states(const std::vector<PendingOperation>& pending, int64_t bound,
                                                 uint64_t seed, const std::string& directory);
// "keep write /ckpt/a [0, 4096); drop rename ..." for a crash state.
std::string describe_state(const std::vector<PendingOperation>& pending, const std::vector<CrashFate>& fates);

struct CrashScenario {
  TrainingOptions options;         // paths (nvme_path) on the simulated disk
  int resume_world_size = 0;       // 0: the same world size
  int64_t save_every_steps = 2;
  int64_t explored_save_step = 4;  // a multiple of save_every_steps, > save_every_steps
  int64_t total_steps = 6;
  int64_t crash_state_bound = 64;
  uint64_t seed = 1;
  std::string checkpoint_directory = "/checkpoints";
  CheckpointSaveOptions save_options;  // for every save (save_exclude_frozen_parameters)
  // Defects switched on in the core for every run of the exploration (defects.h).
  DefectSet defects;
  // Test-only: called at every crash-point hit with the run's disk, to plant nondeterminism
  // that the determinism self-check must catch. Empty in every real scenario.
  std::function<void(Disk& disk, std::string_view site, int rank)> planted_hook;
};

struct CrashCaseFailure {
  std::string crash_point;
  std::string crash_state;  // the fates, e.g. "keep create /checkpoints/..., drop write ..."
  std::string reason;       // the first divergence (step and component) or the error
};

// One crash point's tally (reports: one line, one JUnit testcase per point).
struct CrashPointTally {
  std::string crash_point;  // described
  int64_t crash_states = 0, passed = 0, refused = 0, failed = 0;
};

struct ExplorationResult {
  int64_t crash_points = 0;
  int64_t crash_states = 0;
  int64_t passed = 0;
  int64_t refused = 0;  // a clear error: no complete checkpoint to resume from
  int64_t failed = 0;
  std::vector<CrashCaseFailure> failures;  // the first few
  std::vector<std::string> explored_points;  // described, for reports
  std::vector<CrashPoint> points;
  std::vector<CrashPointTally> per_point;  // in exploration order
  std::string reference_trace_hash;  // of the reference run's disk (determinism check)
};

// Appends the tally of the crash point being explored when it goes out of scope (whichever way
// the point's loop body is left), from the result's counters before and after.
class CrashPointTallyScope {
 public:
  CrashPointTallyScope(ExplorationResult& result, std::string crash_point)
      : result_(result),
        tally_{std::move(crash_point), result.crash_states, result.passed, result.refused, result.failed} {}
  ~CrashPointTallyScope() {
    result_.per_point.push_back(CrashPointTally{tally_.crash_point, result_.crash_states - tally_.crash_states,
                                                result_.passed - tally_.passed, result_.refused - tally_.refused,
                                                result_.failed - tally_.failed});
  }
  CrashPointTallyScope(const CrashPointTallyScope&) = delete;
  CrashPointTallyScope& operator=(const CrashPointTallyScope&) = delete;

 private:
  ExplorationResult& result_;
  CrashPointTally tally_;  // the counters when the point began
};

// The determinism self-check: runs the scenario's uninterrupted run twice on fresh simulated
// disks and compares the trace hashes (every I/O and crash decision); kInternal naming both
// hashes when they differ. explore_save_crashes runs it first.
Result<std::string> check_determinism(const CrashScenario& scenario);

// The options of the resume: at the scenario's resume_world_size (0: the same), with
// train_batch_size and the micro batch kept and the accumulation following the world size
// (elastic resume), and per-step digests on. `source` prefixes the error when the world size
// does not divide the batch.
Result<TrainingOptions> resume_options_for(const CrashScenario& scenario, const std::string& source);

// The save committed before the explored one begins (saves commit in order): a resume after a
// crash in the explored save starts from it or from the explored save, never earlier.
int64_t previous_save_step(const CrashScenario& scenario);

// Validates the scenario (names what is wrong) and runs the exploration.
Result<ExplorationResult> explore_save_crashes(const CrashScenario& scenario);

// The first place where a resumed run leaves the reference.
struct Divergence {
  bool found = false;
  std::string where;      // "after load (step 4)", "step 5", or why the runs cannot be compared
  std::string component;  // "params" ... "data" (ComponentDigests' order), or a step record's
                          // "loss", "learning rate", "loss scale", "grad norm", "skipped", "step number"
  // The global step whose state differs (a component of the state), for a capture that
  // narrows it down to an element; -1 for a step record's field or a structural mismatch.
  int64_t state_step = -1;
  // Where it shows: S for "after load (step S)", N for "step N"; -1 for a structural mismatch.
  int64_t at_step = -1;
  // A step record's field: both values, as text with their bits, and their ULP distance.
  std::string expected_value, actual_value;
  uint64_t ulp_distance = 0;
  std::string describe() const;  // "after load (step 4): scheduler"; empty when not found
};

// The part of `run` after `step`: its steps and per-step digests from step + 1 on, with the
// state after `step` as its start. How a run that counts its steps from 0 again after `step`
// (the model of a module-only load) is put beside the resumed run.
void keep_steps_after(TrainingRun& run, int64_t step);

// Compares a resumed run with the reference from `first_step` on: the state right after the
// load against the reference's state at first_step, then every step (the step record's fields,
// then every component of the state after it).
Divergence find_first_divergence(const TrainingRun& reference, const TrainingRun& resumed, int64_t first_step);
// find_first_divergence(...).describe(): "after load (step S): <component>", "step N: <field or
// component>", or empty when identical.
std::string first_divergence(const TrainingRun& reference, const TrainingRun& resumed, int64_t first_step);

}  // namespace zerosim
