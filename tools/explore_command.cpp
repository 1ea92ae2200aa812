#include "tools/explore_command.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "scenarios/scenario_file.h"
#include "sim/crash_explorer.h"
#include "sim/real_kill.h"
#include "tools/train_command.h"

namespace zerosim {

int run_explore_command(const ExploreFlags& flags) {
  Result<CrashScenario> scenario = read_crash_scenario_file(flags.scenario_path);
  if (!scenario.ok()) {
    std::fprintf(stderr, "zerosim: explore: %s\n", scenario.status().to_string().c_str());
    return 2;
  }
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
    std::printf("%s\n", output.dump(2).c_str());
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
  return result->failed == 0 ? 0 : 1;
}

}  // namespace zerosim
