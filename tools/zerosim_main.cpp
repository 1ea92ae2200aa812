// zerosim: the command line. See docs/cli.md for the contract of each command.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>

#include "core/build_info.h"
#include "core/cuda/cuda_probe.h"
#include "tools/bench_io_command.h"
#include "tools/gpt_check_command.h"
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

// The listings that take no flags: `devices`, `deepspeed-model`, `defects`.
int print_devices() {
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

int print_deepspeed_model() {
  for (const zerosim::DeepSpeedModelEntry& entry : zerosim::deepspeed_model_entries()) {
    std::string defect_names;
    for (zerosim::Defect defect : entry.defects) defect_names += (defect_names.empty() ? "" : ", ") + std::string(zerosim::defect_name(defect));
    std::printf("%s\n  when:    %s\n  effect:  %s\n  defects: %s\n  source:  DeepSpeed %s %s\n  run:     %s\n\n",
                entry.id.c_str(), entry.condition.c_str(), entry.effect.c_str(), defect_names.c_str(),
                zerosim::kDeepSpeedModelCommit, entry.source.c_str(), entry.measured.c_str());
  }
  return 0;
}

int print_defects() {
  for (const zerosim::DefectInfo& info : zerosim::all_defects()) std::printf("%-30s %s\n", info.name, info.description);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zerosim: a ZeRO-3 training-state engine with NVMe offload, and its deterministic simulator"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("zerosim ") + zerosim::zerosim_build_version() + " (git commit " +
                                        zerosim::zerosim_git_commit() + ")");
  // Each group keeps the flags CLI11 parses into, from here to the run; registered in the order
  // `zerosim --help` lists them.
  zerosim::TrainCommands train;
  zerosim::add_train_commands(app, train);
  CLI::App* devices = app.add_subcommand("devices", "Report the CUDA backend: compiled in or not, runtime, GPUs");
  zerosim::BenchCommands bench;
  zerosim::add_bench_commands(app, bench);
  zerosim::CheckpointCommands checkpoint;
  zerosim::add_checkpoint_commands(app, checkpoint);
  zerosim::ScenarioCommands scenarios;
  zerosim::add_scenario_commands(app, scenarios);
  zerosim::GptCheckCommand gpt_check;
  zerosim::add_gpt_check_command(app, gpt_check);
  CLI::App* deepspeed_model = app.add_subcommand(
      "deepspeed-model", "List zerosim's model of what DeepSpeed edaa722 loses on resume, with its source lines");
  CLI::App* defects = app.add_subcommand("defects", "List the named defects the simulator can switch on in the core");
  zerosim::ExploreCommand explore;
  zerosim::add_explore_command(app, explore);
  zerosim::ExecCommands exec;
  zerosim::add_exec_commands(app, exec);

  refuse_empty_values(app, exec.command_argument);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  if (std::optional<int> code = zerosim::run_exec_commands(exec, argv[0])) return *code;
  if (std::optional<int> code = zerosim::run_train_commands(train)) return *code;
  if (std::optional<int> code = zerosim::run_bench_commands(bench)) return *code;
  if (std::optional<int> code = zerosim::run_explore_commands(explore)) return *code;
  if (std::optional<int> code = zerosim::run_scenario_commands(scenarios, argv[0])) return *code;
  if (std::optional<int> code = zerosim::run_gpt_check_command(gpt_check)) return *code;
  if (std::optional<int> code = zerosim::run_checkpoint_command(checkpoint)) return *code;
  if (deepspeed_model->parsed()) return print_deepspeed_model();
  if (defects->parsed()) return print_defects();
  if (devices->parsed()) return print_devices();
  return 2;
}
