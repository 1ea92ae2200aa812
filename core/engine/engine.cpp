#include "core/engine/engine.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/checkpoint/commit.h"
#include "core/checkpoint/manifest.h"
#include "core/model/gpt.h"
#include "core/optim/grad_clip.h"
#include "core/zero/exact_square_sum.h"

namespace zerosim {

// The swap engines take the top-level "aio" block as it is.
static AsyncIoOptions async_io_options_from(const AioConfig& aio) {
  AsyncIoOptions options;
  options.block_size_bytes = aio.block_size;
  options.queue_depth = aio.queue_depth;
  options.intra_op_parallelism = aio.intra_op_parallelism;
  options.single_submit = aio.single_submit;
  options.overlap_events = aio.overlap_events;
  return options;
}

AdamHyperparameters adam_hyperparameters_from(const ResolvedConfig& config, double learning_rate) {
  AdamHyperparameters hyperparameters;
  hyperparameters.learning_rate = static_cast<float>(learning_rate);
  hyperparameters.beta1 = static_cast<float>(config.optimizer.beta1);
  hyperparameters.beta2 = static_cast<float>(config.optimizer.beta2);
  hyperparameters.epsilon = static_cast<float>(config.optimizer.epsilon);
  hyperparameters.weight_decay = static_cast<float>(config.optimizer.weight_decay);
  hyperparameters.adamw_mode = config.optimizer.adam_w_mode;
  hyperparameters.bias_correction = config.optimizer.bias_correction;
  return hyperparameters;
}

DatasetSpec dataset_for_model(const ModelSpec& model, int64_t sample_count, uint64_t seed) {
  DatasetSpec data;
  data.sample_count = sample_count;
  data.seed = seed;
  if (model.gpt) {
    data.feature_count = model.gpt->block;
    data.class_count = model.gpt->vocab;
  } else {
    data.feature_count = model.layer_widths.front();
    data.class_count = model.layer_widths.back();
  }
  return data;
}

uint64_t estimate_rank_memory_bytes(const TrainingOptions& options) {
  // Saturating arithmetic in long double: the point is to refuse absurd sizes, not to overflow.
  const long double world = options.world_size;
  long double total_elements = 0, largest_layer = 0;
  const std::vector<ParameterInfo> parameters = model_parameters(options.model);
  std::vector<long double> layer_elements;
  for (const ParameterInfo& parameter : parameters) {
    if (static_cast<size_t>(parameter.layer_index) >= layer_elements.size()) {
      layer_elements.resize(static_cast<size_t>(parameter.layer_index) + 1, 0.0L);
    }
    layer_elements[static_cast<size_t>(parameter.layer_index)] += static_cast<long double>(parameter.element_count);
    total_elements += static_cast<long double>(parameter.element_count);
  }
  for (long double elements : layer_elements) largest_layer = std::max(largest_layer, elements);
  // Activations kept from the forward for the backward, per micro-batch, in fp32 elements.
  long double activation_elements = 0;
  const long double micro_batch = static_cast<long double>(options.config.micro_batch_size);
  if (const std::optional<GptSpec>& gpt = options.model.gpt) {
    const long double rows = micro_batch * static_cast<long double>(options.data.feature_count);
    const long double e = static_cast<long double>(gpt->embd);
    const long double t = static_cast<long double>(options.data.feature_count);
    activation_elements = static_cast<long double>(gpt->layers) *
                              (rows * 22 * e + micro_batch * static_cast<long double>(gpt->heads) * t * t) +
                          rows * (static_cast<long double>(gpt->vocab) + 8 * e);
    // wte's gradient is held from the head's backward to the embeddings'.
    activation_elements += static_cast<long double>(gpt->vocab) * e;
  } else {
    for (size_t l = 0; l + 1 < options.model.layer_widths.size(); ++l) {
      activation_elements += micro_batch * static_cast<long double>(options.model.layer_widths[l] +
                                                                    2 * options.model.layer_widths[l + 1] + 2);
    }
  }
  const long double partition_elements = total_elements / world + static_cast<long double>(parameters.size());
  // In memory: master, m, v and the gradient (16 B) unless they are swapped, and the 16-bit
  // parameters (up to 4 B) unless they are; swapping adds staging buffers of sub-group size.
  const bool optimizer_on_nvme = options.config.zero.offload_optimizer.device == OffloadDevice::kNvme;
  const bool params_on_nvme = options.config.zero.offload_param.device == OffloadDevice::kNvme;
  const long double sub_group = std::min<long double>(partition_elements,
                                                      static_cast<long double>(options.config.zero.sub_group_size));
  const long double flat_bytes =
      (optimizer_on_nvme ? sub_group * 4 * 3 * 3 + largest_layer * 4 : partition_elements * 16) +
      (params_on_nvme ? largest_layer * 4 : partition_elements * 4);
  const long double gathered_layer_bytes = (largest_layer + world) * 4 * 3;       // receive + fp32 copies + grads
  const long double exchange_bytes = (largest_layer + world) * 4 * 2;             // gradient send buffer
  const long double activation_bytes = activation_elements * 4 * 2;
  const long double estimate = flat_bytes + gathered_layer_bytes + exchange_bytes + activation_bytes + (1 << 20);
  return estimate >= 1.8e19L ? UINT64_MAX : static_cast<uint64_t>(estimate);
}

Result<std::vector<ParameterInfo>> training_parameters(const TrainingOptions& options) {
  ZEROSIM_RETURN_IF_ERROR(validate_model_spec(options.model));
  std::vector<ParameterInfo> parameters = model_parameters(options.model);
  for (size_t i = 0; i < options.frozen_parameters.size(); ++i) {
    const std::string& name = options.frozen_parameters[i];
    const auto found = std::find_if(parameters.begin(), parameters.end(),
                                    [&](const ParameterInfo& parameter) { return parameter.name == name; });
    if (found == parameters.end()) {
      std::string names;
      for (const ParameterInfo& parameter : parameters) names += (names.empty() ? "" : ", ") + parameter.name;
      return invalid_argument("frozen parameter '" + name + "': the model " + model_spec_to_string(options.model) +
                              " has no parameter of that name (it has " + names + ")");
    }
    if (!found->requires_grad) return invalid_argument("frozen parameter '" + name + "' is named twice");
    found->requires_grad = false;
  }
  if (std::none_of(parameters.begin(), parameters.end(), [](const ParameterInfo& p) { return p.requires_grad; })) {
    return invalid_argument("every parameter of the model is frozen: nothing is left to train");
  }
  return parameters;
}

Status validate_training_options(const TrainingOptions& options) {
  ZEROSIM_RETURN_IF_ERROR(training_parameters(options).status());
  const ResolvedConfig& config = options.config;
  if (options.world_size < 1 || options.world_size > 4096) {
    return invalid_argument("world size must be in 1..4096, got " + std::to_string(options.world_size));
  }
  if (config.micro_batch_size < 1 || config.gradient_accumulation_steps < 1) {
    return invalid_argument("train_micro_batch_size_per_gpu and gradient_accumulation_steps must be positive");
  }
  if (config.train_batch_size != config.micro_batch_size * config.gradient_accumulation_steps * options.world_size) {
    return invalid_argument("train_batch_size " + std::to_string(config.train_batch_size) +
                            " != train_micro_batch_size_per_gpu " + std::to_string(config.micro_batch_size) +
                            " * gradient_accumulation_steps " + std::to_string(config.gradient_accumulation_steps) +
                            " * world size " + std::to_string(options.world_size));
  }
  if (const std::optional<GptSpec>& gpt = options.model.gpt) {
    if (gpt->vocab < 2 || gpt->vocab > 65536) {
      return invalid_argument("model " + model_spec_to_string(options.model) + ": vocab " + std::to_string(gpt->vocab) +
                              " cannot be trained: tokens are uint16, so the vocabulary must be in 2..65536");
    }
    if (options.data.feature_count < 1 || options.data.feature_count > gpt->block) {
      return invalid_argument("data: sequence length " + std::to_string(options.data.feature_count) +
                              " must be in 1..the model's block " + std::to_string(gpt->block));
    }
    if (options.data.class_count != gpt->vocab) {
      return invalid_argument("data: vocabulary " + std::to_string(options.data.class_count) +
                              " does not match the model's vocab " + std::to_string(gpt->vocab));
    }
  } else {
    if (!options.data.token_file.empty()) {
      return invalid_argument("data: a token file (" + options.data.token_file +
                              ") needs a transformer model (gpt:...); the MLP trains on synthetic samples");
    }
    if (options.data.feature_count != options.model.layer_widths.front()) {
      return invalid_argument("data: feature count " + std::to_string(options.data.feature_count) +
                              " does not match the model's input width " +
                              std::to_string(options.model.layer_widths.front()));
    }
    if (options.data.class_count != options.model.layer_widths.back()) {
      return invalid_argument("data: class count " + std::to_string(options.data.class_count) +
                              " does not match the model's output width " +
                              std::to_string(options.model.layer_widths.back()));
    }
  }
  if (options.data.sample_count < 1) return invalid_argument("data: sample count must be positive");
  if (config.zero.sub_group_size < 1) return invalid_argument("zero_optimization.sub_group_size must be positive");
  ZEROSIM_RETURN_IF_ERROR(validate_adam_hyperparameters(adam_hyperparameters_from(config, config.optimizer.learning_rate)));
  // Every learning rate the schedule can produce must be a finite float.
  for (const auto& [key, value] : {std::pair{"optimizer.params.lr", config.optimizer.learning_rate},
                                   std::pair{"scheduler.params.warmup_min_lr", config.scheduler.warmup_min_lr},
                                   std::pair{"scheduler.params.warmup_max_lr", config.scheduler.warmup_max_lr}}) {
    if (!(value >= 0.0 && value <= static_cast<double>(std::numeric_limits<float>::max()))) {
      return invalid_argument(std::string(key) + ": expected a finite value >= 0 that fits a float, found " +
                              std::to_string(value));
    }
  }
  if (options.memory_limit_bytes > 0) {
    const uint64_t per_rank = estimate_rank_memory_bytes(options);
    const long double total = static_cast<long double>(per_rank) * options.world_size;
    if (total > static_cast<long double>(options.memory_limit_bytes)) {
      return resource_exhausted("the run needs about " + std::to_string(static_cast<double>(total) / 1073741824.0) +
                                " GiB of host memory (" + std::to_string(per_rank) + " bytes per rank x " +
                                std::to_string(options.world_size) + " ranks) but the limit is " +
                                std::to_string(static_cast<double>(options.memory_limit_bytes) / 1073741824.0) +
                                " GiB: reduce the model widths, the micro batch or the world size");
    }
  }
  if (options.simd_path && !simd_path_available(*options.simd_path)) {
    return failed_precondition(std::string("SIMD path ") + simd_path_name(*options.simd_path) +
                               " is not available on this CPU");
  }
  return Status();
}

RankEngine::RankEngine(const TrainingOptions& options, Comm& comm, Env env, Comm* checkpoint_comm)
    : options_(options),
      comm_(comm),
      env_(env),
      checkpoint_comm_(checkpoint_comm),
      sampler_(options.data) {
  if (!options.model.is_transformer()) dataset_.emplace(options.data);
}

RankEngine::~RankEngine() {
  // A background save must not outlive the engine whose swapper and comm it may use. A
  // deferred one (the async_snapshot_not_copied defect) has not started: it is dropped, not
  // run from a destructor.
  if (pending_save_.valid() && pending_save_.wait_for(std::chrono::seconds(0)) != std::future_status::deferred) {
    pending_save_.wait();
  }
}

Status RankEngine::prepare_storage() {
  ZEROSIM_RETURN_IF_ERROR(validate_training_options(options_));
  ZEROSIM_CHECK(comm_.world_size() == options_.world_size, "comm world size differs from the options");
  ZEROSIM_CHECK(env_.disk != nullptr && env_.clock != nullptr && env_.crash_points != nullptr,
                "the Env must provide every seam");
  const ResolvedConfig& config = options_.config;
  model_dtype_ = config.precision;
  communication_dtype_ = config.communication_dtype;
  simd_path_ = options_.simd_path.value_or(best_simd_path());
  if (!compute_) {
    if (options_.compute.factory) {
      ZEROSIM_ASSIGN_OR_RETURN(compute_, options_.compute.factory(comm_.rank(), comm_.world_size(), options_.model));
    } else {
      compute_ = make_cpu_compute_backend(options_.model, simd_path_);
    }
  }
  ZEROSIM_ASSIGN_OR_RETURN(parameters_, training_parameters(options_));
  plan_ = model_plan(options_.model);
  full_gradients_.assign(parameters_.size(), {});
  full_gradient_live_.assign(parameters_.size(), 0);
  if (const std::optional<GptSpec>& gpt = options_.model.gpt) {
    if (!token_data_) {
      TokenDatasetSpec token_spec;
      token_spec.vocab = gpt->vocab;
      token_spec.window = options_.data.feature_count;
      token_spec.seed = options_.data.seed;
      token_spec.file = options_.data.token_file;
      token_spec.sample_count = token_spec.file.empty() ? options_.data.sample_count : 0;
      ZEROSIM_ASSIGN_OR_RETURN(token_data_, TokenDataset::open(token_spec, *env_.disk));
      if (token_data_->sample_count() != options_.data.sample_count) {
        return failed_precondition(options_.data.token_file + ": holds " + std::to_string(token_data_->sample_count()) +
                                   " windows of " + std::to_string(token_spec.window) + " tokens, but the run expects " +
                                   std::to_string(options_.data.sample_count) + " (the file changed?)");
      }
    }
  }
  // The model is built: its buffers take the values a fresh model gives them (a load then
  // restores the persistent ones).
  buffer_infos_ = model_buffers(options_.model);
  buffers_.clear();
  for (size_t b = 0; b < buffer_infos_.size(); ++b) buffers_.push_back(model_buffer_initial_values(options_.model, b));
  if (options_.model.gpt) step_target_counts_.assign(static_cast<size_t>(options_.model.gpt->vocab), 0);
  layout_ = make_partition_layout(parameters_, comm_.world_size(), config.zero.sub_group_size);
  trainable_runs_by_group_.clear();
  for (const SubGroup& group : layout_.sub_groups) trainable_runs_by_group_.push_back(trainable_runs(group));

  const size_t flat = static_cast<size_t>(layout_.flat_element_count);
  const OffloadConfig& offload = config.zero.offload_optimizer;
  swapper_.reset();
  gradient_swapper_.reset();
  param_swapper_.reset();
  if (offload.device == OffloadDevice::kNvme) {
    OptimizerSwapperOptions swap_options;
    swap_options.nvme_path = offload.nvme_path;
    swap_options.run_id = options_.run_id;
    swap_options.rank = comm_.rank();
    swap_options.world_size = comm_.world_size();
    for (const SubGroup& group : layout_.sub_groups) swap_options.sub_group_element_counts.push_back(group.element_count);
    swap_options.aio = async_io_options_from(config.aio);
    swap_options.buffer_count = offload.buffer_count;
    swap_options.pin_memory = offload.pin_memory;
    // Pipelining helps whenever there is more than one sub-group. A flag the config sets is
    // obeyed (and too few buffers for it is an error); a flag it leaves out is switched on when
    // buffer_count has room for it, read-ahead first.
    const nlohmann::json* block = nullptr;
    if (config.input.is_object() && config.input.contains("zero_optimization") &&
        config.input["zero_optimization"].is_object() &&
        config.input["zero_optimization"].contains("offload_optimizer") &&
        config.input["zero_optimization"]["offload_optimizer"].is_object()) {
      block = &config.input["zero_optimization"]["offload_optimizer"];
    }
    pipeline_read_ = offload.pipeline_read;
    bool pipeline_write = offload.pipeline_write;
    const bool several_sub_groups = layout_.sub_groups.size() > 1;
    if ((block == nullptr || !block->contains("pipeline_read")) && several_sub_groups &&
        offload.buffer_count >= minimum_swap_buffer_count(true, pipeline_write)) {
      pipeline_read_ = true;
    }
    if ((block == nullptr || !block->contains("pipeline_write")) && several_sub_groups &&
        offload.buffer_count >= minimum_swap_buffer_count(pipeline_read_, true)) {
      pipeline_write = true;
    }
    swap_options.pipeline_read = pipeline_read_;
    swap_options.pipeline_write = pipeline_write;
    ZEROSIM_ASSIGN_OR_RETURN(swapper_, OptimizerSwapper::create(*env_.disk, swap_options, &swap_engine_note_));
    // As ZeRO-Infinity does, the fp32 gradient partitions go to NVMe with the optimizer state,
    // so host memory does not grow with the model.
    ZEROSIM_ASSIGN_OR_RETURN(gradient_swapper_, make_partition_swapper(offload.nvme_path, DType::kFp32,
                                                                       SwapTensorKind::kGradients, offload.pin_memory,
                                                                       nullptr));
  } else {
    gradient_partition_.assign(flat, 0.0f);
    // "cpu" and no offload both keep the state in host memory: on CPU ranks they are the same.
    master_.assign(flat, 0.0f);
    exp_avg_.assign(flat, 0.0f);
    exp_avg_sq_.assign(flat, 0.0f);
  }

  const OffloadConfig& param_offload = config.zero.offload_param;
  if (param_offload.device == OffloadDevice::kNvme) {
    std::string note;
    ZEROSIM_ASSIGN_OR_RETURN(param_swapper_, make_partition_swapper(param_offload.nvme_path, model_dtype_,
                                                                    SwapTensorKind::kParams, param_offload.pin_memory,
                                                                    &note));
    if (swap_engine_note_.empty()) swap_engine_note_ = note;
  } else {
    param_partition_.assign(flat * dtype_size_bytes(model_dtype_), std::byte{0});
  }

  ZEROSIM_ASSIGN_OR_RETURN(LearningRateScheduler scheduler,
                           LearningRateScheduler::create(config.scheduler, config.optimizer.learning_rate));
  scheduler_.emplace(std::move(scheduler));
  ZEROSIM_ASSIGN_OR_RETURN(LossScaler loss_scaler, LossScaler::from_config(config.loss_scaler, model_dtype_));
  loss_scaler_.emplace(std::move(loss_scaler));
  counters_ = TrainingCounters{};

  // The partitions stay with the backend only where its resident path computes what the host
  // path does (compute_backend.h ResidentState): nothing offloaded, the portable numerics, every
  // parameter trainable, no defect switched on (and, adopt says, ranks that share memory).
  const bool every_parameter_trainable =
      std::all_of(parameters_.begin(), parameters_.end(), [](const ParameterInfo& p) { return p.requires_grad; });
  const bool resident_eligible = config.zero.offload_optimizer.device == OffloadDevice::kNone &&
                                 param_offload.device == OffloadDevice::kNone &&
                                 config.numerics == NumericsMode::kPortable && every_parameter_trainable &&
                                 (env_.defects == nullptr || env_.defects->empty());
  resident_ = resident_eligible ? compute_->resident_state() : nullptr;
  resident_adopted_ = false;
  host_state_stale_ = false;
  return Status();
}

Status RankEngine::adopt_resident_state() {
  if (resident_ == nullptr || resident_adopted_) return Status();
  ZEROSIM_ASSIGN_OR_RETURN(const bool adopted, resident_->adopt(comm_, layout_, model_dtype_, communication_dtype_,
                                                                param_partition_, master_, exp_avg_, exp_avg_sq_));
  if (!adopted) {
    resident_ = nullptr;  // ranks that cannot share device memory: the host path, for the whole run
    return Status();
  }
  resident_adopted_ = true;
  return Status();
}

Status RankEngine::make_host_state_current() {
  if (!host_state_stale_) return Status();
  ZEROSIM_RETURN_IF_ERROR(resident_->copy_to_host(param_partition_, master_, exp_avg_, exp_avg_sq_));
  host_state_stale_ = false;
  return Status();
}

Status RankEngine::initialize() {
  ZEROSIM_RETURN_IF_ERROR(prepare_storage());
  // The fp32 master starts as the 16-bit parameter widened (DeepSpeed builds it from the
  // 16-bit partition), so master and model weights agree from step 0. Built one sub-group at
  // a time, so that with NVMe offload no full-size master ever exists in memory.
  std::vector<float> group_master;
  for (size_t g = 0; g < layout_.sub_groups.size(); ++g) {
    const SubGroup& group = layout_.sub_groups[g];
    initial_master_of_group(group, group_master);
    const size_t offset = static_cast<size_t>(group.flat_offset);
    ZEROSIM_RETURN_IF_ERROR(store_parameters(group, group_master.data(), 0));
    if (swapper_) {
      ZEROSIM_RETURN_IF_ERROR(swapper_->write_initial(static_cast<int>(g), group_master));
    } else {
      std::copy(group_master.begin(), group_master.end(), master_.begin() + static_cast<ptrdiff_t>(offset));
    }
  }
  return Status();
}

void RankEngine::initial_values_of_parameter(int64_t parameter, std::vector<float>& values) const {
  const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(parameter)];
  const int64_t begin = partition.owned_begin(comm_.rank());
  values.resize(static_cast<size_t>(partition.owned_count(comm_.rank())));
  for (size_t k = 0; k < values.size(); ++k) {
    values[k] = round_through(model_dtype_, model_initial_value(options_.model, options_.seed, parameter,
                                                                begin + static_cast<int64_t>(k)));
  }
}

