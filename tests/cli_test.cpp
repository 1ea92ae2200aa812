// The command-line contract of docs/cli.md, run against the built binary: `zerosim train
// --json` output, world-size invariance through the CLI, exit codes, `config check`, and the
// `zerosim ckpt` commands on checkpoints saved through the engine's C++ API.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>
#include <set>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdlib.h>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.h"
#include "core/engine/engine.h"
#include "core/env/env.h"
#include "tests/cuda_devices.h"
#include "tests/shell_command.h"
#include "tests/test_directory.h"
#include "tools/ckpt_command.h"

namespace {

using CommandResult = zerosim::ShellResult;

CommandResult run_cli(const std::string& arguments, const std::string& environment = "") {
  // `environment` may end with a launcher and the binary (the --mpi test); else the binary follows it.
  const bool launches = environment.find(ZEROSIM_CLI_PATH) != std::string::npos;
  return zerosim::run_shell_command((environment.empty() ? "" : "env " + environment + " ") +
                                    (launches ? std::string() : std::string(ZEROSIM_CLI_PATH)) + " " + arguments + " 2>&1");
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

// --device cuda: the CPU run's digest on a machine with a GPU (W = 2 puts the ranks on two GPUs
// where there are two); a named environment error (exit 3) where CUDA or a GPU is missing.
TEST(Cli, DeviceCudaGivesTheCpuDigestOrSaysWhyItCannot) {
  const std::string arguments = "train --steps 3 --json --world-size 2 --run-id cli-device --model 13,64,5";
  const CommandResult on_cpu = run_cli(arguments + " --device cpu");
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.output;
  const CommandResult on_gpu = run_cli(arguments + " --device cuda");
  if (zerosim::usable_cuda_devices() > 0) {
    ASSERT_EQ(on_gpu.exit_code, 0) << on_gpu.output;
    EXPECT_EQ(json_of(on_gpu)["device"], "cuda");
    EXPECT_EQ(json_of(on_gpu)["state_digest"], json_of(on_cpu)["state_digest"]);
    EXPECT_EQ(json_of(on_gpu)["steps"], json_of(on_cpu)["steps"]);
  } else {
    EXPECT_EQ(on_gpu.exit_code, 3) << on_gpu.output;
    const bool named = on_gpu.output.find("no CUDA device is visible to rank 0") != std::string::npos ||
                       on_gpu.output.find("CUDA backend is not compiled in") != std::string::npos;
    EXPECT_TRUE(named) << on_gpu.output;
  }
  const CommandResult unknown = run_cli(arguments + " --device tpu");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--device"), std::string::npos) << unknown.output;
}

// --rendezvous: the launcher's variables are required and checked before anything starts.
TEST(Cli, RendezvousNeedsTheLaunchersRankAndWorldSize) {
  // `train ARGUMENTS --rendezvous` under `environment` exits 2 and its output says `expected`.
  auto expect_refused = [](const std::string& arguments, const std::string& environment, const std::string& expected) {
    const CommandResult refused =
        run_cli("train --steps 1" + arguments + " --rendezvous /tmp/zerosim-cli-rendezvous-never", environment);
    EXPECT_EQ(refused.exit_code, 2) << environment << "\n" << refused.output;
    EXPECT_NE(refused.output.find(expected), std::string::npos) << environment << "\n" << refused.output;
  };
  expect_refused("", "", "none of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID is set");
  expect_refused(" --world-size 3", "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0",
                 "rank 0: --world-size 3 but the launcher (WORLD_SIZE) started 2 processes");
  expect_refused("", "RANK=2 WORLD_SIZE=2 LOCAL_RANK=0", "rank 2 is not a rank of a world of 2");
  expect_refused("", "OMPI_COMM_WORLD_RANK=x WORLD_SIZE=2 LOCAL_RANK=0",
                 "OMPI_COMM_WORLD_RANK=x: expected a non-negative integer");
  // The ranks on the host are optional, but when given they must be a number and agree.
  expect_refused("", "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=two",
                 "LOCAL_WORLD_SIZE=two: expected a positive integer");
  expect_refused("", "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MPI_LOCALNRANKS=0", "MPI_LOCALNRANKS=0: expected a positive integer");
  expect_refused("", "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=1",
                 "local rank 1 of 1 ranks on this host, in a world of 2");
  expect_refused("", "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=3",
                 "local rank 0 of 3 ranks on this host, in a world of 2");
}

// --mpi: two ranks under mpiexec. Without a GPU each rank fails to prepare for NCCL; both say
// why, naming their rank, and the job ends with the exit code (no rank waits for the other).
// Excluded with --rendezvous, and a --world-size that MPI contradicts is refused.
TEST(Cli, MpiLaunchReportsEveryRanksFailureAndEnds) {
  if (!ZEROSIM_HAVE_MPI) GTEST_SKIP() << "built without MPI";
  if (zerosim::usable_cuda_devices() > 0) GTEST_SKIP() << "a GPU is here: the MPI run would train (gpu-check runs it)";
  const std::string mpiexec = std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader timeout 120 ") +
                              ZEROSIM_MPIEXEC + " -n 2 --oversubscribe " + ZEROSIM_CLI_PATH;
  const CommandResult failed = run_cli("train --steps 1 --mpi --device cpu --run-id cli-mpi", mpiexec);
  EXPECT_EQ(failed.exit_code, 3) << failed.output;
  for (const char* rank : {"rank 0: ", "rank 1: "}) {
    EXPECT_NE(failed.output.find(std::string("training failed: FAILED_PRECONDITION: ") + rank), std::string::npos)
        << rank << "\n" << failed.output;
  }
  const CommandResult contradicted = run_cli("train --steps 1 --mpi --world-size 3", mpiexec);
  EXPECT_EQ(contradicted.exit_code, 2) << contradicted.output;
  EXPECT_NE(contradicted.output.find("--world-size 3 but MPI started 2 processes"), std::string::npos) << contradicted.output;
  const CommandResult both = run_cli("train --steps 1 --mpi --rendezvous /tmp/zerosim-cli-rendezvous-never");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("--rendezvous excludes --mpi"), std::string::npos) << both.output;
}

// Starts `zerosim <arguments>` in the background, stdout and stderr into `output_path`.
pid_t spawn_cli(const std::string& arguments, const std::string& output_path) {
  const std::string command = "exec " + std::string(ZEROSIM_CLI_PATH) + " " + arguments + " > " + output_path + " 2>&1";
  const pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return child;
}

// Waits (up to two minutes: sanitizer builds start slowly) until `path` holds a file whose
// name ends with `suffix`: the sign that a spawned run is training.
bool wait_for_file_ending(const std::string& path, const std::string& suffix) {
  for (int attempt = 0; attempt < 1200; ++attempt) {
    std::error_code error;
    for (auto it = std::filesystem::recursive_directory_iterator(path, error);
         !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

int wait_for_exit_code(pid_t child) {
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

std::string digest_of(const CommandResult& result) {
  const nlohmann::json output = json_of(result);
  return output.is_object() && output.contains("state_digest") ? output["state_digest"].get<std::string>() : "";
}

// SIGTERM with --save-on-signal: the step in progress finishes, is saved, the exit status is
// 128 + 15, and resuming from the save gives the uninterrupted run's bits.
TEST(Cli, SigtermFinishesTheStepSavesItAndTheResumeIsBitIdentical) {
  zerosim::TestDirectory directory;
  const std::string output = directory.path() + "/train.out";
  const std::string common = " --set zero_optimization.offload_optimizer.nvme_path=" + directory.path() + "/nvme";
  const pid_t child = spawn_cli("train --steps 1000000 --save-dir " + directory.path() + "/ckpt --save-on-signal --run-id cli-sigterm" + common, output);
  ASSERT_GT(child, 0);
  ASSERT_TRUE(wait_for_file_ending(directory.path() + "/nvme", ".swp")) << read_text(output);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(child, SIGTERM), 0);
  ASSERT_EQ(wait_for_exit_code(child), 128 + SIGTERM) << read_text(output);
  const std::string text = read_text(output);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(text, match, std::regex("SIGTERM: stopped after step ([0-9]+) of 1000000; saved (\\S+)/global_step([0-9]+); resume with --resume")))
      << text;
  EXPECT_EQ(match[1].str(), match[3].str());
  const int64_t stopped_at = std::stoll(match[1].str());
  ASSERT_GT(stopped_at, 0);
  const std::string steps = " --steps " + std::to_string(stopped_at + 2) + " --json";
  const CommandResult uninterrupted = run_cli("train" + steps + " --run-id cli-sigterm-reference" + common);
  const CommandResult resumed = run_cli("train" + steps + " --resume " + directory.path() + "/ckpt --run-id cli-sigterm-resumed" + common);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(json_of(resumed)["steps"].size(), 2u) << resumed.output;
  EXPECT_EQ(digest_of(resumed), digest_of(uninterrupted));
}

// While a run trains: its swap files are its user's only (0600), and a second run on the same
// nvme_path and run id is refused (the first keeps its files), while another run id trains
// beside it. SIGINT without --save-on-signal stops it unsaved, exit status 128 + 2.
TEST(Cli, ARunsSwapFilesArePrivateAndLockedAndSigintStopsItUnsaved) {
  zerosim::TestDirectory directory;
  const std::string output = directory.path() + "/train.out";
  const std::string nvme = " --set zero_optimization.offload_optimizer.nvme_path=" + directory.path() + "/nvme";
  const pid_t child = spawn_cli("train --steps 1000000 --save-dir " + directory.path() + "/ckpt --save-every 1000000 --run-id shared" + nvme, output);
  ASSERT_GT(child, 0);
  ASSERT_TRUE(wait_for_file_ending(directory.path() + "/nvme", ".swp")) << read_text(output);
  int swap_files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory.path() + "/nvme")) {
    if (entry.path().extension() != ".swp") continue;
    struct stat status {};
    ASSERT_EQ(::stat(entry.path().c_str(), &status), 0) << entry.path();
    EXPECT_EQ(status.st_mode & 0777, 0600u) << entry.path();
    ++swap_files;
  }
  EXPECT_GT(swap_files, 0) << "no swap file under " << directory.path() << "/nvme";
  const CommandResult same = run_cli("train --steps 2 --run-id shared" + nvme);
  EXPECT_EQ(same.exit_code, 3) << same.output;
  EXPECT_NE(same.output.find("is locked by another zerosim run using the same directory"), std::string::npos) << same.output;
  const CommandResult other = run_cli("train --steps 2 --json --run-id another" + nvme);
  EXPECT_EQ(other.exit_code, 0) << other.output;
  const CommandResult alone = run_cli("train --steps 2 --json --run-id alone --set zero_optimization.offload_optimizer.nvme_path=" +
                                      directory.path() + "/nvme-alone");
  EXPECT_EQ(digest_of(other), digest_of(alone));

  ASSERT_EQ(::kill(child, SIGINT), 0);
  ASSERT_EQ(wait_for_exit_code(child), 128 + SIGINT) << read_text(output);
  EXPECT_NE(read_text(output).find("SIGINT: stopped after step"), std::string::npos) << read_text(output);
  EXPECT_NE(read_text(output).find("not saved (--save-on-signal saves on a signal)"), std::string::npos) << read_text(output);
  EXPECT_FALSE(std::filesystem::exists(directory.path() + "/ckpt/latest"));
}

// A checkpoint directory that cannot be written is reported before training starts.
TEST(Cli, AnUnwritableSaveDirectoryIsReportedBeforeTraining) {
  const CommandResult result = run_cli("train --steps 3 --save-dir /proc/zerosim-cannot-write-here/ckpt --run-id cli-unwritable");
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_NE(result.output.find("checkpoint directory /proc/zerosim-cannot-write-here/ckpt cannot be saved into"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("found before training"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("state digest"), std::string::npos) << result.output;
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

// A rank's compute split among threads keeps every bit: the state after two steps is the same on
// 1, 2 and 3 threads per rank (the head's products, 256 rows by a vocabulary of 9000, and AdamW
// over the 650,000 parameters are large enough to be split), and a count below 1 is refused by
// name.
TEST(Cli, ThreadsPerRankChangeNoBitOfTheState) {
  // A vocabulary of 20,000 makes the token embedding's partitions long enough (at W = 2 too) for
  // the casts, the gather and the gradient collective to split over the rank's threads.
  for (int world_size : {1, 2}) {
    std::string reference;
    for (int threads : {1, 2, 3}) {
      const CommandResult result =
          run_cli("train --steps 2 --json --model gpt:layers=1,embd=64,heads=2,vocab=20000,block=64 --world-size " +
                  std::to_string(world_size) + " --run-id cli-threads --threads-per-rank " + std::to_string(threads) +
                  " --set zero_optimization.offload_optimizer.device=none");
      ASSERT_EQ(result.exit_code, 0) << result.output;
      const std::string digest = json_of(result)["state_digest"];
      if (reference.empty()) reference = digest;
      EXPECT_EQ(digest, reference) << "W = " << world_size << ", " << threads << " threads per rank";
    }
  }
  const CommandResult refused = run_cli("train --steps 2 --threads-per-rank 0");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--threads-per-rank"), std::string::npos) << refused.output;
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

// The command line's contract: `train --steps 20` and `train --steps 10 --save-dir D` then
// `train --resume D --steps 20` print the same state digest, on the default config (the seed's
// shape: optimizer on NVMe), on the seed's own config, and at another world size on resume.
TEST(Cli, SaveThenResumeGivesTheUninterruptedStateDigest) {
  zerosim::TestDirectory directory;
  const std::string seed_config = std::string(" --config ") + ZEROSIM_TEST_DATA_DIR +
                                  "/ds_configs/seed_ds_config.json --set zero_optimization.offload_optimizer.nvme_path=" +
                                  directory.path() + "/swap";
  for (const std::string& config : {std::string(), seed_config}) {
    SCOPED_TRACE(config.empty() ? "default config" : "seed config");
    const CommandResult uninterrupted = run_cli("train --steps 20 --json" + config);
    ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
    const std::string expected = json_of(uninterrupted)["state_digest"];
    const std::string checkpoints = directory.path() + "/ckpt" + (config.empty() ? "-default" : "-seed");
    const CommandResult saved = run_cli("train --steps 10 --save-dir " + checkpoints + config);
    ASSERT_EQ(saved.exit_code, 0) << saved.output;
    ASSERT_TRUE(std::filesystem::exists(checkpoints + "/global_step10/manifest.json"));
    for (const char* world_size : {"1", "2"}) {
      const CommandResult resumed =
          run_cli("train --resume " + checkpoints + " --steps 20 --json --world-size " + world_size + config);
      ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
      const nlohmann::json output = json_of(resumed);
      EXPECT_EQ(output["state_digest"], expected) << "world size " << world_size << "\n" << resumed.output;
      ASSERT_EQ(output["steps"].size(), 10u);
      EXPECT_EQ(output["steps"][0]["step"], 11);
      const nlohmann::json all_steps = json_of(uninterrupted)["steps"];
      EXPECT_EQ(output["steps"], nlohmann::json(all_steps.begin() + 10, all_steps.end()));
    }
  }
}

// --load-optimizer-states false, --load-lr-scheduler-states false, --load-module-only: the
// plumbing to the engine (the semantics are CheckpointProperty.ALoadWithOptionsFollowsItsModel).
TEST(Cli, ResumeLoadOptionsReachTheLoadAndSaySo) {
  zerosim::TestDirectory directory;
  // Its own swap directory (--run-id): the default one is shared by every default-config run of
  // the same settings, and CTest runs other CLI tests at the same time.
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_EQ(run_cli("train --steps 4 --run-id cli-load-options --save-dir " + checkpoints).exit_code, 0);
  const CommandResult plain = run_cli("train --run-id cli-load-options --resume " + checkpoints + " --steps 6 --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const nlohmann::json plain_steps = json_of(plain)["steps"];
  ASSERT_EQ(plain_steps.size(), 2u);
  EXPECT_GT(plain_steps[0]["lr"].get<double>(), 0.0);

  const CommandResult fresh_optimizer = run_cli("train --run-id cli-load-options --resume " + checkpoints + " --steps 6 --json --load-optimizer-states false");
  ASSERT_EQ(fresh_optimizer.exit_code, 0) << fresh_optimizer.output;
  EXPECT_NE(fresh_optimizer.output.find("with load_optimizer_states=false"), std::string::npos) << fresh_optimizer.output;
  const nlohmann::json fresh_steps = json_of(fresh_optimizer)["steps"];
  ASSERT_EQ(fresh_steps.size(), 2u);
  EXPECT_EQ(fresh_steps[0]["step"], 5);
  EXPECT_EQ(fresh_steps[0]["lr"].get<double>(), 0.0);  // a fresh WarmupLR optimizer's lr
  EXPECT_NE(json_of(fresh_optimizer)["state_digest"], json_of(plain)["state_digest"]);

  const CommandResult fresh_schedule = run_cli("train --run-id cli-load-options --resume " + checkpoints + " --steps 6 --json --load-lr-scheduler-states false");
  ASSERT_EQ(fresh_schedule.exit_code, 0) << fresh_schedule.output;
  EXPECT_NE(fresh_schedule.output.find("with load_lr_scheduler_states=false"), std::string::npos) << fresh_schedule.output;
  EXPECT_NE(json_of(fresh_schedule)["state_digest"], json_of(plain)["state_digest"]);

  const CommandResult module_only = run_cli("train --run-id cli-load-options --resume " + checkpoints + " --steps 3 --json --load-module-only");
  ASSERT_EQ(module_only.exit_code, 0) << module_only.output;
  EXPECT_NE(module_only.output.find("with load_module_only=true"), std::string::npos) << module_only.output;
  const nlohmann::json module_steps = json_of(module_only)["steps"];
  ASSERT_EQ(module_steps.size(), 3u);
  EXPECT_EQ(module_steps[0]["step"], 1);
  const CommandResult from_scratch = run_cli("train --steps 3 --json --run-id cli-load-options-scratch");
  ASSERT_EQ(from_scratch.exit_code, 0);
  EXPECT_NE(json_of(module_only)["state_digest"], json_of(from_scratch)["state_digest"]);

  EXPECT_EQ(run_cli("train --steps 3 --run-id cli-load-options --load-module-only").exit_code, 2);  // needs --resume
  EXPECT_EQ(run_cli("train --run-id cli-load-options --resume " + checkpoints + " --steps 6 --load-optimizer-states maybe").exit_code, 2);
  EXPECT_EQ(run_cli("train --run-id cli-load-options --resume " + checkpoints + " --steps 6 --load-module-only --load-optimizer-states false").exit_code, 2);
}

// --freeze and --exclude-frozen-parameters: a resume takes the checkpoint's frozen set when
// --freeze is not given and continues bit-identically (excluded values from the seed); bad uses
// are refused naming the flag.
// The transformer on a token file: every token checked before the first step; the checkpoint
// names the file by its contents, so a resume finds it moved (a note, the same bits) and refuses
// other contents under any name.
TEST(Cli, TheTransformerOnATokenFileResumesByTheFilesContents) {
  zerosim::TestDirectory directory;
  auto write_tokens = [&](const std::string& name, uint16_t salt, int bad_at) {
    std::ofstream file(directory.path() + "/" + name, std::ios::binary);
    for (int k = 0; k < 400; ++k) {
      const uint16_t token = k == bad_at ? uint16_t{40} : static_cast<uint16_t>((k * 7 + salt + k / 5) % 16);
      file.write(reinterpret_cast<const char*>(&token), 2);
    }
  };
  write_tokens("good.bin", 0, -1);
  write_tokens("other.bin", 3, -1);
  write_tokens("bad.bin", 0, 301);
  const std::string model = " --model gpt:layers=1,embd=8,heads=2,vocab=16,block=6 --world-size 2";
  const CommandResult bad = run_cli("train --steps 1 --dataset " + directory.path() + "/bad.bin" + model);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("bad.bin: token 40 at token offset 301 is outside the vocabulary of 16"), std::string::npos)
      << bad.output;
  const CommandResult uninterrupted = run_cli("train --steps 6 --json --dataset " + directory.path() + "/good.bin" + model);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  const std::string checkpoints = directory.path() + "/ckpt";
  const CommandResult saved = run_cli("train --steps 3 --save-dir " + checkpoints + " --dataset " + directory.path() +
                                      "/good.bin" + model);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  std::filesystem::rename(directory.path() + "/good.bin", directory.path() + "/moved.bin");
  const CommandResult lost = run_cli("train --resume " + checkpoints + " --steps 6");
  EXPECT_EQ(lost.exit_code, 2) << lost.output;
  EXPECT_NE(lost.output.find("the checkpoint's token file"), std::string::npos) << lost.output;
  const CommandResult moved =
      run_cli("train --resume " + checkpoints + " --steps 6 --json --world-size 4 --dataset " + directory.path() + "/moved.bin");
  ASSERT_EQ(moved.exit_code, 0) << moved.output;
  EXPECT_EQ(json_of(moved)["state_digest"], json_of(uninterrupted)["state_digest"]) << moved.output;
  EXPECT_NE(moved.output.find("the same contents"), std::string::npos) << moved.output;
  const CommandResult other = run_cli("train --resume " + checkpoints + " --steps 6 --dataset " + directory.path() + "/other.bin");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("dataset (the data position would mean other samples) differs"), std::string::npos)
      << other.output;
  // ckpt diff compares the persistent buffers: a save that left the buffer out differs in it.
  const CommandResult unsaved = run_cli("train --steps 3 --save-dir " + directory.path() + "/unsaved --dataset " +
                                        directory.path() + "/moved.bin --defect persistent_buffer_not_saved" + model);
  ASSERT_EQ(unsaved.exit_code, 0) << unsaved.output;
  const CommandResult diff = run_cli("ckpt diff " + checkpoints + " " + directory.path() + "/unsaved");
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_NE(diff.output.find("buffers.lm_head.target_frequency.stored: yes vs no"), std::string::npos) << diff.output;
  const CommandResult mlp = run_cli("train --steps 1 --dataset " + directory.path() + "/other.bin");
  EXPECT_EQ(mlp.exit_code, 2) << mlp.output;
  EXPECT_NE(mlp.output.find("token files are for a transformer"), std::string::npos) << mlp.output;
}

TEST(Cli, FrozenParametersSaveResumeAndTheirRefusals) {
  zerosim::TestDirectory directory;
  const std::string freeze = " --freeze layers.0.weight --freeze layers.2.bias";
  const CommandResult uninterrupted = run_cli("train --steps 6 --json --world-size 2" + freeze);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  for (const bool exclude : {false, true}) {
    SCOPED_TRACE(exclude ? "excluded" : "saved");
    const std::string checkpoints = directory.path() + (exclude ? "/excluded" : "/saved");
    const CommandResult saved = run_cli("train --steps 3 --world-size 2 --save-dir " + checkpoints + freeze +
                                        (exclude ? " --exclude-frozen-parameters" : ""));
    ASSERT_EQ(saved.exit_code, 0) << saved.output;
    const CommandResult resumed = run_cli("train --resume " + checkpoints + " --steps 6 --json --world-size 4");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_EQ(json_of(resumed)["state_digest"], json_of(uninterrupted)["state_digest"]) << resumed.output;
    EXPECT_EQ(resumed.output.find("excluded frozen parameters") != std::string::npos, exclude) << resumed.output;
    const CommandResult unfrozen = run_cli("train --resume " + checkpoints + " --steps 6 --freeze layers.1.bias");
    EXPECT_EQ(unfrozen.exit_code, 2) << unfrozen.output;
    EXPECT_NE(unfrozen.output.find("parameter layers.0.weight is frozen in the checkpoint"), std::string::npos)
        << unfrozen.output;
  }
  const CommandResult unknown = run_cli("train --steps 1 --freeze layers.7.weight");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("frozen parameter 'layers.7.weight'"), std::string::npos) << unknown.output;
  const CommandResult nothing_frozen =
      run_cli("train --steps 1 --save-dir " + directory.path() + "/none --exclude-frozen-parameters");
  EXPECT_EQ(nothing_frozen.exit_code, 2) << nothing_frozen.output;
  EXPECT_NE(nothing_frozen.output.find("--exclude-frozen-parameters: no parameter is frozen"), std::string::npos);
  EXPECT_EQ(run_cli("train --steps 1 --exclude-frozen-parameters" + freeze).exit_code, 2);  // needs --save-dir
  EXPECT_EQ(run_cli("train --steps 1 --freeze ''").exit_code, 2);
}

// Before: "the config gives 4 but --gradient-accumulation-steps is 2", a flag the user never gave.
TEST(Cli, AResumeThatDerivesTheAccumulationSaysFromWhatWhenTheConfigDisagrees) {
  zerosim::TestDirectory directory;
  const std::string config = directory.path() + "/ga.json";
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})";
  ASSERT_EQ(run_cli("train --config " + config + " --steps 2 --save-dir " + directory.path() + "/ckpt").exit_code, 0);
  const CommandResult resumed =
      run_cli("train --config " + config + " --steps 4 --world-size 2 --resume " + directory.path() + "/ckpt");
  EXPECT_EQ(resumed.exit_code, 2) << resumed.output;
  EXPECT_NE(resumed.output.find("derived from the checkpoint's train_batch_size 8 / (micro batch 2 x 2 ranks)"),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.output.find("--gradient-accumulation-steps is 2"), std::string::npos) << resumed.output;
}

TEST(CkptCli, ExportWritesTheConsolidatedModelAndRefusesAnExistingFile) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_EQ(run_cli("train --steps 2 --world-size 2 --save-dir " + checkpoints).exit_code, 0);
  const std::string output = directory.path() + "/model.safetensors";
  const CommandResult exported = run_cli("ckpt export " + checkpoints + " --dtype bf16 -o " + output);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find("6 tensors"), std::string::npos) << exported.output;
  zerosim::RealEnv real_env;
  const zerosim::Result<zerosim::SafetensorsIndex> index = zerosim::read_safetensors_index(*real_env.env().disk, output);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->metadata.at("zerosim_tag"), "global_step2");
  ASSERT_NE(index->find("layers.0.weight"), nullptr);
  EXPECT_EQ(index->find("layers.0.weight")->dtype, zerosim::DType::kBf16);
  const CommandResult again = run_cli("ckpt export " + checkpoints + " --dtype bf16 -o " + output);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("exists"), std::string::npos) << again.output;
  EXPECT_EQ(run_cli("ckpt export " + checkpoints + " --dtype fp8 -o " + output + "2").exit_code, 2);
  EXPECT_EQ(run_cli("ckpt export " + checkpoints + " -o " + output + "3").exit_code, 2);  // --dtype is required
}

