// The reference cache: the key changes with every input that determines a run, a hit returns the
// run that was computed, and a scenario's verdict is the same with and without the cache.
#include <gtest/gtest.h>

#include <filesystem>

#include "scenarios/reference_cache.h"
#include "scenarios/scenario_runner.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

TEST(ReferenceCache, TheKeyChangesWithEveryDeterminingInput) {
  const TrainingOptions base = make_options(ModelSpec{{6, 5, 3}}, Precision::kFp16, 1, 2, 2, 16, 7);
  const std::string key = reference_key(base, 6);
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(reference_key(base, 6), key);
  EXPECT_NE(reference_key(base, 7), key);
  TrainingOptions changed = base;
  changed.model.layer_widths = {6, 4, 3};
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.seed = 8;
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.data.sample_count = 50;
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.world_size = 1;
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.config.resolved["zero_optimization"]["sub_group_size"] = 3;
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.data.seed = 99;
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.simd_path = SimdPath::kScalar;
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.capture_state_at_step = 2;
  EXPECT_NE(reference_key(changed, 6), key);
  changed = base;
  changed.digest_every_step = !base.digest_every_step;
  EXPECT_NE(reference_key(changed, 6), key);
}

TEST(ReferenceCache, AHitReturnsTheComputedRunAndVerdictsDoNotChange) {
  ReferenceCache cache;
  int computed = 0;
  const TrainingOptions options = make_options(ModelSpec{{6, 5, 3}}, Precision::kFp32, 1, 1, 1, 16, 7);
  auto compute = [&]() -> Result<TrainingRun> {
    ++computed;
    TrainingRun run;
    run.digests.state = "abc";
    return run;
  };
  ASSERT_TRUE(cache.get_or_run(options, 3, compute).ok());
  const Result<TrainingRun> again = cache.get_or_run(options, 3, compute);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->digests.state, "abc");
  EXPECT_EQ(computed, 1);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
  // A failed computation is not cached.
  auto failing = [&]() -> Result<TrainingRun> {
    ++computed;
    return internal_error("no");
  };
  EXPECT_FALSE(cache.get_or_run(options, 4, failing).ok());
  EXPECT_FALSE(cache.get_or_run(options, 4, failing).ok());
  EXPECT_EQ(computed, 3);

  const Result<Scenario> scenario =
      read_scenario_file(std::string(ZEROSIM_SCENARIO_LIBRARY_DIR) + "/class_c_lr_schedule_across_warmup.json");
  ASSERT_TRUE(scenario.ok()) << scenario.status().to_string();
  ReferenceCache references;
  for (const DefectSet& defects : {DefectSet{}, DefectSet{Defect::kSchedulerNotRestored}}) {
    const Result<ScenarioVerdict> plain = run_scenario(*scenario, defects);
    const Result<ScenarioVerdict> cached = run_scenario(*scenario, defects, &references);
    ASSERT_TRUE(plain.ok() && cached.ok());
    EXPECT_EQ(plain->passed, cached->passed);
    EXPECT_EQ(plain->outcome, cached->outcome);
    EXPECT_EQ(plain->diagnosis, cached->diagnosis);
    EXPECT_EQ(plain->reference_losses, cached->reference_losses);
  }
  EXPECT_EQ(references.misses(), 1);
  EXPECT_EQ(references.hits(), 1);
}

}  // namespace
}  // namespace zerosim
