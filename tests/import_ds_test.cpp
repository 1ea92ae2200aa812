// import-ds: the seed report's config becomes a scenario that keeps the config verbatim, loads,
// and passes; bad options are refused naming the option.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "scenarios/import_ds.h"
#include "scenarios/scenario_runner.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

// A copy of ../shared/seed/ds_config.json, the config of the bug report zerosim started from.
std::string seed_config_path() { return std::string(ZEROSIM_TEST_DATA_DIR) + "/seed_ds_config.json"; }

TEST(ImportDs, TheSeedConfigBecomesAScenarioThatKeepsItVerbatimAndPasses) {
  ImportOptions options;
  options.config_path = seed_config_path();
  options.crash = "engine.step_end@1#5";
  options.saved_step = 6;
  options.steps = 8;
  options.delete_swap_directory = true;
  const Result<nlohmann::ordered_json> document = import_deepspeed_config(options);
  ASSERT_TRUE(document.ok()) << document.status().to_string();
  std::ifstream config_file(options.config_path);
  const nlohmann::ordered_json original = nlohmann::ordered_json::parse(config_file);
  EXPECT_EQ((*document)["config"], original) << "the config is copied verbatim, key order included";
  EXPECT_EQ((*document)["fault_plan"]["crash"]["site"], "engine.step_end");
  EXPECT_EQ((*document)["fault_plan"]["crash"]["rank"], 1);
  EXPECT_EQ((*document)["fault_plan"]["crash"]["occurrence"], 5);
  EXPECT_EQ((*document)["precision"], "fp16");
  const Result<Scenario> scenario = scenario_from_json(nlohmann::json::parse(document->dump()), "imported.json");
  ASSERT_TRUE(scenario.ok()) << scenario.status().to_string();
  EXPECT_EQ(scenario->run.options.config.zero.offload_optimizer.nvme_path, "/lscratch/27396327/offload/optimizer");
  const Result<ScenarioVerdict> verdict = run_scenario(*scenario, DefectSet{});
  ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
  EXPECT_TRUE(verdict->passed) << verdict->outcome << verdict->diagnosis;
  EXPECT_EQ(verdict->resumed_at, 4) << "saves at 2, 4 and 6; the crash at the end of step 5";
  // And it catches what the user hit.
  const Result<ScenarioVerdict> defective = run_scenario(*scenario, DefectSet{Defect::kSwappedStateNotSaved});
  ASSERT_TRUE(defective.ok());
  EXPECT_FALSE(defective->passed);
}

TEST(ImportDs, BadOptionsAreRefusedNamingThem) {
  ImportOptions options;
  options.config_path = seed_config_path();
  options.crash = "engine.step_end@x";
  Result<nlohmann::ordered_json> document = import_deepspeed_config(options);
  ASSERT_FALSE(document.ok());
  EXPECT_NE(document.status().message().find("--crash engine.step_end@x: the rank must be a number"), std::string::npos)
      << document.status().to_string();
  options.crash = "";
  options.saved_step = 3;
  document = import_deepspeed_config(options);
  ASSERT_FALSE(document.ok());
  EXPECT_NE(document.status().message().find("--saved-step 3 must be a multiple of --save-every 2"), std::string::npos);
  options.saved_step = 4;
  options.config_path = "/nonexistent/ds_config.json";
  document = import_deepspeed_config(options);
  ASSERT_FALSE(document.ok());
  EXPECT_EQ(document.status().code(), StatusCode::kNotFound);
  TestDirectory directory;
  std::ofstream(directory.path() + "/bad.json") << R"({"zero_optimization": {"stage": 3, "sub_group_sise": 4}})";
  options.config_path = directory.path() + "/bad.json";
  document = import_deepspeed_config(options);
  ASSERT_FALSE(document.ok());
  EXPECT_NE(document.status().message().find("sub_group_sise: unknown key; did you mean sub_group_size?"),
            std::string::npos)
      << document.status().to_string();
}

TEST(ImportDs, ConfigByPathIsReadBesideTheScenario) {
  TestDirectory directory;
  {
    std::ifstream source(seed_config_path(), std::ios::binary);
    std::ofstream(directory.path() + "/ds_config.json", std::ios::binary) << source.rdbuf();
  }
  ImportOptions options;
  options.config_path = directory.path() + "/ds_config.json";
  options.config_by_path = true;
  const Result<nlohmann::ordered_json> document = import_deepspeed_config(options);
  ASSERT_TRUE(document.ok()) << document.status().to_string();
  EXPECT_TRUE(std::filesystem::path((*document)["config"].get<std::string>()).is_absolute());
  // A relative config path given to import-ds still resolves once the scenario is elsewhere.
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(directory.path());
  ImportOptions relative = options;
  relative.config_path = "ds_config.json";
  const Result<nlohmann::ordered_json> relative_document = import_deepspeed_config(relative);
  std::filesystem::current_path(previous);
  ASSERT_TRUE(relative_document.ok()) << relative_document.status().to_string();
  std::filesystem::create_directories(directory.path() + "/elsewhere");
  std::ofstream(directory.path() + "/elsewhere/scenario.json") << relative_document->dump(2);
  EXPECT_TRUE(read_scenario_file(directory.path() + "/elsewhere/scenario.json").ok());
  std::ofstream(directory.path() + "/scenario.json") << document->dump(2);
  const Result<Scenario> scenario = read_scenario_file(directory.path() + "/scenario.json");
  ASSERT_TRUE(scenario.ok()) << scenario.status().to_string();
}

}  // namespace
}  // namespace zerosim
