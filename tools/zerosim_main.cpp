// zerosim: the command line. See README.md for the contract of each command.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>

#include "core/build_info.h"
#include "core/cuda/cuda_probe.h"
#include "tools/bench_io_command.h"
#include "tools/gpt_check_command.h"
#include "tools/install_paths.h"
#include "tools/ckpt_command.h"
#include "tools/exec_command.h"
#include "tools/explore_command.h"
#include "tools/run_command.h"
#include "scenarios/deepspeed_model.h"
#include "scenarios/import_ds.h"
#include "core/env/defects.h"
#include "tools/train_command.h"

namespace {

// An empty value ("--resume ''", "--save-dir ''") is bad input, never "not given": every option
// that takes a value refuses one, in every subcommand; `except` takes arguments verbatim (the
// user's own command line under exec, where an empty argument is theirs to pass).
void refuse_empty_values(CLI::App& command, const CLI::Option* except) {
  for (CLI::Option* option : command.get_options()) {
    if (option == except || option->get_expected_min() == 0) continue;  // a flag
    option->check(CLI::Validator(
        [](std::string& value) {
          // CLI11 puts the option's name in front of this.
          return value.empty() ? std::string("empty value (give a value, or leave the option out)") : std::string();
        },
        "", "NONEMPTY"));
  }
  for (CLI::App* subcommand : command.get_subcommands({})) refuse_empty_values(*subcommand, except);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zerosim: a ZeRO-3 training-state engine with NVMe offload, and its deterministic simulator"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("zerosim ") + zerosim::zerosim_build_version() + " (git commit " +
                                        zerosim::zerosim_git_commit() + ")");

  zerosim::TrainFlags train_flags;
  CLI::App* train = app.add_subcommand("train", "Run the ZeRO-3 core for K steps and print the per-step table");
  zerosim::add_config_flags(*train, train_flags.config, /*config_is_positional=*/false);
  train->add_option("--steps", train_flags.steps, "Optimizer steps to run")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  train_flags.seed_option = train->add_option("--seed", train_flags.seed, "Seed of parameters, data and shuffling");
  train_flags.model_option =
      train->add_option("--model", train_flags.model_text,
                        "MLP layer widths (input,hidden...,classes) or a GPT-2-style transformer "
                        "gpt:layers=L,embd=E,heads=H,vocab=V,block=B");
  train->add_option("--save-dir", train_flags.save_directory,
                    "Save checkpoints here (<dir>/global_step<N>, and <dir>/latest): at the end, and with --save-every");
  train->add_flag("--save-on-signal", train_flags.save_on_signal,
                  "On SIGTERM or SIGINT, save the step that finishes into --save-dir before exiting (without it, "
                  "the run stops after that step unsaved); a second signal exits at once")
      ->needs(train->get_option("--save-dir"));
  train->add_option("--freeze", train_flags.frozen_parameters,
                    "Freeze this parameter (repeatable; e.g. layers.0.weight): no gradient, no optimizer state, "
                    "never updated, as requires_grad=False; a checkpoint holds its value alone. With --resume, the "
                    "checkpoint's frozen set unless --freeze is given");
  train->add_flag("--exclude-frozen-parameters", train_flags.exclude_frozen_parameters,
                  "Saves leave the frozen parameters' values out, as DeepSpeed's "
                  "save_checkpoint(exclude_frozen_parameters=True); a resume takes them from the model it builds")
      ->needs(train->get_option("--save-dir"));
  train->add_option("--defect", train_flags.defect_names,
                    "Switch a named defect on in this run (repeatable; zerosim defects lists them): a planted bug for "
                    "zerosim exec to find in a real process");
  train->add_option("--save-every", train_flags.save_every_steps, "Save every S steps (needs --save-dir)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  train->add_option("--resume", train_flags.resume_directory,
                    "Resume from this checkpoint directory's latest tag and continue to --steps (model, seed, "
                    "dataset size and global batch default to the checkpoint's)");
  CLI::Option* resume_option = train->get_option("--resume");
  train->add_option("--load-optimizer-states", train_flags.load_optimizer_states,
                    "With --resume: false loads the parameters, counters and scheduler and starts a fresh optimizer "
                    "(moments, Adam's step count, loss scaler, lr), as DeepSpeed's load_optimizer_states=False")
      ->needs(resume_option);
  train->add_option("--load-lr-scheduler-states", train_flags.load_lr_scheduler_states,
                    "With --resume: false starts the LR schedule fresh (the first update keeps the checkpoint's lr), "
                    "as DeepSpeed's load_lr_scheduler_states=False")
      ->needs(resume_option);
  train->add_flag("--fallback-on-invalid", train_flags.fallback_on_invalid,
                  "With --resume: pass over a committed checkpoint that fails validation (a flipped counter, a "
                  "broken seal) and load the newest complete older one, with a warning naming it; without it, "
                  "such a checkpoint is an error (exit 2)")
      ->needs(resume_option);
  CLI::Option* module_only_flag =
      train->add_flag("--load-module-only", train_flags.load_module_only,
                      "With --resume: load only the parameters; optimizer, loss scaler, scheduler, counters and data "
                      "position start fresh (the run counts --steps from 0), as DeepSpeed's load_module_only=True")
          ->needs(resume_option);
  module_only_flag->excludes(train->get_option("--load-optimizer-states"))
      ->excludes(train->get_option("--load-lr-scheduler-states"));
  train_flags.dataset_size_option = train->add_option("--dataset-size", train_flags.dataset_size, "Samples in the synthetic dataset")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  train_flags.token_file_option =
      train->add_option("--dataset", train_flags.token_file,
                        "Transformer only: a nanoGPT-style file of little-endian uint16 tokens (train.bin); samples "
                        "are its windows of block tokens (default: a synthetic token stream)")
          ->excludes(train_flags.dataset_size_option);
  train->add_option("--run-id", train_flags.run_id,
                    "Name of this run's swap directory under nvme_path (default: a digest of the run's settings)");
  train->add_flag("--json", train_flags.json, "Print one JSON object: steps, state_digest, component_digests");
  zerosim::add_device_flag(*train, train_flags.device);
  train->add_option("--rendezvous", train_flags.rendezvous_path,
                    "Run as one rank of several processes (one GPU each; rank, world size and GPU from the "
                    "launcher's RANK/WORLD_SIZE/LOCAL_RANK, OMPI_COMM_WORLD_*, or SLURM_*), NCCL between them, "
                    "the NCCL id passed through FILE on a path every process sees (must not exist at start)");
  CLI::Option* mpi_flag = train->add_flag(
      "--mpi", train_flags.mpi,
      "Run as one rank of an MPI job (mpirun -n N, or srun with MPI): rank, world size and GPU (the rank on "
      "its host) from MPI, which only shares the NCCL id; NCCL between the processes. A rank that fails stops "
      "the job (MPI_Abort)");
  mpi_flag->excludes(train->get_option("--rendezvous"));
  train->add_option("--export-run", train_flags.export_directory,
                    "After the run, write its settings, initial weights, batches, per-step records and final state "
                    "into this new or empty directory, for a reference implementation (scripts/torch_reference/)")
      ->excludes(train->get_option("--resume"))
      ->excludes(train->get_option("--rendezvous"))
      ->excludes(mpi_flag);
  train_flags.world_size_option = train->get_option("--world-size");

  CLI::App* config = app.add_subcommand("config", "Inspect DeepSpeed configs");
  config->require_subcommand(1);
  zerosim::ConfigFlags check_flags;
  CLI::App* check = config->add_subcommand("check", "Resolve a DeepSpeed config: exit 0 and print it, or exit 2 with the error");
  zerosim::add_config_flags(*check, check_flags, /*config_is_positional=*/true);

  CLI::App* devices = app.add_subcommand("devices", "Report the CUDA backend: compiled in or not, runtime, GPUs");

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks of zerosim's own engines (see bench/ for the scripts)");
  bench->require_subcommand(1);
  zerosim::BenchIoFlags io_flags;
  CLI::App* bench_io = bench->add_subcommand("io", "Swap-engine write and read throughput (O_DIRECT), as JSON");
  bench_io->add_option("--dir", io_flags.directory, "Directory on the disk to measure");
  bench_io->add_option("--size-mib", io_flags.size_mib, "File size in MiB")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  bench_io->add_option("--block-size", io_flags.block_size_bytes, "aio.block_size in bytes");
  bench_io->add_option("--queue-depth", io_flags.queue_depth, "aio.queue_depth");
  bench_io->add_option("--parallelism", io_flags.parallelism, "aio.intra_op_parallelism");
  bench_io->add_option("--repetitions", io_flags.repetitions, "Best of this many runs")->check(CLI::Range(1, 100));
  bench_io->add_option("--engine", io_flags.engine, "libaio or pread")->check(CLI::IsMember({"libaio", "pread"}));

  zerosim::CheckpointCommands checkpoint_commands;
  zerosim::add_checkpoint_commands(app, checkpoint_commands);

  auto add_report_flags = [](CLI::App& command, zerosim::ReportFlags& flags) {
    command.add_option("--defect", flags.defect_names, "Switch a named defect on for every scenario (repeatable)");
    command.add_flag("--json", flags.json, "Print one JSON object: the scenarios with their verdicts, passed, failed");
    command.add_option("--junit", flags.junit_path, "Also write a JUnit XML report to FILE");
    command.add_option("--report-dir", flags.report_directory,
                       "Write report.html, report.json, report.md and junit.xml into DIR");
    zerosim::add_device_flag(command, flags.device);
  };
  zerosim::RunFlags run_flags;
  CLI::App* run = app.add_subcommand("run", "Run scenarios: reference, faults, crash, resume, and a verdict per scenario");
  run->add_option("scenarios", run_flags.scenario_paths, "Scenario JSON files")->required();
  add_report_flags(*run, run_flags.report);
  zerosim::RunFlags suite_flags;
  suite_flags.command_name = "suite";
  CLI::App* suite = app.add_subcommand(
      "suite", "Run every scenario of a directory (default: the scenario library shipped with this zerosim)");
  CLI::Option* suite_directory_option =
      suite->add_option("directory", suite_flags.suite_directory, "Directory of scenario JSON files");
  add_report_flags(*suite, suite_flags.report);
  zerosim::RunFlags replay_flags;
  replay_flags.command_name = "replay";
  std::string replay_path;
  CLI::App* replay = app.add_subcommand("replay", "Replay one scenario file (a shrunk failure from zerosim fuzz)");
  replay->add_option("scenario", replay_path, "Scenario JSON file")->required();
  add_report_flags(*replay, replay_flags.report);
  zerosim::FuzzFlags fuzz_flags;
  CLI::App* fuzz = app.add_subcommand(
      "fuzz", "Generated scenarios that demand recovery; a failure is shrunk and written as a scenario to replay");
  fuzz->add_option("--seed", fuzz_flags.seed, "Campaign seed: case i is a pure function of (seed, i)");
  fuzz->add_option("--cases", fuzz_flags.cases,
                   "Cases in the campaign (all shards together); alone: that many; with --minutes: at most that many; "
                   "with neither: " + std::to_string(zerosim::kDefaultFuzzCases))
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  fuzz->add_option("--minutes", fuzz_flags.minutes,
                   "Run cases until this many minutes have passed (alone: no case limit; a case started is finished)")
      ->check(CLI::Range(1e-6, 1e6, "a duration > 0 in minutes"));
  fuzz->add_option("--stop-after-failures", fuzz_flags.stop_after_failures,
                   "Stop starting cases once this many have failed (0: never; mutation runs use 1)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  fuzz->add_option("--shard", fuzz_flags.shard, "I/N: run the cases whose index is I modulo N (a CI matrix, a Slurm array)");
  fuzz->add_option("--failures-dir", fuzz_flags.failures_directory,
                   "Write shrunk failing scenarios here (default: <report dir>/failures, else fuzz-failures)");
  fuzz->add_option("--shrink-attempts", fuzz_flags.shrink_attempts, "Most candidate runs when shrinking one failure")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  add_report_flags(*fuzz, fuzz_flags.report);

  zerosim::ImportOptions import_options;
  std::string import_output;
  CLI::App* import_ds = app.add_subcommand(
      "import-ds", "Write a scenario from a DeepSpeed config: train, save, crash, resume, compare every component");
  import_ds->add_option("config", import_options.config_path, "DeepSpeed config JSON (kept verbatim)")->required();
  import_ds->add_option("--world-size", import_options.world_size, "Ranks of the run")->check(CLI::Range(1, 256));
  import_ds->add_option("--resume-world-size", import_options.resume_world_size, "Ranks of the resume (0: the same)")
      ->check(CLI::Range(0, 256));
  import_ds->add_option("--steps", import_options.steps, "Steps of the whole run")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import_ds->add_option("--save-every", import_options.save_every, "Save every S steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import_ds->add_option("--saved-step", import_options.saved_step, "The first phase ends after this step (a multiple of --save-every)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import_ds->add_option("--crash", import_options.crash,
                        "Crash at SITE[@RANK][#OCCURRENCE] (e.g. ckpt.shard_written@1#2, engine.step_end@0#5)");
  import_ds->add_flag("--delete-swap-directory", import_options.delete_swap_directory,
                      "The operator deletes the NVMe swap directories before the restart");
  import_ds->add_option("--model", import_options.model, "MLP layer widths: input,hidden...,classes");
  import_ds->add_option("--precision", import_options.precision, "fp32, fp16 or bf16 (default: from the config)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  import_ds->add_option("--seed", import_options.seed, "Seed of parameters and data");
  import_ds->add_option("--name", import_options.name, "The scenario's name");
  import_ds->add_flag("--config-by-path", import_options.config_by_path,
                      "Refer to the config by its path instead of copying it in (relative paths are read beside the scenario)");
  import_ds->add_option("--as", import_options.as,
                        "deepspeed: switch on the defects of every entry of zerosim's model of DeepSpeed edaa722's "
                        "resume that applies (`zerosim deepspeed-model` lists them), so the scenario fails as the "
                        "user's run did")
      ->check(CLI::IsMember({"deepspeed"}));
  import_ds->add_option("--training-loop", import_options.training_loop,
                        "hf (the Hugging Face Trainer restores the data position and RNG) or plain (a loop over a "
                        "DataLoader, which DeepSpeed does not restore); for --as deepspeed")
      ->check(CLI::IsMember({"hf", "plain"}));
  import_ds->add_option("--ended-by", import_options.ended_by,
                        "How the first run ended: power-loss (unsynced data lost; default) or kill (the job died, the "
                        "machine stayed up)")
      ->check(CLI::IsMember({"power-loss", "kill"}));
  import_ds->add_option("--no-checkpoint", import_options.no_checkpoint,
                        "When the crash came before any save returned: fresh-start (default: the restart trains from "
                        "step 0) or refusal (it must refuse)")
      ->check(CLI::IsMember({"fresh-start", "refusal"}));
  import_ds->add_option("--resume-tag", import_options.resume_tag, "The tag the restart asks for (default latest)");
  import_ds->add_option("--load-optimizer-states", import_options.load_optimizer_states,
                        "The restart's load_optimizer_states (true|false)");
  import_ds->add_option("--load-lr-scheduler-states", import_options.load_lr_scheduler_states,
                        "The restart's load_lr_scheduler_states (true|false)");
  import_ds->add_flag("--load-module-only", import_options.load_module_only, "The restart loads the module only");
  import_ds->add_option("--resume-config", import_options.resume_config_path,
                        "The DeepSpeed config of the restart, when the user changed it between the runs");
  import_ds->add_option("--delete-tag", import_options.delete_tag,
                        "The operator deleted the newest (or the previous) tag before the restart")
      ->check(CLI::IsMember({"newest", "previous"}));
  import_ds->add_option("-o,--output", import_output, "Write the scenario here (default: standard output)");
  zerosim::GptCheckFlags gpt_check_flags;
  CLI::App* gpt_check = app.add_subcommand(
      "gpt-check-export", "Write the transformer's weights, a batch and zerosim's gradients, for python/check_gpt_in_torch.py");
  gpt_check->add_option("directory", gpt_check_flags.directory, "A new or empty directory")->required();
  gpt_check->add_option("--model", gpt_check_flags.model, "gpt:layers=L,embd=E,heads=H,vocab=V,block=B");
  gpt_check->add_option("--seed", gpt_check_flags.seed, "Seed of the weights and the batch");
  gpt_check->add_option("--sequences", gpt_check_flags.sequences, "Sequences in the batch")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  gpt_check->add_option("--length", gpt_check_flags.length, "Tokens predicted per sequence (at most block)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  CLI::App* deepspeed_model = app.add_subcommand(
      "deepspeed-model", "List zerosim's model of what DeepSpeed edaa722 loses on resume, with its source lines");

  CLI::App* defects = app.add_subcommand("defects", "List the named defects the simulator can switch on in the core");

  zerosim::ExploreFlags explore_flags;
  CLI::App* explore = app.add_subcommand(
      "explore", "Crash-explore one save of a scenario on the simulated disk: every crash point, every crash state");
  explore->add_option("scenario", explore_flags.scenario_path, "Scenario JSON file")->required();
  explore->add_option("--real-kill", explore_flags.real_kill_directory,
                      "Instead of SimDisk: run each crash point as a child process on real files under DIR, "
                      "killed with SIGKILL at the point, then resume and compare");
  explore->add_option("--defect", explore_flags.defect_names, "Switch a named defect on for every run (repeatable)");
  explore->add_option("--junit", explore_flags.junit_path, "Also write a JUnit XML report (a testcase per crash point)");
  explore->add_option("--report-dir", explore_flags.report_directory,
                      "Write report.html, report.json, report.md and junit.xml (an entry per crash point) into DIR");
  explore->add_flag("--json", explore_flags.json,
                    "Print one JSON object: crash_points, crash_states, passed, refused, failed, failures");
  zerosim::add_device_flag(*explore, explore_flags.device);

  zerosim::ExecFlags exec_flags;
  CLI::App* exec = app.add_subcommand(
      "exec", "Your own training command under the power-loss harness: record it once, then resume it from every crash "
              "state of its file operations and compare with the uninterrupted run (zerosim exec -- COMMAND ...)");
  exec->add_option("--watch", exec_flags.options.watch,
                   "A directory the command checkpoints into (repeatable; reset to each crash state, restored at the end)");
  exec->add_option("--resume-command", exec_flags.options.resume_command,
                   "Shell command line of the resume (default: the command again)");
  exec->add_option("--crash-points", exec_flags.options.crash_points,
                   "Try this many crash points, a seeded sample (default 0: after every operation)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  exec->add_option("--states-per-point", exec_flags.options.states_per_point,
                   "Crash states per point: every combination of the pending operations' fates up to this bound, seeded beyond")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  exec->add_option("--seed", exec_flags.options.seed, "Seed of the sample and of the fates beyond the bound");
  exec->add_option("--timeout", exec_flags.options.timeout_seconds, "Seconds each run of the command may take")
      ->check(CLI::Range(1e-3, 1e7));
  exec->add_flag("--at-saves", exec_flags.options.at_saves,
                 "Also crash right where each save returned (before each state-log line with \"checkpoint\": true)");
  exec->add_option("--jobs", exec_flags.options.jobs,
                   "Crash states resumed side by side, each in a private mount namespace (default: the CPUs available; "
                   "1: one at a time, in place)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  exec->add_option("--work-dir", exec_flags.work_directory,
                   "The recording, the state logs, the outputs and the replay files (default zerosim-exec/)");
  exec->add_option("--junit", exec_flags.report.junit_path, "Also write a JUnit XML report (a testcase per crash state)");
  exec->add_option("--report-dir", exec_flags.report.report_directory,
                   "Write report.html, report.json, report.md and junit.xml into DIR");
  exec->add_flag("--json", exec_flags.report.json, "Print one JSON object");
  exec->add_option("command", exec_flags.options.command, "The training command and its arguments (after --)");
  std::string exec_replay_path;
  CLI::App* exec_replay = exec->add_subcommand("replay", "Run one crash state again, from a failure's replay file");
  exec_replay->add_option("file", exec_replay_path, "failure-P-S.json from the work directory")->required();

  refuse_empty_values(app, exec->get_option("command"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  if (exec_replay->parsed()) return zerosim::run_exec_replay_command(exec_replay_path);
  if (exec->parsed()) {
    exec_flags.jobs_given = exec->count("--jobs") > 0;
    return zerosim::run_exec_command(exec_flags);
  }
  if (train->parsed()) return zerosim::run_train_command(train_flags);
  if (check->parsed()) return zerosim::run_config_check_command(check_flags);
  if (bench_io->parsed()) return zerosim::run_bench_io_command(io_flags);
  if (explore->parsed()) return zerosim::run_explore_command(explore_flags);
  if (run->parsed()) return zerosim::run_scenarios_command(run_flags);
  if (suite->parsed()) {
    // The library that came with this binary, found from its own location (tools/install_paths.h).
    if (suite_directory_option->count() == 0) {
      zerosim::Result<std::string> shipped = zerosim::shipped_scenario_library(argv[0]);
      if (!shipped.ok()) {
        std::fprintf(stderr, "zerosim: suite: %s\n", shipped.status().message().c_str());
        return 2;
      }
      suite_flags.suite_directory = *shipped;
    }
    return zerosim::run_scenarios_command(suite_flags);
  }
  if (replay->parsed()) {
    replay_flags.scenario_paths = {replay_path};
    return zerosim::run_scenarios_command(replay_flags);
  }
  if (fuzz->parsed()) return zerosim::run_fuzz_command(fuzz_flags);
  if (import_ds->parsed()) return zerosim::run_import_command(import_options, import_output);
  if (gpt_check->parsed()) return zerosim::run_gpt_check_export_command(gpt_check_flags);
  if (deepspeed_model->parsed()) {
    for (const zerosim::DeepSpeedModelEntry& entry : zerosim::deepspeed_model_entries()) {
      std::string defect_names;
      for (zerosim::Defect defect : entry.defects) defect_names += (defect_names.empty() ? "" : ", ") + std::string(zerosim::defect_name(defect));
      std::printf("%s\n  when:    %s\n  effect:  %s\n  defects: %s\n  source:  DeepSpeed %s %s\n\n", entry.id.c_str(),
                  entry.condition.c_str(), entry.effect.c_str(), defect_names.c_str(), zerosim::kDeepSpeedModelCommit,
                  entry.source.c_str());
    }
    return 0;
  }
  if (defects->parsed()) {
    for (const zerosim::DefectInfo& info : zerosim::all_defects()) std::printf("%-30s %s\n", info.name, info.description);
    return 0;
  }
  if (std::optional<int> code = zerosim::run_checkpoint_command(checkpoint_commands)) return *code;
  if (devices->parsed()) {
    zerosim::Result<zerosim::CudaProbe> probe = zerosim::probe_cuda();
    if (!probe.ok()) {
      std::fprintf(stderr, "zerosim: %s\n", probe.status().to_string().c_str());
      return 3;
    }
    if (!probe->compiled_with_cuda) {
      std::printf("CUDA backend: not compiled in (nvcc was not found at configure time); CPU ranks only\n");
      return 0;
    }
    std::printf("CUDA backend: compiled in, runtime %d, %d GPU(s)%s%s\n", probe->runtime_version, probe->device_count,
                probe->device_count > 0 ? ", GPU 0: " : "", probe->first_device_name.c_str());
    return 0;
  }
  return 2;
}
