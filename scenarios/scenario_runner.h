// Running one scenario: the uninterrupted reference, the faulted run (saves, the fault plan's
// disk faults and crash, a power loss, the operator's actions), the resume, and the verdict
// against the scenario's expectation, with a first-divergence diagnosis.
//
// The scenario file is the explorer's (scenario_file.h) plus:
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
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/diagnosis.h"
#include "scenarios/reference_cache.h"
#include "sim/crash_explorer.h"
#include "faults/at_rest_damage.h"
#include "sim/sim_world.h"

namespace zerosim {

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

struct ScenarioVerdict {
  std::string name;
  std::string description;
  uint64_t seed = 0;
  bool passed = false;
  std::string outcome;    // "resumed at step S, bit-identical to step K" or the refusal
  std::string diagnosis;  // the first divergence ("after load (step 4): scheduler") or why it failed
  // When the resumed run diverged: where, and (for a component of the state) the element.
  std::optional<Divergence> divergence;
  std::optional<ElementDiagnosis> element;
  // For the reports' loss curves: the reference's loss at steps 1..steps, the resumed run's
  // from resumed_at + 1 on (empty when it was refused).
  std::vector<float> reference_losses;
  std::vector<float> resumed_losses;
  int64_t resumed_at = -1;
  std::string crash;              // what ended the first phase: "crash at engine.step_end@rank0#5", ...
  int64_t steps_before_crash = 0;  // steps the first phase completed
  std::vector<std::string> notes;  // the resumed run's notes (warnings, fallbacks)
  // Durability: the step of the newest save that returned (its `latest` was published) before
  // the crash (-1: none), and the damage done at rest ("" when none).
  int64_t committed_step = -1;
  std::vector<int64_t> committed_steps;  // every save that returned, in order
  std::string damage;
  // Per rule of the fault plan's disk_faults, in order: "fault rule 1 (*/rank-0*/..., write,
  // occurrence 3, lost_write): matched 5 times, fired 1". A rule that never fired fails the
  // scenario: it tested nothing.
  std::vector<std::string> fault_rule_counts;
  // A fault the scenario names never happened in the first phase (a rule, a crash point, the
  // power loss, the SIGTERM): the verdict fails without a resume, as a test that tested nothing.
  bool fault_never_happened = false;
  // The first rule that never fired (0-based; -1: none) and how many operations it matched.
  int64_t unfired_fault_rule = -1;
  int64_t unfired_fault_rule_matched = 0;
};

// The oracle, beyond the expectation: every disk fault rule, crash point, power loss and SIGTERM
// the scenario names must happen in its first phase, or the scenario fails naming the one that
// did not ("fault rule 2 (path, op, occurrence) never fired"). A resume that starts before the newest save that returned
// before the crash lost work, and fails (unless the resume asked for another tag, or at-rest
// damage to that checkpoint explains it in a warning); see AtRestDamage for damage.
// `extra_defects` are switched on in addition to the scenario's own (zerosim run --defect).
// A divergence in a component of the state is narrowed down to its first element by running
// the reference and the resume once more, capturing the full state at that step.
// With `cache`, the uninterrupted reference comes from it when an identical one already ran.
Result<ScenarioVerdict> run_scenario(const Scenario& scenario, const DefectSet& extra_defects,
                                     ReferenceCache* cache = nullptr);

}  // namespace zerosim
