#include "tools/exec_command.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "reports/report_file.h"
#include "reports/suite_report.h"
#include "tools/install_paths.h"

namespace zerosim {

namespace {

namespace fs = std::filesystem;

nlohmann::json replay_document(const ExecOptions& options, int64_t point, int64_t state) {
  return {{"zerosim_exec_replay", 1},  {"watch", options.watch},
          {"command", options.command}, {"resume_command", options.resume_command},
          {"seed", options.seed},       {"states_per_point", options.states_per_point},
          {"timeout_seconds", options.timeout_seconds}, {"crash_point", point},
          {"crash_state", state},       {"hooks", options.hooks},
          {"components", options.components.only},
          {"ignored_components", options.components.ignored}};
}

// With --hooks, the hooks shipped with this binary (python/hooks/); false, said on stderr, when
// they are missing.
bool find_hooks_directory(ExecOptions& options, const char* program_path, const char* command) {
  if (options.hooks.empty()) return true;
  Result<std::string> helpers = shipped_python_directory(program_path);
  if (!helpers.ok()) {
    std::fprintf(stderr, "%s: --hooks %s: %s\n", command, options.hooks.c_str(), helpers.status().message().c_str());
    return false;
  }
  options.hooks_directory = *helpers + "/hooks";
  return true;
}

int report_and_exit(const ExecFlags& flags, const ExecResult& result) {
  const std::string components_judged = flags.options.components.describe();  // "": every one
  SuiteReport report;
  std::string command;
  for (const std::string& part : flags.options.command) command += (command.empty() ? "" : " ") + part;
  report.title = "zerosim exec -- " + command;
  for (const ExecCrashVerdict& crash : result.verdicts) {
    ReportedScenario entry;
    entry.verdict = crash.verdict;
    if (!crash.verdict.passed) {
      const std::string replay = flags.options.work_directory + "/failure-" + std::to_string(crash.point) + "-" +
                                 std::to_string(crash.state) + ".json";
      if (Status written = write_report_file(replay, json_text(replay_document(flags.options, crash.point, crash.state)) + "\n",
                                             "replay file");
          !written.ok()) {
        std::fprintf(stderr, "zerosim exec: %s\n", written.to_string().c_str());
        return 3;
      }
      entry.file = replay;
      entry.replay_command = "zerosim exec replay " + replay;
    }
    if (!flags.report.json) {
      std::printf("%s  %s: %s%s\n", crash.verdict.passed ? "PASS" : "FAIL", crash.verdict.name.c_str(),
                  crash.verdict.outcome.c_str(),
                  crash.verdict.passed ? "" : ("\n      " + crash.verdict.diagnosis + "\n      state: " + crash.fates +
                                               "\n      replay: " + entry.replay_command).c_str());
    }
    report.scenarios.push_back(std::move(entry));
  }
  if (!flags.report.json) {
    const int failed = result.failed();
    std::printf("exec: %lld operation(s) recorded under the watched directories, %lld crash point(s), %lld crash state(s): "
                "%lld passed, %d failed\n",
                static_cast<long long>(result.operations), static_cast<long long>(result.crash_points),
                static_cast<long long>(result.crash_states), static_cast<long long>(result.crash_states - failed), failed);
    std::printf("exec: %lld process(es) traced, %lld record(s); the uninterrupted run (traced) %.3f s; building a crash "
                "state %.3f ms on average; the resumes %.3f s with %lld job(s)\n",
                static_cast<long long>(result.processes), static_cast<long long>(result.records), result.reference_seconds,
                result.mean_build_state_seconds * 1e3, result.resume_seconds, static_cast<long long>(result.jobs));
    if (result.passed_alone > 0) {
      std::printf("exec: %lld crash state(s) failed beside other resumes and passed alone (their verdict): the command "
                  "shares a path outside the watched directories between runs; watch it too, or use --jobs 1\n",
                  static_cast<long long>(result.passed_alone));
    }
    if (!components_judged.empty()) std::printf("exec: state-log components %s\n", components_judged.c_str());
    if (!result.state_log) {
      std::printf("exec: judged without a state log: refusals, crashes and timeouts only. A state log (ZEROSIM_STATE_LOG, "
                  "python/zerosim_state) would add lost work (a save that had returned, then vanished) and divergence "
                  "(each resumed step against the uninterrupted run)\n");
    }
  }
  return finish_report(flags.report, report,
                       {{"operations", result.operations},
                        {"crash_points", result.crash_points},
                        {"crash_states", result.crash_states},
                        {"reference_seconds", result.reference_seconds},
                        {"mean_build_state_seconds", result.mean_build_state_seconds},
                        {"resume_seconds", result.resume_seconds},
                        {"jobs", result.jobs},
                        {"passed_alone", result.passed_alone},
                        {"processes", result.processes},
                        {"records", result.records},
                        {"state_log", result.state_log},
                        {"components_judged", components_judged.empty() ? std::string("all") : components_judged},
                        {"recording", result.recording_path}});
}

}  // namespace

int run_exec_command(ExecFlags flags) {
  flags.options.work_directory = flags.work_directory.empty() ? "zerosim-exec" : flags.work_directory;
  if (!flags.jobs_given) {
    // The default uses every CPU where namespaces are permitted, and one job where not.
    flags.options.jobs = available_cpus();
    if (flags.options.jobs > 1) {
      if (Status namespaces = check_private_namespaces(); !namespaces.ok()) {
        std::fprintf(stderr, "zerosim exec: resuming one crash state at a time: %s\n", namespaces.message().c_str());
        flags.options.jobs = 1;
      }
    }
  }
  Result<ExecResult> result = run_exec(flags.options);
  if (!result.ok()) {
    std::fprintf(stderr, "zerosim exec: %s\n", result.status().to_string().c_str());
    return result.status().code() == StatusCode::kInvalidArgument ? 2 : 3;
  }
  return report_and_exit(flags, *result);
}

int run_exec_replay_command(const std::string& replay_path, const char* program_path) {
  std::ifstream file(replay_path);
  if (!file) {
    std::fprintf(stderr, "zerosim exec replay: %s: cannot be opened\n", replay_path.c_str());
    return 2;
  }
  const nlohmann::json document = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  ExecFlags flags;
  try {
    if (document.is_discarded() || !document.is_object() || !document.contains("zerosim_exec_replay")) {
      throw std::runtime_error("not a replay file of zerosim exec");
    }
    flags.options.watch = document.at("watch").get<std::vector<std::string>>();
    flags.options.command = document.at("command").get<std::vector<std::string>>();
    flags.options.resume_command = document.at("resume_command").get<std::string>();
    flags.options.seed = document.at("seed").get<uint64_t>();
    flags.options.states_per_point = document.at("states_per_point").get<int64_t>();
    flags.options.timeout_seconds = document.at("timeout_seconds").get<double>();
    flags.options.only_point = document.at("crash_point").get<int64_t>();
    flags.options.only_state = document.at("crash_state").get<int64_t>();
    if (document.contains("hooks")) flags.options.hooks = document.at("hooks").get<std::string>();
    // Written since the components could be chosen; a file without them judged every one.
    if (document.contains("components")) {
      flags.options.components.only = document.at("components").get<std::vector<std::string>>();
    }
    if (document.contains("ignored_components")) {
      flags.options.components.ignored = document.at("ignored_components").get<std::vector<std::string>>();
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zerosim exec replay: %s: %s\n", replay_path.c_str(), error.what());
    return 2;
  }
  flags.work_directory = fs::path(replay_path).parent_path().string() + "/replay";
  flags.jobs_given = true;  // one state: one job
  if (!find_hooks_directory(flags.options, program_path, "zerosim exec replay")) return 3;
  return run_exec_command(flags);
}

void add_exec_commands(CLI::App& app, ExecCommands& commands) {
  ExecFlags& exec_flags = commands.flags;
  CLI::App* exec = app.add_subcommand(
      "exec", "Your own training command under the power-loss harness: record it once, then resume it from every crash "
              "state of its file operations and compare with the uninterrupted run (zerosim exec -- COMMAND ...)");
  exec->add_option("--watch", exec_flags.options.watch,
                   "A directory the command checkpoints into (repeatable; reset to each crash state, restored at the end)");
  exec->add_option("--resume-command", exec_flags.options.resume_command,
                   "Shell command line of the resume (default: the command again)");
  exec->add_option("--crash-points", exec_flags.options.crash_points,
                   "Try this many crash points, a seeded sample (default 0: after every operation)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  exec->add_option("--states-per-point", exec_flags.options.states_per_point,
                   "Crash states per point: every combination of the pending operations' fates up to this bound, seeded beyond")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  exec->add_option("--seed", exec_flags.options.seed, "Seed of the sample and of the fates beyond the bound");
  exec->add_option("--timeout", exec_flags.options.timeout_seconds, "Seconds each run of the command may take")
      ->check(CLI::Range(1e-3, 1e7));
  exec->add_flag("--at-saves", exec_flags.options.at_saves,
                 "Also crash right where each save returned (before each state-log line with \"checkpoint\": true)");
  exec->add_option("--jobs", exec_flags.options.jobs,
                   "Crash states resumed side by side, each in a private mount namespace (default: the CPUs available; "
                   "1: one at a time, in place)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  exec->add_option("--work-dir", exec_flags.work_directory,
                   "The recording, the state logs, the outputs and the replay files (default zerosim-exec/)");
  exec->add_option("--junit", exec_flags.report.junit_path, "Also write a JUnit XML report (a testcase per crash state)");
  exec->add_option("--report-dir", exec_flags.report.report_directory,
                   "Write report.html, report.json, report.md and junit.xml into DIR");
  exec->add_option("--hooks", exec_flags.options.hooks,
                   "torch: every Python process of the command writes the state log itself (after each optimizer "
                   "step: loss, parameters, optimizer, schedulers, scaler, generators; saves marked), no edit of "
                   "the script; see docs/exec.md for what it cannot see")
      ->check(CLI::IsMember({"torch"}));
  exec->add_option("--components", exec_flags.options.components.only,
                   "Judge only these state-log components (comma-separated names; default: every one the "
                   "uninterrupted run logs)")
      ->delimiter(',');
  exec->add_option("--ignore-component", exec_flags.options.components.ignored,
                   "Do not judge this state-log component (repeatable): one the program itself does not make "
                   "deterministic, such as a generator it never seeds; the report says which were left out");
  exec->add_flag("--json", exec_flags.report.json, "Print one JSON object");
  exec->add_option("command", exec_flags.options.command, "The training command and its arguments (after --)");
  commands.exec = exec;
  commands.command_argument = exec->get_option("command");
  commands.replay = exec->add_subcommand("replay", "Run one crash state again, from a failure's replay file");
  commands.replay->add_option("file", commands.replay_path, "failure-P-S.json from the work directory")->required();
}

std::optional<int> run_exec_commands(ExecCommands& commands, const char* program_path) {
  if (commands.replay->parsed()) return run_exec_replay_command(commands.replay_path, program_path);
  if (commands.exec->parsed()) {
    commands.flags.jobs_given = commands.exec->count("--jobs") > 0;
    if (!find_hooks_directory(commands.flags.options, program_path, "zerosim exec")) return 3;
    return run_exec_command(commands.flags);
  }
  return std::nullopt;
}

}  // namespace zerosim
