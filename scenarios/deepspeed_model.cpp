#include "scenarios/deepspeed_model.h"

#include <algorithm>

#include "core/zero/partition.h"

namespace zerosim {
namespace {

// A sub-group is swapped when its per-rank element count (padding included) times 4 bytes is at
// least DeepSpeed's min_aio_bytes. Returns how many stay in memory, and how many there are.
std::pair<size_t, size_t> unswapped_sub_groups(const TrainingOptions& options, int world_size, const ResolvedConfig& config) {
  const int64_t threshold_bytes = deepspeed_min_aio_bytes(config.aio);
  const PartitionLayout layout = make_partition_layout(model_parameters(options.model), world_size, config.zero.sub_group_size);
  const auto unswapped = std::count_if(layout.sub_groups.begin(), layout.sub_groups.end(),
                                       [&](const SubGroup& group) { return group.element_count * 4 < threshold_bytes; });
  return {static_cast<size_t>(unswapped), layout.sub_groups.size()};
}

}  // namespace

const std::vector<DeepSpeedModelEntry>& deepspeed_model_entries() {
  static const std::vector<DeepSpeedModelEntry> kEntries = {
      {"nvme-optimizer-not-loaded", "offload_optimizer.device is nvme (any offload_param)",
       "load_checkpoint never reads the zero checkpoint (the optim_states files): the swap files copied back "
       "restore the fp32 master of the swapped sub-groups, and the counters and the scheduler come from the "
       "model-states file; Adam's moments restart at zero (the fresh CPUAdam creates them at the first step and "
       "overwrites the copied moment files), its step count at 0, and the first update uses the optimizer's lr "
       "as the scheduler built it (param_groups are not loaded)",
       {Defect::kOptimizerStateNotSaved, Defect::kStepCounterNotRestored, Defect::kOptimizerLrNotRestored},
       "engine.py:4332-4358; stage3.py:2420-2426, 2448-2456, 2585-2595, 3565-3570; "
       "swap_tensor/optimizer_utils.py:478-494; ops/adam/cpu_adam.py:141-157; lr_schedules.py:728-730, 754-755",
       "not in DeepSpeed 0.14.5 (run 2026-12-04, docs/deepspeed-live.md): its load_checkpoint reads the zero "
       "checkpoint with the optimizer on NVMe. With the sub-group in memory (fp16-nvme-small) the resume was bit "
       "for bit (masters, moments, the optimizer's step 10, lr, scheduler). With a swapped sub-group in a new "
       "job's swap folder (fp16-nvme, bf16-nvme) the load fails: reading the zero checkpoint swaps the sub-group "
       "in from the swap folder before the checkpoint's offloaded_tensors are copied there (AssertionError in "
       "swap_in_tensors, the seed report's failure); with the swap files copied by hand (fp16-nvme-copied-swap) "
       "masters and moments are the saved ones but the 16-bit parameters are not, and the loss differs from the "
       "first resumed step. The skip this entry reads was added by DeepSpeed PR #7613 (2025-10-01); no release "
       "after it runs on the GPU machine yet (pydantic 2)"},
      {"nvme-fp16-loss-scaler", "offload_optimizer.device is nvme and fp16 is enabled",
       "the dynamic loss scaler lives in the optimizer's state dict, which is never read: it restarts at "
       "2^initial_scale_power with its counters at zero",
       {Defect::kLossScalerResetOnLoad}, "engine.py:4332; stage3.py:3276 (only reached through _load_zero_checkpoint)",
       "not in DeepSpeed 0.14.5 (run 2026-12-04): the scale and the scaler's counters equal the saving run's "
       "after the load, the reduced scale 16384 of fp16-nvme-copied-swap (3 overflows before the save) "
       "included. From PR #7613 on: not run"},
      {"nvme-unswapped-sub-groups",
       "offload_optimizer.device is nvme and a sub-group holds fewer than max(1 MiB, aio.block_size) / 4 elements "
       "per rank (sub_group_size, the model's size and the world size decide)",
       "such a sub-group is kept in memory, never swapped; its state in the optim_states file is never read, and "
       "reset_swap_buffers copies the new process's fp32 weights over its 16-bit parameters: master and "
       "parameters revert to the model the new process built",
       {Defect::kUnswappedSubGroupResetOnLoad},
       "stage3.py:807, 908, 1214-1218, 2585-2595; swap_tensor/optimizer_utils.py:172, 180, 211-215; "
       "swap_tensor/utils.py:14; engine.py:4332",
       "not in DeepSpeed 0.14.5 (run 2026-12-04, fp16-nvme-small: a sub-group of 85,002 elements, kept in "
       "memory; offloaded_tensors empty): master and parameters equal the saving run's after the load, bit for "
       "bit. From PR #7613 on: not run"},
      {"other-world-size",
       "the resume runs on another number of ranks without a universal checkpoint, the optimizer not on NVMe "
       "(except a fresh-optimizer or module-only load on fewer ranks, which skips the check)",
       "refused: 'The checkpoint being loaded used a DP world size of W but the current world size is W2. "
       "Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not currently "
       "supported.' On more ranks the new ranks fail earlier, finding no model-states file of theirs (an "
       "AssertionError in the loader's check of its file list)",
       {Defect::kOtherWorldSizeRefused},
       "engine.py:4212-4227, 4259-4269, 4627-4633; checkpoint/state_dict_factory.py:166-168",
       "confirmed by running DeepSpeed 0.14.5 on the CPU machine (2026-12-05, PyTorch 1.13, its CPU accelerator, "
       "ranks over gloo, bf16, optimizer on the CPU; docs/deepspeed-live.md): saved by 2 ranks at step 10, "
       "loaded by 1 rank: refused with this message (world size 2, current 1); by 3 ranks: ranks 0 and 1 "
       "refused the same way, rank 2 stopped first at an AssertionError (state_dict_factory.py "
       "check_ckpt_list: no model-states file of its own); by 2 ranks: bit for bit. On 1 rank, "
       "load_module_only=True and load_optimizer_states=False loaded without the check (module-only: no "
       "weight, counters 0; fresh optimizer: every master the saved one rounded to bf16, the counters of "
       "step 10, no optimizer state). Not run with the optimizer on NVMe"},
      {"fresh-optimizer-reads-latest", "load_optimizer_states=False and the restart asks for a tag other than latest",
       "the weights are consolidated from the tag `latest` names (get_fp32_state_dict_from_zero_checkpoint is "
       "called without the tag), not from the tag asked for",
       {Defect::kRequestedTagIgnored}, "engine.py:4465-4467; utils/zero_to_fp32.py:608-614",
       "confirmed by running DeepSpeed 0.14.5 (2026-12-04, fp16-cpu-fresh-optimizer-tag): saved at steps 5 and "
       "10, loaded with tag global_step5 and load_optimizer_states=False, the counters and the scheduler came "
       "from step 5 (global_steps 5, iteration 4) and every master equalled step 10's rounded to fp16 (85,002 "
       "of 85,002): the weights of the tag `latest` names. With the optimizer on NVMe and a swapped sub-group "
       "the load fails first, in zero_to_fp32 (bf16-nvme-fresh-optimizer: RuntimeError: start (0) + length "
       "(1048576) exceeds dimension size (0))"},
      {"module-only-no-weights", "load_module_only=True (load_optimizer_states left True)",
       "the stage-3 module file holds empty placeholders (parameters are released before the save), so no "
       "weight is loaded; the parameters keep the new process's values",
       {Defect::kModuleOnlyLoadsNoWeights}, "engine.py:4334-4343, 4465, 4500-4506, 4522-4526",
       "confirmed by running DeepSpeed 0.14.5 (2026-12-04, fp16-cpu-module-only): after load_module_only=True "
       "the masters differ from the saved ones at 84,998 of 85,002 elements, the counters are 0, and a run on "
       "from there equals the uninterrupted run from step 1 bit for bit: no weight was loaded. With the "
       "optimizer on NVMe and a swapped sub-group the load fails (bf16-nvme-module-only: RuntimeError in "
       "_restore_from_bit16_weights, a tensor of size 0 against 3159050)"},
      {"no-fsync", "always; it shows when the power goes out after a save",
       "neither the shards (torch.save to their final names; the torch checkpoint engine's commit does nothing) "
       "nor `latest` (open and write, no rename) are fsynced, and rank 0 publishes `latest` without a barrier "
       "after the other ranks' writes: a power loss can leave `latest` naming a tag whose shards never reached "
       "the disk",
       {Defect::kLatestBeforeShardsDurable},
       "engine.py:4836-4844, 5266-5267, 5424; runtime/checkpoint_engine/torch_checkpoint_engine.py:30-43",
       "confirmed by running DeepSpeed 0.14.5 under zerosim exec (2026-12-04, fp16, optimizer on NVMe, saves at "
       "steps 4, 8, 12): its save writes shards, offloaded_tensors and `latest` in place with no fsync and no "
       "rename; every crash state that drops the unsynced writes lost every save (a resume from step 0 after "
       "step 12's save had returned). On the CPU machine (2026-12-05, bf16, optimizer on the CPU, 6 states "
       "per point) the states that keep `latest` and drop or tear its shards were sampled: the restarted job "
       "stops at the load (an AssertionError: no model-states file; a KeyError: a torn torch.save archive) at "
       "every point, and finds the same files at every restart: `latest` must be edited or removed by hand"},
      {"plain-loop-data-position", "a plain training loop over a DataLoader (not the Hugging Face Trainer)",
       "DeepSpeed saves no data-sampler position and no RNG state outside curriculum learning: the loop starts "
       "again at the first sample, in the first epoch's order",
       {Defect::kSamplerPositionLost, Defect::kShuffleEpochNotRestored}, "engine.py:4592, 4908-4915",
       "confirmed by running DeepSpeed 0.14.5 on the CPU machine (2026-12-05, PyTorch 1.13; "
       "docs/deepspeed-live.md): a loop over the engine's own loader (deepspeed.initialize(training_data=...)), "
       "saved at step 10 and resumed in a new process, took at steps 11 to 20 the rows of steps 1 to 10 in "
       "their order; the model-states file's data_sampler and random_ltd are None, and torch's generator "
       "after the load is not the saving process's (which equalled the uninterrupted run's); the shuffle "
       "order comes from the sampler's seed and an epoch nothing saves"},
  };
  return kEntries;
}

std::vector<DeepSpeedModelEntry> deepspeed_model_for(const Scenario& scenario, TrainingLoop loop) {
  const TrainingOptions& options = scenario.run.options;
  // The loading process decides (its config, its world size).
  const ResolvedConfig& config = scenario.resume_config ? *scenario.resume_config : options.config;
  const int world_size = options.world_size;
  const int resume_world_size = scenario.run.resume_world_size > 0 ? scenario.run.resume_world_size : world_size;
  const bool nvme_optimizer = config.zero.offload_optimizer.device == OffloadDevice::kNvme;
  const CheckpointLoadOptions& load = scenario.resume_load;
  std::vector<DeepSpeedModelEntry> applied;
  for (const DeepSpeedModelEntry& entry : deepspeed_model_entries()) {
    bool applies = false;
    if (entry.id == "nvme-optimizer-not-loaded") applies = nvme_optimizer;
    if (entry.id == "nvme-fp16-loss-scaler") applies = nvme_optimizer && config.precision == Precision::kFp16;
    if (entry.id == "nvme-unswapped-sub-groups") {
      applies = nvme_optimizer && unswapped_sub_groups(options, resume_world_size, config).first > 0;
    }
    if (entry.id == "other-world-size") {
      // With the optimizer on NVMe the check is never reached (engine.py:4332): not modelled.
      const bool check_skipped = resume_world_size < world_size && (!load.optimizer_states || load.module_only);
      applies = resume_world_size != world_size && !nvme_optimizer && !check_skipped;
    }
    if (entry.id == "fresh-optimizer-reads-latest") applies = !load.optimizer_states && scenario.resume_tag != "latest";
    if (entry.id == "module-only-no-weights") applies = load.module_only;
    if (entry.id == "no-fsync") applies = true;
    if (entry.id == "plain-loop-data-position") applies = loop == TrainingLoop::kPlain;
    if (applies) applied.push_back(entry);
  }
  return applied;
}

Result<std::vector<DeepSpeedModelEntry>> deepspeed_model_for_release(const Scenario& scenario, TrainingLoop loop) {
  std::vector<DeepSpeedModelEntry> entries = deepspeed_model_for(scenario, loop);
  const TrainingOptions& options = scenario.run.options;
  const ResolvedConfig& config = scenario.resume_config ? *scenario.resume_config : options.config;
  if (!config.deepspeed_release || config.zero.offload_optimizer.device != OffloadDevice::kNvme) return entries;
  const DeepSpeedRelease release = *config.deepspeed_release;
  const std::string named = "zerosim.deepspeed_release " + deepspeed_release_text(release) + ", the optimizer on NVMe: ";
  if (release < DeepSpeedRelease{0, 13, 0}) {
    return failed_precondition(named + "that release predates DeepSpeed's NVMe checkpoints (0.13.0, PR #4707): not modelled");
  }
  if (release > DeepSpeedRelease{0, 16, 4}) {
    return failed_precondition(named + "whether that release skips the zero checkpoint on load (DeepSpeed PR #7613, merged "
                               "2025-10-01, which the model's NVMe entries describe) is not known here; leave the key "
                               "out to model the releases with it");
  }
  const int resume_world_size = scenario.run.resume_world_size > 0 ? scenario.run.resume_world_size : options.world_size;
  const auto [unswapped, sub_groups] = unswapped_sub_groups(options, resume_world_size, config);
  if (unswapped != sub_groups) {
    // Measured on 0.14.5 (docs/deepspeed-live.md): such a run does not train as zerosim does, and its
    // resume depends on where the swap files are; neither is modelled.
    return failed_precondition(named + "a sub-group swapped to NVMe: DeepSpeed 0.14.5 (measured) does not keep that "
                               "sub-group's fp32 master from one step to the next, so its training parts from zerosim's "
                               "and its own CPU offload's at the second update, and its resume in a new swap folder "
                               "fails before the checkpoint's swap files are copied there; zerosim models neither "
                               "(docs/deepspeed-live.md)");
  }
  // Measured on 0.14.5: load_checkpoint reads the zero checkpoint, and the resume is bit for bit.
  std::erase_if(entries, [](const DeepSpeedModelEntry& entry) {
    return entry.id == "nvme-optimizer-not-loaded" || entry.id == "nvme-fp16-loss-scaler" ||
           entry.id == "nvme-unswapped-sub-groups";
  });
  return entries;
}

}  // namespace zerosim
