// The ZeRO-3 training engine of one rank, and a driver that runs W ranks on threads.
//
// Crash points (Env::crash_points), hit on every rank: "engine.step_begin",
// "swap.sub_group_swapped_in" (a sub-group's optimizer state read from NVMe),
// "optimizer.sub_group_stepped" (after each sub-group's update),
// "swap.sub_group_swap_out_submitted" (its write to NVMe queued), "engine.step_end"; and the
// save and load sites listed at save_checkpoint.
//
// One optimizer step (DeepSpeed's order, deepspeed-semantics.md §1.5-1.7, §3):
//   for each of the gradient_accumulation_steps micro-steps k, rank r takes global
//   micro-batch m = k*W + r: per layer, all-gather the 16-bit partitions, forward, release;
//   loss; per layer backwards, all-gather again, backward, release, and reduce-scatter the
//   layer's gradient (cast to the communication dtype) into the fp32 gradient partition;
//   then: fp16 overflow check (skip the update and the scheduler, count skipped_steps),
//   global grad norm, clip factor, AdamW per sub-group on the fp32 master partitions,
//   master -> 16-bit partition (round to nearest even), scheduler and loss-scaler update.
//
// Determinism (why runs at W = 1, 2, 3, 4, 8 give the same bits for the same global batch):
//   * the samples of micro-batch m are fixed by global positions, whatever the rank;
//   * a micro-batch's gradient is computed by the same code on full gathered tensors;
//   * gradients are folded in global micro-batch order by reduce_scatter_accumulate (comm.h);
//   * the grad norm is an exact integer sum of squares (exact_square_sum.h);
//   * the loss is all-gathered and folded in micro-batch order;
//   * AdamW is elementwise, so the sub-group and partition split cannot change its bits.
// The cost: an all-to-all instead of a ring for the gradient exchange, W receive chunks held
// at once, and one 4 KiB all-gather per step for the norm.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"
#include "core/config/ds_config.h"
#include "core/data/dataset.h"
#include "core/data/token_dataset.h"
#include "core/engine/compute_backend.h"
#include "core/env/comm.h"
#include "core/env/env.h"
#include "core/model/model_spec.h"
#include "core/optim/adamw.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/lr_scheduler.h"
#include "core/tensor/huge_page_allocator.h"
#include "core/swap/optimizer_swapper.h"
#include "core/swap/partition_swapper.h"
#include "core/zero/exact_square_sum.h"
#include "core/zero/partition.h"

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

struct StepRecord {
  int64_t step = 0;         // 1-based global step
  float loss = 0.0f;        // mean over the global batch's micro-batches
  double learning_rate = 0.0;
  double loss_scale = 1.0;  // the scale this step's backward used
  double grad_norm = 0.0;   // unscaled global L2 norm; -1 when it was not finite (DeepSpeed's sentinel)
  bool skipped = false;     // fp16 overflow: no update
  // Wall time of the optimizer phase (overflow check, norm, sub-group updates and swaps), from
  // the Clock seam: for benchmarks only, never part of a digest or of the --json contract.
  uint64_t optimizer_ns = 0;
  // Wall time of the whole step (micro-steps, exchange and optimizer), from the Clock seam:
  // for benchmarks only, like optimizer_ns.
  uint64_t step_ns = 0;
  // The micro-steps' share of step_ns, for benchmarks only like the two above: the micro-
  // batches' data (generated and handed to the backend), the forward stages with their gathers
  // and the loss, the backward stages with their gathers and each layer's gradient exchange.
  // A device backend waits for its work at the loss and at each exchange, so these are device
  // time too; what step_ns has beyond them and optimizer_ns is the host's own work.
  uint64_t data_ns = 0;
  uint64_t forward_ns = 0;
  uint64_t backward_ns = 0;
};

