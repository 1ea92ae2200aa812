#include "scenarios/scenario_runner.h"

#include <algorithm>
#include <atomic>
#include <climits>

#include "core/checkpoint/commit.h"
#include "core/checkpoint/manifest.h"
#include "core/config/ds_config.h"
#include "scenarios/scenario_file.h"

namespace zerosim {

namespace {

using nlohmann::json;

Status require_string_list(const json& value, const std::string& where) {
  if (!value.is_array()) return invalid_argument(where + ": expected a list of names");
  for (const json& item : value) {
    if (!item.is_string()) return invalid_argument(where + ": expected names, found " + item.dump());
  }
  return Status();
}

}  // namespace

Result<Scenario> scenario_from_json(const json& document, const std::string& source_name) {
  Scenario scenario;
  ZEROSIM_ASSIGN_OR_RETURN(scenario.run, crash_scenario_from_json(document, source_name));
  for (const char* key : {"name", "description"}) {
    if (document.contains(key) && !document[key].is_string()) {
      return invalid_argument(source_name + ": " + key + ": expected a string, found " + document[key].dump());
    }
  }
  scenario.name = document.value("name", source_name);
  scenario.description = document.value("description", "");
  if (document.contains("fault_plan")) {
    ZEROSIM_ASSIGN_OR_RETURN(scenario.fault_plan, parse_fault_plan(document["fault_plan"], source_name + ": fault_plan"));
  }
  if (scenario.fault_plan.crash_point) {
    const CrashPoint& point = *scenario.fault_plan.crash_point;
    const std::vector<std::string_view> sites = known_crash_sites();
    if (std::find(sites.begin(), sites.end(), point.site) == sites.end()) {
      return invalid_argument(source_name + ": fault_plan.crash.site: unknown crash point '" + point.site + "'; " +
                              unknown_key_hint(point.site, sites));
    }
    if (point.rank >= scenario.run.options.world_size) {
      return invalid_argument(source_name + ": fault_plan.crash.rank: " + std::to_string(point.rank) +
                              " is not a rank of a world of " + std::to_string(scenario.run.options.world_size));
    }
  }
  // The schedule and the resume's batch arithmetic, checked before anything runs.
  const CrashScenario& schedule = scenario.run;
  if (schedule.explored_save_step > schedule.total_steps) {
    return invalid_argument(source_name + ": explored_save_step: " + std::to_string(schedule.explored_save_step) +
                            " is past steps (" + std::to_string(schedule.total_steps) + ")");
  }
  if (schedule.save_every_steps > schedule.explored_save_step) {
    return invalid_argument(source_name + ": save_every: " + std::to_string(schedule.save_every_steps) +
                            " saves nothing before explored_save_step (" + std::to_string(schedule.explored_save_step) + ")");
  }
  ZEROSIM_RETURN_IF_ERROR(resume_options_for(schedule, source_name).status());
  if (document.contains("operator_actions")) {
    const std::string where = source_name + ": operator_actions";
    ZEROSIM_RETURN_IF_ERROR(require_string_list(document["operator_actions"], where));
    for (const json& action : document["operator_actions"]) {
      const std::string name = action.get<std::string>();
      if (name == "delete_swap_directory") scenario.operator_actions.push_back(OperatorAction::kDeleteSwapDirectory);
      else if (name == "point_latest_at_partial_tag") scenario.operator_actions.push_back(OperatorAction::kPointLatestAtPartialTag);
      else {
        return invalid_argument(where + ": unknown action '" + name + "'; " +
                                unknown_key_hint(name, {"delete_swap_directory", "point_latest_at_partial_tag"}));
      }
    }
  }
  if (document.contains("defects")) {
    const std::string where = source_name + ": defects";
    ZEROSIM_RETURN_IF_ERROR(require_string_list(document["defects"], where));
    for (const json& name : document["defects"]) {
      std::optional<Defect> defect = defect_from_name(name.get<std::string>());
      if (!defect) return invalid_argument(where + ": unknown defect '" + name.get<std::string>() + "' (zerosim defects lists them)");
      scenario.run.defects.enable(*defect);
    }
  }
  if (document.contains("expect")) {
    const json& expect = document["expect"];
    const std::string where = source_name + ": expect";
    if (!expect.is_object()) return invalid_argument(where + ": expected an object");
    for (auto it = expect.begin(); it != expect.end(); ++it) {
      if (it.key() == "bit_identical") {
        if (!it->is_boolean()) return invalid_argument(where + ".bit_identical: expected true or false");
        scenario.expect_bit_identical = it->get<bool>();
      } else if (it.key() == "resumed_at_step") {
        if (!it->is_number_integer() || it->get<int64_t>() < 0) {
          return invalid_argument(where + ".resumed_at_step: expected a step >= 0");
        }
        scenario.expect_resumed_at_step = it->get<int64_t>();
      } else if (it.key() == "error") {
        if (!it->is_string() || it->get<std::string>().empty()) return invalid_argument(where + ".error: expected a message part");
        scenario.expect_error = it->get<std::string>();
        scenario.expect_bit_identical = false;
      } else {
        return invalid_argument(where + "." + it.key() + ": unknown key; " + unknown_key_hint(it.key(), {"bit_identical", "error", "resumed_at_step"}));
      }
    }
  }
  if (document.contains("resume_tag")) {
    const json& tag = document["resume_tag"];
    if (!tag.is_string()) return invalid_argument(source_name + ": resume_tag: expected a tag name or \"latest\"");
    scenario.resume_tag = tag.get<std::string>();
    if (scenario.resume_tag != "latest") {
      Status valid = validate_checkpoint_tag(scenario.resume_tag);
      if (!valid.ok()) return invalid_argument(source_name + ": resume_tag: " + valid.message());
    }
  }
  if (document.contains("resume_config")) {
    // The same scenario with the restart's config: resolved with the same run settings.
    json restart = document;
    restart["config"] = document["resume_config"];
    restart.erase("resume_config");
    Result<CrashScenario> resolved = crash_scenario_from_json(restart, source_name);
    if (!resolved.ok()) {
      std::string message = resolved.status().message();
      const std::string prefix = source_name + ": config";
      if (message.rfind(prefix, 0) == 0) message = source_name + ": resume_config" + message.substr(prefix.size());
      return invalid_argument(message);
    }
    scenario.resume_config = resolved->options.config;
  }
  if (document.contains("cause_class")) {
    const json& cause = document["cause_class"];
    if (!cause.is_string() || cause.get<std::string>().size() != 1 || cause.get<std::string>()[0] < 'A' ||
        cause.get<std::string>()[0] > 'N') {
      return invalid_argument(source_name + ": cause_class: expected a class letter A to N of the resume-bug catalog");
    }
    scenario.cause_class = cause.get<std::string>();
  }
  if (document.contains("catches")) {
    const std::string where = source_name + ": catches";
    ZEROSIM_RETURN_IF_ERROR(require_string_list(document["catches"], where));
    for (const json& name : document["catches"]) {
      if (!defect_from_name(name.get<std::string>())) {
        return invalid_argument(where + ": unknown defect '" + name.get<std::string>() + "' (zerosim defects lists them)");
      }
      scenario.catches.push_back(name.get<std::string>());
    }
  }
  return scenario;
}

Result<Scenario> read_scenario_file(const std::string& path) {
  ZEROSIM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "scenario file"));
  ZEROSIM_ASSIGN_OR_RETURN(nlohmann::json document, parse_json_text(text, path));
  Result<Scenario> scenario = scenario_from_json(document, path);
  if (!scenario.ok()) return Status(scenario.status().code(), with_line_number(text, path, scenario.status().message()));
  return scenario;
}

