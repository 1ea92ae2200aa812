// The scenario file (minimal form, extended by the [scenarios] issue): a JSON object that
// names a run and the save whose crashes `zerosim explore` explores.
//
//   {"model": "6,5,3", "world_size": 4, "resume_world_size": 2, "precision": "fp16",
//    "micro_batch_size": 1, "gradient_accumulation_steps": 1, "seed": 77, "dataset_size": 97,
//    "save_every": 2, "explored_save_step": 4, "steps": 6, "crash_state_bound": 64,
//    "config": { ...a DeepSpeed config, "auto" filled from the keys above... }}
//
// Every key but "model" has a default (see kScenarioDefaults in the .cpp); "config" defaults
// to ZeRO-3 with AdamW and WarmupLR. Paths in the config (nvme_path) are on the simulated
// disk. Unknown keys are refused with the nearest valid name; every error names the key.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sim/crash_explorer.h"

namespace zerosim {

Result<CrashScenario> crash_scenario_from_json(const nlohmann::json& document, const std::string& source_name);
Result<CrashScenario> read_crash_scenario_file(const std::string& path);

}  // namespace zerosim