void RankEngine::initial_master_of_group(const SubGroup& group, std::vector<float>& group_master) const {
  group_master.assign(static_cast<size_t>(group.element_count), 0.0f);
  std::vector<float> values;
  for (int64_t p = group.first_parameter; p < group.end_parameter; ++p) {
    initial_values_of_parameter(p, values);
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    std::copy(values.begin(), values.end(), group_master.begin() + (partition.flat_offset - group.flat_offset));
  }
}

std::vector<std::pair<size_t, size_t>> RankEngine::trainable_runs(const SubGroup& group) const {
  std::vector<std::pair<size_t, size_t>> runs;
  const bool step_frozen = defect_active(env_.defects, Defect::kFrozenParametersStepped);
  for (int64_t p = group.first_parameter; p < group.end_parameter; ++p) {
    if (!parameters_[static_cast<size_t>(p)].requires_grad && !step_frozen) continue;
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    const size_t offset = static_cast<size_t>(partition.flat_offset - group.flat_offset);
    const size_t count = static_cast<size_t>(partition.partition_size);
    if (!runs.empty() && runs.back().first + runs.back().second == offset) {
      runs.back().second += count;
    } else {
      runs.emplace_back(offset, count);
    }
  }
  return runs;
}

double RankEngine::next_step_learning_rate() const {
  return optimizer_learning_rate_ ? *optimizer_learning_rate_ : scheduler_->current_lr();
}

