// A RapidCheck state-machine test of save and resume against the reference trajectory.
//
// Commands: train n steps, save, save on a full disk, crash inside a save (at a commit site, on
// some rank), lose power, restart and resume at another world size, corrupt the newest
// checkpoint (a flipped bit, or a truncated shard). The model predicts, for every command, which
// checkpoints are committed, which one a resume loads (`latest`, or the newest complete one when
// `latest` names a damaged tag) and what must be refused (no complete checkpoint; a shard whose
// checksum fails). After every command that has a state, the state's digest must equal the
// uninterrupted run's digest at that step, whatever the world size and the history.
//
// The running process is modelled by a private continuation directory (/live): each command
// starts a run from it and leaves its state there, so a crash or a restart loses exactly what a
// process would (the continuation is dropped on a crash).
//
// A failure prints RapidCheck's seed and the command sequence; replay it with
// RC_PARAMS="seed=<seed>" ./resume_model_test.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <map>
#include <optional>

#include "core/checkpoint/manifest.h"
#include "faults/faulty_disk.h"
#include "sim/crash_explorer.h"
#include "sim/sim_disk.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

constexpr int64_t kMaxSteps = 12;
const std::string kCheckpoints = "/checkpoints";
const std::string kLive = "/live";

TrainingOptions options_at(int world_size) {
  // Global batch 4: 2 ranks x 1 x 2 accumulation; at W' the accumulation follows.
  TrainingOptions options = make_options(ModelSpec{{6, 5, 3}}, Precision::kFp16, 1, 4 / world_size, world_size, 16, 29);
  options.digest_every_step = true;  // every run's state is compared as the reference's is
  options.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  options.config.zero.offload_optimizer.nvme_path = "/nvme";
  options.config.zero.offload_optimizer.buffer_count = 8;
  options.data.sample_count = 13;
  return options;
}

// The uninterrupted run's digests at every step (index 0: the initial state).
const std::vector<std::string>& reference_digests() {
  static const std::vector<std::string> digests = [] {
    TrainingOptions options = options_at(2);
    options.digest_every_step = true;
    SimDisk disk;
    NoCrashPoints no_crash;
    std::unique_ptr<Clock> clock = make_steady_clock();
    Result<TrainingRun> run = run_training(options, kMaxSteps, Env{&disk, clock.get(), &no_crash, nullptr});
    std::vector<std::string> out;
    if (!run.ok()) return out;
    out.push_back(run->initial_digests.state);
    for (const ComponentDigests& step : run->step_digests) out.push_back(step.state);
    return out;
  }();
  return digests;
}

enum class Damage { kNone, kFlippedBit, kTruncated };

struct CheckpointModel {
  bool complete = false;  // the tag directory holds a complete checkpoint (manifest and shard sizes)
  Damage damage = Damage::kNone;
};

struct ResumeModel {
  bool live = true;  // a process is running (after a crash, only a resume continues)
  int64_t step = 0;
  int world_size = 2;
  std::map<int64_t, CheckpointModel> checkpoints;  // by step
  std::optional<int64_t> latest;
  uint64_t power_losses = 0;

  // What a resume from `latest` loads: the step, or the refusal's code.
  std::variant<int64_t, StatusCode> resume_outcome() const {
    int64_t chosen = -1;
    if (latest && checkpoints.at(*latest).complete && checkpoints.at(*latest).damage != Damage::kTruncated) {
      chosen = *latest;
    } else {
      // `latest` missing or naming an incomplete tag: the newest complete tag, with a warning.
      for (const auto& [step_of_tag, checkpoint] : checkpoints) {
        if (checkpoint.complete && checkpoint.damage != Damage::kTruncated) chosen = step_of_tag;
      }
    }
    if (chosen < 0) return StatusCode::kNotFound;
    if (checkpoints.at(chosen).damage == Damage::kFlippedBit) return StatusCode::kDataLoss;
    return chosen;
  }
};

