// The oracle of `zerosim exec`: the program's state log, and the verdict on one resume.
//
// The state-log contract (the program's side; python/zerosim_state writes it): after each
// step, one JSON line {"step": N, "loss": X, "components": {NAME: HEX_DIGEST, ...}} appended to
// the file ZEROSIM_STATE_LOG names, with "checkpoint": true once that step's save has returned.
// With ZEROSIM_CAPTURE_STEP set, the full state after that step as safetensors at
// ZEROSIM_CAPTURE_FILE, from which the first differing element is named.
//
// A resume passes when it reaches the last step and every step it ran equals the uninterrupted
// run's line for that step (the loss's bits and every component, by name), and it did not
// start before the newest step whose line said "checkpoint": true before the crash (lost work).
// Without a state log, what needs none is still judged: a resume that exits non-zero (a
// refusal), dies of a signal (a crash), or runs past the timeout fails; one that completes
// passes, with lost work and divergence left unjudged (and said so).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/process.h"
#include "scenarios/scenario_runner.h"

namespace zerosim {

// One line of a state log.
struct StateLine {
  int64_t step = 0;
  double loss = 0;
  std::string loss_text;  // as written, for the report
  std::map<std::string, std::string> components;
  bool checkpoint = false;
};

// Which components of the state log are judged (`zerosim exec --components`, `--ignore-component`):
// every one the uninterrupted run logs, or only those listed, less those ignored. A component
// that is not deterministic in the program itself (a generator seeded from the OS) can never
// match across processes: ignoring it says so in the report instead of failing every resume.
struct ComponentSelection {
  std::vector<std::string> only;     // empty: every component
  std::vector<std::string> ignored;
  bool judged(const std::string& name) const;
  // kInvalidArgument when a name is in both lists, or is not a component of `logged` (the
  // uninterrupted run's first line), naming the components it has.
  Status check_against(const StateLine& logged) const;
  // "" when every component is judged; else "judged: a, b" or "not judged: c".
  std::string describe() const;
};

// Parses a state log; a malformed line is kInvalidArgument naming the file and line.
Result<std::vector<StateLine>> parse_state_log(const std::string& text, const std::string& source);

// The verdict of one resume against the reference. `reference` empty: judged without a state
// log. `durable_step`: the newest step marked "checkpoint": true before the crash (-1: none).
// `diverged_step` is set to the step whose loss or state first differed (0: none), for a
// capture: a loss that differs first comes from a state that already differed at the load, and
// the capture after that step names an element of it.
ScenarioVerdict judge_resume(const std::vector<StateLine>& reference, int64_t durable_step,
                             const ProcessOutcome& outcome, const Result<std::vector<StateLine>>& resumed,
                             const ComponentSelection& selection, int64_t* diverged_step);

// The first tensor (by name) and element where two captures (safetensors files) differ; ""
// when they are equal.
Result<std::string> first_differing_element(const std::string& expected_path, const std::string& found_path);

}  // namespace zerosim