// --export-run: the files a reference implementation trains the same run from
// (tools/export_run.h), with zerosim's own records; a directory with anything in it is refused.
TEST(Cli, ExportRunWritesTheSettingsWeightsBatchesAndRecords) {
  zerosim::TestDirectory directory;
  const std::string exported = directory.path() + "/export";
  const std::string arguments = "train --steps 4 --world-size 2 --set zerosim.numerics=deepspeed --json";
  const CommandResult plain = run_cli(arguments);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const CommandResult result = run_cli(arguments + " --export-run " + exported);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(json_of(result)["state_digest"], json_of(plain)["state_digest"]);  // exporting changes nothing

  std::ifstream run_file(exported + "/run.json");
  const nlohmann::json run = nlohmann::json::parse(run_file, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(run.is_object());
  EXPECT_EQ(run["numerics"], "deepspeed");
  EXPECT_EQ(run["world_size"], 2);
  EXPECT_EQ(run["steps"], 4);
  EXPECT_EQ(run["scheduler"]["type"], "WarmupLR");
  EXPECT_EQ(run["parameters"].size(), 6u);
  ASSERT_EQ(run["records"].size(), 4u);
  EXPECT_EQ(run["records"], json_of(plain)["steps"]);

  zerosim::RealEnv real_env;
  zerosim::Disk& disk = *real_env.env().disk;
  auto entries_of = [&](const std::string& name) {
    zerosim::Result<zerosim::SafetensorsIndex> index = zerosim::read_safetensors_index(disk, exported + "/" + name);
    EXPECT_TRUE(index.ok()) << name << ": " << index.status().to_string();
    return index.ok() ? index->entries : std::vector<zerosim::SafetensorsEntry>{};
  };
  const auto initial = entries_of("initial.safetensors");
  ASSERT_EQ(initial.size(), 6u);
  EXPECT_EQ(initial[0].name, "layers.0.weight");
  EXPECT_EQ(initial[0].shape, (std::vector<int64_t>{37, 13}));
  EXPECT_EQ(entries_of("final.safetensors").size(), 24u);  // master, exp_avg, exp_avg_sq, params
  const int64_t train_batch_size = run["train_batch_size"];
  const auto batches = entries_of("batches.safetensors");
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].shape, (std::vector<int64_t>{4 * train_batch_size, 13}));

  const CommandResult again = run_cli("train --steps 1 --export-run " + exported);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("the directory is not empty"), std::string::npos) << again.output;
}

