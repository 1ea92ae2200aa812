// zerosim's model of DeepSpeed edaa722's ZeRO-3 resume (scenarios/deepspeed_model.h): each entry
// applies to the stories it names and to no other, and its defects produce the divergence (or
// the refusal) the entry describes, while the same scenario passes on zerosim's engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "scenarios/deepspeed_model.h"
#include "scenarios/scenario_runner.h"

namespace zerosim {
namespace {

using nlohmann::json;

// A small story: train 6 steps on W ranks saving every 2, the job killed after step 4 (no
// power loss), a restart; `extra` overrides or adds keys.
Scenario story(const json& extra) {
  json document = {{"name", "deepspeed model"}, {"model", "7,9,3"}, {"world_size", 2}, {"micro_batch_size", 1},
                   {"seed", 3}, {"save_every", 2}, {"explored_save_step", 4}, {"steps", 6}, {"precision", "bf16"},
                   {"power_loss", false}};
  for (const auto& [key, value] : extra.items()) document[key] = value;
  const Result<Scenario> scenario = scenario_from_json(document, "story.json");
  EXPECT_TRUE(scenario.ok()) << scenario.status().to_string();
  return scenario.ok() ? *scenario : Scenario{};
}

json nvme_config(const char* fp16) {
  return json::parse(std::string(R"({"fp16": {"enabled": )") + fp16 + R"(, "initial_scale_power": 16},
      "bf16": {"enabled": "auto"}, "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}},
      "zero_optimization": {"stage": 3, "sub_group_size": 1e9,
                            "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme/optimizer"}}})");
}

std::set<std::string> ids(const std::vector<DeepSpeedModelEntry>& entries) {
  std::set<std::string> result;
  for (const DeepSpeedModelEntry& entry : entries) result.insert(entry.id);
  return result;
}

const DeepSpeedModelEntry& entry_named(const std::string& id) {
  for (const DeepSpeedModelEntry& entry : deepspeed_model_entries()) {
    if (entry.id == id) return entry;
  }
  ADD_FAILURE() << "no entry " << id;
  return deepspeed_model_entries().front();
}

// Runs the scenario with the entry's defects: it must fail, and its diagnosis or refusal must
// contain `expected`; without them it must pass.
void expect_entry_shows(const Scenario& scenario, const std::string& id, const std::string& expected) {
  SCOPED_TRACE(id);
  DefectSet defects;
  for (Defect defect : entry_named(id).defects) defects.enable(defect);
  const Result<ScenarioVerdict> as_deepspeed = run_scenario(scenario, defects);
  ASSERT_TRUE(as_deepspeed.ok()) << as_deepspeed.status().to_string();
  EXPECT_FALSE(as_deepspeed->passed) << as_deepspeed->outcome;
  EXPECT_NE((as_deepspeed->diagnosis + " " + as_deepspeed->outcome).find(expected), std::string::npos)
      << as_deepspeed->outcome << "\n" << as_deepspeed->diagnosis;
  const Result<ScenarioVerdict> correct = run_scenario(scenario, DefectSet{});
  ASSERT_TRUE(correct.ok()) << correct.status().to_string();
  EXPECT_TRUE(correct->passed) << correct->outcome << correct->diagnosis;
}

TEST(DeepSpeedModel, EveryEntryNamesItsSourceItsDefectsAndWhatARunShowed) {
  std::set<std::string> seen;
  for (const DeepSpeedModelEntry& entry : deepspeed_model_entries()) {
    EXPECT_TRUE(seen.insert(entry.id).second) << entry.id << " twice";
    EXPECT_FALSE(entry.defects.empty()) << entry.id;
    EXPECT_NE(entry.source.find(".py:"), std::string::npos) << entry.id << ": " << entry.source;
    EXPECT_GT(entry.effect.size(), 40u) << entry.id;
    // Each entry says what running DeepSpeed showed, with the version, or why it was not run.
    const bool measured = entry.measured.find("DeepSpeed 0.") != std::string::npos;
    const bool not_run = entry.measured.rfind("not run", 0) == 0 || entry.measured.rfind("not measured", 0) == 0;
    EXPECT_TRUE(measured || not_run) << entry.id << ": " << entry.measured;
  }
  EXPECT_EQ(seen.size(), 8u);
}

