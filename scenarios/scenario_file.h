// The scenario files: their run part (CrashScenario, what `zerosim explore` reads: a run and the
// save whose crashes it explores), and the whole scenario `zerosim run` reads (Scenario, below:
// the faults, the operator's actions, the restarts and the expectations; scenario_runner.h runs
// it). A JSON object:
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

#include "faults/at_rest_damage.h"
#include "sim/crash_explorer.h"
#include "sim/sim_world.h"

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

// The scenario file of `zerosim run` is the run part plus:
//   "name", "description"
//   "fault_plan": a fault plan (sim/sim_world.h): costs, disk_faults, crash
//   "operator_actions": ["delete_swap_directory", "point_latest_at_partial_tag",
//       {"sigterm_at_step": 5},   the first phase gets SIGTERM in step 5 and saves on it
//                                 (zerosim train --save-on-signal), then exits
//       {"damage": "flip_bit", "file": "shard", "tag": "newest", "rank": 1, "bit": 4242}]
//                                 at-rest damage between the power loss and the restart (AtRestDamage)
//   "resume_changes": {"seed": 8, "dataset_size": 50, "model": "6,4,3", "frozen_parameters": [...]}:
//       what the operator changed for the restart (a change that breaks resume must be refused)
//   "frozen_parameters": ["layers.0.weight"]: parameters frozen by name (requires_grad=False)
//   "save_exclude_frozen_parameters": true: every save leaves their values out (DeepSpeed's
//       save_checkpoint(exclude_frozen_parameters=True)); a resume takes them from its model
//   "resume_save_every": 3: the restart saves too (into the same directory, every 3 steps and
//       at its end), as a resumed run does; afterwards `latest` must name a complete tag
//   "defects": ["scheduler_not_restored", ...] (zerosim defects lists the names)
//   "expect": {"bit_identical": true} or {"error": "a part of the refusal's message"}
//   "expect": {"resumed_at_step": 2} as well: the step the resume must start from
//   "expect": {"checkpoint": {"tags": ["global_step2"], "latest": "global_step2"}} as well: the
//       complete tags (in step order) and what `latest` names when the restart finds the disk
//       (after the power loss, the operator's actions and the damage); "latest": null, none
//   "restart_killed_after_step": 7: a chain of resumes: the first restart (saving every
//       resume_save_every steps, with the restart's load options and frozen set) is killed
//       after step 7 by a power loss, and a second restart resumes from what it saved; the
//       oracle judges the second
//   "restart_chain": [{"killed_after_step": 9, "save_every": 2, "load_optimizer_states": false,
//       "load_lr_scheduler_states": false, "load_module_only": false, "frozen_parameters": [...]}]:
//       one or two restarts before the judged one, each with its own load options and frozen
//       set (default: the run before it's), killed by a power loss after its step; the expected
//       run models each load where it happened (CheckpointPlan::modelled_loads)
//   "save_at_start": true: the first phase also saves its starting state (global_step0), before
//       any step, as DeepSpeed's save_checkpoint does when called before training
//   "resume_tag": "global_step2" (default "latest"): the tag the restart asks for
//   "power_loss": false: the first phase ends with the process gone and the machine up (a job
//       killed and restarted): no power loss, written data survives
//   "expect": {"no_checkpoint": "fresh_start" | "refusal"} as well: the defined outcome when the
//       crash came before any save returned and the restart finds no complete checkpoint
//   "resume_load_optimizer_states": false, "resume_load_lr_scheduler_states": false,
//   "resume_load_module_only": true: DeepSpeed's load_checkpoint options for the restart
//       (CheckpointLoadOptions); the expected run is then the reference up to the loaded step,
//       changed there as such a load changes a state (RankEngine::reset_as_loaded), and on
//       from it (a module-only load counts its steps from 0 again, to `steps`)
//   "resume_config": a DeepSpeed config (or its path) for the restart
//   "cause_class": "C", "catches": ["scheduler_not_restored"]: what the scenario stands for
// The first phase trains to explored_save_step saving every save_every steps (or stops at the
// plan's crash), then the power goes out (pending operations get seeded fates), the operator
// acts, and a restart at resume_world_size resumes from `latest` to `steps`.
struct Scenario {
  std::string name;
  std::string description;
  CrashScenario run;  // options, world sizes, steps, save schedule, seed, defects
  FaultPlan fault_plan;
  std::vector<OperatorAction> operator_actions;
  std::vector<AtRestDamage> damage;       // after the operator actions, in order
  std::optional<int64_t> sigterm_at_step;  // the first phase is stopped by SIGTERM in this step
  // The restart's run settings when the operator changed them (resume_changes): model, data, seed.
  std::optional<TrainingOptions> resume_settings;
  bool resume_changes_frozen = false;  // resume_changes names frozen_parameters
  int64_t resume_save_every = 0;  // > 0: the restart saves every this many steps
  bool expect_bit_identical = true;
  std::string expect_error;  // when set: the resume must be refused with this in its message
  int64_t expect_resumed_at_step = -1;  // when >= 0: the step the resume must start from
  std::string resume_tag = "latest";    // the tag the restart asks for
  bool save_at_start = false;           // the first phase saves global_step0 before any step
  // false: the first phase ends with the process gone but the machine up (a job killed and
  // restarted: written data survives, synced or not); true: a power loss (unsynced data is lost).
  bool power_loss = true;
  // When no save returned before the crash and the restart finds no complete checkpoint:
  // "fresh_start" (the restart trains from step 0, compared with the reference as a resume is),
  // "refusal" (the refusal passes); "" : that is a failure.
  std::string expect_no_checkpoint;
  // A chain of resumes: restarts before the judged one, in order. Each resumes from `latest`
  // (the first from resume_tag) with its own load options and frozen set, saves every
  // save_every steps, and is killed by a power loss after killed_after_step (in its own count:
  // a module-only load counts from 0). The judged restart then resumes from what they left.
  struct ChainedRestart {
    int64_t killed_after_step = 0;
    int64_t save_every = 1;
    CheckpointLoadOptions load;
    std::optional<std::vector<std::string>> frozen_parameters;  // unset: the run before it's
  };
  std::vector<ChainedRestart> restart_chain;
  // What the restart finds on the disk: the complete tags in step order, and `latest`'s tag
  // ("" when there is none). Checked when set.
  std::optional<std::vector<std::string>> expect_checkpoint_tags;
  std::optional<std::string> expect_latest;
  CheckpointLoadOptions resume_load;    // what the restart's load restores
  // The restart's DeepSpeed config when it differs from the first phase's (an operator who
  // changed the offload device, the sub-group size, ...); the batch arithmetic follows the
  // resume world size as without it.
  std::optional<ResolvedConfig> resume_config;
  std::string cause_class;           // the catalog's root-cause class (A..N) it stands for
  std::vector<std::string> catches;  // defects this scenario is built to catch (checked by the tests)
};

Result<Scenario> scenario_from_json(const nlohmann::json& document, const std::string& source_name);
Result<Scenario> read_scenario_file(const std::string& path);

// The restart's run options: the first phase's at the resume world size, the global batch kept
// and the accumulation following it; with a resume_config, that config's own train_batch_size
// and micro batch (the operator may change the batch, as `train --resume` allows with a warning).
Result<TrainingOptions> restart_options(const Scenario& scenario, const std::string& source);

}  // namespace zerosim
