// The crash explorer: every crash point of a save by 4 ranks, in every crash state the
// power-loss model allows (bounded), resumes bit for bit or is refused clearly; the
// determinism self-check catches planted nondeterminism.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "sim/crash_explorer.h"
#include "sim/real_kill.h"
#include "tests/test_directory.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

CrashScenario four_rank_scenario() {
  CrashScenario scenario;
  scenario.options = make_options(ModelSpec{{6, 5, 3}}, Precision::kFp16, 1, 1, 4, 16, 77);
  // The optimizer state on NVMe: its swap files are never fsynced, so every crash state also
  // decides their fate (a resume must not care).
  scenario.options.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  scenario.options.config.zero.offload_optimizer.nvme_path = "/nvme";
  scenario.options.config.zero.offload_optimizer.buffer_count = 9;
  scenario.resume_world_size = 2;
  scenario.save_every_steps = 2;
  scenario.explored_save_step = 4;
  scenario.total_steps = 6;
  scenario.crash_state_bound = 64;
  scenario.seed = 3;
  return scenario;
}

std::string report(const ExplorationResult& result) {
  std::string text = std::to_string(result.crash_points) + " crash points, " + std::to_string(result.crash_states) +
                     " crash states: " + std::to_string(result.passed) + " passed, " +
                     std::to_string(result.refused) + " refused, " + std::to_string(result.failed) + " failed";
  for (const CrashCaseFailure& failure : result.failures) {
    text += "\n  " + failure.crash_point + ": " + failure.reason + "\n    state: " + failure.crash_state;
  }
  return text;
}

TEST(CrashExplorer, EveryCrashPointAndStateOfAFourRankSaveResumesBitForBit) {
  const Result<ExplorationResult> result = explore_save_crashes(four_rank_scenario());
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  std::printf("crash exploration of a save by 4 ranks (resume at 2): %s\n", report(*result).c_str());
  // save_begin x4, tag_prepared, shard_written x4, manifest_written, latest_published, save_end x4.
  EXPECT_EQ(result->crash_points, 15) << ::testing::PrintToString(result->explored_points);
  EXPECT_GT(result->crash_states, result->crash_points);
  EXPECT_EQ(result->failed, 0) << report(*result);
  EXPECT_EQ(result->passed + result->refused, result->crash_states);
}

TEST(CrashExplorer, TheSameScenarioExploresTheSameWayTwice) {
  CrashScenario scenario = four_rank_scenario();
  scenario.options.world_size = 2;
  scenario.options.config.gradient_accumulation_steps = 2;
  scenario.resume_world_size = 0;
  scenario.crash_state_bound = 4;
  const Result<ExplorationResult> first = explore_save_crashes(scenario);
  const Result<ExplorationResult> second = explore_save_crashes(scenario);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(first->reference_trace_hash, second->reference_trace_hash);
  EXPECT_EQ(first->crash_states, second->crash_states);
  EXPECT_EQ(first->explored_points, second->explored_points);
}

TEST(CrashExplorer, TheDeterminismSelfCheckCatchesPlantedNondeterminism) {
  CrashScenario scenario = four_rank_scenario();
  ASSERT_TRUE(check_determinism(scenario).ok());
  // A test-only hook that writes the wall clock into a file: the trace depends on time.
  scenario.planted_hook = [](Disk& disk, std::string_view site, int rank) {
    if (site != "engine.step_end" || rank != 0) return;
    const std::string now = std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    std::this_thread::sleep_for(std::chrono::microseconds(10));
    write_whole_file(disk, "/planted", std::as_bytes(std::span<const char>(now.data(), now.size())), false)
        .ignore_error();
  };
  const Result<std::string> check = check_determinism(scenario);
  ASSERT_FALSE(check.ok());
  EXPECT_NE(check.status().message().find("determinism self-check failed"), std::string::npos)
      << check.status().to_string();
  const Result<ExplorationResult> refused = explore_save_crashes(scenario);
  EXPECT_FALSE(refused.ok());
}

