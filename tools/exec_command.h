// zerosim exec: the user's own training process under the power-loss harness
// (scenarios/exec_harness.h says what it does and the state-log contract).
//   zerosim exec --watch DIR [--watch DIR ...] [--resume-command LINE] [--crash-points N]
//                [--states-per-point K] [--seed S] [--timeout SEC] [--work-dir DIR]
//                [--report-dir DIR] [--junit FILE] [--json] -- COMMAND [ARGS...]
//   zerosim exec replay FILE     one crash state again, from the file a failure wrote
// Exit codes: 0 every crash state passed, 1 one failed, 2 bad input, 3 the command could not
// run uninterrupted (or the recorder is missing).
#pragma once

#include <string>

#include "scenarios/exec_harness.h"
#include "tools/run_command.h"

namespace zerosim {

struct ExecFlags {
  ExecOptions options;
  std::string work_directory;  // default: zerosim-exec/ in the working directory
  ReportFlags report;
};

int run_exec_command(ExecFlags flags, const std::string& program_path);
int run_exec_replay_command(const std::string& replay_path, const std::string& program_path);

}  // namespace zerosim
