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

// The disk of a simulated run that is not judged for faults: the reference's, a model's.
SimDiskOptions clean_disk_options(uint64_t seed) { return SimDiskOptions{512, uint64_t{1} << 40, seed}; }

// "fault rule 2 (*/rank-0*/..., write, occurrence 3, rank 0, lost_write)".
std::string fault_rule_name(size_t index, const FaultRule& rule) {
  return "fault rule " + std::to_string(index + 1) + " (" + rule.path_pattern + ", " +
         fault_operation_name(rule.operation) + ", occurrence " +
         (rule.occurrence == 0 ? std::string("every") : std::to_string(rule.occurrence)) +
         (rule.rank >= 0 ? ", rank " + std::to_string(rule.rank) : "") + ", " + fault_kind_name(rule.kind) + ")";
}

std::string how_the_first_phase_ended(const Result<TrainingRun>& first) {
  return "the first phase " + (first.ok() ? std::string("ended") : "stopped by " + first.status().to_string());
}

// One scenario, run as a pipeline of phases that share what the earlier ones left: the faulted
// run (saves, the plan's faults, its crash), the damage (power loss, operator actions, damage
// at rest), the restart chain, the judged resume, and the judgement against the expected run.
// A phase that ends the scenario early (a fault that never happened, a refusal) leaves its
// verdict, completed with the reference's loss curve.
class ScenarioExecution {
 public:
  ScenarioExecution(const Scenario& scenario, const DefectSet& extra_defects, TrainingOptions resume_options,
                    ReferenceCache* cache)
      : scenario_(scenario), run_(scenario.run), defects_(run_.defects), options_(run_.options),
        resume_options_(std::move(resume_options)), cache_(cache), disk_(clean_disk_options(run_.seed)) {
    for (const DefectInfo& info : all_defects()) {
      if (extra_defects.has(info.defect)) defects_.enable(info.defect);
    }
    options_.digest_every_step = true;
    if (scenario.resume_settings) {
      resume_options_.model = scenario.resume_settings->model;
      resume_options_.data = scenario.resume_settings->data;
      resume_options_.seed = scenario.resume_settings->seed;
      resume_options_.frozen_parameters = scenario.resume_settings->frozen_parameters;
    }
    verdict_.name = scenario.name;
    verdict_.description = scenario.description;
    verdict_.seed = run_.seed;
    savers_ = {options_.frozen_parameters};
  }

  // The phases, in order. Each returns false when the scenario ended there.
  Result<bool> faulted_run();
  Status damage();
  Result<bool> restart_chain();
  Result<ScenarioVerdict> resume_and_judge();

  // A verdict that ends before the comparison still shows the reference's loss curve.
  Result<ScenarioVerdict> verdict_before_comparison() {
    ZEROSIM_RETURN_IF_ERROR(reference());
    return verdict_;
  }

 private:
  // What the expected run is, once the judged restart has loaded.
  struct Expectation {
    bool load_options = false;      // a load of the chain changes the state or the frozen set
    bool elastic_deepspeed = false;  // "deepspeed" numerics resumed at another world size
    std::string modelled_description;
    std::optional<TrainingRun> modelled;  // with load_options
    std::optional<TrainingRun> elastic;   // with elastic_deepspeed
  };

  Result<TrainingRun> run_reference(const TrainingOptions& reference_options, SimDisk* checkpoint_disk = nullptr,
                                    int64_t save_step = -1);
  Status reference(SimDisk* checkpoint_disk = nullptr, int64_t save_step = -1);
  bool fault_never_happened(const Result<TrainingRun>& first, bool scripted_not_fired, bool timed_not_fired,
                            const std::string& power_lost_at, const std::string& never_fired);
  Status check_checkpoint_expectation();
  void with_checkpoint_finding(ScenarioVerdict& judged) const;
  CheckpointPlan restart_plan(const std::string& tag, const CheckpointLoadOptions& load, int64_t save_every) const;
  Result<TrainingRun> resume(SimDisk& resume_disk, const TrainingOptions& options_of_resume);
  void model_load(int64_t loaded_step, const CheckpointLoadOptions& load, const std::vector<std::string>& frozen,
                  bool saved);
  Result<std::optional<ScenarioVerdict>> judge_no_checkpoint(const Result<TrainingRun>& resumed);
  void judge_refusal(const Status& refused);
  Result<ScenarioVerdict> judge_resumed(const TrainingRun& resumed);
  Status describe_modelled_loads(Expectation& expected) const;
  Result<TrainingRun> modelled_run(const std::string& modelled_description, int64_t capture_step);
  Result<TrainingRun> continue_from(SimDisk& clean_disk, const TrainingOptions& continuation_options);
  Result<TrainingRun> continuation_at(int64_t save_step, const TrainingOptions& continuation_options);
  Result<TrainingRun> expected_state_at(const Expectation& expected, int64_t step);
  std::string durability_finding(const TrainingRun& resumed, const Divergence& divergence);
  Status narrow_divergence(const Expectation& expected, const Divergence& divergence);

