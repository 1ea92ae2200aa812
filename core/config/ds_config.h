// The DeepSpeed JSON config as zerosim reads it.
//
// Promise: a config that DeepSpeed HEAD accepts is accepted here with the same meaning
// (tests/data/ds_configs/sources.md: real configs and DeepSpeed's verdict on each), and a config it
// rejects is rejected with an error that names the key's dotted path, what was expected,
// what was found, and, for an unknown key, the nearest valid name. "auto" values are
// filled from RunSettings the way the HF Trainer fills them, or refused with the key.
// Legacy keys are accepted with a warning. Nothing is silently dropped: keys that zerosim
// reads but does not act on yet are listed in ResolvedConfig::inactive_keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/tensor/dtype.h"  // Precision, OffloadDevice

namespace zerosim {

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
const char* scheduler_type_name(SchedulerType type);

enum class WarmupType { kLog, kLinear };

// How the gradient of one step is reduced (the "zerosim": {"numerics": ...} key).
//   kPortable:  every sample's gradient carries loss_scale / train_batch_size, and the ranks'
//               contributions are folded in fp32 in global micro-batch order (comm.h), so the
//               bits do not depend on W: a checkpoint resumes bit for bit at any world size.
//   kDeepSpeed: ZeRO-3's own sequence (stage3.py, coalesced_collectives.py): each rank's
//               micro-batch gradient of loss_scale * mean loss / G in the model dtype, divided
//               by W in the communication dtype, summed over ranks in that dtype (rank order),
//               accumulated over the G micro-steps in the model dtype; the norm per sub-group
//               in fp32. Overflows, skipped steps and the scale trajectory are DeepSpeed's for
//               this config and W; the bits depend on W, so only a same-W resume is bit-exact.
enum class NumericsMode { kPortable, kDeepSpeed };
const char* numerics_mode_name(NumericsMode mode);  // "portable", "deepspeed"

// Run settings outside the DeepSpeed JSON: what the HF Trainer's TrainingArguments
// provide, used to fill "auto". A field left unset (has_... false / negative) means the
// user did not give it: an "auto" that needs it is refused with the key's name.
struct RunSettings {
  int64_t world_size = 1;
  int64_t micro_batch_size = -1;             // per_device_train_batch_size
  int64_t gradient_accumulation_steps = -1;  // gradient_accumulation_steps
  double learning_rate = -1.0;
  double adam_beta1 = -1.0;
  double adam_beta2 = -1.0;
  double adam_epsilon = -1.0;
  double weight_decay = -1.0;
  double max_grad_norm = -1.0;
  int64_t warmup_steps = -1;
  int64_t total_steps = -1;  // scheduler.params.total_num_steps
  // The precision "auto" resolves to (the Trainer's --fp16/--bf16 flags); kFp32 means both off.
  Precision auto_precision = Precision::kFp32;
  int64_t hidden_size = -1;  // for reduce_bucket_size and friends when "auto"
  // Flags (as named in error messages, e.g. "--learning-rate") whose value above is the
  // command line's default rather than the user's. A defaulted value fills an "auto" that
  // nothing else determines, but it is never compared against a concrete config value, and
  // a defaulted gradient accumulation is derived from a concrete train_batch_size instead
  // (so that a fixed train_batch_size at another world size changes the accumulation, as
  // DeepSpeed does).
  std::vector<std::string> defaulted_flags;
  bool is_defaulted(const std::string& flag) const;
  // Values the caller derived rather than the user gave (a resume derives the accumulation
  // from the checkpoint's batch): flag -> how, for an error to say instead of naming a flag the
  // user never typed ("the checkpoint's train_batch_size 8 / (micro batch 2 x 2 ranks)").
  std::vector<std::pair<std::string, std::string>> derived_from;
  const std::string* derivation_of(const std::string& flag) const;
};

// zerosim's own defaults for the Trainer arguments that fill "auto" (the command line's and the
// scenarios'): lr 1e-2, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, clipping 1.0, 1000
// total steps. Batch sizes, warmup and hidden size are the caller's.
void set_default_hyperparameters(RunSettings& settings);

struct OptimizerConfig {
  std::string type = "AdamW";  // "Adam" or "AdamW" (case as DeepSpeed accepts it)
  bool adam_w_mode = true;     // decoupled weight decay; "Adam" means AdamW unless adam_w_mode=false
  bool bias_correction = true;
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  bool present = false;  // false when the config has no "optimizer" block
};

struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;  // defaults to the optimizer lr when absent
  int64_t warmup_num_steps = 1000;
  int64_t total_num_steps = 0;  // WarmupDecayLR / WarmupCosineLR
  WarmupType warmup_type = WarmupType::kLog;
  double warmup_min_ratio = 0.0;  // WarmupCosineLR
  double cos_min_ratio = 1e-4;    // WarmupCosineLR
  // log and cos from the C library, as Python's math module (so DeepSpeed) takes them: its lr
  // bit for bit on this machine, but the C library's results differ between glibc versions
  // and CPU variants. Off: zerosim's portable_log/portable_cos, the same bits everywhere and
  // the same fp32 lr as DeepSpeed's in every golden case. Set by the numerics mode.
  bool c_library_math = false;
  // DeepSpeed before 0.15.3 (its PR #6597) built its warm-up schedules without setting the lr:
  // the first optimizer step ran at the optimizer's configured lr, and the schedule's first
  // value came at step 2. Set by zerosim.deepspeed_release; off: the later releases, where
  // step 1 runs at the schedule's start (learning_rate_at(-1)).
  bool first_step_at_optimizer_lr = false;
};

