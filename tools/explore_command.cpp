#include "tools/explore_command.h"

#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/env/defects.h"
#include "reports/report_file.h"
#include "reports/suite_report.h"
#include "scenarios/scenario_file.h"
#include "sim/crash_explorer.h"
#include "sim/real_kill.h"
#include "tools/train_command.h"

namespace zerosim {

int run_explore_command(const ExploreFlags& flags) {
  Result<CrashScenario> scenario = read_crash_scenario_file(flags.scenario_path);
  if (!scenario.ok()) {
    std::fprintf(stderr, "zerosim: explore: %s\n", scenario.status().to_string().c_str());
    return scenario.status().code() == StatusCode::kIoError ? 3 : 2;
  }
  for (const std::string& name : flags.defect_names) {
    std::optional<Defect> defect = defect_from_name(name);
    if (!defect) {
      std::fprintf(stderr, "zerosim: --defect %s: unknown defect (zerosim defects lists them)\n", name.c_str());
      return 2;
    }
    scenario->defects.enable(*defect);
  }
  Result<ComputeDevice> compute = compute_device_named(flags.device);
  if (!compute.ok()) {
    std::fprintf(stderr, "zerosim: explore: %s\n", compute.status().to_string().c_str());
    return exit_code_for(compute.status());
  }
  scenario->options.compute = std::move(compute).value();
  Result<ExplorationResult> result = flags.real_kill_directory.empty()
                                         ? explore_save_crashes(*scenario)
                                         : explore_with_real_kills(*scenario, flags.real_kill_directory);
  if (!result.ok()) {
    std::fprintf(stderr, "zerosim: explore failed: %s\n", result.status().to_string().c_str());
    return exit_code_for(result.status());
  }
  if (flags.json) {
    nlohmann::json failures = nlohmann::json::array();
    for (const CrashCaseFailure& failure : result->failures) {
      failures.push_back({{"crash_point", failure.crash_point}, {"crash_state", failure.crash_state},
                          {"reason", failure.reason}});
    }
    const nlohmann::json output = {{"crash_points", result->crash_points}, {"crash_states", result->crash_states},
                                   {"passed", result->passed},             {"refused", result->refused},
                                   {"failed", result->failed},             {"failures", failures},
                                   {"explored_points", result->explored_points},
                                   {"trace_hash", result->reference_trace_hash}};
    std::printf("%s\n", json_text(output).c_str());
  } else {
    std::printf("zerosim explore %s: save at step %lld by %d ranks, resumed at %d ranks\n", flags.scenario_path.c_str(),
                static_cast<long long>(scenario->explored_save_step), scenario->options.world_size,
                scenario->resume_world_size > 0 ? scenario->resume_world_size : scenario->options.world_size);
    const std::string states_note =
        flags.real_kill_directory.empty()
            ? "at most " + std::to_string(scenario->crash_state_bound) + " per point"
            : "one per point: a SIGKILLed child on real files, whose page cache survives";
    std::printf("crash points %lld, crash states %lld (%s): passed %lld, refused %lld, failed %lld\n",
                static_cast<long long>(result->crash_points), static_cast<long long>(result->crash_states),
                states_note.c_str(), static_cast<long long>(result->passed), static_cast<long long>(result->refused),
                static_cast<long long>(result->failed));
    for (const CrashCaseFailure& failure : result->failures) {
      std::printf("FAILED at %s: %s\n  crash state: %s\n", failure.crash_point.c_str(), failure.reason.c_str(),
                  failure.crash_state.c_str());
    }
    std::printf("trace hash %s (determinism self-check passed)\n", result->reference_trace_hash.c_str());
  }
  if (!flags.junit_path.empty() || !flags.report_directory.empty()) {
    // One entry per crash point: its crash states' tally, and its first failure.
    SuiteReport report;
    report.title = "zerosim explore " + flags.scenario_path;
    report.defects = flags.defect_names;
    std::string replay = "zerosim explore " + flags.scenario_path;
    for (const std::string& name : flags.defect_names) replay += " --defect " + name;
    if (!flags.real_kill_directory.empty()) replay += " --real-kill " + flags.real_kill_directory;
    for (const CrashPointTally& tally : result->per_point) {
      ReportedScenario entry;
      entry.file = flags.scenario_path;
      entry.replay_command = replay;
      entry.verdict.name = "crash at " + tally.crash_point;
      entry.verdict.seed = scenario->seed;
      entry.verdict.passed = tally.failed == 0;
      entry.verdict.crash = "crash at " + tally.crash_point;
      entry.verdict.outcome = std::to_string(tally.crash_states) + " crash state(s): " + std::to_string(tally.passed) +
                              " resumed bit-identically, " + std::to_string(tally.refused) + " refused (no complete checkpoint), " +
                              std::to_string(tally.failed) + " failed";
      for (const CrashCaseFailure& failure : result->failures) {
        if (failure.crash_point == tally.crash_point && entry.verdict.diagnosis.empty()) {
          entry.verdict.diagnosis = failure.reason + " (crash state: " + failure.crash_state + ")";
        }
      }
      if (!entry.verdict.passed && entry.verdict.diagnosis.empty()) entry.verdict.diagnosis = "(the exploration keeps the first 8 failures; this point's are not among them)";
      report.scenarios.push_back(std::move(entry));
    }
    Status written = flags.junit_path.empty()
                         ? Status()
                         : write_junit_file(flags.junit_path, report.title, report_junit_cases(report));
    if (written.ok() && !flags.report_directory.empty()) written = write_report_directory(flags.report_directory, report);
    if (!written.ok()) {
      std::fprintf(stderr, "zerosim: explore: %s\n", written.to_string().c_str());
      return 3;
    }
  }
  return result->failed == 0 ? 0 : 1;
}

void add_explore_command(CLI::App& app, ExploreCommand& command) {
  ExploreFlags& explore_flags = command.flags;
  CLI::App* explore = app.add_subcommand(
      "explore", "Crash-explore one save of a scenario on the simulated disk: every crash point, every crash state");
  command.command = explore;
  explore->add_option("scenario", explore_flags.scenario_path, "Scenario JSON file")->required();
  explore->add_option("--real-kill", explore_flags.real_kill_directory,
                      "Instead of SimDisk: run each crash point as a child process on real files under DIR, "
                      "killed with SIGKILL at the point, then resume and compare");
  explore->add_option("--defect", explore_flags.defect_names, "Switch a named defect on for every run (repeatable)");
  explore->add_option("--junit", explore_flags.junit_path, "Also write a JUnit XML report (a testcase per crash point)");
  explore->add_option("--report-dir", explore_flags.report_directory,
                      "Write report.html, report.json, report.md and junit.xml (an entry per crash point) into DIR");
  explore->add_flag("--json", explore_flags.json,
                    "Print one JSON object: crash_points, crash_states, passed, refused, failed, failures");
  add_device_flag(*explore, explore_flags.device);

}

std::optional<int> run_explore_commands(const ExploreCommand& command) {
  if (command.command->parsed()) return run_explore_command(command.flags);
  return std::nullopt;
}

}  // namespace zerosim
