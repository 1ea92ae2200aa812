// SIGKILL at random wall-clock moments on a real directory: `zerosim train` saving every step
// (the optimizer state on NVMe, swap files and checkpoints in the test's directory) is killed
// after a seeded random delay, wherever it is: in a step, a swap, a save, an fsync. Then
// `zerosim ckpt verify` and `zerosim train --resume` run on what it left. Every resume must be
// bit-identical to the uninterrupted run from the last committed step on, or be refused with
// a named cause (no complete checkpoint yet). The simulator's crash points kill at named places;
// this kills anywhere. ZEROSIM_RANDOM_KILL_SEED replays a seed; ZEROSIM_RANDOM_KILLS sets N.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/shell_command.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

using CommandResult = ShellResult;

CommandResult run_cli(const std::string& arguments) {
  return run_shell_command(std::string(ZEROSIM_CLI_PATH) + " " + arguments + " 2>&1");
}

nlohmann::json json_of(const std::string& output) {
  const size_t start = output.find("\n{");
  return nlohmann::json::parse(start == std::string::npos ? output : output.substr(start + 1), nullptr, false);
}

uint64_t environment_number(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : std::strtoull(value, nullptr, 10);
}

TEST(RandomKill, EveryResumeAfterASigkillAtARandomMomentIsBitIdenticalOrRefusedByName) {
  const uint64_t seed = environment_number("ZEROSIM_RANDOM_KILL_SEED", 20261130);
  const int kills = static_cast<int>(environment_number("ZEROSIM_RANDOM_KILLS", 8));
  const std::string replay = "replay: ZEROSIM_RANDOM_KILL_SEED=" + std::to_string(seed) + " ZEROSIM_RANDOM_KILLS=" +
                             std::to_string(kills) + " " + ZEROSIM_BINARY_DIR + "/tests/random_kill_test";
  TestDirectory directory;
  constexpr int kSteps = 16;
  // A model big enough that a step, a swap and a save take a while, so the kills land inside them.
  const std::string shape = " --model 64,512,512,10 --set train_batch_size=16 --micro-batch-size 2 --steps " +
                            std::to_string(kSteps) + " --json";
  const auto started = std::chrono::steady_clock::now();
  // The reference saves every step too, so that its duration is the killed runs' (saving
  // changes no bit of the state).
  const CommandResult reference = run_cli("train" + shape + " --run-id reference --set zero_optimization.offload_optimizer.nvme_path=" +
                                          directory.path() + "/nvme-reference --save-every 1 --save-dir " + directory.path() +
                                          "/ckpt-reference");
  const auto run_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string reference_digest = json_of(reference.output).value("state_digest", "");
  ASSERT_FALSE(reference_digest.empty()) << reference.output;

  std::mt19937_64 random(seed);
  int resumed_mid_run = 0, refused = 0;
  for (int kill = 0; kill < kills; ++kill) {
    const std::string case_directory = directory.path() + "/kill-" + std::to_string(kill);
    const std::string checkpoints = case_directory + "/ckpt";
    const std::string nvme = " --set zero_optimization.offload_optimizer.nvme_path=" + case_directory + "/nvme";
    // Spread over the run: the k-th kill lands in the k-th of `kills` slices of its duration
    // (the process's start included), at a seeded place inside the slice.
    const int64_t slice_ms = std::max<int64_t>(1, run_ms / kills);
    const int64_t delay_ms = kill * slice_ms + static_cast<int64_t>(random() % static_cast<uint64_t>(slice_ms));
    const std::string command = "exec " + std::string(ZEROSIM_CLI_PATH) + " train" + shape + " --run-id killed" + nvme +
                                " --save-dir " + checkpoints + " --save-every 1 > " + case_directory + ".out 2>&1";
    std::filesystem::create_directories(case_directory);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    ASSERT_TRUE(killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        << "kill " << kill << ": the run failed on its own\n" << replay;

    const CommandResult verified = run_cli("ckpt verify " + checkpoints);
    const CommandResult resumed = run_cli("train" + shape + " --run-id resumed --resume " + checkpoints + nvme + "-resume");
    std::string outcome;
    if (resumed.exit_code == 0) {
      const nlohmann::json output = json_of(resumed.output);
      const int64_t resumed_from = kSteps - static_cast<int64_t>(output["steps"].size());
      EXPECT_EQ(output.value("state_digest", ""), reference_digest)
          << "kill " << kill << " after " << delay_ms << " ms: resumed from step " << resumed_from
          << " and diverged\n" << resumed.output << "\n" << replay;
      // `ckpt verify` passes, or (killed between a tag's manifest and the `latest` pointer) says
      // that `latest` is not there yet and that the tag a resume falls back to verifies.
      EXPECT_TRUE(verified.exit_code == 0 || verified.output.find("the tag a resume falls back to, verifies") != std::string::npos)
          << "the resume loaded a checkpoint that ckpt verify refuses\n" << verified.output;
      if (resumed_from > 0 && resumed_from < kSteps) ++resumed_mid_run;
      outcome = "resumed from step " + std::to_string(resumed_from) + ", bit-identical";
    } else {
      // Killed before the first save committed: refused, naming why (no checkpoint directory
      // yet, or one without a complete checkpoint).
      EXPECT_EQ(resumed.exit_code, 2) << resumed.output << "\n" << replay;
      const bool named = resumed.output.find("no complete checkpoint") != std::string::npos ||
                         resumed.output.find("checkpoint directory " + checkpoints + " does not exist") != std::string::npos;
      EXPECT_TRUE(named) << resumed.output << "\n" << replay;
      ++refused;
      outcome = "refused: " + resumed.output.substr(resumed.output.rfind("NOT_FOUND"), 60);
    }
    std::printf("kill %d after %lld ms (%s): %s\n", kill, static_cast<long long>(delay_ms),
                killed ? "SIGKILL" : "had finished", outcome.c_str());
  }
  std::printf("%d kills (seed %llu, the run takes %lld ms): %d resumed mid-run bit-identical, %d refused by name\n",
              kills, static_cast<unsigned long long>(seed), static_cast<long long>(run_ms), resumed_mid_run, refused);
  // The kills must have landed inside the run, not all before or after it.
  EXPECT_GT(resumed_mid_run, 0) << replay;
}

}  // namespace
}  // namespace zerosim
