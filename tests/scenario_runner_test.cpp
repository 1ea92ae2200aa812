// The scenario library: every scenario passes with no defect, and every named defect makes at
// least one scenario fail, with a diagnosis that names the diverging state (or the refusal).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "scenarios/scenario_runner.h"
#include "tests/test_directory.h"

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
  ASSERT_GE(scenarios.size(), 19u);
  for (const Scenario& scenario : scenarios) {
    const Result<ScenarioVerdict> verdict = run_scenario(scenario, DefectSet{});
    ASSERT_TRUE(verdict.ok()) << scenario.name << ": " << verdict.status().to_string();
    EXPECT_TRUE(verdict->passed) << scenario.name << ": " << verdict->outcome << "; " << verdict->diagnosis;
  }
}

TEST(ScenarioLibrary, EveryDefectFailsAScenarioNamingWhatDiverged) {
  const std::vector<Scenario> scenarios = library();
  ReferenceCache references;
  const char* const kComponents[] = {"params", "master", "exp_avg", "exp_avg_sq", "counters", "scheduler",
                                     "loss_scaler", "rng", "data", "loss", "learning rate", "no complete checkpoint",
                                     "expected the resume to start at step",
                                     // a refusal naming the damaged shard (torn by the power loss)
                                     ".safetensors",
                                     // the durability oracle, and damage loaded as state
                                     "lost work", "loaded the damaged checkpoint",
                                     // DeepSpeed's refusal of another world size (other_world_size_refused)
                                     "DP world size", "buffers"};
  for (const DefectInfo& info : all_defects()) {
    SCOPED_TRACE(info.name);
    std::string diagnosis;
    for (const Scenario& scenario : scenarios) {
      const Result<ScenarioVerdict> verdict = run_scenario(scenario, DefectSet{info.defect}, &references);
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

// Every cause class of docs/bug-catalog.md has a scenario, and each scenario fails, naming
// what diverged, for every defect it says it catches.
TEST(ScenarioLibrary, EachCauseClassHasAScenarioThatCatchesItsDefects) {
  const std::vector<Scenario> scenarios = library();
  std::set<std::string> classes;
  for (const Scenario& scenario : scenarios) {
    classes.insert(scenario.cause_class);
    for (const std::string& name : scenario.catches) {
      SCOPED_TRACE(scenario.name + " with " + name);
      const Result<ScenarioVerdict> verdict = run_scenario(scenario, DefectSet{*defect_from_name(name)});
      ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
      EXPECT_FALSE(verdict->passed) << verdict->outcome;
      const char* const kNamed[] = {"params", "master", "exp_avg", "counters", "scheduler", "loss_scaler", "rng",
                                    "data", "loss", "no complete checkpoint", "expected the resume to start at step",
                                    "DP world size", "buffers"};
      EXPECT_TRUE(std::any_of(std::begin(kNamed), std::end(kNamed), [&](const char* component) {
        return verdict->diagnosis.find(component) != std::string::npos;
      })) << verdict->diagnosis;
    }
  }
  for (const char* cause_class : {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N"}) {
    EXPECT_TRUE(classes.count(cause_class)) << "no library scenario for cause class " << cause_class;
  }
  std::set<std::string> caught;
  for (const Scenario& scenario : scenarios) caught.insert(scenario.catches.begin(), scenario.catches.end());
  for (const DefectInfo& info : all_defects()) {
    EXPECT_TRUE(caught.count(info.name)) << info.name << " is in no scenario's \"catches\"";
  }
}

// The oracle beyond bit-identity: a resume from an older checkpoint than the newest whose save
// returned is lost work (here: shards not fsynced before `latest`, so the power loss takes the
// newest tag), unless damage explains it in a warning; damage loaded as state is caught.
TEST(ScenarioOracle, LostWorkAndLoadedDamageFailTheScenario) {
  const nlohmann::json base = nlohmann::json::parse(R"({"model": "7,9,2", "world_size": 2, "seed": 5, "save_every": 2,
      "explored_save_step": 6, "steps": 8})");
  const Result<Scenario> durable = scenario_from_json(base, "durable.json");
  ASSERT_TRUE(durable.ok()) << durable.status().to_string();
  bool lost_work_seen = false;
  for (uint64_t seed = 1; seed <= 8 && !lost_work_seen; ++seed) {
    Scenario scenario = *durable;
    scenario.run.seed = seed;  // the power loss's fates
    const Result<ScenarioVerdict> verdict = run_scenario(scenario, DefectSet{Defect::kLatestBeforeShardsDurable});
    ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
    EXPECT_EQ(verdict->committed_step, 6);
    if (!verdict->passed && verdict->diagnosis.find("lost work: the save of step 6 returned") != std::string::npos) {
      lost_work_seen = true;
    }
  }
  EXPECT_TRUE(lost_work_seen) << "no power-loss seed of 8 dropped the unsynced shards";
  // The same fallback explained by damage at rest passes, with the damage named in the report.
  nlohmann::json damaged = base;
  damaged["operator_actions"] = nlohmann::json::parse(R"([{"damage": "remove", "file": "manifest", "tag": "newest"}])");
  const Result<Scenario> with_damage = scenario_from_json(damaged, "damaged.json");
  ASSERT_TRUE(with_damage.ok()) << with_damage.status().to_string();
  const Result<ScenarioVerdict> explained = run_scenario(*with_damage, DefectSet{});
  ASSERT_TRUE(explained.ok());
  EXPECT_TRUE(explained->passed) << explained->outcome << "; " << explained->diagnosis;
  EXPECT_EQ(explained->resumed_at, 4);
  EXPECT_NE(explained->damage.find("global_step6/manifest.json"), std::string::npos) << explained->damage;
}

TEST(ScenarioFile, OperatorActionsAndResumeChangesAreCheckedBeforeAnythingRuns) {
  auto error_of = [](const char* text) {
    const Result<Scenario> scenario = scenario_from_json(nlohmann::json::parse(text), "s.json");
    return scenario.ok() ? std::string("accepted") : scenario.status().message();
  };
  EXPECT_NE(error_of(R"({"operator_actions": [{"damage": "flip_bits"}]})").find("did you mean flip_bit?"), std::string::npos);
  EXPECT_NE(error_of(R"({"operator_actions": [{"damage": "stale_copy", "file": "latest"}]})").find("latest is not a file of a tag"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"world_size": 2, "operator_actions": [{"damage": "remove", "rank": 2}]})").find("rank 2 did not save"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"operator_actions": [{"damage": "remove", "size": 2}]})").find("size: unknown key"), std::string::npos);
  EXPECT_NE(error_of(R"({"operator_actions": [{"sigterm_at_step": 4}]})").find("sigterm_at_step: 4 is not a step"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"operator_actions": [7]})").find("expected a name or an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"resume_changes": {}})").find("resume_changes: expected an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"resume_changes": {"sed": 3}})").find("did you mean seed?"), std::string::npos);
  EXPECT_NE(error_of(R"({"resume_changes": {"dataset_size": 0}})").find("dataset_size"), std::string::npos);
}

