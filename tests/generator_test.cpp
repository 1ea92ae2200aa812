// Generated scenarios: every shape is a valid scenario, every generated case resumes bit for bit
// with no defect (resume equivalence under crashes, disk faults, elastic resume, deleted swap
// directories), and a failure through a defect shrinks to a scenario of a few steps whose file
// replays to the same diagnosis.
//
// A failing property prints RapidCheck's seed (replay: RC_PARAMS="seed=<seed>" ./generator_test)
// and the failing scenario's file, written under the build directory for `zerosim replay FILE`.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "scenarios/generator.h"
#include "sim/sim_world.h"

namespace zerosim {
namespace {

// The same fields as generate_shape, drawn through RapidCheck so that its shrinking works on them.
ScenarioShape arbitrary_shape() {
  ScenarioShape shape;
  shape.seed = *rc::gen::inRange<uint64_t>(1, 100000);
  shape.save_every = *rc::gen::inRange<int64_t>(1, 4);
  shape.saves_before_kill = *rc::gen::inRange<int64_t>(2, 4);
  shape.steps_after = *rc::gen::inRange<int64_t>(1, 4);
  shape.world_size = *rc::gen::inRange(1, 5);
  shape.resume_world_size = *rc::gen::inRange(0, 5);
  shape.input_width = *rc::gen::inRange<int64_t>(1, 12);
  shape.hidden_widths = *rc::gen::container<std::vector<int64_t>>(*rc::gen::inRange<size_t>(0, 3),
                                                                   rc::gen::inRange<int64_t>(1, 24));
  shape.class_count = *rc::gen::inRange<int64_t>(2, 6);
  shape.precision = *rc::gen::element<std::string>("fp32", "fp16", "bf16");
  shape.micro_batch_size = *rc::gen::inRange<int64_t>(1, 3);
  shape.gradient_accumulation_steps = *rc::gen::inRange<int64_t>(1, 3);
  shape.sub_group_size = *rc::gen::element<int64_t>(7, 16, 64, 1000000000);
  shape.offload_optimizer = *rc::gen::element<std::string>("none", "cpu", "nvme");
  shape.offload_param_nvme = *rc::gen::arbitrary<bool>();
  shape.async_save = *rc::gen::arbitrary<bool>();
  shape.delete_swap_directory = *rc::gen::arbitrary<bool>();
  shape.fault = static_cast<GeneratedFault>(*rc::gen::inRange(0, kGeneratedFaultCount));
  shape.fault_rank = *rc::gen::inRange(0, 4);
  shape.fault_occurrence = *rc::gen::inRange<int64_t>(1, 12);
  shape.fault_site = *rc::gen::element<std::string>("ckpt.save_begin", "ckpt.tag_prepared", "ckpt.shard_written",
                                                    "ckpt.manifest_written", "ckpt.latest_published", "ckpt.save_end");
  shape.commit_operation = *rc::gen::inRange(0, static_cast<int>(commit_protocol_operations().size()));
  shape.storage_fault = static_cast<StorageFault>(*rc::gen::inRange(0, kStorageFaultCount));
  shape.numerics = *rc::gen::element<std::string>("portable", "deepspeed");
  shape.scheduler = *rc::gen::element<std::string>("none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR");
  shape.warmup_type = *rc::gen::element<std::string>("log", "linear");
  shape.warmup_num_steps = *rc::gen::inRange<int64_t>(1, 10);
  shape.total_num_steps = shape.warmup_num_steps + *rc::gen::inRange<int64_t>(0, 8);
  shape.initial_scale_power = *rc::gen::element<int64_t>(8, 16, 24, 32);
  shape.loss_scale_window = *rc::gen::element<int64_t>(1, 2, 3, 1000);
  shape.hysteresis = *rc::gen::inRange<int64_t>(1, 4);
  shape.consecutive_hysteresis = *rc::gen::arbitrary<bool>();
  shape.min_loss_scale_power = *rc::gen::inRange<int64_t>(0, 5);
  shape.keep_last = *rc::gen::inRange<int64_t>(0, 4);
  shape.damaged = *rc::gen::arbitrary<bool>();
  shape.damage.kind = static_cast<AtRestDamage::Kind>(*rc::gen::inRange(0, 5));
  shape.damage.file = *rc::gen::element<std::string>("shard", "manifest", "latest");
  shape.damage.tag = *rc::gen::element<std::string>("newest", "previous");
  shape.damage.rank = *rc::gen::inRange(0, 4);
  shape.damage.from_rank = *rc::gen::inRange(0, 4);
  shape.damage.bit = *rc::gen::inRange<uint64_t>(0, 1 << 24);
  shape.damage.keep_bytes = *rc::gen::inRange<uint64_t>(0, 1 << 16);
  shape.resume_change = *rc::gen::element<std::string>("none", "none", "none", "seed", "dataset_size", "model", "optimizer");
  shape.resume_load = *rc::gen::element<std::string>("all", "all", "no_optimizer", "no_scheduler", "module_only");
  shape.frozen_mask = *rc::gen::element<uint64_t>(0, 0, 1, 2, 5, 12);
  shape.exclude_frozen = *rc::gen::arbitrary<bool>();
  const size_t chained = *rc::gen::element<size_t>(0, 0, 1, 2);
  for (size_t i = 0; i < chained; ++i) {
    ScenarioShape::ChainedRestart restart;
    restart.load = *rc::gen::element<std::string>("all", "no_optimizer", "no_scheduler", "module_only");
    restart.frozen_changed = *rc::gen::arbitrary<bool>();
    restart.frozen_mask = *rc::gen::inRange<uint64_t>(0, 16);
    restart.save_every = *rc::gen::inRange<int64_t>(1, 4);
    restart.saves_before_kill = *rc::gen::inRange<int64_t>(1, 3);
    shape.chain.push_back(restart);
  }
  shape.resume_frozen_changed = *rc::gen::element(false, false, true);
  shape.resume_frozen_mask = *rc::gen::inRange<uint64_t>(0, 16);
  return normalize_shape(shape);
}

// Writes the failing case where `zerosim replay` can read it, and returns the line to print.
std::string replay_hint(const ScenarioShape& shape, const std::string& name) {
  const std::string path = std::string(ZEROSIM_BINARY_DIR) + "/generator_test_failure.json";
  std::ofstream(path) << scenario_document(shape, name).dump(2) << "\n";
  return "scenario: " + describe_shape(shape) + "; replay: zerosim replay " + path;
}

TEST(Generator, ShapesAreValidScenariosAndNormalizingIsIdempotent) {
  for (uint64_t index = 0; index < 300; ++index) {
    const ScenarioShape shape = generate_shape(case_seed(42, index));
    EXPECT_TRUE(normalize_shape(shape) == shape) << describe_shape(shape);
    const Result<Scenario> scenario = scenario_from_json(scenario_document(shape, "x"), "x");
    EXPECT_TRUE(scenario.ok()) << describe_shape(shape) << ": " << scenario.status().to_string();
  }
}

RC_GTEST_PROP(Generator, NormalizingAnyShapeIsIdempotent, ()) {
  ScenarioShape wild;
  wild.save_every = *rc::gen::inRange<int64_t>(-5, 50);
  wild.saves_before_kill = *rc::gen::inRange<int64_t>(-5, 50);
  wild.steps_after = *rc::gen::inRange<int64_t>(-5, 50);
  wild.world_size = *rc::gen::inRange(-3, 40);
  wild.resume_world_size = *rc::gen::inRange(-3, 40);
  wild.gradient_accumulation_steps = *rc::gen::inRange<int64_t>(-3, 40);
  wild.fault = *rc::gen::element(GeneratedFault::kNone, GeneratedFault::kCrashAtStepEnd, GeneratedFault::kCrashInSave,
                                 GeneratedFault::kNoSpaceOnSave, GeneratedFault::kIoErrorOnSave);
  wild.fault_rank = *rc::gen::inRange(-3, 40);
  wild.fault_occurrence = *rc::gen::inRange<int64_t>(-3, 60);
  wild.fault_site = *rc::gen::element<std::string>("ckpt.tag_prepared", "nonsense", "ckpt.save_end");
  wild.async_save = *rc::gen::arbitrary<bool>();
  wild.offload_optimizer = *rc::gen::element<std::string>("none", "nvme", "floppy");
  wild.delete_swap_directory = *rc::gen::arbitrary<bool>();
  const ScenarioShape once = normalize_shape(wild);
  RC_ASSERT(normalize_shape(once) == once);
  RC_ASSERT(scenario_from_json(scenario_document(once, "x"), "x").ok());
}

// Every class the generator exists to reach is drawn, often enough that a 5-minute campaign
// (thousands of cases) meets each many times: counted over the first 2,000 cases of a campaign.
TEST(Generator, EveryDimensionIsDrawnInAThousandsOfCasesCampaign) {
  std::map<std::string, int> seen;
  constexpr int kCases = 2000;
  for (uint64_t index = 0; index < kCases; ++index) {
    const ScenarioShape shape = generate_shape(case_seed(7, index));
    ++seen["fault " + std::to_string(static_cast<int>(shape.fault))];
    if (shape.fault == GeneratedFault::kStorageFault) ++seen["storage " + std::to_string(static_cast<int>(shape.storage_fault))];
    if (shape.fault == GeneratedFault::kPowerLossInSave) {
      ++seen["power loss at " + std::string(commit_protocol_operations()[static_cast<size_t>(shape.commit_operation)].name)];
      if (shape.async_save) ++seen["power loss in an async commit"];
    }
    ++seen["scheduler " + shape.scheduler + (shape.scheduler == "none" ? "" : " " + shape.warmup_type)];
    if (shape.precision == "fp16" && shape.initial_scale_power >= 24 && shape.loss_scale_window <= 3) ++seen["fp16 overflows"];
    if (shape.precision == "fp16" && shape.hysteresis > 1) ++seen["fp16 hysteresis"];
    ++seen["keep_last " + std::to_string(shape.keep_last)];
    ++seen["numerics " + shape.numerics];
    if (shape.resume_world_size > shape.world_size) ++seen["elastic up"];
    if (shape.resume_world_size > 0 && shape.resume_world_size < shape.world_size) ++seen["elastic down"];
    if (shape.resume_world_size > 0 && shape.class_count < shape.resume_world_size) ++seen["elastic: W' above a parameter's size"];
    if (shape.damaged) {
      ++seen["damage " + std::string(at_rest_damage_kind_name(shape.damage.kind)) + " " + shape.damage.file];
      ++seen["damage of the " + shape.damage.tag + " tag"];
    }
    if (shape.resume_change != "none") ++seen["restart changes " + shape.resume_change];
    ++seen["restart loads " + shape.resume_load];
    if (shape.frozen_mask != 0) ++seen[shape.exclude_frozen ? "frozen, excluded on save" : "frozen, saved"];
    if (shape.frozen_mask != 0 && shape.resume_load != "all") ++seen["frozen, restart with a load option"];
    if (shape.frozen_mask != 0 && shape.resume_world_size > 0) ++seen["frozen, elastic"];
    if (!shape.chain.empty()) ++seen["a chain of " + std::to_string(shape.chain.size() + 1) + " restarts"];
    for (const ScenarioShape::ChainedRestart& restart : shape.chain) {
      ++seen["a chained restart loads " + restart.load];
      if (restart.frozen_changed) ++seen["a chained restart changes the frozen set"];
    }
    if (!shape.chain.empty() && shape.resume_load != "all") ++seen["a chain judged after a load with " + shape.resume_load];
    if (shape.resume_frozen_changed) ++seen["the restart changes the frozen set"];
  }
  std::vector<std::string> wanted;
  for (int fault = 0; fault < kGeneratedFaultCount; ++fault) wanted.push_back("fault " + std::to_string(fault));
  for (int fault = 0; fault < kStorageFaultCount; ++fault) wanted.push_back("storage " + std::to_string(fault));
  for (const CommitOperation& operation : commit_protocol_operations()) wanted.push_back("power loss at " + std::string(operation.name));
  for (const char* name :
       {"power loss in an async commit", "scheduler none", "scheduler WarmupLR log", "scheduler WarmupLR linear",
        "scheduler WarmupDecayLR log", "scheduler WarmupDecayLR linear", "scheduler WarmupCosineLR log",
        "scheduler WarmupCosineLR linear", "fp16 overflows", "fp16 hysteresis", "keep_last 0", "keep_last 1",
        "keep_last 2", "keep_last 3", "numerics portable", "numerics deepspeed", "elastic up", "elastic down",
        "elastic: W' above a parameter's size", "damage flip_bit shard", "damage flip_bit manifest", "damage flip_bit latest",
        "damage truncate shard", "damage truncate manifest", "damage remove shard", "damage remove manifest",
        "damage remove latest", "damage stale_copy shard", "damage stale_copy manifest", "damage other_rank shard",
        "damage of the newest tag", "damage of the previous tag", "restart changes seed", "restart changes dataset_size",
        "restart changes model", "restart changes optimizer", "restart loads all", "restart loads no_optimizer",
        "restart loads no_scheduler", "restart loads module_only", "frozen, saved", "frozen, excluded on save",
        "frozen, restart with a load option", "frozen, elastic", "a chain of 2 restarts", "a chain of 3 restarts",
        "a chained restart loads all", "a chained restart loads no_optimizer", "a chained restart loads no_scheduler",
        "a chained restart loads module_only", "a chained restart changes the frozen set",
        "a chain judged after a load with no_optimizer", "a chain judged after a load with no_scheduler",
        "a chain judged after a load with module_only", "the restart changes the frozen set"}) {
    wanted.push_back(name);
  }
  for (const std::string& name : wanted) {
    EXPECT_GE(seen[name], 5) << name << " is drawn " << seen[name] << " times in " << kCases << " cases";
  }
}

TEST(Generator, CaseSeedsAreDisjointAcrossIndicesAndShards) {
  std::set<uint64_t> seeds;
  for (uint64_t index = 0; index < 20000; ++index) seeds.insert(case_seed(7, index));
  EXPECT_EQ(seeds.size(), 20000u);
  EXPECT_NE(case_seed(7, 0), case_seed(8, 0));
  EXPECT_EQ(describe_shape(generate_shape(case_seed(7, 11))), describe_shape(generate_shape(case_seed(7, 11))));
}

// A storage fault on a swap file drawn past the last operation the run makes on it: run_shape
// moves it to the last one, or drops it when there is none.
TEST(Generator, AStorageFaultPastTheLastSwapOperationIsMovedToItOrDropped) {
  // Two drawn cases of campaign 7 (fp16 from a scale of 2^32: the first steps overflow and are
  // skipped, reading and writing no optimizer state). Case 266: the fourth read of rank 1's
  // exp_avg swap file after the first commit never comes. Case 24: every step of the first
  // phase is skipped, so rank 0's parameter swap file is never written after the first commit.
  const ScenarioShape late = generate_shape(case_seed(7, 266));
  ASSERT_EQ(late.fault, GeneratedFault::kStorageFault) << describe_shape(late);
  ASSERT_EQ(late.storage_fault, StorageFault::kReadErrorSwap) << describe_shape(late);
  ASSERT_EQ(late.fault_occurrence, 4) << describe_shape(late);
  ScenarioShape ran;
  const Result<ScenarioVerdict> moved = run_shape(late, "moved", DefectSet{}, nullptr, ComputeDevice{}, &ran);
  ASSERT_TRUE(moved.ok()) << moved.status().to_string();
  EXPECT_TRUE(moved->passed) << moved->outcome << "; " << moved->diagnosis;
  EXPECT_EQ(ran.fault, GeneratedFault::kStorageFault);
  EXPECT_LT(ran.fault_occurrence, 4) << describe_shape(ran);
  EXPECT_GE(ran.fault_occurrence, 1) << describe_shape(ran);
  ASSERT_EQ(moved->fault_rule_counts.size(), 1u);
  EXPECT_NE(moved->fault_rule_counts[0].find(", fired 1"), std::string::npos) << moved->fault_rule_counts[0];

  const ScenarioShape never = generate_shape(case_seed(7, 24));
  ASSERT_EQ(never.fault, GeneratedFault::kStorageFault) << describe_shape(never);
  ASSERT_EQ(never.storage_fault, StorageFault::kLostWriteSwap) << describe_shape(never);
  const Result<ScenarioVerdict> dropped = run_shape(never, "dropped", DefectSet{}, nullptr, ComputeDevice{}, &ran);
  ASSERT_TRUE(dropped.ok()) << dropped.status().to_string();
  EXPECT_TRUE(dropped->passed) << dropped->outcome << "; " << dropped->diagnosis;
  EXPECT_EQ(ran.fault, GeneratedFault::kNone) << describe_shape(ran);
  EXPECT_TRUE(dropped->fault_rule_counts.empty());
}

// Shrinking keeps the failure's class: a simpler shape whose fault no longer fires is another failure.
TEST(Generator, AFaultThatNeverHappenedIsAClassOfItsOwn) {
  ScenarioVerdict verdict;
  verdict.resumed_at = -1;
  EXPECT_EQ(failure_class(verdict), "refused");
  verdict.fault_never_happened = true;
  EXPECT_EQ(failure_class(verdict), "fault never happened");
  verdict.passed = true;
  EXPECT_EQ(failure_class(verdict), "");
}

RC_GTEST_PROP(GeneratedScenarios, ResumeAfterRecoverableFaultsIsBitIdentical, ()) {
  const ScenarioShape shape = arbitrary_shape();
  RC_TAG(static_cast<int>(shape.fault), shape.offload_optimizer, shape.resume_world_size > 0);
  const Result<ScenarioVerdict> verdict = run_shape(shape, "property case", DefectSet{});
  if (!verdict.ok()) RC_FAIL(verdict.status().to_string() + "; " + replay_hint(shape, "property case"));
  if (!verdict->passed) RC_FAIL(verdict->outcome + "; " + verdict->diagnosis + "; " + replay_hint(shape, "property case"));
}

// Offload and world-size invariance: where the state lives and how many ranks hold it change
// no bit of the trajectory.
RC_GTEST_PROP(GeneratedScenarios, OffloadAndWorldSizeChangeNoBit, ()) {
  ScenarioShape shape = arbitrary_shape();
  shape.offload_optimizer = "none";
  shape.offload_param_nvme = false;
  // DeepSpeed's numerics depend on W by design (ds_config.h NumericsMode); the portable ones do not.
  shape.numerics = "portable";
  auto final_digest = [&](const ScenarioShape& variant) -> std::string {
    Result<Scenario> scenario = scenario_from_json(scenario_document(variant, "x"), "x");
    RC_ASSERT(scenario.ok());
    SimDisk disk(SimDiskOptions{512, uint64_t{1} << 40, 1});
    NoCrashPoints no_crash;
    SimWorld world(disk, scenario->run.options.world_size, FaultPlan{}, no_crash);
    Result<TrainingRun> run = run_training(scenario->run.options, 4, world.seams());
    if (!run.ok()) RC_FAIL(run.status().to_string() + "; " + replay_hint(variant, "x"));
    return run->digests.state;
  };
  const std::string reference = final_digest(shape);
  ScenarioShape offloaded = shape;
  offloaded.offload_optimizer = *rc::gen::element<std::string>("cpu", "nvme");
  offloaded.offload_param_nvme = *rc::gen::arbitrary<bool>();
  RC_ASSERT(final_digest(offloaded) == reference);
  // One rank with the whole batch: W x accumulation micro-batches per step.
  ScenarioShape one_rank = shape;
  one_rank.gradient_accumulation_steps = shape.gradient_accumulation_steps * shape.world_size;
  one_rank.world_size = 1;
  if (one_rank.gradient_accumulation_steps <= 3) RC_ASSERT(final_digest(one_rank) == reference);
}

// Determinism of the harness itself: every field of a verdict (outcome, diagnosis, loss curves,
// the crash marker) is the same when a case runs again, including with async saves, crashes at
// any rank and a defect.
TEST(GeneratedScenarios, EveryVerdictIsTheSameWhenACaseRunsAgain) {
  for (const DefectSet& defects : {DefectSet{}, DefectSet{Defect::kAsyncSnapshotNotCopied}}) {
    for (uint64_t index = 0; index < 40; ++index) {
      const ScenarioShape shape = generate_shape(case_seed(5, index));
      SCOPED_TRACE(describe_shape(shape));
      const Result<ScenarioVerdict> first = run_shape(shape, "case", defects);
      const Result<ScenarioVerdict> second = run_shape(shape, "case", defects);
      ASSERT_TRUE(first.ok() && second.ok());
      EXPECT_EQ(first->passed, second->passed);
      EXPECT_EQ(first->outcome, second->outcome);
      EXPECT_EQ(first->diagnosis, second->diagnosis);
      EXPECT_EQ(first->crash, second->crash);
      EXPECT_EQ(first->steps_before_crash, second->steps_before_crash);
      EXPECT_EQ(first->resumed_at, second->resumed_at);
      EXPECT_EQ(first->reference_losses, second->reference_losses);
      EXPECT_EQ(first->resumed_losses, second->resumed_losses);
    }
  }
}

TEST(Shrinking, ADefectFailureShrinksToAFewStepsAndItsFileReplaysTheSameDiagnosis) {
  // A big case: 4 ranks resuming on 2, three hidden layers, NVMe offload, accumulation, a crash
  // in the third save. The defect loses the scheduler on load.
  ScenarioShape big;
  big.seed = 4242;
  big.save_every = 3;
  big.saves_before_kill = 3;
  big.steps_after = 4;
  big.world_size = 4;
  big.resume_world_size = 2;
  big.input_width = 12;
  big.hidden_widths = {24, 17, 9};
  big.class_count = 6;
  big.precision = "bf16";
  big.gradient_accumulation_steps = 3;
  big.micro_batch_size = 2;
  big.offload_optimizer = "nvme";
  big.offload_param_nvme = true;
  big.delete_swap_directory = true;
  big.fault = GeneratedFault::kCrashInSave;
  big.fault_site = "ckpt.manifest_written";
  big.fault_occurrence = 3;
  big = normalize_shape(big);
  const DefectSet defects{Defect::kSchedulerNotRestored};
  const Result<ScenarioVerdict> failing = run_shape(big, "big", defects);
  ASSERT_TRUE(failing.ok()) << failing.status().to_string();
  ASSERT_FALSE(failing->passed) << failing->outcome;
  ASSERT_EQ(failure_class(*failing), "scheduler") << failing->diagnosis;

  const Result<ShrinkResult> shrunk = shrink_failure(big, *failing, defects);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status().to_string();
  const ScenarioShape& small = shrunk->shape;
  const int64_t total_steps = small.save_every * small.saves_before_kill + small.steps_after;
  EXPECT_LE(total_steps, 4) << describe_shape(small);
  EXPECT_EQ(small.world_size, 1) << describe_shape(small);
  EXPECT_TRUE(small.hidden_widths.empty()) << describe_shape(small);
  EXPECT_EQ(small.offload_optimizer, "none") << describe_shape(small);
  EXPECT_EQ(failure_class(shrunk->verdict), "scheduler");
  EXPECT_GT(shrunk->accepted, 3);

  // The file fuzz would write (with the defect in it) replays to the same diagnosis.
  nlohmann::json document = scenario_document(small, "shrunk");
  document["defects"] = {"scheduler_not_restored"};
  const Result<Scenario> replayed_scenario = scenario_from_json(nlohmann::json::parse(document.dump()), "shrunk.json");
  ASSERT_TRUE(replayed_scenario.ok()) << replayed_scenario.status().to_string();
  const Result<ScenarioVerdict> replayed = run_scenario(*replayed_scenario, DefectSet{});
  ASSERT_TRUE(replayed.ok());
  EXPECT_FALSE(replayed->passed);
  EXPECT_EQ(replayed->diagnosis, shrunk->verdict.diagnosis);
  EXPECT_NE(replayed->diagnosis.find("scheduler: last_batch_iteration"), std::string::npos) << replayed->diagnosis;
  // Without the defect the shrunk scenario passes: the failure is the defect's, not the shape's.
  const Result<ScenarioVerdict> clean = run_shape(small, "shrunk", DefectSet{});
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->passed) << clean->diagnosis;
}

}  // namespace
}  // namespace zerosim