// 64 simulated ranks on this 2-core machine: save, a power loss at a seeded crash state, and a
// resume at 8 ranks, compared with the uninterrupted 64-rank run at every step.
TEST(CrashExplorer, ASimulatedRunOfSixtyFourRanksCompletes) {
  TrainingOptions options = make_options(ModelSpec{{13, 37, 29, 5}}, Precision::kBf16, 1, 1, 64, 64, 5);
  options.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  options.config.zero.offload_optimizer.nvme_path = "/nvme";
  options.config.zero.offload_optimizer.buffer_count = 9;
  options.digest_every_step = true;
  NoCrashPoints no_crash;
  std::unique_ptr<Clock> clock = make_steady_clock();
  SimDisk reference_disk;
  Result<TrainingRun> reference = run_training(options, 4, Env{&reference_disk, clock.get(), &no_crash, nullptr});
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  SimDisk disk;
  CheckpointPlan save;
  save.save_directory = "/ckpt";
  save.save_every_steps = 2;
  ASSERT_TRUE(run_training(options, 3, Env{&disk, clock.get(), &no_crash, nullptr}, save).ok());
  disk.crash_with_seed(9);
  TrainingOptions resumed_options = make_options(ModelSpec{{13, 37, 29, 5}}, Precision::kBf16, 1, 8, 8, 64, 5);
  resumed_options.digest_every_step = true;
  CheckpointPlan resume;
  resume.resume_directory = "/ckpt";
  Result<TrainingRun> resumed = run_training(resumed_options, 4, Env{&disk, clock.get(), &no_crash, nullptr}, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  const int64_t resumed_at = 4 - static_cast<int64_t>(resumed->steps.size());
  EXPECT_TRUE(resumed_at == 2 || resumed_at == 3) << resumed_at;
  EXPECT_EQ(first_divergence(*reference, *resumed, resumed_at), "");
}

// The same crash points, each in a child process on real files killed with SIGKILL.
TEST(CrashExplorer, RealKillModeResumesFromWhatAKilledProcessLeft) {
  CrashScenario scenario = four_rank_scenario();
  scenario.options.world_size = 2;
  scenario.options.config.gradient_accumulation_steps = 2;
  scenario.resume_world_size = 4;
  TestDirectory directory;
  const Result<ExplorationResult> result = explore_with_real_kills(scenario, directory.path() + "/cases");
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  std::printf("real-kill exploration (2 ranks, resume at 4): %s\n", report(*result).c_str());
  EXPECT_EQ(result->crash_points, 9);  // save_begin x2, tag_prepared, shard_written x2, manifest, latest, save_end x2
  EXPECT_EQ(result->failed, 0) << report(*result);
  EXPECT_EQ(result->passed + result->refused, result->crash_points);
}

// A later save explored (the fourth, async): the committed checkpoint is the third one, at step
// 6, not the first; a resume from it is right, and in every crash state the step-6 tag survives.
TEST(CrashExplorer, ALaterSaveResumesFromTheSaveJustBeforeIt) {
  CrashScenario scenario = four_rank_scenario();
  scenario.options.world_size = 2;
  scenario.options.config.gradient_accumulation_steps = 2;
  scenario.options.config.checkpoint.async_save = true;
  scenario.resume_world_size = 0;
  scenario.explored_save_step = 8;
  scenario.total_steps = 10;
  scenario.crash_state_bound = 4;
  EXPECT_EQ(previous_save_step(scenario), 6);
  const Result<ExplorationResult> simulated = explore_save_crashes(scenario);
  ASSERT_TRUE(simulated.ok()) << simulated.status().to_string();
  EXPECT_EQ(simulated->failed, 0) << report(*simulated);
  EXPECT_GT(simulated->passed, 0) << report(*simulated);
  TestDirectory directory;
  const Result<ExplorationResult> killed = explore_with_real_kills(scenario, directory.path() + "/cases");
  ASSERT_TRUE(killed.ok()) << killed.status().to_string();
  EXPECT_EQ(killed->failed, 0) << report(*killed);
  EXPECT_EQ(killed->passed + killed->refused, killed->crash_points);
}

// Before: with keep_last 1, a crash after `latest` moved and retention removed the older tag
// was reported as "the committed checkpoint global_step2 was lost", which it was, as asked.
TEST(CrashExplorer, RetentionMayRemoveTheCommittedTagOnceTheExploredSaveIsComplete) {
  CrashScenario scenario = four_rank_scenario();
  scenario.options.world_size = 2;
  scenario.options.config.gradient_accumulation_steps = 2;
  scenario.options.config.checkpoint.keep_last = 1;
  scenario.resume_world_size = 0;
  scenario.crash_state_bound = 8;
  const Result<ExplorationResult> result = explore_save_crashes(scenario);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->failed, 0) << report(*result);
  EXPECT_EQ(result->passed, result->crash_states) << report(*result);
}

