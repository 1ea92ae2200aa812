// The drivers of a run (engine.h): W ranks on threads (run_training) or this process's rank
// (run_training_rank), each initializing or loading, training to the step count with the
// plan's saves, and digesting the state; a failing rank aborts its peers.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/checkpoint/commit.h"
#include "core/engine/engine.h"

namespace zerosim {
Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, Env env,
                                 const CheckpointPlan& checkpoints) {
  RankSeams seams;
  seams.env_for_rank = [env](int) { return env; };
  return run_training(options, step_count, seams, checkpoints);
}

namespace {

// The sum over the ranks of one fingerprint point, from a gather of every rank's shares (each
// rank's block is `block_bytes` long; the point's share is at `point` within it).
RankEngine::StateFingerprint sum_of_shares(const std::vector<std::byte>& gathered, int world_size, size_t block_bytes,
                                           size_t point) {
  constexpr size_t kShareBytes = sizeof(RankEngine::StateFingerprint);
  RankEngine::StateFingerprint sum{};
  for (int source = 0; source < world_size; ++source) {
    RankEngine::StateFingerprint share;
    std::memcpy(&share, gathered.data() + static_cast<size_t>(source) * block_bytes + point * kShareBytes, kShareBytes);
    for (size_t lane = 0; lane < sum.size(); ++lane) sum[lane] += share[lane];
  }
  return sum;
}

// One rank's whole run: initialize or load, train to step_count with the plan's saves, and the
// digests; rank 0 fills `run`. On failure, abort_peers (when set) releases the other ranks.
Status run_one_rank(const TrainingOptions& options, int64_t step_count, int rank, Comm& comm, Comm* checkpoint_comm,
                    const Env& env, const CheckpointPlan& checkpoints, TrainingRun& run,
                    const std::function<void()>& abort_peers) {
  // A save directory that can never be written is found now, not after the first save's steps.
  if (rank == 0 && !checkpoints.save_directory.empty()) {
    ZEROSIM_RETURN_IF_ERROR(
        check_directory_writable(*env.disk, checkpoints.save_directory, ".zerosim-write-probe-" + options.run_id));
  }
  RankEngine engine(options, comm, env, checkpoint_comm);
  // Declared after the engine, so destroyed before it: a rank that leaves with an error (or
  // an exception) aborts its peers first, and no peer, foreground or background, is left
  // waiting in a collective while this engine's destructor waits for its own async save.
  struct AbortPeersOnFailure {
    const std::function<void()>& abort_peers;
    bool succeeded = false;
    ~AbortPeersOnFailure() {
      if (!succeeded && abort_peers) abort_peers();
    }
  } abort_on_failure{abort_peers};
  std::vector<std::string> notes;
  if (checkpoints.resume_directory.empty()) {
    ZEROSIM_RETURN_IF_ERROR(engine.initialize());
  } else {
    ZEROSIM_RETURN_IF_ERROR(
        engine.initialize_from_checkpoint(checkpoints.resume_directory, checkpoints.resume_tag, &notes,
                                          checkpoints.resume_load));
    // Each rank resolved the tag itself: they must have loaded the same step.
    std::array<double, 2> loaded = {static_cast<double>(engine.counters().global_steps),
                                    -static_cast<double>(engine.counters().global_steps)};
    ZEROSIM_RETURN_IF_ERROR(comm.all_reduce_max(loaded));
    if (loaded[0] != -loaded[1]) {
      return data_loss("ranks loaded different checkpoints from " + checkpoints.resume_directory + " (steps " +
                       std::to_string(static_cast<int64_t>(-loaded[1])) + " to " +
                       std::to_string(static_cast<int64_t>(loaded[0])) +
                       "): the directory changed during the load, or a rank could not read the newest tag");
    }
    if (engine.counters().global_steps > step_count) {
      return invalid_argument("the checkpoint in " + checkpoints.resume_directory + " is at step " +
                              std::to_string(engine.counters().global_steps) + ", past the " +
                              std::to_string(step_count) + " steps asked for");
    }
  }
  if (rank == 0) {
    run.loaded_checkpoint_step = engine.loaded_checkpoint_step();
    run.notes.insert(run.notes.end(), notes.begin(), notes.end());
    if (!engine.swap_engine_note().empty()) run.notes.push_back(engine.swap_engine_note());
  }
  // A resumed run does not save its starting point again into the directory it came from.
  // The full state at options.capture_state_at_step, kept on rank 0 (a diagnosis's input).
  auto capture_here = [&]() -> CapturedState* {
    if (rank != 0 || engine.counters().global_steps != options.capture_state_at_step) return nullptr;
    run.captured.emplace();
    return &*run.captured;
  };
  // digest_every_step: the fingerprint shares of the state right after the start and after
  // each step (rank 0 keeps the scalar part), combined by one gather when the run ends.
  std::vector<RankEngine::StateFingerprint> fingerprints;
  std::vector<FullTrainingState> fingerprint_scalars;
  auto fingerprint_now = [&]() -> Status {
    if (!options.digest_every_step) return Status();
    ZEROSIM_ASSIGN_OR_RETURN(RankEngine::StateFingerprint share, engine.local_state_fingerprint());
    fingerprints.push_back(share);
    if (rank == 0) fingerprint_scalars.push_back(engine.scalar_state());
    return Status();
  };
  // The model of loads (CheckpointPlan::modelled_loads), in order: at the start when a loaded
  // step is this run's first, else right after that step.
  size_t next_modelled_load = 0;
  auto model_loads_due = [&]() -> Status {
    while (next_modelled_load < checkpoints.modelled_loads.size() &&
           engine.counters().global_steps == checkpoints.modelled_loads[next_modelled_load].after_step) {
      const CheckpointPlan::ModelledLoad& load = checkpoints.modelled_loads[next_modelled_load++];
      ZEROSIM_RETURN_IF_ERROR(engine.reset_as_loaded(load.options, load.frozen_now ? &*load.frozen_now : nullptr,
                                                     load.excluded_from_save));
      if (rank == 0) run.modelled_load_step_indices.push_back(run.steps.size());
    }
    return Status();
  };
  ZEROSIM_RETURN_IF_ERROR(model_loads_due());
  const bool capture_initial = options.capture_state_at_step == engine.counters().global_steps;
  if (capture_initial) {
    ZEROSIM_ASSIGN_OR_RETURN(FullTrainingState state, engine.gather_state(capture_here()));
    if (rank == 0) run.initial_digests = state.digests;
  }
  ZEROSIM_RETURN_IF_ERROR(fingerprint_now());
  auto listed_for_save = [&](int64_t step) {
    return std::find(checkpoints.save_at_steps.begin(), checkpoints.save_at_steps.end(), step) !=
           checkpoints.save_at_steps.end();
  };
  int64_t last_saved_step = checkpoints.resume_directory == checkpoints.save_directory ? engine.counters().global_steps : -1;
  // The newest save known to be committed (an async save is only once it has been waited for):
  // a failed save names it, so that the user knows what a resume will load.
  int64_t committed_step = last_saved_step;
  const bool async_saves = options.config.checkpoint.async_save;
  auto with_committed_note = [&](const Status& failed) {
    const std::string note =
        committed_step >= 0 ? "the last committed checkpoint is " + checkpoints.save_directory + "/" +
                                  checkpoint_tag_for_step(committed_step) + " (latest names it; --resume " +
                                  checkpoints.save_directory + " continues from it)"
                            : "no checkpoint of this run was committed in " + checkpoints.save_directory;
    return Status(failed.code(), failed.message() + "; " + note);
  };
  auto save_at = [&](int64_t step) -> Status {
    const Status saved =
        engine.save_checkpoint(checkpoints.save_directory, checkpoint_tag_for_step(step), checkpoints.save_options);
    if (!saved.ok()) return with_committed_note(saved);
    // An async save returns once its snapshot is taken, after waiting for the one before.
    committed_step = async_saves ? last_saved_step : step;
    last_saved_step = step;
    return saved;
  };
  // after_step: the step's digests, gathered now (one gather of the fingerprint shares).
  std::optional<StepRecord> last_record;  // this run's last step (the same step on every rank)
  auto observe = [&](const StepRecord& record, bool saved) -> Status {
    if (!checkpoints.after_step) return Status();
    ZEROSIM_ASSIGN_OR_RETURN(RankEngine::StateFingerprint share, engine.local_state_fingerprint());
    constexpr size_t kShareBytes = sizeof(RankEngine::StateFingerprint);
    std::vector<std::byte> all(rank == 0 ? kShareBytes * static_cast<size_t>(comm.world_size()) : 0);
    ZEROSIM_RETURN_IF_ERROR(comm.gather(std::as_bytes(std::span<const RankEngine::StateFingerprint>(&share, 1)), all, 0));
    if (rank != 0) return Status();
    checkpoints.after_step(
        record, fingerprint_digests(engine.scalar_state(), sum_of_shares(all, comm.world_size(), kShareBytes, 0)), saved);
    return Status();
  };
  if (last_saved_step != engine.counters().global_steps && listed_for_save(engine.counters().global_steps)) {
    ZEROSIM_RETURN_IF_ERROR(save_at(engine.counters().global_steps));
  }
  while (engine.counters().global_steps < step_count) {
    ZEROSIM_ASSIGN_OR_RETURN(StepRecord record, engine.train_step());
    if (rank == 0) run.steps.push_back(record);
    // The model of a load: the step's state as such a load would give it (the digest of this
    // step is the state after the modelled load).
    ZEROSIM_RETURN_IF_ERROR(model_loads_due());
    const int64_t saves_before = last_saved_step;
    last_record = record;
    if (engine.counters().global_steps == options.capture_state_at_step) {
      ZEROSIM_RETURN_IF_ERROR(engine.gather_state(capture_here()).status());
    }
    ZEROSIM_RETURN_IF_ERROR(fingerprint_now());
    const int64_t step = engine.counters().global_steps;
    if ((checkpoints.save_every_steps > 0 && step % checkpoints.save_every_steps == 0) || listed_for_save(step)) {
      ZEROSIM_RETURN_IF_ERROR(save_at(step));
    }
    // The last step's line waits for the end-of-run save below.
    const bool final_save_pending = step == step_count && checkpoints.save_at_end && !checkpoints.save_directory.empty() &&
                                    last_saved_step != step;
    if (!final_save_pending) ZEROSIM_RETURN_IF_ERROR(observe(record, !async_saves && last_saved_step != saves_before));
    if (checkpoints.stop_requested != nullptr && step < step_count) {
      std::array<double, 1> stop = {checkpoints.stop_requested->load() ? 1.0 : 0.0};
      ZEROSIM_RETURN_IF_ERROR(comm.all_reduce_max(stop));
      if (stop[0] > 0) {
        if (rank == 0) run.stopped_early = true;
        if (checkpoints.save_on_stop && !checkpoints.save_directory.empty() && last_saved_step != step) {
          ZEROSIM_RETURN_IF_ERROR(save_at(step));
        }
        break;
      }
    }
  }
  const bool stopped = checkpoints.stop_requested != nullptr && engine.counters().global_steps < step_count;
  if (!stopped && checkpoints.save_at_end && !checkpoints.save_directory.empty() &&
      last_saved_step != engine.counters().global_steps) {
    ZEROSIM_RETURN_IF_ERROR(save_at(engine.counters().global_steps));
    if (last_record) ZEROSIM_RETURN_IF_ERROR(observe(*last_record, !async_saves));  // every rank trained it
  }
  if (const Status waited = engine.wait_for_save(); !waited.ok()) return with_committed_note(waited);
  if (rank == 0 && !checkpoints.save_directory.empty()) run.last_saved_step = last_saved_step;
  if (options.digest_every_step) {
    // Every rank recorded the same number of shares (the ranks step and stop together).
    constexpr size_t kShareBytes = sizeof(RankEngine::StateFingerprint);
    std::vector<std::byte> shares(fingerprints.size() * kShareBytes), all(rank == 0 ? shares.size() * comm.world_size() : 0);
    if (!shares.empty()) std::memcpy(shares.data(), fingerprints.data(), shares.size());
    ZEROSIM_RETURN_IF_ERROR(comm.gather(shares, all, 0));
    if (rank == 0) {
      for (size_t point = 0; point < fingerprints.size(); ++point) {
        const ComponentDigests digests = fingerprint_digests(
            fingerprint_scalars[point], sum_of_shares(all, comm.world_size(), shares.size(), point));
        if (point == 0) run.initial_digests = digests;
        else run.step_digests.push_back(digests);
      }
    }
  }
  ZEROSIM_ASSIGN_OR_RETURN(FullTrainingState state, engine.gather_state());
  if (rank == 0) run.final_state = std::move(state);
  if (rank == 0 && engine.partitions_were_resident()) {
    if (options.config.zero.offload_optimizer.device == OffloadDevice::kNone) {
      run.notes.push_back("the partitions stayed in the memory of the " + options.compute.name +
                          " device between steps (nothing offloaded): a step moved only its micro-batches, losses "
                          "and norm bins across PCIe, and the state only when it was saved or digested");
    } else {
      run.notes.push_back("the 16-bit parameters and the gradient partitions stayed in the memory of the " +
                          options.compute.name + " device; the offloaded optimizer (" +
                          offload_device_name(options.config.zero.offload_optimizer.device) +
                          ") kept master and moments on the host and stepped AdamW on the CPU: a step moved each "
                          "sub-group's gradients to the host and its new 16-bit parameters back");
    }
  }
  if (rank == 0 && !engine.checkpoint_io_note().empty()) run.notes.push_back(engine.checkpoint_io_note());
  abort_on_failure.succeeded = true;
  return Status();
}

// What run_training and run_training_rank refuse before any rank starts.
Status validate_run_request(const TrainingOptions& options, int64_t step_count, const CheckpointPlan& checkpoints) {
  ZEROSIM_RETURN_IF_ERROR(validate_training_options(options));
  if (step_count < 0) return invalid_argument("steps must be non-negative, got " + std::to_string(step_count));
  if (checkpoints.save_every_steps < 0) {
    return invalid_argument("save every: expected steps >= 0, got " + std::to_string(checkpoints.save_every_steps));
  }
  for (int64_t step : checkpoints.save_at_steps) {
    if (step < 0) return invalid_argument("save at steps: expected steps >= 0, got " + std::to_string(step));
  }
  if (!checkpoints.save_at_steps.empty() && checkpoints.save_directory.empty()) {
    return invalid_argument("saving at listed steps needs a save directory");
  }
  if (checkpoints.save_every_steps > 0 && checkpoints.save_directory.empty()) {
    return invalid_argument("saving every " + std::to_string(checkpoints.save_every_steps) +
                            " steps needs a save directory");
  }
  return Status();
}

// An exception never leaves a rank: it becomes that rank's error.
Status run_one_rank_catching(const std::function<Status()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory (model, batch or world size too large for this machine)");
  } catch (const std::exception& error) {
    return internal_error(std::string("unexpected exception: ") + error.what());
  } catch (...) {
    // A crash-point hook may stop a rank by throwing anything (a simulated kill).
    return aborted("stopped by an exception that is not a std::exception (a crash point?)");
  }
}

}  // namespace

Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, const RankSeams& seams,
                                 const CheckpointPlan& checkpoints) {
  ZEROSIM_CHECK(static_cast<bool>(seams.env_for_rank), "run_training needs every rank's Env");
  ZEROSIM_RETURN_IF_ERROR(validate_run_request(options, step_count, checkpoints));
  ThreadCommWorld world(options.world_size, options.threads_per_rank);
  // Async saves commit on their own communicator (see RankEngine).
  ThreadCommWorld checkpoint_world(options.world_size, options.threads_per_rank);
  std::mutex result_mutex;
  Status first_error;
  int first_error_rank = -1;
  TrainingRun run;

  // Keeps the root cause, and the same one whatever the threads' timing: a kAborted is only the
  // echo of another rank's failure, and of two real errors the lower rank's wins (not the
  // earlier one's), so a report names the same rank and file in every run.
  auto record_error = [&](int rank, const Status& status) {
    std::lock_guard lock(result_mutex);
    const bool aborted = status.code() == StatusCode::kAborted;
    const bool recorded_aborted = first_error.code() == StatusCode::kAborted;
    if (first_error.ok() || (recorded_aborted && !aborted) || (recorded_aborted == aborted && rank < first_error_rank)) {
      first_error = status;
      first_error_rank = rank;
    }
  };

  const std::function<void()> abort_both = [&] {
    world.abort();
    checkpoint_world.abort();
  };
  auto run_rank = [&](int rank) -> Status {
    const Env env = seams.env_for_rank(rank);
    std::unique_ptr<Comm> wrapped = seams.wrap_comm ? seams.wrap_comm(rank, world.comm(rank)) : nullptr;
    return run_one_rank(options, step_count, rank, wrapped ? *wrapped : world.comm(rank), &checkpoint_world.comm(rank),
                        env, checkpoints, run, abort_both);
  };
  // A rank never lets an exception escape its thread: an allocation failure becomes an error
  // on that rank, and the world is aborted so that no other rank waits for it forever.
  auto rank_main = [&](int rank) {
    const Status status = run_one_rank_catching([&] { return run_rank(rank); });
    if (!status.ok()) {
      record_error(rank, Status(status.code(), "rank " + std::to_string(rank) + ": " + status.message()));
      world.abort();
      checkpoint_world.abort();
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(options.world_size));
  for (int rank = 1; rank < options.world_size; ++rank) {
    try {
      threads.emplace_back(rank_main, rank);
    } catch (const std::system_error& error) {
      record_error(rank, resource_exhausted("cannot start the thread of rank " + std::to_string(rank) + " of " +
                                      std::to_string(options.world_size) + ": " + error.what()));
      world.abort();
      checkpoint_world.abort();
      break;
    }
  }
  // Rank 0 runs even when another rank has already failed and aborted the world: an error it
  // meets before its first collective (a missing device, a bad path) is then its own, not an
  // echo, and the lowest rank's error is the one reported whatever the threads' timing (rank 0
  // skipped here let a faster rank 1's error win). It stops at its first collective.
  rank_main(0);
  for (std::thread& thread : threads) thread.join();
  if (!first_error.ok()) return first_error;
  run.digests = run.final_state.digests;
  return run;
}

Result<TrainingRun> run_training_rank(const TrainingOptions& options, int64_t step_count, Comm& comm,
                                      Comm* checkpoint_comm, const Env& env, const CheckpointPlan& checkpoints) {
  ZEROSIM_RETURN_IF_ERROR(validate_run_request(options, step_count, checkpoints));
  if (comm.world_size() != options.world_size) {
    return invalid_argument("the communicator has " + std::to_string(comm.world_size()) + " ranks, the run " +
                            std::to_string(options.world_size));
  }
  TrainingRun run;
  const int rank = comm.rank();
  const std::function<void()> no_abort;
  const Status status = run_one_rank_catching(
      [&] { return run_one_rank(options, step_count, rank, comm, checkpoint_comm, env, checkpoints, run, no_abort); });
  if (!status.ok()) return Status(status.code(), "rank " + std::to_string(rank) + ": " + status.message());
  run.digests = run.final_state.digests;
  return run;
}

}  // namespace zerosim
