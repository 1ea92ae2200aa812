// What a training run is given: the resolved config, the model, its data, the world size and the
// oracles' switches (TrainingOptions), the derived settings every rank computes the same way from
// them, and the options of a checkpoint save and load (DeepSpeed's save_checkpoint and
// load_checkpoint arguments, with what each promises).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"
#include "core/config/ds_config.h"
#include "core/data/dataset.h"
#include "core/engine/compute_backend.h"
#include "core/env/async_io.h"
#include "core/model/model_spec.h"
#include "core/optim/adamw.h"

namespace zerosim {

struct TrainingOptions {
  ResolvedConfig config;
  ModelSpec model;
  // The MLP: feature_count and class_count match the model's ends. The transformer:
  // feature_count is the sequence length (at most block) and class_count the vocabulary.
  DatasetSpec data;
  uint64_t seed = 1234;
  // Parameters frozen by name (requires_grad=False): no gradient, no optimizer state, never
  // updated (weight decay included), as DeepSpeed's ZeRO-3 leaves them out of every optimizer
  // partition. Each name must be one of the model's, at most once, and one parameter at least
  // must stay trainable.
  std::vector<std::string> frozen_parameters;
  int world_size = 1;
  // Force one SIMD path for the optimizer (tests); empty = the widest available.
  std::optional<SimdPath> simd_path;
  // Where each rank's forward, backward and AdamW run (compute_backend.h); default the CPU.
  ComputeDevice compute;
  // On the CPU, how many threads each rank's compute may use (the rank's own thread among them):
  // at least 1. Each thread computes outputs of its own (rows of a product, a range of AdamW's
  // elements, a transformer head's attention, rows of the loss) and shared sums fold in a fixed
  // order, so every bit is the same for any count; only the time changes.
  int threads_per_rank = 1;
  // Host memory the W ranks together may use; 0 = no limit. The command line sets it from the
  // machine's physical memory so that an impossible model, batch or world size is refused up
  // front with the estimate, instead of being killed by the OOM killer mid-run.
  uint64_t memory_limit_bytes = 0;
  // Names this run's swap directory under nvme_path (<nvme_path>/zerosim/<run id>/).
  std::string run_id = "run";
  // For oracles: fingerprint the whole state after every step (TrainingRun::step_digests).
  // Each rank sums position-keyed hashes of the elements it owns (layout-independent, so runs
  // at different world sizes compare), with no collective per step: one gather at the end.
  bool digest_every_step = false;
  // For a divergence diagnosis: rank 0 keeps the full state at this global step (after the
  // step, or right after the load when the run starts there) in TrainingRun::captured. Costs
  // the whole model's tensors in memory once; -1 = none.
  int64_t capture_state_at_step = -1;
  // A load reads each buffered shard with several threads at once, both batches in flight,
  // instead of as one sequential stream (CheckpointIoOptions::sequential_reads): the earlier
  // policy, kept to compare the two (checkpoint_bench --parallel-reads).
  bool parallel_checkpoint_reads = false;
};

// The data a run of `model` trains on: the MLP's synthetic samples (features and classes its
// ends), or the transformer's synthetic token windows (the block's length, its vocabulary).
// A token file is set by the caller (DatasetSpec::token_file, with its window count).
DatasetSpec dataset_for_model(const ModelSpec& model, int64_t sample_count, uint64_t seed);

// An upper estimate of one rank's host memory for these options: its flat partitions, the
// activations of one micro-batch, one gathered layer and the gradient exchange buffers.
uint64_t estimate_rank_memory_bytes(const TrainingOptions& options);

// The optimizer's knobs from the config, with the learning rate of this step (cast to float
// once, here, as DeepSpeed hands it to its kernel).
AdamHyperparameters adam_hyperparameters_from(const ResolvedConfig& config, double learning_rate);
// The top-level "aio" block, as the swap engines and a "fast" checkpoint writer take it.
AsyncIoOptions async_io_options_from(const AioConfig& aio);
// How the run's shards are written and read (checkpoint.writer and aio; checkpoint_io.h).
// Buffered reads are one sequential stream a shard; where they are not (a load with
// TrainingOptions::parallel_checkpoint_reads), their I/O threads follow the rank's CPUs
// (Env::cpus_per_rank): one CPU stays with the rank, which copies and hashes every byte, and
// the I/O threads take the rest, 1 to 4 of them; 4 when the CPUs are not known (0).
CheckpointIoOptions checkpoint_io_options_from(const ResolvedConfig& config, int cpus_per_rank);
// What a load of this run reads its shards with: the above, one stream a shard unless
// TrainingOptions::parallel_checkpoint_reads (a bench's probe reads as the load does through it).
CheckpointIoOptions checkpoint_read_options_from(const TrainingOptions& options, int cpus_per_rank);

// The model's parameters with TrainingOptions::frozen_parameters applied (requires_grad), or
// kInvalidArgument naming a frozen name the model lacks, a name given twice, or a freeze that
// leaves nothing to train.
Result<std::vector<ParameterInfo>> training_parameters(const TrainingOptions& options);

// Checks that the pieces fit: world size, batch arithmetic, model against data, optimizer
// hyperparameters and every learning rate of the schedule.
Status validate_training_options(const TrainingOptions& options);

// DeepSpeed's load_checkpoint options (engine.py load_checkpoint), with what each promises,
// which is what zerosim does on every offload path (DeepSpeed's NVMe path ignores them, and at
// stage 3 its load_module_only loads no trainable weight: docs/checkpoints.md, "Load options").
struct CheckpointLoadOptions {
  // false: the parameters from the checkpoint (its 16-bit values; the fp32 master rebuilt from
  // them) and a fresh optimizer: zero moments, Adam's step count 0, a fresh loss scaler, and
  // the optimizer's learning rate as a fresh engine sets it (the scheduler's lr at its start),
  // used by the first update after the load; counters and scheduler are restored.
  bool optimizer_states = true;
  // false: the scheduler starts fresh (its configured start); the first update after the load
  // still uses the checkpoint's lr (restored with the optimizer), the schedule restarts with
  // the scheduler's first step after it.
  bool lr_scheduler_states = true;
  // true: only the parameters (as optimizer_states=false), and everything else fresh: optimizer,
  // loss scaler, scheduler, counters (global step 0) and data position 0.
  bool module_only = false;
  // Not DeepSpeed's: a committed checkpoint that fails validation is passed over (with a
  // warning naming it) instead of refused (resolve_checkpoint_tag's policy).
  bool fallback_on_invalid = false;
  bool fresh_optimizer() const { return module_only || !optimizer_states; }
  bool restores_scheduler() const { return !module_only && lr_scheduler_states; }
  // Whether the load leaves a state other than the checkpoint's (any of DeepSpeed's options).
  bool changes_state() const { return module_only || !optimizer_states || !lr_scheduler_states; }
  // "load_optimizer_states=false, ..." for messages; empty for the defaults.
  std::string describe() const;
  bool operator==(const CheckpointLoadOptions&) const = default;
};

// DeepSpeed's save_checkpoint options that change what a checkpoint holds.
struct CheckpointSaveOptions {
  // The values of frozen parameters are left out (DeepSpeed's exclude_frozen_parameters): a load
  // takes them from the model it builds, as DeepSpeed's load_module_strict=False does. They are
  // listed in the manifest ("excluded"), so a load knows what it does not find.
  bool exclude_frozen_parameters = false;
};

}  // namespace zerosim
