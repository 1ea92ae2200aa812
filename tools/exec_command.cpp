#include "tools/exec_command.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "reports/report_file.h"
#include "reports/suite_report.h"

namespace zerosim {

namespace {

namespace fs = std::filesystem;

nlohmann::json replay_document(const ExecOptions& options, int64_t point, int64_t state) {
  return {{"zerosim_exec_replay", 1},  {"watch", options.watch},
          {"command", options.command}, {"resume_command", options.resume_command},
          {"seed", options.seed},       {"states_per_point", options.states_per_point},
          {"timeout_seconds", options.timeout_seconds}, {"crash_point", point},
          {"crash_state", state}};
}

int report_and_exit(const ExecFlags& flags, const ExecResult& result) {
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
    if (!result.state_log) {
      std::printf("exec: judged without a state log: refusals, crashes and timeouts only. A state log (ZEROSIM_STATE_LOG, "
                  "python/zerosim_state.py) would add lost work (a save that had returned, then vanished) and divergence "
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

int run_exec_replay_command(const std::string& replay_path) {
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
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zerosim exec replay: %s: %s\n", replay_path.c_str(), error.what());
    return 2;
  }
  flags.work_directory = fs::path(replay_path).parent_path().string() + "/replay";
  flags.jobs_given = true;  // one state: one job
  return run_exec_command(flags);
}

}  // namespace zerosim
