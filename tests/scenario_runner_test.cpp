// The scenario library: every scenario passes with no defect, and every named defect makes at
// least one scenario fail, with a diagnosis that names the diverging state (or the refusal).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "scenarios/scenario_runner.h"

namespace zerosim {
namespace {

std::vector<Scenario> library() {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(ZEROSIM_SCENARIO_LIBRARY_DIR)) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Scenario> scenarios;
  for (const std::string& path : paths) {
    Result<Scenario> scenario = read_scenario_file(path);
    EXPECT_TRUE(scenario.ok()) << scenario.status().to_string();
    if (scenario.ok()) scenarios.push_back(std::move(scenario).value());
  }
  return scenarios;
}

TEST(ScenarioLibrary, EveryScenarioPassesWithNoDefect) {
  const std::vector<Scenario> scenarios = library();
  ASSERT_GE(scenarios.size(), 6u);
  for (const Scenario& scenario : scenarios) {
    const Result<ScenarioVerdict> verdict = run_scenario(scenario, DefectSet{});
    ASSERT_TRUE(verdict.ok()) << scenario.name << ": " << verdict.status().to_string();
    EXPECT_TRUE(verdict->passed) << scenario.name << ": " << verdict->outcome << "; " << verdict->diagnosis;
  }
}

TEST(ScenarioLibrary, EveryDefectFailsAScenarioNamingWhatDiverged) {
  const std::vector<Scenario> scenarios = library();
  const char* const kComponents[] = {"params", "master", "exp_avg", "exp_avg_sq", "counters", "scheduler",
                                     "loss_scaler", "rng", "data", "loss", "learning rate", "no complete checkpoint"};
  for (const DefectInfo& info : all_defects()) {
    SCOPED_TRACE(info.name);
    std::string diagnosis;
    for (const Scenario& scenario : scenarios) {
      const Result<ScenarioVerdict> verdict = run_scenario(scenario, DefectSet{info.defect});
      ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
      if (!verdict->passed) {
        diagnosis = verdict->diagnosis;
        break;
      }
    }
    ASSERT_FALSE(diagnosis.empty()) << "no scenario of the library catches " << info.name;
    const bool named = std::any_of(std::begin(kComponents), std::end(kComponents), [&](const char* component) {
      return diagnosis.find(component) != std::string::npos;
    });
    EXPECT_TRUE(named) << diagnosis;
  }
}

TEST(ScenarioFile, BadKeysAndNamesAreRefusedNamingThem) {
  const Result<Scenario> action = scenario_from_json(
      nlohmann::json::parse(R"({"operator_actions": ["delete_swap_directry"]})"), "s.json");
  ASSERT_FALSE(action.ok());
  EXPECT_NE(action.status().message().find("did you mean delete_swap_directory?"), std::string::npos)
      << action.status().to_string();
  const Result<Scenario> defect =
      scenario_from_json(nlohmann::json::parse(R"({"defects": ["scheduler_not_restord"]})"), "s.json");
  ASSERT_FALSE(defect.ok());
  EXPECT_NE(defect.status().message().find("unknown defect 'scheduler_not_restord'"), std::string::npos);
  const Result<Scenario> expect = scenario_from_json(nlohmann::json::parse(R"({"expect": {"bit_identicl": true}})"), "s.json");
  ASSERT_FALSE(expect.ok());
  EXPECT_NE(expect.status().message().find("expect.bit_identicl: unknown key; did you mean bit_identical?"),
            std::string::npos)
      << expect.status().to_string();
}

}  // namespace
}  // namespace zerosim
