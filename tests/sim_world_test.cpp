// Virtual time, fault plans and per-rank seams: a simulated run's virtual time is a pure
// function of the scenario, a crash can be placed at a virtual time, and a fault plan's faults
// reach the core through the same vocabulary as FaultyDisk on a real directory.
#include <gtest/gtest.h>

#include <cstring>

#include "sim/sim_world.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

TrainingOptions small_options() {
  TrainingOptions options = make_options(ModelSpec{{9, 8, 3}}, Precision::kFp16, 2, 1, 4, 32, 19);
  options.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  options.config.zero.offload_optimizer.nvme_path = "/nvme";
  options.config.zero.offload_optimizer.buffer_count = 9;
  options.digest_every_step = true;
  return options;
}

struct SimulatedRun {
  Result<TrainingRun> run = internal_error("not run");
  uint64_t virtual_time_ns = 0;
};

SimulatedRun simulate(SimDisk& disk, const TrainingOptions& options, int64_t steps, const FaultPlan& plan,
                      CrashPointHook& hook, const CheckpointPlan& checkpoints = {}) {
  SimWorld world(disk, options.world_size, plan, hook);
  SimulatedRun result;
  result.run = run_training(options, steps, world.seams(), checkpoints);
  result.virtual_time_ns = world.virtual_time_ns();
  return result;
}

TEST(SimWorld, VirtualTimeIsAPureFunctionOfTheScenarioAndTheBitsDoNotDependOnIt) {
  const TrainingOptions options = small_options();
  NoCrashPoints no_crash;
  SimDisk first_disk, second_disk, slow_disk;
  const SimulatedRun first = simulate(first_disk, options, 4, FaultPlan{}, no_crash);
  const SimulatedRun second = simulate(second_disk, options, 4, FaultPlan{}, no_crash);
  ASSERT_TRUE(first.run.ok()) << first.run.status().to_string();
  ASSERT_TRUE(second.run.ok());
  EXPECT_GT(first.virtual_time_ns, 0u);
  EXPECT_EQ(first.virtual_time_ns, second.virtual_time_ns);
  FaultPlan slow;
  slow.costs.disk_latency_us = 2000;
  slow.costs.disk_bandwidth_mb_per_s = 10;
  const SimulatedRun slower = simulate(slow_disk, options, 4, slow, no_crash);
  ASSERT_TRUE(slower.run.ok());
  EXPECT_GT(slower.virtual_time_ns, first.virtual_time_ns * 2);
  EXPECT_EQ(first_difference(first.run->digests, slower.run->digests), "");
  EXPECT_EQ(first_difference(first.run->digests, train_or_fail(options, 4).digests), "");
}

TEST(SimWorld, ACrashAtAVirtualTimeStopsEveryRankAndTheRunResumesBitForBit) {
  const TrainingOptions options = small_options();
  NoCrashPoints no_crash;
  SimDisk reference_disk;
  const SimulatedRun reference = simulate(reference_disk, options, 6, FaultPlan{}, no_crash);
  ASSERT_TRUE(reference.run.ok());
  CheckpointPlan saving;
  saving.save_directory = "/ckpt";
  saving.save_every_steps = 2;
  SimDisk timing_disk;
  const SimulatedRun timing = simulate(timing_disk, options, 6, FaultPlan{}, no_crash, saving);
  ASSERT_TRUE(timing.run.ok());

  SimDisk disk;
  VirtualTimeCrash crash(timing.virtual_time_ns / 1000 * 2 / 3, disk);
  SimWorld world(disk, options.world_size, FaultPlan{}, crash);
  crash.attach(world);
  const Result<TrainingRun> killed = run_training(options, 6, world.seams(), saving);
  ASSERT_FALSE(killed.ok());
  ASSERT_TRUE(crash.fired());
  disk.crash_with_seed(4);
  CheckpointPlan resuming;
  resuming.resume_directory = "/ckpt";
  const SimulatedRun resumed = simulate(disk, options, 6, FaultPlan{}, no_crash, resuming);
  ASSERT_TRUE(resumed.run.ok()) << resumed.run.status().to_string();
  const int64_t resumed_at = 6 - static_cast<int64_t>(resumed.run->steps.size());
  EXPECT_GE(resumed_at, 2);
  EXPECT_EQ(first_divergence(*reference.run, *resumed.run, resumed_at), "");
}