struct TrainingCounters {
  int64_t global_steps = 0;
  int64_t skipped_steps = 0;
  int64_t global_samples = 0;
  int64_t optimizer_steps = 0;  // Adam's step count t (every sub-group steps together)
  // Steps taken (not skipped) before this optimizer state began: a load with
  // load_optimizer_states=false keeps the run's counters and starts Adam afresh, so that
  // optimizer_steps == global_steps - skipped_steps - steps_before_optimizer always holds.
  int64_t steps_before_optimizer = 0;
};

struct ComponentDigests {
  std::string params, master, exp_avg, exp_avg_sq, counters, scheduler, loss_scaler, rng, data;
  // Every model buffer, derived and persistent (model_buffers); empty for a model without one.
  std::string buffers;
  std::string state;  // over all of the above, in that order (buffers only when the model has some)
};

// The training state at the end of a run, in canonical form: the scalar components, and
// 128-bit XXH3 digests (32 hex digits) of every component over full tensors in parameter
// order, unpadded, little-endian, so they depend neither on W nor on where the state lives.
struct FullTrainingState {
  std::vector<ParameterInfo> parameters;
  DType model_dtype = DType::kFp32;
  TrainingCounters counters;
  int64_t scheduler_last_batch_iteration = -1;
  double scheduler_learning_rate = 0.0;
  LossScalerState loss_scaler;
  RngState shuffle_stream;
  uint64_t seed = 0;
  int64_t data_position = 0;  // samples consumed
  // The model's buffers (model_buffers' order), the same on every rank.
  std::vector<std::vector<float>> buffers;
  ComponentDigests digests;
};

// One full tensor of a captured state (TrainingOptions::capture_state_at_step).
struct CapturedTensor {
  std::string component;   // "params", "master", "exp_avg", "exp_avg_sq" or "buffers"
  std::string parameter;   // the parameter's (or the buffer's) name
  DType dtype = DType::kFp32;  // params: the model dtype; the optimizer state: fp32
  // ceil(N / W) of the run that captured it: element e is owned by rank e / partition_size (0
  // for a buffer: every rank holds it whole).
  int64_t partition_size = 0;
  std::vector<std::byte> bytes;  // unpadded, in element order, little-endian
};
struct CapturedState {
  FullTrainingState scalars;  // counters, scheduler, scaler, RNG, data position, digests
  std::vector<CapturedTensor> tensors;  // per parameter: params, master, exp_avg, exp_avg_sq
};

// DeepSpeed's load_checkpoint options (engine.py load_checkpoint), with what each promises,
// which is what zerosim does on every offload path (DeepSpeed's NVMe path ignores them, and at
// stage 3 its load_module_only loads no trainable weight: README "Load options").
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

class RankEngine {
 public:
  // `checkpoint_comm` is a second communicator over the same ranks, used only by the
  // background half of an async save (as PyTorch DCP's async_save uses its own process group),
  // so that its collectives never interleave with training's. Needed for async saves only.
  RankEngine(const TrainingOptions& options, Comm& comm, Env env, Comm* checkpoint_comm = nullptr);
  ~RankEngine();
  RankEngine(const RankEngine&) = delete;
  RankEngine& operator=(const RankEngine&) = delete;

