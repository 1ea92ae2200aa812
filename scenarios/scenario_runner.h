// Running one scenario: the uninterrupted reference, the faulted run (saves, the fault plan's
// disk faults and crash, a power loss, the operator's actions), the resume (or a chain of them),
// and the verdict against the scenario's expectation, with a first-divergence diagnosis. The
// scenario file and what each key means: scenarios/scenario_file.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/diagnosis.h"
#include "scenarios/reference_cache.h"
#include "scenarios/scenario_file.h"

namespace zerosim {

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