TEST(Cli, ResumeRefusesWhatItCannotContinueAndNamesIt) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_EQ(run_cli("train --steps 4 --save-dir " + checkpoints + " --set zero_optimization.offload_optimizer.device=none")
                .exit_code,
            0);
  const CommandResult other_model = run_cli("train --resume " + checkpoints + " --steps 6 --model 13,30,5");
  EXPECT_EQ(other_model.exit_code, 2) << other_model.output;
  EXPECT_NE(other_model.output.find("model shape differs (checkpoint 13,37,29,5, this run 13,30,5)"), std::string::npos)
      << other_model.output;
  const CommandResult odd_world = run_cli("train --resume " + checkpoints + " --steps 6 --world-size 3");
  EXPECT_EQ(odd_world.exit_code, 2) << odd_world.output;
  EXPECT_NE(odd_world.output.find("train_batch_size 8 is not a multiple of micro batch 4 x world size 3"),
            std::string::npos)
      << odd_world.output;
  const CommandResult missing = run_cli("train --resume " + directory.path() + "/nothing --steps 6");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("nothing"), std::string::npos) << missing.output;
  const CommandResult every_without_directory = run_cli("train --steps 2 --save-every 1");
  EXPECT_EQ(every_without_directory.exit_code, 2) << every_without_directory.output;
  EXPECT_NE(every_without_directory.output.find("needs a save directory"), std::string::npos)
      << every_without_directory.output;
}