  // Builds the layout and the initial state (parameters from the seed). Collective-free.
  Status initialize();
  // Instead of initialize(): builds the layout of this run (any world size) and loads the
  // state of `<checkpoint_directory>/<tag>` ("latest" follows the pointer, falling back to the
  // newest complete tag with a warning). Swap files are written afresh from the checkpoint,
  // so an empty, deleted or stale swap directory does not matter. Notes (config changes,
  // fallbacks) are appended to `notes`. Collective-free.
  // `load` chooses what is restored (CheckpointLoadOptions).
  Status initialize_from_checkpoint(const std::string& checkpoint_directory, const std::string& tag,
                                    std::vector<std::string>* notes, const CheckpointLoadOptions& load = {});
  // The model of a load, on the live state, never through a file: the state becomes what saving
  // it and loading it back with `load` into a run that freezes `frozen_now` (null: the set this
  // engine has) gives, the values of `excluded_from_save` taken from the model as a checkpoint
  // saved without them leaves them (the oracle of a resume with load options or another frozen
  // set). Per parameter, as the loader does: one that takes no optimizer state (a fresh
  // optimizer, or frozen now) gets its master from its 16-bit value and zero moments. One
  // sub-group's fp32 state is held in memory at a time. Collective-free.
  Status reset_as_loaded(const CheckpointLoadOptions& load, const std::vector<std::string>* frozen_now = nullptr,
                         const std::vector<std::string>& excluded_from_save = {});
  // The step of the checkpoint this engine was loaded from (-1: initialized fresh).
  int64_t loaded_checkpoint_step() const { return loaded_checkpoint_step_; }
  // Saves the state to `<checkpoint_directory>/<tag>` and points `latest` at it, under the
  // commit protocol of checkpoint/manifest.h. Collective. Only between steps: saving in the
  // middle of gradient accumulation is refused (kFailedPrecondition), because the partial
  // gradient accumulation is not part of a checkpoint. With checkpoint.async_save the state is
  // snapshotted to host memory here and written in the background; this call returns once the
  // snapshot is taken, and the next save (or wait_for_save) waits for the write.
  // Crash points, in order: "ckpt.save_begin" (every rank, before any I/O of the save),
  // "ckpt.tag_prepared" (rank 0), "ckpt.shard_written" (every rank, all shards durable),
  // "ckpt.manifest_written", "ckpt.latest_published" (rank 0), "ckpt.save_end" (every rank,
  // synchronous saves). Loading hits "ckpt.load_begin", "ckpt.load_sub_group_restored" (each
  // sub-group written where this run keeps it) and "ckpt.load_end".
  Status save_checkpoint(const std::string& checkpoint_directory, const std::string& tag,
                         const CheckpointSaveOptions& save = {});
  // Waits for an async save in flight and returns its result (OK when none). Collective
  // when a save is in flight.
  Status wait_for_save();
  // One optimizer step (gradient_accumulation_steps micro-steps). Collective.
  Result<StepRecord> train_step();
  // Streams the state to rank 0 and digests it there (other ranks return an empty state).
  // Collective; memory is one parameter's full tensors at a time.
  // With `capture` (rank 0 only uses it), the full tensors are also kept there.
  Result<FullTrainingState> gather_state(CapturedState* capture = nullptr);
  // This rank's share of the state's fingerprint: per tensor kind (params, master, exp_avg,
  // exp_avg_sq) two 64-bit lanes, each the sum (mod 2^64) over the elements this rank owns of a
  // hash of (parameter, global element index, the element's bits). The ranks' shares add up to
  // the same fingerprint at any world size; two states that differ in any bit differ in it
  // but with probability ~2^-64 per lane. No collective.
  using StateFingerprint = std::array<uint64_t, 8>;
  Result<StateFingerprint> local_state_fingerprint();
  // The scalar part of the state (counters, scheduler, scaler, RNG, data), as gather_state
  // fills it; the same on every rank.
  FullTrainingState scalar_state() const;

  const PartitionLayout& layout() const { return layout_; }
  const TrainingCounters& counters() const { return counters_; }
  // This rank's flat partitions (padding included), for tests of the layout; each is empty
  // when that state is swapped to NVMe (and checked not stale when partitions_were_resident()).
  std::span<const std::byte> param_partition() const { return host_partition(param_partition_); }
  std::span<const float> master_partition() const { return host_partition(master_); }
  std::span<const float> exp_avg_partition() const { return host_partition(exp_avg_); }
  std::span<const float> exp_avg_sq_partition() const { return host_partition(exp_avg_sq_); }
  // Whether the compute backend has held this rank's partitions (ResidentState) for a step;
  // then the host arrays above are current only after something read the state through the
  // engine (a save, gather_state, a fingerprint), and the accessors refuse to hand them out
  // stale.
  bool partitions_were_resident() const { return resident_ != nullptr && resident_used_; }
  // Set when the swapper fell back from O_DIRECT to the pread/pwrite engine: one line to log.
  const std::string& swap_engine_note() const { return swap_engine_note_; }
  // Set when a checkpoint's shard asked for O_DIRECT and the file system refused it: one line to log.
  std::string checkpoint_io_note() const;

