// The `zerosim ckpt` commands: verify, inspect and diff the checkpoints that the engine saves
// (core/checkpoint/manifest.h). The CLI contract is in docs/cli.md.
//
// Every command takes a checkpoint directory (the one holding the tags and `latest`) and a tag,
// "latest" by default, resolved as a resume resolves it (resolve_checkpoint_tag): a `latest`
// that is missing, torn or names an incomplete tag falls back to the newest complete tag, with
// a warning on stderr.
//
// Exit codes, as `zerosim train` has them, with 1 meaning "damaged" or "different":
//   0  verified / inspected / identical;
//   1  the checkpoint is damaged (checksum, size, header, tensor set, an uncommitted or torn
//      tag, a format version this build does not read), or the two checkpoints differ;
//   2  bad input: flags, a directory or tag that does not exist, models of different shapes, an
//      export's output file that exists already;
//   3  environment error: a system call failed (permissions, EIO).
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/tensor/dtype.h"  // ulp_distance, used with the diff

namespace CLI {
class App;
}  // namespace CLI

namespace zerosim {

// Where a checkpoint is: its directory and the tag in it.
struct CheckpointLocationFlags {
  std::string directory;
  std::string tag = "latest";
};

struct CheckpointVerifyFlags {
  CheckpointLocationFlags location;
};

struct CheckpointInspectFlags {
  CheckpointLocationFlags location;
  bool json = false;
};

struct CheckpointExportFlags {
  CheckpointLocationFlags location;
  std::string dtype;  // fp32, fp16 or bf16
  std::string output_path;
};

struct CheckpointDiffFlags {
  CheckpointLocationFlags a;
  CheckpointLocationFlags b;
  bool json = false;
};

// The `ckpt` group: the flags CLI11 parses into and the subcommands, to tell which one ran.
// CLI11 keeps references to the flags, so this lives in main() from parse to run.
struct CheckpointCommands {
  CheckpointVerifyFlags verify_flags;
  CheckpointInspectFlags inspect_flags;
  CheckpointDiffFlags diff_flags;
  CheckpointExportFlags export_flags;
  CLI::App* export_command = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* inspect = nullptr;
  CLI::App* diff = nullptr;
};

// Adds `ckpt verify|inspect|diff` to the application.
void add_checkpoint_commands(CLI::App& app, CheckpointCommands& commands);
// Runs the `ckpt` subcommand that was parsed and returns its exit code; nullopt when the
// command line named no `ckpt` subcommand.
std::optional<int> run_checkpoint_command(const CheckpointCommands& commands);

int run_checkpoint_verify_command(const CheckpointVerifyFlags& flags);
int run_checkpoint_inspect_command(const CheckpointInspectFlags& flags);
int run_checkpoint_diff_command(const CheckpointDiffFlags& flags);
int run_checkpoint_export_command(const CheckpointExportFlags& flags);

// The exit code (see above) for a failed Status of these commands. Unlike exit_code_for of
// `zerosim train`, kUnimplemented (a newer format version) is damage-like (1), not bad input:
// the checkpoint exists but this build cannot vouch for it. kNotFound stays bad input (2); the
// commands turn a kNotFound that means an incomplete checkpoint into kDataLoss themselves.
int checkpoint_exit_code_for(const Status& status);

}  // namespace zerosim
