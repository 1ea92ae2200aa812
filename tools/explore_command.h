// `zerosim explore SCENARIO.json [--json] [--defect NAME]... [--junit FILE] [--report-dir DIR]`: the exhaustive crash exploration of one scenario's
// save (sim/crash_explorer.h). Exit 0 when every crash state passed or was refused clearly,
// 1 when any failed, 2 for a bad scenario file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace zerosim {

struct ExploreFlags {
  std::string scenario_path;
  bool json = false;
  std::string real_kill_directory;  // set: run each crash point as a child process SIGKILLed on real files
  std::vector<std::string> defect_names;  // switched on for every run of the exploration
  std::string junit_path;                 // one testcase per crash point
  std::string report_directory;           // report.html/json/md and junit.xml, one entry per crash point
  std::string device = "cpu";             // --device: where every run computes
};

int run_explore_command(const ExploreFlags& flags);

// The `explore` subcommand, as TrainCommands: it lives in main() from parse to run.
struct ExploreCommand {
  ExploreFlags flags;
  CLI::App* command = nullptr;
};
void add_explore_command(CLI::App& app, ExploreCommand& command);
std::optional<int> run_explore_commands(const ExploreCommand& command);

}  // namespace zerosim
