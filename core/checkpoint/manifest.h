// The checkpoint format: <checkpoint dir>/<tag>/manifest.json beside one safetensors shard per
// rank, and <checkpoint dir>/latest naming the newest committed tag (commit.h).
//
// A shard holds, for every parameter fragment that its rank owns, four 1-D tensors named
// "<parameter>/<state>": param (the model dtype), master, exp_avg and exp_avg_sq (fp32). A
// fragment is the flat, row-major element range [global_offset, global_offset + count) of the
// parameter (ZeRO-3 partitioning, padding not stored); the shard's __metadata__ maps every
// tensor name to a JSON text {"parameter", "state", "global_offset", "global_shape"}, so any
// world size can reassemble the full tensors. A rank that owns no element of a parameter (W
// larger than the parameter) has no tensor for it.
//
// The manifest holds everything else that influences a future step (docs/design.md, "What a
// checkpoint holds") and the byte size and XXH3-128 checksum of every shard. A tag is
// complete when its manifest parses, passes validation and every shard it lists exists with
// its size; the checksums are checked when the shards are read. The manifest is written last,
// so a tag without one is a save that never committed.
//
// The manifest seals itself: "manifest_xxh3_128" is the XXH3-128 of the rest of the document
// (compact JSON, keys sorted), so that damage at rest that leaves valid JSON (a flipped digit
// of the loss scale, of a shard's checksum) is refused as damage, naming the manifest, instead
// of being loaded as state. A manifest without the key (written before it existed) is read
// as before.
//
// Validation trusts nothing in the file: the format name and version, every count, every
// path (a plain file name inside the tag directory: no '/', no "..", nothing absolute) and the
// layout's consistency are checked, and every error names the file and the key.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/ds_config.h"
#include "core/data/dataset.h"
#include "core/env/disk.h"
#include "core/env/rng.h"
#include "core/model/mlp.h"
#include "core/optim/loss_scaler.h"
#include "core/tensor/dtype.h"

