// `zerosim exec`: the user's own training process under the power-loss harness.
//
// 1. The command runs once, uninterrupted, under the recorder (tools/recorder: an LD_PRELOAD
//    interposer), which records every operation it makes under the watched directories, with
//    the data written, and the lines it appends to its state log (the oracle's contract below).
// 2. Crash states are built from that recording alone, offline, as ALICE does: the recording is
//    replayed into SimDisk (the simulator's file-system model: unsynced data and directory
//    entries kept, dropped or torn at sector granularity, a rename undone without its directory
//    fsync) up to a crash point, and the pending operations there get the fates `explore` gives
//    (crash_states: every combination up to a bound, seeded beyond it).
// 3. For each crash state, the watched directories are laid out as that state on the real disk
//    and the resume runs (the command again, or --resume-command), appending its own state log.
// 4. The verdict per crash state: the resumed run reaches the last step and every step it ran
//    equals the uninterrupted run's line of that step (loss and every component, by name); it
//    did not start before the newest step whose line said "checkpoint": true before the crash
//    point (lost work the program believed durable); it did not exit non-zero (a refusal, named
//    by its stderr) or die of a signal (a crash).
//
// The state-log contract (the program's side; python/zerosim_state.py implements it): after each
// step, one JSON line {"step": N, "loss": X, "components": {NAME: HEX, ...}} appended to the file
// ZEROSIM_STATE_LOG names, with "checkpoint": true when that step's save has returned.
//
// The watched directories are the scratch: exec resets them to each crash state in turn and,
// at the end, to what they held before the run (their content then is snapshotted first).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "scenarios/scenario_runner.h"
#include "sim/fs_recording.h"

namespace zerosim {

struct ExecOptions {
  std::vector<std::string> watch;        // directories (made absolute and real by the harness)
  std::vector<std::string> command;      // argv of the uninterrupted run (and of the resume)
  std::string resume_command;            // a shell command line for the resume ("": `command`)
  std::string recorder_library;          // libzerosim_record.so
  std::string work_directory;            // the recording, the state logs, the commands' output
  int64_t crash_points = 0;              // 0: every operation; N: a seeded sample of N of them
  int64_t states_per_point = 8;          // crash_states' bound
  uint64_t seed = 1;
  double timeout_seconds = 600;          // per run of the command
  // Replay: only this crash point (index into the operations) and state (index at that point).
  std::optional<int64_t> only_point;
  std::optional<int64_t> only_state;
};

// One line of a state log.
struct StateLine {
  int64_t step = 0;
  double loss = 0;
  std::string loss_text;  // as written, for the report
  std::map<std::string, std::string> components;
  bool checkpoint = false;
};

// Parses a state log; a malformed line is kInvalidArgument naming the file and line.
Result<std::vector<StateLine>> parse_state_log(const std::string& text, const std::string& source);

struct ExecCrashVerdict {
  int64_t point = 0;        // crash after this many recorded operations (0: before the first)
  int64_t state = 0;        // index of the crash state at that point
  std::string operation;    // the last operation before the crash ("write /ckpt/a [0, 4096)")
  std::string fates;        // describe_state
  ScenarioVerdict verdict;  // for the reports: outcome, diagnosis, losses, resumed_at, committed_step
};

struct ExecResult {
  int64_t operations = 0;     // recorded operations under the watched directories
  int64_t crash_points = 0;   // points tried
  int64_t crash_states = 0;   // states tried
  std::vector<ExecCrashVerdict> verdicts;
  std::vector<StateLine> reference;
  double reference_seconds = 0;        // the uninterrupted run
  double mean_build_state_seconds = 0;  // building one crash state from the recording
  std::string recording_path;
  int failed() const;
};

// Runs the whole exec (steps 1-4). A command that cannot run uninterrupted, or a recording
// that cannot be replayed, is an error (the CLI's exit 3); a failing crash state is a verdict.
Result<ExecResult> run_exec(const ExecOptions& options);

}  // namespace zerosim
