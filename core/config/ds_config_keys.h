// The key tables of the DeepSpeed config reader: every key DeepSpeed knows in each block, how
// zerosim uses it, its kind and DeepSpeed's default. check_keys (ds_config_keys.cpp) walks them;
// the sections read the keys marked active or read.
#pragma once

#include "core/config/ds_config_reading.h"

namespace zerosim::ds_config_detail {


// Top level: DeepSpeed's own keys (runtime/config.py, runtime/constants.py and the sub-configs
// read from the top level). Whole blocks zerosim does not implement are kInactive objects.
inline constexpr KeySpec kTopLevelKeys[] = {
    {"train_batch_size", Use::kActive},
    {"train_micro_batch_size_per_gpu", Use::kActive},
    {"gradient_accumulation_steps", Use::kActive},
    {"gradient_clipping", Use::kActive},
    {"fp16", Use::kActive},
    {"bf16", Use::kActive},
    {"bfloat16", Use::kLegacy},
    {"optimizer", Use::kActive},
    {"scheduler", Use::kActive},
    {"zero_optimization", Use::kActive},
    {"aio", Use::kActive},
    {"communication_data_type", Use::kActive},
    {"steps_per_print", Use::kRead},
    {"wall_clock_breakdown", Use::kInactive, Kind::kBool, "false"},
    {"memory_breakdown", Use::kInactive, Kind::kBool, "false"},
    {"dump_state", Use::kInactive, Kind::kBool, "false"},
    {"prescale_gradients", Use::kInactive, Kind::kBool, "false", true},
    {"gradient_predivide_factor", Use::kInactive, Kind::kNumber, "1.0", true},
    {"gradient_allreduce_op", Use::kInactive, Kind::kString},
    {"zero_allow_untested_optimizer", Use::kInactive, Kind::kBool, "false"},
    {"zero_force_ds_cpu_optimizer", Use::kInactive, Kind::kBool, "true"},
    {"disable_allgather", Use::kInactive, Kind::kBool, "false"},
    {"allgather_size", Use::kInactive, Kind::kNonNegativeInt, "500000000"},
    {"sparse_gradients", Use::kInactive, Kind::kBool, "false"},
    {"graph_harvesting", Use::kInactive, Kind::kBool, "false"},
    {"dataloader_drop_last", Use::kInactive, Kind::kBool, "false"},
    {"vocabulary_size", Use::kInactive, Kind::kAny},
    {"seq_parallel_comm_data_type", Use::kInactive, Kind::kString},
    {"seq_parallel_communication_data_type", Use::kInactive, Kind::kString},
    {"sequence_parallel_size", Use::kInactive, Kind::kAny},
    {"use_data_before_expert_parallelism", Use::kInactive, Kind::kBool, "false"},
    {"managed_gradient_accumulation", Use::kInactive, Kind::kAny},
    {"log_level", Use::kInactive, Kind::kAny},
    {"amp", Use::kInactive, Kind::kObject},
    {"torch_autocast", Use::kInactive, Kind::kObject},
    {"activation_checkpointing", Use::kInactive, Kind::kObject},
    {"flops_profiler", Use::kInactive, Kind::kObject},
    {"tensorboard", Use::kInactive, Kind::kObject},
    {"wandb", Use::kInactive, Kind::kObject},
    {"csv_monitor", Use::kInactive, Kind::kObject},
    {"comet", Use::kInactive, Kind::kObject},
    {"comms_logger", Use::kInactive, Kind::kObject},
    {"checkpoint", Use::kActive},
    {"zerosim", Use::kActive},
    {"data_types", Use::kInactive, Kind::kObject},
    {"compile", Use::kInactive, Kind::kObject},
    {"sparse_attention", Use::kInactive, Kind::kObject},
    {"elasticity", Use::kInactive, Kind::kObject},
    {"pipeline", Use::kInactive, Kind::kObject},
    {"autotuning", Use::kInactive, Kind::kObject},
    {"compression_training", Use::kInactive, Kind::kObject},
    {"quantize_training", Use::kInactive, Kind::kObject},
    {"progressive_layer_drop", Use::kInactive, Kind::kObject},
    {"curriculum_learning", Use::kInactive, Kind::kObject},
    {"data_efficiency", Use::kInactive, Kind::kObject},
    {"hybrid_engine", Use::kInactive, Kind::kObject},
    {"eigenvalue", Use::kInactive, Kind::kObject},
    {"nebula", Use::kInactive, Kind::kObject},
    {"datastates", Use::kInactive, Kind::kObject},
    {"weight_quantization", Use::kInactive, Kind::kObject},
    {"timers", Use::kInactive, Kind::kObject},
    {"tensor_parallel", Use::kInactive, Kind::kObject},
    {"expert_parallel", Use::kInactive, Kind::kObject},
};

// zero_optimization (DeepSpeedZeroConfig). Pydantic aliases and field names are both accepted
// (populate_by_name); the resolved document uses the alias, the name users write.
inline constexpr KeySpec kZeroKeys[] = {
    {"stage", Use::kActive},
    {"sub_group_size", Use::kActive},
    {"offload_optimizer", Use::kActive},
    {"offload_param", Use::kActive},
    {"reduce_bucket_size", Use::kRead},
    {"allgather_bucket_size", Use::kRead},
    {"stage3_prefetch_bucket_size", Use::kRead},
    {"prefetch_bucket_size", Use::kRead},
    {"stage3_param_persistence_threshold", Use::kRead},
    {"param_persistence_threshold", Use::kRead},
    {"stage3_max_live_parameters", Use::kRead},
    {"max_live_parameters", Use::kRead},
    {"stage3_max_reuse_distance", Use::kRead},
    {"max_reuse_distance", Use::kRead},
    {"stage3_gather_16bit_weights_on_model_save", Use::kRead},
    {"gather_16bit_weights_on_model_save", Use::kRead},
    {"overlap_comm", Use::kRead},
    {"contiguous_gradients", Use::kRead},
    {"cpu_offload", Use::kLegacy},
    {"cpu_offload_param", Use::kLegacy},
    {"cpu_offload_use_pin_memory", Use::kLegacy},
    {"stage3_gather_fp16_weights_on_model_save", Use::kLegacy},
    {"reduce_scatter", Use::kInactive, Kind::kBool, "true"},
    {"use_multi_rank_bucket_allreduce", Use::kInactive, Kind::kBool, "true"},
    {"allgather_partitions", Use::kInactive, Kind::kBool, "true"},
    {"load_from_fp32_weights", Use::kInactive, Kind::kBool, "true"},
    {"elastic_checkpoint", Use::kInactive, Kind::kBool, "false"},
    {"stage3_model_persistence_threshold", Use::kInactive, Kind::kNonNegativeInt, "9223372036854775807"},
    {"model_persistence_threshold", Use::kInactive, Kind::kNonNegativeInt, "9223372036854775807"},
    {"stage3_module_granularity_threshold", Use::kInactive, Kind::kInt, "0"},
    {"module_granularity_threshold", Use::kInactive, Kind::kInt, "0"},
    {"stage3_use_all_reduce_for_fetch_params", Use::kInactive, Kind::kBool, "false"},
    {"use_all_reduce_for_fetch_params", Use::kInactive, Kind::kBool, "false"},
    {"stage3_allgather_sequential", Use::kInactive, Kind::kBool, "false"},
    {"allgather_sequential", Use::kInactive, Kind::kBool, "false"},
    {"ignore_unused_parameters", Use::kInactive, Kind::kBool, "true"},
    {"legacy_stage1", Use::kInactive, Kind::kBool, "false"},
    {"round_robin_gradients", Use::kInactive, Kind::kBool, "false"},
    {"zero_hpz_partition_size", Use::kInactive, Kind::kNonNegativeInt, "1", true},
    {"zero_quantized_weights", Use::kInactive, Kind::kBool, "false", true},
    {"zero_quantized_nontrainable_weights", Use::kInactive, Kind::kBool, "false", true},
    {"zero_quantized_gradients", Use::kInactive, Kind::kBool, "false", true},
    {"zeropp_loco_param", Use::kInactive, Kind::kObjectOrNull, "null", true},
    {"mics_shard_size", Use::kInactive, Kind::kInt, "-1", true},
    {"mics_hierarchical_params_gather", Use::kInactive, Kind::kBool, "false"},
    {"memory_efficient_linear", Use::kInactive, Kind::kBool, "true"},
    {"pipeline_loading_checkpoint", Use::kInactive, Kind::kBool, "false"},
    {"override_module_apply", Use::kInactive, Kind::kBool, "true"},
    {"log_trace_cache_warnings", Use::kInactive, Kind::kBool, "false"},
    {"enable_sanity_checks", Use::kInactive, Kind::kBool, "false"},
    {"save_muon_momentum_buffer_in_memory", Use::kInactive, Kind::kBool, "false"},
    {"zenflow", Use::kInactive, Kind::kObjectOrNull, "null", true},
    {"leaf_module", Use::kInactive, Kind::kObject, "{}"},
};

// offload_optimizer (DeepSpeedZeroOffloadOptimizerConfig).
inline constexpr KeySpec kOffloadOptimizerKeys[] = {
    {"device", Use::kActive},
    {"nvme_path", Use::kActive},
    {"buffer_count", Use::kActive},
    {"pipeline_read", Use::kActive},
    {"pipeline_write", Use::kActive},
    {"pin_memory", Use::kRead},
    {"fast_init", Use::kRead},
    {"ratio", Use::kRead},
    {"super_offload", Use::kInactive, Kind::kBool, "false"},
    {"cpuadam_cores_perc", Use::kInactive, Kind::kUnitInterval, "0.8"},
};

// offload_param (DeepSpeedZeroOffloadParamConfig).
inline constexpr KeySpec kOffloadParamKeys[] = {
    {"device", Use::kActive},
    {"nvme_path", Use::kActive},
    {"buffer_count", Use::kActive},
    {"buffer_size", Use::kActive},
    {"max_in_cpu", Use::kRead},
    {"pin_memory", Use::kRead},
};

// fp16 (DeepSpeedFP16Config).
inline constexpr KeySpec kFp16Keys[] = {
    {"enabled", Use::kActive},
    {"loss_scale", Use::kActive},
    {"initial_scale_power", Use::kActive},
    {"loss_scale_window", Use::kActive},
    {"hysteresis", Use::kActive},
    {"consecutive_hysteresis", Use::kActive},
    {"min_loss_scale", Use::kActive},
    {"auto_cast", Use::kInactive, Kind::kBool, "false"},
    {"fp16_master_weights_and_grads", Use::kInactive, Kind::kBool, "false", true},
};

// bf16 (DeepSpeedBF16Config).
inline constexpr KeySpec kBf16Keys[] = {
    {"enabled", Use::kActive},
    {"immediate_grad_update", Use::kInactive, Kind::kBool, "false"},
    {"check_grad_overflow", Use::kInactive, Kind::kBool, "true"},
    {"bf16_master_weights_and_grads", Use::kInactive, Kind::kBool, "false", true},
    {"bf16_optimizer_states", Use::kInactive, Kind::kBool, "false", true},
};

// aio (swap_tensor/aio_config.py reads exactly these; anything else is ignored).
inline constexpr KeySpec kAioKeys[] = {
    {"block_size", Use::kActive},
    {"queue_depth", Use::kActive},
    {"intra_op_parallelism", Use::kActive},
    {"single_submit", Use::kActive},
    {"overlap_events", Use::kActive},
    {"use_gds", Use::kRead},
    {"thread_count", Use::kLegacy},
};

// checkpoint (DeepSpeed reads the first four with dict lookups and ignores the rest; the last
// two are zerosim's).
inline constexpr KeySpec kCheckpointKeys[] = {
    {"tag_validation", Use::kRead},
    {"load_universal", Use::kInactive, Kind::kBool, "false"},
    {"use_node_local_storage", Use::kInactive, Kind::kBool, "false"},
    {"parallel_write", Use::kInactive, Kind::kObject},
    {"writer", Use::kActive},
    {"async_save", Use::kActive},
    {"keep_last", Use::kActive},
};

// checkpoint.writer (model_checkpointing/config.py get_checkpoint_writer_config reads these).
inline constexpr KeySpec kCheckpointWriterKeys[] = {
    {"type", Use::kActive},
    {"io_buffer_size", Use::kActive},
    {"io_buffer_double", Use::kActive},
    {"io_multiplier", Use::kInactive, Kind::kInt, "1"},
    {"show_statistics", Use::kInactive, Kind::kBool, "false"},
    {"data_parallel", Use::kInactive, Kind::kAny, "null"},
    {"decoupled", Use::kInactive, Kind::kBool, "false"},
};

// zerosim's own block (DeepSpeed ignores a top-level key it does not know).
inline constexpr KeySpec kZerosimKeys[] = {
    {"numerics", Use::kActive},
    {"deepspeed_release", Use::kActive},
};

inline constexpr KeySpec kOptimizerBlockKeys[] = {
    {"type", Use::kActive},
    {"params", Use::kActive},
    {"legacy_fusion", Use::kInactive, Kind::kBool, "false"},
};

// optimizer.params for Adam/AdamW: the keyword arguments of FusedAdam / DeepSpeedCPUAdam /
// torch.optim.Adam(W) plus the two that the engine pops (torch_adam, adam_w_mode).
inline constexpr KeySpec kAdamParamKeys[] = {
    {"lr", Use::kActive},
    {"betas", Use::kActive},
    {"eps", Use::kActive},
    {"weight_decay", Use::kActive},
    {"bias_correction", Use::kActive},
    {"adam_w_mode", Use::kActive},
    {"torch_adam", Use::kRead},
    {"amsgrad", Use::kRead},
    {"max_grad_norm", Use::kRead},
    {"fp32_optimizer_states", Use::kInactive, Kind::kBool, "true"},
    {"set_grad_none", Use::kRead},
};

inline constexpr KeySpec kSchedulerBlockKeys[] = {
    {"type", Use::kActive},
    {"params", Use::kActive},
};

// scheduler.params: the constructor arguments of each supported schedule (lr_schedules.py).
inline constexpr KeySpec kWarmupLRKeys[] = {
    {"warmup_min_lr", Use::kActive},
    {"warmup_max_lr", Use::kActive},
    {"warmup_num_steps", Use::kActive},
    {"warmup_type", Use::kActive},
    {"last_batch_iteration", Use::kRead},
};
inline constexpr KeySpec kWarmupDecayLRKeys[] = {
    {"total_num_steps", Use::kActive},
    {"warmup_min_lr", Use::kActive},
    {"warmup_max_lr", Use::kActive},
    {"warmup_num_steps", Use::kActive},
    {"warmup_type", Use::kActive},
    {"last_batch_iteration", Use::kRead},
};
inline constexpr KeySpec kWarmupCosineLRKeys[] = {
    {"total_num_steps", Use::kActive},
    {"warmup_min_ratio", Use::kActive},
    {"warmup_num_steps", Use::kActive},
    {"cos_min_ratio", Use::kActive},
    {"warmup_type", Use::kActive},
    {"last_batch_iteration", Use::kRead},
};

}  // namespace zerosim::ds_config_detail
