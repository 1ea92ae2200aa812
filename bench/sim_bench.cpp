// The simulator's speed, beside its peer from the same run:
//   * save-kill-resume cases per second: the crash exploration of the default small model
//     (13,37,29,5, fp16, optimizer on NVMe) on 4 ranks, 20 steps, saves every 5 steps, the
//     save at step 10 explored (every crash point, up to --bound crash states each; a case is
//     one crash state: power loss, restart from the durable disk, resume to step 20 and
//     compare every step). Peer: the same crash points in real-kill mode (a forked child on
//     real files under --dir, SIGKILLed at the point, resumed and compared);
//   * simulated seconds per wall second: a 20-step run on SimDisk with the default cost model
//     (sim/sim_world.h), its virtual time over its wall time.
// Flags: --dir DIR (real files for the peer, default /tmp/zerosim-sim-bench) --bound N (8).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "scenarios/scenario_file.h"
#include "sim/crash_explorer.h"
#include "sim/real_kill.h"
#include "sim/sim_world.h"
#include "bench/flag_value.h"

using namespace zerosim;

int main(int argc, char** argv) {
  std::string directory = "/tmp/zerosim-sim-bench";
  int64_t bound = 8;
  for (int i = 1; i < argc; i += 2) {
    require_value(i, argc, argv[i]);
    if (std::strcmp(argv[i], "--dir") == 0) directory = argv[i + 1];
    else if (std::strcmp(argv[i], "--bound") == 0) bound = whole_number(argv[i], argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: sim_bench [--dir DIR] [--bound N]\n");
      return 2;
    }
  }
  const nlohmann::json document = {
      {"model", "13,37,29,5"}, {"world_size", 4}, {"micro_batch_size", 2}, {"gradient_accumulation_steps", 1},
      {"save_every", 5},        {"explored_save_step", 10}, {"steps", 20}, {"crash_state_bound", bound},
      {"config",
       {{"fp16", {{"enabled", "auto"}, {"loss_scale", 0}}},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}, {"weight_decay", "auto"}}}}},
        {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", "auto"}, {"warmup_num_steps", "auto"}}}}},
        {"zero_optimization",
         {{"stage", 3}, {"sub_group_size", 256},
          {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", "/nvme"}, {"buffer_count", 9}}}}},
        {"train_batch_size", "auto"}, {"train_micro_batch_size_per_gpu", "auto"},
        {"gradient_accumulation_steps", "auto"}, {"gradient_clipping", "auto"}}}};
  Result<CrashScenario> scenario = crash_scenario_from_json(document, "sim_bench");
  if (!scenario.ok()) {
    std::fprintf(stderr, "sim_bench: %s\n", scenario.status().to_string().c_str());
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); };

  Clock::time_point start = Clock::now();
  Result<ExplorationResult> simulated = explore_save_crashes(*scenario);
  const double simulated_seconds = seconds_since(start);
  start = Clock::now();
  Result<ExplorationResult> real = explore_with_real_kills(*scenario, directory);
  const double real_seconds = seconds_since(start);
  if (!simulated.ok() || !real.ok()) {
    std::fprintf(stderr, "sim_bench: %s\n", (!simulated.ok() ? simulated.status() : real.status()).to_string().c_str());
    return 1;
  }

  NoCrashPoints no_crash;
  SimDisk disk;
  SimWorld world(disk, scenario->options.world_size, FaultPlan{}, no_crash);
  start = Clock::now();
  Result<TrainingRun> run = run_training(scenario->options, 20, world.seams());
  const double run_seconds = seconds_since(start);
  if (!run.ok()) {
    std::fprintf(stderr, "sim_bench: %s\n", run.status().to_string().c_str());
    return 1;
  }
  const double virtual_seconds = static_cast<double>(world.virtual_time_ns()) / 1e9;

  std::printf("save-kill-resume cases, 4 ranks, 13,37,29,5, 20 steps, save at step 10 explored:\n");
  std::printf("  simulated (SimDisk, power loss): %lld cases (%lld crash points) in %.2f s = %.1f cases/s, %lld failed\n",
              static_cast<long long>(simulated->crash_states), static_cast<long long>(simulated->crash_points),
              simulated_seconds, static_cast<double>(simulated->crash_states) / simulated_seconds,
              static_cast<long long>(simulated->failed));
  std::printf("  peer, real-kill (fork + SIGKILL on %s): %lld cases in %.2f s = %.1f cases/s, %lld failed\n",
              directory.c_str(), static_cast<long long>(real->crash_states), real_seconds,
              static_cast<double>(real->crash_states) / real_seconds, static_cast<long long>(real->failed));
  std::printf("  ratio (simulated / real-kill cases per second): %.1f\n",
              (static_cast<double>(simulated->crash_states) / simulated_seconds) /
                  (static_cast<double>(real->crash_states) / real_seconds));
  std::printf("virtual time: a 20-step run, %.3f simulated s in %.3f wall s = %.2f simulated s per wall s\n",
              virtual_seconds, run_seconds, virtual_seconds / run_seconds);
  std::printf("{\"simulated_cases_per_s\": %.2f, \"real_kill_cases_per_s\": %.2f, \"simulated_s_per_wall_s\": %.3f}\n",
              static_cast<double>(simulated->crash_states) / simulated_seconds,
              static_cast<double>(real->crash_states) / real_seconds, virtual_seconds / run_seconds);
  return simulated->failed == 0 && real->failed == 0 ? 0 : 1;
}