  const Scenario& scenario_;
  const CrashScenario& run_;
  DefectSet defects_;
  TrainingOptions options_;
  TrainingOptions resume_options_;
  ReferenceCache* cache_;
  ScenarioVerdict verdict_;
  NoCrashPoints no_crash_;
  SimDisk disk_;  // the faulted run's disk, and so the restarts'
  std::atomic<bool> sigterm_{false};
  bool storage_lied_ = false;  // a lost, misdirected or torn write fired: acknowledged, not persisted
  std::optional<TrainingRun> reference_run_;
  bool reference_saved_ = false;  // the reference ran, with a checkpoint disk (a cache hit does not run it)
  std::vector<AppliedDamage> damaged_;
  std::string checkpoint_finding_;  // the tags or `latest` after the first phase, against the expectation
  // The loads the expected run models, in order (CheckpointPlan::modelled_loads), built as the
  // restarts run: which checkpoint each loaded, with what, into which frozen set. `savers_`
  // holds the frozen set of each run whose saves a later load may find (the first phase's first).
  std::vector<CheckpointPlan::ModelledLoad> modelled_loads_;
  std::vector<std::vector<std::string>> savers_;
  std::vector<bool> saved_anything_;  // per modelled load: its run committed a save of its own
  // The disk as the judged restart finds it, kept for a second resume that captures the full state.
  std::unique_ptr<SimDisk> restart_disk_;
};

// The reference: no faults, no defects. It runs after the resume, whose start it may save (a
// clean checkpoint for the elastic continuation) as it passes.
Result<TrainingRun> ScenarioExecution::run_reference(const TrainingOptions& reference_options, SimDisk* checkpoint_disk,
                                                     int64_t save_step) {
  SimDisk scratch_disk(clean_disk_options(run_.seed));
  SimDisk& reference_disk = checkpoint_disk != nullptr ? *checkpoint_disk : scratch_disk;
  SimWorld reference_world(reference_disk, reference_options.world_size, FaultPlan{}, no_crash_);
  CheckpointPlan saving_one;
  if (checkpoint_disk != nullptr) {
    saving_one.save_directory = run_.checkpoint_directory;
    saving_one.save_at_steps = {save_step};
    saving_one.save_at_end = false;
    saving_one.save_options = run_.save_options;
  }
  return run_training(reference_options, run_.total_steps, reference_world.seams(), saving_one);
}

// The reference, run once; with a checkpoint disk, it saves save_step there.
Status ScenarioExecution::reference(SimDisk* checkpoint_disk, int64_t save_step) {
  ZEROSIM_CHECK(!reference_run_, "the reference runs once");
  auto compute = [&]() -> Result<TrainingRun> {
    reference_saved_ = checkpoint_disk != nullptr;
    return run_reference(options_, checkpoint_disk, save_step);
  };
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun computed,
                           cache_ != nullptr ? cache_->get_or_run(options_, run_.total_steps, compute) : compute());
  reference_run_ = std::move(computed);
  for (const StepRecord& step : reference_run_->steps) verdict_.reference_losses.push_back(step.loss);
  return Status();
}

// The faulted first phase: saves, the plan's faults, its crash (or a kill after the last save).
// It runs as `zerosim train` does: with a stop handler installed (set only by a scenario's
// SIGTERM), and saving on the signal.
Result<bool> ScenarioExecution::faulted_run() {
  CheckpointPlan saving;
  saving.save_directory = run_.checkpoint_directory;
  saving.save_every_steps = run_.save_every_steps;
  saving.save_options = run_.save_options;
  if (scenario_.save_at_start) saving.save_at_steps = {0};
  saving.stop_requested = &sigterm_;
  saving.save_on_stop = true;
  std::unique_ptr<CrashPointHook> hook;
  VirtualTimeCrash* timed = nullptr;
  ScriptedCrashPoints* scripted = nullptr;
  if (scenario_.fault_plan.crash_point) {
    auto owned = std::make_unique<ScriptedCrashPoints>(*scenario_.fault_plan.crash_point, &disk_);
    scripted = owned.get();
    hook = std::move(owned);
    verdict_.crash = "crash at " + scenario_.fault_plan.crash_point->describe();
  } else if (scenario_.fault_plan.crash_at_virtual_time_us) {
    auto owned = std::make_unique<VirtualTimeCrash>(*scenario_.fault_plan.crash_at_virtual_time_us, disk_);
    timed = owned.get();
    hook = std::move(owned);
    verdict_.crash = "crash at virtual time " + std::to_string(*scenario_.fault_plan.crash_at_virtual_time_us) + " us";
  } else {
    hook = std::make_unique<NoCrashPoints>();
    verdict_.crash = "killed after step " + std::to_string(run_.explored_save_step);
  }
  StepCountingHook counting(*hook, options_.world_size, scenario_.sigterm_at_step, &sigterm_);
  SimWorld world(disk_, options_.world_size, scenario_.fault_plan, counting, &defects_);
  if (timed != nullptr) timed->attach(world);
  // Nothing compares the first phase's states (the resume is what is judged): no digests.
  TrainingOptions first_options = options_;
  first_options.digest_every_step = false;
  const Result<TrainingRun> first = run_training(first_options, run_.explored_save_step, world.seams(), saving);
  const std::string power_lost_at = world.faulty_disk().power_loss_at();
  if (!power_lost_at.empty()) {
    verdict_.crash = "power lost during " + power_lost_at;
  } else if (first.ok() && first->stopped_early) {
    verdict_.crash = "SIGTERM in step " + std::to_string(*scenario_.sigterm_at_step) + ", saved on the signal and exited";
  } else if (!first.ok() && verdict_.crash.rfind("killed", 0) == 0) {
    verdict_.crash = "stopped by " + first.status().to_string();
  }
  verdict_.steps_before_crash = scenario_.fault_plan.crash_point ? counting.steps_of(scenario_.fault_plan.crash_point->rank)
                                                                 : counting.fewest_steps();
  verdict_.committed_steps = counting.committed_steps();
  verdict_.committed_step = verdict_.committed_steps.empty() ? -1 : verdict_.committed_steps.back();
  // Each rule's counts, for the report; a rule that never fired tested nothing.
  const std::vector<int64_t> fired = world.faulty_disk().fired_counts();
  const std::vector<int64_t> matched = world.faulty_disk().matched_counts();
  std::string never_fired;
  for (size_t i = 0; i < fired.size(); ++i) {
    const FaultRule& rule = scenario_.fault_plan.disk_faults[i];
    if (fired[i] > 0 && (rule.kind == FaultKind::kLostWrite || rule.kind == FaultKind::kMisdirectedWrite ||
                         rule.kind == FaultKind::kTornWrite)) {
      storage_lied_ = true;
    }
    const std::string named = fault_rule_name(i, rule);
    verdict_.fault_rule_counts.push_back(named + ": matched " + std::to_string(matched[i]) + " time" +
                                         (matched[i] == 1 ? "" : "s") + ", fired " + std::to_string(fired[i]));
    if (fired[i] == 0 && never_fired.empty()) {
      verdict_.unfired_fault_rule = static_cast<int64_t>(i);
      verdict_.unfired_fault_rule_matched = matched[i];
      never_fired = named + " never fired (it matched " + std::to_string(matched[i]) + " operation" +
                    (matched[i] == 1 ? "" : "s") +
                    (rule.after_path_pattern.empty() ? "" : " after its " + std::string(fault_operation_name(rule.after_operation)) +
                                                               " of " + rule.after_path_pattern) +
                    ")";
    }
  }
  verdict_.fault_never_happened = fault_never_happened(first, scripted != nullptr && !scripted->fired(),
                                                      timed != nullptr && !timed->fired(), power_lost_at, never_fired);
  return !verdict_.fault_never_happened;
}

