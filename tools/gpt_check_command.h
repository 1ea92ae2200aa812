// `zerosim gpt-check-export DIR --model gpt:... [--seed S] [--sequences N] [--length T]`: writes
// what python/check_gpt_in_torch.py needs to hold zerosim's transformer to Hugging Face's
// GPT2LMHeadModel under PyTorch autograd: the initial weights under their Hugging Face names
// (model.safetensors, fp32), a deterministic batch of tokens (batch.json), and zerosim's loss and
// gradients of the mean loss (gradients.safetensors). DIR must be new or empty.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace zerosim {

struct GptCheckFlags {
  std::string directory;
  std::string model = "gpt:layers=2,embd=64,heads=4,vocab=97,block=32";
  uint64_t seed = 1234;
  int64_t sequences = 4;
  int64_t length = 31;
};

int run_gpt_check_export_command(const GptCheckFlags& flags);

// The `gpt-check-export` subcommand, as TrainCommands: it lives in main() from parse to run.
struct GptCheckCommand {
  GptCheckFlags flags;
  CLI::App* command = nullptr;
};
void add_gpt_check_command(CLI::App& app, GptCheckCommand& command);
std::optional<int> run_gpt_check_command(const GptCheckCommand& command);

}  // namespace zerosim
