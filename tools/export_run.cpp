#include "tools/export_run.h"

#include <cstring>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.h"
#include "core/data/dataset.h"
#include "core/model/mlp.h"

namespace zerosim {
namespace {

const ParameterInfo* find_parameter(const std::vector<ParameterInfo>& parameters, const std::string& name) {
  for (const ParameterInfo& parameter : parameters) {
    if (parameter.name == name) return &parameter;
  }
  return nullptr;
}

// The captured tensors of `components`, named "<component>/<parameter>" (or the bare parameter
// name when `prefix_component` is false).
std::vector<SafetensorsTensor> captured_tensors(const CapturedState& state, const std::vector<ParameterInfo>& parameters,
                                                std::initializer_list<const char*> components, bool prefix_component) {
  std::vector<SafetensorsTensor> tensors;
  for (const char* component : components) {
    for (const CapturedTensor& tensor : state.tensors) {
      if (tensor.component != component) continue;
      const ParameterInfo* parameter = find_parameter(parameters, tensor.parameter);
      ZEROSIM_CHECK(parameter != nullptr, "a captured tensor names a parameter of the model");
      tensors.push_back(SafetensorsTensor{prefix_component ? tensor.component + "/" + tensor.parameter : tensor.parameter,
                                          tensor.dtype, parameter->shape, tensor.bytes});
    }
  }
  return tensors;
}

nlohmann::json records_json(const TrainingRun& run) {
  nlohmann::json records = nlohmann::json::array();
  for (const StepRecord& step : run.steps) {
    records.push_back({{"step", step.step},
                       {"loss", step.loss},
                       {"lr", step.learning_rate},
                       {"loss_scale", step.loss_scale},
                       {"grad_norm", step.grad_norm},
                       {"skipped", step.skipped}});
  }
  return records;
}

nlohmann::json run_json(const TrainingOptions& options, int64_t step_count, const TrainingRun& run) {
  const ResolvedConfig& config = options.config;
  nlohmann::json document;
  document["model"] = options.model.layer_widths;
  document["precision"] = precision_name(config.precision);
  document["world_size"] = options.world_size;
  document["micro_batch_size"] = config.micro_batch_size;
  document["gradient_accumulation_steps"] = config.gradient_accumulation_steps;
  document["train_batch_size"] = config.train_batch_size;
  document["steps"] = step_count;
  document["seed"] = options.seed;
  document["gradient_clipping"] = config.gradient_clipping;
  document["numerics"] = numerics_mode_name(config.numerics);
  document["deepspeed_release"] =
      config.deepspeed_release ? nlohmann::json(deepspeed_release_text(*config.deepspeed_release)) : nlohmann::json();
  document["optimizer"] = {{"lr", config.optimizer.learning_rate},
                           {"betas", {config.optimizer.beta1, config.optimizer.beta2}},
                           {"eps", config.optimizer.epsilon},
                           {"weight_decay", config.optimizer.weight_decay},
                           {"adam_w_mode", config.optimizer.adam_w_mode},
                           {"bias_correction", config.optimizer.bias_correction}};
  // The resolved block holds every constructor argument of the schedule, defaults made explicit.
  document["scheduler"] = config.scheduler.type == SchedulerType::kNone || !config.resolved.contains("scheduler")
                              ? nlohmann::json()
                              : config.resolved.at("scheduler");
  const LossScalerConfig& scaler = config.loss_scaler;
  document["fp16"] = {{"enabled", config.precision == Precision::kFp16},
                      {"loss_scale", scaler.dynamic ? 0.0 : scaler.static_loss_scale},
                      {"initial_scale_power", scaler.initial_scale_power},
                      {"loss_scale_window", scaler.loss_scale_window},
                      {"hysteresis", scaler.hysteresis},
                      {"consecutive_hysteresis", scaler.consecutive_hysteresis},
                      {"min_loss_scale", scaler.min_loss_scale}};
  nlohmann::json names = nlohmann::json::array();
  for (const ParameterInfo& parameter : mlp_parameters(options.model)) names.push_back(parameter.name);
  document["parameters"] = names;
  document["records"] = records_json(run);
  return document;
}

Status write_text(Disk& disk, const std::string& path, const std::string& text) {
  FileOpenOptions open_options;
  open_options.mode = OpenMode::kCreateTruncate;
  open_options.permissions = 0644;
  ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, disk.open(path, open_options));
  ZEROSIM_RETURN_IF_ERROR(file->write_all(0, std::as_bytes(std::span<const char>(text.data(), text.size()))));
  ZEROSIM_RETURN_IF_ERROR(file->sync());
  return file->close();
}

}  // namespace