TEST(Cli, ExplorePrintsTheCountsAndRefusesABadScenario) {
  zerosim::TestDirectory directory;
  const std::string scenario = directory.path() + "/scenario.json";
  std::ofstream(scenario) << R"({"model": "5,4,3", "world_size": 2, "save_every": 1, "explored_save_step": 2,
                                  "steps": 3, "crash_state_bound": 4})";
  const CommandResult result = run_cli("explore " + scenario + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json output = json_of(result);
  ASSERT_TRUE(output.is_object()) << result.output;
  for (const char* key : {"crash_points", "crash_states", "passed", "failed"}) EXPECT_TRUE(output.contains(key)) << key;
  EXPECT_GT(output["crash_points"].get<int>(), 0);
  EXPECT_EQ(output["failed"], 0);
  EXPECT_EQ(output["passed"].get<int>() + output["refused"].get<int>(), output["crash_states"].get<int>());

  // With a defect that moves `latest` before the shards are durable, some crash state loses the
  // checkpoint: the report has a failing testcase for that crash point, with the replay command.
  const std::string reports = directory.path() + "/reports";
  const CommandResult defective =
      run_cli("explore " + scenario + " --defect latest_before_shards_durable --report-dir " + reports);
  EXPECT_EQ(defective.exit_code, 1) << defective.output;
  std::ifstream junit_file(reports + "/junit.xml");
  const std::string junit((std::istreambuf_iterator<char>(junit_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(junit.find("<testcase name=\"crash at ckpt."), std::string::npos) << junit;
  EXPECT_NE(junit.find("<failure message="), std::string::npos) << junit;
  EXPECT_NE(junit.find("zerosim explore " + scenario + " --defect latest_before_shards_durable"), std::string::npos);
  std::ifstream report_file(reports + "/report.json");
  const nlohmann::json report = nlohmann::json::parse(report_file, nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["scenarios"].size(), output["crash_points"].get<size_t>()) << "one entry per crash point";
  EXPECT_GT(report["failed"].get<int>(), 0);

  std::ofstream(scenario) << R"({"world_sise": 2})";
  const CommandResult typo = run_cli("explore " + scenario);
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find("world_sise: unknown key; did you mean world_size?"), std::string::npos) << typo.output;
}

TEST(Cli, SuitePassesOnTheLibraryAndFailsWithADefectNamingTheState) {
  const std::string library = std::string(" ") + ZEROSIM_SCENARIO_LIBRARY_DIR;
  const CommandResult clean = run_cli("suite" + library);
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_NE(clean.output.find("67 scenario(s): 67 passed, 0 failed"), std::string::npos) << clean.output;
  const CommandResult defective = run_cli("suite" + library + " --defect scheduler_not_restored --json");
  EXPECT_EQ(defective.exit_code, 1) << defective.output;
  const nlohmann::json report = json_of(defective);
  ASSERT_TRUE(report.is_object()) << defective.output;
  EXPECT_GT(report["failed"].get<int>(), 0);
  bool named = false;
  for (const nlohmann::json& scenario : report["scenarios"]) {
    named = named || scenario["diagnosis"].get<std::string>().find("scheduler") != std::string::npos;
  }
  EXPECT_TRUE(named) << defective.output;
  // The JUnit report of a failing suite: valid for CI readers, the failure carrying the replay.
  zerosim::TestDirectory directory;
  const std::string junit = directory.path() + "/suite.xml";
  const CommandResult reported = run_cli("suite" + library + " --defect scheduler_not_restored --junit " + junit);
  EXPECT_EQ(reported.exit_code, 1) << reported.output;
  std::ifstream junit_file(junit);
  const std::string xml((std::istreambuf_iterator<char>(junit_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(xml.find("<failure message=\"after load"), std::string::npos) << xml;
  EXPECT_NE(xml.find("replay: zerosim run "), std::string::npos) << xml;
  EXPECT_NE(xml.find("--defect scheduler_not_restored"), std::string::npos) << xml;
  const std::string validate = "xmllint --noout --schema " + std::string(ZEROSIM_TEST_DATA_DIR) + "/junit.xsd " + junit +
                               " > /dev/null 2>&1";
  EXPECT_EQ(std::system(validate.c_str()), 0);
  const CommandResult unknown = run_cli("suite" + library + " --defect no_such_defect");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("unknown defect"), std::string::npos) << unknown.output;
}

TEST(Cli, FuzzShrinksADefectFailureToAFileThatReplaysTheSameDiagnosis) {
  zerosim::TestDirectory directory;
  const std::string reports = directory.path() + "/reports";
  const CommandResult clean = run_cli("fuzz --seed 3 --cases 6 --json");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(json_of(clean)["cases_run"], 6) << clean.output;
  // Shards split one campaign: 0/2 and 1/2 together run the cases of the whole.
  const nlohmann::json shard0 = json_of(run_cli("fuzz --seed 3 --cases 6 --shard 0/2 --json"));
  const nlohmann::json shard1 = json_of(run_cli("fuzz --seed 3 --cases 6 --shard 1/2 --json"));
  ASSERT_TRUE(shard0.is_object() && shard1.is_object());
  EXPECT_EQ(shard0["cases_run"].get<int>() + shard1["cases_run"].get<int>(), 6);
  std::set<std::string> names;
  for (const nlohmann::json* shard : {&shard0, &shard1}) {
    for (const nlohmann::json& scenario : (*shard)["scenarios"]) names.insert(scenario["scenario"].get<std::string>());
  }
  const nlohmann::json clean_output = json_of(clean);  // kept alive: the loop iterates inside it
  for (const nlohmann::json& scenario : clean_output["scenarios"]) {
    EXPECT_TRUE(names.count(scenario["scenario"].get<std::string>())) << scenario["scenario"];
  }

  const CommandResult failing =
      run_cli("fuzz --seed 3 --cases 4 --defect optimizer_state_not_saved --report-dir " + reports);
  EXPECT_EQ(failing.exit_code, 1) << failing.output;
  const size_t replay_at = failing.output.find("replay: zerosim replay ");
  ASSERT_NE(replay_at, std::string::npos) << failing.output;
  const size_t path_begin = replay_at + std::string("replay: zerosim replay ").size();
  const std::string shrunk_path = failing.output.substr(path_begin, failing.output.find('\n', path_begin) - path_begin);
  EXPECT_EQ(shrunk_path.rfind(reports + "/failures/", 0), 0u) << "shrunk failures go to a directory of their own";
  std::ifstream shrunk_file(shrunk_path);
  const nlohmann::json shrunk = nlohmann::json::parse(shrunk_file, nullptr, false);
  ASSERT_TRUE(shrunk.is_object()) << shrunk_path;
  EXPECT_EQ(shrunk["defects"], nlohmann::json::array({"optimizer_state_not_saved"})) << "the file carries its defect";
  EXPECT_LE(shrunk["steps"].get<int>(), 7) << shrunk.dump(2);
  // The diagnosis fuzz printed for the shrunk case is the one the replay prints.
  const size_t diagnosis_at = failing.output.find("diagnosis: ");
  ASSERT_NE(diagnosis_at, std::string::npos);
  const std::string diagnosis = failing.output.substr(diagnosis_at, failing.output.find('\n', diagnosis_at) - diagnosis_at);
  const CommandResult replayed = run_cli("replay " + shrunk_path);
  EXPECT_EQ(replayed.exit_code, 1) << replayed.output;
  EXPECT_NE(replayed.output.find(diagnosis), std::string::npos) << diagnosis << "\n---\n" << replayed.output;
  for (const char* file : {"/report.html", "/report.json", "/report.md", "/junit.xml"}) {
    EXPECT_TRUE(std::ifstream(reports + file).good()) << file;
  }

  // A time budget alone runs until the time is up (the default case count does not cap it).
  const CommandResult timed = run_cli("fuzz --seed 3 --minutes 0.05 --json");
  EXPECT_EQ(timed.exit_code, 0) << timed.output;
  const nlohmann::json timed_output = json_of(timed);
  ASSERT_TRUE(timed_output.is_object()) << timed.output;
  EXPECT_TRUE(timed_output["stopped_by_minutes"].get<bool>()) << timed.output;
  EXPECT_GE(timed_output["seconds"].get<double>(), 3.0) << timed.output;
  EXPECT_GE(timed_output["cases_run"].get<int>(), 1) << timed.output;
  const CommandResult no_time = run_cli("fuzz --minutes 0");
  EXPECT_EQ(no_time.exit_code, 2) << no_time.output;
  EXPECT_NE(no_time.output.find("--minutes"), std::string::npos) << no_time.output;

  const CommandResult bad_shard = run_cli("fuzz --shard 2/2");
  EXPECT_EQ(bad_shard.exit_code, 2) << bad_shard.output;
  EXPECT_NE(bad_shard.output.find("--shard 2/2: expected I/N with 0 <= I < N"), std::string::npos) << bad_shard.output;
}

TEST(Cli, ImportDsWritesAScenarioThatRuns) {
  zerosim::TestDirectory directory;
  const std::string scenario = directory.path() + "/seed.json";
  const CommandResult imported = run_cli("import-ds " + std::string(ZEROSIM_TEST_DATA_DIR) +
                                         "/seed_ds_config.json --crash engine.step_end@0#5 --saved-step 6 --steps 7 "
                                         "--delete-swap-directory -o " + scenario);
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  const CommandResult ran = run_cli("run " + scenario + " --report-dir " + directory.path() + "/report");
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_NE(ran.output.find("resumed at step 4, bit-identical to step 7"), std::string::npos) << ran.output;
  const CommandResult bad = run_cli("import-ds " + std::string(ZEROSIM_TEST_DATA_DIR) + "/seed_ds_config.json --crash @");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--crash @: expected SITE[@RANK][#OCCURRENCE]"), std::string::npos) << bad.output;
}

// --as deepspeed: the entries that apply are named on stderr with their source lines, and the
// scenario fails at the load; `zerosim deepspeed-model` lists the model.
TEST(Cli, ImportDsAsDeepSpeedNamesTheModelAndTheScenarioFails) {
  zerosim::TestDirectory directory;
  const std::string scenario = directory.path() + "/seed_as_deepspeed.json";
  const CommandResult imported = run_cli("import-ds " + std::string(ZEROSIM_TEST_DATA_DIR) +
                                         "/seed_ds_config.json --as deepspeed --ended-by kill -o " + scenario);
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  for (const char* entry : {"nvme-optimizer-not-loaded", "nvme-fp16-loss-scaler", "nvme-unswapped-sub-groups", "no-fsync"}) {
    EXPECT_NE(imported.output.find(std::string("model: ") + entry), std::string::npos) << entry << "\n" << imported.output;
  }
  EXPECT_NE(imported.output.find("engine.py:4332"), std::string::npos) << imported.output;
  const CommandResult ran = run_cli("run " + scenario);
  EXPECT_EQ(ran.exit_code, 1) << ran.output;
  EXPECT_NE(ran.output.find("diverged: after load (step 4): params"), std::string::npos) << ran.output;
  const CommandResult model = run_cli("deepspeed-model");
  ASSERT_EQ(model.exit_code, 0) << model.output;
  EXPECT_NE(model.output.find("other-world-size"), std::string::npos) << model.output;
  EXPECT_NE(model.output.find("source:  DeepSpeed edaa722 engine.py:4212-4227"), std::string::npos) << model.output;
  EXPECT_EQ(run_cli("import-ds " + std::string(ZEROSIM_TEST_DATA_DIR) + "/seed_ds_config.json --as megatron").exit_code, 2);
  const CommandResult stage2 = run_cli("import-ds " + std::string(ZEROSIM_TEST_DATA_DIR) +
                                       "/ds_configs/05_ds_tests_bingbertsquad_bsz24_fp16_zero2.json --as deepspeed");
  EXPECT_EQ(stage2.exit_code, 2) << stage2.output;
  EXPECT_NE(stage2.output.find("ZeRO stage 3"), std::string::npos) << stage2.output;
}

// gpt-check-export writes the weights, the batch and zerosim's gradients for
// python/check_gpt_in_torch.py (run on the GPU machine, which has torch and transformers).
TEST(Cli, GptCheckExportWritesWeightsBatchAndGradients) {
  zerosim::TestDirectory directory;
  const std::string out = directory.path() + "/gpt";
  const CommandResult exported = run_cli("gpt-check-export " + out + " --model gpt:layers=1,embd=8,heads=2,vocab=13,block=8 --length 7");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  for (const char* file : {"/model.safetensors", "/gradients.safetensors", "/batch.json"}) {
    EXPECT_TRUE(std::filesystem::exists(out + file)) << file;
  }
  std::ifstream batch_file(out + "/batch.json");
  const nlohmann::json batch = nlohmann::json::parse(batch_file);
  EXPECT_EQ(batch["tokens"].size(), 4u * 8u);
  EXPECT_GT(batch["loss"].get<double>(), 2.0);  // about ln 13 at initialization
  EXPECT_EQ(run_cli("gpt-check-export " + out).exit_code, 2);  // not empty
  const CommandResult too_long = run_cli("gpt-check-export " + directory.path() + "/other --model gpt:layers=1,embd=8,heads=2,vocab=13,block=8 --length 9");
  EXPECT_EQ(too_long.exit_code, 2) << too_long.output;
  EXPECT_NE(too_long.output.find("at most the block 8"), std::string::npos) << too_long.output;
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

// Before: `--resume ""` trained from step 0 and `--save-dir ""` saved nothing, both exiting 0.
TEST(Cli, AnEmptyValueIsRefusedNamingTheOption) {
  for (const std::string arguments :
       {"train --steps 1 --resume ''", "train --steps 1 --save-dir ''", "train --steps 1 --config ''",
        "train --steps 1 --run-id ''", "suite ''", "fuzz --failures-dir '' --cases 1", "ckpt inspect ''"}) {
    const CommandResult result = run_cli(arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << "\n" << result.output;
    EXPECT_NE(result.output.find("empty value"), std::string::npos) << arguments << "\n" << result.output;
  }
  // The user's own command line under exec passes an empty argument through untouched.
  const CommandResult exec = run_cli("exec --watch /nonexistent-zerosim-dir -- true ''");
  EXPECT_EQ(exec.output.find("empty value"), std::string::npos) << exec.output;
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

// ---- zerosim ckpt ---------------------------------------------------------------------------

// A tiny run saved through the engine: <directory>/global_step<N> at the end (and every
// `save_every_steps`). The global batch is 6 samples, so W = 1, 2, 3 and 6 run the same steps.
struct TinyRun {
  int world_size = 2;
  uint64_t seed = 7;
  int64_t steps = 3;
  int64_t save_every_steps = 0;
  std::vector<int64_t> layer_widths = {4, 6, 3};
  zerosim::Precision precision = zerosim::Precision::kBf16;
};

void save_tiny_run(const std::string& directory, const TinyRun& run) {
  zerosim::TrainingOptions options;
  zerosim::ResolvedConfig& config = options.config;
  config.precision = run.precision;
  config.communication_dtype = run.precision;
  config.micro_batch_size = 1;
  config.gradient_accumulation_steps = 6 / run.world_size;
  config.train_batch_size = 6;
  config.optimizer.learning_rate = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.scheduler.type = zerosim::SchedulerType::kWarmupLR;
  config.scheduler.warmup_max_lr = 1e-2;
  config.scheduler.warmup_num_steps = 3;
  config.zero.stage = 3;
  config.zero.sub_group_size = 7;  // several sub-groups per rank, even in this model
  // A small initial scale, so that fp16 runs update from the first step instead of skipping.
  config.loss_scaler.initial_scale_power = 8;
  config.loss_scaler.loss_scale_window = 4;
  options.model.layer_widths = run.layer_widths;
  options.world_size = run.world_size;
  options.seed = run.seed;
  options.data.seed = run.seed;
  options.data.sample_count = 29;
  options.data.feature_count = run.layer_widths.front();
  options.data.class_count = run.layer_widths.back();
  zerosim::CheckpointPlan plan;
  plan.save_directory = directory;
  plan.save_every_steps = run.save_every_steps;
  zerosim::RealEnv real_env;
  zerosim::Result<zerosim::TrainingRun> result = zerosim::run_training(options, run.steps, real_env.env(), plan);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void flip_last_byte(const std::string& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file) << path;
  file.seekg(-1, std::ios::end);
  char byte = 0;
  file.get(byte);
  file.seekp(-1, std::ios::end);
  file.put(static_cast<char>(byte ^ 0x01));
  ASSERT_TRUE(file) << path;
}

TEST(CkptCli, VerifyAcceptsAGoodCheckpoint) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, TinyRun{}));
  for (const std::string& arguments : {checkpoints, checkpoints + "/", checkpoints + " --tag global_step3"}) {
    const CommandResult result = run_cli("ckpt verify " + arguments);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_TRUE(contains(result.output, "ok: " + checkpoints + "/global_step3: 2 shards, ")) << result.output;
    EXPECT_TRUE(contains(result.output, " bytes, step 3")) << result.output;
  }
}

TEST(CkptCli, VerifyNamesTheShardWithAFlippedByte) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, TinyRun{}));
  ASSERT_NO_FATAL_FAILURE(flip_last_byte(checkpoints + "/global_step3/rank-00001-of-00002.safetensors"));
  const CommandResult result = run_cli("ckpt verify " + checkpoints);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(contains(result.output, checkpoints + "/global_step3/rank-00001-of-00002.safetensors")) << result.output;
  EXPECT_TRUE(contains(result.output, "checksum")) << result.output;
}

TEST(CkptCli, VerifyNamesTheTruncatedShard) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, TinyRun{}));
  const std::string shard = checkpoints + "/global_step3/rank-00000-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 5);
  // Through `latest` (the only tag is incomplete: nothing to fall back to) and by name.
  for (const std::string& arguments : {checkpoints, checkpoints + " --tag global_step3"}) {
    const CommandResult result = run_cli("ckpt verify " + arguments);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_TRUE(contains(result.output, shard)) << result.output;
    EXPECT_TRUE(contains(result.output, "truncated")) << result.output;
  }
}

