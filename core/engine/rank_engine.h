// The ZeRO-3 training engine of one rank.
//
// Crash points (Env::crash_points), hit on every rank: "engine.step_begin",
// "swap.sub_group_swapped_in" (a sub-group's optimizer state read from NVMe),
// "optimizer.sub_group_stepped" (after each sub-group's update),
// "swap.sub_group_swap_out_submitted" (its write to NVMe queued), "engine.step_end"; and the
// save and load sites listed at save_checkpoint.
//
// One optimizer step (DeepSpeed's order, docs/deepspeed-semantics.md §1.5-1.7, §3):
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
#include "core/engine/training_options.h"
#include "core/engine/training_state.h"
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

struct CheckpointManifest;
class CheckpointShardReader;

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
  // The phases of initialize_from_checkpoint, after the ranks agreed on the checkpoint.
  Status restore_partitions(const CheckpointManifest& manifest, CheckpointShardReader& reader,
                            const CheckpointLoadOptions& load, int64_t step);
  Status restore_buffers(const CheckpointManifest& manifest, CheckpointShardReader& reader,
                         const std::string& manifest_path);
  Status verify_every_shard(const CheckpointManifest& manifest, CheckpointShardReader& reader,
                            const std::string& tag_directory, std::vector<std::string>* notes);
  Status restore_training_scalars(const CheckpointManifest& manifest, const CheckpointLoadOptions& load, int64_t step,
                                  double fresh_learning_rate, const std::string& manifest_path);
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
  // The layer's contributions (portable numerics: gradient_pieces_; DeepSpeed's: scatter_send_,
  // W chunks) into this rank's accumulator, as the numerics mode says (ds_config.h
  // NumericsMode). Collective.
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
  // The host path's fp32 gradient partition (in memory, or its swap files with the optimizer on
  // NVMe), zeroed: built by prepare_storage, and again when the partitions leave a backend that
  // held the gradients (adopt_resident_state lets the host's go).
  Status prepare_gradient_storage();
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
  // The portable exchange's chunks as pieces of the full gradients (Comm::reduce_scatter_pieces).
  std::vector<Comm::GradientPiece> gradient_pieces_;
  std::vector<size_t> chunk_first_piece_;
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

}  // namespace zerosim
