#include "scenarios/scenario_runner.h"

#include <fstream>
#include <sstream>

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
  scenario.name = document.value("name", source_name);
  scenario.description = document.value("description", "");
  if (document.contains("fault_plan")) {
    ZEROSIM_ASSIGN_OR_RETURN(scenario.fault_plan, parse_fault_plan(document["fault_plan"], source_name + ": fault_plan"));
  }
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
      } else if (it.key() == "error") {
        if (!it->is_string() || it->get<std::string>().empty()) return invalid_argument(where + ".error: expected a message part");
        scenario.expect_error = it->get<std::string>();
        scenario.expect_bit_identical = false;
      } else {
        return invalid_argument(where + "." + it.key() + ": unknown key; " + unknown_key_hint(it.key(), {"bit_identical", "error"}));
      }
    }
  }
  return scenario;
}

Result<Scenario> read_scenario_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return not_found("scenario file " + path + " cannot be opened");
  std::stringstream buffer;
  buffer << stream.rdbuf();
  ZEROSIM_ASSIGN_OR_RETURN(nlohmann::json document, parse_json_text(buffer.str(), path));
  return scenario_from_json(document, path);
}

Result<ScenarioVerdict> run_scenario(const Scenario& scenario, const DefectSet& extra_defects) {
  const CrashScenario& run = scenario.run;
  DefectSet defects = run.defects;
  for (const DefectInfo& info : all_defects()) {
    if (extra_defects.has(info.defect)) defects.enable(info.defect);
  }
  TrainingOptions options = run.options;
  options.digest_every_step = true;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingOptions resume_options, resume_options_for(run, scenario.name));
  ScenarioVerdict verdict;
  verdict.name = scenario.name;

  // The reference: no faults, no defects.
  SimDisk reference_disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
  NoCrashPoints no_crash;
  SimWorld reference_world(reference_disk, options.world_size, FaultPlan{}, no_crash);
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun reference, run_training(options, run.total_steps, reference_world.seams()));

  // The faulted first phase: saves, the plan's faults, its crash (or a kill after the last save).
  SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
  CheckpointPlan saving;
  saving.save_directory = run.checkpoint_directory;
  saving.save_every_steps = run.save_every_steps;
  {
    std::unique_ptr<CrashPointHook> hook;
    VirtualTimeCrash* timed = nullptr;
    if (scenario.fault_plan.crash_point) {
      hook = std::make_unique<ScriptedCrashPoints>(*scenario.fault_plan.crash_point, &disk);
    } else if (scenario.fault_plan.crash_at_virtual_time_us) {
      auto owned = std::make_unique<VirtualTimeCrash>(*scenario.fault_plan.crash_at_virtual_time_us, disk);
      timed = owned.get();
      hook = std::move(owned);
    } else {
      hook = std::make_unique<NoCrashPoints>();
    }
    SimWorld world(disk, options.world_size, scenario.fault_plan, *hook, &defects);
    if (timed != nullptr) timed->attach(world);
    const Result<TrainingRun> first = run_training(options, run.explored_save_step, world.seams(), saving);
    (void)first;  // a crash or an injected fault ends it; what matters is what is on the disk
  }
  disk.crash_with_seed(run.seed);  // the power goes out

  for (OperatorAction action : scenario.operator_actions) {
    if (action == OperatorAction::kDeleteSwapDirectory) {
      for (const OffloadConfig* offload : {&options.config.zero.offload_optimizer, &options.config.zero.offload_param}) {
        if (!offload->nvme_path.empty()) ZEROSIM_RETURN_IF_ERROR(disk.remove_tree(offload->nvme_path));
      }
    } else {
      // A tag directory with a shard and no manifest, and `latest` pointing at it.
      const std::string tag = "global_step999999";
      ZEROSIM_RETURN_IF_ERROR(disk.create_directories(run.checkpoint_directory + "/" + tag));
      const std::string junk = "partial";
      ZEROSIM_RETURN_IF_ERROR(write_whole_file(disk, run.checkpoint_directory + "/" + tag + "/" + shard_file_name(0, 1),
                                               std::as_bytes(std::span<const char>(junk.data(), junk.size())), true));
      ZEROSIM_RETURN_IF_ERROR(publish_latest_tag(disk, run.checkpoint_directory, tag));
    }
  }

  // The restart: config and durable disk only.
  SimWorld resume_world(disk, resume_options.world_size, FaultPlan{}, no_crash, &defects);
  CheckpointPlan resuming;
  resuming.resume_directory = run.checkpoint_directory;
  const Result<TrainingRun> resumed = run_training(resume_options, run.total_steps, resume_world.seams(), resuming);
  if (!resumed.ok()) {
    verdict.outcome = "refused: " + resumed.status().to_string();
    verdict.passed = !scenario.expect_error.empty() &&
                     resumed.status().message().find(scenario.expect_error) != std::string::npos;
    verdict.diagnosis = verdict.passed ? "" : "the resume failed: " + resumed.status().to_string();
    return verdict;
  }
  const int64_t resumed_at = run.total_steps - static_cast<int64_t>(resumed->steps.size());
  const std::string divergence = first_divergence(reference, *resumed, resumed_at);
  verdict.outcome = "resumed at step " + std::to_string(resumed_at) +
                    (divergence.empty() ? ", bit-identical to step " + std::to_string(run.total_steps)
                                        : ", diverged: " + divergence);
  if (!scenario.expect_error.empty()) {
    verdict.diagnosis = "expected a refusal containing '" + scenario.expect_error + "', but the run resumed";
  } else if (scenario.expect_bit_identical && !divergence.empty()) {
    verdict.diagnosis = divergence;
  } else {
    verdict.passed = true;
  }
  for (const std::string& note : resumed->notes) {
    if (note.rfind("warning:", 0) == 0 && verdict.outcome.find("(with a warning)") == std::string::npos) {
      verdict.outcome += " (with a warning)";
    }
  }
  return verdict;
}

}  // namespace zerosim