// The optimizer on NVMe with a model whose sub-group is above DeepSpeed's swap threshold
// (263,682 elements x 4 bytes >= 1 MiB at W=1): the master survives, the moments do not.
TEST(DeepSpeedModel, NvmeLosesTheMomentsStepLrAndFp16ScaleOfASwappedSubGroup) {
  const Scenario bf16 = story({{"model", "512,512,2"}, {"world_size", 1}, {"config", nvme_config("false")}});
  EXPECT_EQ(ids(deepspeed_model_for(bf16, TrainingLoop::kHfTrainer)),
            (std::set<std::string>{"nvme-optimizer-not-loaded", "no-fsync"}));
  expect_entry_shows(bf16, "nvme-optimizer-not-loaded", "after load (step 4): exp_avg");
  const Scenario fp16 = story({{"model", "512,512,2"}, {"world_size", 1}, {"precision", "fp16"}, {"config", nvme_config("true")}});
  EXPECT_EQ(ids(deepspeed_model_for(fp16, TrainingLoop::kHfTrainer)),
            (std::set<std::string>{"nvme-optimizer-not-loaded", "nvme-fp16-loss-scaler", "no-fsync"}));
  expect_entry_shows(fp16, "nvme-fp16-loss-scaler", "after load (step 4): loss_scaler");
}

// A small sub-group stays in memory: its state reverts to the initial weights.
TEST(DeepSpeedModel, NvmeRevertsASubGroupBelowTheSwapThreshold) {
  const Scenario small = story({{"config", nvme_config("false")}});
  EXPECT_EQ(ids(deepspeed_model_for(small, TrainingLoop::kHfTrainer)),
            (std::set<std::string>{"nvme-optimizer-not-loaded", "nvme-unswapped-sub-groups", "no-fsync"}));
  expect_entry_shows(small, "nvme-unswapped-sub-groups", "after load (step 4): params");
}

json nvme_config_of_release(const char* fp16, const char* release) {
  json config = nvme_config(fp16);
  config["zerosim"] = {{"deepspeed_release", release}};
  return config;
}