// Before: "explored_save_step (2) must be a multiple of save_every (2) after the first save".
// A crash in the first save leaves nothing to resume from (a named refusal) or the save itself.
TEST(CrashExplorer, TheFirstSaveOfARunIsExplored) {
  CrashScenario scenario = four_rank_scenario();
  scenario.options.world_size = 2;
  scenario.options.config.gradient_accumulation_steps = 2;
  scenario.resume_world_size = 0;
  scenario.explored_save_step = scenario.save_every_steps;
  scenario.crash_state_bound = 8;
  const Result<ExplorationResult> result = explore_save_crashes(scenario);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->failed, 0) << report(*result);
  EXPECT_GT(result->refused, 0) << report(*result);
  EXPECT_GT(result->passed, 0) << report(*result);
  EXPECT_EQ(result->passed + result->refused, result->crash_states);
}

TEST(CrashExplorer, BadScenariosAreRefusedNamingTheKey) {
  CrashScenario scenario = four_rank_scenario();
  scenario.explored_save_step = 3;
  const Result<ExplorationResult> result = explore_save_crashes(scenario);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("explored_save_step"), std::string::npos) << result.status().to_string();
  scenario = four_rank_scenario();
  scenario.resume_world_size = 3;
  const Result<ExplorationResult> odd = explore_save_crashes(scenario);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("resume_world_size 3"), std::string::npos) << odd.status().to_string();
}

// Scenario files are checked against known_crash_sites(): every site a step, a save (sync and
// async) and a load hit is in it, and every listed site is hit.
TEST(CrashPoints, TheKnownSitesAreExactlyTheSitesTheCoreHits) {
  TrainingOptions options = make_options(ModelSpec{{5, 4, 3}}, Precision::kFp16, 1, 1, 2, 8, 3);
  options.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  options.config.zero.offload_optimizer.nvme_path = "/nvme";
  options.config.zero.offload_optimizer.buffer_count = 8;
  SimDisk disk;
  ScriptedCrashPoints recorder;
  std::unique_ptr<Clock> clock = make_steady_clock();
  Env env{&disk, clock.get(), &recorder, nullptr};
  CheckpointPlan save;
  save.save_directory = "/ckpt";
  save.save_every_steps = 1;
  ASSERT_TRUE(run_training(options, 2, env, save).ok());
  CheckpointPlan resume;
  resume.resume_directory = "/ckpt";
  ASSERT_TRUE(run_training(options, 3, env, resume).ok());
  std::set<std::string> hit;
  for (const CrashPoint& point : recorder.recorded()) hit.insert(point.site);
  std::set<std::string> known;
  for (std::string_view site : known_crash_sites()) known.insert(std::string(site));
  EXPECT_EQ(hit, known);
}

}  // namespace
}  // namespace zerosim