// Whether a fault of the plan never happened; the first such, in the order the checks name
// them, sets the verdict's outcome and diagnosis.
bool ScenarioExecution::fault_never_happened(const Result<TrainingRun>& first, bool scripted_not_fired,
                                             bool timed_not_fired, const std::string& power_lost_at,
                                             const std::string& never_fired) {
  const FaultPlan& plan = scenario_.fault_plan;
  const bool plans_power_loss = std::any_of(plan.disk_faults.begin(), plan.disk_faults.end(),
                                            [](const FaultRule& rule) { return rule.kind == FaultKind::kPowerLoss; });
  if (plans_power_loss && power_lost_at.empty()) {
    verdict_.outcome = how_the_first_phase_ended(first) + " without reaching the power_loss fault of its plan";
    verdict_.diagnosis = "the power_loss disk fault never fired (its occurrence is past the first phase's operations?)";
  } else if (scenario_.sigterm_at_step && !(first.ok() && first->stopped_early)) {
    verdict_.outcome = how_the_first_phase_ended(first) + " without stopping on the SIGTERM of step " +
                       std::to_string(*scenario_.sigterm_at_step);
    verdict_.diagnosis = "the run did not stop on SIGTERM (--save-on-signal) in step " +
                         std::to_string(*scenario_.sigterm_at_step);
  } else if (scripted_not_fired) {
    verdict_.outcome =
        how_the_first_phase_ended(first) + " without reaching the crash point " + plan.crash_point->describe();
    verdict_.diagnosis = "the crash point " + plan.crash_point->describe() +
                         " was never reached (its occurrence is past the first phase's " +
                         std::to_string(run_.explored_save_step) + " steps?)";
  } else if (!never_fired.empty()) {
    verdict_.outcome = how_the_first_phase_ended(first) + " without firing every fault of its plan";
    verdict_.diagnosis = never_fired;
  } else if (timed_not_fired) {
    verdict_.outcome = how_the_first_phase_ended(first) + " before the virtual time of its crash";
    verdict_.diagnosis = "the crash at virtual time " + std::to_string(*plan.crash_at_virtual_time_us) +
                         " us never happened (the first phase ended at an earlier time?)";
  } else {
    return false;
  }
  return true;
}

// Between the crash and the restart: the power loss, the operator's actions, damage at rest;
// then what the restart finds against what the scenario expects of the checkpoints.
Status ScenarioExecution::damage() {
  if (scenario_.power_loss) {
    disk_.crash_with_seed(run_.seed);  // the power goes out
    verdict_.crash += ", then a power loss";
  } else {
    verdict_.crash += ", the process gone (the machine stays up: written data survives)";
  }
  for (OperatorAction action : scenario_.operator_actions) {
    ZEROSIM_RETURN_IF_ERROR(apply_operator_action(action, swap_directories_of(options_), run_.checkpoint_directory, disk_));
  }
  for (const AtRestDamage& damage : scenario_.damage) {
    ZEROSIM_ASSIGN_OR_RETURN(AppliedDamage applied, apply_damage(damage, options_.world_size, run_.checkpoint_directory, disk_));
    verdict_.damage += (verdict_.damage.empty() ? "" : "; ") + applied.describe;
    if (applied.applied) damaged_.push_back(std::move(applied));
  }
  if (!verdict_.damage.empty()) verdict_.crash += ", then at-rest damage: " + verdict_.damage;
  return check_checkpoint_expectation();
}