 private:
  // The layout and the storage of every state (in memory or swap files), state not yet set.
  Status prepare_storage();
  struct ShardPlan;
  class ShardSink;
  struct ShardFile;
  Result<ShardFile> create_shard_file(const std::string& path);
  // Streams this rank's shard (header, then every fragment, sub-group by sub-group) to `sink`.
  Status write_shard(const std::string& path, ShardSink& sink, const CheckpointSaveOptions& save);
  // Gathers the shard records to rank 0, which writes the manifest and publishes `latest`;
  // every rank returns rank 0's verdict. Runs on `comm` (the training or the checkpoint one).
  // `manifest_without_shards` is read on rank 0 only (the other ranks pass null).
  Status commit_checkpoint(Comm& comm, const std::string& checkpoint_directory, const std::string& tag,
                           const std::shared_ptr<const nlohmann::json>& manifest_without_shards,
                           uint64_t shard_size_bytes, const std::string& shard_checksum);
  // The manifest of this save as rank 0 writes it, but for the shard records (rank 0 only:
  // the other ranks' copy would never be read). Null on the other ranks.
  std::shared_ptr<const nlohmann::json> manifest_without_shards(const std::string& tag,
                                                                const CheckpointSaveOptions& save) const;
  // This rank's partition of one parameter's state, wherever it lives: partition_size
  // elements each (padding included); valid during the visit only.
  struct PartitionStateView {
    const std::byte* params = nullptr;  // model dtype
    const float* master = nullptr;
    const float* exp_avg = nullptr;
    const float* exp_avg_sq = nullptr;
  };
  // Visits every parameter in parameter order with its state, reading swapped state one
  // sub-group at a time (so memory stays bounded) and giving the swap buffers back even when
  // the visit fails.
  Status for_each_partition_state(const std::function<Status(int64_t parameter, const PartitionStateView&)>& visit);
  // A per-parameter swapper (parameters or gradients) for this rank's layout.
  Result<std::unique_ptr<PartitionSwapper>> make_partition_swapper(const std::string& nvme_path, DType dtype,
                                                                   SwapTensorKind kind, bool pin_memory,
                                                                   std::string* engine_note);
  // The initial fp32 master of this rank's part of a sub-group (16-bit values widened), from the seed.
  void initial_master_of_group(const SubGroup& group, std::vector<float>& group_master) const;
  // The initial values (in the model dtype, widened) of the elements of `parameter` this rank owns.
  void initial_values_of_parameter(int64_t parameter, std::vector<float>& values) const;
  // The lr the next optimizer step uses: the scheduler's, unless a load set the optimizer's own
  // (CheckpointLoadOptions), which holds until the scheduler's next step.
  double next_step_learning_rate() const;
  // The (offset, count) runs of a sub-group's elements, relative to its start, that AdamW steps:
  // the partitions of its trainable parameters (padding included), adjacent ones merged.
  std::vector<std::pair<size_t, size_t>> trainable_runs(const SubGroup& group) const;
  // Casts a sub-group's master to the model dtype and stores it: in param_partition_, or in the
  // parameter swap files as the state of `step`.
  Status store_parameters(const SubGroup& group, const float* master, int64_t step);
  // All-gathers the 16-bit partitions of `range` (contiguous parameters) and widens them to
  // full fp32 tensors in `full_parameters` (one per parameter; its buffers are reused).
  Status gather_parameters(ParameterRange range, std::vector<std::vector<float>>& full_parameters);
  // Exchanges layer `layer_index`'s final gradients (full tensors, one per parameter of the
  // layer) into this rank's fp32 gradient partitions. Collective.
  Status reduce_scatter_layer(int64_t layer_index, int64_t micro_step_index,
                              std::span<const std::vector<float>> full_gradients);
  // The micro-batch's inputs for the backend (features or token windows) at its samples.
  Result<MicroBatchInput> load_micro_batch(int64_t first_position);
  // scatter_send_ (W chunks) into this rank's accumulator, as the numerics mode says
  // (ds_config.h NumericsMode). Collective.
  Status exchange_layer_gradient(int64_t micro_step_index, size_t chunk_elements, std::span<float> accumulator);
  // Adds the micro-step's data, forward and backward times to `record`.
  Result<float> micro_step(int64_t micro_step_index, StepRecord& record);
  // A backward stage of the plan on the resident partitions, and its layer's exchange.
  Status resident_backward_stage(int64_t stage, const BackwardStage& step);
  // The defect tied_weight_untied_on_load, at a tied parameter's second use (nothing otherwise).
  void untie_after_load(std::vector<std::vector<float>>& tied_use);
  Status optimizer_step(StepRecord& record);