namespace zerosim {

inline constexpr const char* kCheckpointFormatName = "zerosim-checkpoint";
// The newest format this build reads and writes. Version 2 adds frozen parameters (the
// per-parameter "requires_grad" and "excluded" keys, and shards without a frozen parameter's
// optimizer state); a checkpoint without one is written as version 1, byte for byte what it was
// before, so older builds keep reading it, and an older build refuses a version 2 checkpoint by
// its version instead of calling its missing tensors damage. Version 3 adds the transformer
// (model {"gpt": {...}}, data "token_file"); an MLP checkpoint stays version 1 or 2.
inline constexpr int64_t kCheckpointFormatVersion = 3;
inline constexpr int64_t kCheckpointFormatVersionWithoutFrozenParameters = 1;
inline constexpr int64_t kCheckpointFormatVersionWithFrozenParameters = 2;
inline constexpr int64_t kCheckpointFormatVersionWithTransformer = 3;
// The version a checkpoint of this model and these parameters is written as.
int64_t checkpoint_format_version_for(const ModelSpec& model, const std::vector<ParameterInfo>& parameters);
inline constexpr const char* kManifestFileName = "manifest.json";
// Deeper JSON is refused before parsing: the parser and the copies after it recurse.
inline constexpr int kMaxManifestJsonDepth = 64;

// The four per-parameter states a shard holds, in shard order.
enum class CheckpointState { kParam, kMaster, kExpAvg, kExpAvgSq };
inline constexpr CheckpointState kCheckpointStates[] = {CheckpointState::kParam, CheckpointState::kMaster,
                                                        CheckpointState::kExpAvg, CheckpointState::kExpAvgSq};
// The states a checkpoint holds for one parameter, in shard order: all four for a trainable
// parameter; the 16-bit value alone for a frozen one (requires_grad=False: it has no optimizer
// state, as DeepSpeed keeps frozen parameters in no optimizer partition); none for a frozen one
// that save_checkpoint(exclude_frozen_parameters=True) left out.
std::span<const CheckpointState> stored_checkpoint_states(bool requires_grad, bool excluded);
const char* checkpoint_state_name(CheckpointState state);  // "param", "master", "exp_avg", "exp_avg_sq"
// "<parameter>/<state>".
std::string checkpoint_tensor_name(const std::string& parameter, CheckpointState state);
// "rank-00002-of-00004.safetensors".
std::string shard_file_name(int rank, int world_size);

struct ShardRecord {
  int rank = 0;
  std::string file;  // a plain name inside the tag directory
  uint64_t size_bytes = 0;
  std::string xxh3_128;  // 32 hex digits over the whole file
};

struct CheckpointManifest {
  int64_t format_version = kCheckpointFormatVersion;
  std::string zerosim_version;
  std::string tag;
  nlohmann::json config;  // the resolved config of the run that saved
  std::string config_hash;  // XXH3-128 of config.dump()
  // What the loader compares against the resuming run (see check_resume_compatibility).
  ModelSpec model;
  DatasetSpec data;
  // The model's persistent buffers this checkpoint holds (model_buffers with persistent set):
  // every shard holds each whole, as "<name>/buffer" (fp32), after the parameters' states, so a
  // rank reads them from whichever shard it opens. Written as "buffers": [{"name", "shape"}]
  // only for a model with one (the transformer, format version 3).
  std::vector<BufferInfo> buffers;
  uint64_t seed = 0;  // the parameter initialisation seed
  Precision precision = Precision::kFp32;
  std::string optimizer_type;
  bool adam_w_mode = true;
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 0;
  // Layout of the run that saved.
  int world_size = 1;
  int64_t sub_group_size = 0;
  std::vector<ParameterInfo> parameters;  // requires_grad false: frozen
  // Frozen parameters whose values this checkpoint does not hold (exclude_frozen_parameters):
  // a load takes them from the model it builds. Written per parameter as "excluded": true.
  std::vector<std::string> excluded_parameters;
  bool excludes(const std::string& parameter) const;
  std::span<const CheckpointState> stored_states(size_t parameter) const {
    return stored_checkpoint_states(parameters[parameter].requires_grad, excludes(parameters[parameter].name));
  }
  // Counters, scheduler, loss scaler, RNG streams and data position.
  int64_t global_steps = 0;
  int64_t skipped_steps = 0;
  int64_t global_samples = 0;
  int64_t optimizer_steps = 0;
  int64_t steps_before_optimizer = 0;  // see TrainingCounters (written only when non-zero)
  int64_t scheduler_last_batch_iteration = -1;
  double scheduler_learning_rate = 0.0;
  LossScalerState loss_scaler;
  RngState shuffle_stream;
  int64_t data_position = 0;
  std::vector<ShardRecord> shards;  // one per rank, in rank order
};

nlohmann::json manifest_to_json(const CheckpointManifest& manifest);
inline constexpr const char* kManifestChecksumKey = "manifest_xxh3_128";
// Sets kManifestChecksumKey to the hash of the rest of `manifest` (replacing any old value).
void seal_manifest(nlohmann::json& manifest);
// kDataLoss naming `path` and the key when `manifest` has the key and it does not match.
Status check_manifest_seal(const nlohmann::json& manifest, const std::string& path);
// Parses and validates; `path` names the file in errors (kDataLoss for a malformed manifest,
// kUnimplemented for a format version this build does not read).
Result<CheckpointManifest> manifest_from_json(const nlohmann::json& document, const std::string& path);
Result<CheckpointManifest> read_manifest(Disk& disk, const std::string& tag_directory);

// A file name taken from a manifest: a plain name, no '/', not "." or "..", not absolute.
Status validate_manifest_file_name(const std::string& name, const std::string& manifest_path,
                                   const std::string& key);

// The fragment of a parameter of `element_count` elements that `rank` of `world_size` owns.
struct Fragment {
  int64_t global_offset = 0;
  int64_t count = 0;
};
Fragment owned_fragment(int64_t element_count, int rank, int world_size);

// XXH3-128 over bytes fed in order, as the manifest's shard checksums are computed.
class StreamingHash {
 public:
  StreamingHash();
  ~StreamingHash();
  StreamingHash(const StreamingHash&) = delete;
  StreamingHash& operator=(const StreamingHash&) = delete;
  void update(std::span<const std::byte> bytes);
  std::string hex() const;  // 32 hex digits