TEST(CkptCli, VerifyFailsWhenLatestFallsBackToAnOlderTag) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  TinyRun run;
  run.steps = 4;
  run.save_every_steps = 2;
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, run));
  const std::string shard = checkpoints + "/global_step4/rank-00001-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 1);
  const CommandResult result = run_cli("ckpt verify " + checkpoints);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(contains(result.output, "warning")) << result.output;
  EXPECT_TRUE(contains(result.output, shard)) << result.output;
  EXPECT_TRUE(contains(result.output, checkpoints + "/global_step2, the tag a resume falls back to, verifies")) << result.output;
  const CommandResult older = run_cli("ckpt verify " + checkpoints + " --tag global_step2");
  EXPECT_EQ(older.exit_code, 0) << older.output;
  // inspect and diff go on with the tag a resume would load, after the warning.
  const CommandResult inspect = run_cli("ckpt inspect " + checkpoints + " --json");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "warning")) << inspect.output;
  EXPECT_EQ(json_of(inspect)["tag"], "global_step2") << inspect.output;
}

TEST(CkptCli, BadInputExitsTwo) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, TinyRun{}));
  const CommandResult missing = run_cli("ckpt verify " + directory.path() + "/nonexistent");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, directory.path() + "/nonexistent")) << missing.output;
  const CommandResult no_such_tag = run_cli("ckpt verify " + checkpoints + " --tag global_step9");
  EXPECT_EQ(no_such_tag.exit_code, 2) << no_such_tag.output;
  EXPECT_TRUE(contains(no_such_tag.output, "global_step9")) << no_such_tag.output;
  EXPECT_TRUE(contains(no_such_tag.output, "global_step3")) << "lists the tags there: " << no_such_tag.output;
  const CommandResult escaping_tag = run_cli("ckpt inspect " + checkpoints + " --tag ../ckpt");
  EXPECT_EQ(escaping_tag.exit_code, 2) << escaping_tag.output;
  const CommandResult empty = run_cli("ckpt inspect " + directory.path());
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  const CommandResult tag_directory = run_cli("ckpt verify " + checkpoints + "/global_step3");
  EXPECT_EQ(tag_directory.exit_code, 2) << tag_directory.output;
  EXPECT_TRUE(contains(tag_directory.output, "--tag")) << "suggests the parent: " << tag_directory.output;
  EXPECT_EQ(run_cli("ckpt verify").exit_code, 2);
  EXPECT_EQ(run_cli("ckpt").exit_code, 2);
  EXPECT_EQ(run_cli("ckpt diff " + checkpoints).exit_code, 2);
}

