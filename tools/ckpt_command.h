// The `zerosim ckpt` commands: verify, inspect and diff the checkpoints that the engine saves
// (core/checkpoint/manifest.h). The CLI contract is in README.md.
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
//   2  bad input: flags, a directory or tag that does not exist, models of different shapes;
//   3  environment error: a system call failed (permissions, EIO).
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

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

// The exit code (see above) for a failed Status of these commands. Unlike exit_code_for of
// `zerosim train`, kUnimplemented (a newer format version) is damage-like (1), not bad input:
// the checkpoint exists but this build cannot vouch for it. kNotFound stays bad input (2); the
// commands turn a kNotFound that means an incomplete checkpoint into kDataLoss themselves.
int checkpoint_exit_code_for(const Status& status);

// Distance in units in the last place between two IEEE-754 values of `width_bits` (16 for fp16
// and bf16, 32, 64), given as bit patterns: the number of representable values one has to
// step through to go from one to the other. The sign-magnitude patterns are mapped onto one
// monotonic unsigned order (negative values below the bias, positive above it, both zeros on
// it), so the distance across zero is the sum of both sides' distances to zero and +0/-0 are
// 0 apart. NaN patterns order beyond the infinities: their distance is defined, not meaningful.
constexpr uint64_t ordered_float_key(uint64_t bits, int width_bits) {
  const uint64_t sign = uint64_t{1} << (width_bits - 1);
  const uint64_t magnitude = bits & (sign - 1);
  return (bits & sign) != 0 ? sign - magnitude : sign + magnitude;
}
constexpr uint64_t ulp_distance_bits(uint64_t bits_a, uint64_t bits_b, int width_bits) {
  const uint64_t key_a = ordered_float_key(bits_a, width_bits);
  const uint64_t key_b = ordered_float_key(bits_b, width_bits);
  return key_a > key_b ? key_a - key_b : key_b - key_a;
}
constexpr uint64_t ulp_distance(float a, float b) {
  return ulp_distance_bits(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b), 32);
}
constexpr uint64_t ulp_distance(double a, double b) {
  return ulp_distance_bits(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b), 64);
}

}  // namespace zerosim