 private:
  void* state_;  // XXH3_state_t, kept out of the header
};

// Hashes a file as the manifest does (XXH3-128, 32 hex digits), reading it in chunks.
Result<std::string> file_checksum(Disk& disk, const std::string& path, uint64_t* size_bytes);

// The size a shard must have: kDataLoss naming the file, both sizes and "truncated" when short.
Status check_shard_size(const std::string& path, const ShardRecord& record, uint64_t size_bytes);

// Whether `<checkpoint_directory>/<tag>` is complete (see above); the reason when it is not.
Status check_tag_complete(Disk& disk, const std::string& checkpoint_directory, const std::string& tag);
// The same, returning the manifest of a complete tag.
Result<CheckpointManifest> read_complete_tag(Disk& disk, const std::string& checkpoint_directory,
                                             const std::string& tag);

// The complete tags of a checkpoint directory, oldest first (by global step, then name).
Result<std::vector<std::string>> list_complete_tags(Disk& disk, const std::string& checkpoint_directory);

// The tag to load for `requested` ("latest" or a tag name). An explicit tag must be complete.
// "latest" follows the pointer. The policy: fall back to an older tag only over what a crash
// leaves, a tag that was never committed (no manifest: the save never reached its commit; a
// missing or short shard) or a missing or torn `latest`; then the newest complete tag is taken
// and `warning` says which tag was passed over and why. A committed tag (its manifest exists:
// the manifest is written atomically, last) that fails validation (unreadable, its seal
// broken, a field out of its rules, the wrong tag) is no crash's product: it is
// kInvalidArgument naming the tag and the reason, wherever it is in the directory, unless
// `fallback_on_invalid`, and then the warning names it too. No complete tag at all is kNotFound.
// `manifest` (when set) receives the resolved tag's manifest, read once with its checks.
Result<std::string> resolve_checkpoint_tag(Disk& disk, const std::string& checkpoint_directory,
                                           const std::string& requested, std::string* warning,
                                           CheckpointManifest* manifest = nullptr, bool fallback_on_invalid = false);

// Whether a resolution failed on a committed checkpoint that fails validation (the policy above).
bool is_invalid_committed_checkpoint(const Status& status);

// Retention: keeps the newest `keep_last` complete tags (0 keeps all) and the one `latest`
// names, and removes the other complete tags. Incomplete tags are left alone (a save may be
// writing one).
Status apply_retention(Disk& disk, const std::string& checkpoint_directory, int64_t keep_last,
                       std::vector<std::string>* removed);

// What resuming `manifest` under another run's settings means. A change that breaks resume
// (model shape, parameter dtype, optimizer type, dataset) is a kInvalidArgument naming the key
// with the checkpoint's and the run's values. Other differences of the resolved config are
// notes: layout-only keys (offload, aio, sub_group_size, buckets, logging, checkpoint) are
// safe; keys that change the numerics of later steps (lr, betas, clipping, ...) are allowed,
// as DeepSpeed allows them, with a note that the continued run will differ.
struct ResumeCompatibility {
  std::vector<std::string> notes;
};
struct ResumeTarget {
  const ResolvedConfig* config = nullptr;
  const ModelSpec* model = nullptr;
  const DatasetSpec* data = nullptr;
  uint64_t seed = 0;
  // The run's parameters (requires_grad says which are frozen); null: the model's, none frozen.
  // A parameter frozen in the checkpoint has no optimizer state there: it cannot become
  // trainable under a load that keeps the optimizer's state.
  const std::vector<ParameterInfo>* parameters = nullptr;
  // A load that keeps none of the optimizer's state (a fresh optimizer) may change its type,
  // and one that restarts the data position at 0 (module only) may change the dataset: notes.
  bool loads_optimizer_state = true;
  bool loads_data_position = true;
};
Result<ResumeCompatibility> check_resume_compatibility(const CheckpointManifest& manifest,
                                                       const ResumeTarget& target, const std::string& manifest_path);

// A 128-bit hash as 32 hex digits, high half first: how every digest and checksum is written.
std::string format_hash_128(uint64_t high64, uint64_t low64);
// XXH3-128 of a string as 32 hex digits.
std::string xxh3_128_hex(std::string_view text);

}  // namespace zerosim
