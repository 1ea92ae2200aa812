#include "core/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/model/gpt.h"
#include "core/optim/grad_clip.h"
#include "core/zero/exact_square_sum.h"

namespace zerosim {

// The swap engines take the top-level "aio" block as it is.
AsyncIoOptions async_io_options_from(const AioConfig& aio) {
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
  if (options.threads_per_rank < 1) {
    return invalid_argument("threads per rank: " + std::to_string(options.threads_per_rank) +
                            " (at least 1: the rank's own thread)");
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
      ZEROSIM_ASSIGN_OR_RETURN(compute_, options_.compute.factory(comm_.rank(), comm_.world_size(), options_.model, model_dtype_));
    } else {
      compute_ = make_cpu_compute_backend(options_.model, simd_path_, options_.threads_per_rank);
    }
  }
  backend_makes_batches_ = false;
  if (dataset_) {
    ZEROSIM_ASSIGN_OR_RETURN(backend_makes_batches_, compute_->make_synthetic_batches(*dataset_));
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
  } else {
    // "cpu" and no offload both keep the state in host memory: on CPU ranks they are the same.
    master_.assign_zeros(flat);
    exp_avg_.assign_zeros(flat);
    exp_avg_sq_.assign_zeros(flat);
  }
  ZEROSIM_RETURN_IF_ERROR(prepare_gradient_storage());

  const OffloadConfig& param_offload = config.zero.offload_param;
  if (param_offload.device == OffloadDevice::kNvme) {
    std::string note;
    ZEROSIM_ASSIGN_OR_RETURN(param_swapper_, make_partition_swapper(param_offload.nvme_path, model_dtype_,
                                                                    SwapTensorKind::kParams, param_offload.pin_memory,
                                                                    &note));
    if (swap_engine_note_.empty()) swap_engine_note_ = note;
  } else {
    param_partition_.assign_zeros(flat * dtype_size_bytes(model_dtype_));
  }

  ZEROSIM_ASSIGN_OR_RETURN(LearningRateScheduler scheduler,
                           LearningRateScheduler::create(config.scheduler, config.optimizer.learning_rate));
  scheduler_.emplace(std::move(scheduler));
  ZEROSIM_ASSIGN_OR_RETURN(LossScaler loss_scaler, LossScaler::from_config(config.loss_scaler, model_dtype_));
  loss_scaler_.emplace(std::move(loss_scaler));
  counters_ = TrainingCounters{};

  // The partitions stay with the backend only where its resident path computes what the host
  // path does (compute_backend.h ResidentState): parameters not offloaded, the portable
  // numerics, every parameter trainable, no defect switched on (and, adopt says, ranks that
  // share memory). An offloaded optimizer keeps its state here and steps on the CPU.
  const bool every_parameter_trainable =
      std::all_of(parameters_.begin(), parameters_.end(), [](const ParameterInfo& p) { return p.requires_grad; });
  const bool resident_eligible = param_offload.device == OffloadDevice::kNone &&
                                 config.numerics == NumericsMode::kPortable && every_parameter_trainable &&
                                 (env_.defects == nullptr || env_.defects->empty());
  resident_ = resident_eligible ? compute_->resident_state() : nullptr;
  resident_holds_optimizer_ = config.zero.offload_optimizer.device == OffloadDevice::kNone;
  resident_adopted_ = false;
  resident_used_ = false;
  host_state_stale_ = false;
  return Status();
}

Status RankEngine::prepare_gradient_storage() {
  const OffloadConfig& offload = options_.config.zero.offload_optimizer;
  if (offload.device == OffloadDevice::kNvme) {
    // As ZeRO-Infinity does, the fp32 gradient partitions go to NVMe with the optimizer state,
    // so host memory does not grow with the model.
    ZEROSIM_ASSIGN_OR_RETURN(gradient_swapper_, make_partition_swapper(offload.nvme_path, DType::kFp32,
                                                                       SwapTensorKind::kGradients, offload.pin_memory,
                                                                       nullptr));
  } else {
    gradient_partition_.assign_zeros(static_cast<size_t>(layout_.flat_element_count));
  }
  return Status();
}