  TrainingOptions options_;
  Comm& comm_;
  Env env_;
  Comm* checkpoint_comm_ = nullptr;
  bool step_in_progress_ = false;
  std::future<Status> pending_save_;  // the background half of an async save
  // An async save's snapshot of this rank's shard: host memory the size of the shard, kept
  // between saves so that a save's stall is a copy, not the kernel faulting fresh pages in.
  std::shared_ptr<StateArray<std::byte>> async_snapshot_;
  DType model_dtype_ = DType::kFp32;
  DType communication_dtype_ = DType::kFp32;
  std::vector<ParameterInfo> parameters_;
  PartitionLayout layout_;
  ModelPlan plan_;
  std::optional<SyntheticDataset> dataset_;    // the MLP's samples
  std::unique_ptr<TokenDataset> token_data_;  // the transformer's windows
  ShuffledSampler sampler_;
  // The model's buffers (model_buffers), whole on every rank: built with the model, derived ones
  // never saved, persistent ones saved, restored and updated after every step's micro-batches.
  std::vector<BufferInfo> buffer_infos_;
  std::vector<std::vector<float>> buffers_;
  std::vector<int64_t> step_target_counts_;  // this rank's target tokens in the step so far
  // Defect tied_weight_untied_on_load: the head's own copy of wte, taken at its first use after
  // the load and used from then on.
  std::vector<float> untied_head_copy_;
  // After a step's micro-batches: the running target frequency from the global batch's counts.
  // Collective (one all-gather of the counts).
  Status update_running_buffers();
  // The persistent buffers a save writes (all of the model's; none under the defect
  // persistent_buffer_not_saved).
  std::vector<BufferInfo> saved_buffers() const;
  SimdPath simd_path_ = SimdPath::kScalar;

  // On huge pages where the kernel gives them (huge_page_allocator.h): a load's first touch.
  ZeroPageArray<std::byte> param_partition_;  // model dtype
  ZeroPageArray<float> master_;
  ZeroPageArray<float> exp_avg_;
  ZeroPageArray<float> exp_avg_sq_;
  ZeroPageArray<float> gradient_partition_;  // fp32 accumulation over micro-steps
  // trainable_runs of each sub-group, computed once with the layout (not per step).
  std::vector<std::vector<std::pair<size_t, size_t>>> trainable_runs_by_group_;
  TrainingCounters counters_;
  std::unique_ptr<OptimizerSwapper> swapper_;  // offload_optimizer.device == nvme
  std::unique_ptr<PartitionSwapper> param_swapper_;     // offload_param.device == nvme
  std::unique_ptr<PartitionSwapper> gradient_swapper_;  // with offload_optimizer.device == nvme
  ExactSquareSum step_gradient_squares_;  // bins of the final gradients, when they are swapped
  std::string swap_engine_note_;
  mutable std::mutex checkpoint_io_note_mutex_;  // an async save's thread may set the note
  std::string checkpoint_io_note_;
  bool pipeline_read_ = false;  // effective, after the defaults (see initialize)
  std::optional<LearningRateScheduler> scheduler_;
  std::optional<LossScaler> loss_scaler_;
  std::optional<double> optimizer_learning_rate_;  // set by a load with a fresh optimizer or scheduler
  int64_t loaded_checkpoint_step_ = -1;

