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
#include "tools/install_paths.h"
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

namespace {

void add_report_flags(CLI::App& command, ReportFlags& flags) {
  command.add_option("--defect", flags.defect_names, "Switch a named defect on for every scenario (repeatable)");
  command.add_flag("--json", flags.json, "Print one JSON object: the scenarios with their verdicts, passed, failed");
  command.add_option("--junit", flags.junit_path, "Also write a JUnit XML report to FILE");
  command.add_option("--report-dir", flags.report_directory,
                     "Write report.html, report.json, report.md and junit.xml into DIR");
  add_device_flag(command, flags.device);
}

}  // namespace

void add_scenario_commands(CLI::App& app, ScenarioCommands& commands) {
  RunFlags& run_flags = commands.run_flags;
  CLI::App* run = app.add_subcommand("run", "Run scenarios: reference, faults, crash, resume, and a verdict per scenario");
  commands.run = run;
  run->add_option("scenarios", run_flags.scenario_paths, "Scenario JSON files")->required();
  add_report_flags(*run, run_flags.report);
  RunFlags& suite_flags = commands.suite_flags;
  suite_flags.command_name = "suite";
  CLI::App* suite = app.add_subcommand(
      "suite", "Run every scenario of a directory (default: the scenario library shipped with this zerosim)");
  commands.suite = suite;
  commands.suite_directory = suite->add_option("directory", suite_flags.suite_directory, "Directory of scenario JSON files");
  add_report_flags(*suite, suite_flags.report);
  RunFlags& replay_flags = commands.replay_flags;
  replay_flags.command_name = "replay";
  CLI::App* replay = app.add_subcommand("replay", "Replay one scenario file (a shrunk failure from zerosim fuzz)");
  commands.replay = replay;
  replay->add_option("scenario", commands.replay_path, "Scenario JSON file")->required();
  add_report_flags(*replay, replay_flags.report);
  FuzzFlags& fuzz_flags = commands.fuzz_flags;
  CLI::App* fuzz = app.add_subcommand(
      "fuzz", "Generated scenarios that demand recovery; a failure is shrunk and written as a scenario to replay");
  commands.fuzz = fuzz;
  fuzz->add_option("--seed", fuzz_flags.seed, "Campaign seed: case i is a pure function of (seed, i)");
  fuzz->add_option("--cases", fuzz_flags.cases,
                   "Cases in the campaign (all shards together); alone: that many; with --minutes: at most that many; "
                   "with neither: " + std::to_string(kDefaultFuzzCases))
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  fuzz->add_option("--minutes", fuzz_flags.minutes,
                   "Run cases until this many minutes have passed (alone: no case limit; a case started is finished)")
      ->check(CLI::Range(1e-6, 1e6, "a duration > 0 in minutes"));
  fuzz->add_option("--stop-after-failures", fuzz_flags.stop_after_failures,
                   "Stop starting cases once this many have failed (0: never; mutation runs use 1)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  fuzz->add_option("--shard", fuzz_flags.shard, "I/N: run the cases whose index is I modulo N (a CI matrix, a Slurm array)");
  fuzz->add_option("--failures-dir", fuzz_flags.failures_directory,
                   "Write shrunk failing scenarios here (default: <report dir>/failures, else fuzz-failures)");
  fuzz->add_option("--shrink-attempts", fuzz_flags.shrink_attempts, "Most candidate runs when shrinking one failure")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  add_report_flags(*fuzz, fuzz_flags.report);

  ImportOptions& import_options = commands.import_options;
  std::string& import_output = commands.import_output;
  CLI::App* import_ds = app.add_subcommand(
      "import-ds", "Write a scenario from a DeepSpeed config: train, save, crash, resume, compare every component");
  commands.import_ds = import_ds;
  import_ds->add_option("config", import_options.config_path, "DeepSpeed config JSON (kept verbatim)")->required();
  import_ds->add_option("--world-size", import_options.world_size, "Ranks of the run")->check(CLI::Range(1, 256));
  import_ds->add_option("--resume-world-size", import_options.resume_world_size, "Ranks of the resume (0: the same)")
      ->check(CLI::Range(0, 256));
  import_ds->add_option("--steps", import_options.steps, "Steps of the whole run")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import_ds->add_option("--save-every", import_options.save_every, "Save every S steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import_ds->add_option("--saved-step", import_options.saved_step, "The first phase ends after this step (a multiple of --save-every)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import_ds->add_option("--crash", import_options.crash,
                        "Crash at SITE[@RANK][#OCCURRENCE] (e.g. ckpt.shard_written@1#2, engine.step_end@0#5)");
  import_ds->add_flag("--delete-swap-directory", import_options.delete_swap_directory,
                      "The operator deletes the NVMe swap directories before the restart");
  import_ds->add_option("--model", import_options.model, "MLP layer widths: input,hidden...,classes");
  import_ds->add_option("--precision", import_options.precision, "fp32, fp16 or bf16 (default: from the config)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  import_ds->add_option("--seed", import_options.seed, "Seed of parameters and data");
  import_ds->add_option("--name", import_options.name, "The scenario's name");
  import_ds->add_flag("--config-by-path", import_options.config_by_path,
                      "Refer to the config by its path instead of copying it in (relative paths are read beside the scenario)");
  import_ds->add_option("--as", import_options.as,
                        "deepspeed: switch on the defects of every entry of zerosim's model of DeepSpeed edaa722's "
                        "resume that applies (`zerosim deepspeed-model` lists them), so the scenario fails as the "
                        "user's run did")
      ->check(CLI::IsMember({"deepspeed"}));
  import_ds->add_option("--training-loop", import_options.training_loop,
                        "hf (the Hugging Face Trainer restores the data position and RNG) or plain (a loop over a "
                        "DataLoader, which DeepSpeed does not restore); for --as deepspeed")
      ->check(CLI::IsMember({"hf", "plain"}));
  import_ds->add_option("--ended-by", import_options.ended_by,
                        "How the first run ended: power-loss (unsynced data lost; default) or kill (the job died, the "
                        "machine stayed up)")
      ->check(CLI::IsMember({"power-loss", "kill"}));
  import_ds->add_option("--no-checkpoint", import_options.no_checkpoint,
                        "When the crash came before any save returned: fresh-start (default: the restart trains from "
                        "step 0) or refusal (it must refuse)")
      ->check(CLI::IsMember({"fresh-start", "refusal"}));
  import_ds->add_option("--resume-tag", import_options.resume_tag, "The tag the restart asks for (default latest)");
  import_ds->add_option("--load-optimizer-states", import_options.load_optimizer_states,
                        "The restart's load_optimizer_states (true|false)");
  import_ds->add_option("--load-lr-scheduler-states", import_options.load_lr_scheduler_states,
                        "The restart's load_lr_scheduler_states (true|false)");
  import_ds->add_flag("--load-module-only", import_options.load_module_only, "The restart loads the module only");
  import_ds->add_option("--resume-config", import_options.resume_config_path,
                        "The DeepSpeed config of the restart, when the user changed it between the runs");
  import_ds->add_option("--delete-tag", import_options.delete_tag,
                        "The operator deleted the newest (or the previous) tag before the restart")
      ->check(CLI::IsMember({"newest", "previous"}));
  import_ds->add_option("-o,--output", import_output, "Write the scenario here (default: standard output)");
}

std::optional<int> run_scenario_commands(ScenarioCommands& commands, const char* program_path) {
  if (commands.run->parsed()) return run_scenarios_command(commands.run_flags);
  if (commands.suite->parsed()) {
    // The library that came with this binary, found from its own location (tools/install_paths.h).
    if (commands.suite_directory->count() == 0) {
      Result<std::string> shipped = shipped_scenario_library(program_path);
      if (!shipped.ok()) {
        std::fprintf(stderr, "zerosim: suite: %s\n", shipped.status().message().c_str());
        return 2;
      }
      commands.suite_flags.suite_directory = *shipped;
    }
    return run_scenarios_command(commands.suite_flags);
  }
  if (commands.replay->parsed()) {
    commands.replay_flags.scenario_paths = {commands.replay_path};
    return run_scenarios_command(commands.replay_flags);
  }
  if (commands.fuzz->parsed()) return run_fuzz_command(commands.fuzz_flags);
  if (commands.import_ds->parsed()) return run_import_command(commands.import_options, commands.import_output);
  return std::nullopt;
}

}  // namespace zerosim