TEST(CkptCli, InspectPrintsTheManifest) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  TinyRun run;
  run.precision = zerosim::Precision::kFp16;
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, run));
  const CommandResult json_result = run_cli("ckpt inspect " + checkpoints + " --json");
  ASSERT_EQ(json_result.exit_code, 0) << json_result.output;
  const nlohmann::json manifest = json_of(json_result);
  ASSERT_TRUE(manifest.is_object()) << json_result.output;
  EXPECT_EQ(manifest["layout"]["world_size"], 2);
  EXPECT_EQ(manifest["counters"]["global_steps"], 3);
  EXPECT_EQ(manifest["tag"], "global_step3");
  EXPECT_EQ(manifest["tag_directory"], checkpoints + "/global_step3");
  EXPECT_EQ(manifest["precision"], "fp16");
  EXPECT_EQ(manifest["shards"].size(), 2u);
  EXPECT_EQ(manifest["layout"]["parameters"].size(), 4u);
  EXPECT_TRUE(manifest["loss_scaler"].contains("current_scale"));

  const CommandResult table = run_cli("ckpt inspect " + checkpoints);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  for (const char* expected : {"format_version", "world_size", "global_steps", "skipped_steps", "loss_scale",
                               "data_position", "config_hash", "layers.0.weight", "[6, 4]", "layers.1.bias",
                               "rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"}) {
    EXPECT_TRUE(contains(table.output, expected)) << expected << "\n" << table.output;
  }
  const std::string first_checksum = manifest["shards"][0]["xxh3_128"];
  EXPECT_TRUE(contains(table.output, first_checksum)) << table.output;
}

