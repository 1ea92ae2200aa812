#include "scenarios/scenario_runner.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <deque>
#include <mutex>
#include <utility>

#include "core/checkpoint/commit.h"
#include "core/checkpoint/manifest.h"
#include "core/config/ds_config.h"
#include "scenarios/scenario_file.h"

namespace zerosim {

namespace {

// Whether any tag directory under `checkpoint_directory` holds a manifest: an independent look
// at the disk, so that a loader that wrongly finds nothing complete cannot pass as a fresh start.
Result<bool> any_manifest_under(Disk& disk, const std::string& checkpoint_directory) {
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(checkpoint_directory));
  if (!exists) return false;
  ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> names, disk.list_directory(checkpoint_directory));
  for (const std::string& name : names) {
    ZEROSIM_ASSIGN_OR_RETURN(bool has_manifest, disk.exists(checkpoint_directory + "/" + name + "/" + kManifestFileName));
    if (has_manifest) return true;
  }
  return false;
}

using nlohmann::json;

// The NVMe swap directories of a run's config (what an operator deletes).
std::vector<std::string> swap_directories_of(const TrainingOptions& options) {
  std::vector<std::string> directories;
  for (const OffloadConfig* offload : {&options.config.zero.offload_optimizer, &options.config.zero.offload_param}) {
    if (!offload->nvme_path.empty()) directories.push_back(offload->nvme_path);
  }
  return directories;
}

// Counts each rank's completed steps in the first phase (for the report's crash marker), then
// passes every hit on. Only a count that does not depend on thread timing is reported: the
// crashing rank's own (its hits before its crash are fixed), or with no crash point the
// smallest (ranks stop together at a collective).
// It also keeps the durability record: the step of each save rank 0 began, and which of them
// returned (rank 0 published its `latest`; saves commit in order, async ones too), and it
// delivers a scenario's SIGTERM at rank 0's end of the chosen step.
class StepCountingHook final : public CrashPointHook {
 public:
  StepCountingHook(CrashPointHook& inner, int world_size, std::optional<int64_t> sigterm_at_step,
                   std::atomic<bool>* stop_requested)
      : inner_(inner), steps_(static_cast<size_t>(world_size)), sigterm_at_step_(sigterm_at_step),
        stop_requested_(stop_requested) {}
  void hit(std::string_view site, int rank) override {
    if (site == "engine.step_end") {
      const int64_t steps = steps_[static_cast<size_t>(rank)].fetch_add(1) + 1;
      if (rank == 0 && sigterm_at_step_ && steps == *sigterm_at_step_) stop_requested_->store(true);
    }
    if (rank == 0 && site == "ckpt.save_begin") {
      std::lock_guard lock(mutex_);
      saves_begun_.push_back(steps_[0].load());
    } else if (rank == 0 && site == "ckpt.latest_published") {
      std::lock_guard lock(mutex_);
      if (!saves_begun_.empty()) {
        committed_steps_.push_back(saves_begun_.front());
        saves_begun_.pop_front();
      }
    }
    inner_.hit(site, rank);
  }
  int64_t steps_of(int rank) const { return steps_[static_cast<size_t>(rank)].load(); }
  int64_t fewest_steps() const {
    int64_t fewest = INT64_MAX;
    for (const std::atomic<int64_t>& steps : steps_) fewest = std::min(fewest, steps.load());
    return fewest;
  }
  // The steps of the saves that returned, in order.
  std::vector<int64_t> committed_steps() const {
    std::lock_guard lock(mutex_);
    return committed_steps_;
  }

 private:
  CrashPointHook& inner_;
  std::vector<std::atomic<int64_t>> steps_;
  std::optional<int64_t> sigterm_at_step_;
  std::atomic<bool>* stop_requested_;
  mutable std::mutex mutex_;
  std::deque<int64_t> saves_begun_;
  std::vector<int64_t> committed_steps_;
};

}  // namespace

