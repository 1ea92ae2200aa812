// Every named defect, switched on, makes a resume check fail, and the failure names the state
// that diverged; with no defect the same checks pass (so they can fail only through the defect).
#include <gtest/gtest.h>

#include "core/env/defects.h"
#include "sim/crash_explorer.h"
#include "sim/sim_disk.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

struct ResumeCase {
  TrainingOptions options;
  TrainingOptions resume_options;
  int64_t save_step = 3;
  int64_t total_steps = 6;
  int64_t first_phase_steps = 3;  // the run that saves may go on past the save
  std::string resume_tag = "latest";
};

// Save at save_step (with the defects on), resume from the checkpoint (defects on), continue
// to total_steps; the first divergence from the defect-free uninterrupted run, or "".
std::string resume_divergence(const ResumeCase& test_case, const DefectSet* defects) {
  SimDisk disk;
  NoCrashPoints no_crash;
  std::unique_ptr<Clock> clock = make_steady_clock();
  Env env{&disk, clock.get(), &no_crash, defects};
  TrainingOptions reference_options = test_case.options;
  reference_options.digest_every_step = true;
  SimDisk reference_disk;
  Env reference_env{&reference_disk, clock.get(), &no_crash, nullptr};
  Result<TrainingRun> reference = run_training(reference_options, test_case.total_steps, reference_env);
  if (!reference.ok()) return "reference failed: " + reference.status().to_string();
  CheckpointPlan save;
  save.save_directory = "/ckpt";
  save.save_every_steps = test_case.save_step;
  Result<TrainingRun> first = run_training(test_case.options, test_case.first_phase_steps, env, save);
  if (!first.ok()) return "first phase failed: " + first.status().to_string();
  TrainingOptions resume_options = test_case.resume_options;
  resume_options.digest_every_step = true;
  CheckpointPlan resume;
  resume.resume_directory = "/ckpt";
  resume.resume_tag = test_case.resume_tag;
  Result<TrainingRun> resumed = run_training(resume_options, test_case.total_steps, env, resume);
  if (!resumed.ok()) return "resume failed: " + resumed.status().to_string();
  const int64_t resumed_at = test_case.total_steps - static_cast<int64_t>(resumed->steps.size());
  if (test_case.resume_tag != "latest" && checkpoint_tag_for_step(resumed_at) != test_case.resume_tag) {
    return "resumed at step " + std::to_string(resumed_at) + ", not from " + test_case.resume_tag;
  }
  return first_divergence(*reference, *resumed, test_case.total_steps - static_cast<int64_t>(resumed->steps.size()));
}

ResumeCase base_case() {
  ResumeCase test_case;
  test_case.options = make_options(ModelSpec{{7, 6, 3}}, Precision::kFp16, 2, 1, 2, 20, 41);
  test_case.options.config.loss_scaler.loss_scale_window = 2;  // the scale moves within a few steps
  test_case.resume_options = test_case.options;
  return test_case;
}

// The case that exercises each defect, and the state its failure must name.
struct DefectCase {
  Defect defect;
  ResumeCase resume_case;
  std::string expected;  // a part of the divergence message
};