TEST(ScenarioFile, ErrorsNameTheKeyAndTheLine) {
  TestDirectory directory;
  const std::string path = directory.path() + "/bad.json";
  std::ofstream(path) << "{\n  \"name\": \"x\",\n  \"config\": {\n    \"zero_optimization\": {\n      \"stage\": 7\n    }\n  }\n}\n";
  const Result<Scenario> scenario = read_scenario_file(path);
  ASSERT_FALSE(scenario.ok());
  EXPECT_NE(scenario.status().message().find(path + ":5: config: zero_optimization.stage"), std::string::npos)
      << scenario.status().to_string();
  std::ofstream(path) << "{\n  \"name\": \"x\",\n  \"world_size\": 0\n}\n";
  const Result<Scenario> world = read_scenario_file(path);
  ASSERT_FALSE(world.ok());
  EXPECT_NE(world.status().message().find(path + ":3: world_size: expected 1 to 256, found 0"), std::string::npos)
      << world.status().to_string();
}

// A flipped bit in the newest committed manifest: the restart refuses it by name (a refusal
// naming the damaged file passes); with fallback_on_invalid it loads the older tag, and the
// verdict's notes say which tag was passed over and why.
TEST(ScenarioFile, FallbackOnInvalidPassesOverADamagedCommittedManifestAndSaysSo) {
  const auto scenario_with = [](bool fallback) {
    nlohmann::json document = nlohmann::json::parse(R"({"model": "5,7,3", "world_size": 2, "save_every": 2,
        "explored_save_step": 4, "steps": 6,
        "operator_actions": [{"damage": "flip_bit", "file": "manifest", "tag": "newest", "bit": 700}]})");
    if (fallback) document["fallback_on_invalid"] = true;
    return scenario_from_json(document, "s.json");
  };
  const Result<Scenario> strict = scenario_with(false);
  ASSERT_TRUE(strict.ok()) << strict.status().to_string();
  const Result<ScenarioVerdict> refused = run_scenario(*strict, DefectSet{});
  ASSERT_TRUE(refused.ok()) << refused.status().to_string();
  EXPECT_NE(refused->outcome.find("global_step4 was committed (its manifest exists) but is invalid"), std::string::npos)
      << refused->outcome;
  const Result<Scenario> lenient = scenario_with(true);
  ASSERT_TRUE(lenient.ok()) << lenient.status().to_string();
  const Result<ScenarioVerdict> loaded = run_scenario(*lenient, DefectSet{});
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->passed) << loaded->outcome << "; " << loaded->diagnosis;
  EXPECT_EQ(loaded->resumed_at, 2) << loaded->outcome;
  EXPECT_TRUE(std::any_of(loaded->notes.begin(), loaded->notes.end(), [](const std::string& note) {
    return note.find("passed over checkpoint") != std::string::npos && note.find("global_step4") != std::string::npos;
  })) << ::testing::PrintToString(loaded->notes);
}

