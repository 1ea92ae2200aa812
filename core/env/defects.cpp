#include "core/env/defects.h"

namespace zerosim {

const std::vector<DefectInfo>& all_defects() {
  static const std::vector<DefectInfo> kDefects = {
      {Defect::kOptimizerStateNotSaved, "optimizer_state_not_saved",
       "shards hold zero Adam moments (DeepSpeed PR #7786, PyTorch #140898)"},
      {Defect::kSwappedStateNotSaved, "swapped_state_not_saved",
       "NVMe-swapped master and moments are not streamed into the shard; it holds the initial state (the seed report)"},
      {Defect::kMasterRebuiltFromParams, "master_rebuilt_from_params",
       "on load the fp32 master is rebuilt from the 16-bit parameters (DeepSpeed PR #4141, Megatron-LM #1359)"},
      {Defect::kStepCounterNotRestored, "step_counter_not_restored",
       "Adam's step count restarts at 0, so bias correction differs (DeepSpeed PR #5263)"},
      {Defect::kSkippedStepsNotRestored, "skipped_steps_not_restored", "the skipped-step counter restarts at 0"},
      {Defect::kSchedulerNotRestored, "scheduler_not_restored",
       "the LR scheduler restarts from its first step (HF Trainer + DeepSpeed, ColossalAI #5151)"},
      {Defect::kLossScalerResetOnLoad, "loss_scaler_reset_on_load",
       "the dynamic loss scaler restarts from its initial state (transformers #11323, accelerate #4289)"},
      {Defect::kSamplerPositionLost, "sampler_position_lost",
       "the data position restarts at sample 0 (transformers #8874, accelerate #2016)"},
      {Defect::kAccumulationBoundaryLost, "accumulation_boundary_lost",
       "the data position is counted as steps x micro batch x ranks, forgetting gradient accumulation "
       "(transformers #5605, #22143)"},
      {Defect::kLatestBeforeShardsDurable, "latest_before_shards_durable",
       "shards are not fsynced before the manifest and `latest` are published (transformers #35782)"},
      {Defect::kAsyncSnapshotNotCopied, "async_snapshot_not_copied",
       "an async save serializes the live state when it writes, not a copy taken at the step (PyTorch #144657)"},
      {Defect::kWrongPaddingOnReshard, "wrong_padding_on_reshard",
       "at another world size, fragments are read at offsets shifted by the old padding (DeepSpeed PR #5105)"},
      {Defect::kShuffleEpochNotRestored, "shuffle_epoch_not_restored",
       "the shuffling RNG restarts from epoch 0's stream after a resume (transformers #17032, #23045)"},
      {Defect::kParamsNotRefreshedAfterLoad, "params_not_refreshed_after_load",
       "the 16-bit parameters are not refreshed from the checkpoint; they keep the new process's buffers "
       "(Megatron-Core PR #6920, #5071)"},
      {Defect::kRequestedTagIgnored, "requested_tag_ignored",
       "the loader resumes from `latest` whatever tag was asked for (DeepSpeed #8499)"},
      {Defect::kLoadOptimizerStatesIgnored, "load_optimizer_states_ignored",
       "load_optimizer_states=False still restores Adam's moments and step count (DeepSpeed's NVMe path reads "
       "the swap files of an engine that has stepped)"},
      {Defect::kLoadLrSchedulerStatesIgnored, "load_lr_scheduler_states_ignored",
       "load_lr_scheduler_states=False still restores the LR schedule"},
      {Defect::kModuleOnlyLoadsNoWeights, "module_only_loads_no_weights",
       "load_module_only loads no trainable weight: the stage-3 module file holds empty placeholders, the "
       "parameters keep their initial values (DeepSpeed edaa722 engine.py:4465, stage3 release before save)"},
      {Defect::kFrozenParametersStepped, "frozen_parameters_stepped",
       "frozen parameters (requires_grad=False) are stepped with the rest: their gradient is zero, but AdamW's "
       "weight decay moves them (an optimizer built over every parameter instead of the trainable ones)"},
      {Defect::kFrozenMasterNotRebuilt, "frozen_master_not_rebuilt",
       "on load a frozen parameter's fp32 master is not rebuilt from its saved 16-bit value (the checkpoint holds "
       "no optimizer state for it), so the cast back after the next step writes zeros into the parameter"},
      {Defect::kExcludedFrozenLeftZero, "excluded_frozen_left_zero",
       "a frozen parameter that save_checkpoint(exclude_frozen_parameters=True) left out loads as the loader's "
       "zeroed buffer instead of keeping the model's own value (DeepSpeed's load_module_strict=False)"},
      {Defect::kDerivedBufferNotRebuiltOnLoad, "derived_buffer_not_rebuilt_on_load",
       "a derived (non-persistent) buffer, the transformer's causal mask, is not in the state dict and is not "
       "built again for a load: it stays as the loader's empty memory (zero: every position masked, so attention "
       "spreads over the future too), as after FSDP2's meta-device init and to_empty (catalog #38, pytorch#145378)"},
      {Defect::kPersistentBufferNotSaved, "persistent_buffer_not_saved",
       "a persistent buffer (the transformer's running target-token frequency) is left out of the checkpoint, as "
       "a buffer registered outside the state dict is; a load keeps the fresh model's value (catalog class M)"},
      {Defect::kTiedWeightUntiedOnLoad, "tied_weight_untied_on_load",
       "after a load the LM head and the token embedding are two tensors (the tie is not made again, as when "
       "tie_weights is skipped): the head keeps the weights it was loaded with, and no update reaches them"},
      {Defect::kOptimizerLrNotRestored, "optimizer_lr_not_restored",
       "the first update after the load uses a fresh optimizer's lr (the scheduler's construction value) instead "
       "of the checkpoint's: the optimizer's param_groups are never loaded (DeepSpeed edaa722 with the optimizer on "
       "NVMe skips _load_zero_checkpoint, engine.py:4332)"},
      {Defect::kUnswappedSubGroupResetOnLoad, "unswapped_sub_group_reset_on_load",
       "with the optimizer on NVMe, a sub-group below DeepSpeed's swap threshold (per-rank elements x 4 bytes < "
       "max(1 MiB, aio.block_size)) lives in memory, is never read back from the checkpoint, and resumes with the "
       "new process's initial weights (DeepSpeed edaa722 stage3.py:1214-1218, engine.py:4332)"},
      {Defect::kOtherWorldSizeRefused, "other_world_size_refused",
       "a checkpoint saved at another world size is refused: no resharding of the ZeRO-3 partitions (DeepSpeed "
       "edaa722 engine.py:4627-4633 without a universal checkpoint)"},
  };
  return kDefects;
}

std::optional<Defect> defect_from_name(std::string_view name) {
  for (const DefectInfo& info : all_defects()) {
    if (name == info.name) return info.defect;
  }
  return std::nullopt;
}

const char* defect_name(Defect defect) {
  for (const DefectInfo& info : all_defects()) {
    if (info.defect == defect) return info.name;
  }
  return "?";
}

}  // namespace zerosim
