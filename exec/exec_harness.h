// `zerosim exec`: the user's own training process under the power-loss harness.
//
// 1. Record. The command runs once, uninterrupted, under the system-call tracer
//    (exec/syscall_tracer.h), which records every operation it and its children make under the
//    watched directories, with the bytes written, and the lines it appends to its state log.
//    What the recording cannot stand for (a file operation through an io_uring, a writable
//    shared mapping, hard links ...)
//    ends exec here: it refuses to judge rather than guess.
// 2. Self-check. The recording replayed with every write kept must give exactly the
//    directories the program left (exec/crash_state_model.h); otherwise exec refuses.
// 3. Crash states, offline, as ALICE builds them: the recording replayed into SimDisk up to a
//    crash point (after each operation that changes the model, or a seeded sample), and the
//    pending operations there given the fates `explore` gives (crash_states).
// 4. Resume each. The watched directories are laid out as the crash state and the resume runs
//    (the command again, or --resume-command). With jobs > 1, each resume runs in a private
//    mount namespace with its crash state bound over the watched paths, side by side; a state
//    in which a watched directory does not exist at all runs afterwards, in place, and so does
//    every state whose resume refused or crashed beside others: its verdict is the one it gets
//    alone (resumes side by side share what lies outside the watched directories).
// 5. Judge (exec/state_log.h): against the uninterrupted run's state log, or without one on
//    what needs none (refusals, crashes, timeouts).
//
// The watched directories are the scratch: exec lays out each crash state there and, at the
// end, restores what they held before the run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/state_log.h"
#include "scenarios/scenario_runner.h"

namespace zerosim {

struct ExecOptions {
  std::vector<std::string> watch;    // directories (made absolute and real by the harness)
  std::vector<std::string> command;  // argv of the uninterrupted run (and of the resume)
  std::string resume_command;        // a shell command line for the resume ("": `command`)
  std::string work_directory;        // the recording, the state logs, the commands' output
  int64_t crash_points = 0;          // 0: every operation; N: a seeded sample of N of them
  // Also crash exactly where each save returned (right before the state line that said
  // "checkpoint": true): where losing a save is lost work the program believed durable.
  bool at_saves = false;
  int64_t states_per_point = 8;      // crash_states' bound
  uint64_t seed = 1;
  double timeout_seconds = 600;      // per run of the command
  int64_t jobs = 1;                  // resumes side by side (> 1: in private mount namespaces)
  ComponentSelection components;     // which state-log components are judged (all by default)
  // "torch": every Python process of the command writes the state log itself, with no edit of
  // the user's files (python/zerosim_torch_hook.py, loaded through `hooks_directory`'s
  // sitecustomize.py, which exec puts first on PYTHONPATH). "": the program writes its own.
  std::string hooks;
  std::string hooks_directory;
  // Replay: only this crash point (index into the operations) and state (index at that point).
  std::optional<int64_t> only_point;
  std::optional<int64_t> only_state;
};

struct ExecCrashVerdict {
  int64_t point = 0;        // crash after this many recorded operations (0: before the first)
  int64_t state = 0;        // index of the crash state at that point
  std::string operation;    // the last operation before the crash ("write /ckpt/a [0, 4096)")
  std::string fates;        // describe_state
  ScenarioVerdict verdict;  // for the reports: outcome, diagnosis, losses, resumed_at, committed_step
};

struct ExecResult {
  int64_t operations = 0;     // recorded operations that change the watched directories
  int64_t records = 0;        // records in the recording (closes and state lines too)
  int64_t processes = 0;      // processes the tracer followed
  int64_t crash_points = 0;   // points tried
  int64_t crash_states = 0;   // states tried
  int64_t jobs = 1;           // resumes run side by side
  // States whose resume refused or crashed beside others and passed alone (the final verdict):
  // the command shares something outside the watched directories between runs.
  int64_t passed_alone = 0;
  bool state_log = true;      // false: judged without a state log
  std::vector<ExecCrashVerdict> verdicts;  // in the order of (point, state), whatever `jobs`
  std::vector<StateLine> reference;
  double reference_seconds = 0;         // the uninterrupted run, traced
  double resume_seconds = 0;            // every resume (and capture) of the crash states
  double mean_build_state_seconds = 0;  // building one crash state from the recording
  std::string recording_path;
  int failed() const;
};

// Runs the whole exec. kInvalidArgument: bad options. Another error: exec cannot judge (the
// command failed uninterrupted, the tracer could not run or cannot model what the command
// did, the recording failed its self-check, nothing to crash); a failing crash state is a
// verdict, not an error.
Result<ExecResult> run_exec(const ExecOptions& options);

// The CPUs this process may run on (the default of --jobs).
int64_t available_cpus();

}  // namespace zerosim
