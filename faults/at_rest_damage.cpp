#include "faults/at_rest_damage.h"

#include <algorithm>
#include <memory>

#include "core/checkpoint/commit.h"
#include "core/checkpoint/manifest.h"

namespace zerosim {

const char* at_rest_damage_kind_name(AtRestDamage::Kind kind) {
  switch (kind) {
    case AtRestDamage::Kind::kFlipBit: return "flip_bit";
    case AtRestDamage::Kind::kTruncate: return "truncate";
    case AtRestDamage::Kind::kRemove: return "remove";
    case AtRestDamage::Kind::kStaleCopy: return "stale_copy";
    case AtRestDamage::Kind::kOtherRank: return "other_rank";
  }
  return "unknown";
}

std::string AtRestDamage::describe() const {
  std::string text = std::string(at_rest_damage_kind_name(kind)) + " " + file;
  if (file == "shard") text += " of rank " + std::to_string(rank);
  if (file != "latest") text += " of the " + tag + " tag";
  if (kind == Kind::kFlipBit) text += " (bit " + std::to_string(bit) + ")";
  if (kind == Kind::kTruncate) text += " (to " + std::to_string(keep_bytes) + " bytes)";
  if (kind == Kind::kOtherRank) text += " (from rank " + std::to_string(from_rank) + ")";
  return text;
}

Status apply_operator_action(OperatorAction action, const std::vector<std::string>& swap_directories,
                             const std::string& checkpoint_directory, Disk& disk) {
  if (action == OperatorAction::kDeleteSwapDirectory) {
    for (const std::string& directory : swap_directories) ZEROSIM_RETURN_IF_ERROR(disk.remove_tree(directory));
    return Status();
  }
  // A tag directory with a shard and no manifest, and `latest` pointing at it.
  const std::string tag = "global_step999999";
  ZEROSIM_RETURN_IF_ERROR(disk.create_directories(checkpoint_directory + "/" + tag));
  const std::string junk = "partial";
  ZEROSIM_RETURN_IF_ERROR(write_whole_file(disk, checkpoint_directory + "/" + tag + "/" + shard_file_name(0, 1),
                                           std::as_bytes(std::span<const char>(junk.data(), junk.size())), true));
  return publish_latest_tag(disk, checkpoint_directory, tag);
}

Result<AppliedDamage> apply_damage(const AtRestDamage& damage, int world_size, const std::string& checkpoint_directory,
                                   Disk& disk) {
  AppliedDamage applied;
  applied.describe = damage.describe();
  // The newest tag: the one a restart would load (what `latest` names when it is complete).
  std::string newest;
  if (Result<std::string> resolved = resolve_checkpoint_tag(disk, checkpoint_directory, "latest", nullptr); resolved.ok()) {
    newest = resolved.value();
  }
  std::string tag = newest;
  if (damage.tag == "previous" && !newest.empty()) {
    ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> complete, list_complete_tags(disk, checkpoint_directory));
    const auto at = std::find(complete.begin(), complete.end(), newest);
    tag = at == complete.begin() || at == complete.end() ? std::string() : *(at - 1);
  }
  if (damage.file != "latest" && tag.empty()) {
    applied.describe += ": not done, no such tag on the disk";
    return applied;
  }
  auto file_of = [&](const std::string& of_tag, int rank) {
    if (damage.file == "latest") return checkpoint_directory + "/latest";
    if (damage.file == "manifest") return checkpoint_directory + "/" + of_tag + "/" + kManifestFileName;
    return checkpoint_directory + "/" + of_tag + "/" + shard_file_name(rank, world_size);
  };
  applied.path = file_of(tag, damage.rank);
  applied.tag = damage.file == "latest" ? std::string() : tag;
  ZEROSIM_ASSIGN_OR_RETURN(bool exists, disk.exists(applied.path));
  if (!exists) {
    applied.describe += ": not done, " + applied.path + " does not exist";
    return applied;
  }
  std::optional<std::vector<std::byte>> content;
  switch (damage.kind) {
    case AtRestDamage::Kind::kRemove:
      ZEROSIM_RETURN_IF_ERROR(disk.remove_file(applied.path));
      ZEROSIM_RETURN_IF_ERROR(disk.sync_directory(parent_directory(applied.path)));
      break;
    case AtRestDamage::Kind::kFlipBit:
    case AtRestDamage::Kind::kTruncate: {
      ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, read_whole_file(disk, applied.path));
      if (bytes.empty()) {
        applied.describe += ": not done, " + applied.path + " is empty";
        return applied;
      }
      if (damage.kind == AtRestDamage::Kind::kFlipBit) {
        const uint64_t bit = damage.bit % (bytes.size() * 8);
        bytes[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
      } else {
        bytes.resize(std::min<uint64_t>(damage.keep_bytes % bytes.size(), bytes.size() - 1));
      }
      content = std::move(bytes);
      break;
    }
    case AtRestDamage::Kind::kStaleCopy:
    case AtRestDamage::Kind::kOtherRank: {
      std::string source;
      if (damage.kind == AtRestDamage::Kind::kOtherRank) {
        source = file_of(tag, damage.from_rank);
      } else {
        ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> complete, list_complete_tags(disk, checkpoint_directory));
        const auto at = std::find(complete.begin(), complete.end(), tag);
        if (at == complete.begin() || at == complete.end()) {
          applied.describe += ": not done, no older tag to copy from";
          return applied;
        }
        source = file_of(*(at - 1), damage.rank);
      }
      ZEROSIM_ASSIGN_OR_RETURN(bool source_exists, disk.exists(source));
      if (!source_exists) {
        applied.describe += ": not done, " + source + " does not exist";
        return applied;
      }
      ZEROSIM_ASSIGN_OR_RETURN(content, read_whole_file(disk, source));
      ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::byte> original, read_whole_file(disk, applied.path));
      if (*content == original) {
        // (Skipped fp16 steps change nothing: two tags can hold the same bytes.)
        applied.describe += ": not done, " + source + " holds the same bytes";
        return applied;
      }
      break;
    }
  }
  if (content) {
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(applied.path, {OpenMode::kCreateTruncate}));
    if (!content->empty()) ZEROSIM_RETURN_IF_ERROR(file->write_all(0, *content));
    ZEROSIM_RETURN_IF_ERROR(file->sync());
    ZEROSIM_RETURN_IF_ERROR(file->close());
  }
  applied.applied = true;
  applied.describe += ": " + applied.path;
  return applied;
}

}  // namespace zerosim