TEST(CkptCli, DiffOfACheckpointWithItselfIsIdentical) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, TinyRun{}));
  const CommandResult result = run_cli("ckpt diff " + checkpoints + " " + checkpoints);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  // 4 parameters (6x4, 6, 3x6, 3: 51 elements) times 4 states.
  EXPECT_TRUE(contains(result.output, "identical: 16 tensors, 204 elements")) << result.output;
}

TEST(CkptCli, DiffAcrossWorldSizesOfOneGlobalBatchIsIdentical) {
  zerosim::TestDirectory directory;
  TinyRun two_ranks;
  two_ranks.precision = zerosim::Precision::kFp16;
  TinyRun three_ranks = two_ranks;
  three_ranks.world_size = 3;
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(directory.path() + "/w2", two_ranks));
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(directory.path() + "/w3", three_ranks));
  const CommandResult result = run_cli("ckpt diff " + directory.path() + "/w2 " + directory.path() + "/w3");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "identical: 16 tensors")) << result.output;
  EXPECT_TRUE(contains(result.output, "world size 3")) << result.output;
}

TEST(CkptCli, DiffOfTwoStepsNamesTheScalarTheTensorAndTheElement) {
  zerosim::TestDirectory directory;
  const std::string checkpoints = directory.path() + "/ckpt";
  TinyRun run;
  run.steps = 4;
  run.save_every_steps = 2;
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(checkpoints, run));
  const std::string arguments = "ckpt diff " + checkpoints + " " + checkpoints + " --tag-a global_step2 --tag-b global_step4";
  const CommandResult result = run_cli(arguments);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(contains(result.output, "differs: counters.global_steps: 2 vs 4")) << result.output;
  EXPECT_TRUE(std::regex_search(result.output, std::regex(R"(differs: tensor layers\.[0-9]+\.(weight|bias)/[a-z_]+ \((bf16|fp32) )")))
      << result.output;
  EXPECT_TRUE(std::regex_search(result.output, std::regex(R"(element [0-9]+ \(index \[[0-9, ]+\]\): \S+ \(0x[0-9a-f]+\) vs \S+ \(0x[0-9a-f]+\), ulp distance [1-9])")))
      << result.output;

  const CommandResult json_result = run_cli(arguments + " --json");
  EXPECT_EQ(json_result.exit_code, 1) << json_result.output;
  const nlohmann::json output = json_of(json_result);
  ASSERT_TRUE(output.is_object()) << json_result.output;
  EXPECT_EQ(output["identical"], false);
  ASSERT_FALSE(output["scalar_differences"].empty());
  EXPECT_EQ(output["scalar_differences"][0]["name"], "counters.global_steps");
  ASSERT_TRUE(output["tensor_difference"].is_object()) << json_result.output;
  EXPECT_GE(output["tensor_difference"]["element_index"].get<int64_t>(), 0);
  EXPECT_GE(output["tensor_difference"]["ulp_distance"].get<uint64_t>(), 1u);
}

