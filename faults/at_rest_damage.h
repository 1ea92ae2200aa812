// Damage to a checkpoint at rest and an operator's actions on the disk, between a crash and the
// restart: what the scenario runner (scenarios/scenario_runner.h) does to the durable disk after
// the power loss and before the restart, through the Disk seam, durably (the restart finds it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env/disk.h"
#include "core/status.h"

namespace zerosim {

enum class OperatorAction { kDeleteSwapDirectory, kPointLatestAtPartialTag };

// Damage to a checkpoint at rest, between the power loss and the restart: a flipped bit, a
// truncated or removed file, a stale copy of the same file from the previous tag, or another
// rank's shard under this rank's name. Its target: the shard of `rank`, the manifest, or the
// `latest` pointer, of the newest tag (the one the restart would load) or of the previous
// complete tag. The scenario runner's oracle then accepts a refusal whose message names the
// damaged file, or a resume from an undamaged tag that is bit-identical and, when it loses
// work, says so in a warning naming the damaged tag; never a resume from the damaged tag.
struct AtRestDamage {
  enum class Kind { kFlipBit, kTruncate, kRemove, kStaleCopy, kOtherRank };
  Kind kind = Kind::kFlipBit;
  std::string file = "shard";  // shard, manifest, latest
  std::string tag = "newest";  // newest, previous
  int rank = 0;                // file "shard": whose shard
  int from_rank = 0;           // kOtherRank: whose shard is copied over it
  uint64_t bit = 0;            // kFlipBit: which bit (modulo the file's size in bits)
  uint64_t keep_bytes = 0;     // kTruncate: the size left (modulo the file's size)
  std::string describe() const;
  bool operator==(const AtRestDamage&) const = default;
};
const char* at_rest_damage_kind_name(AtRestDamage::Kind kind);

// What apply_damage did: the damaged file and its tag ("" for `latest`), or why nothing was.
struct AppliedDamage {
  bool applied = false;
  std::string tag;
  std::string path;
  std::string describe;
};

// Damages the checkpoint in `checkpoint_directory` as `damage` says (its newest or previous
// complete tag, found as a restart would), durably. Nothing is done, and AppliedDamage says why,
// when the target does not exist or the copy would change nothing.
Result<AppliedDamage> apply_damage(const AtRestDamage& damage, int world_size, const std::string& checkpoint_directory,
                                   Disk& disk);

// An operator's action: the swap directories deleted, or `latest` pointed at a tag directory
// that holds a partial shard and no manifest.
Status apply_operator_action(OperatorAction action, const std::vector<std::string>& swap_directories,
                             const std::string& checkpoint_directory, Disk& disk);

}  // namespace zerosim