Result<ScenarioVerdict> run_scenario(const Scenario& scenario, const DefectSet& extra_defects, ReferenceCache* cache) {
  const CrashScenario& run = scenario.run;
  DefectSet defects = run.defects;
  for (const DefectInfo& info : all_defects()) {
    if (extra_defects.has(info.defect)) defects.enable(info.defect);
  }
  TrainingOptions options = run.options;
  options.digest_every_step = true;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingOptions resume_options, restart_options(scenario, scenario.name));
  if (scenario.resume_settings) {
    resume_options.model = scenario.resume_settings->model;
    resume_options.data = scenario.resume_settings->data;
    resume_options.seed = scenario.resume_settings->seed;
    resume_options.frozen_parameters = scenario.resume_settings->frozen_parameters;
  }
  ScenarioVerdict verdict;
  verdict.name = scenario.name;
  verdict.description = scenario.description;
  verdict.seed = run.seed;

  // The reference: no faults, no defects. It runs after the resume, whose start it may save (a
  // clean checkpoint for the elastic continuation below) as it passes.
  NoCrashPoints no_crash;
  auto run_reference = [&](const TrainingOptions& reference_options, SimDisk* checkpoint_disk = nullptr,
                           int64_t save_step = -1) -> Result<TrainingRun> {
    SimDisk scratch_disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
    SimDisk& reference_disk = checkpoint_disk != nullptr ? *checkpoint_disk : scratch_disk;
    SimWorld reference_world(reference_disk, reference_options.world_size, FaultPlan{}, no_crash);
    CheckpointPlan saving_one;
    if (checkpoint_disk != nullptr) {
      saving_one.save_directory = run.checkpoint_directory;
      saving_one.save_at_steps = {save_step};
      saving_one.save_at_end = false;
      saving_one.save_options = run.save_options;
    }
    return run_training(reference_options, run.total_steps, reference_world.seams(), saving_one);
  };
  std::optional<TrainingRun> reference_run;
  bool reference_saved = false;  // the reference ran, with a checkpoint disk (a cache hit does not run it)
  // The reference, run once; with a checkpoint disk, it saves save_step there.
  auto reference = [&](SimDisk* checkpoint_disk = nullptr, int64_t save_step = -1) -> Status {
    ZEROSIM_CHECK(!reference_run, "the reference runs once");
    auto compute = [&]() -> Result<TrainingRun> {
      reference_saved = checkpoint_disk != nullptr;
      return run_reference(options, checkpoint_disk, save_step);
    };
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun computed,
                             cache != nullptr ? cache->get_or_run(options, run.total_steps, compute) : compute());
    reference_run = std::move(computed);
    for (const StepRecord& step : reference_run->steps) verdict.reference_losses.push_back(step.loss);
    return Status();
  };
  // A verdict that ends before the comparison still shows the reference's loss curve.
  auto verdict_before_comparison = [&]() -> Result<ScenarioVerdict> {
    ZEROSIM_RETURN_IF_ERROR(reference());
    return verdict;
  };

  // The faulted first phase: saves, the plan's faults, its crash (or a kill after the last save).
  SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
  CheckpointPlan saving;
  saving.save_directory = run.checkpoint_directory;
  saving.save_every_steps = run.save_every_steps;
  saving.save_options = run.save_options;
  if (scenario.save_at_start) saving.save_at_steps = {0};
  // The first phase runs as `zerosim train` does: with a stop handler installed (set only by a
  // scenario's SIGTERM), and saving on the signal.
  std::atomic<bool> sigterm{false};
  saving.stop_requested = &sigterm;
  saving.save_on_stop = true;
  bool storage_lied = false;  // a lost, misdirected or torn write fired: acknowledged, not persisted
  {
    std::unique_ptr<CrashPointHook> hook;
    VirtualTimeCrash* timed = nullptr;
    ScriptedCrashPoints* scripted = nullptr;
    if (scenario.fault_plan.crash_point) {
      auto owned = std::make_unique<ScriptedCrashPoints>(*scenario.fault_plan.crash_point, &disk);
      scripted = owned.get();
      hook = std::move(owned);
      verdict.crash = "crash at " + scenario.fault_plan.crash_point->describe();
    } else if (scenario.fault_plan.crash_at_virtual_time_us) {
      auto owned = std::make_unique<VirtualTimeCrash>(*scenario.fault_plan.crash_at_virtual_time_us, disk);
      timed = owned.get();
      hook = std::move(owned);
      verdict.crash = "crash at virtual time " + std::to_string(*scenario.fault_plan.crash_at_virtual_time_us) + " us";
    } else {
      hook = std::make_unique<NoCrashPoints>();
      verdict.crash = "killed after step " + std::to_string(run.explored_save_step);
    }
    StepCountingHook counting(*hook, options.world_size, scenario.sigterm_at_step, &sigterm);
    SimWorld world(disk, options.world_size, scenario.fault_plan, counting, &defects);
    if (timed != nullptr) timed->attach(world);
    // Nothing compares the first phase's states (the resume is what is judged): no digests.
    TrainingOptions first_options = options;
    first_options.digest_every_step = false;
    const Result<TrainingRun> first = run_training(first_options, run.explored_save_step, world.seams(), saving);
    const std::string power_lost_at = world.faulty_disk().power_loss_at();
    const bool plans_power_loss =
        std::any_of(scenario.fault_plan.disk_faults.begin(), scenario.fault_plan.disk_faults.end(),
                    [](const FaultRule& rule) { return rule.kind == FaultKind::kPowerLoss; });
    if (!power_lost_at.empty()) {
      verdict.crash = "power lost during " + power_lost_at;
    } else if (first.ok() && first->stopped_early) {
      verdict.crash = "SIGTERM in step " + std::to_string(*scenario.sigterm_at_step) + ", saved on the signal and exited";
    } else if (!first.ok() && verdict.crash.rfind("killed", 0) == 0) {
      verdict.crash = "stopped by " + first.status().to_string();
    }
    verdict.steps_before_crash = scenario.fault_plan.crash_point ? counting.steps_of(scenario.fault_plan.crash_point->rank)
                                                                 : counting.fewest_steps();
    verdict.committed_steps = counting.committed_steps();
    verdict.committed_step = verdict.committed_steps.empty() ? -1 : verdict.committed_steps.back();
    const std::vector<int64_t> fired = world.faulty_disk().fired_counts();
    for (size_t i = 0; i < fired.size(); ++i) {
      const FaultKind kind = scenario.fault_plan.disk_faults[i].kind;
      if (fired[i] > 0 && (kind == FaultKind::kLostWrite || kind == FaultKind::kMisdirectedWrite || kind == FaultKind::kTornWrite)) {
        storage_lied = true;
      }
    }
    // Each rule's counts, for the report; a rule that never fired tested nothing (checked below).
    const std::vector<int64_t> matched = world.faulty_disk().matched_counts();
    std::string never_fired;
    for (size_t i = 0; i < fired.size(); ++i) {
      const FaultRule& rule = scenario.fault_plan.disk_faults[i];
      const std::string named = "fault rule " + std::to_string(i + 1) + " (" + rule.path_pattern + ", " +
                                fault_operation_name(rule.operation) + ", occurrence " +
                                (rule.occurrence == 0 ? std::string("every") : std::to_string(rule.occurrence)) +
                                (rule.rank >= 0 ? ", rank " + std::to_string(rule.rank) : "") + ", " +
                                fault_kind_name(rule.kind) + ")";
      verdict.fault_rule_counts.push_back(named + ": matched " + std::to_string(matched[i]) + " time" +
                                          (matched[i] == 1 ? "" : "s") + ", fired " + std::to_string(fired[i]));
      if (fired[i] == 0 && never_fired.empty()) {
        verdict.unfired_fault_rule = static_cast<int64_t>(i);
        verdict.unfired_fault_rule_matched = matched[i];
        never_fired = named + " never fired (it matched " + std::to_string(matched[i]) + " operation" +
                      (matched[i] == 1 ? "" : "s") +
                      (rule.after_path_pattern.empty() ? "" : " after its " + std::string(fault_operation_name(rule.after_operation)) +
                                                                 " of " + rule.after_path_pattern) +
                      ")";
      }
    }
    if (plans_power_loss && power_lost_at.empty()) {
      verdict.outcome = "the first phase " + (first.ok() ? std::string("ended") : "stopped by " + first.status().to_string()) +
                        " without reaching the power_loss fault of its plan";
      verdict.diagnosis = "the power_loss disk fault never fired (its occurrence is past the first phase's operations?)";
      verdict.fault_never_happened = true;
      return verdict_before_comparison();
    }
    if (scenario.sigterm_at_step && !(first.ok() && first->stopped_early)) {
      verdict.outcome = "the first phase " + (first.ok() ? std::string("ended") : "stopped by " + first.status().to_string()) +
                        " without stopping on the SIGTERM of step " + std::to_string(*scenario.sigterm_at_step);
      verdict.diagnosis = "the run did not stop on SIGTERM (--save-on-signal) in step " +
                          std::to_string(*scenario.sigterm_at_step);
      verdict.fault_never_happened = true;
      return verdict_before_comparison();
    }
    if (scripted != nullptr && !scripted->fired()) {
      // A crash the plan asked for and the run never reached: nothing was tested.
      verdict.outcome = "the first phase " + (first.ok() ? std::string("ended") : "stopped by " + first.status().to_string()) +
                        " without reaching the crash point " + scenario.fault_plan.crash_point->describe();
      verdict.diagnosis = "the crash point " + scenario.fault_plan.crash_point->describe() +
                          " was never reached (its occurrence is past the first phase's " +
                          std::to_string(run.explored_save_step) + " steps?)";
      verdict.fault_never_happened = true;
      return verdict_before_comparison();
    }
    if (!never_fired.empty()) {
      verdict.outcome = "the first phase " + (first.ok() ? std::string("ended") : "stopped by " + first.status().to_string()) +
                        " without firing every fault of its plan";
      verdict.diagnosis = never_fired;
      verdict.fault_never_happened = true;
      return verdict_before_comparison();
    }
    if (timed != nullptr && !timed->fired()) {
      verdict.outcome = "the first phase " + (first.ok() ? std::string("ended") : "stopped by " + first.status().to_string()) +
                        " before the virtual time of its crash";
      verdict.diagnosis = "the crash at virtual time " + std::to_string(*scenario.fault_plan.crash_at_virtual_time_us) +
                          " us never happened (the first phase ended at an earlier time?)";
      verdict.fault_never_happened = true;
      return verdict_before_comparison();
    }
  }
  if (scenario.power_loss) {
    disk.crash_with_seed(run.seed);  // the power goes out
    verdict.crash += ", then a power loss";
  } else {
    verdict.crash += ", the process gone (the machine stays up: written data survives)";
  }

  for (OperatorAction action : scenario.operator_actions) {
    ZEROSIM_RETURN_IF_ERROR(apply_operator_action(action, swap_directories_of(options), run.checkpoint_directory, disk));
  }
  std::vector<AppliedDamage> damaged;
  for (const AtRestDamage& damage : scenario.damage) {
    ZEROSIM_ASSIGN_OR_RETURN(AppliedDamage applied, apply_damage(damage, options.world_size, run.checkpoint_directory, disk));
    verdict.damage += (verdict.damage.empty() ? "" : "; ") + applied.describe;
    if (applied.applied) damaged.push_back(std::move(applied));
  }
  if (!verdict.damage.empty()) verdict.crash += ", then at-rest damage: " + verdict.damage;
  // What the restart finds: the complete tags and `latest`, against the expectation.
  std::string checkpoint_finding;
  if (scenario.expect_checkpoint_tags || scenario.expect_latest) {
    Result<std::vector<std::string>> listed = list_complete_tags(disk, run.checkpoint_directory);
    if (!listed.ok() && listed.status().code() != StatusCode::kNotFound) return listed.status();
    const std::vector<std::string> tags = listed.ok() ? *listed : std::vector<std::string>{};
    Result<std::string> latest = read_latest_tag(disk, run.checkpoint_directory);
    const std::string latest_tag = latest.ok() ? *latest : "";
    auto joined = [](const std::vector<std::string>& names) {
      std::string text;
      for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
      return "[" + text + "]";
    };
    if (scenario.expect_checkpoint_tags && tags != *scenario.expect_checkpoint_tags) {
      checkpoint_finding = "after the first phase the complete tags are " + joined(tags) + ", expected " +
                           joined(*scenario.expect_checkpoint_tags);
    } else if (scenario.expect_latest && latest_tag != *scenario.expect_latest) {
      checkpoint_finding = "after the first phase `latest` names " + (latest_tag.empty() ? std::string("nothing") : latest_tag) +
                           ", expected " + (scenario.expect_latest->empty() ? std::string("none") : *scenario.expect_latest);
    }
  }
  // A checkpoint that is not what the scenario expects fails it, whatever the resume did.
  auto with_checkpoint_finding = [&](ScenarioVerdict& judged) {
    if (checkpoint_finding.empty()) return;
    judged.passed = false;
    judged.diagnosis = checkpoint_finding + (judged.diagnosis.empty() ? "" : "; " + judged.diagnosis);
  };

  // A restart's checkpoint plan: load `tag` with `load`, and save every `save_every` steps (0: not).
  auto restart_plan = [&](const std::string& tag, const CheckpointLoadOptions& load, int64_t save_every) {
    CheckpointPlan plan;
    plan.resume_directory = run.checkpoint_directory;
    plan.resume_tag = tag;
    plan.resume_load = load;
    if (save_every > 0) {
      plan.save_directory = run.checkpoint_directory;
      plan.save_every_steps = save_every;
      plan.save_options = run.save_options;
    }
    return plan;
  };
  // The judged restart: config and durable disk only. After a chain of restarts, from `latest`.
  auto resume = [&](SimDisk& resume_disk, const TrainingOptions& options_of_resume) -> Result<TrainingRun> {
    SimWorld resume_world(resume_disk, options_of_resume.world_size, FaultPlan{}, no_crash, &defects);
    const CheckpointPlan resuming = restart_plan(scenario.restart_chain.empty() ? scenario.resume_tag : std::string("latest"),
                                                 scenario.resume_load, scenario.resume_save_every);
    return run_training(options_of_resume, run.total_steps, resume_world.seams(), resuming);
  };
  // The loads the expected run models, in order (CheckpointPlan::modelled_loads), built as the
  // restarts run: which checkpoint each loaded, with what, into which frozen set. `savers`
  // holds the frozen set of each run whose saves a later load may find (the first phase's first).
  std::vector<CheckpointPlan::ModelledLoad> modelled_loads;
  std::vector<std::vector<std::string>> savers = {options.frozen_parameters};
  std::vector<bool> saved_anything;  // per modelled load: its run committed a save of its own
  auto model_load = [&](int64_t loaded_step, const CheckpointLoadOptions& load, const std::vector<std::string>& frozen,
                        bool saved) {
    // A restart that committed nothing left the checkpoint it loaded to the next one: its load
    // is replaced by the next's (which loads that same checkpoint).
    if (!saved_anything.empty() && !saved_anything.back()) {
      modelled_loads.pop_back();
      savers.pop_back();
      saved_anything.pop_back();
    }
    CheckpointPlan::ModelledLoad modelled;
    modelled.after_step = loaded_step;
    modelled.options = load;
    modelled.frozen_now = frozen;
    if (run.save_options.exclude_frozen_parameters) modelled.excluded_from_save = savers.back();
    modelled_loads.push_back(std::move(modelled));
    savers.push_back(frozen);
    saved_anything.push_back(saved);
  };
  // A chain of resumes: restarts that save, each killed by a power loss after a step; the
  // last restart (below) is the one judged, from what they left.
  std::vector<std::string> frozen_before = options.frozen_parameters;
  for (size_t i = 0; i < scenario.restart_chain.size(); ++i) {
    const Scenario::ChainedRestart& chained = scenario.restart_chain[i];
    SimWorld chained_world(disk, resume_options.world_size, FaultPlan{}, no_crash, &defects);
    CheckpointPlan plan = restart_plan(i == 0 ? scenario.resume_tag : std::string("latest"), chained.load, chained.save_every);
    plan.save_at_end = false;  // it is killed after that step, not ended
    TrainingOptions chained_options = resume_options;
    chained_options.digest_every_step = false;
    chained_options.frozen_parameters = chained.frozen_parameters ? *chained.frozen_parameters : frozen_before;
    const Result<TrainingRun> restarted = run_training(chained_options, chained.killed_after_step, chained_world.seams(), plan);
    const std::string ordinal = scenario.restart_chain.size() == 1 ? "the first restart" : "restart " + std::to_string(i + 1);
    if (!restarted.ok()) {
      verdict.outcome = ordinal + " of the chain failed: " + restarted.status().to_string();
      verdict.diagnosis = verdict.outcome;
      return verdict_before_comparison();
    }
    disk.crash_with_seed(run.seed + 1 + i);
    // A resumed run counts its loaded step as saved (it saves into the directory it loaded from).
    const int64_t started_at = chained.load.module_only ? 0 : restarted->loaded_checkpoint_step;
    const bool saved = restarted->last_saved_step >= 0 && restarted->last_saved_step != started_at;
    verdict.crash += ", then a restart (loaded " + checkpoint_tag_for_step(restarted->loaded_checkpoint_step) +
                     (chained.load.describe().empty() ? "" : " with " + chained.load.describe()) + ") that saved " +
                     (saved ? "up to step " + std::to_string(restarted->last_saved_step) : std::string("nothing")) +
                     ", killed after step " + std::to_string(chained.killed_after_step) + " by a power loss";
    if (saved) {
      verdict.committed_steps.push_back(restarted->last_saved_step);
      verdict.committed_step = restarted->last_saved_step;
    }
    model_load(restarted->loaded_checkpoint_step, chained.load, chained_options.frozen_parameters, saved);
    frozen_before = chained_options.frozen_parameters;
  }
  // The judged restart keeps the chain's last frozen set unless the scenario changes it.
  if (!scenario.restart_chain.empty() && !scenario.resume_changes_frozen) resume_options.frozen_parameters = frozen_before;
  // The disk as the (judged) restart finds it, kept for a second resume that captures the full state.
  const std::unique_ptr<SimDisk> restart_disk = disk.clone();
  const Result<TrainingRun> resumed = resume(disk, resume_options);
  // A crash before any save returned leaves no checkpoint: with "no_checkpoint" the scenario
  // defines the outcome (a fresh start, as a training script that finds nothing to resume does,
  // or the refusal). Not when a save had returned (losing it is lost work), and not when any
  // manifest reached the disk: the loader's own "nothing complete" is not taken on trust.
  if (!resumed.ok() && !scenario.expect_no_checkpoint.empty() && verdict.committed_step < 0 &&
      resumed.status().code() == StatusCode::kNotFound &&
      resumed.status().message().find("no complete checkpoint") != std::string::npos) {
    ZEROSIM_ASSIGN_OR_RETURN(const bool manifest_on_disk, any_manifest_under(*restart_disk, run.checkpoint_directory));
    if (!manifest_on_disk) {
      if (scenario.expect_no_checkpoint == "refusal") {
        verdict.outcome = "refused as expected (no save returned before the crash): " + resumed.status().to_string();
        verdict.passed = true;
        return verdict_before_comparison();
      }
      // The fresh start, judged against the same fresh run on a clean disk without defects.
      SimWorld fresh_world(disk, resume_options.world_size, FaultPlan{}, no_crash, &defects);
      CheckpointPlan fresh = restart_plan(scenario.resume_tag, scenario.resume_load, scenario.resume_save_every);
      fresh.resume_directory.clear();
      const Result<TrainingRun> restarted = run_training(resume_options, run.total_steps, fresh_world.seams(), fresh);
      SimDisk clean_disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
      SimWorld clean_world(clean_disk, resume_options.world_size, FaultPlan{}, no_crash);
      ZEROSIM_ASSIGN_OR_RETURN(TrainingRun expected, run_training(resume_options, run.total_steps, clean_world.seams()));
      if (!restarted.ok()) {
        verdict.outcome = "no complete checkpoint (no save returned before the crash); the fresh start failed: " +
                          restarted.status().to_string();
        verdict.diagnosis = verdict.outcome;
        return verdict_before_comparison();
      }
      verdict.notes = restarted->notes;
      verdict.resumed_at = 0;
      for (const StepRecord& step : restarted->steps) verdict.resumed_losses.push_back(step.loss);
      const std::string differing = first_differing_component(expected.digests, restarted->digests);
      verdict.passed = differing.empty();
      verdict.outcome = "no complete checkpoint (no save returned before the crash): started fresh, " +
                        (differing.empty() ? "bit-identical to the same fresh run at step " + std::to_string(run.total_steps)
                                           : "diverged from the same fresh run: " + differing);
      verdict.diagnosis = differing.empty() ? "" : "the fresh start diverged from the same fresh run: " + differing;
      return verdict_before_comparison();
    }
  }
  if (!resumed.ok()) {
    verdict.outcome = "refused: " + resumed.status().to_string();
    verdict.passed = !scenario.expect_error.empty() &&
                     resumed.status().message().find(scenario.expect_error) != std::string::npos;
    // Damage at rest may be refused, by a message that names the damaged file.
    const std::string* named = nullptr;
    for (const AppliedDamage& damage : damaged) {
      if (resumed.status().message().find(damage.path) != std::string::npos) named = &damage.path;
    }
    if (!verdict.passed && scenario.expect_error.empty() && named != nullptr) {
      verdict.passed = true;
      verdict.outcome += " (names the damaged file " + *named + ")";
    }
    // Storage that acknowledged a write it did not persist damaged a checkpoint: a refusal as
    // damage (kDataLoss) naming a file of that checkpoint is right.
    const std::string committed_directory =
        run.checkpoint_directory + "/" + checkpoint_tag_for_step(verdict.committed_step) + "/";
    if (!verdict.passed && scenario.expect_error.empty() && storage_lied && verdict.committed_step >= 0 &&
        (resumed.status().code() == StatusCode::kDataLoss || resumed.status().code() == StatusCode::kNotFound) &&
        resumed.status().message().find(committed_directory) != std::string::npos) {
      verdict.passed = true;
      verdict.outcome += " (names a file of " + committed_directory + ", which a lying write damaged)";
    }
    verdict.diagnosis = verdict.passed ? ""
                        : "the resume failed: " + resumed.status().to_string() +
                              (damaged.empty() ? "" : " (without naming the damaged file " + damaged.front().path + ")");
    with_checkpoint_finding(verdict);
    return verdict_before_comparison();
  }
  verdict.notes = resumed->notes;
  verdict.resumed_at = run.total_steps - static_cast<int64_t>(resumed->steps.size());
  // The checkpoint's step (a module-only load starts the run at step 0 from it).
  const int64_t loaded_step = resumed->loaded_checkpoint_step;
  for (const StepRecord& step : resumed->steps) verdict.resumed_losses.push_back(step.loss);
  model_load(loaded_step, scenario.resume_load, resume_options.frozen_parameters, true);
  // The expected run is modelled when a load of the chain changes a state (load options) or the
  // frozen set; otherwise it is the uninterrupted run.
  bool load_options = false;
  std::string modelled_description;
  {
    std::vector<std::string> frozen = options.frozen_parameters;
    for (const CheckpointPlan::ModelledLoad& load : modelled_loads) {
      const bool changes_frozen = load.frozen_now && *load.frozen_now != frozen;
      if (load.options.changes_state() || changes_frozen) load_options = true;
      modelled_description += (modelled_description.empty() ? "" : ", then ") + checkpoint_tag_for_step(load.after_step) +
                              (load.options.describe().empty() ? "" : " with " + load.options.describe()) +
                              (changes_frozen ? " into another frozen set" : "");
      if (load.frozen_now) frozen = *load.frozen_now;
    }
  }

  // The "deepspeed" numerics depend on W (ds_config.h NumericsMode), so a resume at another
  // world size cannot follow the uninterrupted run at W. What it must follow: up to the load,
  // the run at W (the state right after the load is compared with it, strictly); after it,
  // the W' continuation of a clean checkpoint of that run, saved at the same step and loaded
  // without faults or defects. Both comparisons are bit for bit.
  const bool elastic_deepspeed =
      options.config.numerics == NumericsMode::kDeepSpeed && resume_options.world_size != options.world_size;
  if (elastic_deepspeed && load_options) {
    return invalid_argument(scenario.name + ": loads that change the state (" + modelled_description +
                            ") with \"deepspeed\" numerics and another world size for the restart: no model of "
                            "that resume yet; keep the world size or use the default numerics");
  }
  // With load options or another frozen set, the expected run: the reference up to the first
  // loaded step, changed there as that load changes the state (RankEngine::reset_as_loaded:
  // never through a file), on to the next load of the chain, and so on; after a module-only
  // load the model counts its steps from 0 again.
  auto modelled_run = [&](int64_t capture_step) -> Result<TrainingRun> {
    SimDisk scratch_disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
    SimWorld world(scratch_disk, options.world_size, FaultPlan{}, no_crash);
    CheckpointPlan modelling;
    modelling.modelled_loads = modelled_loads;
    TrainingOptions modelled_options = options;
    modelled_options.capture_state_at_step = capture_step;
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun modelled, run_training(modelled_options, run.total_steps, world.seams(), modelling));
    if (modelled.modelled_load_step_indices.size() != modelled_loads.size()) {
      // A load of an older step than the one before it reached: no run that keeps going forward
      // passes through it (a restart fell back past its predecessor's saves).
      return failed_precondition("the loads of the chain (" + modelled_description + ") are not in step order: the "
                                 "model reached " + std::to_string(modelled.modelled_load_step_indices.size()) +
                                 " of them");
    }
    // After a module-only load the count starts again: the steps after the last such load.
    for (size_t i = modelled_loads.size(); i-- > 0;) {
      if (!modelled_loads[i].options.module_only) continue;
      keep_steps_after(modelled, static_cast<int64_t>(modelled.modelled_load_step_indices[i]));
      break;
    }
    return modelled;
  };
  std::optional<TrainingRun> load_options_expected;
  if (load_options) {
    Result<TrainingRun> modelled = modelled_run(-1);
    if (!modelled.ok() && modelled.status().code() == StatusCode::kFailedPrecondition) {
      verdict.outcome = "resumed at step " + std::to_string(verdict.resumed_at) + ", not comparable";
      verdict.diagnosis = modelled.status().message();
      return verdict_before_comparison();
    }
    ZEROSIM_RETURN_IF_ERROR(modelled.status());
    load_options_expected = std::move(modelled).value();
  }
  auto continue_from = [&](SimDisk& clean_disk, const TrainingOptions& continuation_options) -> Result<TrainingRun> {
    SimWorld world(clean_disk, continuation_options.world_size, FaultPlan{}, no_crash);
    CheckpointPlan resuming;
    resuming.resume_directory = run.checkpoint_directory;
    return run_training(continuation_options, run.total_steps, world.seams(), resuming);
  };
  auto continuation_at = [&](int64_t save_step, const TrainingOptions& continuation_options) -> Result<TrainingRun> {
    SimDisk clean_disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
    {
      SimWorld world(clean_disk, options.world_size, FaultPlan{}, no_crash);
      CheckpointPlan saving_at_end;
      saving_at_end.save_directory = run.checkpoint_directory;
      saving_at_end.save_options = run.save_options;
      TrainingOptions saving_options = options;
      saving_options.capture_state_at_step = -1;
      ZEROSIM_RETURN_IF_ERROR(run_training(saving_options, save_step, world.seams(), saving_at_end).status());
    }
    return continue_from(clean_disk, continuation_options);
  };
  // With elastic_deepspeed, the reference saves the clean checkpoint as it passes the step
  // the resume loaded (unless a cache had the reference already: then a run to that step saves it).
  std::unique_ptr<SimDisk> clean_checkpoint_disk;
  if (elastic_deepspeed) clean_checkpoint_disk = std::make_unique<SimDisk>(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
  ZEROSIM_RETURN_IF_ERROR(reference(clean_checkpoint_disk.get(), verdict.resumed_at));
  const TrainingRun& reference_run_done = *reference_run;
  // With elastic_deepspeed, the expected run: the reference's steps up to the load, the
  // continuation's after.
  std::optional<TrainingRun> elastic_expected;
  if (elastic_deepspeed) {
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun continuation, reference_saved
                                                           ? continue_from(*clean_checkpoint_disk, resume_options)
                                                           : continuation_at(verdict.resumed_at, resume_options));
    TrainingRun& expected = elastic_expected.emplace(reference_run_done);
    const size_t kept = static_cast<size_t>(verdict.resumed_at);
    expected.steps.resize(kept);
    expected.step_digests.resize(kept);
    expected.steps.insert(expected.steps.end(), continuation.steps.begin(), continuation.steps.end());
    expected.step_digests.insert(expected.step_digests.end(), continuation.step_digests.begin(),
                                 continuation.step_digests.end());
    expected.digests = continuation.digests;
    expected.final_state = continuation.final_state;
  }
  // The expected full state at `step` (a diagnosis's input): the reference's, or after the
  // load of an elastic_deepspeed resume, the continuation's.
  auto expected_state_at = [&](int64_t step) -> Result<TrainingRun> {
    if (load_options) return modelled_run(step);
    if (elastic_deepspeed && step > verdict.resumed_at) {
      TrainingOptions capturing = resume_options;
      capturing.capture_state_at_step = step;
      return continuation_at(verdict.resumed_at, capturing);
    }
    TrainingOptions capturing = options;
    capturing.capture_state_at_step = step;
    return run_reference(capturing);
  };
  const Divergence divergence = find_first_divergence(
      load_options_expected ? *load_options_expected : elastic_expected ? *elastic_expected : reference_run_done, *resumed,
      verdict.resumed_at);
  if (divergence.found) verdict.divergence = divergence;
  verdict.outcome = "resumed at step " + std::to_string(verdict.resumed_at) +
                    (divergence.found ? ", diverged: " + divergence.describe()
                                      : ", bit-identical to step " + std::to_string(run.total_steps)) +
                    (elastic_deepspeed && !divergence.found
                         ? " (deepspeed numerics: the run at W up to the load, then the clean checkpoint's W' continuation)"
                         : "") +
                    (load_options ? " (loaded " + modelled_description +
                                        "; expected: the reference changed where each load changes it)"
                                  : "");
  // Durability: the resume starts from the newest save that returned before the crash, unless
  // the restart asked for a tag, or damage at rest took that checkpoint (and a warning says so).
  const std::string loaded_tag = checkpoint_tag_for_step(loaded_step);
  std::string damage_finding;
  bool warned_of_damage = false;
  // A lying write, or damage to the newest checkpoint or to `latest`, may cost the newest
  // checkpoint: then the resume must say that it fell back.
  const std::string committed_tag = checkpoint_tag_for_step(verdict.committed_step);
  bool newest_damaged = storage_lied;
  for (const AppliedDamage& damage : damaged) {
    if (damage.tag == loaded_tag) {
      damage_finding = "loaded the damaged checkpoint " + loaded_tag + " (" + damage.describe + ") without refusing it";
    }
    if (damage.tag.empty() || damage.tag == committed_tag) newest_damaged = true;
  }
  for (const std::string& note : resumed->notes) {
    if (newest_damaged && note.rfind("warning:", 0) == 0 && note.find("loading the newest complete tag") != std::string::npos) {
      warned_of_damage = true;
    }
  }
  const bool lost_work = scenario.resume_tag == "latest" && scenario.expect_resumed_at_step < 0 &&
                         loaded_step < verdict.committed_step && !warned_of_damage;
  // A fallback forced by damage at rest must take the newest checkpoint left: the newest tag
  // on the disk as the restart found it with a manifest (written last, after the shards were
  // durable: whether or not its save returned) that was not damaged. (A lying write leaves no
  // record of which tag it took: not checked then.)
  std::string fallback_finding;
  if (scenario.resume_tag == "latest" && scenario.expect_resumed_at_step < 0 && warned_of_damage && !storage_lied) {
    Result<std::vector<std::string>> names = restart_disk->list_directory(run.checkpoint_directory);
    int64_t newest_left = -1;
    for (const std::string& name : names.ok() ? *names : std::vector<std::string>{}) {
      const std::string prefix = "global_step";
      if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 9 ||
          name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
        continue;
      }
      const int64_t step = std::stoll(name.substr(prefix.size()));
      const bool was_damaged = std::any_of(damaged.begin(), damaged.end(), [&](const AppliedDamage& d) { return d.tag == name; });
      Result<bool> has_manifest = restart_disk->exists(run.checkpoint_directory + "/" + name + "/" + kManifestFileName);
      if (!was_damaged && has_manifest.ok() && *has_manifest) newest_left = std::max(newest_left, step);
    }
    if (newest_left >= 0 && newest_left != loaded_step) {
      fallback_finding = "fell back to " + loaded_tag + ", but " + checkpoint_tag_for_step(newest_left) +
                         " is the newest undamaged checkpoint left on the disk";
    }
  }
  // A restart that saved leaves `latest` naming a complete tag (retention must spare it).
  std::string retention_finding;
  if (scenario.resume_save_every > 0) {
    const std::string latest_path = run.checkpoint_directory + "/latest";
    Result<std::vector<std::byte>> latest = disk.visible_content(latest_path);
    std::string named = latest.ok() ? std::string(reinterpret_cast<const char*>(latest->data()), latest->size()) : "";
    while (!named.empty() && (named.back() == '\n' || named.back() == '\r')) named.pop_back();
    Result<bool> there = named.empty() ? Result<bool>(false)
                                       : disk.exists(run.checkpoint_directory + "/" + named + "/" + kManifestFileName);
    if (!there.ok() || !*there) {
      retention_finding = "after the restart's saves, " + latest_path + " names '" + named +
                          "', which is not on the disk (retention removed the tag latest names?)";
    }
  }
  if (!scenario.expect_error.empty()) {
    verdict.diagnosis = "expected a refusal containing '" + scenario.expect_error + "', but the run resumed";
  } else if (!damage_finding.empty()) {
    verdict.diagnosis = damage_finding;
  } else if (!fallback_finding.empty()) {
    verdict.diagnosis = fallback_finding;
  } else if (!retention_finding.empty()) {
    verdict.diagnosis = retention_finding;
  } else if (lost_work) {
    verdict.diagnosis = "lost work: the save of step " + std::to_string(verdict.committed_step) +
                        " returned before the crash, but the resume started at step " + std::to_string(loaded_step) +
                        (damaged.empty() ? "" : " with no warning naming the damaged tag");
  } else if (scenario.expect_resumed_at_step >= 0 && loaded_step != scenario.expect_resumed_at_step) {
    verdict.diagnosis = "expected the resume to start at step " + std::to_string(scenario.expect_resumed_at_step) +
                        " (tag " + scenario.resume_tag + "), it started at step " + std::to_string(loaded_step);
  } else if (scenario.expect_bit_identical && divergence.found) {
    verdict.diagnosis = divergence.describe();
  } else {
    verdict.passed = true;
  }
  if (divergence.found && divergence.state_step >= 0) {
    // Narrow the component down to its first element: both runs again, capturing that step.
    TrainingOptions capturing_resume = resume_options;
    capturing_resume.capture_state_at_step = divergence.state_step;
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun reference_again, expected_state_at(divergence.state_step));
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun resumed_again, resume(*restart_disk, capturing_resume));
    if (reference_again.captured && resumed_again.captured) {
      verdict.element = diagnose_component(*reference_again.captured, *resumed_again.captured, divergence.component);
      if (!verdict.passed) verdict.diagnosis += "; " + verdict.element->describe();
    }
  } else if (divergence.found && !divergence.expected_value.empty() && !verdict.passed) {
    verdict.diagnosis += ": expected " + divergence.expected_value + ", found " + divergence.actual_value +
                         (divergence.ulp_distance > 0 ? ", ulp distance " + std::to_string(divergence.ulp_distance) : "");
  }
  for (const std::string& note : resumed->notes) {
    if (note.rfind("warning:", 0) == 0 && verdict.outcome.find("(with a warning)") == std::string::npos) {
      verdict.outcome += " (with a warning)";
    }
  }
  with_checkpoint_finding(verdict);
  return verdict;
}

}  // namespace zerosim