namespace {

// Counts each rank's completed steps in the first phase (for the report's crash marker), then
// passes every hit on. Only a count that does not depend on thread timing is reported: the
// crashing rank's own (its hits before its crash are fixed), or with no crash point the
// smallest (ranks stop together at a collective).
class StepCountingHook final : public CrashPointHook {
 public:
  StepCountingHook(CrashPointHook& inner, int world_size)
      : inner_(inner), steps_(static_cast<size_t>(world_size)) {}
  void hit(std::string_view site, int rank) override {
    if (site == "engine.step_end") steps_[static_cast<size_t>(rank)].fetch_add(1);
    inner_.hit(site, rank);
  }
  int64_t steps_of(int rank) const { return steps_[static_cast<size_t>(rank)].load(); }
  int64_t fewest_steps() const {
    int64_t fewest = INT64_MAX;
    for (const std::atomic<int64_t>& steps : steps_) fewest = std::min(fewest, steps.load());
    return fewest;
  }

 private:
  CrashPointHook& inner_;
  std::vector<std::atomic<int64_t>> steps_;
};

Status apply_operator_action(OperatorAction action, const TrainingOptions& options, const std::string& checkpoint_directory,
                             SimDisk& disk) {
  if (action == OperatorAction::kDeleteSwapDirectory) {
    for (const OffloadConfig* offload : {&options.config.zero.offload_optimizer, &options.config.zero.offload_param}) {
      if (!offload->nvme_path.empty()) ZEROSIM_RETURN_IF_ERROR(disk.remove_tree(offload->nvme_path));
    }
    return Status();
  }
  // A tag directory with a shard and no manifest, and `latest` pointing at it.
  const std::string tag = "global_step999999";
  ZEROSIM_RETURN_IF_ERROR(disk.create_directories(checkpoint_directory + "/" + tag));
  const std::string junk = "partial";
  ZEROSIM_RETURN_IF_ERROR(write_whole_file(disk, checkpoint_directory + "/" + tag + "/" + shard_file_name(0, 1),
                                           std::as_bytes(std::span<const char>(junk.data(), junk.size())), true));
  return publish_latest_tag(disk, checkpoint_directory, tag);
}

}  // namespace