std::string CheckpointLoadOptions::describe() const {
  std::string text;
  auto add = [&](const std::string& item) { text += (text.empty() ? "" : ", ") + item; };
  if (!optimizer_states) add("load_optimizer_states=false");
  if (!lr_scheduler_states) add("load_lr_scheduler_states=false");
  if (module_only) add("load_module_only=true");
  return text;
}

Result<std::unique_ptr<PartitionSwapper>> RankEngine::make_partition_swapper(const std::string& nvme_path, DType dtype,
                                                                            SwapTensorKind kind, bool pin_memory,
                                                                            std::string* engine_note) {
  PartitionSwapperOptions swap_options;
  swap_options.nvme_path = nvme_path;
  swap_options.run_id = options_.run_id;
  swap_options.rank = comm_.rank();
  swap_options.world_size = comm_.world_size();
  for (const ParameterPartition& partition : layout_.parameters) {
    swap_options.partition_element_counts.push_back(partition.partition_size);
  }
  swap_options.dtype = dtype;
  swap_options.kind = kind;
  swap_options.aio = async_io_options_from(options_.config.aio);
  swap_options.pin_memory = pin_memory;
  return PartitionSwapper::create(*env_.disk, swap_options, engine_note);
}

Status RankEngine::store_parameters(const SubGroup& group, const float* master, int64_t step) {
  const size_t element_bytes = dtype_size_bytes(model_dtype_);
  const size_t offset = static_cast<size_t>(group.flat_offset);
  if (!param_swapper_) {
    cast_from_fp32(model_dtype_, master, param_partition_.data() + offset * element_bytes,
                   static_cast<size_t>(group.element_count));
    return Status();
  }
  for (int64_t p = group.first_parameter; p < group.end_parameter; ++p) {
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    param_bytes_scratch_.resize(static_cast<size_t>(partition.partition_size) * element_bytes);
    cast_from_fp32(model_dtype_, master + (partition.flat_offset - group.flat_offset), param_bytes_scratch_.data(),
                   static_cast<size_t>(partition.partition_size));
    ZEROSIM_RETURN_IF_ERROR(param_swapper_->write(static_cast<int>(p), step, param_bytes_scratch_));
  }
  return Status();
}

Status RankEngine::gather_parameters(ParameterRange range, std::vector<std::vector<float>>& full_parameters) {
  const ParameterPartition& first = layout_.parameters[static_cast<size_t>(range.first)];
  const ParameterPartition& last = layout_.parameters[static_cast<size_t>(range.end - 1)];
  const int64_t range_flat_offset = first.flat_offset;
  const size_t element_bytes = dtype_size_bytes(model_dtype_);
  const size_t chunk_bytes =
      static_cast<size_t>(last.flat_offset + last.partition_size - range_flat_offset) * element_bytes;
  std::span<const std::byte> send;
  if (param_swapper_) {
    // The partitions come from their swap files, right before the gather needs them.
    gather_send_.resize(chunk_bytes);
    for (int64_t p = range.first; p < range.end; ++p) {
      const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
      ZEROSIM_RETURN_IF_ERROR(param_swapper_->read(
          static_cast<int>(p), counters_.optimizer_steps,
          std::span<std::byte>(gather_send_.data() + (partition.flat_offset - range_flat_offset) * element_bytes,
                               static_cast<size_t>(partition.partition_size) * element_bytes)));
    }
    send = gather_send_;
  } else {
    send = std::span<const std::byte>(param_partition_.data() + range_flat_offset * element_bytes, chunk_bytes);
  }
  gather_receive_.resize(chunk_bytes * static_cast<size_t>(comm_.world_size()));
  ZEROSIM_RETURN_IF_ERROR(comm_.all_gather(send, gather_receive_));
  full_parameters.resize(static_cast<size_t>(range.size()));
  for (int64_t p = range.first; p < range.end; ++p) {
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    std::vector<float>& full = full_parameters[static_cast<size_t>(p - range.first)];
    full.resize(static_cast<size_t>(partition.element_count));
    for (int source = 0; source < comm_.world_size(); ++source) {
      const int64_t count = partition.owned_count(source);
      if (count == 0) continue;
      const std::byte* slice = gather_receive_.data() + static_cast<size_t>(source) * chunk_bytes +
                               static_cast<size_t>(partition.flat_offset - range_flat_offset) * element_bytes;
      cast_to_fp32(model_dtype_, slice, full.data() + partition.owned_begin(source), static_cast<size_t>(count));
    }
  }
  return Status();
}

Status RankEngine::exchange_layer_gradient(int64_t micro_step_index, size_t chunk_elements,
                                           std::span<float> accumulator) {
  if (options_.config.numerics == NumericsMode::kPortable) {
    return comm_.reduce_scatter_accumulate(scatter_send_, communication_dtype_, chunk_elements, accumulator);
  }
  // DeepSpeed's reduce-scatter: every rank's chunk for this rank, summed in the communication
  // dtype, one rounding per add. The chunks reach their owner by one gather per owner (an
  // all-to-all: the bytes a ring moves), and the owner adds them in rank order. NCCL's ring
  // adds them in its ring's order; for W <= 2 the order cannot change the sum.
  const int world_size = comm_.world_size();
  const size_t chunk_bytes = chunk_elements * dtype_size_bytes(communication_dtype_);
  std::vector<std::byte>& received = gradient_chunks_scratch_;
  received.resize(chunk_bytes * static_cast<size_t>(world_size));
  for (int owner = 0; owner < world_size; ++owner) {
    const std::span<const std::byte> chunk(scatter_send_.data() + static_cast<size_t>(owner) * chunk_bytes, chunk_bytes);
    ZEROSIM_RETURN_IF_ERROR(comm_.gather(chunk, owner == comm_.rank() ? std::span<std::byte>(received)
                                                                       : std::span<std::byte>(), owner));
  }
  std::vector<float>& sum = gradient_sum_scratch_;
  std::vector<float>& contribution = gradient_contribution_scratch_;
  sum.resize(chunk_elements);
  contribution.resize(chunk_elements);
  cast_to_fp32(communication_dtype_, received.data(), sum.data(), chunk_elements);
  for (int source = 1; source < world_size; ++source) {
    cast_to_fp32(communication_dtype_, received.data() + static_cast<size_t>(source) * chunk_bytes,
                 contribution.data(), chunk_elements);
    for (size_t i = 0; i < chunk_elements; ++i) sum[i] = round_through(communication_dtype_, sum[i] + contribution[i]);
  }
  // Accumulated over the micro-steps in the model dtype (grad_accum_dtype's default): the
  // first micro-step copies, the others add with one rounding each.
  for (size_t i = 0; i < chunk_elements; ++i) {
    const float reduced = round_through(model_dtype_, sum[i]);
    accumulator[i] = micro_step_index == 0 ? reduced : round_through(model_dtype_, accumulator[i] + reduced);
  }
  return Status();
}

Status RankEngine::reduce_scatter_layer(int64_t layer_index, int64_t micro_step_index,
                                        std::span<const std::vector<float>> full_gradients) {
  const LayerRange& layer = layout_.layers[static_cast<size_t>(layer_index)];
  const size_t element_bytes = dtype_size_bytes(communication_dtype_);
  const size_t chunk_elements = static_cast<size_t>(layer.element_count);
  const int world_size = comm_.world_size();
  // Every byte of the send buffer is written below (padding included), so it is only resized.
  scatter_send_.resize(chunk_elements * element_bytes * static_cast<size_t>(world_size));
  std::vector<float>& padded_slice = padded_slice_scratch_;
  for (int owner = 0; owner < world_size; ++owner) {
    for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
      const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
      const std::vector<float>& full = full_gradients[static_cast<size_t>(p - layer.first_parameter)];
      padded_slice.resize(static_cast<size_t>(partition.partition_size));
      // A frozen parameter's gradient is not kept (requires_grad=False): its partition of the
      // accumulator stays zero, so it adds nothing to the norm or the overflow check.
      const int64_t owned = parameters_[static_cast<size_t>(p)].requires_grad ? partition.owned_count(owner) : 0;
      std::copy_n(full.begin() + partition.owned_begin(owner), owned, padded_slice.begin());
      std::fill(padded_slice.begin() + owned, padded_slice.end(), 0.0f);
      if (options_.config.numerics == NumericsMode::kDeepSpeed) {
        // param.grad in the model dtype, cast to the communication dtype, then
        // reduce_scatter_coalesced's div_(W) in that dtype, before the sum. Each op computed
        // in fp32 and rounded once is the dtype's own correctly rounded op (fp32 has more than
        // 2p + 2 bits for fp16 and bf16), as PyTorch computes half ops.
        const float world = static_cast<float>(world_size);
        for (float& value : padded_slice) {
          const float in_comm_dtype = round_through(communication_dtype_, round_through(model_dtype_, value));
          value = round_through(communication_dtype_, in_comm_dtype / world);
        }
      }
      std::byte* destination = scatter_send_.data() +
                               (static_cast<size_t>(owner) * chunk_elements +
                                static_cast<size_t>(partition.flat_offset - layer.flat_offset)) *
                                   element_bytes;
      cast_from_fp32(communication_dtype_, padded_slice.data(), destination, padded_slice.size());
    }
  }
  if (!gradient_swapper_) {
    return exchange_layer_gradient(
        micro_step_index, chunk_elements, std::span<float>(gradient_partition_.data() + layer.flat_offset, chunk_elements));
  }
  // Gradients on NVMe: the layer's accumulated partitions are read (zeros at micro-step 0),
  // accumulated into and written back; at the last micro-step the overflow and norm bins are
  // taken from the final values, so the optimizer step need not read them twice.
  std::vector<float>& accumulator = gradient_layer_scratch_;
  accumulator.resize(chunk_elements);
  const int64_t accumulation = options_.config.gradient_accumulation_steps;
  const int64_t version = counters_.global_steps * accumulation + micro_step_index;
  auto partition_bytes = [&](int64_t p) {
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    return std::span<std::byte>(reinterpret_cast<std::byte*>(accumulator.data() + (partition.flat_offset - layer.flat_offset)),
                                static_cast<size_t>(partition.partition_size) * sizeof(float));
  };
  if (micro_step_index == 0) {
    std::fill(accumulator.begin(), accumulator.end(), 0.0f);
  } else {
    for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
      ZEROSIM_RETURN_IF_ERROR(gradient_swapper_->read(static_cast<int>(p), version - 1, partition_bytes(p)));
    }
  }
  ZEROSIM_RETURN_IF_ERROR(exchange_layer_gradient(micro_step_index, chunk_elements, accumulator));
  for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
    ZEROSIM_RETURN_IF_ERROR(gradient_swapper_->write(static_cast<int>(p), version, partition_bytes(p)));
  }
  if (micro_step_index + 1 == accumulation) step_gradient_squares_.add_squares(accumulator);
  return Status();
}

