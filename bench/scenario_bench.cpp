// The scenario harness's speed, beside its floor from the same run:
//   * fuzz: generated cases per minute (scenarios/generator.h, the default sizes `zerosim fuzz`
//     draws, campaign seed --seed, --cases cases, one after another as `zerosim fuzz` runs
//     them). A case is the reference run with per-step digests, the faulted first phase with
//     its saves, a power loss, the restart and the comparison at every step.
//   * suite: the wall time of every scenario of scenarios/library (--library DIR).
// Peer (the floor): the same cases' training alone, on the same simulated disk without
// digests, saves, crash or comparison: the reference's steps, the steps the first phase
// trained before its crash (or fault), and the steps of the resume from the step it actually
// resumed at (both as the harness's run of the case reported them). What the harness adds is
// the ratio of the two.
// Each side is timed --repeat times, the two sides alternating (and which goes first
// alternating too, so that neither always runs on a warmer or a noisier machine); the figures
// are the medians.
// Flags: --seed S (1), --cases N (200), --library DIR (scenarios/library), --repeat R (3).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "scenarios/generator.h"
#include "sim/sim_world.h"
#include "bench/flag_value.h"

using namespace zerosim;

namespace {

using WallClock = std::chrono::steady_clock;

double seconds_since(WallClock::time_point start) {
  return std::chrono::duration<double>(WallClock::now() - start).count();
}

// What the harness's run of a case trained: the first phase's steps and the resume's start.
struct TrainedSteps {
  int64_t first_phase = 0;
  int64_t resumed_at = 0;  // total_steps when the resume was refused (it trained nothing)
};

// The training a scenario contains, without the harness: the reference run, the first phase
// and the resume, each a plain run on a fresh simulated disk.
Status bare_training(const Scenario& scenario, const TrainedSteps& trained) {
  const CrashScenario& run = scenario.run;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingOptions resume_options, resume_options_for(run, scenario.name));
  resume_options.digest_every_step = false;
  const int64_t resume_steps = run.total_steps - trained.resumed_at;
  const std::pair<const TrainingOptions*, int64_t> runs[] = {
      {&run.options, run.total_steps}, {&run.options, trained.first_phase}, {&resume_options, resume_steps}};
  for (const auto& [options, steps] : runs) {
    if (steps <= 0) continue;
    SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, run.seed});
    NoCrashPoints no_crash;
    SimWorld world(disk, options->world_size, FaultPlan{}, no_crash);
    ZEROSIM_RETURN_IF_ERROR(run_training(*options, steps, world.seams()).status());
  }
  return Status();
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int64_t cases = 200;
  std::string library = "scenarios/library";
  int repeat = 3;
  for (int i = 1; i < argc; i += 2) {
    require_value(i, argc, argv[i]);
    if (std::strcmp(argv[i], "--seed") == 0) seed = unsigned_number(argv[i], argv[i + 1]);
    else if (std::strcmp(argv[i], "--cases") == 0) cases = whole_number(argv[i], argv[i + 1]);
    else if (std::strcmp(argv[i], "--library") == 0) library = argv[i + 1];
    else if (std::strcmp(argv[i], "--repeat") == 0) repeat = static_cast<int>(whole_number(argv[i], argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: scenario_bench [--seed S] [--cases N] [--library DIR] [--repeat R]\n");
      return 2;
    }
  }
  if (argc % 2 == 0 || cases < 1 || repeat < 1) {
    std::fprintf(stderr, "usage: scenario_bench [--seed S] [--cases N >= 1] [--library DIR] [--repeat R >= 1]\n");
    return 2;
  }
  std::error_code listing_error;
  if (!std::filesystem::is_directory(library, listing_error)) {
    std::fprintf(stderr, "scenario_bench: --library %s: not a directory (run from the repository root, or pass it)\n",
                 library.c_str());
    return 2;
  }
  std::vector<Scenario> generated;
  for (int64_t index = 0; index < cases; ++index) {
    const ScenarioShape shape = generate_shape(case_seed(seed, static_cast<uint64_t>(index)));
    Result<Scenario> scenario = scenario_from_json(scenario_document(shape, "case"), "case");
    if (!scenario.ok()) {
      std::fprintf(stderr, "case %lld: %s\n", static_cast<long long>(index), scenario.status().to_string().c_str());
      return 1;
    }
    generated.push_back(std::move(scenario).value());
  }
  std::vector<Scenario> suite;
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(library)) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& path : paths) {
    Result<Scenario> scenario = read_scenario_file(path);
    if (!scenario.ok()) {
      std::fprintf(stderr, "%s\n", scenario.status().to_string().c_str());
      return 1;
    }
    suite.push_back(std::move(scenario).value());
  }

  auto time_harness = [](const std::vector<Scenario>& scenarios, int* failed, std::vector<TrainedSteps>* trained) {
    const auto start = WallClock::now();
    for (const Scenario& scenario : scenarios) {
      Result<ScenarioVerdict> verdict = run_scenario(scenario, DefectSet{});
      if (!verdict.ok() || !verdict->passed) ++*failed;
      trained->push_back(verdict.ok() ? TrainedSteps{verdict->steps_before_crash,
                                                     verdict->resumed_at >= 0 ? verdict->resumed_at : scenario.run.total_steps}
                                      : TrainedSteps{});
    }
    return seconds_since(start);
  };
  auto time_floor = [](const std::vector<Scenario>& scenarios, const std::vector<TrainedSteps>& trained, int* failed) {
    const auto start = WallClock::now();
    for (size_t i = 0; i < scenarios.size(); ++i) {
      if (!bare_training(scenarios[i], trained[i]).ok()) ++*failed;
    }
    return seconds_since(start);
  };
  int fuzz_failed = 0, floor_failed = 0, suite_failed = 0, suite_floor_failed = 0;
  // The steps each case trained, from the harness's first run (the same in every run).
  std::vector<TrainedSteps> generated_trained, suite_trained;
  std::vector<double> fuzz_times, floor_times, suite_times, suite_floor_times;
  for (int round = 0; round < repeat; ++round) {
    auto harness_side = [&] {
      int failed = 0;
      std::vector<TrainedSteps> trained;
      fuzz_times.push_back(time_harness(generated, &failed, &trained));
      if (round == 0) fuzz_failed = failed, generated_trained = trained;
      failed = 0;
      trained.clear();
      suite_times.push_back(time_harness(suite, &failed, &trained));
      if (round == 0) suite_failed = failed, suite_trained = trained;
    };
    auto floor_side = [&] {
      int failed = 0;
      floor_times.push_back(time_floor(generated, generated_trained, &failed));
      if (round == 0) floor_failed = failed;
      failed = 0;
      suite_floor_times.push_back(time_floor(suite, suite_trained, &failed));
      if (round == 0) suite_floor_failed = failed;
    };
    // The floor needs the steps of the harness's first run: round 0 runs the harness first.
    if (round % 2 == 0) {
      harness_side();
      floor_side();
    } else {
      floor_side();
      harness_side();
    }
  }
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  const double fuzz_seconds = median(fuzz_times), floor_seconds = median(floor_times);
  const double suite_seconds = median(suite_times), suite_floor_seconds = median(suite_floor_times);
  const double fuzz_rate = 60.0 * static_cast<double>(cases) / fuzz_seconds;
  const double floor_rate = 60.0 * static_cast<double>(cases) / floor_seconds;
  std::printf("medians of %d runs of each side\n", repeat);
  std::printf("%-44s %14s %14s %8s\n", "", "harness", "floor (peer)", "ratio");
  std::printf("%-44s %14.0f %14.0f %8.2f\n", ("fuzz cases/min (seed " + std::to_string(seed) + ", " +
                                              std::to_string(cases) + " cases)").c_str(),
              fuzz_rate, floor_rate, fuzz_rate / floor_rate);
  std::printf("%-44s %14.2f %14.2f %8.2f\n", ("suite wall s (" + std::to_string(suite.size()) + " scenarios)").c_str(),
              suite_seconds, suite_floor_seconds, suite_seconds / suite_floor_seconds);
  std::printf("failed: fuzz %d, floor %d, suite %d, suite floor %d\n", fuzz_failed, floor_failed, suite_failed,
              suite_floor_failed);
  return fuzz_failed + floor_failed + suite_failed + suite_floor_failed == 0 ? 0 : 1;
}