Status export_run(const TrainingOptions& options, int64_t step_count, const TrainingRun& run, Env env,
                  const std::string& directory) {
  ZEROSIM_CHECK(options.capture_state_at_step == step_count && run.captured.has_value(),
                "export_run needs the run's state captured at its last step");
  if (directory.empty()) return invalid_argument("--export-run: the directory name is empty");
  ZEROSIM_ASSIGN_OR_RETURN(const bool exists, env.disk->exists(directory));
  if (exists) {
    ZEROSIM_ASSIGN_OR_RETURN(std::vector<std::string> entries, env.disk->list_directory(directory));
    if (!entries.empty()) {
      return invalid_argument("--export-run " + directory + ": the directory is not empty (" + entries.front() +
                              " is there); give a new or empty one");
    }
  }
  ZEROSIM_RETURN_IF_ERROR(env.disk->create_directories(directory));

  // The state at step 0: the same options, no step taken.
  TrainingOptions initial_options = options;
  initial_options.capture_state_at_step = 0;
  initial_options.digest_every_step = false;
  ZEROSIM_ASSIGN_OR_RETURN(TrainingRun initial, run_training(initial_options, 0, env));
  ZEROSIM_CHECK(initial.captured.has_value(), "a run of 0 steps captures its initial state");
  const std::vector<ParameterInfo> parameters = mlp_parameters(options.model);

  const std::map<std::string, std::string> metadata = {{"format", "zerosim export-run 1"}};
  ZEROSIM_RETURN_IF_ERROR(write_safetensors(*env.disk, directory + "/initial.safetensors",
                                            captured_tensors(*initial.captured, parameters, {"master"}, false),
                                            metadata, true));
  ZEROSIM_RETURN_IF_ERROR(write_safetensors(
      *env.disk, directory + "/final.safetensors",
      captured_tensors(*run.captured, parameters, {"master", "exp_avg", "exp_avg_sq", "params"}, true), metadata, true));

  // Every sample the run consumed, by global position (skipped steps consume theirs too).
  const SyntheticDataset dataset(options.data);
  const ShuffledSampler sampler(options.data);
  const int64_t positions = step_count * options.config.train_batch_size;
  const int64_t features = options.data.feature_count;
  std::vector<float> feature_values(static_cast<size_t>(positions * features));
  std::vector<float> labels(static_cast<size_t>(positions));
  for (int64_t position = 0; position < positions; ++position) {
    const int64_t sample = sampler.sample_at(position);
    dataset.features(sample, feature_values.data() + position * features);
    labels[static_cast<size_t>(position)] = static_cast<float>(dataset.label(sample));
  }
  const std::vector<SafetensorsTensor> batches = {
      {"features", DType::kFp32, {positions, features}, std::as_bytes(std::span<const float>(feature_values))},
      {"labels", DType::kFp32, {positions}, std::as_bytes(std::span<const float>(labels))}};
  ZEROSIM_RETURN_IF_ERROR(write_safetensors(*env.disk, directory + "/batches.safetensors", batches, metadata, true));
  return write_text(*env.disk, directory + "/run.json", run_json(options, step_count, run).dump(2) + "\n");
}

}  // namespace zerosim
