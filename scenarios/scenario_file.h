// The scenario file's run part (scenario_runner.h adds the faults, actions and expectations):
// a JSON object that names a run and the save whose crashes `zerosim explore` explores.
//
//   {"model": "6,5,3", "world_size": 4, "resume_world_size": 2, "precision": "fp16",
//    "micro_batch_size": 1, "gradient_accumulation_steps": 1, "seed": 77, "dataset_size": 97,
//    "save_every": 2, "explored_save_step": 4, "steps": 6, "crash_state_bound": 64,
//    "config": { ...a DeepSpeed config, "auto" filled from the keys above... }}
//
// "config" may also be the path of a DeepSpeed config file, relative to the scenario file
// (used verbatim). Errors name the key and, for a file, its line ("s.json:12: world_size: ...").
//
// Every key but "model" has a default (see kScenarioDefaults in the .cpp); "config" defaults
// to ZeRO-3 with AdamW and WarmupLR. Paths in the config (nvme_path) are on the simulated
// disk. Unknown keys are refused with the nearest valid name; every error names the key.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sim/crash_explorer.h"

namespace zerosim {

// The whole text of a file a scenario command reads (`what` names it in the error: "scenario
// file", "DeepSpeed config"): kNotFound when it cannot be opened, kIoError when a read fails.
Result<std::string> read_text_file(const std::string& path, const std::string& what);

// A DeepSpeed config file named in a scenario ("config": "ds_config.json"), relative to the
// scenario file's directory.
Result<nlohmann::json> read_config_beside(const std::string& scenario_path, const std::string& config_path);

// Turns "<source>: <key path>: what" into "<source>:<line>: <key path>: what", the line being
// where the key path's innermost key appears in the file's text (unchanged when not found).
std::string with_line_number(const std::string& text, const std::string& source_name, const std::string& message);

Result<CrashScenario> crash_scenario_from_json(const nlohmann::json& document, const std::string& source_name);
Result<CrashScenario> read_crash_scenario_file(const std::string& path);

}  // namespace zerosim