Result<MicroBatchInput> RankEngine::load_micro_batch(int64_t first_position) {
  const int64_t micro_batch = options_.config.micro_batch_size;
  MicroBatchInput batch;
  batch.samples = micro_batch;
  if (token_data_) {
    const int64_t window = options_.data.feature_count;
    micro_batch_tokens_.resize(static_cast<size_t>(micro_batch * (window + 1)));
    for (int64_t s = 0; s < micro_batch; ++s) {
      const int64_t sample = sampler_.sample_at(first_position + s);
      ZEROSIM_RETURN_IF_ERROR(token_data_->tokens(
          sample, std::span<int32_t>(micro_batch_tokens_.data() + s * (window + 1), static_cast<size_t>(window + 1))));
    }
    // The targets this rank saw, for the running-frequency buffer (every position's next token).
    for (int64_t s = 0; s < micro_batch; ++s) {
      for (int64_t t = 1; t <= window; ++t) {
        ++step_target_counts_[static_cast<size_t>(micro_batch_tokens_[static_cast<size_t>(s * (window + 1) + t)])];
      }
    }
    batch.tokens = micro_batch_tokens_;
    batch.sequence_length = window;
    batch.causal_mask = buffers_[kCausalMaskBuffer];
    return batch;
  }
  const int64_t features = options_.data.feature_count;
  micro_batch_input_.resize(static_cast<size_t>(micro_batch * features));
  micro_batch_labels_.resize(static_cast<size_t>(micro_batch));
  for (int64_t s = 0; s < micro_batch; ++s) {
    const int64_t sample = sampler_.sample_at(first_position + s);
    dataset_->features(sample, &micro_batch_input_[static_cast<size_t>(s * features)]);
    micro_batch_labels_[static_cast<size_t>(s)] = dataset_->label(sample);
  }
  batch.features = micro_batch_input_;
  batch.labels = micro_batch_labels_;
  return batch;
}

void RankEngine::untie_after_load(std::vector<std::vector<float>>& tied_use) {
  if (loaded_checkpoint_step_ < 0 || !defect_active(env_.defects, Defect::kTiedWeightUntiedOnLoad)) return;
  if (untied_head_copy_.empty()) untied_head_copy_ = tied_use[0];
  tied_use[0] = untied_head_copy_;
}

Status RankEngine::resident_backward_stage(int64_t stage, const BackwardStage& step) {
  std::vector<uint8_t> fresh;
  for (int64_t p = step.gradients.first; p < step.gradients.end; ++p) {
    fresh.push_back(full_gradient_live_[static_cast<size_t>(p)] ? 0 : 1);
    full_gradient_live_[static_cast<size_t>(p)] = 1;
  }
  ZEROSIM_RETURN_IF_ERROR(resident_->backward(stage, step.gathered, step.gradients, fresh));
  if (step.completes_layer < 0) return Status();
  const LayerRange& layer = layout_.layers[static_cast<size_t>(step.completes_layer)];
  ZEROSIM_RETURN_IF_ERROR(resident_->reduce_layer(layer));
  for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
    ZEROSIM_CHECK(full_gradient_live_[static_cast<size_t>(p)], "a layer's gradients are all written before its exchange");
    full_gradient_live_[static_cast<size_t>(p)] = 0;
  }
  return Status();
}

Result<float> RankEngine::micro_step(int64_t micro_step_index) {
  const ResolvedConfig& config = options_.config;
  const int64_t micro_batch = config.micro_batch_size;
  const int64_t global_micro_batch = micro_step_index * comm_.world_size() + comm_.rank();
  const int64_t first_position = counters_.global_samples + global_micro_batch * micro_batch;
  ZEROSIM_ASSIGN_OR_RETURN(const MicroBatchInput batch, load_micro_batch(first_position));
  // No gradient is live at a micro-batch's start (a micro-step that failed midway left some).
  std::fill(full_gradient_live_.begin(), full_gradient_live_.end(), 0);
  ZEROSIM_RETURN_IF_ERROR(compute_->begin_micro_batch(batch));

  // A stage's gathered weights live in one scratch buffer that the next stage's gather
  // overwrites: at most one stage's full weights exist at a time, as ZeRO-3's release after use
  // promises, without a fresh allocation (and page faults) per stage and micro-step.
  std::vector<std::vector<float>>& stage_parameters = stage_parameters_scratch_;
  for (size_t stage = 0; stage < plan_.forward.size(); ++stage) {
    const ParameterRange gathered = plan_.forward[stage].gathered;
    if (resident_ != nullptr) {
      ZEROSIM_RETURN_IF_ERROR(resident_->forward(static_cast<int64_t>(stage), gathered));
      continue;
    }
    if (!gathered.empty()) ZEROSIM_RETURN_IF_ERROR(gather_parameters(gathered, stage_parameters));
    if (plan_.forward[stage].tied_reuse) untie_after_load(stage_parameters);
    ZEROSIM_RETURN_IF_ERROR(compute_->forward(static_cast<int64_t>(stage),
                                              std::span<const std::vector<float>>(stage_parameters.data(),
                                                                                  static_cast<size_t>(gathered.size()))));
  }

  // Portable: the gradient of loss_scale * mean loss over the global batch's predictions (one
  // per sample, or one per position of a transformer's window), each carrying loss_scale /
  // (train_batch_size x positions), the same at every W. DeepSpeed: the backward of loss * S
  // seeded with S, divided by G by the engine's hook on the model output, then by the micro-
  // batch's prediction count by the mean, in fp32; W divides later, in the reduce-scatter.
  const float loss_scale = static_cast<float>(loss_scaler_->loss_scale());
  const int64_t positions_per_sample = token_data_ ? options_.data.feature_count : 1;
  const float gradient_scale =
      config.numerics == NumericsMode::kDeepSpeed
          ? (loss_scale / static_cast<float>(config.gradient_accumulation_steps)) /
                static_cast<float>(micro_batch * positions_per_sample)
          : loss_scale / static_cast<float>(config.train_batch_size * positions_per_sample);
  ZEROSIM_ASSIGN_OR_RETURN(const float loss, compute_->loss(gradient_scale));

  for (size_t stage = 0; stage < plan_.backward.size(); ++stage) {
    const BackwardStage& step = plan_.backward[stage];
    if (resident_ != nullptr) {
      ZEROSIM_RETURN_IF_ERROR(resident_backward_stage(static_cast<int64_t>(stage), step));
      continue;
    }
    if (!step.gathered.empty()) ZEROSIM_RETURN_IF_ERROR(gather_parameters(step.gathered, stage_parameters));
    if (step.tied_reuse) untie_after_load(stage_parameters);
    for (int64_t p = step.gradients.first; p < step.gradients.end; ++p) {
      if (full_gradient_live_[static_cast<size_t>(p)]) continue;
      std::vector<float>& gradient = full_gradients_[static_cast<size_t>(p)];
      if (!gradient_buffer_pool_.empty()) {
        gradient.swap(gradient_buffer_pool_.back());
        gradient_buffer_pool_.pop_back();
      }
      gradient.assign(static_cast<size_t>(parameters_[static_cast<size_t>(p)].element_count), 0.0f);
      full_gradient_live_[static_cast<size_t>(p)] = 1;
    }
    ZEROSIM_RETURN_IF_ERROR(compute_->backward(
        static_cast<int64_t>(stage),
        std::span<const std::vector<float>>(stage_parameters.data(), static_cast<size_t>(step.gathered.size())),
        std::span<std::vector<float>>(full_gradients_.data() + step.gradients.first,
                                      static_cast<size_t>(step.gradients.size()))));
    if (step.completes_layer < 0) continue;
    const LayerRange& layer = layout_.layers[static_cast<size_t>(step.completes_layer)];
    ZEROSIM_RETURN_IF_ERROR(reduce_scatter_layer(
        step.completes_layer, micro_step_index,
        std::span<const std::vector<float>>(full_gradients_.data() + layer.first_parameter,
                                            static_cast<size_t>(layer.end_parameter - layer.first_parameter))));
    for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
      ZEROSIM_CHECK(full_gradient_live_[static_cast<size_t>(p)], "a layer's gradients are all written before its exchange");
      full_gradient_live_[static_cast<size_t>(p)] = 0;
      gradient_buffer_pool_.push_back(std::move(full_gradients_[static_cast<size_t>(p)]));
      full_gradients_[static_cast<size_t>(p)].clear();
    }
  }
  return loss;
}

