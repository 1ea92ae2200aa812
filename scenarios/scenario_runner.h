// Running one scenario: the uninterrupted reference, the faulted run (saves, the fault plan's
// disk faults and crash, a power loss, the operator's actions), the resume, and the verdict
// against the scenario's expectation, with a first-divergence diagnosis.
//
// The scenario file is the explorer's (scenario_file.h) plus:
//   "name", "description"
//   "fault_plan": a fault plan (sim/sim_world.h): costs, disk_faults, crash
//   "operator_actions": ["delete_swap_directory", "point_latest_at_partial_tag"]
//   "defects": ["scheduler_not_restored", ...] (zerosim defects lists the names)
//   "expect": {"bit_identical": true} or {"error": "a part of the refusal's message"}
// The first phase trains to explored_save_step saving every save_every steps (or stops at the
// plan's crash), then the power goes out (pending operations get seeded fates), the operator
// acts, and a restart at resume_world_size resumes from `latest` to `steps`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/crash_explorer.h"
#include "sim/sim_world.h"

namespace zerosim {

enum class OperatorAction { kDeleteSwapDirectory, kPointLatestAtPartialTag };

struct Scenario {
  std::string name;
  std::string description;
  CrashScenario run;  // options, world sizes, steps, save schedule, seed, defects
  FaultPlan fault_plan;
  std::vector<OperatorAction> operator_actions;
  bool expect_bit_identical = true;
  std::string expect_error;  // when set: the resume must be refused with this in its message
};

Result<Scenario> scenario_from_json(const nlohmann::json& document, const std::string& source_name);
Result<Scenario> read_scenario_file(const std::string& path);

struct ScenarioVerdict {
  std::string name;
  bool passed = false;
  std::string outcome;    // "resumed at step S, bit-identical to step K" or the refusal
  std::string diagnosis;  // the first divergence ("after load (step 4): scheduler") or why it failed
};

// `extra_defects` are switched on in addition to the scenario's own (zerosim run --defect).
Result<ScenarioVerdict> run_scenario(const Scenario& scenario, const DefectSet& extra_defects);

}  // namespace zerosim