TEST(ScenarioFile, ACrashPointThatCannotFireIsRefusedOrFailsTheScenario) {
  const Result<Scenario> misspelt = scenario_from_json(
      nlohmann::json::parse(R"({"fault_plan": {"crash": {"site": "ckpt.shard_writen"}}})"), "s.json");
  ASSERT_FALSE(misspelt.ok());
  EXPECT_NE(misspelt.status().message().find("did you mean ckpt.shard_written?"), std::string::npos)
      << misspelt.status().to_string();
  const Result<Scenario> no_rank = scenario_from_json(
      nlohmann::json::parse(R"({"world_size": 2, "fault_plan": {"crash": {"site": "ckpt.save_begin", "rank": 7}}})"), "s.json");
  ASSERT_FALSE(no_rank.ok());
  EXPECT_NE(no_rank.status().message().find("7 is not a rank of a world of 2"), std::string::npos);
  const Result<Scenario> late = scenario_from_json(
      nlohmann::json::parse(R"({"fault_plan": {"crash": {"site": "engine.step_end", "occurrence": 40}}})"), "s.json");
  ASSERT_TRUE(late.ok()) << late.status().to_string();
  const Result<ScenarioVerdict> verdict = run_scenario(*late, DefectSet{});
  ASSERT_TRUE(verdict.ok());
  EXPECT_FALSE(verdict->passed);
  EXPECT_NE(verdict->diagnosis.find("was never reached"), std::string::npos) << verdict->diagnosis;
  const Result<Scenario> schedule =
      scenario_from_json(nlohmann::json::parse(R"({"explored_save_step": 8, "steps": 4})"), "s.json");
  ASSERT_FALSE(schedule.ok());
  EXPECT_NE(schedule.status().message().find("explored_save_step: 8 is past steps (4)"), std::string::npos);
  const Result<Scenario> name = scenario_from_json(nlohmann::json::parse(R"({"name": 5})"), "s.json");
  ASSERT_FALSE(name.ok());
  EXPECT_NE(name.status().message().find("name: expected a string"), std::string::npos);
}