Status RankEngine::optimizer_step(StepRecord& record) {
  const ResolvedConfig& config = options_.config;
  const double loss_scale = loss_scaler_->loss_scale();
  record.loss_scale = loss_scale;
  record.learning_rate = next_step_learning_rate();

  // Start reading the first sub-group now, so that the read overlaps the overflow check and
  // the norm. If the step is skipped, the read is adopted by the next step (same state).
  if (swapper_ && pipeline_read_ && !layout_.sub_groups.empty()) {
    ZEROSIM_RETURN_IF_ERROR(swapper_->prefetch(0, counters_.optimizer_steps));
  }
  // Resident partitions: the accumulator's exact bins, taken once for the overflow check and the norm.
  std::optional<ExactSquareSum> resident_squares;
  if (resident_ != nullptr) {
    ZEROSIM_ASSIGN_OR_RETURN(resident_squares, resident_->gradient_squares());
  }
  bool overflow = false;
  if (loss_scaler_->checks_overflow()) {
    const bool local_non_finite = gradient_swapper_    ? step_gradient_squares_.saw_non_finite()
                                  : resident_squares ? resident_squares->saw_non_finite()
                                                     : has_non_finite(gradient_partition_.data(), gradient_partition_.size());
    std::array<double, 1> flag = {local_non_finite ? 1.0 : 0.0};
    ZEROSIM_RETURN_IF_ERROR(comm_.all_reduce_max(flag));
    overflow = flag[0] != 0.0;
  }
  // DeepSpeed's stage 3 updates the scale before it unscales (_overflow_check_and_loss_scale_update,
  // then unscale_and_clip_grads reads self.loss_scale): on a step where the scale doubles, the
  // gradients made with S are divided by 2S. zerosim does the same, in every numerics mode.
  {
    const Status updated = loss_scaler_->update_scale(overflow);
    if (!updated.ok()) {
      std::fill(gradient_partition_.begin(), gradient_partition_.end(), 0.0f);
      if (resident_ != nullptr) ZEROSIM_RETURN_IF_ERROR(resident_->zero_gradients());
      return updated;
    }
  }
  const double unscale_by = loss_scaler_->loss_scale();
  auto finish_step = [&](bool skipped) -> Status {
    std::fill(gradient_partition_.begin(), gradient_partition_.end(), 0.0f);
    if (resident_ != nullptr) ZEROSIM_RETURN_IF_ERROR(resident_->zero_gradients());
    if (!skipped) {
      scheduler_->step();
      optimizer_learning_rate_.reset();  // the scheduler's step sets the optimizer's lr again
    }
    if (skipped) ++counters_.skipped_steps;
    ++counters_.global_steps;
    counters_.global_samples += config.train_batch_size;
    record.skipped = skipped;
    return Status();
  };
  if (overflow) {
    record.grad_norm = -1.0;
    return finish_step(true);
  }

  // Global norm of the scaled gradient: exact per-rank bins, gathered on rank 0, merged there
  // and broadcast (W x 4 KiB on rank 0 only, 4 KiB elsewhere).
  ExactSquareSum local_sum = step_gradient_squares_;  // filled during the reduce-scatter when swapped
  if (resident_squares) {
    local_sum.merge(*resident_squares);
  } else if (!gradient_swapper_) {
    local_sum.add_squares(gradient_partition_);
  }
  constexpr size_t kBinBytes = ExactSquareSum::kSerializedBytes;
  std::vector<std::byte> local_bytes(kBinBytes);
  local_sum.serialize(std::span<std::byte, kBinBytes>(local_bytes.data(), kBinBytes));
  const bool is_root = comm_.rank() == 0;
  std::vector<std::byte> gathered_bytes(is_root ? kBinBytes * static_cast<size_t>(comm_.world_size()) : 0);
  ZEROSIM_RETURN_IF_ERROR(comm_.gather(local_bytes, gathered_bytes, 0));
  std::vector<std::byte> global_bytes(kBinBytes);
  if (is_root) {
    ExactSquareSum merged;
    for (int source = 0; source < comm_.world_size(); ++source) {
      merged.merge(ExactSquareSum::deserialize(
          std::span<const std::byte, kBinBytes>(gathered_bytes.data() + static_cast<size_t>(source) * kBinBytes, kBinBytes)));
    }
    merged.serialize(std::span<std::byte, kBinBytes>(global_bytes.data(), kBinBytes));
  }
  ZEROSIM_RETURN_IF_ERROR(comm_.broadcast(global_bytes, 0));
  const ExactSquareSum global_sum =
      ExactSquareSum::deserialize(std::span<const std::byte, kBinBytes>(global_bytes.data(), kBinBytes));
  // DeepSpeed holds the norm as an fp32 tensor: the exact sum's root, rounded once.
  const float scaled_norm = static_cast<float>(std::sqrt(global_sum.to_double()));
  const bool norm_finite = std::isfinite(scaled_norm);
  // DeepSpeed masks a non-finite norm to -1, which makes the clip factor 1 (§3.4). The norm it
  // reports is the scaled norm over the (updated) scale, in fp32.
  record.grad_norm = norm_finite ? static_cast<double>(scaled_norm / static_cast<float>(unscale_by)) : -1.0;
  const float grad_multiplier =
      compute_unscale_and_clip(norm_finite ? scaled_norm : -1.0f, unscale_by, config.gradient_clipping).grad_multiplier;

  ++counters_.optimizer_steps;
  const AdamStepScalars scalars =
      make_adam_step_scalars(adam_hyperparameters_from(config, record.learning_rate), counters_.optimizer_steps);
  const int64_t previous_step = counters_.optimizer_steps - 1;  // the state the swap files hold
  for (size_t g = 0; g < layout_.sub_groups.size(); ++g) {
    const SubGroup& group = layout_.sub_groups[g];
    const size_t offset = static_cast<size_t>(group.flat_offset);
    const size_t count = static_cast<size_t>(group.element_count);
    float* master = master_.data() + offset;
    float* exp_avg = exp_avg_.data() + offset;
    float* exp_avg_sq = exp_avg_sq_.data() + offset;
    if (swapper_) {
      ZEROSIM_ASSIGN_OR_RETURN(OptimizerSwapper::SubGroupState state,
                               swapper_->acquire(static_cast<int>(g), previous_step));
      // Read the next sub-group while this one computes.
      if (pipeline_read_ && g + 1 < layout_.sub_groups.size()) {
        ZEROSIM_RETURN_IF_ERROR(swapper_->prefetch(static_cast<int>(g + 1), previous_step));
      }
      master = state.master.data();
      exp_avg = state.exp_avg.data();
      exp_avg_sq = state.exp_avg_sq.data();
      env_.crash_points->hit("swap.sub_group_swapped_in", comm_.rank());
    }
    const float* gradient = gradient_swapper_ ? nullptr : gradient_partition_.data() + offset;
    if (gradient_swapper_) {
      gradient_group_scratch_.resize(count);
      const int64_t final_version =
          counters_.global_steps * options_.config.gradient_accumulation_steps + options_.config.gradient_accumulation_steps - 1;
      for (int64_t p = group.first_parameter; p < group.end_parameter; ++p) {
        const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
        ZEROSIM_RETURN_IF_ERROR(gradient_swapper_->read(
            static_cast<int>(p), final_version,
            std::span<std::byte>(reinterpret_cast<std::byte*>(gradient_group_scratch_.data() +
                                                              (partition.flat_offset - group.flat_offset)),
                                 static_cast<size_t>(partition.partition_size) * sizeof(float))));
      }
      gradient = gradient_group_scratch_.data();
    }
    if (resident_ != nullptr) {
      for (const auto& [run_offset, run_count] : trainable_runs_by_group_[g]) {
        ZEROSIM_RETURN_IF_ERROR(resident_->adam_update(scalars, grad_multiplier, offset + run_offset, run_count));
      }
      ZEROSIM_RETURN_IF_ERROR(resident_->store_parameters(offset, count));
      env_.crash_points->hit("optimizer.sub_group_stepped", comm_.rank());
      continue;
    }
    // AdamW over the runs of trainable partitions: a frozen parameter has no optimizer state to
    // step (weight decay included). AdamW is elementwise, so the split cannot change a bit.
    for (const auto& [run_offset, run_count] : trainable_runs_by_group_[g]) {
      ZEROSIM_RETURN_IF_ERROR(compute_->adam_update(scalars, grad_multiplier, master + run_offset, gradient + run_offset,
                                                    exp_avg + run_offset, exp_avg_sq + run_offset, run_count));
    }
    ZEROSIM_RETURN_IF_ERROR(store_parameters(group, master, counters_.optimizer_steps));
    if (swapper_) {
      ZEROSIM_RETURN_IF_ERROR(swapper_->release(static_cast<int>(g), counters_.optimizer_steps));
      env_.crash_points->hit("swap.sub_group_swap_out_submitted", comm_.rank());
    }
    env_.crash_points->hit("optimizer.sub_group_stepped", comm_.rank());
  }
  // Every write has completed when the step returns (DeepSpeed writes the last sub-group
  // synchronously for the same reason).
  if (swapper_) ZEROSIM_RETURN_IF_ERROR(swapper_->flush());
  if (resident_ != nullptr) ZEROSIM_RETURN_IF_ERROR(resident_->end_step());
  return finish_step(false);
}

Result<StepRecord> RankEngine::train_step() {
  env_.crash_points->hit("engine.step_begin", comm_.rank());
  const uint64_t step_start_ns = env_.clock->now_ns();
  ZEROSIM_RETURN_IF_ERROR(adopt_resident_state());
  // From here the backend's partitions change: the host arrays are behind until copied back.
  host_state_stale_ = resident_ != nullptr;
  // Cleared only when the step completes: after a failed step the state is mid-step for good.
  step_in_progress_ = true;
  step_gradient_squares_ = ExactSquareSum{};
  StepRecord record;
  record.step = counters_.global_steps + 1;
  const int64_t accumulation = options_.config.gradient_accumulation_steps;
  std::vector<float> local_losses(static_cast<size_t>(accumulation));
  for (int64_t k = 0; k < accumulation; ++k) {
    ZEROSIM_ASSIGN_OR_RETURN(float loss, micro_step(k));
    local_losses[static_cast<size_t>(k)] = loss;
  }
  // Loss of the global batch: fold the micro-batch losses in global micro-batch order.
  const int world_size = comm_.world_size();
  std::vector<float> all_losses(local_losses.size() * static_cast<size_t>(world_size));
  ZEROSIM_RETURN_IF_ERROR(comm_.all_gather(std::as_bytes(std::span<const float>(local_losses)),
                                           std::as_writable_bytes(std::span<float>(all_losses))));
  float loss_sum = 0.0f;
  for (int64_t k = 0; k < accumulation; ++k) {
    for (int r = 0; r < world_size; ++r) loss_sum = loss_sum + all_losses[static_cast<size_t>(r * accumulation + k)];
  }
  record.loss = loss_sum / static_cast<float>(accumulation * world_size);
  ZEROSIM_RETURN_IF_ERROR(update_running_buffers());
  const uint64_t optimizer_start_ns = env_.clock->now_ns();
  ZEROSIM_RETURN_IF_ERROR(optimizer_step(record));
  record.optimizer_ns = env_.clock->now_ns() - optimizer_start_ns;
  record.step_ns = env_.clock->now_ns() - step_start_ns;
  step_in_progress_ = false;
  env_.crash_points->hit("engine.step_end", comm_.rank());
  return record;
}

Status RankEngine::update_running_buffers() {
  if (!options_.model.gpt) return Status();
  // The global batch's counts: every rank's, summed (integers, so the order cannot matter).
  const size_t vocab = step_target_counts_.size();
  std::vector<int64_t> all_counts(vocab * static_cast<size_t>(comm_.world_size()));
  ZEROSIM_RETURN_IF_ERROR(comm_.all_gather(std::as_bytes(std::span<const int64_t>(step_target_counts_)),
                                           std::as_writable_bytes(std::span<int64_t>(all_counts))));
  std::fill(step_target_counts_.begin(), step_target_counts_.end(), 0);
  int64_t total = 0;
  std::vector<int64_t> counts(vocab, 0);
  for (int r = 0; r < comm_.world_size(); ++r) {
    for (size_t w = 0; w < vocab; ++w) counts[w] += all_counts[static_cast<size_t>(r) * vocab + w];
  }
  for (int64_t count : counts) total += count;
  std::vector<float>& frequency = buffers_[kTargetFrequencyBuffer];
  for (size_t w = 0; w < vocab; ++w) {
    const float observed = static_cast<float>(static_cast<double>(counts[w]) / static_cast<double>(total));
    frequency[w] = frequency[w] * (1.0f - kBufferMomentum) + observed * kBufferMomentum;
  }
  return Status();
}