// A DeepSpeed release, X.Y.Z: the behaviour zerosim models where releases differ.
struct DeepSpeedRelease {
  int64_t major = 0;
  int64_t minor = 0;
  int64_t patch = 0;
  auto operator<=>(const DeepSpeedRelease&) const = default;
};

// "0.14.5" -> {0, 14, 5}; kInvalidArgument naming the text for anything else.
Result<DeepSpeedRelease> parse_deepspeed_release(const std::string& text);
// {0, 14, 5} -> "0.14.5".
std::string deepspeed_release_text(const DeepSpeedRelease& release);

struct LossScalerConfig {
  bool dynamic = true;          // fp16.loss_scale == 0
  double static_loss_scale = 1.0;
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
};

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count = 4;  // 4 for the optimizer, 5 for params
  bool pin_memory = true;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;
  int64_t buffer_size = 100000000;  // offload_param only
  int64_t max_in_cpu = 1000000000;  // offload_param only
};

struct AioConfig {
  int64_t block_size = 1048576;
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};
// DeepSpeed's threshold for swapping an optimizer sub-group to NVMe (its min_aio_bytes, edaa722
// swap_tensor/utils.py:14, stage3.py:1214-1218): max(1 MiB, aio.block_size). A sub-group whose
// per-rank fp32 bytes fall below it stays in memory. zerosim swaps every sub-group; the rule is
// DeepSpeed's behaviour, for the defect and the model that reproduce it.
int64_t deepspeed_min_aio_bytes(const AioConfig& aio);

struct ZeroConfig {
  int64_t stage = 0;
  int64_t sub_group_size = 1000000000;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  int64_t prefetch_bucket_size = 50000000;
  int64_t param_persistence_threshold = 100000;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  bool overlap_comm = true;
  bool contiguous_gradients = true;
  bool gather_16bit_weights_on_model_save = false;
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param;
};

// The "checkpoint" block: DeepSpeed's keys (tag_validation, load_universal,
// use_node_local_storage, parallel_write) are read and listed as inactive; two keys are
// zerosim's own: async_save (snapshot at the step boundary, write in the background, as
// PyTorch DCP's async_save) and keep_last (retention: the newest N committed tags are kept;
// 0 keeps all, as DeepSpeed does).
// checkpoint.writer, DeepSpeed's (runtime/model_checkpointing/config.py): without it DeepSpeed
// saves with torch.save and zerosim through the page cache with parallel threads; "fast" is
// DeepSpeed's FastFileWriter, O_DIRECT through the aio handle (the `aio` block's settings) with
// an io_buffer_size staging buffer, halved for double buffering; "python" its plain buffered
// writer. zerosim loads with the same settings as it saves (DeepSpeed loads with torch.load).
enum class CheckpointWriterType { kNone, kPython, kFast };
const char* checkpoint_writer_type_name(CheckpointWriterType type);

struct CheckpointConfig {
  bool async_save = false;
  int64_t keep_last = 0;
  CheckpointWriterType writer = CheckpointWriterType::kNone;
  int64_t io_buffer_size = int64_t{64} << 20;  // bytes; DeepSpeed's default
  bool io_buffer_double = true;
};

struct ResolvedConfig {
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 0;  // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation_steps = 0;
  double gradient_clipping = 1.0;  // DeepSpeed HEAD default since #8068; 0 disables
  Precision precision = Precision::kFp32;
  Precision communication_dtype = Precision::kFp32;  // defaults to the model dtype
  int64_t steps_per_print = 10;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  LossScalerConfig loss_scaler;
  ZeroConfig zero;
  AioConfig aio;
  CheckpointConfig checkpoint;
  NumericsMode numerics = NumericsMode::kPortable;
  // zerosim.deepspeed_release, when given: the DeepSpeed release whose behaviour to follow where
  // releases differ (the scheduler's first step). Absent: the newest modelled.
  std::optional<DeepSpeedRelease> deepspeed_release;

  // The verbatim input after --set overrides, and the same with every "auto" filled and every
  // default made explicit: what `zerosim config check` prints and a checkpoint records.
  nlohmann::json input;
  nlohmann::json resolved;
  // Human-readable warnings (legacy keys, "auto" filled, ignored keys) in input order.
  std::vector<std::string> warnings;
  // Dotted paths of keys that were read and validated but do not change what zerosim does yet.
  std::vector<std::string> inactive_keys;
};

// Applies one `--set a.b.c=VALUE` override to a JSON document. VALUE is parsed as JSON when
// it parses (numbers, true/false, null, objects, quoted strings), else taken as a string.
// Intermediate objects are created. Error names the path when a non-object is in the way.
Status apply_override(nlohmann::json& document, const std::string& assignment);

// "did you mean X?" (or "the nearest valid name is X") for an unknown key: the hint every
// reader of zerosim's JSON files gives.
std::string unknown_key_hint(std::string_view key, const std::vector<std::string_view>& valid_names);

// Refuses JSON nested deeper than `max_depth` (kDataLoss naming `source_name`), scanning the
// text without parsing it: nlohmann's parser, copies and dumps recurse, so a hostile file of
// a few hundred kilobytes of brackets would otherwise overflow the stack.
Status check_json_nesting(std::string_view text, int max_depth, const std::string& source_name);

// Parses JSON text; a syntax error names the source and the line and column.
Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& source_name);

// Validates and resolves a DeepSpeed config document. Batch sizes follow DeepSpeed:
// train_batch_size = micro_batch * gradient_accumulation_steps * world_size, any two of the
// three determine the third, and an inconsistent triple is an error naming all three.
Result<ResolvedConfig> resolve_config(const nlohmann::json& document, const RunSettings& settings);

}  // namespace zerosim
