#include "tools/run_command.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/env/defects.h"
#include "reports/report_file.h"
#include "reports/suite_report.h"
#include "scenarios/generator.h"
#include "scenarios/import_ds.h"
#include "scenarios/scenario_runner.h"
#include "tools/train_command.h"

namespace zerosim {

namespace {

using WallClock = std::chrono::steady_clock;  // for the report's seconds only

// A one-line progress bar on stderr when it is a terminal; nothing otherwise (CI logs).
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO) == 1) {}
  ~ProgressBar() { clear(); }
  void show(int64_t done, int64_t total, int64_t failed, const std::string& current) {
    if (!enabled_) return;
    constexpr int kWidth = 24;
    const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::string name = current.size() > 48 ? current.substr(0, 45) + "..." : current;
    const std::string of = total > 0 ? std::to_string(total) : "?";
    std::fprintf(stderr, "\r\033[K[%s] %lld/%s, %lld failed  %s", bar.c_str(), static_cast<long long>(done), of.c_str(),
                 static_cast<long long>(failed), name.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void clear() {
    if (!shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_ = false;
  bool shown_ = false;
};

std::optional<DefectSet> parse_defects(const std::vector<std::string>& names) {
  DefectSet defects;
  for (const std::string& name : names) {
    std::optional<Defect> defect = defect_from_name(name);
    if (!defect) {
      std::fprintf(stderr, "zerosim: --defect %s: unknown defect (zerosim defects lists them)\n", name.c_str());
      return std::nullopt;
    }
    defects.enable(*defect);
  }
  return defects;
}

std::string defect_flags(const std::vector<std::string>& names) {
  std::string flags;
  for (const std::string& name : names) flags += " --defect " + name;
  return flags;
}

// What --defect and --device chose for every run of run, suite, replay and fuzz.
struct RunChoices {
  DefectSet defects;
  ComputeDevice compute;
};
// Prints what is wrong and sets exit_code when a flag is bad.
std::optional<RunChoices> run_choices(const ReportFlags& flags, int& exit_code) {
  const std::optional<DefectSet> defects = parse_defects(flags.defect_names);
  if (!defects) {
    exit_code = 2;
    return std::nullopt;
  }
  Result<ComputeDevice> compute = compute_device_named(flags.device);
  if (!compute.ok()) {
    std::fprintf(stderr, "zerosim: %s\n", compute.status().to_string().c_str());
    exit_code = exit_code_for(compute.status());
    return std::nullopt;
  }
  return RunChoices{*defects, std::move(compute).value()};
}

// " --device cuda" when the runs were not on the CPU, for the replay commands and titles.
std::string device_flag(const ReportFlags& flags) { return flags.device == "cpu" ? "" : " --device " + flags.device; }

// with_fault_rules: how often each rule of the fault plan matched and fired, a line each.
void print_verdict(const ReportFlags& flags, const ScenarioVerdict& verdict, ProgressBar& progress,
                   bool with_fault_rules = false) {
  if (flags.json) return;
  progress.clear();
  std::printf("%s  %s: %s%s%s\n", verdict.passed ? "PASS" : "FAIL", verdict.name.c_str(), verdict.outcome.c_str(),
              verdict.diagnosis.empty() ? "" : "\n      diagnosis: ", verdict.diagnosis.c_str());
  if (with_fault_rules) {
    for (const std::string& line : verdict.fault_rule_counts) std::printf("      %s\n", line.c_str());
  }
  std::fflush(stdout);
}


}  // namespace

int finish_report(const ReportFlags& flags, const SuiteReport& report, const nlohmann::json& extra) {
  if (!flags.junit_path.empty()) {
    Status written = write_junit_file(flags.junit_path, report.title, report_junit_cases(report));
    if (!written.ok()) {
      std::fprintf(stderr, "zerosim: --junit: %s\n", written.to_string().c_str());
      return 3;
    }
  }
  if (!flags.report_directory.empty()) {
    Status written = write_report_directory(flags.report_directory, report);
    if (!written.ok()) {
      std::fprintf(stderr, "zerosim: --report-dir: %s\n", written.to_string().c_str());
      return 3;
    }
  }
  const int failed = report.failed();
  if (flags.json) {
    nlohmann::json document = report_json(report);
    for (const auto& [key, value] : extra.items()) document[key] = value;
    std::printf("%s\n", json_text(document).c_str());
  } else {
    std::printf("%zu scenario(s): %zu passed, %d failed\n", report.scenarios.size(),
                report.scenarios.size() - static_cast<size_t>(failed), failed);
    if (!flags.report_directory.empty()) {
      std::printf("report: %s/report.html (also report.json, report.md, junit.xml)\n", flags.report_directory.c_str());
    }
  }
  return failed == 0 ? 0 : 1;
}

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
  int bad_flags_exit_code = 0;
  const std::optional<RunChoices> choices = run_choices(flags.report, bad_flags_exit_code);
  if (!choices) return bad_flags_exit_code;
  const DefectSet* const defects = &choices->defects;
  const ComputeDevice* const compute = &choices->compute;
  // Every file is read before any runs, so a typo in the last one does not cost a whole suite.
  std::vector<Scenario> scenarios;
  for (const std::string& path : paths) {
    Result<Scenario> scenario = read_scenario_file(path);
    if (!scenario.ok()) {
      std::fprintf(stderr, "zerosim: %s\n", scenario.status().to_string().c_str());
      return scenario.status().code() == StatusCode::kNotFound ? 2 : exit_code_for(scenario.status());
    }
    scenario->run.options.compute = *compute;
    scenarios.push_back(std::move(scenario).value());
  }
  SuiteReport report;
  report.title = "zerosim " + flags.command_name + " " + (flags.suite_directory.empty() ? "" : flags.suite_directory);
  if (flags.suite_directory.empty()) report.title += std::to_string(paths.size()) + " scenario(s)";
  report.title += device_flag(flags.report);
  report.defects = flags.report.defect_names;
  ProgressBar progress(!flags.report.json);
  ReferenceCache references;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    progress.show(static_cast<int64_t>(i), static_cast<int64_t>(scenarios.size()), report.failed(), scenarios[i].name);
    const auto started = WallClock::now();
    Result<ScenarioVerdict> verdict = run_scenario(scenarios[i], *defects, &references);
    if (!verdict.ok()) {
      progress.clear();
      std::fprintf(stderr, "zerosim: %s: %s\n", paths[i].c_str(), verdict.status().to_string().c_str());
      (void)finish_report(flags.report, report);  // the reports of the scenarios that ran
      return exit_code_for(verdict.status());
    }
    print_verdict(flags.report, *verdict, progress, /*with_fault_rules=*/true);
    ReportedScenario entry;
    entry.file = paths[i];
    entry.replay_command = "zerosim run " + paths[i] + defect_flags(flags.report.defect_names) + device_flag(flags.report);
    entry.seconds = std::chrono::duration<double>(WallClock::now() - started).count();
    entry.verdict = std::move(verdict).value();
    report.scenarios.push_back(std::move(entry));
  }
  progress.clear();
  return finish_report(flags.report, report);
}