// zerosim.deepspeed_release decides the NVMe entries: DeepSpeed 0.13.0 to 0.16.4 read the zero
// checkpoint on load (0.14.5 measured: bit for bit with every sub-group in memory), so none of
// the three applies there; what is not known is refused by name.
TEST(DeepSpeedModel, TheReleaseDecidesTheNvmeEntriesAndWhatIsNotKnownIsRefused) {
  const Scenario measured = story({{"precision", "fp16"}, {"config", nvme_config_of_release("true", "0.14.5")}});
  Result<std::vector<DeepSpeedModelEntry>> entries = deepspeed_model_for_release(measured, TrainingLoop::kHfTrainer);
  ASSERT_TRUE(entries.ok()) << entries.status().to_string();
  EXPECT_EQ(ids(*entries), (std::set<std::string>{"no-fsync"}));
  EXPECT_EQ(ids(deepspeed_model_for(measured, TrainingLoop::kHfTrainer)),
            (std::set<std::string>{"nvme-optimizer-not-loaded", "nvme-fp16-loss-scaler", "nvme-unswapped-sub-groups",
                                   "no-fsync"}));
  // Without the key: the newest releases', as before.
  const Scenario newest = story({{"precision", "fp16"}, {"config", nvme_config("true")}});
  ASSERT_TRUE(deepspeed_model_for_release(newest, TrainingLoop::kHfTrainer).ok());
  EXPECT_EQ(ids(*deepspeed_model_for_release(newest, TrainingLoop::kHfTrainer)),
            ids(deepspeed_model_for(newest, TrainingLoop::kHfTrainer)));
  // A swapped sub-group on such a release: measured, and not modelled (DeepSpeed's master is not kept).
  const Scenario swapped =
      story({{"model", "512,512,2"}, {"world_size", 1}, {"config", nvme_config_of_release("false", "0.14.5")}});
  const auto swapped_entries = deepspeed_model_for_release(swapped, TrainingLoop::kHfTrainer);
  ASSERT_FALSE(swapped_entries.ok());
  EXPECT_NE(swapped_entries.status().message().find("does not keep that sub-group's fp32 master"), std::string::npos)
      << swapped_entries.status().message();
  for (const char* release : {"0.12.6", "0.17.0"}) {
    const Scenario unknown = story({{"config", nvme_config_of_release("false", release)}});
    const auto refused = deepspeed_model_for_release(unknown, TrainingLoop::kHfTrainer);
    ASSERT_FALSE(refused.ok()) << release;
    EXPECT_NE(refused.status().message().find(std::string("zerosim.deepspeed_release ") + release), std::string::npos)
        << refused.status().message();
  }
  // Off NVMe the release changes no entry.
  json cpu = nvme_config_of_release("false", "0.12.6");
  cpu["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  const Scenario on_cpu = story({{"config", cpu}, {"resume_load_module_only", true}});
  ASSERT_TRUE(deepspeed_model_for_release(on_cpu, TrainingLoop::kHfTrainer).ok());
  EXPECT_EQ(ids(*deepspeed_model_for_release(on_cpu, TrainingLoop::kHfTrainer)),
            ids(deepspeed_model_for(on_cpu, TrainingLoop::kHfTrainer)));
}

TEST(DeepSpeedModel, AnotherWorldSizeIsRefusedUnlessAFreshOptimizerLoadsOnFewerRanks) {
  // train_batch_size 6 (accumulation 3 at W=2): W' = 1 and 3 divide it.
  const Scenario grown = story({{"gradient_accumulation_steps", 3}, {"resume_world_size", 3}});
  EXPECT_TRUE(ids(deepspeed_model_for(grown, TrainingLoop::kHfTrainer)).count("other-world-size"));
  expect_entry_shows(grown, "other-world-size", "used a DP world size of 2 but the current world size is 3");
  const Scenario shrunk_fresh = story({{"gradient_accumulation_steps", 3}, {"resume_world_size", 1}, {"resume_load_optimizer_states", false}});
  EXPECT_FALSE(ids(deepspeed_model_for(shrunk_fresh, TrainingLoop::kHfTrainer)).count("other-world-size"));
  const Scenario grown_fresh = story({{"gradient_accumulation_steps", 3}, {"resume_world_size", 3}, {"resume_load_optimizer_states", false}});
  EXPECT_TRUE(ids(deepspeed_model_for(grown_fresh, TrainingLoop::kHfTrainer)).count("other-world-size"));
  const Scenario shrunk_module_only = story({{"gradient_accumulation_steps", 3}, {"resume_world_size", 1}, {"resume_load_module_only", true}});
  EXPECT_FALSE(ids(deepspeed_model_for(shrunk_module_only, TrainingLoop::kHfTrainer)).count("other-world-size"));
  // With the optimizer on NVMe the world-size check is never reached: not modelled, not applied.
  const Scenario grown_nvme =
      story({{"gradient_accumulation_steps", 3}, {"resume_world_size", 3}, {"config", nvme_config("false")}});
  EXPECT_FALSE(ids(deepspeed_model_for(grown_nvme, TrainingLoop::kHfTrainer)).count("other-world-size"));
}

TEST(DeepSpeedModel, AFreshOptimizerLoadTakesLatestNotTheTagAskedFor) {
  const Scenario older_tag = story({{"resume_tag", "global_step2"}, {"resume_load_optimizer_states", false},
                                    {"expect", {{"bit_identical", true}, {"resumed_at_step", 2}}}});
  EXPECT_EQ(ids(deepspeed_model_for(older_tag, TrainingLoop::kHfTrainer)),
            (std::set<std::string>{"fresh-optimizer-reads-latest", "no-fsync"}));
  expect_entry_shows(older_tag, "fresh-optimizer-reads-latest", "expected the resume to start at step 2");
  EXPECT_FALSE(ids(deepspeed_model_for(story({{"resume_tag", "global_step2"}}), TrainingLoop::kHfTrainer))
                   .count("fresh-optimizer-reads-latest"));
}

TEST(DeepSpeedModel, ModuleOnlyLoadsNoWeight) {
  const Scenario module_only = story({{"resume_load_module_only", true}});
  EXPECT_TRUE(ids(deepspeed_model_for(module_only, TrainingLoop::kHfTrainer)).count("module-only-no-weights"));
  expect_entry_shows(module_only, "module-only-no-weights", "params");
}

// Without fsync, a power loss right after the saves takes the checkpoints with it: lost work
// or no complete checkpoint, never a silent resume.
TEST(DeepSpeedModel, NoFsyncLosesTheCheckpointsToAPowerLoss) {
  const Scenario power_loss = story({{"power_loss", true}});
  expect_entry_shows(power_loss, "no-fsync", "global_step4");  // the committed tag it lost
}

TEST(DeepSpeedModel, APlainLoopLosesTheDataPosition) {
  const Scenario plain = story({{"steps", 8}});
  EXPECT_FALSE(ids(deepspeed_model_for(plain, TrainingLoop::kHfTrainer)).count("plain-loop-data-position"));
  EXPECT_TRUE(ids(deepspeed_model_for(plain, TrainingLoop::kPlain)).count("plain-loop-data-position"));
  expect_entry_shows(plain, "plain-loop-data-position", "global_samples: expected 8, found 0");
}

}  // namespace
}  // namespace zerosim