// The faults storage-fault models count and the simulator's disk alone lacks: a write that is
// acknowledged and lost, one that lands elsewhere, and a power loss in the middle of any
// operation; and a rule that waits for another operation before it counts.
TEST(SimWorld, LostMisdirectedAndPowerLossFaultsDoWhatTheyAreNamedFor) {
  const Result<std::vector<FaultRule>> rules = parse_fault_rules(nlohmann::json::parse(R"([
    {"path": "/lost", "op": "write", "occurrence": 1, "fault": "lost_write"},
    {"path": "/elsewhere", "op": "write", "occurrence": 1, "fault": "misdirected_write", "bytes": 8},
    {"path": "/cut", "op": "sync", "occurrence": 1, "fault": "power_loss", "after": {"path": "/arm", "op": "write"}}])"));
  ASSERT_TRUE(rules.ok()) << rules.status().to_string();
  SimDisk disk;
  FaultyDisk faulty(disk, *rules, [](uint64_t) {});
  std::string power_lost;
  faulty.set_power_loss_handler([&](const std::string& what) {
    power_lost = what;
    disk.freeze();
  });
  const std::string text = "payload";
  const auto bytes = std::as_bytes(std::span<const char>(text.data(), text.size()));
  auto write = [&](const std::string& path) -> Status {
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, faulty.open(path, {OpenMode::kCreateTruncate}));
    return file->write_all(0, bytes);
  };
  ASSERT_TRUE(write("/lost").ok()) << "a lost write reports success";
  EXPECT_EQ(disk.visible_content("/lost")->size(), 0u) << "and nothing reaches the file";
  ASSERT_TRUE(write("/elsewhere").ok());
  const std::vector<std::byte> elsewhere = *disk.visible_content("/elsewhere");
  ASSERT_EQ(elsewhere.size(), 8 + text.size());
  EXPECT_EQ(std::memcmp(elsewhere.data() + 8, text.data(), text.size()), 0) << "it landed 8 bytes further";
  EXPECT_EQ(elsewhere[0], std::byte{0}) << "and the intended range is as it was";
  {
    Result<std::unique_ptr<File>> cut = faulty.open("/cut", {OpenMode::kCreateTruncate});
    ASSERT_TRUE(cut.ok());
    ASSERT_TRUE((*cut)->write_all(0, bytes).ok());
    EXPECT_TRUE((*cut)->sync().ok()) << "not armed before /arm is written";
    ASSERT_TRUE(write("/arm").ok());
    const Status lost = (*cut)->sync();
    EXPECT_EQ(lost.code(), StatusCode::kIoError);
    EXPECT_NE(lost.message().find("the power went out during this operation"), std::string::npos) << lost.to_string();
  }
  EXPECT_EQ(power_lost, "sync /cut");
  EXPECT_EQ(faulty.power_loss_at(), "sync /cut");
  EXPECT_FALSE(write("/after").ok()) << "nothing reaches the disk once the power is out";

  for (const char* bad : {R"([{"op": "read", "fault": "lost_write"}])", R"([{"op": "sync", "fault": "misdirected_write"}])",
                          R"([{"op": "open", "fault": "power_loss"}])", R"([{"op": "write", "after": {"path": "/x"}}])",
                          R"([{"op": "write", "after": {"path": "/x", "op": "fsync"}}])"}) {
    const Result<std::vector<FaultRule>> refused = parse_fault_rules(nlohmann::json::parse(bad));
    EXPECT_FALSE(refused.ok()) << bad;
    if (!refused.ok()) {
      EXPECT_NE(refused.status().message().find("fault rules[0]"), std::string::npos) << refused.status().to_string();
    }
  }
}

TEST(SimWorld, FaultPlansParseAndNameTheWrongKey) {
  const nlohmann::json good = nlohmann::json::parse(R"({
    "costs": {"disk_latency_us": 50, "disk_bandwidth_mb_per_s": 500},
    "disk_faults": [{"path": "*/manifest.json", "op": "read", "occurrence": 1, "fault": "bit_flip", "bytes": 9}],
    "crash": {"site": "ckpt.shard_written", "rank": 1, "occurrence": 2}})");
  const Result<FaultPlan> plan = parse_fault_plan(good, "plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->costs.disk_latency_us, 50u);
  ASSERT_EQ(plan->disk_faults.size(), 1u);
  EXPECT_EQ(plan->disk_faults[0].kind, FaultKind::kBitFlip);
  ASSERT_TRUE(plan->crash_point.has_value());
  EXPECT_EQ(plan->crash_point->describe(), "ckpt.shard_written@rank1#2");

  const Result<FaultPlan> typo = parse_fault_plan(nlohmann::json::parse(R"({"costs": {"disk_latncy_us": 5}})"), "plan.json");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("plan.json: costs.disk_latncy_us: unknown key; did you mean disk_latency_us?"),
            std::string::npos)
      << typo.status().to_string();
  const Result<FaultPlan> flip_on_write = parse_fault_plan(
      nlohmann::json::parse(R"({"disk_faults": [{"op": "write", "fault": "bit_flip"}]})"), "plan.json");
  ASSERT_FALSE(flip_on_write.ok());
  EXPECT_NE(flip_on_write.status().message().find("bit_flip applies to reads"), std::string::npos)
      << flip_on_write.status().to_string();
  const Result<FaultPlan> bad_fault = parse_fault_plan(
      nlohmann::json::parse(R"({"disk_faults": [{"op": "read", "fault": "gamma_ray"}]})"), "plan.json");
  ASSERT_FALSE(bad_fault.ok());
  EXPECT_NE(bad_fault.status().message().find("fault rules[0].fault: unknown value 'gamma_ray'"), std::string::npos)
      << bad_fault.status().to_string();
}