namespace {

class DigestBuilder {
 public:
  DigestBuilder() { state_ = XXH3_createState(); XXH3_128bits_reset(state_); }
  ~DigestBuilder() { XXH3_freeState(state_); }
  DigestBuilder(const DigestBuilder&) = delete;
  DigestBuilder& operator=(const DigestBuilder&) = delete;

  void bytes(const void* data, size_t size) { XXH3_128bits_update(state_, data, size); }
  void u64(uint64_t value) {
    unsigned char little_endian[8];
    for (int i = 0; i < 8; ++i) little_endian[i] = static_cast<unsigned char>(value >> (8 * i));
    bytes(little_endian, 8);
  }
  void i64(int64_t value) { u64(static_cast<uint64_t>(value)); }
  void f64(double value) { uint64_t bits; std::memcpy(&bits, &value, 8); u64(bits); }
  void text(const std::string& value) { u64(value.size()); bytes(value.data(), value.size()); }
  // One tensor: its name, its element count and its little-endian bytes (x86 is little-endian,
  // the canonical byte order of every digest and file).
  void tensor(const std::string& name, uint64_t element_count, const void* data, size_t size_bytes) {
    text(name);
    u64(element_count);
    bytes(data, size_bytes);
  }
  std::string hex() const {
    const XXH128_hash_t hash = XXH3_128bits_digest(state_);
    return format_hash_128(hash.high64, hash.low64);
  }

 private:
  XXH3_state_t* state_;
};

// The scalar components and the overall digest, once the tensor digests are known.
void finish_digests(const FullTrainingState& state, ComponentDigests& digests) {
  {
    DigestBuilder digest;
    digest.i64(state.counters.global_steps);
    digest.i64(state.counters.skipped_steps);
    digest.i64(state.counters.global_samples);
    digest.i64(state.counters.optimizer_steps);
    digests.counters = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.i64(state.scheduler_last_batch_iteration);
    digest.f64(state.scheduler_learning_rate);
    digests.scheduler = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.f64(state.loss_scaler.current_scale);
    digest.i64(state.loss_scaler.current_iteration);
    digest.i64(state.loss_scaler.last_overflow_iteration);
    digest.i64(state.loss_scaler.current_hysteresis);
    digests.loss_scaler = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.u64(state.seed);
    digest.u64(state.shuffle_stream.seed);
    digest.u64(state.shuffle_stream.stream_id);
    digest.u64(state.shuffle_stream.counter);
    digests.rng = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.i64(state.data_position);
    digests.data = digest.hex();
  }
  digests.buffers.clear();
  if (!state.buffers.empty()) {
    DigestBuilder digest;
    for (const std::vector<float>& buffer : state.buffers) {
      digest.i64(static_cast<int64_t>(buffer.size()));
      digest.bytes(buffer.data(), buffer.size() * sizeof(float));  // little-endian, as the tensors
    }
    digests.buffers = digest.hex();
  }
  DigestBuilder overall;
  for (const std::string* component : {&digests.params, &digests.master, &digests.exp_avg, &digests.exp_avg_sq,
                                       &digests.counters, &digests.scheduler, &digests.loss_scaler, &digests.rng,
                                       &digests.data}) {
    overall.text(*component);
  }
  // Only a model with buffers digests them, so every other state's digest is what it was.
  if (!digests.buffers.empty()) overall.text(digests.buffers);
  digests.state = overall.hex();
}

}  // namespace

Status RankEngine::for_each_partition_state(
    const std::function<Status(int64_t parameter, const PartitionStateView&)>& visit) {
  ZEROSIM_RETURN_IF_ERROR(make_host_state_current());
  const size_t element_bytes = dtype_size_bytes(model_dtype_);
  std::vector<std::byte> swapped_params;
  for (size_t g = 0; g < layout_.sub_groups.size(); ++g) {
    const SubGroup& group = layout_.sub_groups[g];
    const float* master = master_.data() + group.flat_offset;
    const float* exp_avg = exp_avg_.data() + group.flat_offset;
    const float* exp_avg_sq = exp_avg_sq_.data() + group.flat_offset;
    if (swapper_) {
      ZEROSIM_ASSIGN_OR_RETURN(OptimizerSwapper::SubGroupState swapped,
                               swapper_->acquire(static_cast<int>(g), counters_.optimizer_steps));
      master = swapped.master.data();
      exp_avg = swapped.exp_avg.data();
      exp_avg_sq = swapped.exp_avg_sq.data();
    }
    Status status;
    for (int64_t p = group.first_parameter; p < group.end_parameter && status.ok(); ++p) {
      const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
      const size_t in_group = static_cast<size_t>(partition.flat_offset - group.flat_offset);
      PartitionStateView view;
      view.params = param_partition_.data() + static_cast<size_t>(partition.flat_offset) * element_bytes;
      if (param_swapper_) {
        swapped_params.resize(static_cast<size_t>(partition.partition_size) * element_bytes);
        status = param_swapper_->read(static_cast<int>(p), counters_.optimizer_steps, swapped_params);
        view.params = swapped_params.data();
      }
      view.master = master + in_group;
      view.exp_avg = exp_avg + in_group;
      view.exp_avg_sq = exp_avg_sq + in_group;
      if (status.ok()) status = visit(p, view);
    }
    if (swapper_) {
      Status released = swapper_->release(static_cast<int>(g), std::nullopt);
      if (status.ok()) status = released;
    }
    ZEROSIM_RETURN_IF_ERROR(status);
  }
  return Status();
}

std::string first_differing_component(const ComponentDigests& expected, const ComponentDigests& actual) {
  const std::pair<const char*, std::pair<const std::string*, const std::string*>> components[] = {
      {"params", {&expected.params, &actual.params}},
      {"master", {&expected.master, &actual.master}},
      {"exp_avg", {&expected.exp_avg, &actual.exp_avg}},
      {"exp_avg_sq", {&expected.exp_avg_sq, &actual.exp_avg_sq}},
      {"counters", {&expected.counters, &actual.counters}},
      {"scheduler", {&expected.scheduler, &actual.scheduler}},
      {"loss_scaler", {&expected.loss_scaler, &actual.loss_scaler}},
      {"rng", {&expected.rng, &actual.rng}},
      {"data", {&expected.data, &actual.data}},
      {"buffers", {&expected.buffers, &actual.buffers}},
  };
  for (const auto& [name, pair] : components) {
    if (*pair.first != *pair.second) return name;
  }
  return "";
}

Result<FullTrainingState> RankEngine::gather_state(CapturedState* capture) {
  // Streams the state to rank 0 in batches of whole parameters (all four tensors of each, up
  // to kBatchBytes per rank, so one gather per batch: a digest every step costs one collective
  // for a small model instead of four per parameter), where it is unpadded and fed to the
  // digests in parameter order: memory is one batch's full tensors, whatever the model size,
  // and swapped state is read sub-group by sub-group. Every rank's batch has the same size (a
  // partition is padded to the same size on every rank), so the ranks cut batches alike.
  constexpr size_t kBatchBytes = size_t{4} << 20;
  const bool is_root = comm_.rank() == 0;
  const int world_size = comm_.world_size();
  DigestBuilder params_digest, master_digest, exp_avg_digest, exp_avg_sq_digest;
  params_digest.text(dtype_name(model_dtype_));
  struct TensorKind {
    const char* component;
    DigestBuilder* digest;
    DType dtype;
  };
  const TensorKind kinds[] = {{"params", &params_digest, model_dtype_},
                              {"master", &master_digest, DType::kFp32},
                              {"exp_avg", &exp_avg_digest, DType::kFp32},
                              {"exp_avg_sq", &exp_avg_sq_digest, DType::kFp32}};
  std::vector<std::byte> batch, gathered, full;
  std::vector<int64_t> batched;  // the parameters in `batch`, in order
  auto flush = [&]() -> Status {
    if (batched.empty()) return Status();
    gathered.resize(is_root ? batch.size() * static_cast<size_t>(world_size) : 0);
    ZEROSIM_RETURN_IF_ERROR(comm_.gather(batch, gathered, 0));
    if (is_root) {
      // Parameter by parameter, its four tensors in order: each kind's digest sees its tensors
      // in parameter order, and a capture lists them as documented.
      size_t offset = 0;  // of the current tensor within a rank's batch
      for (int64_t p : batched) {
        const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
        const std::string& name = parameters_[static_cast<size_t>(p)].name;
        for (const TensorKind& kind : kinds) {
          const size_t bytes_per_element = dtype_size_bytes(kind.dtype);
          full.resize(static_cast<size_t>(partition.element_count) * bytes_per_element);
          for (int source = 0; source < world_size; ++source) {
            std::memcpy(full.data() + static_cast<size_t>(partition.owned_begin(source)) * bytes_per_element,
                        gathered.data() + static_cast<size_t>(source) * batch.size() + offset,
                        static_cast<size_t>(partition.owned_count(source)) * bytes_per_element);
          }
          kind.digest->tensor(name, static_cast<uint64_t>(partition.element_count), full.data(), full.size());
          if (capture != nullptr) {
            capture->tensors.push_back(CapturedTensor{kind.component, name, kind.dtype, partition.partition_size, full});
          }
          offset += static_cast<size_t>(partition.partition_size) * bytes_per_element;
        }
      }
    }
    batch.clear();
    batched.clear();
    return Status();
  };
  ZEROSIM_RETURN_IF_ERROR(for_each_partition_state([&](int64_t p, const PartitionStateView& state) -> Status {
    const size_t partition_elements = static_cast<size_t>(layout_.parameters[static_cast<size_t>(p)].partition_size);
    const std::byte* tensors[] = {state.params, reinterpret_cast<const std::byte*>(state.master),
                                  reinterpret_cast<const std::byte*>(state.exp_avg),
                                  reinterpret_cast<const std::byte*>(state.exp_avg_sq)};
    for (size_t k = 0; k < std::size(kinds); ++k) {
      batch.insert(batch.end(), tensors[k], tensors[k] + partition_elements * dtype_size_bytes(kinds[k].dtype));
    }
    batched.push_back(p);
    return batch.size() >= kBatchBytes ? flush() : Status();
  }));
  ZEROSIM_RETURN_IF_ERROR(flush());
  if (!is_root) return FullTrainingState{};

  FullTrainingState state = scalar_state();
  state.digests.params = params_digest.hex();
  state.digests.master = master_digest.hex();
  state.digests.exp_avg = exp_avg_digest.hex();
  state.digests.exp_avg_sq = exp_avg_sq_digest.hex();
  finish_digests(state, state.digests);
  if (capture != nullptr) {
    capture->scalars = state;
    // The buffers, whole (replicated: no owning rank), so that a diagnosis names the one that differs.
    for (size_t b = 0; b < buffer_infos_.size(); ++b) {
      const std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(buffers_[b]));
      capture->tensors.push_back(
          CapturedTensor{"buffers", buffer_infos_[b].name, DType::kFp32, 0, std::vector<std::byte>(bytes.begin(), bytes.end())});
    }
  }
  return state;
}