struct ResumeSystem {
  SimDisk disk{SimDiskOptions{512, uint64_t{1} << 40, 3}};
  NoCrashPoints no_crash;
  std::unique_ptr<Clock> clock = make_steady_clock();
  uint64_t crash_seed = 1;
};

using ResumeCommand = rc::state::Command<ResumeModel, ResumeSystem>;

// Runs from the continuation to `steps`, saving the end into `save_directory`.
Result<TrainingRun> continue_run(ResumeSystem& system, const ResumeModel& model, int64_t steps,
                                 const std::string& save_directory, Disk* disk, CrashPointHook* hook) {
  CheckpointPlan plan;
  plan.resume_directory = kLive;
  plan.save_directory = save_directory;
  Env env{disk != nullptr ? disk : &system.disk, system.clock.get(), hook != nullptr ? hook : &system.no_crash, nullptr};
  return run_training(options_at(model.world_size), steps, env, plan);
}

void expect_state_at(const TrainingRun& run, int64_t step) {
  RC_ASSERT(static_cast<size_t>(step) < reference_digests().size());
  // The state the run ended in: after its last step, or as it started when it took none.
  const ComponentDigests& ended = run.step_digests.empty() ? run.initial_digests : run.step_digests.back();
  if (ended.state != reference_digests()[static_cast<size_t>(step)]) {
    RC_FAIL("the state at step " + std::to_string(step) + " differs from the uninterrupted run's");
  }
}

struct Train : ResumeCommand {
  int64_t steps;
  explicit Train(const ResumeModel&) : steps(*rc::gen::inRange<int64_t>(1, 4)) {}
  void checkPreconditions(const ResumeModel& model) const override {
    const bool applicable = model.live && model.step + steps <= kMaxSteps;  // (RC_PRE would not short-circuit)
    RC_PRE(applicable);
  }
  void apply(ResumeModel& model) const override { model.step += steps; }
  void run(const ResumeModel& model, ResumeSystem& system) const override {
    Result<TrainingRun> run = continue_run(system, model, model.step + steps, kLive, nullptr, nullptr);
    if (!run.ok()) RC_FAIL(run.status().to_string());
    expect_state_at(*run, model.step + steps);
  }
  void show(std::ostream& os) const override { os << "Train(" << steps << ")"; }
};

struct Save : ResumeCommand {
  explicit Save(const ResumeModel&) {}
  void checkPreconditions(const ResumeModel& model) const override {
    const bool applicable = model.live && !model.checkpoints.count(model.step);  // (RC_PRE would not short-circuit)
    RC_PRE(applicable);
  }
  void apply(ResumeModel& model) const override {
    model.checkpoints[model.step] = CheckpointModel{true, Damage::kNone};
    model.latest = model.step;
  }
  void run(const ResumeModel& model, ResumeSystem& system) const override {
    Result<TrainingRun> run = continue_run(system, model, model.step, kCheckpoints, nullptr, nullptr);
    if (!run.ok()) RC_FAIL(run.status().to_string());
    expect_state_at(*run, model.step);
  }
  void show(std::ostream& os) const override { os << "Save"; }
};

struct SaveOnAFullDisk : ResumeCommand {
  int rank;
  explicit SaveOnAFullDisk(const ResumeModel& model) : rank(*rc::gen::inRange(0, model.world_size)) {}
  void checkPreconditions(const ResumeModel& model) const override {
    const bool applicable = model.live && !model.checkpoints.count(model.step) && rank < model.world_size;  // (RC_PRE would not short-circuit)
    RC_PRE(applicable);
  }
  void apply(ResumeModel& model) const override {
    // The tag directory is left incomplete; `latest` stays.
    model.checkpoints[model.step] = CheckpointModel{false, Damage::kNone};
  }
  void run(const ResumeModel& model, ResumeSystem& system) const override {
    FaultRule full;
    full.path_pattern = kCheckpoints + "/" + checkpoint_tag_for_step(model.step) + "/" + shard_file_name(rank, model.world_size);
    full.operation = FaultOperation::kWrite;
    full.kind = FaultKind::kNoSpace;
    FaultyDisk disk(system.disk, {full});
    Result<TrainingRun> run = continue_run(system, model, model.step, kCheckpoints, &disk, nullptr);
    RC_ASSERT(!run.ok());
    RC_ASSERT(run.status().code() == StatusCode::kResourceExhausted);
    if (run.status().message().find(shard_file_name(rank, model.world_size)) == std::string::npos) {
      RC_FAIL("the ENOSPC error does not name the shard: " + run.status().to_string());
    }
  }
  void show(std::ostream& os) const override { os << "SaveOnAFullDisk(rank " << rank << ")"; }
};