TEST(SimWorld, ABitFlipOnAShardReadIsRefusedWithTheChecksumNeverTrainedOn) {
  TrainingOptions options = small_options();
  NoCrashPoints no_crash;
  SimDisk disk;
  CheckpointPlan saving;
  saving.save_directory = "/ckpt";
  ASSERT_TRUE(simulate(disk, options, 2, FaultPlan{}, no_crash, saving).run.ok());
  CheckpointPlan resuming;
  resuming.resume_tag = "global_step2";
  resuming.resume_directory = "/ckpt";
  // Every read of rank 2's shard flipped (the header's first), then only the 3rd read (the
  // one-pass load's first, header and tensors, after the index's two): refused either way, by
  // the header checks or by the checksum of the one-pass load.
  for (const int64_t occurrence : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(occurrence);
    FaultPlan flips;
    FaultRule flip;
    flip.path_pattern = "*/rank-00002-of-00004.safetensors";
    flip.operation = FaultOperation::kRead;
    flip.occurrence = occurrence;
    flip.kind = FaultKind::kBitFlip;
    flip.bytes = 12345;
    flips.disk_faults = {flip};
    const SimulatedRun resumed = simulate(disk, options, 4, flips, no_crash, resuming);
    ASSERT_FALSE(resumed.run.ok());
    EXPECT_EQ(resumed.run.status().code(), StatusCode::kDataLoss) << resumed.run.status().to_string();
    EXPECT_NE(resumed.run.status().message().find("rank-00002-of-00004.safetensors"), std::string::npos)
        << resumed.run.status().to_string();
    if (occurrence == 3) {
      EXPECT_NE(resumed.run.status().message().find("checksum mismatch"), std::string::npos)
          << resumed.run.status().to_string();
    }
  }
}

// Before: occurrences were counted over all ranks, so a rule on a path every rank writes hit
// whichever rank's write came first, a different rank (and shard) from run to run.
TEST(SimWorld, ARuleOnAPathEveryRankWritesHitsTheSameRanksOperationInEveryRun) {
  const TrainingOptions options = small_options();  // W = 4
  NoCrashPoints no_crash;
  CheckpointPlan saving;
  saving.save_directory = "/ckpt";
  FaultRule every_shard;
  every_shard.path_pattern = "/ckpt/*/rank-*";
  every_shard.operation = FaultOperation::kWrite;
  every_shard.occurrence = 1;
  every_shard.kind = FaultKind::kIoError;
  FaultRule rank_two_only = every_shard;
  rank_two_only.rank = 2;
  for (int attempt = 0; attempt < 8; ++attempt) {
    SCOPED_TRACE(attempt);
    {
      SimDisk disk;
      FaultPlan plan;
      plan.disk_faults = {every_shard};
      SimWorld world(disk, options.world_size, plan, no_crash);
      const Result<TrainingRun> run = run_training(options, 2, world.seams(), saving);
      ASSERT_FALSE(run.ok());
      // Every rank's first write of its shard fails: the lowest rank's error is the one reported.
      EXPECT_EQ(world.faulty_disk().fired_counts(), std::vector<int64_t>{4});
      EXPECT_NE(run.status().message().find("rank-00000-of-00004.safetensors"), std::string::npos)
          << run.status().to_string();
    }
    {
      SimDisk disk;
      FaultPlan plan;
      plan.disk_faults = {rank_two_only};
      SimWorld world(disk, options.world_size, plan, no_crash);
      const Result<TrainingRun> run = run_training(options, 2, world.seams(), saving);
      ASSERT_FALSE(run.ok());
      EXPECT_EQ(world.faulty_disk().fired_counts(), std::vector<int64_t>{1});
      EXPECT_NE(run.status().message().find("rank-00002-of-00004.safetensors"), std::string::npos)
          << run.status().to_string();
    }
  }
  const Result<FaultPlan> bad_rank = parse_fault_plan(
      nlohmann::json::parse(R"({"disk_faults": [{"op": "write", "fault": "io_error", "rank": -1}]})"), "plan.json");
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("fault rules[0].rank: expected a rank"), std::string::npos)
      << bad_rank.status().to_string();
}

TEST(SimWorld, LatencyRulesChargeSizeOverBandwidth) {
  FaultRule rule;
  rule.kind = FaultKind::kLatency;
  rule.latency_us = 10;
  EXPECT_EQ(rule.delay_for_us(1000000), 10u);
  rule.bandwidth_mb_per_s = 100;  // 100 bytes per microsecond
  EXPECT_EQ(rule.delay_for_us(1000000), 10u + 10000u);
}

}  // namespace
}  // namespace zerosim