FullTrainingState RankEngine::scalar_state() const {
  FullTrainingState state;
  state.parameters = parameters_;
  state.model_dtype = model_dtype_;
  state.counters = counters_;
  state.scheduler_last_batch_iteration = scheduler_->last_batch_iteration();
  state.scheduler_learning_rate = next_step_learning_rate();
  state.loss_scaler = loss_scaler_->state();
  state.seed = options_.seed;
  state.data_position = counters_.global_samples;
  state.shuffle_stream = sampler_.shuffle_stream_state(counters_.global_samples);
  state.buffers = buffers_;
  return state;
}

namespace {

uint64_t mix_bits_64(uint64_t x) {  // splitmix64's finalizer: a bijection that spreads every bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Result<RankEngine::StateFingerprint> RankEngine::local_state_fingerprint() {
  StateFingerprint sums{};
  const int rank = comm_.rank();
  const size_t param_bytes = dtype_size_bytes(model_dtype_);
  ZEROSIM_RETURN_IF_ERROR(for_each_partition_state([&](int64_t p, const PartitionStateView& state) -> Status {
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    const uint64_t begin = static_cast<uint64_t>(partition.owned_begin(rank));
    const size_t count = static_cast<size_t>(partition.owned_count(rank));
    const std::byte* tensors[] = {state.params, reinterpret_cast<const std::byte*>(state.master),
                                  reinterpret_cast<const std::byte*>(state.exp_avg),
                                  reinterpret_cast<const std::byte*>(state.exp_avg_sq)};
    for (size_t kind = 0; kind < 4; ++kind) {
      const size_t element_bytes = kind == 0 ? param_bytes : 4;
      uint64_t lane0 = 0, lane1 = 0;
      for (size_t i = 0; i < count; ++i) {
        uint64_t bits = 0;
        std::memcpy(&bits, tensors[kind] + i * element_bytes, element_bytes);  // little-endian
        const uint64_t position = (static_cast<uint64_t>(p) << 40) ^ (begin + i) ^ (uint64_t{kind} << 62);
        const uint64_t keyed = mix_bits_64(position) ^ bits;
        lane0 += mix_bits_64(keyed + 0x9e3779b97f4a7c15ull);
        lane1 += mix_bits_64(keyed * 0xd6e8feb86659fd93ull + 0x632be59bd9b4e019ull);
      }
      sums[2 * kind] += lane0;
      sums[2 * kind + 1] += lane1;
    }
    return Status();
  }));
  return sums;
}

ComponentDigests fingerprint_digests(const FullTrainingState& scalars, const RankEngine::StateFingerprint& sum) {
  ComponentDigests digests;
  // The parameters' dtype is part of their identity, as in a gathered state's digest.
  const uint64_t dtype_key = mix_bits_64(static_cast<uint64_t>(scalars.model_dtype) + 1);
  std::string* tensors[] = {&digests.params, &digests.master, &digests.exp_avg, &digests.exp_avg_sq};
  for (size_t kind = 0; kind < 4; ++kind) {
    *tensors[kind] = "fp:" + format_hash_128(sum[2 * kind] ^ (kind == 0 ? dtype_key : 0), sum[2 * kind + 1]);
  }
  finish_digests(scalars, digests);
  return digests;
}

Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, Env env,
                                 const CheckpointPlan& checkpoints) {
  RankSeams seams;
  seams.env_for_rank = [env](int) { return env; };
  return run_training(options, step_count, seams, checkpoints);
}

namespace {

// The sum over the ranks of one fingerprint point, from a gather of every rank's shares (each
// rank's block is `block_bytes` long; the point's share is at `point` within it).
RankEngine::StateFingerprint sum_of_shares(const std::vector<std::byte>& gathered, int world_size, size_t block_bytes,
                                           size_t point) {
  constexpr size_t kShareBytes = sizeof(RankEngine::StateFingerprint);
  RankEngine::StateFingerprint sum{};
  for (int source = 0; source < world_size; ++source) {
    RankEngine::StateFingerprint share;
    std::memcpy(&share, gathered.data() + static_cast<size_t>(source) * block_bytes + point * kShareBytes, kShareBytes);
    for (size_t lane = 0; lane < sum.size(); ++lane) sum[lane] += share[lane];
  }
  return sum;
}

// One rank's whole run: initialize or load, train to step_count with the plan's saves, and the
// digests; rank 0 fills `run`. On failure, abort_peers (when set) releases the other ranks.
Status run_one_rank(const TrainingOptions& options, int64_t step_count, int rank, Comm& comm, Comm* checkpoint_comm,
                    const Env& env, const CheckpointPlan& checkpoints, TrainingRun& run,
                    const std::function<void()>& abort_peers) {
  // A save directory that can never be written is found now, not after the first save's steps.
  if (rank == 0 && !checkpoints.save_directory.empty()) {
    ZEROSIM_RETURN_IF_ERROR(
        check_directory_writable(*env.disk, checkpoints.save_directory, ".zerosim-write-probe-" + options.run_id));
  }
  RankEngine engine(options, comm, env, checkpoint_comm);
  // Declared after the engine, so destroyed before it: a rank that leaves with an error (or
  // an exception) aborts its peers first, and no peer, foreground or background, is left
  // waiting in a collective while this engine's destructor waits for its own async save.
  struct AbortPeersOnFailure {
    const std::function<void()>& abort_peers;
    bool succeeded = false;
    ~AbortPeersOnFailure() {
      if (!succeeded && abort_peers) abort_peers();
    }
  } abort_on_failure{abort_peers};
  std::vector<std::string> notes;
  if (checkpoints.resume_directory.empty()) {
    ZEROSIM_RETURN_IF_ERROR(engine.initialize());
  } else {
    ZEROSIM_RETURN_IF_ERROR(
        engine.initialize_from_checkpoint(checkpoints.resume_directory, checkpoints.resume_tag, &notes,
                                          checkpoints.resume_load));
    // Each rank resolved the tag itself: they must have loaded the same step.
    std::array<double, 2> loaded = {static_cast<double>(engine.counters().global_steps),
                                    -static_cast<double>(engine.counters().global_steps)};
    ZEROSIM_RETURN_IF_ERROR(comm.all_reduce_max(loaded));
    if (loaded[0] != -loaded[1]) {
      return data_loss("ranks loaded different checkpoints from " + checkpoints.resume_directory + " (steps " +
                       std::to_string(static_cast<int64_t>(-loaded[1])) + " to " +
                       std::to_string(static_cast<int64_t>(loaded[0])) +
                       "): the directory changed during the load, or a rank could not read the newest tag");
    }
    if (engine.counters().global_steps > step_count) {
      return invalid_argument("the checkpoint in " + checkpoints.resume_directory + " is at step " +
                              std::to_string(engine.counters().global_steps) + ", past the " +
                              std::to_string(step_count) + " steps asked for");
    }
  }
  if (rank == 0) {
    run.loaded_checkpoint_step = engine.loaded_checkpoint_step();
    run.notes.insert(run.notes.end(), notes.begin(), notes.end());
    if (!engine.swap_engine_note().empty()) run.notes.push_back(engine.swap_engine_note());
  }
  // A resumed run does not save its starting point again into the directory it came from.
  // The full state at options.capture_state_at_step, kept on rank 0 (a diagnosis's input).
  auto capture_here = [&]() -> CapturedState* {
    if (rank != 0 || engine.counters().global_steps != options.capture_state_at_step) return nullptr;
    run.captured.emplace();
    return &*run.captured;
  };
  // digest_every_step: the fingerprint shares of the state right after the start and after
  // each step (rank 0 keeps the scalar part), combined by one gather when the run ends.
  std::vector<RankEngine::StateFingerprint> fingerprints;
  std::vector<FullTrainingState> fingerprint_scalars;
  auto fingerprint_now = [&]() -> Status {
    if (!options.digest_every_step) return Status();
    ZEROSIM_ASSIGN_OR_RETURN(RankEngine::StateFingerprint share, engine.local_state_fingerprint());
    fingerprints.push_back(share);
    if (rank == 0) fingerprint_scalars.push_back(engine.scalar_state());
    return Status();
  };
  // The model of a load with options (CheckpointPlan::reset_as_loaded_after_step): at the start
  // when the loaded step is this run's first, else right after that step.
  bool reset_done = false;
  if (engine.counters().global_steps == checkpoints.reset_as_loaded_after_step) {
    reset_done = true;
    ZEROSIM_RETURN_IF_ERROR(engine.reset_as_loaded(checkpoints.reset_as_loaded_options));
  }
  const bool capture_initial = options.capture_state_at_step == engine.counters().global_steps;
  if (capture_initial) {
    ZEROSIM_ASSIGN_OR_RETURN(FullTrainingState state, engine.gather_state(capture_here()));
    if (rank == 0) run.initial_digests = state.digests;
  }
  ZEROSIM_RETURN_IF_ERROR(fingerprint_now());
  auto listed_for_save = [&](int64_t step) {
    return std::find(checkpoints.save_at_steps.begin(), checkpoints.save_at_steps.end(), step) !=
           checkpoints.save_at_steps.end();
  };
  int64_t last_saved_step = checkpoints.resume_directory == checkpoints.save_directory ? engine.counters().global_steps : -1;
  // The newest save known to be committed (an async save is only once it has been waited for):
  // a failed save names it, so that the user knows what a resume will load.
  int64_t committed_step = last_saved_step;
  const bool async_saves = options.config.checkpoint.async_save;
  auto with_committed_note = [&](const Status& failed) {
    const std::string note =
        committed_step >= 0 ? "the last committed checkpoint is " + checkpoints.save_directory + "/" +
                                  checkpoint_tag_for_step(committed_step) + " (latest names it; --resume " +
                                  checkpoints.save_directory + " continues from it)"
                            : "no checkpoint of this run was committed in " + checkpoints.save_directory;
    return Status(failed.code(), failed.message() + "; " + note);
  };
  auto save_at = [&](int64_t step) -> Status {
    const Status saved =
        engine.save_checkpoint(checkpoints.save_directory, checkpoint_tag_for_step(step), checkpoints.save_options);
    if (!saved.ok()) return with_committed_note(saved);
    // An async save returns once its snapshot is taken, after waiting for the one before.
    committed_step = async_saves ? last_saved_step : step;
    last_saved_step = step;
    return saved;
  };
  // after_step: the step's digests, gathered now (one gather of the fingerprint shares).
  std::optional<StepRecord> last_record;  // this run's last step (the same step on every rank)
  auto observe = [&](const StepRecord& record, bool saved) -> Status {
    if (!checkpoints.after_step) return Status();
    ZEROSIM_ASSIGN_OR_RETURN(RankEngine::StateFingerprint share, engine.local_state_fingerprint());
    constexpr size_t kShareBytes = sizeof(RankEngine::StateFingerprint);
    std::vector<std::byte> all(rank == 0 ? kShareBytes * static_cast<size_t>(comm.world_size()) : 0);
    ZEROSIM_RETURN_IF_ERROR(comm.gather(std::as_bytes(std::span<const RankEngine::StateFingerprint>(&share, 1)), all, 0));
    if (rank != 0) return Status();
    checkpoints.after_step(
        record, fingerprint_digests(engine.scalar_state(), sum_of_shares(all, comm.world_size(), kShareBytes, 0)), saved);
    return Status();
  };
  if (last_saved_step != engine.counters().global_steps && listed_for_save(engine.counters().global_steps)) {
    ZEROSIM_RETURN_IF_ERROR(save_at(engine.counters().global_steps));
  }
  while (engine.counters().global_steps < step_count) {
    ZEROSIM_ASSIGN_OR_RETURN(StepRecord record, engine.train_step());
    if (rank == 0) run.steps.push_back(record);
    // The model of a load with options: the step's state as such a load would give it (the
    // digest of this step is the state after the modelled load).
    if (!reset_done && engine.counters().global_steps == checkpoints.reset_as_loaded_after_step) {
      reset_done = true;
      ZEROSIM_RETURN_IF_ERROR(engine.reset_as_loaded(checkpoints.reset_as_loaded_options));
    }
    const int64_t saves_before = last_saved_step;
    last_record = record;
    if (engine.counters().global_steps == options.capture_state_at_step) {
      ZEROSIM_RETURN_IF_ERROR(engine.gather_state(capture_here()).status());
    }
    ZEROSIM_RETURN_IF_ERROR(fingerprint_now());
    const int64_t step = engine.counters().global_steps;
    if ((checkpoints.save_every_steps > 0 && step % checkpoints.save_every_steps == 0) || listed_for_save(step)) {
      ZEROSIM_RETURN_IF_ERROR(save_at(step));
    }
    // The last step's line waits for the end-of-run save below.
    const bool final_save_pending = step == step_count && checkpoints.save_at_end && !checkpoints.save_directory.empty() &&
                                    last_saved_step != step;
    if (!final_save_pending) ZEROSIM_RETURN_IF_ERROR(observe(record, !async_saves && last_saved_step != saves_before));
    if (checkpoints.stop_requested != nullptr && step < step_count) {
      std::array<double, 1> stop = {checkpoints.stop_requested->load() ? 1.0 : 0.0};
      ZEROSIM_RETURN_IF_ERROR(comm.all_reduce_max(stop));
      if (stop[0] > 0) {
        if (rank == 0) run.stopped_early = true;
        if (checkpoints.save_on_stop && !checkpoints.save_directory.empty() && last_saved_step != step) {
          ZEROSIM_RETURN_IF_ERROR(save_at(step));
        }
        break;
      }
    }
  }
  const bool stopped = checkpoints.stop_requested != nullptr && engine.counters().global_steps < step_count;
  if (!stopped && checkpoints.save_at_end && !checkpoints.save_directory.empty() &&
      last_saved_step != engine.counters().global_steps) {
    ZEROSIM_RETURN_IF_ERROR(save_at(engine.counters().global_steps));
    if (last_record) ZEROSIM_RETURN_IF_ERROR(observe(*last_record, !async_saves));  // every rank trained it
  }
  if (const Status waited = engine.wait_for_save(); !waited.ok()) return with_committed_note(waited);
  if (rank == 0 && !checkpoints.save_directory.empty()) run.last_saved_step = last_saved_step;
  if (options.digest_every_step) {
    // Every rank recorded the same number of shares (the ranks step and stop together).
    constexpr size_t kShareBytes = sizeof(RankEngine::StateFingerprint);
    std::vector<std::byte> shares(fingerprints.size() * kShareBytes), all(rank == 0 ? shares.size() * comm.world_size() : 0);
    if (!shares.empty()) std::memcpy(shares.data(), fingerprints.data(), shares.size());
    ZEROSIM_RETURN_IF_ERROR(comm.gather(shares, all, 0));
    if (rank == 0) {
      for (size_t point = 0; point < fingerprints.size(); ++point) {
        const ComponentDigests digests = fingerprint_digests(
            fingerprint_scalars[point], sum_of_shares(all, comm.world_size(), shares.size(), point));
        if (point == 0) run.initial_digests = digests;
        else run.step_digests.push_back(digests);
      }
    }
  }
  ZEROSIM_ASSIGN_OR_RETURN(FullTrainingState state, engine.gather_state());
  if (rank == 0) run.final_state = std::move(state);
  if (rank == 0 && engine.partitions_resident()) {
    run.notes.push_back("the partitions stayed in the memory of the " + options.compute.name +
                        " device (nothing offloaded): a step moved no state across PCIe");
  }
  abort_on_failure.succeeded = true;
  return Status();
}

// What run_training and run_training_rank refuse before any rank starts.
Status validate_run_request(const TrainingOptions& options, int64_t step_count, const CheckpointPlan& checkpoints) {
  ZEROSIM_RETURN_IF_ERROR(validate_training_options(options));
  if (step_count < 0) return invalid_argument("steps must be non-negative, got " + std::to_string(step_count));
  if (checkpoints.save_every_steps < 0) {
    return invalid_argument("save every: expected steps >= 0, got " + std::to_string(checkpoints.save_every_steps));
  }
  for (int64_t step : checkpoints.save_at_steps) {
    if (step < 0) return invalid_argument("save at steps: expected steps >= 0, got " + std::to_string(step));
  }
  if (!checkpoints.save_at_steps.empty() && checkpoints.save_directory.empty()) {
    return invalid_argument("saving at listed steps needs a save directory");
  }
  if (checkpoints.save_every_steps > 0 && checkpoints.save_directory.empty()) {
    return invalid_argument("saving every " + std::to_string(checkpoints.save_every_steps) +
                            " steps needs a save directory");
  }
  return Status();
}

// An exception never leaves a rank: it becomes that rank's error.
Status run_one_rank_catching(const std::function<Status()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory (model, batch or world size too large for this machine)");
  } catch (const std::exception& error) {
    return internal_error(std::string("unexpected exception: ") + error.what());
  } catch (...) {
    // A crash-point hook may stop a rank by throwing anything (a simulated kill).
    return aborted("stopped by an exception that is not a std::exception (a crash point?)");
  }
}

}  // namespace