// What the restart finds: the complete tags and `latest`, against the expectation.
Status ScenarioExecution::check_checkpoint_expectation() {
  if (!scenario_.expect_checkpoint_tags && !scenario_.expect_latest) return Status();
  Result<std::vector<std::string>> listed = list_complete_tags(disk_, run_.checkpoint_directory);
  if (!listed.ok() && listed.status().code() != StatusCode::kNotFound) return listed.status();
  const std::vector<std::string> tags = listed.ok() ? *listed : std::vector<std::string>{};
  Result<std::string> latest = read_latest_tag(disk_, run_.checkpoint_directory);
  const std::string latest_tag = latest.ok() ? *latest : "";
  auto joined = [](const std::vector<std::string>& names) {
    std::string text;
    for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
    return "[" + text + "]";
  };
  if (scenario_.expect_checkpoint_tags && tags != *scenario_.expect_checkpoint_tags) {
    checkpoint_finding_ = "after the first phase the complete tags are " + joined(tags) + ", expected " +
                          joined(*scenario_.expect_checkpoint_tags);
  } else if (scenario_.expect_latest && latest_tag != *scenario_.expect_latest) {
    checkpoint_finding_ = "after the first phase `latest` names " + (latest_tag.empty() ? std::string("nothing") : latest_tag) +
                          ", expected " + (scenario_.expect_latest->empty() ? std::string("none") : *scenario_.expect_latest);
  }
  return Status();
}

// A checkpoint that is not what the scenario expects fails it, whatever the resume did.
void ScenarioExecution::with_checkpoint_finding(ScenarioVerdict& judged) const {
  if (checkpoint_finding_.empty()) return;
  judged.passed = false;
  judged.diagnosis = checkpoint_finding_ + (judged.diagnosis.empty() ? "" : "; " + judged.diagnosis);
}

// A restart's checkpoint plan: load `tag` with `load`, and save every `save_every` steps (0: not).
CheckpointPlan ScenarioExecution::restart_plan(const std::string& tag, const CheckpointLoadOptions& load,
                                               int64_t save_every) const {
  CheckpointPlan plan;
  plan.resume_directory = run_.checkpoint_directory;
  plan.resume_tag = tag;
  plan.resume_load = load;
  if (save_every > 0) {
    plan.save_directory = run_.checkpoint_directory;
    plan.save_every_steps = save_every;
    plan.save_options = run_.save_options;
  }
  return plan;
}

// The judged restart: config and durable disk only. After a chain of restarts, from `latest`.
Result<TrainingRun> ScenarioExecution::resume(SimDisk& resume_disk, const TrainingOptions& options_of_resume) {
  SimWorld resume_world(resume_disk, options_of_resume.world_size, FaultPlan{}, no_crash_, &defects_);
  const CheckpointPlan resuming = restart_plan(scenario_.restart_chain.empty() ? scenario_.resume_tag : std::string("latest"),
                                               scenario_.resume_load, scenario_.resume_save_every);
  return run_training(options_of_resume, run_.total_steps, resume_world.seams(), resuming);
}

void ScenarioExecution::model_load(int64_t loaded_step, const CheckpointLoadOptions& load,
                                   const std::vector<std::string>& frozen, bool saved) {
  // A restart that committed nothing left the checkpoint it loaded to the next one: its load
  // is replaced by the next's (which loads that same checkpoint).
  if (!saved_anything_.empty() && !saved_anything_.back()) {
    modelled_loads_.pop_back();
    savers_.pop_back();
    saved_anything_.pop_back();
  }
  CheckpointPlan::ModelledLoad modelled;
  modelled.after_step = loaded_step;
  modelled.options = load;
  modelled.frozen_now = frozen;
  if (run_.save_options.exclude_frozen_parameters) modelled.excluded_from_save = savers_.back();
  modelled_loads_.push_back(std::move(modelled));
  savers_.push_back(frozen);
  saved_anything_.push_back(saved);
}

// A chain of resumes: restarts that save, each killed by a power loss after a step; the
// judged restart comes after them, from what they left.
Result<bool> ScenarioExecution::restart_chain() {
  std::vector<std::string> frozen_before = options_.frozen_parameters;
  for (size_t i = 0; i < scenario_.restart_chain.size(); ++i) {
    const Scenario::ChainedRestart& chained = scenario_.restart_chain[i];
    SimWorld chained_world(disk_, resume_options_.world_size, FaultPlan{}, no_crash_, &defects_);
    CheckpointPlan plan = restart_plan(i == 0 ? scenario_.resume_tag : std::string("latest"), chained.load, chained.save_every);
    plan.save_at_end = false;  // it is killed after that step, not ended
    TrainingOptions chained_options = resume_options_;
    chained_options.digest_every_step = false;
    chained_options.frozen_parameters = chained.frozen_parameters ? *chained.frozen_parameters : frozen_before;
    const Result<TrainingRun> restarted = run_training(chained_options, chained.killed_after_step, chained_world.seams(), plan);
    const std::string ordinal = scenario_.restart_chain.size() == 1 ? "the first restart" : "restart " + std::to_string(i + 1);
    if (!restarted.ok()) {
      verdict_.outcome = ordinal + " of the chain failed: " + restarted.status().to_string();
      verdict_.diagnosis = verdict_.outcome;
      return false;
    }
    disk_.crash_with_seed(run_.seed + 1 + i);
    // A resumed run counts its loaded step as saved (it saves into the directory it loaded from).
    const int64_t started_at = chained.load.module_only ? 0 : restarted->loaded_checkpoint_step;
    const bool saved = restarted->last_saved_step >= 0 && restarted->last_saved_step != started_at;
    verdict_.crash += ", then a restart (loaded " + checkpoint_tag_for_step(restarted->loaded_checkpoint_step) +
                      (chained.load.describe().empty() ? "" : " with " + chained.load.describe()) + ") that saved " +
                      (saved ? "up to step " + std::to_string(restarted->last_saved_step) : std::string("nothing")) +
                      ", killed after step " + std::to_string(chained.killed_after_step) + " by a power loss";
    if (saved) {
      verdict_.committed_steps.push_back(restarted->last_saved_step);
      verdict_.committed_step = restarted->last_saved_step;
    }
    model_load(restarted->loaded_checkpoint_step, chained.load, chained_options.frozen_parameters, saved);
    frozen_before = chained_options.frozen_parameters;
  }
  // The judged restart keeps the chain's last frozen set unless the scenario changes it.
  if (!scenario_.restart_chain.empty() && !scenario_.resume_changes_frozen) resume_options_.frozen_parameters = frozen_before;
  return true;
}

