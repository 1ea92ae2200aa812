// The `zerosim train` and `zerosim config check` commands (the CLI contract of docs/cli.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/config/ds_config.h"
#include "core/engine/compute_backend.h"
#include "core/model/mlp.h"

namespace zerosim {

// Flags shared by the commands that resolve a config: the file, --set overrides, and the
// run settings that fill "auto" (the HF Trainer's TrainingArguments).
struct ConfigFlags {
  std::string config_path;  // empty: the embedded default
  std::vector<std::string> overrides;
  RunSettings settings;
  std::string precision_text = "fp16";
  // (canonical flag, parsed option) of each run setting, to tell given from defaulted.
  std::vector<std::pair<std::string, CLI::Option*>> setting_options;
  // Run settings that the program derived (e.g. the accumulation on an elastic resume) and
  // that count as given.
  std::vector<std::string> derived_flags;
};

void add_config_flags(CLI::App& command, ConfigFlags& flags, bool config_is_positional);
// Reads, overrides and resolves the config. Errors name the file or key.
Result<ResolvedConfig> load_config(const ConfigFlags& flags);

// --device: "cpu" (the default), "cuda" (rank r on GPU r mod the GPUs visible; the CPU's bits)
// or "cuda-fast" (cuBLAS GEMMs; see core/cuda/device_compute_backend.h). kFailedPrecondition
// when CUDA is not compiled in; a missing GPU is reported when the run starts; kInvalidArgument
// for another name.
Result<ComputeDevice> compute_device_named(const std::string& name);
// Adds --device to a command.
void add_device_flag(CLI::App& command, std::string& device);

struct TrainFlags {
  ConfigFlags config;
  std::string device = "cpu";
  int threads_per_rank = 1;  // --threads-per-rank: each rank's CPU compute threads
  int64_t steps = 50;
  uint64_t seed = 1234;
  std::string model_text = "13,37,29,5";
  int64_t dataset_size = 4096;
  std::string token_file;  // --dataset: the transformer's token file (empty: synthetic tokens)
  std::string run_id;  // empty: derived from the config, model, seed and world size
  bool json = false;
  // Checkpoints: save into save_directory every save_every_steps steps (0: at the end only),
  // resume from resume_directory's `latest`.
  std::string save_directory;
  int64_t save_every_steps = 0;
  // SIGTERM or SIGINT stops the run after the step in progress; with this (and a save
  // directory) it also saves that step before exiting.
  bool save_on_signal = false;
  std::string resume_directory;
  // --freeze NAME (repeatable): parameters frozen by name (requires_grad=False).
  std::vector<std::string> frozen_parameters;
  // --exclude-frozen-parameters: saves leave the frozen parameters' values out (DeepSpeed's
  // save_checkpoint(exclude_frozen_parameters=True)).
  bool exclude_frozen_parameters = false;
  // DeepSpeed's load_checkpoint options for --resume (CheckpointLoadOptions).
  bool load_optimizer_states = true;
  bool load_lr_scheduler_states = true;
  bool load_module_only = false;
  bool fallback_on_invalid = false;  // pass over a committed checkpoint that fails validation
  // --defect NAME: a named defect switched on in this real run (zerosim exec's demonstrations:
  // the harness must find it in a real process).
  std::vector<std::string> defect_names;
  // Set: after the run, write what a reference implementation needs to train the same run
  // into this directory (tools/export_run.h). Fresh, single-process runs only.
  std::string export_directory;
  // Set: this process is one rank of a run spread over processes (one GPU each), its rank,
  // world size and GPU from the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK; or
  // OpenMPI's OMPI_COMM_WORLD_*, or Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), the
  // NCCL id passed through this file.
  std::string rendezvous_path;
  // Set: this process is one rank of an MPI job (mpirun, or srun with MPI): rank, world size
  // and the rank on its host from MPI, rank 0's NCCL id shared by one MPI broadcast.
  bool mpi = false;
  // Set by the parser: which of --model, --seed and --dataset-size were given (a resume takes
  // the checkpoint's values for the others).
  CLI::Option* model_option = nullptr;
  CLI::Option* seed_option = nullptr;
  CLI::Option* dataset_size_option = nullptr;
  CLI::Option* token_file_option = nullptr;
  CLI::Option* world_size_option = nullptr;
};

// Exit codes: 0 success, 2 bad input, 3 environment error (disk, permissions), 1 other failure.
int run_train_command(const TrainFlags& flags);

// The launcher's rank, world size and local rank, from the first of RANK / OMPI_COMM_WORLD_RANK /
// PMI_RANK / SLURM_PROCID (and likewise for the others) that is set; the error names what is
// missing or not a number. The ranks on this host (LOCAL_WORLD_SIZE, as torchrun sets it, or
// OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS) are optional: 0 when none is set.
struct LaunchedRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;
};
Result<LaunchedRank> launched_rank_from_environment();
int run_config_check_command(const ConfigFlags& flags);
int exit_code_for(const Status& status);

// The `train` and `config check` subcommands: the flags CLI11 parses into, and the subcommands,
// to tell which one ran. CLI11 keeps references to the flags, so this lives in main() from
// parse to run.
struct TrainCommands {
  TrainFlags train_flags;
  ConfigFlags check_flags;
  CLI::App* train = nullptr;
  CLI::App* check = nullptr;
};
void add_train_commands(CLI::App& app, TrainCommands& commands);
// The exit code of the one that ran; nullopt when neither did.
std::optional<int> run_train_commands(const TrainCommands& commands);

}  // namespace zerosim