Result<TrainingRun> run_training(const TrainingOptions& options, int64_t step_count, const RankSeams& seams,
                                 const CheckpointPlan& checkpoints) {
  ZEROSIM_CHECK(static_cast<bool>(seams.env_for_rank), "run_training needs every rank's Env");
  ZEROSIM_RETURN_IF_ERROR(validate_run_request(options, step_count, checkpoints));
  ThreadCommWorld world(options.world_size);
  // Async saves commit on their own communicator (see RankEngine).
  ThreadCommWorld checkpoint_world(options.world_size);
  std::mutex result_mutex;
  Status first_error;
  int first_error_rank = -1;
  TrainingRun run;

  // Keeps the root cause, and the same one whatever the threads' timing: a kAborted is only the
  // echo of another rank's failure, and of two real errors the lower rank's wins (not the
  // earlier one's), so a report names the same rank and file in every run.
  auto record_error = [&](int rank, const Status& status) {
    std::lock_guard lock(result_mutex);
    const bool aborted = status.code() == StatusCode::kAborted;
    const bool recorded_aborted = first_error.code() == StatusCode::kAborted;
    if (first_error.ok() || (recorded_aborted && !aborted) || (recorded_aborted == aborted && rank < first_error_rank)) {
      first_error = status;
      first_error_rank = rank;
    }
  };

  const std::function<void()> abort_both = [&] {
    world.abort();
    checkpoint_world.abort();
  };
  auto run_rank = [&](int rank) -> Status {
    const Env env = seams.env_for_rank(rank);
    std::unique_ptr<Comm> wrapped = seams.wrap_comm ? seams.wrap_comm(rank, world.comm(rank)) : nullptr;
    return run_one_rank(options, step_count, rank, wrapped ? *wrapped : world.comm(rank), &checkpoint_world.comm(rank),
                        env, checkpoints, run, abort_both);
  };
  // A rank never lets an exception escape its thread: an allocation failure becomes an error
  // on that rank, and the world is aborted so that no other rank waits for it forever.
  auto rank_main = [&](int rank) {
    const Status status = run_one_rank_catching([&] { return run_rank(rank); });
    if (!status.ok()) {
      record_error(rank, Status(status.code(), "rank " + std::to_string(rank) + ": " + status.message()));
      world.abort();
      checkpoint_world.abort();
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(options.world_size));
  for (int rank = 1; rank < options.world_size; ++rank) {
    try {
      threads.emplace_back(rank_main, rank);
    } catch (const std::system_error& error) {
      record_error(rank, resource_exhausted("cannot start the thread of rank " + std::to_string(rank) + " of " +
                                      std::to_string(options.world_size) + ": " + error.what()));
      world.abort();
      checkpoint_world.abort();
      break;
    }
  }
  // Rank 0 runs even when another rank has already failed and aborted the world: an error it
  // meets before its first collective (a missing device, a bad path) is then its own, not an
  // echo, and the lowest rank's error is the one reported whatever the threads' timing (rank 0
  // skipped here let a faster rank 1's error win). It stops at its first collective.
  rank_main(0);
  for (std::thread& thread : threads) thread.join();
  if (!first_error.ok()) return first_error;
  run.digests = run.final_state.digests;
  return run;
}

Result<TrainingRun> run_training_rank(const TrainingOptions& options, int64_t step_count, Comm& comm,
                                      Comm* checkpoint_comm, const Env& env, const CheckpointPlan& checkpoints) {
  ZEROSIM_RETURN_IF_ERROR(validate_run_request(options, step_count, checkpoints));
  if (comm.world_size() != options.world_size) {
    return invalid_argument("the communicator has " + std::to_string(comm.world_size()) + " ranks, the run " +
                            std::to_string(options.world_size));
  }
  TrainingRun run;
  const int rank = comm.rank();
  const std::function<void()> no_abort;
  const Status status = run_one_rank_catching(
      [&] { return run_one_rank(options, step_count, rank, comm, checkpoint_comm, env, checkpoints, run, no_abort); });
  if (!status.ok()) return Status(status.code(), "rank " + std::to_string(rank) + ": " + status.message());
  run.digests = run.final_state.digests;
  return run;
}

}  // namespace zerosim