// The judged restart, and its judgement: a fresh start where no checkpoint was left, a refusal,
// or a resumed run compared with the expected one.
Result<ScenarioVerdict> ScenarioExecution::resume_and_judge() {
  restart_disk_ = disk_.clone();
  const Result<TrainingRun> resumed = resume(disk_, resume_options_);
  ZEROSIM_ASSIGN_OR_RETURN(std::optional<ScenarioVerdict> fresh_start, judge_no_checkpoint(resumed));
  if (fresh_start) return *std::move(fresh_start);
  if (!resumed.ok()) {
    judge_refusal(resumed.status());
    with_checkpoint_finding(verdict_);
    return verdict_before_comparison();
  }
  return judge_resumed(*resumed);
}

// A crash before any save returned leaves no checkpoint: with "no_checkpoint" the scenario
// defines the outcome (a fresh start, as a training script that finds nothing to resume does,
// or the refusal). Not when a save had returned (losing it is lost work), and not when any
// manifest reached the disk: the loader's own "nothing complete" is not taken on trust.
// Returns the verdict when this case applies.
Result<std::optional<ScenarioVerdict>> ScenarioExecution::judge_no_checkpoint(const Result<TrainingRun>& resumed) {
  if (resumed.ok() || scenario_.expect_no_checkpoint.empty() || verdict_.committed_step >= 0 ||
      resumed.status().code() != StatusCode::kNotFound ||
      resumed.status().message().find("no complete checkpoint") == std::string::npos) {
    return std::optional<ScenarioVerdict>();
  }
  ZEROSIM_ASSIGN_OR_RETURN(const bool manifest_on_disk, any_manifest_under(*restart_disk_, run_.checkpoint_directory));
  if (manifest_on_disk) return std::optional<ScenarioVerdict>();
  if (scenario_.expect_no_checkpoint == "refusal") {
    verdict_.outcome = "refused as expected (no save returned before the crash): " + resumed.status().to_string();
    verdict_.passed = true;
    ZEROSIM_ASSIGN_OR_RETURN(ScenarioVerdict done, verdict_before_comparison());
    return std::optional<ScenarioVerdict>(std::move(done));
  }
  // The fresh start, judged against the same fresh run on a clean disk without defects.
  SimWorld fresh_world(disk_, resume_options_.world_size, FaultPlan{}, no_crash_, &defects_);
  CheckpointPlan fresh = restart_plan(scenario_.resume_tag, scenario_.resume_load, scenario_.resume_save_every);
  fresh.resume_directory.clear();
  const Result<TrainingRun> restarted = run_training(resume_options_, run_.total_steps, fresh_world.seams(), fresh);
  SimDisk clean_disk(clean_disk_options(run_.seed));
  SimWorld clean_world(clean_disk, resume_options_.world_size, FaultPlan{}, no_crash_);
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun expected, run_training(resume_options_, run_.total_steps, clean_world.seams()));
  if (!restarted.ok()) {
    verdict_.outcome = "no complete checkpoint (no save returned before the crash); the fresh start failed: " +
                       restarted.status().to_string();
    verdict_.diagnosis = verdict_.outcome;
  } else {
    verdict_.notes = restarted->notes;
    verdict_.resumed_at = 0;
    for (const StepRecord& step : restarted->steps) verdict_.resumed_losses.push_back(step.loss);
    const std::string differing = first_differing_component(expected.digests, restarted->digests);
    verdict_.passed = differing.empty();
    verdict_.outcome = "no complete checkpoint (no save returned before the crash): started fresh, " +
                       (differing.empty() ? "bit-identical to the same fresh run at step " + std::to_string(run_.total_steps)
                                          : "diverged from the same fresh run: " + differing);
    verdict_.diagnosis = differing.empty() ? "" : "the fresh start diverged from the same fresh run: " + differing;
  }
  ZEROSIM_ASSIGN_OR_RETURN(ScenarioVerdict done, verdict_before_comparison());
  return std::optional<ScenarioVerdict>(std::move(done));
}

// A refused resume passes when the scenario expects that refusal, or when the refusal names
// what was damaged: a file damaged at rest, or a file of the checkpoint a lying write damaged.
void ScenarioExecution::judge_refusal(const Status& refused) {
  verdict_.outcome = "refused: " + refused.to_string();
  verdict_.passed = !scenario_.expect_error.empty() && refused.message().find(scenario_.expect_error) != std::string::npos;
  const std::string* named = nullptr;
  for (const AppliedDamage& damage : damaged_) {
    if (refused.message().find(damage.path) != std::string::npos) named = &damage.path;
  }
  if (!verdict_.passed && scenario_.expect_error.empty() && named != nullptr) {
    verdict_.passed = true;
    verdict_.outcome += " (names the damaged file " + *named + ")";
  }
  // Storage that acknowledged a write it did not persist damaged a checkpoint: a refusal as
  // damage (kDataLoss) naming a file of that checkpoint is right.
  const std::string committed_directory =
      run_.checkpoint_directory + "/" + checkpoint_tag_for_step(verdict_.committed_step) + "/";
  if (!verdict_.passed && scenario_.expect_error.empty() && storage_lied_ && verdict_.committed_step >= 0 &&
      (refused.code() == StatusCode::kDataLoss || refused.code() == StatusCode::kNotFound) &&
      refused.message().find(committed_directory) != std::string::npos) {
    verdict_.passed = true;
    verdict_.outcome += " (names a file of " + committed_directory + ", which a lying write damaged)";
  }
  verdict_.diagnosis = verdict_.passed ? ""
                     : "the resume failed: " + refused.to_string() +
                           (damaged_.empty() ? "" : " (without naming the damaged file " + damaged_.front().path + ")");
}