struct CrashInASave : ResumeCommand {
  std::string site;
  int rank;
  explicit CrashInASave(const ResumeModel& model)
      : site(*rc::gen::element<std::string>("ckpt.save_begin", "ckpt.tag_prepared", "ckpt.shard_written",
                                            "ckpt.manifest_written", "ckpt.latest_published", "ckpt.save_end")),
        rank(*rc::gen::inRange(0, model.world_size)) {}
  bool rank_zero_site() const {
    return site == "ckpt.tag_prepared" || site == "ckpt.manifest_written" || site == "ckpt.latest_published";
  }
  void checkPreconditions(const ResumeModel& model) const override {
    const bool applicable = model.live && !model.checkpoints.count(model.step) && rank < model.world_size && (!rank_zero_site() || rank == 0);  // (RC_PRE would not short-circuit)
    RC_PRE(applicable);
  }
  void apply(ResumeModel& model) const override {
    model.live = false;
    const bool complete = site == "ckpt.manifest_written" || site == "ckpt.latest_published" || site == "ckpt.save_end";
    model.checkpoints[model.step] = CheckpointModel{complete, Damage::kNone};
    if (site == "ckpt.latest_published" || site == "ckpt.save_end") model.latest = model.step;
  }
  void run(const ResumeModel& model, ResumeSystem& system) const override {
    ScriptedCrashPoints crash(CrashPoint{site, rank, 1}, &system.disk);
    Result<TrainingRun> run = continue_run(system, model, model.step, kCheckpoints, nullptr, &crash);
    RC_ASSERT(!run.ok());
    RC_ASSERT(crash.fired());
    system.disk.crash_with_seed(system.crash_seed++);
  }
  void show(std::ostream& os) const override { os << "CrashInASave(" << site << "@rank" << rank << ")"; }
};

struct PowerLoss : ResumeCommand {
  explicit PowerLoss(const ResumeModel&) {}
  void checkPreconditions(const ResumeModel& model) const override { RC_PRE(model.live); }
  void apply(ResumeModel& model) const override { model.live = false; }
  void run(const ResumeModel&, ResumeSystem& system) const override { system.disk.crash_with_seed(system.crash_seed++); }
  void show(std::ostream& os) const override { os << "PowerLoss"; }
};