Status RankEngine::adopt_resident_state() {
  if (resident_ == nullptr || resident_adopted_) return Status();
  // An offloaded optimizer's state stays here: the backend takes the 16-bit parameters only.
  const std::span<const float> none;
  ZEROSIM_ASSIGN_OR_RETURN(const bool adopted,
                           resident_->adopt(comm_, layout_, model_dtype_, communication_dtype_, param_partition_,
                                            resident_holds_optimizer_ ? std::span<const float>(master_) : none,
                                            resident_holds_optimizer_ ? std::span<const float>(exp_avg_) : none,
                                            resident_holds_optimizer_ ? std::span<const float>(exp_avg_sq_) : none));
  if (!adopted) {
    // Whether ranks share memory does not change within a run: a backend that held the
    // partitions before (and for which the host's gradient buffers were let go) cannot refuse now.
    if (resident_used_) {
      return internal_error("rank " + std::to_string(comm_.rank()) + ": the " + compute_->name() +
                            " backend refused to hold the partitions again after holding them earlier in the run");
    }
    resident_ = nullptr;  // ranks that cannot share device memory: the host path, for the whole run
    return Status();
  }
  resident_adopted_ = true;
  resident_used_ = true;
  // The gradients accumulate in the backend from now on: the host path's gradient partition
  // (or its swap files) would only hold memory, a lock and a queue. A load builds them again
  // (prepare_storage) before its adopt.
  ZeroPageArray<float>().swap(gradient_partition_);
  gradient_swapper_.reset();
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
  full_parameters.resize(static_cast<size_t>(range.size()));
  for (int64_t p = range.first; p < range.end; ++p) {
    full_parameters[static_cast<size_t>(p - range.first)].resize(
        static_cast<size_t>(layout_.parameters[static_cast<size_t>(p)].element_count));
  }
  // Each rank's partitions are widened into the full tensors straight from what the gather
  // hands over (straight out of the senders' buffers where the ranks share memory). The
  // tensors are sized above: the visit runs between the collective's barriers, where nothing
  // may fail.
  return comm_.all_gather_visit(send, gather_receive_, [&](int source, std::span<const std::byte> chunk) {
    for (int64_t p = range.first; p < range.end; ++p) {
      const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
      const int64_t count = partition.owned_count(source);
      if (count == 0) continue;
      const std::byte* slice = chunk.data() + static_cast<size_t>(partition.flat_offset - range_flat_offset) * element_bytes;
      cast_to_fp32_threads(model_dtype_, slice,
                           full_parameters[static_cast<size_t>(p - range.first)].data() + partition.owned_begin(source),
                           static_cast<size_t>(count), options_.threads_per_rank);
    }
  });
}

