#include "tools/gpt_check_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/checkpoint/commit.h"
#include "core/checkpoint/safetensors.h"
#include "core/env/env.h"
#include "core/env/rng.h"
#include "core/model/gpt.h"

namespace zerosim {
namespace {

Status write_tensors(Disk& disk, const std::string& path, const std::vector<ParameterInfo>& infos,
                     const std::vector<std::vector<float>>& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensor> entries;
  for (size_t p = 0; p < infos.size(); ++p) {
    entries.push_back({infos[p].name, DType::kFp32, infos[p].shape, std::as_bytes(std::span<const float>(tensors[p]))});
  }
  return write_safetensors(disk, path, entries, metadata, /*sync=*/true);
}

Status export_gpt_check(const GptCheckFlags& flags) {
  ZEROSIM_ASSIGN_OR_RETURN(GptSpec spec, parse_gpt_spec(flags.model));
  if (flags.sequences < 1 || flags.length < 1 || flags.length > spec.block) {
    return invalid_argument("--sequences " + std::to_string(flags.sequences) + " and --length " + std::to_string(flags.length) +
                            ": both positive, the length at most the block " + std::to_string(spec.block));
  }
  std::error_code error;
  if (std::filesystem::exists(flags.directory, error) && !std::filesystem::is_empty(flags.directory, error)) {
    return Status(StatusCode::kAlreadyExists, flags.directory + " exists and is not empty; give a new directory");
  }
  RealEnv real_env;
  Disk& disk = *real_env.env().disk;
  ZEROSIM_RETURN_IF_ERROR(disk.create_directories(flags.directory));
  const std::vector<ParameterInfo> infos = gpt_parameters(spec);
  const std::vector<std::vector<float>> parameters = gpt_initial_parameters(spec, flags.seed);
  std::vector<std::vector<float>> gradients;
  for (const ParameterInfo& info : infos) gradients.emplace_back(static_cast<size_t>(info.element_count), 0.0f);
  const std::vector<int32_t> tokens = gpt_check_tokens(spec, flags.seed, flags.sequences, flags.length);
  const float scale = 1.0f / static_cast<float>(flags.sequences * flags.length);  // the mean loss's gradient
  ZEROSIM_ASSIGN_OR_RETURN(const float loss, gpt_forward_backward<float>(spec, parameters, tokens, flags.sequences,
                                                                          flags.length, scale, gradients));
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"zerosim_model", gpt_spec_to_string(spec)}};
  ZEROSIM_RETURN_IF_ERROR(write_tensors(disk, flags.directory + "/model.safetensors", infos, parameters, metadata));
  ZEROSIM_RETURN_IF_ERROR(write_tensors(disk, flags.directory + "/gradients.safetensors", infos, gradients, metadata));
  const nlohmann::json batch = {{"model", gpt_spec_to_string(spec)},
                                {"layers", spec.layers}, {"embd", spec.embd}, {"heads", spec.heads},
                                {"vocab", spec.vocab}, {"block", spec.block},
                                {"sequences", flags.sequences}, {"length", flags.length}, {"tokens", tokens},
                                {"loss", loss}, {"seed", flags.seed}};
  const std::string text = batch.dump(2) + "\n";
  ZEROSIM_RETURN_IF_ERROR(write_file_atomically(disk, flags.directory, "batch.json",
                                                std::as_bytes(std::span<const char>(text.data(), text.size()))));
  std::printf("wrote %s: %zu parameters, %lld sequences of %lld tokens, loss %.9g\n", flags.directory.c_str(),
              infos.size(), static_cast<long long>(flags.sequences), static_cast<long long>(flags.length),
              static_cast<double>(loss));
  return Status();
}

}  // namespace

int run_gpt_check_export_command(const GptCheckFlags& flags) {
  const Status exported = export_gpt_check(flags);
  if (!exported.ok()) {
    std::fprintf(stderr, "zerosim: gpt-check-export: %s\n", exported.to_string().c_str());
    return exported.code() == StatusCode::kInvalidArgument || exported.code() == StatusCode::kAlreadyExists ? 2 : 3;
  }
  return 0;
}

void add_gpt_check_command(CLI::App& app, GptCheckCommand& command) {
  GptCheckFlags& gpt_check_flags = command.flags;
  CLI::App* gpt_check = app.add_subcommand(
      "gpt-check-export", "Write the transformer's weights, a batch and zerosim's gradients, for python/check_gpt_in_torch.py");
  command.command = gpt_check;
  gpt_check->add_option("directory", gpt_check_flags.directory, "A new or empty directory")->required();
  gpt_check->add_option("--model", gpt_check_flags.model, "gpt:layers=L,embd=E,heads=H,vocab=V,block=B");
  gpt_check->add_option("--seed", gpt_check_flags.seed, "Seed of the weights and the batch");
  gpt_check->add_option("--sequences", gpt_check_flags.sequences, "Sequences in the batch")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  gpt_check->add_option("--length", gpt_check_flags.length, "Tokens predicted per sequence (at most block)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
}

std::optional<int> run_gpt_check_command(const GptCheckCommand& command) {
  if (command.command->parsed()) return run_gpt_check_export_command(command.flags);
  return std::nullopt;
}

}  // namespace zerosim
