// The drivers: a run of W ranks on threads (run_training), one rank of a run whose ranks are
// processes (run_training_rank), the checkpoint plan around a run, and what a run returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/rank_engine.h"
#include "core/engine/training_options.h"
#include "core/engine/training_state.h"
#include "core/env/comm.h"
#include "core/env/env.h"

namespace zerosim {

struct TrainingRun {
  std::vector<std::string> notes;  // one-line notes for the log (e.g. the swap engine fallback)
  std::vector<StepRecord> steps;
  FullTrainingState final_state;
  ComponentDigests digests;
  // With TrainingOptions::digest_every_step: the digests of the state right after
  // initialization or load (before any step of this run), and after each step, in step order.
  ComponentDigests initial_digests;
  std::vector<ComponentDigests> step_digests;
  // With TrainingOptions::capture_state_at_step, when the run passed that step.
  std::optional<CapturedState> captured;
  // CheckpointPlan::stop_requested ended the run before its last step.
  bool stopped_early = false;
  // The step of this run's last committed save (-1: none).
  int64_t last_saved_step = -1;
  // The step of the checkpoint a resumed run loaded (-1: a fresh start). A module-only load
  // starts at step 0 from it.
  int64_t loaded_checkpoint_step = -1;
  // For CheckpointPlan::modelled_loads: how many steps the run had recorded when each load was
  // modelled (a module-only load's steps start after its index).
  std::vector<size_t> modelled_load_step_indices;
};

// The ComponentDigests of a fingerprinted state (RankEngine::local_state_fingerprint, summed
// over the ranks): the tensor components are "fp:" + 32 hex digits, the rest as for a gathered
// state. What TrainingRun::step_digests holds.
ComponentDigests fingerprint_digests(const FullTrainingState& scalars, const RankEngine::StateFingerprint& sum);

// The name of the first component ("params", "master", ..., "data", in ComponentDigests'
// order) whose digests differ; empty when all agree. What an oracle prints when a bit differs.
std::string first_differing_component(const ComponentDigests& expected, const ComponentDigests& actual);

// Checkpointing around a run: resume from a directory, save every S steps and at the end.
struct CheckpointPlan {
  std::string resume_directory;  // empty: a fresh start
  std::string resume_tag = "latest";
  CheckpointLoadOptions resume_load;  // what the resume restores
  // The oracle of a resume with load options, or of a chain of resumes: after each listed step
  // (and its save), in order, the live state becomes what that load gives
  // (RankEngine::reset_as_loaded). A load's step counts in the steps of the run before it: after
  // a module-only load the count starts from 0 again (and the run goes on to its step count).
  struct ModelledLoad {
    int64_t after_step = -1;
    CheckpointLoadOptions options;
    std::optional<std::vector<std::string>> frozen_now;  // the restart's frozen set (unset: unchanged)
    std::vector<std::string> excluded_from_save;         // parameters the loaded checkpoint holds no value of
  };
  std::vector<ModelledLoad> modelled_loads;
  std::string save_directory;  // empty: no saves
  CheckpointSaveOptions save_options;  // for every save of the run
  int64_t save_every_steps = 0;  // 0: only at the end of the run (when save_directory is set)
  // Saves after these steps too (0: the starting state of a fresh run, before its first step).
  std::vector<int64_t> save_at_steps;
  bool save_at_end = true;  // with save_directory: the run's last step is saved
  // Stops the run early (a SIGTERM or SIGINT handler sets it, in the CLI): every rank reads it
  // after each step and the ranks agree by a collective max, so that all stop after the same
  // step whenever each saw it. Then the run saves when save_on_stop (and save_directory is
  // set), and ends with TrainingRun::stopped_early. Null: never stops early.
  const std::atomic<bool>* stop_requested = nullptr;
  bool save_on_stop = false;
  // Called on rank 0 after each step, once that step's save (if any) has returned, with the
  // state's digests (ComponentDigests of fingerprint_digests) and whether a synchronous save of
  // this step committed. Costs a gather per step. What `zerosim train` writes to the state log
  // of `zerosim exec` (ZEROSIM_STATE_LOG).
  std::function<void(const StepRecord& record, const ComponentDigests& digests, bool saved)> after_step;
};

// Runs W ranks on threads until the global step count reaches `step_count` (from a fresh start,
// or from the checkpoint's step when resuming). On a rank's error the world is aborted and the
// root cause is returned: a real error rather than a consequent kAborted, and of several real
// errors the lowest rank's (so the same one in every run, whatever the threads' timing).
Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, Env env,
                                 const CheckpointPlan& checkpoints = {});
// Per-rank seams for the simulator: each rank's Env (its own clock, a disk view that charges
// that clock), and a wrapper around each rank's training communicator (one that advances and
// synchronizes the virtual clocks at every collective). Either may be empty.
struct RankSeams {
  std::function<Env(int rank)> env_for_rank;
  std::function<std::unique_ptr<Comm>(int rank, Comm& inner)> wrap_comm;
};
Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, const RankSeams& seams,
                                 const CheckpointPlan& checkpoints = {});

// One rank of a run whose ranks are separate processes (one per GPU, each with its own
// communicators, e.g. create_nccl_process_comm): the same loop as each thread of run_training.
// Rank 0's result holds the run (steps, digests, notes); the others' hold nothing but success.
// A failing rank cannot abort its peers through a communicator without abort (NCCL), so the
// error is this rank's to report. `checkpoint_comm` is needed for async saves only.
Result<TrainingRun> run_training_rank(const TrainingOptions& options, int64_t step_count, Comm& comm,
                                      Comm* checkpoint_comm, const Env& env, const CheckpointPlan& checkpoints = {});

// The tag a save at `global_step` gets: "global_step<N>", as DeepSpeed names them.
std::string checkpoint_tag_for_step(int64_t global_step);

}  // namespace zerosim