struct Resume : ResumeCommand {
  int world_size;
  explicit Resume(const ResumeModel&) : world_size(*rc::gen::element(1, 2, 4)) {}
  void checkPreconditions(const ResumeModel& model) const override { RC_PRE(!model.live); }
  void apply(ResumeModel& model) const override {
    const auto outcome = model.resume_outcome();
    if (!std::holds_alternative<int64_t>(outcome)) return;  // refused: still no process
    model.live = true;
    model.step = std::get<int64_t>(outcome);
    model.world_size = world_size;
  }
  void run(const ResumeModel& model, ResumeSystem& system) const override {
    RC_ASSERT(system.disk.remove_tree(kLive).ok());
    CheckpointPlan plan;
    plan.resume_directory = kCheckpoints;
    plan.save_directory = kLive;
    const auto outcome = model.resume_outcome();
    const int64_t expected = std::holds_alternative<int64_t>(outcome) ? std::get<int64_t>(outcome) : kMaxSteps;
    Env env{&system.disk, system.clock.get(), &system.no_crash, nullptr};
    Result<TrainingRun> run = run_training(options_at(world_size), expected, env, plan);
    if (std::holds_alternative<StatusCode>(outcome)) {
      if (run.ok()) RC_FAIL("the resume was expected to be refused, it loaded a checkpoint");
      if (run.status().code() != std::get<StatusCode>(outcome)) RC_FAIL("unexpected refusal: " + run.status().to_string());
      if (std::get<StatusCode>(outcome) == StatusCode::kDataLoss &&
          run.status().message().find(".safetensors") == std::string::npos) {
        RC_FAIL("the corruption error does not name the shard: " + run.status().to_string());
      }
      return;
    }
    if (!run.ok()) RC_FAIL("expected a resume from step " + std::to_string(expected) + ": " + run.status().to_string());
    RC_ASSERT(run->steps.empty());  // it loaded the step it was expected to load, not an earlier one
    expect_state_at(*run, expected);
  }
  void show(std::ostream& os) const override { os << "Resume(W=" << world_size << ")"; }
};

struct CorruptNewest : ResumeCommand {
  Damage damage;
  explicit CorruptNewest(const ResumeModel&) : damage(*rc::gen::element(Damage::kFlippedBit, Damage::kTruncated)) {}
  void checkPreconditions(const ResumeModel& model) const override {
    const bool applicable = model.latest.has_value() && model.checkpoints.at(*model.latest).damage == Damage::kNone;  // (RC_PRE would not short-circuit)
    RC_PRE(applicable);
  }
  void apply(ResumeModel& model) const override { model.checkpoints[*model.latest].damage = damage; }
  void run(const ResumeModel& model, ResumeSystem& system) const override {
    // Rank 0's shard of the tag `latest` names (any world size wrote a rank 0).
    const std::string directory = kCheckpoints + "/" + checkpoint_tag_for_step(*model.latest);
    Result<CheckpointManifest> manifest = read_manifest(system.disk, directory);
    RC_ASSERT(manifest.ok());
    const std::string path = directory + "/" + shard_file_name(0, manifest->world_size);
    Result<std::vector<std::byte>> bytes = read_whole_file(system.disk, path);
    RC_ASSERT(bytes.ok());
    std::vector<std::byte> damaged = *bytes;
    if (damage == Damage::kFlippedBit) {
      damaged[damaged.size() - 9] ^= std::byte{0x10};  // in the last tensor's data
    } else {
      damaged.resize(damaged.size() / 2);
    }
    RC_ASSERT(write_whole_file(system.disk, path, damaged, /*sync=*/true).ok());
  }
  void show(std::ostream& os) const override {
    os << "CorruptNewest(" << (damage == Damage::kFlippedBit ? "flipped bit" : "truncated") << ")";
  }
};

RC_GTEST_PROP(ResumeModel, EveryHistoryOfSavesCrashesAndResumesFollowsTheReference, ()) {
  RC_ASSERT(reference_digests().size() == static_cast<size_t>(kMaxSteps) + 1);
  ResumeModel initial;
  ResumeSystem system;
  // The process starts: its continuation holds step 0.
  {
    CheckpointPlan plan;
    plan.save_directory = kLive;
    Env env{&system.disk, system.clock.get(), &system.no_crash, nullptr};
    Result<TrainingRun> start = run_training(options_at(2), 0, env, plan);
    RC_ASSERT(start.ok());
  }
  const auto commands = *rc::gen::scale(
      0.5, rc::state::gen::commands(initial, rc::state::gen::execOneOfWithArgs<Train, Train, Save, Save, SaveOnAFullDisk,
                                                                                 CrashInASave, PowerLoss, Resume, Resume,
                                                                                 CorruptNewest>()));
  RC_TAG(commands.size() / 10 * 10);
  rc::state::runAll(commands, initial, system);
}

}  // namespace
}  // namespace zerosim