// Whether a load of the chain changes a state (load options) or the frozen set, and how they
// read in the outcome.
Status ScenarioExecution::describe_modelled_loads(Expectation& expected) const {
  std::vector<std::string> frozen = options_.frozen_parameters;
  for (const CheckpointPlan::ModelledLoad& load : modelled_loads_) {
    const bool changes_frozen = load.frozen_now && *load.frozen_now != frozen;
    if (load.options.changes_state() || changes_frozen) expected.load_options = true;
    expected.modelled_description += (expected.modelled_description.empty() ? "" : ", then ") +
                                     checkpoint_tag_for_step(load.after_step) +
                                     (load.options.describe().empty() ? "" : " with " + load.options.describe()) +
                                     (changes_frozen ? " into another frozen set" : "");
    if (load.frozen_now) frozen = *load.frozen_now;
  }
  // The "deepspeed" numerics depend on W (ds_config.h NumericsMode), so a resume at another
  // world size cannot follow the uninterrupted run at W. What it must follow: up to the load,
  // the run at W (the state right after the load is compared with it, strictly); after it,
  // the W' continuation of a clean checkpoint of that run, saved at the same step and loaded
  // without faults or defects. Both comparisons are bit for bit.
  expected.elastic_deepspeed =
      options_.config.numerics == NumericsMode::kDeepSpeed && resume_options_.world_size != options_.world_size;
  if (expected.elastic_deepspeed && expected.load_options) {
    return invalid_argument(scenario_.name + ": loads that change the state (" + expected.modelled_description +
                            ") with \"deepspeed\" numerics and another world size for the restart: no model of "
                            "that resume yet; keep the world size or use the default numerics");
  }
  return Status();
}

// With load options or another frozen set, the expected run: the reference up to the first
// loaded step, changed there as that load changes the state (RankEngine::reset_as_loaded:
// never through a file), on to the next load of the chain, and so on; after a module-only
// load the model counts its steps from 0 again.
Result<TrainingRun> ScenarioExecution::modelled_run(const std::string& modelled_description, int64_t capture_step) {
  SimDisk scratch_disk(clean_disk_options(run_.seed));
  SimWorld world(scratch_disk, options_.world_size, FaultPlan{}, no_crash_);
  CheckpointPlan modelling;
  modelling.modelled_loads = modelled_loads_;
  TrainingOptions modelled_options = options_;
  modelled_options.capture_state_at_step = capture_step;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun modelled, run_training(modelled_options, run_.total_steps, world.seams(), modelling));
  if (modelled.modelled_load_step_indices.size() != modelled_loads_.size()) {
    // A load of an older step than the one before it reached: no run that keeps going forward
    // passes through it (a restart fell back past its predecessor's saves).
    return failed_precondition("the loads of the chain (" + modelled_description + ") are not in step order: the "
                               "model reached " + std::to_string(modelled.modelled_load_step_indices.size()) +
                               " of them");
  }
  // After a module-only load the count starts again: the steps after the last such load.
  for (size_t i = modelled_loads_.size(); i-- > 0;) {
    if (!modelled_loads_[i].options.module_only) continue;
    keep_steps_after(modelled, static_cast<int64_t>(modelled.modelled_load_step_indices[i]));
    break;
  }
  return modelled;
}

Result<TrainingRun> ScenarioExecution::continue_from(SimDisk& clean_disk, const TrainingOptions& continuation_options) {
  SimWorld world(clean_disk, continuation_options.world_size, FaultPlan{}, no_crash_);
  CheckpointPlan resuming;
  resuming.resume_directory = run_.checkpoint_directory;
  return run_training(continuation_options, run_.total_steps, world.seams(), resuming);
}

// A clean checkpoint of the run at W, saved at `save_step`, continued with other options.
Result<TrainingRun> ScenarioExecution::continuation_at(int64_t save_step, const TrainingOptions& continuation_options) {
  SimDisk clean_disk(clean_disk_options(run_.seed));
  {
    SimWorld world(clean_disk, options_.world_size, FaultPlan{}, no_crash_);
    CheckpointPlan saving_at_end;
    saving_at_end.save_directory = run_.checkpoint_directory;
    saving_at_end.save_options = run_.save_options;
    TrainingOptions saving_options = options_;
    saving_options.capture_state_at_step = -1;
    ZEROSIM_RETURN_IF_ERROR(run_training(saving_options, save_step, world.seams(), saving_at_end).status());
  }
  return continue_from(clean_disk, continuation_options);
}

// The expected full state at `step` (a diagnosis's input): the reference's, or after the
// load of an elastic_deepspeed resume, the continuation's.
Result<TrainingRun> ScenarioExecution::expected_state_at(const Expectation& expected, int64_t step) {
  if (expected.load_options) return modelled_run(expected.modelled_description, step);
  if (expected.elastic_deepspeed && step > verdict_.resumed_at) {
    TrainingOptions capturing = resume_options_;
    capturing.capture_state_at_step = step;
    return continuation_at(verdict_.resumed_at, capturing);
  }
  TrainingOptions capturing = options_;
  capturing.capture_state_at_step = step;
  return run_reference(capturing);
}