Status RankEngine::exchange_layer_gradient(int64_t micro_step_index, size_t chunk_elements,
                                           std::span<float> accumulator) {
  if (options_.config.numerics == NumericsMode::kPortable) {
    return comm_.reduce_scatter_pieces(gradient_pieces_, chunk_first_piece_, communication_dtype_, chunk_elements,
                                       scatter_send_, accumulator, options_.threads_per_rank);
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
  const size_t chunk_elements = static_cast<size_t>(layer.element_count);
  const int world_size = comm_.world_size();
  // A frozen parameter's gradient is not kept (requires_grad=False): its partition of the
  // accumulator stays zero, so it adds nothing to the norm or the overflow check.
  auto owned_by = [&](int64_t p, int owner) {
    return parameters_[static_cast<size_t>(p)].requires_grad ? layout_.parameters[static_cast<size_t>(p)].owned_count(owner)
                                                              : int64_t{0};
  };
  if (options_.config.numerics == NumericsMode::kPortable) {
    // Each owner's chunk described, not copied: its slice of every gradient, then the
    // padding's zeros. The communicator narrows them as a send buffer would hold them (in
    // place where the ranks share memory: no pass over the whole model's gradients).
    gradient_pieces_.clear();
    chunk_first_piece_.clear();
    for (int owner = 0; owner < world_size; ++owner) {
      chunk_first_piece_.push_back(gradient_pieces_.size());
      int64_t placed = 0;  // the chunk's elements described so far
      for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
        const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
        ZEROSIM_CHECK(partition.flat_offset - layer.flat_offset == placed,
                      "a layer's partitions follow one another in its chunk");
        placed += partition.partition_size;
        const std::vector<float>& full = full_gradients[static_cast<size_t>(p - layer.first_parameter)];
        const int64_t owned = owned_by(p, owner);
        if (owned > 0) {
          gradient_pieces_.push_back({full.data() + partition.owned_begin(owner), static_cast<size_t>(owned)});
        }
        if (partition.partition_size > owned) {
          gradient_pieces_.push_back({nullptr, static_cast<size_t>(partition.partition_size - owned)});
        }
      }
    }
    chunk_first_piece_.push_back(gradient_pieces_.size());
  } else {
    const size_t element_bytes = dtype_size_bytes(communication_dtype_);
    // Every byte of the send buffer is written below (padding included), so it is only resized.
    scatter_send_.resize(chunk_elements * element_bytes * static_cast<size_t>(world_size));
    std::vector<float>& padded_slice = padded_slice_scratch_;
    for (int owner = 0; owner < world_size; ++owner) {
      for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
        const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
        const std::vector<float>& full = full_gradients[static_cast<size_t>(p - layer.first_parameter)];
        const int64_t owned = owned_by(p, owner);
        std::byte* destination = scatter_send_.data() +
                                 (static_cast<size_t>(owner) * chunk_elements +
                                  static_cast<size_t>(partition.flat_offset - layer.flat_offset)) *
                                     element_bytes;
        padded_slice.resize(static_cast<size_t>(partition.partition_size));
        std::copy_n(full.begin() + partition.owned_begin(owner), owned, padded_slice.begin());
        std::fill(padded_slice.begin() + owned, padded_slice.end(), 0.0f);
        // param.grad in the model dtype, cast to the communication dtype, then
        // reduce_scatter_coalesced's div_(W) in that dtype, before the sum. Each op computed in
        // fp32 and rounded once is the dtype's own correctly rounded op (fp32 has more than
        // 2p + 2 bits for fp16 and bf16), as PyTorch computes half ops.
        const float world = static_cast<float>(world_size);
        for (float& value : padded_slice) {
          const float in_comm_dtype = round_through(communication_dtype_, round_through(model_dtype_, value));
          value = round_through(communication_dtype_, in_comm_dtype / world);
        }
        cast_from_fp32(communication_dtype_, padded_slice.data(), destination, padded_slice.size());
      }
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
  if (micro_step_index + 1 == accumulation) step_gradient_squares_.add_squares(accumulator, options_.threads_per_rank);
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
  if (backend_makes_batches_) {
    micro_batch_samples_.resize(static_cast<size_t>(micro_batch));
    for (int64_t s = 0; s < micro_batch; ++s) {
      micro_batch_samples_[static_cast<size_t>(s)] = sampler_.sample_at(first_position + s);
    }
    batch.sample_indices = micro_batch_samples_;
    return batch;
  }
  const int64_t features = options_.data.feature_count;
  micro_batch_input_.resize(static_cast<size_t>(micro_batch * features));
  micro_batch_labels_.resize(static_cast<size_t>(micro_batch));
  for (int64_t s = 0; s < micro_batch; ++s) {
    const int64_t sample = sampler_.sample_at(first_position + s);
    dataset_->features(sample, &micro_batch_input_[static_cast<size_t>(s * features)]);
  }
  dataset_->labels_of(micro_batch_input_, micro_batch_labels_);
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

Result<float> RankEngine::micro_step(int64_t micro_step_index, StepRecord& record) {
  const uint64_t data_start_ns = env_.clock->now_ns();
  const ResolvedConfig& config = options_.config;
  const int64_t micro_batch = config.micro_batch_size;
  const int64_t global_micro_batch = micro_step_index * comm_.world_size() + comm_.rank();
  const int64_t first_position = counters_.global_samples + global_micro_batch * micro_batch;
  ZEROSIM_ASSIGN_OR_RETURN(const MicroBatchInput batch, load_micro_batch(first_position));
  // No gradient is live at a micro-batch's start (a micro-step that failed midway left some).
  std::fill(full_gradient_live_.begin(), full_gradient_live_.end(), 0);
  ZEROSIM_RETURN_IF_ERROR(compute_->begin_micro_batch(batch));
  const uint64_t forward_start_ns = env_.clock->now_ns();
  record.data_ns += forward_start_ns - data_start_ns;

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
  const uint64_t backward_start_ns = env_.clock->now_ns();
  record.forward_ns += backward_start_ns - forward_start_ns;

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
      gradient.resize(static_cast<size_t>(parameters_[static_cast<size_t>(p)].element_count));
      fill_zeros_threads(gradient.data(), gradient.size(), options_.threads_per_rank);
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
  record.backward_ns += env_.clock->now_ns() - backward_start_ns;
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
    const bool local_non_finite = resident_squares    ? resident_squares->saw_non_finite()
                                  : gradient_swapper_ ? step_gradient_squares_.saw_non_finite()
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
    // Resident gradients live in the backend: the host's partition was never written.
    if (resident_ != nullptr) {
      ZEROSIM_RETURN_IF_ERROR(resident_->zero_gradients());
    } else {
      std::fill(gradient_partition_.begin(), gradient_partition_.end(), 0.0f);
    }
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
    local_sum.add_squares(gradient_partition_, options_.threads_per_rank);
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
    if (resident_ != nullptr && resident_holds_optimizer_) {
      for (const auto& [run_offset, run_count] : trainable_runs_by_group_[g]) {
        ZEROSIM_RETURN_IF_ERROR(resident_->adam_update(scalars, grad_multiplier, offset + run_offset, run_count));
      }
      ZEROSIM_RETURN_IF_ERROR(resident_->store_parameters(offset, count));
      env_.crash_points->hit("optimizer.sub_group_stepped", comm_.rank());
      continue;
    }
    const float* gradient = nullptr;
    if (resident_ != nullptr) {
      // The offloaded optimizer: the sub-group's gradients come from the backend's accumulator,
      // and the next sub-group's start moving while this one steps.
      const bool last = g + 1 == layout_.sub_groups.size();
      const size_t next_offset = last ? 0 : static_cast<size_t>(layout_.sub_groups[g + 1].flat_offset);
      const size_t next_count = last ? 0 : static_cast<size_t>(layout_.sub_groups[g + 1].element_count);
      ZEROSIM_ASSIGN_OR_RETURN(const std::span<const float> staged,
                               resident_->gradients_on_host(offset, count, next_offset, next_count));
      gradient = staged.data();
    } else if (gradient_swapper_) {
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
    } else {
      gradient = gradient_partition_.data() + offset;
    }
    // AdamW over the runs of trainable partitions: a frozen parameter has no optimizer state to
    // step (weight decay included). AdamW is elementwise, so the split cannot change a bit.
    // With resident partitions the state here is the offloaded optimizer's, stepped on the CPU
    // as ZeRO-Offload's CPU Adam does (the host path's arithmetic, so the same bits).
    for (const auto& [run_offset, run_count] : trainable_runs_by_group_[g]) {
      if (resident_ != nullptr) {
        adam_update(simd_path_, scalars, grad_multiplier, master + run_offset, gradient + run_offset, exp_avg + run_offset,
                    exp_avg_sq + run_offset, run_count);
        continue;
      }
      ZEROSIM_RETURN_IF_ERROR(compute_->adam_update(scalars, grad_multiplier, master + run_offset, gradient + run_offset,
                                                    exp_avg + run_offset, exp_avg_sq + run_offset, run_count));
    }
    ZEROSIM_RETURN_IF_ERROR(store_parameters(group, master, counters_.optimizer_steps));
    if (resident_ != nullptr) {
      const size_t element_bytes = dtype_size_bytes(model_dtype_);
      ZEROSIM_RETURN_IF_ERROR(resident_->parameters_from_host(
          offset, std::span<const std::byte>(param_partition_).subspan(offset * element_bytes, count * element_bytes)));
    }
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
  // (With an offloaded optimizer the host keeps the master and moments and receives every new
  // 16-bit parameter: it is never behind between steps.)
  host_state_stale_ = resident_ != nullptr && resident_holds_optimizer_;
  // Cleared only when the step completes: after a failed step the state is mid-step for good.
  step_in_progress_ = true;
  step_gradient_squares_ = ExactSquareSum{};
  StepRecord record;
  record.step = counters_.global_steps + 1;
  const int64_t accumulation = options_.config.gradient_accumulation_steps;
  std::vector<float> local_losses(static_cast<size_t>(accumulation));
  for (int64_t k = 0; k < accumulation; ++k) {
    ZEROSIM_ASSIGN_OR_RETURN(float loss, micro_step(k, record));
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

}  // namespace zerosim
