// The command-line contract of README.md, run against the built binary: `zerosim train
// --json` output, world-size invariance through the CLI, exit codes, `config check`.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <stdlib.h>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CommandResult run_cli(const std::string& arguments) {
  const std::string command = std::string(ZEROSIM_CLI_PATH) + " " + arguments + " 2>&1";
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t count;
  while ((count = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), count);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

nlohmann::json json_of(const CommandResult& result) {
  // Warnings go to stderr; the JSON object starts at the first '{' on a line of its own.
  const size_t start = result.output.find("\n{");
  const std::string text = result.output.rfind("{", 0) == 0 ? result.output
                           : start == std::string::npos     ? result.output
                                                            : result.output.substr(start + 1);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

TEST(Cli, TrainJsonHasTheContractFields) {
  const CommandResult result = run_cli("train --steps 3 --json --run-id cli-json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json output = json_of(result);
  ASSERT_TRUE(output.is_object()) << result.output;
  ASSERT_EQ(output["steps"].size(), 3u);
  for (const char* key : {"step", "loss", "lr", "loss_scale", "grad_norm", "skipped"}) {
    EXPECT_TRUE(output["steps"][0].contains(key)) << key;
  }
  EXPECT_EQ(output["state_digest"].get<std::string>().size(), 32u);
  for (const char* key : {"params", "master", "exp_avg", "exp_avg_sq", "counters", "scheduler", "loss_scaler", "rng", "data"}) {
    EXPECT_TRUE(output["component_digests"].contains(key)) << key;
  }
}

TEST(Cli, FixedTrainBatchSizeGivesTheSameStateAtAnyWorldSize) {
  std::string reference;
  for (int world_size : {1, 2, 3, 4, 8}) {
    const CommandResult result = run_cli("train --steps 4 --json --set train_batch_size=24 --micro-batch-size 1 --run-id cli-world "
                                         "--world-size " +
                                         std::to_string(world_size) + " --set zero_optimization.sub_group_size=100");
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const std::string digest = json_of(result)["state_digest"];
    if (reference.empty()) reference = digest;
    EXPECT_EQ(digest, reference) << "world size " << world_size;
  }
}

TEST(Cli, LossFallsOnTheDefaultRun) {
  const CommandResult result = run_cli("train --json --run-id cli-loss");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json steps = json_of(result)["steps"];
  ASSERT_EQ(steps.size(), 50u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += steps[i]["loss"].get<double>() / 10;
  for (int i = 40; i < 50; ++i) last += steps[i]["loss"].get<double>() / 10;
  EXPECT_LT(last, 0.7 * first) << "mean loss of steps 1-10 " << first << ", of steps 41-50 " << last;
}

TEST(Cli, SeedConfigWithNvmeOffloadGivesTheSameStateAsOffloadOff) {
  char pattern[] = "/tmp/zerosim-cli-nvme-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string seed = std::string("train --steps 6 --json --world-size 2 --config ") + ZEROSIM_TEST_DATA_DIR +
                           "/ds_configs/seed_ds_config.json";
  const CommandResult on_nvme = run_cli(seed + " --set zero_optimization.offload_optimizer.nvme_path=" + pattern);
  const CommandResult offload_off = run_cli(seed + " --set zero_optimization.offload_optimizer.device=none");
  std::filesystem::remove_all(pattern);
  ASSERT_EQ(on_nvme.exit_code, 0) << on_nvme.output;
  ASSERT_EQ(offload_off.exit_code, 0) << offload_off.output;
  EXPECT_EQ(json_of(on_nvme)["state_digest"], json_of(offload_off)["state_digest"]);
  EXPECT_EQ(json_of(on_nvme)["steps"], json_of(offload_off)["steps"]);
}

TEST(Cli, TableHasTheColumns) {
  const CommandResult result = run_cli("train --steps 2 --run-id cli-table");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* column : {"step", "loss", "lr", "loss_scale", "grad_norm", "skipped"}) {
    EXPECT_NE(result.output.find(column), std::string::npos) << column;
  }
}

TEST(Cli, BadInputExitsTwoAndNamesTheKey) {
  const CommandResult bad_key = run_cli("train --steps 1 --set zero_optimization.sub_grup_size=4");
  EXPECT_EQ(bad_key.exit_code, 2) << bad_key.output;
  EXPECT_NE(bad_key.output.find("sub_grup_size"), std::string::npos) << bad_key.output;
  EXPECT_NE(bad_key.output.find("sub_group_size"), std::string::npos) << bad_key.output;
  const CommandResult missing = run_cli("train --config /nonexistent/ds.json");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/ds.json"), std::string::npos);
  const CommandResult bad_model = run_cli("train --model 4,x,2");
  EXPECT_EQ(bad_model.exit_code, 2);
  const CommandResult bad_world = run_cli("train --world-size 0");
  EXPECT_EQ(bad_world.exit_code, 2);
}

TEST(Cli, ConfigCheckAcceptsTheSeedAndRejectsTheTypo) {
  const CommandResult seed = run_cli(std::string("config check ") + ZEROSIM_TEST_DATA_DIR + "/ds_configs/seed_ds_config.json");
  EXPECT_EQ(seed.exit_code, 0) << seed.output;
  EXPECT_NE(seed.output.find("nvme"), std::string::npos);
  EXPECT_NE(seed.output.find("thread_count"), std::string::npos) << "legacy key warning";
  const CommandResult typo = run_cli(std::string("config check ") + ZEROSIM_TEST_DATA_DIR +
                                     "/ds_configs/13_dse_megatron_zero3_infinity_nvme_thread_count_HISTORICAL.json");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find("stage3_param_persitence_threshold"), std::string::npos) << typo.output;
}

}  // namespace
