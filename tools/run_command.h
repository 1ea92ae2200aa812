// The scenario commands (scenarios/, reports/):
//   zerosim run FILE...        run scenario files
//   zerosim suite [DIR]        every *.json of DIR (default scenarios/library), sorted
//   zerosim replay FILE        run one scenario (a shrunk failure written by fuzz replays its
//                              diagnosis: the file carries its defects)
//   zerosim import-ds CONFIG   a scenario from a DeepSpeed config (scenarios/import_ds.h)
//   zerosim fuzz [--seed S] [--cases N] [--minutes M] [--shard I/N]
//                              generated scenarios (scenarios/generator.h); a failure is
//                              shrunk and written as a scenario file to replay (into
//                              fuzz-failures/ unless --failures-dir says where)
// Each prints one verdict line per scenario (or one JSON object with --json), a progress bar
// on a terminal, and with --junit FILE / --report-dir DIR writes the reports
// (reports/suite_report.h). --defect NAME (repeatable) switches a defect on for every run.
// Exit codes: 0 all passed, 1 a scenario failed, 2 bad input, 3 an environment error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "scenarios/import_ds.h"

namespace zerosim {

struct ReportFlags {
  std::vector<std::string> defect_names;
  std::string device = "cpu";  // --device: where every run of every scenario computes
  bool json = false;
  std::string junit_path;       // set: also write a JUnit XML report there
  std::string report_directory;  // set: report.json, report.html, report.md, junit.xml there
};

struct RunFlags {
  std::vector<std::string> scenario_paths;
  std::string suite_directory;  // zerosim suite: every *.json in it, sorted
  std::string command_name = "run";  // for the report's title and the replay commands
  ReportFlags report;
};

inline constexpr int64_t kDefaultFuzzCases = 20;

struct FuzzFlags {
  uint64_t seed = 1;
  // The campaign's bound: --cases alone runs that many cases (all shards together), --minutes
  // alone runs cases until the time is up, both stop at whichever comes first, neither runs
  // kDefaultFuzzCases.
  std::optional<int64_t> cases;
  std::optional<double> minutes;
  int64_t stop_after_failures = 0;  // > 0: stop starting cases once this many failed (mutation runs)
  std::string shard = "0/1";  // I/N: this process runs the cases whose index is I modulo N
  std::string failures_directory;  // shrunk failures go here (default: <report dir>/failures, or fuzz-failures)
  int64_t shrink_attempts = 200;
  ReportFlags report;
};

int run_scenarios_command(const RunFlags& flags);
// Writes the reports the flags ask for (--junit, --report-dir) and prints the summary line (or,
// with --json, the report's JSON object with `extra`'s keys added); the command's exit code:
// 0 every scenario passed, 1 one failed, 3 a report could not be written.
struct SuiteReport;
int finish_report(const ReportFlags& flags, const SuiteReport& report, const nlohmann::json& extra = {});
// zerosim import-ds: prints the scenario (or writes it to `output_path`); exit 2 on bad input.
int run_import_command(const ImportOptions& options, const std::string& output_path);
int run_fuzz_command(const FuzzFlags& flags);

// The scenario subcommands (run, suite, replay, fuzz, import-ds), as TrainCommands: the flags
// live in main() from parse to run.
struct ScenarioCommands {
  RunFlags run_flags, suite_flags, replay_flags;
  std::string replay_path;
  FuzzFlags fuzz_flags;
  ImportOptions import_options;
  std::string import_output;
  CLI::App* run = nullptr;
  CLI::App* suite = nullptr;
  CLI::Option* suite_directory = nullptr;
  CLI::App* replay = nullptr;
  CLI::App* fuzz = nullptr;
  CLI::App* import_ds = nullptr;
};
void add_scenario_commands(CLI::App& app, ScenarioCommands& commands);
// `program_path` (argv[0]) finds the library shipped with this binary, for `suite` without DIR.
std::optional<int> run_scenario_commands(ScenarioCommands& commands, const char* program_path);

}  // namespace zerosim