  std::unique_ptr<ComputeBackend> compute_;
  // The partitions kept by the backend (ResidentState in compute_backend.h), when it can and
  // this run allows (prepare_storage says when); null: the host arrays above are the state.
  ResidentState* resident_ = nullptr;
  bool resident_adopted_ = false;  // the backend holds the current partitions
  bool resident_used_ = false;      // it has held them for a step of this run
  bool resident_holds_optimizer_ = false;  // master and moments too (the optimizer is not offloaded)
  template <typename T>
  std::span<const T> host_partition(const ZeroPageArray<T>& partition) const {
    ZEROSIM_CHECK(!host_state_stale_, "the host partitions are read after the backend's newer ones are copied back");
    return partition;
  }
  bool host_state_stale_ = false;  // the backend's are newer than the host arrays
  // Before a step: hands the host arrays to the backend unless it holds them already.
  Status adopt_resident_state();
  // Before anything reads the host arrays (a save, a gather of the state, a fingerprint, a
  // reset): copies the backend's partitions back when they are newer.
  Status make_host_state_current();
  // Scratch reused across micro-steps.
  std::vector<float> micro_batch_input_;
  std::vector<int32_t> micro_batch_labels_;
  std::vector<int64_t> micro_batch_samples_;
  std::vector<int32_t> micro_batch_tokens_;
  bool backend_makes_batches_ = false;  // compute_ makes the MLP's samples from their indices
  std::vector<std::byte> gather_send_, gather_receive_, scatter_send_;
  std::vector<std::vector<float>> stage_parameters_scratch_;
  // Full gradient tensors by parameter, live from their first use in a micro-batch's backward
  // to their layer's exchange; a released tensor's buffer returns to the pool for the next.
  std::vector<std::vector<float>> full_gradients_;
  std::vector<uint8_t> full_gradient_live_;
  std::vector<std::vector<float>> gradient_buffer_pool_;
  std::vector<float> padded_slice_scratch_;
  std::vector<std::byte> param_bytes_scratch_;
  std::vector<float> gradient_layer_scratch_, gradient_group_scratch_;
  std::vector<std::byte> gradient_chunks_scratch_;  // kDeepSpeed numerics: the W chunks of this rank
  std::vector<float> gradient_sum_scratch_, gradient_contribution_scratch_;
};

struct TrainingRun {
  std::vector<std::string> notes;  // one-line notes for the log (e.g. the swap engine fallback)
  std::vector<StepRecord> steps;
  FullTrainingState final_state;
  ComponentDigests digests;
  // With TrainingOptions::digest_every_step: the digests of the state right after
  // initialization or load (before any step of this run), and after each step, in step order.
  ComponentDigests initial_digests;
  std::vector<ComponentDigests> step_digests;
  // With TrainingOptions::capture_state_at_step, when the run passed that step.
  std::optional<CapturedState> captured;
  // CheckpointPlan::stop_requested ended the run before its last step.
  bool stopped_early = false;
  // The step of this run's last committed save (-1: none).
  int64_t last_saved_step = -1;
  // The step of the checkpoint a resumed run loaded (-1: a fresh start). A module-only load
  // starts at step 0 from it.
  int64_t loaded_checkpoint_step = -1;
  // For CheckpointPlan::modelled_loads: how many steps the run had recorded when each load was
  // modelled (a module-only load's steps start after its index).
  std::vector<size_t> modelled_load_step_indices;
};

// The ComponentDigests of a fingerprinted state (RankEngine::local_state_fingerprint, summed
// over the ranks): the tensor components are "fp:" + 32 hex digits, the rest as for a gathered
// state. What TrainingRun::step_digests holds.
ComponentDigests fingerprint_digests(const FullTrainingState& scalars, const RankEngine::StateFingerprint& sum);

