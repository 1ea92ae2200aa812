// zerosim exec: the user's own training process under the power-loss harness
// (exec/exec_harness.h says what it does; exec/state_log.h the state-log contract).
//   zerosim exec --watch DIR [--watch DIR ...] [--resume-command LINE] [--crash-points N]
//                [--states-per-point K] [--seed S] [--timeout SEC] [--jobs N] [--work-dir DIR]
//                [--report-dir DIR] [--junit FILE] [--json] -- COMMAND [ARGS...]
//   zerosim exec replay FILE     one crash state again, from the file a failure wrote
// Exit codes: 0 every crash state passed, 1 one failed, 2 bad input, 3 exec cannot judge (the
// command failed uninterrupted, the tracer cannot run or cannot model what it did, the
// recording failed its self-check, nothing changed under the watched directories).
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "exec/exec_harness.h"
#include "tools/run_command.h"

namespace zerosim {

struct ExecFlags {
  ExecOptions options;
  std::string work_directory;  // default: zerosim-exec/ in the working directory
  bool jobs_given = false;     // --jobs on the command line (else: the CPUs available)
  ReportFlags report;
};

int run_exec_command(ExecFlags flags);
int run_exec_replay_command(const std::string& replay_path, const char* program_path);

// The `exec` and `exec replay` subcommands, as TrainCommands: they live in main() from parse to
// run. `command_argument` is the user's command line, passed verbatim (an empty argument is
// theirs to pass).
struct ExecCommands {
  ExecFlags flags;
  std::string replay_path;
  CLI::App* exec = nullptr;
  CLI::App* replay = nullptr;
  CLI::Option* command_argument = nullptr;
};
void add_exec_commands(CLI::App& app, ExecCommands& commands);
// `program_path` (argv[0]) finds the Python helpers shipped with this binary, for --hooks.
std::optional<int> run_exec_commands(ExecCommands& commands, const char* program_path);

}  // namespace zerosim