TEST(ScenarioOracle, AFaultRuleThatNeverFiredFailsTheScenarioNamingIt) {
  // The shard of rank 1 is written once per save: occurrence 1 fires, occurrence 3 never does
  // (two saves in the first phase). Without its fault the resume passes, so only the check
  // can fail the second scenario.
  const auto scenario_with = [](int occurrence) {
    nlohmann::json document = nlohmann::json::parse(R"({"model": "5,7,3", "world_size": 2, "save_every": 2,
        "explored_save_step": 4, "steps": 6, "fault_plan": {"disk_faults": [
          {"path": "*/rank-00001-of-*", "op": "write", "occurrence": 1, "fault": "latency", "latency_us": 5},
          {"path": "*/global_step*/rank-00001-of-*", "op": "write", "occurrence": 1, "fault": "io_error"}]}})");
    document["fault_plan"]["disk_faults"][1]["occurrence"] = occurrence;
    return scenario_from_json(document, "s.json");
  };
  const Result<Scenario> firing = scenario_with(2);
  ASSERT_TRUE(firing.ok()) << firing.status().to_string();
  const Result<ScenarioVerdict> fired = run_scenario(*firing, DefectSet{});
  ASSERT_TRUE(fired.ok()) << fired.status().to_string();
  EXPECT_FALSE(fired->fault_never_happened) << fired->diagnosis;
  ASSERT_EQ(fired->fault_rule_counts.size(), 2u);
  EXPECT_EQ(fired->fault_rule_counts[1],
            "fault rule 2 (*/global_step*/rank-00001-of-*, write, occurrence 2, io_error): matched 2 times, fired 1");
  EXPECT_EQ(fired->unfired_fault_rule, -1);

  const Result<Scenario> late = scenario_with(3);
  ASSERT_TRUE(late.ok()) << late.status().to_string();
  const Result<ScenarioVerdict> verdict = run_scenario(*late, DefectSet{});
  ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
  EXPECT_FALSE(verdict->passed);
  EXPECT_TRUE(verdict->fault_never_happened);
  EXPECT_EQ(verdict->unfired_fault_rule, 1);
  EXPECT_EQ(verdict->unfired_fault_rule_matched, 2);
  EXPECT_EQ(verdict->diagnosis,
            "fault rule 2 (*/global_step*/rank-00001-of-*, write, occurrence 3, io_error) never fired (it matched 2 operations)")
      << verdict->diagnosis;
  EXPECT_EQ(verdict->resumed_at, -1) << "nothing resumes after a fault that never happened";
}

TEST(ScenarioFile, TheConfigMayBeAFileBesideTheScenario) {
  TestDirectory directory;
  std::ofstream(directory.path() + "/ds_config.json")
      << R"({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3, "sub_group_size": 5},
             "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})";
  std::ofstream(directory.path() + "/scenario.json") << R"({"model": "4,3", "world_size": 2, "config": "ds_config.json"})";
  const Result<Scenario> scenario = read_scenario_file(directory.path() + "/scenario.json");
  ASSERT_TRUE(scenario.ok()) << scenario.status().to_string();
  EXPECT_EQ(scenario->run.options.config.zero.sub_group_size, 5);
  std::ofstream(directory.path() + "/missing.json") << R"({"config": "nowhere.json"})";
  const Result<Scenario> missing = read_scenario_file(directory.path() + "/missing.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nowhere.json cannot be opened"), std::string::npos)
      << missing.status().to_string();
}