// The resumed run against the expected one, bit for bit, then durability: what it loaded
// against what the crash left.
Result<ScenarioVerdict> ScenarioExecution::judge_resumed(const TrainingRun& resumed) {
  verdict_.notes = resumed.notes;
  verdict_.resumed_at = run_.total_steps - static_cast<int64_t>(resumed.steps.size());
  for (const StepRecord& step : resumed.steps) verdict_.resumed_losses.push_back(step.loss);
  model_load(resumed.loaded_checkpoint_step, scenario_.resume_load, resume_options_.frozen_parameters, true);
  Expectation expected;
  ZEROSIM_RETURN_IF_ERROR(describe_modelled_loads(expected));
  if (expected.load_options) {
    Result<TrainingRun> modelled = modelled_run(expected.modelled_description, -1);
    if (!modelled.ok() && modelled.status().code() == StatusCode::kFailedPrecondition) {
      verdict_.outcome = "resumed at step " + std::to_string(verdict_.resumed_at) + ", not comparable";
      verdict_.diagnosis = modelled.status().message();
      return verdict_before_comparison();
    }
    ZEROSIM_RETURN_IF_ERROR(modelled.status());
    expected.modelled = std::move(modelled).value();
  }
  // With elastic_deepspeed, the reference saves the clean checkpoint as it passes the step
  // the resume loaded (unless a cache had the reference already: then a run to that step saves it).
  std::unique_ptr<SimDisk> clean_checkpoint_disk;
  if (expected.elastic_deepspeed) clean_checkpoint_disk = std::make_unique<SimDisk>(clean_disk_options(run_.seed));
  ZEROSIM_RETURN_IF_ERROR(reference(clean_checkpoint_disk.get(), verdict_.resumed_at));
  // With elastic_deepspeed, the expected run: the reference's steps up to the load, the
  // continuation's after.
  if (expected.elastic_deepspeed) {
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun continuation, reference_saved_
                                                           ? continue_from(*clean_checkpoint_disk, resume_options_)
                                                           : continuation_at(verdict_.resumed_at, resume_options_));
    TrainingRun& elastic = expected.elastic.emplace(*reference_run_);
    const size_t kept = static_cast<size_t>(verdict_.resumed_at);
    elastic.steps.resize(kept);
    elastic.step_digests.resize(kept);
    elastic.steps.insert(elastic.steps.end(), continuation.steps.begin(), continuation.steps.end());
    elastic.step_digests.insert(elastic.step_digests.end(), continuation.step_digests.begin(),
                                continuation.step_digests.end());
    elastic.digests = continuation.digests;
    elastic.final_state = continuation.final_state;
  }
  const Divergence divergence = find_first_divergence(
      expected.modelled ? *expected.modelled : expected.elastic ? *expected.elastic : *reference_run_, resumed,
      verdict_.resumed_at);
  if (divergence.found) verdict_.divergence = divergence;
  verdict_.outcome = "resumed at step " + std::to_string(verdict_.resumed_at) +
                     (divergence.found ? ", diverged: " + divergence.describe()
                                       : ", bit-identical to step " + std::to_string(run_.total_steps)) +
                     (expected.elastic_deepspeed && !divergence.found
                          ? " (deepspeed numerics: the run at W up to the load, then the clean checkpoint's W' continuation)"
                          : "") +
                     (expected.load_options ? " (loaded " + expected.modelled_description +
                                                  "; expected: the reference changed where each load changes it)"
                                            : "");
  const std::string finding = durability_finding(resumed, divergence);
  if (finding.empty()) {
    verdict_.passed = true;
  } else {
    verdict_.diagnosis = finding;
  }
  ZEROSIM_RETURN_IF_ERROR(narrow_divergence(expected, divergence));
  for (const std::string& note : resumed.notes) {
    if (note.rfind("warning:", 0) == 0 && verdict_.outcome.find("(with a warning)") == std::string::npos) {
      verdict_.outcome += " (with a warning)";
    }
  }
  with_checkpoint_finding(verdict_);
  return verdict_;
}