// The name of the first component ("params", "master", ..., "data", in ComponentDigests'
// order) whose digests differ; empty when all agree. What an oracle prints when a bit differs.
std::string first_differing_component(const ComponentDigests& expected, const ComponentDigests& actual);

// Checkpointing around a run: resume from a directory, save every S steps and at the end.
struct CheckpointPlan {
  std::string resume_directory;  // empty: a fresh start
  std::string resume_tag = "latest";
  CheckpointLoadOptions resume_load;  // what the resume restores
  // The oracle of a resume with load options, or of a chain of resumes: after each listed step
  // (and its save), in order, the live state becomes what that load gives
  // (RankEngine::reset_as_loaded). A load's step counts in the steps of the run before it: after
  // a module-only load the count starts from 0 again (and the run goes on to its step count).
  struct ModelledLoad {
    int64_t after_step = -1;
    CheckpointLoadOptions options;
    std::optional<std::vector<std::string>> frozen_now;  // the restart's frozen set (unset: unchanged)
    std::vector<std::string> excluded_from_save;         // parameters the loaded checkpoint holds no value of
  };
  std::vector<ModelledLoad> modelled_loads;
  std::string save_directory;  // empty: no saves
  CheckpointSaveOptions save_options;  // for every save of the run
  int64_t save_every_steps = 0;  // 0: only at the end of the run (when save_directory is set)
  // Saves after these steps too (0: the starting state of a fresh run, before its first step).
  std::vector<int64_t> save_at_steps;
  bool save_at_end = true;  // with save_directory: the run's last step is saved
  // Stops the run early (a SIGTERM or SIGINT handler sets it, in the CLI): every rank reads it
  // after each step and the ranks agree by a collective max, so that all stop after the same
  // step whenever each saw it. Then the run saves when save_on_stop (and save_directory is
  // set), and ends with TrainingRun::stopped_early. Null: never stops early.
  const std::atomic<bool>* stop_requested = nullptr;
  bool save_on_stop = false;
  // Called on rank 0 after each step, once that step's save (if any) has returned, with the
  // state's digests (ComponentDigests of fingerprint_digests) and whether a synchronous save of
  // this step committed. Costs a gather per step. What `zerosim train` writes to the state log
  // of `zerosim exec` (ZEROSIM_STATE_LOG).
  std::function<void(const StepRecord& record, const ComponentDigests& digests, bool saved)> after_step;
};

// Runs W ranks on threads until the global step count reaches `step_count` (from a fresh start,
// or from the checkpoint's step when resuming). On a rank's error the world is aborted and the
// root cause is returned: a real error rather than a consequent kAborted, and of several real
// errors the lowest rank's (so the same one in every run, whatever the threads' timing).
Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, Env env,
                                 const CheckpointPlan& checkpoints = {});
// Per-rank seams for the simulator: each rank's Env (its own clock, a disk view that charges
// that clock), and a wrapper around each rank's training communicator (one that advances and
// synchronizes the virtual clocks at every collective). Either may be empty.
struct RankSeams {
  std::function<Env(int rank)> env_for_rank;
  std::function<std::unique_ptr<Comm>(int rank, Comm& inner)> wrap_comm;
};
Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, const RankSeams& seams,
                                 const CheckpointPlan& checkpoints = {});

// One rank of a run whose ranks are separate processes (one per GPU, each with its own
// communicators, e.g. create_nccl_process_comm): the same loop as each thread of run_training.
// Rank 0's result holds the run (steps, digests, notes); the others' hold nothing but success.
// A failing rank cannot abort its peers through a communicator without abort (NCCL), so the
// error is this rank's to report. `checkpoint_comm` is needed for async saves only.
Result<TrainingRun> run_training_rank(const TrainingOptions& options, int64_t step_count, Comm& comm,
                                      Comm* checkpoint_comm, const Env& env, const CheckpointPlan& checkpoints = {});

// The tag a save at `global_step` gets: "global_step<N>", as DeepSpeed names them.
std::string checkpoint_tag_for_step(int64_t global_step);

}  // namespace zerosim