int run_import_command(const ImportOptions& options, const std::string& output_path) {
  ImportNotes notes;
  Result<nlohmann::ordered_json> scenario = import_deepspeed_config(options, &notes);
  if (!scenario.ok()) {
    std::fprintf(stderr, "zerosim: import-ds: %s\n", scenario.status().to_string().c_str());
    return exit_code_for(scenario.status());
  }
  for (const std::string& line : notes.lines) std::fprintf(stderr, "zerosim: import-ds: %s\n", line.c_str());
  const std::string text = json_text(*scenario) + "\n";
  if (output_path.empty()) {
    std::printf("%s", text.c_str());
    return 0;
  }
  Status written = write_report_file(output_path, text, "scenario");
  if (!written.ok()) {
    std::fprintf(stderr, "zerosim: import-ds: %s\n", written.to_string().c_str());
    return 3;
  }
  std::printf("wrote %s; run it with: zerosim run %s\n", output_path.c_str(), output_path.c_str());
  return 0;
}

int run_fuzz_command(const FuzzFlags& flags) {
  uint64_t shard_index = 0, shard_count = 1;
  {
    // I/N, both unsigned decimal (from_chars takes no sign), 0 <= I < N.
    const std::string& text = flags.shard;
    const size_t slash = text.find('/');
    const char* begin = text.data();
    const char* end = text.data() + text.size();
    const auto index_end = slash == std::string::npos ? std::from_chars_result{end, std::errc::invalid_argument}
                                                      : std::from_chars(begin, begin + slash, shard_index);
    const auto count_end = slash == std::string::npos ? std::from_chars_result{end, std::errc::invalid_argument}
                                                      : std::from_chars(begin + slash + 1, end, shard_count);
    if (slash == std::string::npos || index_end.ec != std::errc() || index_end.ptr != begin + slash ||
        count_end.ec != std::errc() || count_end.ptr != end || shard_count == 0 || shard_index >= shard_count) {
      std::fprintf(stderr, "zerosim: --shard %s: expected I/N with 0 <= I < N (e.g. 0/4)\n", flags.shard.c_str());
      return 2;
    }
  }
  int bad_flags_exit_code = 0;
  const std::optional<RunChoices> choices = run_choices(flags.report, bad_flags_exit_code);
  if (!choices) return bad_flags_exit_code;
  const DefectSet* const defects = &choices->defects;
  const ComputeDevice* const compute = &choices->compute;
  std::string failures_directory = flags.failures_directory;
  if (failures_directory.empty()) {
    failures_directory = flags.report.report_directory.empty() ? "fuzz-failures" : flags.report.report_directory + "/failures";
  }
  // --cases alone: that many; --minutes alone: until the time is up; both: whichever first.
  const bool unbounded_cases = flags.minutes.has_value() && !flags.cases.has_value();
  const int64_t campaign_cases = flags.cases.value_or(unbounded_cases ? INT64_MAX : kDefaultFuzzCases);
  const double minutes = flags.minutes.value_or(0.0);

  SuiteReport report;
  report.title = "zerosim fuzz --seed " + std::to_string(flags.seed) + " --shard " + flags.shard + device_flag(flags.report);
  report.defects = flags.report.defect_names;
  ProgressBar progress(!flags.report.json);
  const auto campaign_started = WallClock::now();
  ReferenceCache references;  // shrinking candidates often share their reference
  int64_t cases_run = 0, shrink_runs = 0;
  // The progress bar's total: unknown (0) for a campaign bounded by time alone.
  const int64_t cases_in_shard =
      unbounded_cases ? 0
      : campaign_cases > static_cast<int64_t>(shard_index)
          ? (campaign_cases - static_cast<int64_t>(shard_index) + static_cast<int64_t>(shard_count) - 1) /
                static_cast<int64_t>(shard_count)
          : 0;
  bool out_of_time = false, stopped_by_failures = false;
  for (uint64_t index = shard_index; index < static_cast<uint64_t>(campaign_cases); index += shard_count) {
    const double elapsed_minutes = std::chrono::duration<double>(WallClock::now() - campaign_started).count() / 60.0;
    if (minutes > 0.0 && elapsed_minutes >= minutes) {
      out_of_time = true;
      break;
    }
    if (flags.stop_after_failures > 0 && report.failed() >= flags.stop_after_failures) {
      stopped_by_failures = true;
      break;
    }
    const uint64_t seed = case_seed(flags.seed, index);
    ScenarioShape shape = generate_shape(seed);
    const std::string name = "fuzz seed " + std::to_string(flags.seed) + " case " + std::to_string(index);
    progress.show(cases_run, cases_in_shard, report.failed(), name + ": " + describe_shape(shape));
    const auto started = WallClock::now();
    Result<ScenarioVerdict> verdict = run_shape(shape, name, *defects, &references, *compute, &shape);
    if (!verdict.ok()) {
      progress.clear();
      std::fprintf(stderr, "zerosim: %s (%s): %s\n", name.c_str(), describe_shape(shape).c_str(),
                   verdict.status().to_string().c_str());
      return exit_code_for(verdict.status());
    }
    ++cases_run;
    ReportedScenario entry;
    entry.replay_command = "zerosim fuzz --seed " + std::to_string(flags.seed) + " --cases " + std::to_string(index + 1) +
                           " --shard " + std::to_string(index) + "/" + std::to_string(index + 1) +
                           defect_flags(flags.report.defect_names) + device_flag(flags.report);
    if (!verdict->passed) {
      // Shrink, then write the smallest failing scenario (with its defects) to replay.
      progress.show(cases_run, cases_in_shard, report.failed() + 1, name + ": shrinking");
      Result<ShrinkResult> shrunk = shrink_failure(shape, *verdict, *defects, flags.shrink_attempts, &references, *compute);
      if (!shrunk.ok()) {
        progress.clear();
        std::fprintf(stderr, "zerosim: %s: shrinking: %s\n", name.c_str(), shrunk.status().to_string().c_str());
        return exit_code_for(shrunk.status());
      }
      shrink_runs += shrunk->attempts;
      nlohmann::json document = scenario_document(shrunk->shape, name + " (shrunk)");
      document["description"] = "Shrunk by zerosim fuzz from case " + std::to_string(index) + " of seed " +
                                std::to_string(flags.seed) + " (" + describe_shape(shape) + "). Diagnosis: " +
                                shrunk->verdict.diagnosis;
      if (!flags.report.defect_names.empty()) document["defects"] = flags.report.defect_names;
      std::error_code error;
      std::filesystem::create_directories(failures_directory, error);
      const std::string path = failures_directory + "/fuzz-seed" + std::to_string(flags.seed) + "-case" +
                               std::to_string(index) + ".json";
      Status written = error ? io_error("failures directory " + failures_directory + ": " + error.message())
                             : write_report_file(path, json_text(document) + "\n", "shrunk scenario");
      if (!written.ok()) {
        progress.clear();
        std::fprintf(stderr, "zerosim: %s\n", written.to_string().c_str());
        return 3;
      }
      entry.file = path;
      entry.replay_command = "zerosim replay " + path;
      entry.verdict = std::move(shrunk->verdict);
      entry.verdict.name = name + " (shrunk from: " + describe_shape(shape) + ", to: " + describe_shape(shrunk->shape) + ")";
    } else {
      entry.verdict = std::move(verdict).value();
      entry.verdict.name = name + ": " + describe_shape(shape);
    }
    entry.seconds = std::chrono::duration<double>(WallClock::now() - started).count();
    print_verdict(flags.report, entry.verdict, progress);
    if (!entry.verdict.passed && !flags.report.json) std::printf("      replay: %s\n", entry.replay_command.c_str());
    report.scenarios.push_back(std::move(entry));
  }
  progress.clear();
  const double seconds = std::chrono::duration<double>(WallClock::now() - campaign_started).count();
  if (!flags.report.json) {
    std::printf("fuzz: %lld case(s) in %.1f s (%.1f cases/min)%s, %lld shrinking run(s)\n",
                static_cast<long long>(cases_run), seconds, seconds > 0 ? 60.0 * static_cast<double>(cases_run) / seconds : 0.0,
                out_of_time ? ", stopped by --minutes" : stopped_by_failures ? ", stopped by --stop-after-failures" : "",
                static_cast<long long>(shrink_runs));
  }
  return finish_report(flags.report, report,
                {{"cases_run", cases_run}, {"seconds", seconds}, {"shrink_runs", shrink_runs}, {"stopped_by_minutes", out_of_time},
                 {"stopped_by_failures", stopped_by_failures}});
}

}  // namespace zerosim