// Before: the runner overwrote the restart's accumulation with the first phase's arithmetic,
// so a resume_config with another train_batch_size was refused by the engine as inconsistent.
TEST(ScenarioFile, AResumeConfigMayChangeTheBatchAsTrainResumeAllows) {
  const nlohmann::json config = {{"train_batch_size", "auto"}, {"train_micro_batch_size_per_gpu", "auto"},
                                 {"gradient_accumulation_steps", "auto"},
                                 {"zero_optimization", {{"stage", 3}}},
                                 {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}}}}}};
  nlohmann::json restart = config;
  restart["train_batch_size"] = 8;  // twice the first phase's 2 ranks x micro batch 2
  const nlohmann::json document = {{"name", "batch changed"}, {"model", "5,4,3"}, {"world_size", 2},
                                   {"resume_world_size", 4}, {"micro_batch_size", 2}, {"config", config},
                                   {"resume_config", restart}, {"expect", {{"bit_identical", false}}}};
  const Result<Scenario> scenario = scenario_from_json(document, "batch.json");
  ASSERT_TRUE(scenario.ok()) << scenario.status().to_string();
  const Result<ScenarioVerdict> verdict = run_scenario(*scenario, DefectSet{});
  ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
  EXPECT_TRUE(verdict->passed) << verdict->outcome << " / " << verdict->diagnosis;
  EXPECT_EQ(verdict->outcome.find("refused"), std::string::npos) << verdict->outcome;
  EXPECT_TRUE(std::any_of(verdict->notes.begin(), verdict->notes.end(), [](const std::string& note) {
    return note.find("train_batch_size changed from 4 to 8") != std::string::npos;
  })) << ::testing::PrintToString(verdict->notes);
  nlohmann::json odd = document;
  odd["resume_config"]["train_batch_size"] = 12;  // a multiple of 2 x 2, not of 2 x 4
  const Result<Scenario> refused = scenario_from_json(odd, "odd.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("odd.json: resume_config: train_batch_size 12"), std::string::npos)
      << refused.status().to_string();
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
  // The keys of load options, chains of resumes and checkpoint expectations.
  for (const auto& [text, part] : std::vector<std::pair<std::string, std::string>>{
           {R"({"resume_load_optimizer_states": "no"})", "resume_load_optimizer_states: expected true or false"},
           {R"({"resume_load_module_only": true, "resume_load_optimizer_states": false})", "resume_load_module_only: give it alone"},
           {R"({"save_at_start": 1})", "save_at_start: expected true or false"},
           {R"({"restart_killed_after_step": 3})", "restart_killed_after_step: the first restart must save"},
           {R"({"restart_killed_after_step": 9, "resume_save_every": 2})", "restart_killed_after_step: expected a step between 1 and steps - 1"},
           {R"({"restart_chain": [{"killed_after_step": 3}]})", "restart_chain[0]: save_every is required"},
           {R"({"restart_chain": [{"save_every": 2, "killed_after_step": 3, "load_optimizer": false}]})",
            "restart_chain[0].load_optimizer: unknown key; the nearest valid name is load_optimizer_states"},
           {R"({"restart_chain": [{"save_every": 1, "killed_after_step": 2}, {"save_every": 1, "killed_after_step": 3}, {"save_every": 1, "killed_after_step": 4}]})",
            "restart_chain: expected one or two restarts"},
           {R"({"restart_chain": [{"save_every": 1, "killed_after_step": 2}], "restart_killed_after_step": 3, "resume_save_every": 1})",
            "give the chain one way"},
           {R"({"expect": {"checkpoint": {"tags": ["../x"]}}})", "expect.checkpoint.tags"},
           {R"({"expect": {"checkpoint": {"latest": 4}}})", "expect.checkpoint.latest: expected a tag name or null"},
           {R"({"expect": {"checkpoint": {"lastest": "global_step2"}}})", "did you mean latest?"}}) {
    const Result<Scenario> refused = scenario_from_json(nlohmann::json::parse(text), "s.json");
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_NE(refused.status().message().find(part), std::string::npos) << text << ": " << refused.status().to_string();
  }
}

}  // namespace
}  // namespace zerosim