std::vector<DefectCase> defect_cases() {
  std::vector<DefectCase> cases;
  auto add = [&](Defect defect, ResumeCase resume_case, std::string expected) {
    cases.push_back(DefectCase{defect, std::move(resume_case), std::move(expected)});
  };
  add(Defect::kOptimizerStateNotSaved, base_case(), "after load (step 3): exp_avg");
  {
    ResumeCase swapped = base_case();
    for (TrainingOptions* options : {&swapped.options, &swapped.resume_options}) {
      options->config.zero.offload_optimizer.device = OffloadDevice::kNvme;
      options->config.zero.offload_optimizer.nvme_path = "/nvme";
      options->config.zero.offload_optimizer.buffer_count = 9;
    }
    add(Defect::kSwappedStateNotSaved, swapped, "after load (step 3): master");
  }
  add(Defect::kMasterRebuiltFromParams, base_case(), "after load (step 3): master");
  add(Defect::kStepCounterNotRestored, base_case(), "after load (step 3): counters");
  {
    ResumeCase overflowing = base_case();
    overflowing.options.config.loss_scaler.initial_scale_power = 40;  // the first steps overflow
    overflowing.resume_options = overflowing.options;
    add(Defect::kSkippedStepsNotRestored, overflowing, "after load (step 3): counters");
  }
  add(Defect::kSchedulerNotRestored, base_case(), "after load (step 3): scheduler");
  add(Defect::kLossScalerResetOnLoad, base_case(), "after load (step 3): loss_scaler");
  add(Defect::kSamplerPositionLost, base_case(), "after load (step 3): counters");
  {
    ResumeCase accumulating = base_case();
    accumulating.options = make_options(ModelSpec{{7, 6, 3}}, Precision::kFp16, 2, 2, 2, 20, 41);
    accumulating.resume_options = accumulating.options;
    add(Defect::kAccumulationBoundaryLost, accumulating, "after load (step 3): counters");
  }
  {
    ResumeCase async = base_case();
    async.options.config.checkpoint.async_save = true;
    async.first_phase_steps = 4;  // the step after the save runs before the (deferred) write
    async.resume_tag = "global_step3";
    add(Defect::kAsyncSnapshotNotCopied, async, "after load (step 3): params");
  }
  {
    ResumeCase reshard = base_case();
    reshard.options = make_options(ModelSpec{{5, 4, 3}}, Precision::kFp32, 1, 2, 3, 20, 41);  // 20 = 3 x 7 - 1
    reshard.resume_options = make_options(ModelSpec{{5, 4, 3}}, Precision::kFp32, 1, 3, 2, 20, 41);
    add(Defect::kWrongPaddingOnReshard, reshard, "after load (step 3): params");
  }
  {
    ResumeCase later_epoch = base_case();  // 4 samples a step, 20 samples: step 6 is in epoch 1
    later_epoch.options.data.sample_count = 20;
    later_epoch.resume_options = later_epoch.options;
    later_epoch.save_step = 6;
    later_epoch.first_phase_steps = 6;
    later_epoch.total_steps = 8;
    add(Defect::kShuffleEpochNotRestored, later_epoch, "after load (step 6): rng");
  }
  add(Defect::kParamsNotRefreshedAfterLoad, base_case(), "after load (step 3): params");
  {
    ResumeCase tagged = base_case();  // saves at 3 and 6, the restart asks for step 3
    tagged.first_phase_steps = 6;
    tagged.total_steps = 7;
    tagged.resume_tag = "global_step3";
    add(Defect::kRequestedTagIgnored, tagged, "resumed at step 6, not from global_step3");
  }
  return cases;
}

TEST(Defects, EveryDefectIsListedWithANameAndADescription) {
  // The load-option and frozen-parameter defects are caught by the options_* library scenarios,
  // the buffer defects by the transformer_* ones.
  EXPECT_EQ(all_defects().size(), 27u);
  for (const DefectInfo& info : all_defects()) {
    EXPECT_EQ(defect_from_name(info.name), info.defect) << info.name;
    EXPECT_GT(std::string(info.description).size(), 20u) << info.name;
  }
  EXPECT_FALSE(defect_from_name("no_such_defect").has_value());
}

TEST(Defects, EachDefectMakesTheResumeCheckFailNamingTheStateAndTheCheckPassesWithout) {
  for (const DefectCase& test_case : defect_cases()) {
    SCOPED_TRACE(defect_name(test_case.defect));
    EXPECT_EQ(resume_divergence(test_case.resume_case, nullptr), "") << "the check fails even without the defect";
    const DefectSet defects{test_case.defect};
    const std::string divergence = resume_divergence(test_case.resume_case, &defects);
    EXPECT_NE(divergence.find(test_case.expected), std::string::npos)
        << "expected '" << test_case.expected << "', found '" << divergence << "'";
  }
}

// The one defect in how a save is made durable: only a crash shows it, so the crash explorer
// is the check, and it names the checkpoint that a crash lost.
TEST(Defects, LatestBeforeShardsDurableIsCaughtByTheCrashExplorer) {
  CrashScenario scenario;
  scenario.options = make_options(ModelSpec{{6, 5, 3}}, Precision::kFp16, 1, 1, 2, 16, 77);
  scenario.crash_state_bound = 16;
  const Result<ExplorationResult> clean = explore_save_crashes(scenario);
  ASSERT_TRUE(clean.ok()) << clean.status().to_string();
  EXPECT_EQ(clean->failed, 0);
  scenario.defects = DefectSet{Defect::kLatestBeforeShardsDurable};
  const Result<ExplorationResult> defective = explore_save_crashes(scenario);
  ASSERT_TRUE(defective.ok()) << defective.status().to_string();
  ASSERT_GT(defective->failed, 0);
  EXPECT_NE(defective->failures[0].reason.find("global_step2"), std::string::npos) << defective->failures[0].reason;
}

}  // namespace
}  // namespace zerosim