// Why a resumed run fails, first reason first ("" when it passes): an expected refusal that
// did not come, a damaged checkpoint loaded, a fallback past the newest undamaged checkpoint,
// `latest` left naming a removed tag, lost work, another start step than expected, or a
// divergence. Durability: the resume starts from the newest save that returned before the
// crash, unless the restart asked for a tag, or damage at rest took that checkpoint (and a
// warning says so).
std::string ScenarioExecution::durability_finding(const TrainingRun& resumed, const Divergence& divergence) {
  const int64_t loaded_step = resumed.loaded_checkpoint_step;
  const std::string loaded_tag = checkpoint_tag_for_step(loaded_step);
  std::string damage_finding;
  bool warned_of_damage = false;
  // A lying write, or damage to the newest checkpoint or to `latest`, may cost the newest
  // checkpoint: then the resume must say that it fell back.
  const std::string committed_tag = checkpoint_tag_for_step(verdict_.committed_step);
  bool newest_damaged = storage_lied_;
  for (const AppliedDamage& damage : damaged_) {
    if (damage.tag == loaded_tag) {
      damage_finding = "loaded the damaged checkpoint " + loaded_tag + " (" + damage.describe + ") without refusing it";
    }
    if (damage.tag.empty() || damage.tag == committed_tag) newest_damaged = true;
  }
  for (const std::string& note : resumed.notes) {
    if (newest_damaged && note.rfind("warning:", 0) == 0 && note.find("loading the newest complete tag") != std::string::npos) {
      warned_of_damage = true;
    }
  }
  const bool lost_work = scenario_.resume_tag == "latest" && scenario_.expect_resumed_at_step < 0 &&
                         loaded_step < verdict_.committed_step && !warned_of_damage;
  // A fallback forced by damage at rest must take the newest checkpoint left: the newest tag
  // on the disk as the restart found it with a manifest (written last, after the shards were
  // durable: whether or not its save returned) that was not damaged. (A lying write leaves no
  // record of which tag it took: not checked then.)
  std::string fallback_finding;
  if (scenario_.resume_tag == "latest" && scenario_.expect_resumed_at_step < 0 && warned_of_damage && !storage_lied_) {
    Result<std::vector<std::string>> names = restart_disk_->list_directory(run_.checkpoint_directory);
    int64_t newest_left = -1;
    for (const std::string& name : names.ok() ? *names : std::vector<std::string>{}) {
      const std::string prefix = "global_step";
      if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 9 ||
          name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
        continue;
      }
      const int64_t step = std::stoll(name.substr(prefix.size()));
      const bool was_damaged = std::any_of(damaged_.begin(), damaged_.end(), [&](const AppliedDamage& d) { return d.tag == name; });
      Result<bool> has_manifest = restart_disk_->exists(run_.checkpoint_directory + "/" + name + "/" + kManifestFileName);
      if (!was_damaged && has_manifest.ok() && *has_manifest) newest_left = std::max(newest_left, step);
    }
    if (newest_left >= 0 && newest_left != loaded_step) {
      fallback_finding = "fell back to " + loaded_tag + ", but " + checkpoint_tag_for_step(newest_left) +
                         " is the newest undamaged checkpoint left on the disk";
    }
  }
  // A restart that saved leaves `latest` naming a complete tag (retention must spare it).
  std::string retention_finding;
  if (scenario_.resume_save_every > 0) {
    const std::string latest_path = run_.checkpoint_directory + "/latest";
    Result<std::vector<std::byte>> latest = disk_.visible_content(latest_path);
    std::string named = latest.ok() ? std::string(reinterpret_cast<const char*>(latest->data()), latest->size()) : "";
    while (!named.empty() && (named.back() == '\n' || named.back() == '\r')) named.pop_back();
    Result<bool> there = named.empty() ? Result<bool>(false)
                                       : disk_.exists(run_.checkpoint_directory + "/" + named + "/" + kManifestFileName);
    if (!there.ok() || !*there) {
      retention_finding = "after the restart's saves, " + latest_path + " names '" + named +
                          "', which is not on the disk (retention removed the tag latest names?)";
    }
  }
  if (!scenario_.expect_error.empty()) {
    return "expected a refusal containing '" + scenario_.expect_error + "', but the run resumed";
  }
  if (!damage_finding.empty()) return damage_finding;
  if (!fallback_finding.empty()) return fallback_finding;
  if (!retention_finding.empty()) return retention_finding;
  if (lost_work) {
    return "lost work: the save of step " + std::to_string(verdict_.committed_step) +
           " returned before the crash, but the resume started at step " + std::to_string(loaded_step) +
           (damaged_.empty() ? "" : " with no warning naming the damaged tag");
  }
  if (scenario_.expect_resumed_at_step >= 0 && loaded_step != scenario_.expect_resumed_at_step) {
    return "expected the resume to start at step " + std::to_string(scenario_.expect_resumed_at_step) + " (tag " +
           scenario_.resume_tag + "), it started at step " + std::to_string(loaded_step);
  }
  if (scenario_.expect_bit_identical && divergence.found) return divergence.describe();
  return "";
}

// A divergence in a component of the state, narrowed down to its first element: both runs
// again, capturing that step.
Status ScenarioExecution::narrow_divergence(const Expectation& expected, const Divergence& divergence) {
  if (divergence.found && divergence.state_step >= 0) {
    TrainingOptions capturing_resume = resume_options_;
    capturing_resume.capture_state_at_step = divergence.state_step;
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun reference_again, expected_state_at(expected, divergence.state_step));
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun resumed_again, resume(*restart_disk_, capturing_resume));
    if (reference_again.captured && resumed_again.captured) {
      verdict_.element = diagnose_component(*reference_again.captured, *resumed_again.captured, divergence.component);
      if (!verdict_.passed) verdict_.diagnosis += "; " + verdict_.element->describe();
    }
  } else if (divergence.found && !divergence.expected_value.empty() && !verdict_.passed) {
    verdict_.diagnosis += ": expected " + divergence.expected_value + ", found " + divergence.actual_value +
                          (divergence.ulp_distance > 0 ? ", ulp distance " + std::to_string(divergence.ulp_distance) : "");
  }
  return Status();
}

}  // namespace

Result<ScenarioVerdict> run_scenario(const Scenario& scenario, const DefectSet& extra_defects, ReferenceCache* cache) {
  ZEROSIM_ASSIGN_OR_RETURN(TrainingOptions resume_options, restart_options(scenario, scenario.name));
  ScenarioExecution execution(scenario, extra_defects, std::move(resume_options), cache);
  ZEROSIM_ASSIGN_OR_RETURN(const bool every_fault_happened, execution.faulted_run());
  if (!every_fault_happened) return execution.verdict_before_comparison();
  ZEROSIM_RETURN_IF_ERROR(execution.damage());
  ZEROSIM_ASSIGN_OR_RETURN(const bool chain_done, execution.restart_chain());
  if (!chain_done) return execution.verdict_before_comparison();
  return execution.resume_and_judge();
}

}  // namespace zerosim