Result<ScenarioVerdict> run_scenario(const Scenario& scenario, const DefectSet& extra_defects, ReferenceCache* cache) {
  const CrashScenario& run = scenario.run;
  DefectSet defects = run.defects;
  for (const DefectInfo& info : all_defects()) {
    if (extra_defects.has(info.defect)) defects.enable(info.defect);
  }
  TrainingOptions options = run.options;
  options.digest_every_step = true;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingOptions resume_options, resume_options_for(run, scenario.name));
  if (scenario.resume_config) {
    const int64_t accumulation = resume_options.config.gradient_accumulation_steps;
    resume_options.config = *scenario.resume_config;
    resume_options.config.gradient_accumulation_steps = accumulation;
  }
  ScenarioVerdict verdict;
  verdict.name = scenario.name;
  verdict.description = scenario.description;
  verdict.seed = run.seed;

  // The reference: no faults, no defects.
  NoCrashPoints no_crash;
  auto run_reference = [&](const TrainingOptions& reference_options) -> Result<TrainingRun> {
    SimDisk reference_disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
    SimWorld reference_world(reference_disk, reference_options.world_size, FaultPlan{}, no_crash);
    return run_training(reference_options, run.total_steps, reference_world.seams());
  };
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun reference,
                           cache != nullptr ? cache->get_or_run(options, run.total_steps, [&] { return run_reference(options); })
                                            : run_reference(options));
  for (const StepRecord& step : reference.steps) verdict.reference_losses.push_back(step.loss);

  // The faulted first phase: saves, the plan's faults, its crash (or a kill after the last save).
  SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
  CheckpointPlan saving;
  saving.save_directory = run.checkpoint_directory;
  saving.save_every_steps = run.save_every_steps;
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
    StepCountingHook counting(*hook, options.world_size);
    SimWorld world(disk, options.world_size, scenario.fault_plan, counting, &defects);
    if (timed != nullptr) timed->attach(world);
    const Result<TrainingRun> first = run_training(options, run.explored_save_step, world.seams(), saving);
    if (!first.ok() && verdict.crash.rfind("killed", 0) == 0) verdict.crash = "stopped by " + first.status().to_string();
    verdict.steps_before_crash = scenario.fault_plan.crash_point ? counting.steps_of(scenario.fault_plan.crash_point->rank)
                                                                 : counting.fewest_steps();
    if (scripted != nullptr && !scripted->fired()) {
      // A crash the plan asked for and the run never reached: nothing was tested.
      verdict.outcome = "the first phase " + (first.ok() ? std::string("ended") : "stopped by " + first.status().to_string()) +
                        " without reaching the crash point " + scenario.fault_plan.crash_point->describe();
      verdict.diagnosis = "the crash point " + scenario.fault_plan.crash_point->describe() +
                          " was never reached (its occurrence is past the first phase's " +
                          std::to_string(run.explored_save_step) + " steps?)";
      return verdict;
    }
  }
  disk.crash_with_seed(run.seed);  // the power goes out
  verdict.crash += ", then a power loss";

  for (OperatorAction action : scenario.operator_actions) {
    ZEROSIM_RETURN_IF_ERROR(apply_operator_action(action, options, run.checkpoint_directory, disk));
  }
  // The disk as the restart finds it, kept for a second resume that captures the full state.
  const std::unique_ptr<SimDisk> restart_disk = disk.clone();

  // The restart: config and durable disk only.
  auto resume = [&](SimDisk& resume_disk, const TrainingOptions& options_of_resume) -> Result<TrainingRun> {
    SimWorld resume_world(resume_disk, options_of_resume.world_size, FaultPlan{}, no_crash, &defects);
    CheckpointPlan resuming;
    resuming.resume_directory = run.checkpoint_directory;
    resuming.resume_tag = scenario.resume_tag;
    return run_training(options_of_resume, run.total_steps, resume_world.seams(), resuming);
  };
  const Result<TrainingRun> resumed = resume(disk, resume_options);
  if (!resumed.ok()) {
    verdict.outcome = "refused: " + resumed.status().to_string();
    verdict.passed = !scenario.expect_error.empty() &&
                     resumed.status().message().find(scenario.expect_error) != std::string::npos;
    verdict.diagnosis = verdict.passed ? "" : "the resume failed: " + resumed.status().to_string();
    return verdict;
  }
  verdict.notes = resumed->notes;
  verdict.resumed_at = run.total_steps - static_cast<int64_t>(resumed->steps.size());
  for (const StepRecord& step : resumed->steps) verdict.resumed_losses.push_back(step.loss);

  // The "deepspeed" numerics depend on W (ds_config.h NumericsMode), so a resume at another
  // world size cannot follow the uninterrupted run at W. What it must follow: up to the load,
  // the run at W (the state right after the load is compared with it, strictly); after it,
  // the W' continuation of a clean checkpoint of that run, saved at the same step and loaded
  // without faults or defects. Both comparisons are bit for bit.
  const bool elastic_deepspeed =
      options.config.numerics == NumericsMode::kDeepSpeed && resume_options.world_size != options.world_size;
  auto continuation_at = [&](int64_t save_step, const TrainingOptions& continuation_options) -> Result<TrainingRun> {
    SimDisk clean_disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
    {
      SimWorld world(clean_disk, options.world_size, FaultPlan{}, no_crash);
      CheckpointPlan saving_at_end;
      saving_at_end.save_directory = run.checkpoint_directory;
      TrainingOptions saving_options = options;
      saving_options.capture_state_at_step = -1;
      ZEROSIM_RETURN_IF_ERROR(run_training(saving_options, save_step, world.seams(), saving_at_end).status());
    }
    SimWorld world(clean_disk, continuation_options.world_size, FaultPlan{}, no_crash);
    CheckpointPlan resuming;
    resuming.resume_directory = run.checkpoint_directory;
    return run_training(continuation_options, run.total_steps, world.seams(), resuming);
  };
  // With elastic_deepspeed, the expected run: the reference's steps up to the load, the
  // continuation's after.
  std::optional<TrainingRun> elastic_expected;
  if (elastic_deepspeed) {
    ZEROSIM_ASSIGN_OR_RETURN(TrainingRun continuation, continuation_at(verdict.resumed_at, resume_options));
    TrainingRun& expected = elastic_expected.emplace(reference);
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
    if (elastic_deepspeed && step > verdict.resumed_at) {
      TrainingOptions capturing = resume_options;
      capturing.capture_state_at_step = step;
      return continuation_at(verdict.resumed_at, capturing);
    }
    TrainingOptions capturing = options;
    capturing.capture_state_at_step = step;
    return run_reference(capturing);
  };
  const Divergence divergence =
      find_first_divergence(elastic_expected ? *elastic_expected : reference, *resumed, verdict.resumed_at);
  if (divergence.found) verdict.divergence = divergence;
  verdict.outcome = "resumed at step " + std::to_string(verdict.resumed_at) +
                    (divergence.found ? ", diverged: " + divergence.describe()
                                      : ", bit-identical to step " + std::to_string(run.total_steps)) +
                    (elastic_deepspeed && !divergence.found
                         ? " (deepspeed numerics: the run at W up to the load, then the clean checkpoint's W' continuation)"
                         : "");
  if (!scenario.expect_error.empty()) {
    verdict.diagnosis = "expected a refusal containing '" + scenario.expect_error + "', but the run resumed";
  } else if (scenario.expect_resumed_at_step >= 0 && verdict.resumed_at != scenario.expect_resumed_at_step) {
    verdict.diagnosis = "expected the resume to start at step " + std::to_string(scenario.expect_resumed_at_step) +
                        " (tag " + scenario.resume_tag + "), it started at step " + std::to_string(verdict.resumed_at);
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
  return verdict;
}

}  // namespace zerosim