TEST(CkptCli, DiffOfDifferentSeedsDiffers) {
  zerosim::TestDirectory directory;
  TinyRun first;
  TinyRun second = first;
  second.seed = 8;
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(directory.path() + "/a", first));
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(directory.path() + "/b", second));
  const CommandResult result = run_cli("ckpt diff " + directory.path() + "/a " + directory.path() + "/b");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(contains(result.output, "differs: tensor layers.0.weight/param")) << result.output;
  EXPECT_TRUE(contains(result.output, "setting seed differs")) << "a note, not a difference: " << result.output;
}

TEST(CkptCli, DiffOfDifferentModelsExitsTwoNamingBothShapes) {
  zerosim::TestDirectory directory;
  TinyRun first;
  TinyRun second = first;
  second.layer_widths = {4, 5, 3};
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(directory.path() + "/a", first));
  ASSERT_NO_FATAL_FAILURE(save_tiny_run(directory.path() + "/b", second));
  const CommandResult result = run_cli("ckpt diff " + directory.path() + "/a " + directory.path() + "/b");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  for (const char* expected : {"4,6,3", "4,5,3", "[6, 4]", "[5, 4]"}) {
    EXPECT_TRUE(contains(result.output, expected)) << expected << "\n" << result.output;
  }
}

TEST(CkptUlpDistance, CountsRepresentableValues) {
  EXPECT_EQ(zerosim::ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)), 1u);
  EXPECT_EQ(zerosim::ulp_distance(std::nextafter(1.0f, 2.0f), 1.0f), 1u);
  EXPECT_EQ(zerosim::ulp_distance(-1.0f, std::nextafter(-1.0f, -2.0f)), 1u);
  EXPECT_EQ(zerosim::ulp_distance(0.0f, -0.0f), 0u);
  EXPECT_EQ(zerosim::ulp_distance(1.0f, 2.0f), uint64_t{1} << 23);
  EXPECT_EQ(zerosim::ulp_distance(1.5f, 1.5f), 0u);
  // Across zero: the smallest subnormals either side are two steps apart (through zero).
  const float smallest = std::nextafter(0.0f, 1.0f);
  EXPECT_EQ(zerosim::ulp_distance(-smallest, smallest), 2u);
  EXPECT_EQ(zerosim::ulp_distance(-1.0f, 1.0f), 2 * zerosim::ulp_distance(0.0f, 1.0f));
  // 16-bit patterns: fp16 1.0 is 0x3c00, bf16 1.0 is 0x3f80; -0 is 0x8000.
  EXPECT_EQ(zerosim::ulp_distance_bits(0x3c00, 0x3c01, 16), 1u);
  EXPECT_EQ(zerosim::ulp_distance_bits(0x8000, 0x0000, 16), 0u);
  EXPECT_EQ(zerosim::ulp_distance_bits(0x3f80, 0x4000, 16), 128u);  // bf16 1.0 to 2.0: 2^7
  EXPECT_EQ(zerosim::ulp_distance_bits(0x8001, 0x0001, 16), 2u);
  EXPECT_EQ(zerosim::ulp_distance(1.0, std::nextafter(1.0, 2.0)), 1u);
  EXPECT_EQ(zerosim::ulp_distance(-0.0, 0.0), 0u);
  static_assert(zerosim::ulp_distance(1.0f, 2.0f) == (uint64_t{1} << 23));
}

}  // namespace
