#include "tools/run_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/env/defects.h"
#include "reports/junit.h"
#include "scenarios/scenario_runner.h"
#include "tools/train_command.h"

namespace zerosim {

int run_scenarios_command(const RunFlags& flags) {
  std::vector<std::string> paths = flags.scenario_paths;
  if (!flags.suite_directory.empty()) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(flags.suite_directory, error)) {
      if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
    }
    if (error) {
      std::fprintf(stderr, "zerosim: suite %s: %s\n", flags.suite_directory.c_str(), error.message().c_str());
      return 2;
    }
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) {
      std::fprintf(stderr, "zerosim: suite %s: no scenario (*.json) in it\n", flags.suite_directory.c_str());
      return 2;
    }
  }
  DefectSet defects;
  for (const std::string& name : flags.defect_names) {
    std::optional<Defect> defect = defect_from_name(name);
    if (!defect) {
      std::fprintf(stderr, "zerosim: --defect %s: unknown defect (zerosim defects lists them)\n", name.c_str());
      return 2;
    }
    defects.enable(*defect);
  }
  nlohmann::json results = nlohmann::json::array();
  std::vector<JunitCase> junit_cases;
  std::string defect_flags;
  for (const std::string& name : flags.defect_names) defect_flags += " --defect " + name;
  int failed = 0;
  for (const std::string& path : paths) {
    const auto started = std::chrono::steady_clock::now();
    Result<Scenario> scenario = read_scenario_file(path);
    if (!scenario.ok()) {
      std::fprintf(stderr, "zerosim: %s\n", scenario.status().to_string().c_str());
      return 2;
    }
    Result<ScenarioVerdict> verdict = run_scenario(*scenario, defects);
    if (!verdict.ok()) {
      std::fprintf(stderr, "zerosim: %s: %s\n", path.c_str(), verdict.status().to_string().c_str());
      return exit_code_for(verdict.status());
    }
    if (!verdict->passed) ++failed;
    JunitCase junit_case;
    junit_case.name = verdict->name;
    junit_case.class_name = path;
    junit_case.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    junit_case.passed = verdict->passed;
    junit_case.failure_message = verdict->diagnosis;
    junit_case.failure_details = verdict->outcome + "\nseed " + std::to_string(scenario->run.seed) +
                                 "\nreplay: zerosim run " + path + defect_flags;
    junit_cases.push_back(std::move(junit_case));
    results.push_back({{"scenario", verdict->name}, {"file", path}, {"passed", verdict->passed},
                       {"outcome", verdict->outcome}, {"diagnosis", verdict->diagnosis}});
    if (!flags.json) {
      std::printf("%s  %s: %s%s%s\n", verdict->passed ? "PASS" : "FAIL", verdict->name.c_str(), verdict->outcome.c_str(),
                  verdict->diagnosis.empty() ? "" : "\n      diagnosis: ", verdict->diagnosis.c_str());
    }
  }
  if (!flags.junit_path.empty()) {
    Status written = write_junit_file(flags.junit_path, flags.suite_directory.empty() ? "zerosim run" : flags.suite_directory,
                                      junit_cases);
    if (!written.ok()) {
      std::fprintf(stderr, "zerosim: --junit: %s\n", written.to_string().c_str());
      return 3;
    }
  }
  if (flags.json) {
    std::printf("%s\n", nlohmann::json{{"scenarios", results}, {"passed", static_cast<int>(paths.size()) - failed},
                                       {"failed", failed}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("%zu scenario(s): %zu passed, %d failed\n", paths.size(), paths.size() - static_cast<size_t>(failed),
                failed);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace zerosim
